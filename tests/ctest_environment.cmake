# Read by CTest after the tests gtest_discover_tests found (CMakeLists.txt): their environment, as one
# list-valued property.
set_tests_properties(${moe_tests_TESTS} PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=passive")

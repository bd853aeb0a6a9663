# Read by CTest after the tests gtest_discover_tests found (CMakeLists.txt): their environment, as one
# list-valued property.
set_tests_properties(${moe_tests_TESTS} PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=passive")
# Tests that fill every core with spinning threads run alone: beside them, a test that asserts a quiet
# process (Noise.AnIdleWaitIsNotSwitchedOut) is itself switched out.
set_tests_properties(Noise.ThreadsSwitchedOutMakeARunBusy WaitPolicy.TheProbeSeesCoresTakenByOthers
                     PROPERTIES RUN_SERIAL TRUE)

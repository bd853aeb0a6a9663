# Writes the build-info source with the git commit the binary is built from, "-dirty" when tracked
# files differ from it. Run at configure time and before every build (target moe_build_info), so a
# result row never names a stale commit; configure_file leaves the file untouched when nothing changed,
# so only a new commit (or a newly dirty tree) recompiles that one file.
# In: SOURCE_DIR, OUTPUT, PROJECT_VERSION.
execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY ${SOURCE_DIR}
                OUTPUT_VARIABLE MOE_GIT_COMMIT OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(rc OR NOT MOE_GIT_COMMIT)
  set(MOE_GIT_COMMIT "unknown")
else()
  execute_process(COMMAND git status --porcelain --untracked-files=no WORKING_DIRECTORY ${SOURCE_DIR}
                  OUTPUT_VARIABLE changes OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(changes)
    string(APPEND MOE_GIT_COMMIT "-dirty")
  endif()
endif()
configure_file(${SOURCE_DIR}/cmake/build_info.cpp.in ${OUTPUT} @ONLY)

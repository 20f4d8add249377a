# Runs one libFuzzer target for SECONDS: first every seed of CORPUS (so a
# committed crash reproducer fails at once), then mutations, writing new
# inputs to WORK and any crash to WORK/crashes. Fails when libFuzzer does.
# cmake -DFUZZER=... -DCORPUS=... -DWORK=... -DSECONDS=... -P run_fuzzer.cmake
file(MAKE_DIRECTORY ${WORK}/corpus ${WORK}/crashes)
execute_process(
  COMMAND ${FUZZER} -max_total_time=${SECONDS} -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
          -artifact_prefix=${WORK}/crashes/ ${WORK}/corpus ${CORPUS}
  RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "fuzzer ${FUZZER} failed (exit ${result}); reproducers in ${WORK}/crashes")
endif()

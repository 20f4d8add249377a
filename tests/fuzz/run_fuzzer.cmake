# Runs one libFuzzer target for SECONDS: first every seed of CORPUS (so a
# committed crash reproducer fails at once), then mutations, writing new
# inputs to WORK/corpus and any crash to WORK/crashes. libFuzzer's output and
# the target's (the store logs every connection it drops) go to WORK/fuzz.log;
# printed are its final stats, or on failure its tail, where the report is.
# Fails when libFuzzer does, a single allocation of more than 256 MB
# included: no input of a few kilobytes (gzip expands 4 KB to 4 MB at most)
# may make a reader allocate what a length field announces.
# A fixed seed: the same code meets the same mutations, so a failure in CI
# is a finding to fix, never a flake; scripts/fuzz.sh explores with fresh seeds.
# cmake -DFUZZER=... -DCORPUS=... -DWORK=... -DSECONDS=... [-DDICTIONARY=...] -P run_fuzzer.cmake
file(MAKE_DIRECTORY ${WORK}/corpus ${WORK}/crashes)
set(log ${WORK}/fuzz.log)
set(dictionary_flag "")
if(DICTIONARY)
  set(dictionary_flag -dict=${DICTIONARY})
endif()
execute_process(
  COMMAND ${FUZZER} -seed=1 -max_total_time=${SECONDS} -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=256 -print_final_stats=1
          ${dictionary_flag} -artifact_prefix=${WORK}/crashes/ ${WORK}/corpus ${CORPUS}
  OUTPUT_FILE ${log} ERROR_FILE ${log}
  RESULT_VARIABLE result)
file(READ ${log} output)
if(NOT result EQUAL 0)
  string(LENGTH "${output}" length)
  set(shown 30000)
  if(length GREATER shown)
    math(EXPR start "${length} - ${shown}")
    string(SUBSTRING "${output}" ${start} -1 output)
  endif()
  message("${output}")
  message(FATAL_ERROR "fuzzer ${FUZZER} failed (exit ${result}); reproducers in ${WORK}/crashes, the whole log in ${log}")
endif()
string(REGEX MATCHALL "(Done [0-9]+ runs[^\n]*|stat::[^\n]*)" summary "${output}")
string(REPLACE ";" "\n" summary "${summary}")
message("${summary}")

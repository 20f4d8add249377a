# Replays one libFuzzer target over its committed inputs: every seed and
# crash reproducer of CORPUS, then the coverage corpus COVERAGE (a .tar.gz of
# inputs earlier fuzzing kept for the coverage they add), each input once,
# with no mutation. Any crash, sanitizer report or failed check fails the
# test; libFuzzer's output and the target's (the store logs every connection
# it drops) go to WORK/fuzz.log, and printed are its final stats, or on
# failure its tail, where the report is. Fails too on a single allocation of
# more than 256 MB: no input of a few kilobytes (gzip expands 4 KB to 4 MB at
# most) may make a reader allocate what a length field announces.
#
# Replay only, not exploration: libFuzzer's mutations are not reproducible
# here even with a fixed seed and a fixed count (the targets' temporary paths,
# process ids and addresses steer them; two runs of one binary reached
# different inputs), so a CI run that explored met findings no local run had,
# and failed on bugs older than the change it tested. Exploration is
# scripts/fuzz.sh's job; what it finds is fixed, its reproducer goes into
# CORPUS, and EMBER_FUZZ_SAVE_COVERAGE=1 folds its inputs into COVERAGE.
# cmake -DFUZZER=... -DCORPUS=... -DCOVERAGE=... -DWORK=... -P run_fuzzer.cmake
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/corpus ${WORK}/coverage ${WORK}/crashes)
if(EXISTS ${COVERAGE})
  file(ARCHIVE_EXTRACT INPUT ${COVERAGE} DESTINATION ${WORK}/coverage)
endif()
set(log ${WORK}/fuzz.log)
execute_process(
  COMMAND ${FUZZER} -runs=0 -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=256 -print_final_stats=1
          -artifact_prefix=${WORK}/crashes/ ${WORK}/corpus ${CORPUS} ${WORK}/coverage
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

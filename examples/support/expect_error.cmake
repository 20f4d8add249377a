# ctest driver for "the example fails cleanly": runs PROGRAM with ARGS (a
# ;-list) and passes only when it exits with status 1 (an ember::Error caught in
# main, not a crash or an abort) and its output matches EXPECT (a regex).
# Used by examples/CMakeLists.txt:
#   cmake -DPROGRAM=... "-DARGS=--data-dir;/nonexistent" -DEXPECT=... -P expect_error.cmake
execute_process(COMMAND ${PROGRAM} ${ARGS} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(output "${out}${err}")
if(NOT status EQUAL 1)
  message(FATAL_ERROR "expected exit status 1 from ${PROGRAM}, got '${status}'; output:\n${output}")
endif()
if(NOT output MATCHES "${EXPECT}")
  message(FATAL_ERROR "output of ${PROGRAM} does not match '${EXPECT}':\n${output}")
endif()
message(STATUS "failed as expected: ${output}")

# Compiler flags for ember's own code. Warnings are errors here, never for
# third-party headers (those come in as SYSTEM include directories).
add_library(ember_warnings INTERFACE)
target_compile_options(ember_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Werror -Wno-error=deprecated-declarations>)

if(EMBER_SANITIZE)
  add_compile_options(-fsanitize=${EMBER_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  # The sanitizers' checks inside `#pragma omp simd` loops stop clang from
  # vectorising them, and clang reports each such loop (-Wpass-failed). That
  # is about the instrumented code's speed, not ours: the plain builds keep it an error.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    add_compile_options(-Wno-pass-failed)
  endif()
  add_link_options(-fsanitize=${EMBER_SANITIZE})
endif()

# Fuzzing (tests/fuzz): with EMBER_FUZZ_COVERAGE, every object carries
# libFuzzer's coverage instrumentation, which steers exploration
# (scripts/fuzz.sh); only the fuzz targets link its driver (-fsanitize=fuzzer).
# The other programs (test suites, tools) resolve the coverage callbacks to
# the sanitizer runtime's empty defaults, so a sanitizer is required: without
# one they would not link, and linking libFuzzer's runtime into them instead
# would make every comparison in the tests record itself. Replaying the
# committed inputs (the fuzz ctests) needs no coverage, and scripts/test.sh
# turns it off: a test file compiled an eighth faster without it, and the
# sanitizer suite ran in 290 s instead of 415 s (its callbacks on every
# comparison of every kernel).
if(EMBER_BUILD_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "EMBER_BUILD_FUZZ needs clang (libFuzzer), got ${CMAKE_CXX_COMPILER_ID}")
  endif()
  if(NOT EMBER_SANITIZE)
    message(FATAL_ERROR "EMBER_BUILD_FUZZ needs EMBER_SANITIZE (e.g. address,undefined)")
  endif()
  if(EMBER_FUZZ_COVERAGE)
    add_compile_options(-fsanitize=fuzzer-no-link)
  endif()
endif()

#!/usr/bin/env bash
# Quick start, step 2: the same set-up, then the whole test suite through ctest,
# twice: (1) the Release build (CUDA included when nvcc is found), (2) clang-14
# with AddressSanitizer and UndefinedBehaviorSanitizer (CUDA and examples off),
# which also builds the libFuzzer targets and replays their committed inputs
# (without coverage instrumentation, which only exploring needs: scripts/fuzz.sh).
# Tests labelled `slow` (long accuracy and soak runs) are left to scripts.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

ember_install_packages
start=$SECONDS

echo "== Release build and tests"
ember_build "$EMBER_ROOT/build" -DCMAKE_BUILD_TYPE=Release -DEMBER_BUILD_BENCH=ON
(cd "$EMBER_ROOT/build" && ctest --output-on-failure -j "$EMBER_JOBS" -LE slow)
echo "== Release done after $((SECONDS - start)) s"

echo "== ASan+UBSan build (clang-14) and tests"
# -O1, as the sanitizers' documentation suggests: it compiled the library a fifth faster
# than RelWithDebInfo's -O2, and the core suite ran in the same time (44 s against 43 s).
# Line tables are all the reports' stack traces need; full debug info took a sixth longer
# to compile (kernels/cpu/reduction.cpp: 44 s against 37 s).
CC=clang-14 CXX=clang++-14 ember_build "$EMBER_ROOT/build-sanitize" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG" \
  -DEMBER_SANITIZE=address,undefined -DEMBER_CUDA=OFF -DEMBER_BUILD_EXAMPLES=OFF -DEMBER_BUILD_BENCH=OFF \
  -DEMBER_BUILD_FUZZ=ON -DEMBER_FUZZ_COVERAGE=OFF
# The system allocator lets ASan see every block; leak checking stays on.
# A request no memory can hold returns null under ASan too, so it reaches
# ember's "out of memory" error as in a normal build instead of aborting
# (the op fuzzer asks for one_hot with billions of classes).
(cd "$EMBER_ROOT/build-sanitize" && EMBER_ALLOCATOR=system ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
  UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j "$EMBER_JOBS" -LE slow)
echo "== all done after $((SECONDS - start)) s"

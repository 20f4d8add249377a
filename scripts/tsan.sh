#!/usr/bin/env bash
# ThreadSanitizer run of issue 8 (not CI): a clang-14 TSan build in
# build-tsan/, then the tests of ember's threaded parts: the data loader and
# its prefetcher, the caching allocator (tests/core, tests/data), the store,
# process groups, DDP, the Accelerator and the launcher (the distributed and
# tools suites, whose worker processes are TSan builds too). The caching
# allocator stays on (not EMBER_ALLOCATOR=system as under ASan): it is shared
# by every thread. tests/tsan.supp lists what TSan cannot see through (the
# OpenMP runtimes, oneDNN), each entry with its reason. Prints the ctest
# summary; a TSan report fails its test.
#   scripts/tsan.sh [extra ctest arguments]
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

ember_install_packages
CC=clang-14 CXX=clang++-14 cmake -S "$EMBER_ROOT" -B "$EMBER_ROOT/build-tsan" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DEMBER_SANITIZE=thread -DEMBER_CUDA=OFF -DEMBER_BUILD_EXAMPLES=OFF -DEMBER_BUILD_BENCH=OFF
# Only the suites run below (test_distributed and test_tools bring the worker and the CLI).
cmake --build "$EMBER_ROOT/build-tsan" -j "$EMBER_JOBS" --target test_core test_data test_distributed test_tools

# One OpenMP thread: libgomp and libomp are not built with TSan, so their
# barriers are invisible to it and every parallel region would look racy
# (parallel_for is OpenMP: TSan cannot check it; the ASan build does). The threads
# ember itself starts (loader workers, the store's server, each process
# group's communication thread, shm progress threads) are what is checked.
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=1
export TSAN_OPTIONS="suppressions=$EMBER_ROOT/tests/tsan.supp halt_on_error=1 second_deadlock_stack=1 history_size=4"
cd "$EMBER_ROOT/build-tsan"
# TSan (clang 14) cannot map its shadow memory under the kernel's full
# address-space randomisation; setarch -R runs the tests without it.
setarch "$(uname -m)" -R ctest --output-on-failure -j "$EMBER_JOBS" -L 'distributed|tools|data' "$@"
setarch "$(uname -m)" -R ctest --output-on-failure -j "$EMBER_JOBS" -R '^Allocator|^CachingAllocator|Prefetch' "$@"

#!/usr/bin/env bash
# Fuzzing, the exploration CI leaves out (its ctests replay the committed
# inputs; tests/fuzz/README.md): builds the libFuzzer targets with clang-14,
# ASan, UBSan and coverage instrumentation in a tree of its own (build-fuzz/,
# or $EMBER_FUZZ_BUILD; scripts/test.sh's sanitizer tree has no coverage),
# runs each for SECONDS from its committed seeds (tests/fuzz/corpus/<target>/)
# and coverage corpus (tests/fuzz/coverage/<target>.tar.gz), neither written to, growing a
# working corpus in <build>/fuzz/<target>/, and prints a table: target,
# executions, executions per second, corpus size, crashes.
# With EMBER_FUZZ_SAVE_COVERAGE=1, a target's run that found nothing folds
# the inputs that add coverage (libFuzzer -merge=1) into its coverage corpus,
# which CI then replays: commit the archive after the finds are fixed.
# A crash's reproducer and log stay in that folder; the script then exits
# non-zero. A target of the default list whose executable this tree does not
# build (its source is on another branch) is skipped, and the table says so;
# one named on the command line must exist.
# Usage: scripts/fuzz.sh [SECONDS per target, default 60] [TARGET ...] (default: all)
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

seconds="${1:-60}"
shift $(($# > 0 ? 1 : 0))
targets=("$@")
named=$((${#targets[@]} > 0))
if ((!named)); then
  targets=(safetensors sharded_index manifest config_yaml store_wire idx csv ops)
fi
build="${EMBER_FUZZ_BUILD:-$EMBER_ROOT/build-fuzz}"

ember_install_packages
CC=clang-14 CXX=clang++-14 cmake -S "$EMBER_ROOT" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DEMBER_SANITIZE=address,undefined -DEMBER_BUILD_FUZZ=ON -DEMBER_FUZZ_COVERAGE=ON -DEMBER_CUDA=OFF -DEMBER_BUILD_EXAMPLES=OFF \
  -DEMBER_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j "$EMBER_JOBS" --target fuzz_targets

# The same environment and limits as the fuzz label's ctests (tests/fuzz/CMakeLists.txt, run_fuzzer.cmake).
export EMBER_ALLOCATOR=system OMP_NUM_THREADS=1 ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"

# last_figure LOG LABEL: the number after the last LABEL in libFuzzer's log
# ("corp: N/..." counts the corpus in memory, the seeds that added coverage included).
last_figure() { { grep -oE "$2 +[0-9]+" "$1" || true; } | awk '{print $NF}' | tail -1; }

row() { printf '%-14s %12s %10s %8s %s\n' "$@"; }

rows=()
failed=0
for target in "${targets[@]}"; do
  fuzzer="$build/tests/fuzz/fuzz_$target"
  if [[ ! -x "$fuzzer" ]]; then
    if ((named)); then
      echo "fuzz.sh: no target '$target' in $build/tests/fuzz (tests/fuzz/CMakeLists.txt lists them)" >&2
      exit 2
    fi
    echo "== fuzz_$target: not built in this tree (no tests/fuzz/$target.cpp on this branch), skipped"
    rows+=("$(row "$target" - - - "skipped: not built")")
    continue
  fi
  work="$build/fuzz/$target"
  coverage="$EMBER_ROOT/tests/fuzz/coverage/$target.tar.gz"
  rm -rf "$work/coverage"
  mkdir -p "$work/corpus" "$work/crashes" "$work/coverage"
  [[ -f "$coverage" ]] && tar -xzf "$coverage" -C "$work/coverage"
  dictionary=()
  [[ -f "$EMBER_ROOT/tests/fuzz/$target.dict" ]] && dictionary=(-dict="$EMBER_ROOT/tests/fuzz/$target.dict")
  crashes_before=$(find "$work/crashes" -type f | wc -l)
  echo "== fuzz_$target for $seconds s (log: $work/fuzz.log)"
  status=0
  "$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=256 -print_final_stats=1 \
    "${dictionary[@]}" -artifact_prefix="$work/crashes/" "$work/corpus" "$EMBER_ROOT/tests/fuzz/corpus/$target" \
    "$work/coverage" >"$work/fuzz.log" 2>&1 || status=$?
  executions=$(last_figure "$work/fuzz.log" 'stat::number_of_executed_units:')
  per_second=$(last_figure "$work/fuzz.log" 'stat::average_exec_per_sec:')
  corpus=$(last_figure "$work/fuzz.log" 'corp:')
  crashes=$(($(find "$work/crashes" -type f | wc -l) - crashes_before))
  if ((status != 0)); then
    failed=1
    ((crashes > 0)) || crashes="exit $status"
    grep -E 'ERROR|SUMMARY|fuzz target:|Test unit written' "$work/fuzz.log" | head -5 || true
  fi
  if ((status == 0)) && [[ "${EMBER_FUZZ_SAVE_COVERAGE:-0}" == 1 ]]; then
    rm -rf "$work/merged" && cp -r "$work/coverage" "$work/merged"
    "$fuzzer" -merge=1 -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=256 "$work/merged" "$work/corpus" \
      >>"$work/fuzz.log" 2>&1
    # Sorted names, no owners or times: the same inputs give the same bytes.
    tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - -C "$work/merged" . | gzip -n -9 >"$coverage"
    echo "== $coverage: $(find "$work/merged" -type f | wc -l) inputs"
  fi
  rows+=("$(row "$target" "${executions:-?}" "${per_second:-?}" "${corpus:-?}" "$crashes")")
done

echo
row target executions "exec/s" corpus crashes
printf '%s\n' "${rows[@]}"
exit "$failed"

#!/usr/bin/env bash
# The load test of issue 8 (not CI): 4 processes training through the
# Accelerator for 30 minutes (or $1 seconds) with a checkpoint every 500 steps,
# while this script counts /dev/shm segments; then every checkpoint left is
# verified, the latest loaded, and scripts/plot_soak.py draws resident memory
# per process over time (soak.png) and checks that memory and descriptors
# stayed flat after warm-up. With --repeat N it instead runs the same job N
# times, each for a few seconds with a checkpoint every 40 steps, to find
# flakes: every run must end cleanly and leave no segment behind. With
# --chaos it runs a 4-process job under `ember launch --max-restarts` while
# this script kills a random worker (SIGKILL, or SIGSTOP left past the
# collective timeout) every few minutes, then compares the final parameters
# byte for byte with the same job run without faults (figures in
# tests/RELIABILITY.md).
#   scripts/soak.sh [seconds]                 default 1800
#   scripts/soak.sh --repeat 50 [seconds]     default 10 s a run
#   scripts/soak.sh --chaos [seconds]         default 1800
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

ember_install_packages
ember_build "$EMBER_ROOT/build" -DCMAKE_BUILD_TYPE=Release
export OMP_WAIT_POLICY=passive

segments() { find /dev/shm -maxdepth 1 -name 'ember-*' | wc -l; }

if [[ "${1:-}" == "--repeat" ]]; then
  runs="${2:-50}" seconds="${3:-10}" failed=0
  for ((run = 1; run <= runs; ++run)); do
    out="$EMBER_ROOT/build/soak-repeat"
    rm -rf "$out" && mkdir -p "$out"
    if ! timeout 300 "$EMBER_ROOT/build/bin/ember" launch --nproc-per-node 4 -- \
        "$EMBER_ROOT/build/tests/distributed_worker" accelerator_soak "$out" "$seconds" 40 > "$out/soak.log" 2>&1; then
      echo "run $run failed:" && tail -20 "$out/soak.log" && failed=$((failed + 1))
      cp -r "$out" "$EMBER_ROOT/build/soak-failed-$run"
    fi
    left=$(segments)
    ((left == 0)) || { echo "run $run left $left segments"; failed=$((failed + 1)); }
    echo "run $run/$runs: $(grep -c 'the latest loaded' "$out/soak.log") of 4 processes verified their checkpoints"
  done
  echo "$runs runs, $failed failed"
  exit $((failed > 0))
fi

if [[ "${1:-}" == "--chaos" ]]; then
  exec "$EMBER_ROOT/scripts/chaos_soak.sh" "$EMBER_ROOT/build" "${2:-1800}"
fi

seconds="${1:-1800}"
out="$EMBER_ROOT/build/soak"
rm -rf "$out"
mkdir -p "$out"
# /dev/shm segments of ember jobs, every 10 s while the job runs.
(while true; do
   echo "$SECONDS,$(segments)" >> "$out/segments.csv"
   sleep 10
 done) &
watcher=$!
trap 'kill $watcher 2>/dev/null || true' EXIT
"$EMBER_ROOT/build/bin/ember" launch --nproc-per-node 4 -- \
  "$EMBER_ROOT/build/tests/distributed_worker" accelerator_soak "$out" "$seconds" | tee "$out/soak.log"
echo "segments left after the job: $(segments)"
/usr/bin/python3 "$EMBER_ROOT/scripts/plot_soak.py" "$out" "$out/soak.png"

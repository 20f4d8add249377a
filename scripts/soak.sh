#!/usr/bin/env bash
# The load test of issue 8 (not CI): 4 processes training through the
# Accelerator for 30 minutes (or $1 seconds) with a checkpoint every 500 steps,
# while this script counts /dev/shm segments; then every checkpoint left is
# verified, the latest loaded, and scripts/plot_soak.py draws resident memory
# per process over time (soak.png) and checks that memory and descriptors
# stayed flat after warm-up. With --flake N it instead runs the distributed
# and fault tests N times over (`ctest --repeat until-fail:N`), to find flakes.
#   scripts/soak.sh [seconds]        default 1800
#   scripts/soak.sh --flake 50
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

ember_install_packages
ember_build "$EMBER_ROOT/build" -DCMAKE_BUILD_TYPE=Release
export OMP_WAIT_POLICY=passive

if [[ "${1:-}" == "--flake" ]]; then
  (cd "$EMBER_ROOT/build" && ctest -L distributed --repeat until-fail:"${2:-50}" --output-on-failure)
  exit
fi

seconds="${1:-1800}"
out="$EMBER_ROOT/build/soak"
rm -rf "$out"
mkdir -p "$out"
# /dev/shm segments of ember jobs, every 10 s while the job runs.
(while true; do
   echo "$SECONDS,$(find /dev/shm -maxdepth 1 -name 'ember-*' | wc -l)" >> "$out/segments.csv"
   sleep 10
 done) &
watcher=$!
trap 'kill $watcher 2>/dev/null' EXIT
"$EMBER_ROOT/build/bin/ember" launch --nproc-per-node 4 -- \
  "$EMBER_ROOT/build/tests/distributed_worker" accelerator_soak "$out" "$seconds" | tee "$out/soak.log"
kill $watcher
echo "segments left after the job: $(find /dev/shm -maxdepth 1 -name 'ember-*' | wc -l)"
/usr/bin/python3 "$EMBER_ROOT/scripts/plot_soak.py" "$out" "$out/soak.png"

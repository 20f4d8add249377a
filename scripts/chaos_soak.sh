#!/usr/bin/env bash
# The chaos soak of issue 20, run by `scripts/soak.sh --chaos [seconds]` once
# it has built ember (not CI: it runs for about `seconds`, 30 minutes by
# default, plus a few minutes for the run without faults):
#   scripts/chaos_soak.sh <build dir> <seconds>
# (CHAOS_FAULT_MIN and CHAOS_FAULT_MAX, in seconds, change the 90-210.)
# A 4-process Accelerator job (the chaos_soak scenario of
# tests/distributed/workers/soak_scenario.cpp: AdamW, accumulation 2,
# dropout, shuffling, two loader workers, a checkpoint every 200 batches)
# runs under `ember launch --max-restarts`, paced so that it lasts about
# `seconds`, while this script sends a random worker SIGKILL, or SIGSTOP left
# past the collective timeout, every 90 to 210 seconds. The same job then
# runs without faults or pauses, and the final parameters of every process
# must be the same bytes. Figures (faults, restarts, batches redone,
# checkpoints lost) go to <build dir>/chaos/summary.txt; the exit status is
# 0 only if no checkpoint was lost and the parameters are equal.
set -euo pipefail

build="$1" seconds="$2"
ember="$build/bin/ember" worker="$build/tests/distributed_worker"
out="$build/chaos"
processes=4 timeout=20 checkpoint_every=200
fault_min="${CHAOS_FAULT_MIN:-90}" fault_max="${CHAOS_FAULT_MAX:-210}"
batches=$((seconds * 6))                        # about 20 ms of work a batch on 2 shared cores
pause_ms=$((seconds * 1000 * 6 / 10 / batches))  # the rest of the time: pauses, faults, restarts
rm -rf "$out" && mkdir -p "$out/faulty" "$out/reference"
export OMP_WAIT_POLICY=passive

# (job <project dir> <pause ms> [launcher flags...]): in a subshell, which
# the launcher replaces, so that its workers are the subshell's children.
job() {
  local project="$1" pause="$2"
  shift 2
  exec "$ember" launch --nproc-per-node "$processes" --timeout "$timeout" --grace-period 5 "$@" -- \
    "$worker" chaos_soak "$project" "$batches" "$checkpoint_every" "$pause"
}

echo "chaos soak: $batches batches on $processes processes, ${pause_ms} ms pause, a fault every $fault_min-$fault_max s"
start=$SECONDS
(job "$out/faulty" "$pause_ms" --max-restarts 1000 > "$out/faulty.log" 2>&1) &
launcher=$!
faults=0 kills=0 stops=0
while kill -0 "$launcher" 2>/dev/null; do
  sleep $((fault_min + RANDOM % (fault_max - fault_min + 1)))
  mapfile -t workers < <(pgrep -P "$launcher" || true)
  ((${#workers[@]})) || continue  # between two attempts
  victim=${workers[RANDOM % ${#workers[@]}]}
  rank=$(tr '\0' '\n' < "/proc/$victim/environ" 2>/dev/null | sed -n 's/^RANK=//p' || true)
  if ((RANDOM % 3 == 0)); then
    signal=STOP stops=$((stops + 1))
  else
    signal=KILL kills=$((kills + 1))
  fi
  kill -s "$signal" "$victim" 2>/dev/null || continue
  faults=$((faults + 1))
  echo "$((SECONDS - start)) s: SIG$signal to rank ${rank:-?} (pid $victim)" | tee -a "$out/faults.log"
done
status=0
wait "$launcher" || status=$?
faulty_seconds=$((SECONDS - start))
echo "chaos soak: the faulty job ended with status $status after $faulty_seconds s; now the run without faults"

start=$SECONDS
(job "$out/reference" 0 > "$out/reference.log" 2>&1)
reference_seconds=$((SECONDS - start))

# From the main process's event log (see the scenario): batches trained in
# all, and any restart that began before the last save that had returned.
read -r attempts executed saves lost < <(awk '
  $1 == "batch" { ++executed }
  $1 == "saved" { ++saves; last_saved = $3 }
  $1 == "start" { ++attempts; if ($3 < last_saved) ++lost }
  END { print attempts + 0, executed + 0, saves + 0, lost + 0 }' "$out/faulty/chaos_events.log")
restarts=$(grep -c "restarting (" "$out/faulty.log" || true)
equal=0
for ((rank = 0; rank < processes; ++rank)); do
  if cmp -s "$out/faulty/final_$rank.safetensors" "$out/reference/final_$rank.safetensors"; then
    equal=$((equal + 1))
  fi
done

{
  echo "chaos soak, $(date -u +%F): $processes processes, $batches batches, a checkpoint every $checkpoint_every"
  echo "faulty job: $faulty_seconds s, exit status $status"
  echo "faults injected: $faults ($kills SIGKILL, $stops SIGSTOP past the ${timeout} s timeout)"
  echo "restarts: $restarts (attempts started: $attempts)"
  echo "checkpoints saved: $saves; lost: $lost"
  echo "batches redone: $((executed - batches)) of $executed trained"
  echo "run without faults: $reference_seconds s"
  echo "final parameters byte-equal to the run without faults: $equal of $processes processes"
} | tee "$out/summary.txt"
((status == 0 && lost == 0 && equal == processes))

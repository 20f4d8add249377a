#!/usr/bin/env bash
# The benchmark run behind bench/RESULTS.md: a Release build with the libtorch
# comparison in build-bench/, then bench_gemm, bench_elementwise,
# bench_reduction, bench_copy, compare_libtorch and bench_mixed_precision at 1 and 2
# threads. compare_libtorch's peers are libtorch 1.13 (Debian) and PyTorch 2
# from PyPI, in a venv this script creates (build-bench/venv-torch2;
# EMBER_TORCH2_PYTHON names an existing interpreter with torch 2 instead).
# Outputs (console text and JSON) go to bench/results/ (gitignored).
# Run it on a quiet machine:
# anything else on the cores skews every ratio.
#   scripts/bench.sh                 the measured run
#   scripts/bench.sh --quick         a smoke run: short timings, one comparison round
#   scripts/bench.sh --distributed   only the distributed part: all-reduce bandwidth
#                                    (shm, gloo, bare Gloo; 2 and 4 ranks), DDP scaling
#                                    and the Accelerator's overhead over DDP by hand
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

benchmark_args=()
compare_args=(--rounds 5 --min-time 0.5)
kernels=1
if [[ "${1:-}" == "--quick" ]]; then
  benchmark_args=(--benchmark_min_time=0.05)
  # One PyTorch 2 worker of each kind (eager with the tuned malloc, compiled
  # with glibc's): a Python process per row is the slow part of the smoke.
  compare_args=(--rounds 1 --min-time 0.05 --frameworks libtorch,torch2,torch2_compile_glibc)
fi
[[ "${1:-}" == "--distributed" ]] && kernels=0

EMBER_PACKAGES+=(libtorch-dev libopenblas0-openmp libjemalloc2 python3-venv)
ember_install_packages
ember_build "$EMBER_ROOT/build-bench" -DCMAKE_BUILD_TYPE=Release -DEMBER_BUILD_BENCH=ON \
  -DEMBER_BENCH_LIBTORCH=ON -DEMBER_BUILD_TESTS=OFF -DEMBER_BUILD_EXAMPLES=OFF

# PyTorch 2, the Python peer of the training rows: the CPU wheel where
# PyTorch's own index is reachable, PyPI's otherwise.
torch2_python="${EMBER_TORCH2_PYTHON:-}"
if [[ -z "$torch2_python" ]]; then
  venv="$EMBER_ROOT/build-bench/venv-torch2"
  if ! "$venv/bin/python" -c "import torch" 2>/dev/null; then
    echo "ember: installing PyTorch 2 into $venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --retries 1 --timeout 20 --index-url https://download.pytorch.org/whl/cpu torch ||
      "$venv/bin/pip" install --quiet torch
  fi
  torch2_python="$venv/bin/python"
fi
compare_args+=(--torch2-python "$torch2_python")

results="$EMBER_ROOT/bench/results"
programs="$EMBER_ROOT/build-bench/bench"
mkdir -p "$results"
{
  echo "commit: $(git -C "$EMBER_ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "PyTorch 2: $("$torch2_python" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
  lscpu | grep -E '^(Model name|CPU\(s\)|Thread|L2|L3)'
} > "$results/machine.txt"

# Spinning OpenMP waits would steal the other core (DESIGN.md, machine notes).
export OMP_WAIT_POLICY=passive
for threads in 1 2; do
  ((kernels)) || break
  for bench in bench_gemm bench_elementwise bench_reduction bench_copy; do
    echo "== $bench, $threads thread(s)"
    OMP_NUM_THREADS=$threads "$programs/$bench" "${benchmark_args[@]}" \
      --benchmark_out="$results/$bench.threads$threads.json" --benchmark_out_format=json \
      | tee "$results/$bench.threads$threads.txt"
  done
  echo "== compare_libtorch, $threads thread(s)"
  "$programs/compare_libtorch/compare_libtorch" --threads "$threads" "${compare_args[@]}" \
    --json-out "$results/compare_libtorch.threads$threads.json" | tee "$results/compare_libtorch.threads$threads.txt"
done

# Mixed precision: bf16 autocast against f32 on whole training steps, both
# thread counts in one process (OMP_WAIT_POLICY is already passive).
if ((kernels)); then
  echo "== bench_mixed_precision"
  if [[ "${1:-}" == "--quick" ]]; then mixed_args=(--rounds 1 --min-time 0.1); else mixed_args=(--rounds 9 --min-time 1); fi
  "$programs/bench_mixed_precision" --threads 1,2 "${mixed_args[@]}" | tee "$results/bench_mixed_precision.txt"
  # Gradient accumulation inside one autocast guard: what the cast cache serves.
  "$programs/bench_mixed_precision" --threads 1,2 --micro-batches 4 "${mixed_args[@]}" |
    tee "$results/bench_mixed_precision.micro4.txt"
fi

# Distributed: every rank is a process started by the launcher, one OpenMP
# thread each (two ranks fill the two cores).
launch="$EMBER_ROOT/build-bench/bin/ember launch"
for ranks in 2 4; do
  for backend in shm gloo; do
    echo "== all-reduce, ember $backend, $ranks ranks"
    OMP_NUM_THREADS=1 $launch --nproc-per-node $ranks -- "$programs/distributed/bench_allreduce" --backend $backend \
      | tee "$results/allreduce.$backend.ranks$ranks.txt"
  done
  echo "== all-reduce, bare Gloo, $ranks ranks"
  OMP_NUM_THREADS=1 $launch --nproc-per-node $ranks -- "$programs/distributed/bench_gloo_allreduce" \
    | tee "$results/allreduce.bare_gloo.ranks$ranks.txt"
done
echo "== all-reduce, ember shm, 2 ranks, ember launch --bind-cores"
OMP_NUM_THREADS=1 $launch --bind-cores --nproc-per-node 2 -- "$programs/distributed/bench_allreduce" --backend shm \
  | tee "$results/allreduce.shm.ranks2.bind_cores.txt"
# The all-reduce's ceiling: one core copying what the other just wrote.
echo "== cross-core copy"
"$programs/distributed/bench_cross_core_copy" | tee "$results/cross_core_copy.txt"
# DDP scaling: the same global batch on one rank and on two (one thread each).
echo "== DDP scaling, MLP 784-1024-1024-10, global batch 256"
OMP_NUM_THREADS=1 "$programs/distributed/bench_ddp_scaling" | tee "$results/ddp_scaling.txt"
OMP_NUM_THREADS=1 $launch --nproc-per-node 2 -- "$programs/distributed/bench_ddp_scaling" | tee -a "$results/ddp_scaling.txt"
awk '/steps_per_s=/ { for (i = 1; i <= NF; ++i) if ($i ~ /^steps_per_s=/) { split($i, kv, "="); s[n++] = kv[2] } }
     END { if (n == 2) printf "DDP scaling, 2 ranks vs 1: %.2fx\n", s[1] / s[0] }' "$results/ddp_scaling.txt" \
  | tee -a "$results/ddp_scaling.txt"
# The Accelerator against the same loop written by hand with DDP (issue 6: <= 3%).
echo "== Accelerator overhead, MLP 784-1024-1024-10, AdamW"
OMP_NUM_THREADS=1 "$programs/distributed/bench_accelerator_overhead" | tee "$results/accelerator_overhead.txt"
OMP_NUM_THREADS=1 $launch --nproc-per-node 2 -- "$programs/distributed/bench_accelerator_overhead" \
  | tee -a "$results/accelerator_overhead.txt"
echo "== results in $results"

#!/usr/bin/env bash
# Fused attention against the composite (bench_attention) and PyTorch's CPU
# SDPA (bench_attention_torch.py), each in a fresh process, interleaved over
# ROUNDS rounds; prints the medians and the ratios (calls/s, > 1: the first
# named is faster) and the allocator peaks. Figures go to bench/RESULTS.md.
# Usage: bench/bench_attention.sh BUILD_DIR [PYTHON] (PYTHON: one with torch 2;
# default /work/venv-torch/bin/python). ROUNDS (3) and THREADS (1) from the environment.
set -euo pipefail
build=${1:?usage: bench/bench_attention.sh BUILD_DIR [PYTHON]}
python=${2:-/work/venv-torch/bin/python}
rounds=${ROUNDS:-3}
threads=${THREADS:-1}
here=$(cd "$(dirname "$0")" && pwd)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=$threads
for round in $(seq "$rounds"); do
  echo "round $round" >&2
  "$build/bench/bench_attention" --threads="$threads" 2>/dev/null |
    awk '/^attention\// { name = $1; sub(/\/min_time.*/, "", name); print name, $7, $8 }' >> "$log"
  "$python" "$here/bench_attention_torch.py" --threads="$threads" 2>/dev/null >> "$log"
done
python3 - "$log" <<'PY'
import collections, statistics, sys
rates, peaks = collections.defaultdict(list), collections.defaultdict(list)
for line in open(sys.argv[1]):
    fields = line.split()
    rates[fields[0]].append(float(fields[1].rstrip("/s")))
    if len(fields) > 2:
        peaks[fields[0]].append(float(fields[2]))
median = {name: statistics.median(values) for name, values in rates.items()}
print(f"{'case':<22}{'fused/s':>9}{'comp/s':>9}{'torch/s':>9}{'fused/comp':>12}{'fused/torch':>13}"
      f"{'comp/torch':>12}{'fused MiB':>11}{'comp MiB':>10}")
for dtype in ("float32", "bfloat16"):
    for length in (128, 512, 2048):
        for step in ("fwd", "fwd+bwd"):
            case = f"{dtype}/T={length}/{step}"
            fused, comp, torch = (median.get(f"attention/{p}/{case}", float("nan")) for p in ("fused", "composite", "torch"))
            fused_peak = statistics.median(peaks.get(f"attention/fused/{case}", [float("nan")]))
            comp_peak = statistics.median(peaks.get(f"attention/composite/{case}", [float("nan")]))
            print(f"{case:<22}{fused:>9.2f}{comp:>9.2f}{torch:>9.2f}{fused / comp:>12.2f}{fused / torch:>13.2f}"
                  f"{comp / torch:>12.2f}{fused_peak:>11.1f}{comp_peak:>10.1f}")
PY

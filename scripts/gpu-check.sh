#!/usr/bin/env bash
# The GPU check of the CUDA backend, on a machine with a GPU, the CUDA toolkit
# and PyTorch but none of ember's Debian libraries and no network. Needs the
# tree that scripts/gpu-bundle.sh made on a development machine (build-gpu/).
# In under 8 minutes it: unpacks the runtime packages, prints which NCCL and
# cuDNN libraries the binaries load, runs the CUDA tests, a compute-sanitizer
# memcheck pass over them, the GPU benchmarks and PyTorch's GPT step, and
# writes a summary to ${OUT:-build-gpu}/gpu-summary.txt.
# Usage: scripts/gpu-check.sh
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build-gpu"
RESULTS="${OUT:-$BUILD}"
SUMMARY="$RESULTS/gpu-summary.txt"
mkdir -p "$RESULTS"
: >"$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }

[[ -x "$BUILD/tests/test_cuda" ]] || { echo "gpu-check: $BUILD/tests/test_cuda is missing: run scripts/gpu-bundle.sh first" >&2; exit 2; }

# The runtime libraries, unpacked next to the build.
RUNTIME="$BUILD/runtime"
rm -rf "$RUNTIME"
mkdir -p "$RUNTIME"
for deb in "$BUILD"/packages/*.deb; do
  if command -v dpkg-deb >/dev/null; then
    dpkg-deb -x "$deb" "$RUNTIME"
  else  # a machine without dpkg: a .deb is an ar archive holding data.tar.*
    (cd "$RUNTIME" && ar p "$deb" "$(ar t "$deb" | grep '^data.tar')" | tar -x --auto-compress -f - 2>/dev/null ||
      ar p "$deb" "$(ar t "$deb" | grep '^data.tar')" | tar -xJ)
  fi
done
CUDA_LIB="$(dirname "$(readlink -f "$(command -v nvcc)")")/../lib64"
export LD_LIBRARY_PATH="$RUNTIME/usr/lib/x86_64-linux-gnu:$RUNTIME/lib/x86_64-linux-gnu:$RUNTIME/usr/lib:$CUDA_LIB:${LD_LIBRARY_PATH:-}"

say "== gpu-check $(date -u +%Y-%m-%dT%H:%MZ)"
say "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)"
say "libraries:"
ldd "$BUILD/libember.so" | grep -E "nccl|cudnn|cublas|cudart|dnnl" | awk '{print "  " $1 " => " $3}' | tee -a "$SUMMARY"
if ldd "$BUILD/tests/test_cuda" | grep -q "not found"; then
  say "missing libraries:"; ldd "$BUILD/tests/test_cuda" | grep "not found" | tee -a "$SUMMARY"
fi

say "== CUDA tests"
timeout 180 "$BUILD/tests/test_cuda" --gtest_brief=1 >"$RESULTS/test_cuda.log" 2>&1
status=$?
grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$RESULTS/test_cuda.log" | tee -a "$SUMMARY"
grep -E "Failure|FAILED  \]" "$RESULTS/test_cuda.log" | head -40 | tee -a "$SUMMARY"
say "test_cuda exit status: $status"

say "== compute-sanitizer memcheck"
SANITIZER="$(command -v compute-sanitizer || echo "$CUDA_LIB/../bin/compute-sanitizer")"
if [[ -x "$SANITIZER" ]]; then
  # The tests whose kernels do the indexing (the GEMM tests are cuBLAS's own).
  timeout 150 "$SANITIZER" --tool memcheck --error-exitcode 3 --print-limit 20 "$BUILD/tests/test_cuda" --gtest_brief=1 \
    --gtest_filter='-*Large*:CudaMatmul*' >"$RESULTS/memcheck.log" 2>&1
  say "memcheck exit status: $? ($(grep -c 'Invalid\|out of bounds\|misaligned' "$RESULTS/memcheck.log") error lines)"
  grep -E "ERROR SUMMARY|Invalid|out of bounds" "$RESULTS/memcheck.log" | head -20 | tee -a "$SUMMARY"
else
  say "compute-sanitizer not found: memcheck skipped"
fi

say "== benchmarks"
timeout 150 "$BUILD/bench/bench_cuda" 2>&1 | tee -a "$SUMMARY"
if python3 -c "import torch, numpy" 2>/dev/null; then
  timeout 120 python3 "$ROOT/bench/gpu/gpt_pytorch.py" 2>&1 | tee -a "$SUMMARY"
  ember_tps="$(grep -oP 'gpt_step_ember: \K[0-9]+' "$SUMMARY")"
  torch_tps="$(grep -oP 'gpt_step_pytorch: \K[0-9]+' "$SUMMARY")"
  [[ -n "$ember_tps" && -n "$torch_tps" ]] && say "gpt_step ratio ember / PyTorch: $(python3 -c "print(f'{$ember_tps / $torch_tps:.3f}')")"
else
  say "PyTorch not importable: the GPT comparison is skipped"
fi
say "== done"
exit "$status"

#!/usr/bin/env bash
# The GPU check of the CUDA backend, on the GPU machine (one H200 with the
# CUDA 13 toolkit and PyTorch's CUDA 13 wheels, but none of ember's Debian
# libraries and no network), from the bundle that scripts/gpu-bundle.sh
# gathered on a development machine: build-gpu-bundle/ (ignored by git), the
# binaries and the .deb files of the libraries they load.
#
# The calls a GPU session makes with its `run` tool, from the repository root,
# after `scripts/gpu-bundle.sh` here (smoke first: it finds a missing library
# in about a minute; then the full check, which ends within 5 minutes):
#   run  command: scripts/gpu-check.sh smoke   carry: ["build-gpu-bundle"]   timeout_s: 180
#   run  command: scripts/gpu-check.sh         carry: ["build-gpu-bundle"]   timeout_s: 420
#
# smoke: unpack, library probe, then the device query, one GEMM (every
#   dtype and layout) and five training steps, each against the CPU's result.
# full (the default), one stage after another under one 290 s deadline, each
#   stage also under a time limit of its own:
#     probe     which libcudart, cuBLAS, cuDNN and NCCL the binaries load and
#               from where (ldd, and `ember env`, which asks each library)
#     tests     test_cuda: every CUDA suite, the parity suites included
#     nccl      test_cuda's NCCL tests (they start processes; apart, so that
#               a hang there costs only its own stage)
#     bench     bench/gpu: GEMM against cuBLAS, bandwidth, the GPT step
#     pytorch   bench/gpu/gpt_pytorch.py, the same GPT step in PyTorch
#     memcheck  compute-sanitizer memcheck over a small subset of the tests
# The summary, $OUT/summary.txt (build-gpu-bundle/results/ without $OUT),
# grows after every stage and is printed as it grows, so a stage that hangs
# still returns everything before it; each stage's whole output is in
# $OUT/<stage>.log. A test that skips on the GPU machine counts as a failure
# (it did not see the GPU, or a kernel is missing).
# `full STAGE...` runs the probe and the named stages only: a rerun of the
# stages a fix concerns, in the time left after a first full run. At most 8
# files come back from $OUT, so no stage writes more than its log.
# Exit status: 0 when every stage passed, 1 when one did not, 2 without a bundle.
# Usage: scripts/gpu-check.sh [smoke | full [tests|nccl|bench|pytorch|memcheck]...]
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUNDLE="$ROOT/build-gpu-bundle"
MODE="${1:-full}"
usage="usage: scripts/gpu-check.sh [smoke | full [tests|nccl|bench|pytorch|memcheck]...]"
case "$MODE" in
  smoke) DEADLINE=$((SECONDS + 90)) ;;
  full) DEADLINE=$((SECONDS + 290)) ;;
  *) echo "$usage" >&2; exit 2 ;;
esac
STAGES=" ${*:2} "
[[ "$STAGES" == "  " ]] && STAGES=" tests nccl bench pytorch memcheck "
for name in $STAGES; do
  [[ " tests nccl bench pytorch memcheck " == *" $name "* ]] || { echo "$usage" >&2; exit 2; }
done
wanted() { [[ "$STAGES" == *" $1 "* ]]; }
RESULTS="${OUT:-$BUNDLE/results}"
SUMMARY="$RESULTS/summary.txt"
mkdir -p "$RESULTS"
: >"$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
failed=()

[[ -f "$BUNDLE/build-dir" && -x "$BUNDLE/build/tests/test_cuda" ]] || {
  echo "gpu-check: $BUNDLE is missing or incomplete: run scripts/gpu-bundle.sh on the development machine and carry build-gpu-bundle" >&2
  exit 2
}
BUILD="$BUNDLE/build"
say "== gpu-check $MODE $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(cat "$BUNDLE/commit")"

# The tests start `ember` and the distributed worker by the paths they had in
# the build (EMBER_CLI, EMBER_WORKER): that path leads to the bundle here.
built_at="$(cat "$BUNDLE/build-dir")"
if [[ ! -e "$built_at" ]]; then
  mkdir -p "$(dirname "$built_at")" && ln -s "$BUILD" "$built_at"
fi
[[ -x "$built_at/tests/distributed_worker" ]] || say "warning: $built_at is not this bundle: the NCCL tests will not find their worker"

# stage NAME LIMIT COMMAND...: runs COMMAND (a program, or a function this
# script exports), its output in $RESULTS/NAME.log, under the smaller of LIMIT
# seconds and what is left before the deadline. Sets stage_status (124 when
# it timed out) for the stage's own summary.
stage_status=0
stage() {
  local name="$1" limit="$2"
  shift 2
  local left=$((DEADLINE - SECONDS))
  ((left < limit)) && limit=$left
  if ((limit < 5)); then
    : >"$RESULTS/$name.log"
    say "== $name: not run, the deadline has passed"
    failed+=("$name")
    stage_status=124
    return
  fi
  local began=$SECONDS
  timeout -k 5 "$limit" bash -c '"$@"' "$name" "$@" >"$RESULTS/$name.log" 2>&1
  stage_status=$?
  local outcome="exit status $stage_status"
  ((stage_status == 124 || stage_status == 137)) && outcome="TIMED OUT at its limit of ${limit}s"
  say "== $name: $outcome, $((SECONDS - began))s"
  ((stage_status == 0)) || failed+=("$name")
}

# ember_run COMMAND...: a bundle binary with the bundle's libraries, which no
# other program (python3, the sanitizer's own) gets.
ember_run() { LD_LIBRARY_PATH="$EMBER_LIBRARY_PATH" "$@"; }
export -f ember_run
export BUNDLE BUILD
# What a gtest log says: the totals, the tests that failed or skipped, the
# first lines of each failure, and the test still running at a time-out.
gtest_summary() {
  local log="$1"
  awk 'ran && /^\[  (PASSED|FAILED|SKIPPED) /; /^\[==========\] .* ran\./ { ran = 1 }' "$log" | head -40 | tee -a "$SUMMARY"
  grep -E -A3 ': Failure$' "$log" | head -40 | tee -a "$SUMMARY"
  if grep -q '^\[  SKIPPED \]' "$log"; then
    say "skipped tests count as failures here: this machine has a GPU"
    [[ " ${failed[*]} " == *" $2 "* ]] || failed+=("$2")
  fi
  if ((stage_status == 124 || stage_status == 137)); then
    awk '/^\[ RUN      \]/ { test = $4 } /^\[       OK \]|^\[  FAILED  \]|^\[  SKIPPED \]/ { test = "" }
         END { if (test != "") print "still running at the time-out: " test }' "$log" | tee -a "$SUMMARY"
  fi
}

# --- Unpack: the Debian packages' libraries, once per machine ---------------
RUNTIME=/tmp/ember-gpu-runtime
unpack() {
  rm -rf "$RUNTIME" && mkdir -p "$RUNTIME" || return 1
  for deb in "$BUNDLE"/packages/*.deb; do
    if command -v dpkg-deb >/dev/null; then
      dpkg-deb -x "$deb" "$RUNTIME" || return 1
    else  # a .deb is an ar archive holding data.tar.*
      (cd "$RUNTIME" && ar p "$deb" "$(ar t "$deb" | grep '^data.tar')" | tar -x --auto-compress -f -) || return 1
    fi
  done
  cp "$BUNDLE/packages/list" "$RUNTIME/unpacked-from"
}
export RUNTIME
export -f unpack
if ! cmp -s "$BUNDLE/packages/list" "$RUNTIME/unpacked-from"; then
  stage unpack 30 unpack
  [[ -s "$RESULTS/unpack.log" ]] || rm -f "$RESULTS/unpack.log"  # 8 files at most come back
fi

# The library path: the bundle's libember (whatever the binaries' run path
# says), the packages' libraries, then the CUDA toolkit's, then those of the
# NVIDIA wheels PyTorch came with (cuDNN and NCCL are not part of the toolkit).
library_path=("$BUILD")
for dir in usr/lib/x86_64-linux-gnu lib/x86_64-linux-gnu usr/lib lib; do
  [[ -d "$RUNTIME/$dir" ]] && library_path+=("$RUNTIME/$dir")
done
if command -v nvcc >/dev/null; then
  toolkit="$(dirname "$(readlink -f "$(command -v nvcc)")")/.."
  for dir in lib64 lib targets/x86_64-linux/lib; do
    [[ -d "$toolkit/$dir" ]] && library_path+=("$(readlink -f "$toolkit/$dir")")
  done
fi
wheels="$(timeout 20 python3 -c 'import nvidia; print("\n".join(nvidia.__path__))' 2>/dev/null)"
for root in $wheels; do
  mapfile -t -O "${#library_path[@]}" library_path < <(find "$root" -maxdepth 3 -name 'lib*.so*' -printf '%h\n' | sort -u)
done
EMBER_LIBRARY_PATH="$(printf '%s\n' "${library_path[@]}" | awk '!seen[$0]++' | paste -sd:)"
export EMBER_LIBRARY_PATH="$EMBER_LIBRARY_PATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# --- probe -------------------------------------------------------------------
probe() {
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  echo "library path: $EMBER_LIBRARY_PATH"
  for binary in "$BUILD"/libember.so "$BUILD"/libember_cuda.so "$BUILD/tests/test_cuda" "$BUILD/bench/bench_cuda" "$BUILD/bin/ember"; do
    echo "ldd $(basename "$binary"):"
    ember_run ldd "$binary" | grep -E 'libember|cudart|cublas|cudnn|nccl|dnnl|not found'
  done
  ember_run "$BUILD/bin/ember" env
  echo "compute-sanitizer: $(command -v compute-sanitizer || echo "not on PATH")"
  python3 -c 'import torch; print("PyTorch", torch.__version__, "CUDA", torch.version.cuda, "GPU", torch.cuda.is_available())'
}
export -f probe
stage probe 30 probe
# The device, each library as ember loaded it, and anything not found.
grep -E '^NVIDIA|nvidia-smi|^- GPUs|^  - cuda:|^- CUDA libraries|^  - (CUDA runtime|CUDA driver|cuBLAS|cuDNN|NCCL)|^- distributed backends|=> not found|version .* not found|^PyTorch|^compute-sanitizer' \
  "$RESULTS/probe.log" | tee -a "$SUMMARY"
if grep -qE '=> not found|version .* not found' "$RESULTS/probe.log"; then
  say "missing libraries: the binaries cannot start; the stages below will fail the same way"
  [[ " ${failed[*]} " == *" probe "* ]] || failed+=("probe")
fi

# --- smoke: device query, one GEMM, one training step ------------------------
if [[ "$MODE" == smoke ]]; then
  stage smoke 60 ember_run "$BUILD/tests/test_cuda" \
    --gtest_filter='CudaDevice.ReportsDevicesOrSkips:CudaMatmul.MatchesTheOracleForEveryLayoutAndDtype:CudaTraining.LossesMatchTheCpuStepByStep'
  gtest_summary "$RESULTS/smoke.log" smoke
  say "== smoke done in $((SECONDS))s; failed: ${failed[*]:-none}"
  ((${#failed[@]} == 0))
  exit $?
fi

# --- tests -------------------------------------------------------------------
if wanted tests; then
  stage tests 130 ember_run "$BUILD/tests/test_cuda" --gtest_filter='-CudaNccl.*'
  gtest_summary "$RESULTS/tests.log" tests
  say "slowest: $(grep -oE '^\[       OK \] [A-Za-z0-9_./]+ \([0-9]+ ms\)' "$RESULTS/tests.log" |
    awk '{ gsub(/[(]/, "", $5); print $5, $4 }' | sort -rn | head -5 | awk '{ printf "%s %d ms; ", $2, $1 }')"
fi
if wanted nccl; then
  stage nccl 45 ember_run "$BUILD/tests/test_cuda" --gtest_filter='CudaNccl.*'
  gtest_summary "$RESULTS/nccl.log" nccl
fi

# --- bench -------------------------------------------------------------------
bench() {
  local part status=0
  for part in gemm bandwidth gpt; do ember_run "$BUILD/bench/bench_cuda" "$part" || status=$?; done
  return $status
}
export -f bench
if wanted bench; then
  stage bench 75 bench
  grep -E '^(device|gemm_|copy_|add_|softmax_|gpt_step|bench_cuda)' "$RESULTS/bench.log" | tee -a "$SUMMARY"
  grep -q 'nothing measured' "$RESULTS/bench.log" && failed+=("bench")
fi
if wanted pytorch; then
  stage pytorch 40 python3 "$ROOT/bench/gpu/gpt_pytorch.py"
  grep -E '^gpt_' "$RESULTS/pytorch.log" | tee -a "$SUMMARY"
  grep -q 'nothing measured' "$RESULTS/pytorch.log" && failed+=("pytorch")
  ember_tps="$(grep -oP '^gpt_step_ember: \K[0-9]+' "$RESULTS/bench.log" 2>/dev/null)"
  torch_tps="$(grep -oP '^gpt_step_pytorch: \K[0-9]+' "$RESULTS/pytorch.log")"
  [[ -n "$ember_tps" && -n "$torch_tps" ]] && say "gpt_step ratio ember / PyTorch: $(awk "BEGIN { printf \"%.3f\", $ember_tps / $torch_tps }")"
fi

# --- memcheck: ember's own kernels (indexing, reductions, softmax, norms,
# optimizers, attention, element-wise broadcasting, copies); cuBLAS and cuDNN
# are their vendors' to check, and the sanitizer slows kernels many times over.
if wanted memcheck; then
  sanitizer="$(command -v compute-sanitizer)"
  for candidate in "${toolkit:-/usr/local/cuda}"/{bin,compute-sanitizer}/compute-sanitizer; do
    [[ -z "$sanitizer" && -x "$candidate" ]] && sanitizer="$candidate"
  done
  if [[ -n "$sanitizer" ]]; then
    subset='CudaIndexing.*:CudaReduction.RandomShapesInEveryLayout:CudaSoftmaxLoss.Softmax*:CudaSoftmaxLoss.OutOfRangeTargetsRaiseTheCpuError'
    subset+=':CudaNormalization.RowNorms*:CudaOptimizer.SeveralStepsMatchTheCpu:CudaAttention*'
    subset+=':CudaElementwise.WhereMatchesReferenceWithBroadcasting:CudaRuntime.RoundTripKeepsEveryDtypeAndLayoutBitForBit'
    stage memcheck 60 ember_run "$sanitizer" --tool memcheck --error-exitcode 3 --print-limit 20 \
      "$BUILD/tests/test_cuda" --gtest_filter="$subset"
    grep -E 'ERROR SUMMARY|Invalid|out of bounds|misaligned' "$RESULTS/memcheck.log" | head -20 | tee -a "$SUMMARY"
    gtest_summary "$RESULTS/memcheck.log" memcheck
  else
    say "== memcheck: not run, compute-sanitizer not found"
    failed+=("memcheck")
  fi
fi

say "== done in ${SECONDS}s; failed: ${failed[*]:-none}"
((${#failed[@]} == 0))

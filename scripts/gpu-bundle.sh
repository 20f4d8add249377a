#!/usr/bin/env bash
# Prepares the GPU check on a development machine (Debian, CUDA toolkit, no
# GPU needed): builds the CUDA tests and GPU benchmarks for sm_90 into
# build-gpu/, and puts the Debian packages of every runtime library they need
# that a bare GPU machine lacks (oneDNN, fmt, Gloo, ...) into
# build-gpu/packages/, as .deb files (apt-get download), which
# scripts/gpu-check.sh unpacks there with dpkg -x. Prints the bundle's size:
# it must stay under 64 MiB. Usage: scripts/gpu-bundle.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ember_install_packages

BUILD="$EMBER_ROOT/build-gpu"
cmake -S "$EMBER_ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DEMBER_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DEMBER_BUILD_TESTS=ON -DEMBER_BUILD_BENCH=ON -DEMBER_BUILD_EXAMPLES=OFF
cmake --build "$BUILD" -j "$EMBER_JOBS" --target test_cuda bench_cuda

# The packages behind every library the binaries load, except the ones any
# GPU machine has: the C/C++ runtime and the CUDA libraries (its toolkit's).
rm -rf "$BUILD/packages"
mkdir -p "$BUILD/packages"
mapfile -t libraries < <(ldd "$BUILD/tests/test_cuda" "$BUILD/bench/bench_cuda" "$BUILD/libember.so" |
  awk '/=> \// {print $3}' | sort -u)
packages=()
for library in "${libraries[@]}"; do
  case "$(basename "$library")" in
    libc.so*|libm.so*|libstdc++*|libgcc_s*|libpthread*|libdl.so*|librt.so*|ld-linux*|libcuda*|libcublas*|libnccl*|libcudnn*) continue ;;
  esac
  owner="$(dpkg -S "$(readlink -f "$library")" 2>/dev/null | head -1 | cut -d: -f1)" || true
  [[ -n "$owner" ]] && packages+=("$owner")
done
mapfile -t packages < <(printf '%s\n' "${packages[@]}" | sort -u)
echo "ember: runtime packages: ${packages[*]}"
(cd "$BUILD/packages" && apt-get download "${packages[@]}" >/dev/null)
du -sh "$BUILD/packages" "$BUILD/tests/test_cuda" "$BUILD/bench/bench_cuda" "$BUILD/libember.so"
du -cb "$BUILD/packages" "$BUILD/tests/test_cuda" "$BUILD/bench/bench_cuda" "$BUILD"/libember.so* |
  awk 'END { printf "ember: bundle %.1f MiB (limit 64 MiB)\n", $1 / 1048576 }'

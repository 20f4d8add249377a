#!/usr/bin/env bash
# Prepares the GPU check on a development machine (Debian, CUDA toolkit, no
# GPU needed): builds the CUDA tests, the GPU benchmarks and the `ember`
# command for sm_90 into build-gpu/, and gathers what the GPU machine needs
# into build-gpu-bundle/ (ignored by git), the one path the `run` tool
# carries there (scripts/gpu-check.sh's header has the calls):
#   build/      the binaries, at their paths in build-gpu/: libember.so*,
#               libember_cuda.so* (the CUDA plugin libember loads), bin/ember, tests/test_cuda, tests/distributed_worker,
#               bench/bench_cuda
#   packages/   the .deb files (apt-get download) of every library they load
#               that the GPU machine lacks (oneDNN, fmt, Gloo, yaml-cpp, ...),
#               and their names in packages/list
#   build-dir   the absolute path of build-gpu/ here: the tests start `ember`
#               and the worker by that path, which gpu-check.sh links to the
#               bundle there
#   commit      the commit the binaries were built from
# Not bundled: the C and C++ runtimes, and the CUDA libraries (cudart, cuBLAS
# from the GPU machine's toolkit; cuDNN and NCCL from its PyTorch wheels).
# With ccache on the PATH the build goes through it, with the compiler flags
# of a plain CUDA build (`cmake -S . -B build`), so that it reuses that
# build's objects. Prints the bundle's size and fails above 56 MiB: the
# `run` tool carries 64 MiB in all, the source tree (about 4 MiB) included.
# Usage: scripts/gpu-bundle.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ember_install_packages

BUILD="$EMBER_ROOT/build-gpu"
BUNDLE="$EMBER_ROOT/build-gpu-bundle"
launchers=()
if command -v ccache >/dev/null; then
  launchers=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
cmake -S "$EMBER_ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DEMBER_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DEMBER_BUILD_TESTS=ON -DEMBER_BUILD_BENCH=ON -DEMBER_BUILD_EXAMPLES=OFF "${launchers[@]}"
cmake --build "$BUILD" -j "$EMBER_JOBS" --target test_cuda bench_cuda ember_cli distributed_worker

rm -rf "$BUNDLE"
mkdir -p "$BUNDLE/build/bin" "$BUNDLE/build/tests" "$BUNDLE/build/bench" "$BUNDLE/packages"
(cd "$BUILD" && cp -P libember.so libember.so.0 libember_cuda.so libember_cuda.so.0 "$BUNDLE/build/" &&
  cp "$(readlink -f libember.so.0)" "$(readlink -f libember_cuda.so.0)" "$BUNDLE/build/" &&
  cp bin/ember "$BUNDLE/build/bin/" && cp tests/test_cuda tests/distributed_worker "$BUNDLE/build/tests/" &&
  cp bench/bench_cuda "$BUNDLE/build/bench/")
echo "$BUILD" >"$BUNDLE/build-dir"
git -C "$EMBER_ROOT" describe --always --dirty >"$BUNDLE/commit"

# The packages behind every library the binaries load, except the ones any
# GPU machine has: the C/C++ runtime and the CUDA libraries.
mapfile -t libraries < <(cd "$BUNDLE/build" && ldd bin/ember tests/test_cuda tests/distributed_worker bench/bench_cuda libember.so libember_cuda.so |
  awk '/=> \// {print $3}' | sort -u)
# The package that owns a library file, asked under each name it has (with
# merged /usr, dpkg knows some files by their /lib path, others by /usr/lib).
package_of() {
  local real owner
  real="$(readlink -f "$1")"
  for name in "$1" "$real" "${real#/usr}"; do
    if owner="$(dpkg -S "$name" 2>/dev/null)"; then
      echo "${owner%%:*}"
      return
    fi
  done
}
packages=()
for library in "${libraries[@]}"; do
  case "$(basename "$library")" in
    libc.so*|libm.so*|libstdc++*|libgcc_s*|libpthread*|libdl.so*|librt.so*|ld-linux*|libember*|libcuda*|libcublas*|libnccl*|libcudnn*) continue ;;
  esac
  owner="$(package_of "$library")"
  [[ -n "$owner" ]] || { echo "ember: no Debian package owns $library: the GPU machine will miss it" >&2; exit 1; }
  packages+=("$owner")
done
mapfile -t packages < <(printf '%s\n' "${packages[@]}" | sort -u)
echo "ember: runtime packages: ${packages[*]}"
(cd "$BUNDLE/packages" && apt-get download "${packages[@]}" >/dev/null)
printf '%s\n' "${packages[@]}" >"$BUNDLE/packages/list"

du -b "$BUNDLE"/build/libember.so.0.* "$BUNDLE"/build/libember_cuda.so.0.* "$BUNDLE"/build/*/* "$BUNDLE"/packages/*.deb | sort -rn |
  awk '{ printf "  %6.1f MiB  %s\n", $1 / 1048576, $2 }'
size="$(du -sb "$BUNDLE" | cut -f1)"
awk -v size="$size" 'BEGIN { printf "ember: bundle %.1f MiB (at most 56 MiB: 64 MiB carried in all, the source tree too)\n", size / 1048576 }'
((size <= 56 * 1048576)) || { echo "ember: the bundle is too large for the run tool's carry limit" >&2; exit 1; }

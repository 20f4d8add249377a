# Shared by scripts/demo.sh and scripts/test.sh: install what is missing
# (Debian packages only), set the environment, and build. Sourced, not run.
set -euo pipefail

EMBER_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
EMBER_JOBS="${EMBER_JOBS:-$(nproc)}"

# Every package the build, the tests, the examples and the demo need.
EMBER_PACKAGES=(
  cmake ninja-build g++ clang-14 libomp-14-dev libclang-rt-14-dev
  libeigen3-dev libdnnl-dev ocl-icd-opencl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev libyaml-cpp-dev libfmt-dev libgloo-dev libssl-dev zlib1g-dev
  dataset-fashion-mnist golang-github-pierrec-lz4-dev python3-matplotlib
  openmpi-bin python3-torch slurmd slurmctld slurm-client munge
)

ember_install_packages() {
  local missing=()
  for package in "${EMBER_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
  done
  if ((${#missing[@]})); then
    echo "ember: installing ${missing[*]}"
    local sudo=""
    [[ $(id -u) -eq 0 ]] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
}

# libgomp reads OMP_WAIT_POLICY when it loads: spinning threads on two shared
# cores slow everything down (DESIGN.md), so waits are passive unless the user
# chose otherwise.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"

# ember_build DIR [cmake args...]: configure (once) and build.
ember_build() {
  local dir="$1"
  shift
  cmake -S "$EMBER_ROOT" -B "$dir" -G Ninja "$@"
  cmake --build "$dir" -j "$EMBER_JOBS"
}

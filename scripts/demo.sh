#!/usr/bin/env bash
# Quick start, step 1: install what is missing, build in Release, run the main job.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

ember_install_packages
ember_build "$EMBER_ROOT/build" -DCMAKE_BUILD_TYPE=Release -DEMBER_BUILD_BENCH=OFF
"$EMBER_ROOT/build/examples/tensor_demo"

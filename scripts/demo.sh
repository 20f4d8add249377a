#!/usr/bin/env bash
# Quick start, step 1: install what is missing, build in Release, and train an
# MLP on Fashion-MNIST for two epochs with the Accelerator
# (examples/accelerate_fashion_mnist.cpp: one process here; the same program
# runs under `build/bin/ember launch --nproc-per-node 2 -- ...`). Seconds on
# two cores; it exits non-zero below 85% test accuracy. The metrics it writes
# plot with
#   scripts/plot_metrics.py build/demo_metrics.jsonl build/demo_metrics.png
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

ember_install_packages
ember_build "$EMBER_ROOT/build" -DCMAKE_BUILD_TYPE=Release -DEMBER_BUILD_BENCH=OFF
"$EMBER_ROOT/build/examples/accelerate_fashion_mnist" --model mlp --epochs 2 --require-accuracy 0.85 \
  --metrics-out "$EMBER_ROOT/build/demo_metrics.jsonl"

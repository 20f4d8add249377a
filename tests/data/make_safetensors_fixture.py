#!/usr/bin/env python3
"""Safetensors files written by the reference writer (PyPI `safetensors`), for
tests/core/test_safetensors.cpp. The tensors' values come from exact formulas
(small integers divided in their own dtype), so the C++ test rebuilds the same
tensors, writes them with save_safetensors and compares the bytes. Rerun after
changing a case (Debian's python3-torch provides torch, bf16 included):
    /usr/bin/python3 -m venv --system-site-packages /tmp/st-venv
    /tmp/st-venv/bin/pip install safetensors
    /tmp/st-venv/bin/python tests/data/make_safetensors_fixture.py
Files (in tests/data/safetensors/):
  model.safetensors     a 2-layer MLP's state dict plus one tensor of every
                        dtype, a 0-d and an empty one; metadata {"format": "pt"}
  names.safetensors     names that need JSON escaping or are not ASCII
  metadata.safetensors  several metadata entries (the reference orders them
                        as its hash map does, so only read back, not compared)
  no_metadata.safetensors  written without metadata (no __metadata__ key)
  uint8.safetensors     a U8 tensor, a dtype ember does not read
"""
import pathlib

import numpy as np
import safetensors
import safetensors.numpy
import safetensors.torch
import torch

OUT = pathlib.Path(__file__).resolve().parent / "safetensors"

FLOAT_DTYPES = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16}
INT_DTYPES = {"i32": torch.int32, "i64": torch.int64}


def formula(shape, dtype, multiplier, modulus, shift, divisor):
    """Element i (row-major) is ((i * multiplier) % modulus - shift) / divisor, the
    division done in `dtype` for floats; integers skip the division (scaled by
    divisor instead) and bool is (value % 2 == 1). The C++ test has the same."""
    count = 1
    for size in shape:
        count *= size
    numerators = [(i * multiplier) % modulus - shift for i in range(count)]
    if dtype in FLOAT_DTYPES:
        t = torch.tensor(numerators, dtype=FLOAT_DTYPES[dtype]) / torch.tensor(divisor, dtype=FLOAT_DTYPES[dtype])
    elif dtype in INT_DTYPES:
        t = torch.tensor([n * divisor for n in numerators], dtype=INT_DTYPES[dtype])
    else:
        t = torch.tensor([n % 2 == 1 for n in numerators], dtype=torch.bool)
    return t.reshape(shape)


# name -> (shape, dtype, multiplier, modulus, shift, divisor); mirrored in test_safetensors.cpp.
MODEL = {
    "layers.0.weight": ([4, 3], "f32", 37, 101, 50, 7),
    "layers.0.bias": ([4], "f32", 5, 11, 5, 3),
    "layers.2.weight": ([2, 4], "f32", 53, 29, 14, 11),
    "layers.2.bias": ([2], "f32", 1, 7, 3, 9),
    "norm.running_var": ([3], "f64", 13, 17, 8, 3),
    "norm.num_batches_tracked": ([], "i64", 1, 10, -7, 1),
    "extra.half": ([2, 3], "f16", 7, 9, 4, 4),
    "extra.bfloat": ([5], "bf16", 3, 13, 7, 8),
    "extra.int32": ([4], "i32", 9, 23, 11, 100003),
    "extra.int64": ([3], "i64", 11, 19, 9, 3000000007),
    "extra.mask": ([5], "bool", 3, 7, 0, 1),
    "extra.scale": ([], "f32", 1, 5, -1, 2),
    "extra.empty": ([0, 4], "f32", 1, 5, 0, 1),
}

NAMES = {
    'quote"back\\slash': ([2], "f32", 3, 7, 2, 5),
    "tab\tnew\nline\x01": ([1], "i32", 1, 5, 0, 1),
    "caf\u00e9.\u2713": ([3], "f16", 5, 9, 4, 2),
}


def build(cases):
    return {name: formula(*case) for name, case in cases.items()}


def main():
    OUT.mkdir(exist_ok=True)
    safetensors.torch.save_file(build(MODEL), OUT / "model.safetensors", metadata={"format": "pt"})
    safetensors.torch.save_file(build(NAMES), OUT / "names.safetensors", metadata={"format": "pt"})
    safetensors.torch.save_file(
        {"weight": formula([2, 2], "f32", 3, 7, 3, 2)},
        OUT / "metadata.safetensors",
        metadata={"format": "pt", "step": "1200", "note": "line\nbreak \u00e9", "empty": ""},
    )
    safetensors.torch.save_file({"weight": formula([3], "f64", 1, 4, 1, 2)}, OUT / "no_metadata.safetensors")
    safetensors.numpy.save_file(
        {"bytes": np.arange(4, dtype=np.uint8), "weight": np.ones(2, dtype=np.float32)},
        OUT / "uint8.safetensors",
        metadata={"format": "np"},
    )
    print(f"safetensors {safetensors.__version__}, torch {torch.__version__}: wrote {sorted(p.name for p in OUT.iterdir())}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""A sharded model directory written the way transformers' save_pretrained and
Accelerate's save_model write one, for tests/nn/test_serialize_sharded.cpp:
huggingface_hub's split_state_dict_into_shards_factory chooses the shards,
the reference writer (PyPI `safetensors`) writes each with {"format": "pt"},
and the index is `json.dumps(index, indent=2, sort_keys=True) + "\n"` (the
line both libraries use). The tensors' values come from an exact formula, so
the C++ test rebuilds the same state dict, saves it with nn::save_sharded and
compares the bytes of every file. numpy stands in for torch (no bf16 then);
the bytes are the same since the writer is the same Rust code. Rerun after
changing a case:
    python3 -m venv /tmp/st-venv
    /tmp/st-venv/bin/pip install safetensors numpy huggingface_hub
    /tmp/st-venv/bin/python tests/data/make_sharded_fixture.py
Files (in tests/data/sharded/):
  three_shards/  STATE at max_shard_size=200 bytes: three shards (the 256-byte
                 "big" gets a shard of its own, ahead of the one being filled)
                 and model.safetensors.index.json
  one_file/      STATE at max_shard_size="1MB": model.safetensors alone
"""
import json
import pathlib
import shutil

import numpy as np
import safetensors.numpy
from huggingface_hub import serialization

OUT = pathlib.Path(__file__).resolve().parent / "sharded"

# (name, dtype, shape), in state-dict order. Names that JSON must escape
# (non-ASCII, a tab) and one that sorts before lower case ("Zeta").
STATE = [
    ("embed.weight", np.float32, (8, 4)),
    ("layers.0.weight", np.float32, (4, 4)),
    ("layers.0.bias", np.float32, (4,)),
    ("big", np.float32, (64,)),
    ("layers.1.weight", np.float16, (4, 4)),
    ("layers.1.bias", np.float16, (4,)),
    ("norm.weight", np.float64, (4,)),
    ("steps", np.int64, ()),
    ("\u00fcn\u00efcode.weight", np.float32, (2,)),
    ("tab\tname", np.int32, (3,)),
    ("Zeta", np.bool_, (5,)),
]


def values(dtype, shape):
    """Element i (row-major) is (i * 7) % 11 - 5, divided by 4 for floats
    (exact in every float dtype); odd for bool. The C++ test has the same."""
    count = int(np.prod(shape, dtype=np.int64))
    numbers = np.array([(i * 7) % 11 - 5 for i in range(count)], dtype=np.int64)
    if dtype == np.bool_:
        return (numbers % 2 == 1).reshape(shape)
    if np.issubdtype(dtype, np.floating):
        return (numbers.astype(dtype) / dtype(4)).astype(dtype).reshape(shape)
    return numbers.astype(dtype).reshape(shape)


def save(directory, max_shard_size):
    state = {name: values(dtype, shape) for name, dtype, shape in STATE}
    split = serialization.split_state_dict_into_shards_factory(
        state,
        get_storage_size=lambda array: array.nbytes,
        filename_pattern="model{suffix}.safetensors",
        max_shard_size=max_shard_size,
    )
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    for filename, names in split.filename_to_tensors.items():
        safetensors.numpy.save_file({name: state[name] for name in names}, directory / filename, metadata={"format": "pt"})
    if split.is_sharded:
        index = {"metadata": split.metadata, "weight_map": split.tensor_to_filename}
        with open(directory / "model.safetensors.index.json", "w", encoding="utf-8") as f:
            f.write(json.dumps(index, indent=2, sort_keys=True) + "\n")


save(OUT / "three_shards", 200)
save(OUT / "one_file", "1MB")
for path in sorted(OUT.rglob("*")):
    print(path.relative_to(OUT))

#!/usr/bin/env python3
"""Golden values for nn::MultiheadAttention (tests/nn/test_attention.cpp).

Runs torch.nn.MultiheadAttention (Debian's python3-torch) on fixed weights and
inputs in float64 and writes golden_attention.json beside this script: each
case's state dict, inputs, masks, output, attention weights and the gradient of
sum(output * upstream) with respect to in_proj_weight.

    /usr/bin/python3 tests/data/make_golden_attention.py
"""
import json
import os

import torch


def tensor_json(t):
    t = t.detach()
    dtype = "bool" if t.dtype == torch.bool else "float"
    return {"shape": list(t.shape), "dtype": dtype, "data": t.double().flatten().tolist() if dtype == "float"
            else [bool(x) for x in t.flatten().tolist()]}


def run_case(name, embed_dim, num_heads, batch_first, bias, query_shape, source_length, inputs, attn_mask=None,
             key_padding_mask=None, average=True, seed=0):
    torch.manual_seed(seed)
    mha = torch.nn.MultiheadAttention(embed_dim, num_heads, bias=bias, batch_first=batch_first).double()
    with torch.no_grad():  # non-zero biases so that they are exercised
        for p in mha.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    query = torch.randn(*query_shape, dtype=torch.float64)
    source_shape = list(query_shape)
    if len(query_shape) == 2:
        source_shape[0] = source_length
    else:
        source_shape[1 if batch_first else 0] = source_length
    if inputs == "self":
        key = value = query
    elif inputs == "key_is_value":
        key = value = torch.randn(*source_shape, dtype=torch.float64)
    else:
        key = torch.randn(*source_shape, dtype=torch.float64)
        value = torch.randn(*source_shape, dtype=torch.float64)
    output, weights = mha(query, key, value, key_padding_mask=key_padding_mask, need_weights=True,
                          attn_mask=attn_mask, average_attn_weights=average)
    upstream = torch.randn_like(output)
    (output * upstream).sum().backward()
    case = {
        "name": name, "embed_dim": embed_dim, "num_heads": num_heads, "batch_first": batch_first, "bias": bias,
        "inputs": inputs, "average": average,
        "state": {k: tensor_json(v) for k, v in mha.state_dict().items()},
        "query": tensor_json(query), "key": tensor_json(key), "value": tensor_json(value),
        "output": tensor_json(output), "weights": tensor_json(weights), "upstream": tensor_json(upstream),
        "grad_in_proj_weight": tensor_json(mha.in_proj_weight.grad),
    }
    if attn_mask is not None:
        case["attn_mask"] = tensor_json(attn_mask)
    if key_padding_mask is not None:
        case["key_padding_mask"] = tensor_json(key_padding_mask)
    return case


def main():
    torch.manual_seed(1234)
    cases = []
    # Self-attention, sequence first [L, N, E].
    cases.append(run_case("self_seq_first", 8, 2, False, True, (3, 2, 8), 3, "self", seed=1))
    # Cross-attention, batch first [N, L, E], boolean causal-style mask and key padding.
    bool_mask = torch.tensor([[False, True, True, True], [False, False, True, True], [False, False, False, True]])
    padding = torch.tensor([[False, False, False, True], [False, False, False, False]])
    cases.append(run_case("cross_batch_first_bool_masks", 8, 2, True, True, (2, 3, 8), 4, "key_is_value",
                          attn_mask=bool_mask, key_padding_mask=padding, seed=2))
    # Separate key and value, additive per-head float mask, per-head weights, no bias.
    float_mask = torch.randn(2 * 4, 3, 5, dtype=torch.float64)
    cases.append(run_case("separate_kv_float_mask_per_head", 12, 4, False, False, (3, 2, 12), 5, "separate",
                          attn_mask=float_mask, average=False, seed=3))
    # Unbatched [L, E] with a float key padding mask [S].
    float_padding = torch.tensor([0.0, -1.5, 0.25, -100.0], dtype=torch.float64)
    cases.append(run_case("unbatched_float_padding", 6, 3, False, True, (3, 6), 4, "key_is_value",
                          key_padding_mask=float_padding, seed=4))
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden_attention.json")
    with open(path, "w") as f:
        json.dump({"generator": "make_golden_attention.py", "torch": torch.__version__, "cases": cases}, f)
        f.write("\n")


if __name__ == "__main__":
    main()

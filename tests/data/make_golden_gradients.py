#!/usr/bin/env python3
"""Golden gradients for composite functions, computed with PyTorch (Debian's
python3-torch) in float64. Writes golden_gradients.json next to this script;
tests/autograd/test_golden.cpp rebuilds each function from ember ops and
compares its value and gradients. Rerun after changing a case:
    /usr/bin/python3 tests/data/make_golden_gradients.py   (Debian's python, which has torch)
"""
import json
import math
import pathlib

import torch

torch.manual_seed(1234)


def attention(q, k, v):
    # softmax(q k^T / sqrt(d)) v, weighted sum as the scalar output
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    return (torch.softmax(scores, dim=-1) @ v * torch.linspace(-1, 1, v.shape[-1], dtype=torch.float64)).sum()


def layer_norm(x, weight, bias):
    mean = x.mean(dim=-1, keepdim=True)
    var = x.var(dim=-1, unbiased=False, keepdim=True)
    y = (x - mean) / torch.sqrt(var + 1e-5) * weight + bias
    return (y * y).sum() / 3


def cross_entropy(logits, targets):
    log_probs = torch.log_softmax(logits, dim=-1)
    return -log_probs.gather(1, targets.unsqueeze(1)).mean()


def case(name, fn, inputs, extra=None):
    leaves = [t.clone().requires_grad_(True) for t in inputs]
    args = leaves + ([extra] if extra is not None else [])
    out = fn(*args)
    out.backward()
    return {
        "name": name,
        "inputs": [{"shape": list(t.shape), "values": t.flatten().tolist()} for t in inputs],
        "extra": None if extra is None else {"shape": list(extra.shape), "values": extra.flatten().tolist()},
        "output": out.item(),
        "grads": [{"shape": list(t.grad.shape), "values": t.grad.flatten().tolist()} for t in leaves],
    }


def main():
    d = torch.float64
    cases = [
        case("attention", attention, [torch.randn(2, 5, 4, dtype=d), torch.randn(2, 6, 4, dtype=d),
                                       torch.randn(2, 6, 3, dtype=d)]),
        case("layer_norm", layer_norm, [torch.randn(4, 7, dtype=d), torch.randn(7, dtype=d), torch.randn(7, dtype=d)]),
        case("cross_entropy", cross_entropy, [torch.randn(6, 5, dtype=d)], torch.tensor([0, 4, 2, 2, 1, 3])),
    ]
    path = pathlib.Path(__file__).with_name("golden_gradients.json")
    path.write_text(json.dumps({"generator": f"torch {torch.__version__}", "cases": cases}, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

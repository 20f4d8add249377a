#!/usr/bin/env python3
"""Golden values for nn::functional's composite activations, distances,
normalize, dropout-free conv1d and the losses huber_loss, kl_div and
binary_cross_entropy, computed with PyTorch (Debian's python3-torch) in
float64. Inputs include the points where the composites switch branch (0, the
hardtanh and relu6 bounds, softplus's threshold, zero vectors). Each case
stores its inputs, its scalar arguments, the output, the upstream gradient it
was backpropagated with, and every input's gradient. Writes
golden_activations.json next to this script; tests/nn/test_activations.cpp
checks ember against it. Rerun after changing a case:
    /usr/bin/python3 tests/data/make_golden_activations.py
"""
import json
import pathlib

import torch
import torch.nn.functional as F

torch.manual_seed(2468)
D = torch.float64


def tensor(t):
    return {"shape": list(t.shape), "values": t.detach().flatten().tolist()}


def case(op, inputs, args, fn, needs_grad=None):
    needs_grad = needs_grad or [True] * len(inputs)
    leaves = [t.clone().requires_grad_(wanted) for t, wanted in zip(inputs, needs_grad)]
    out = fn(*leaves)
    upstream = torch.randn(out.shape, dtype=D)
    out.backward(upstream)
    return {"op": op, "args": args, "inputs": [tensor(t) for t in leaves], "output": tensor(out),
            "grad_output": tensor(upstream),
            "grads": [tensor(t.grad) if t.grad is not None else None for t in leaves]}


def activation_cases():
    # Random values and the branch points, some exactly on them.
    x = torch.cat([torch.randn(20, dtype=D) * 3,
                   torch.tensor([0.0, -1.0, 1.0, 6.0, -6.0, 6.5, 1e-9, -1e-9, 30.0, -30.0, 10.0, 21.0, -50.0, -20.0, -40.0, -1.5, -0.999],
                                dtype=D)])
    cases = []
    for slope in [0.01, 0.2]:
        cases.append(case("leaky_relu", [x], {"negative_slope": slope}, lambda t: F.leaky_relu(t, slope)))
    for alpha in [1.0, 0.5]:
        cases.append(case("elu", [x], {"alpha": alpha}, lambda t: F.elu(t, alpha)))
    for beta, threshold in [(1.0, 20.0), (2.0, 10.0), (0.5, 5.0)]:
        cases.append(case("softplus", [x], {"beta": beta, "threshold": threshold},
                          lambda t: F.softplus(t, beta, threshold)))
    for low, high in [(-1.0, 1.0), (-0.5, 2.0)]:
        cases.append(case("hardtanh", [x], {"min_val": low, "max_val": high}, lambda t: F.hardtanh(t, low, high)))
    cases.append(case("relu6", [x], {}, F.relu6))
    cases.append(case("mish", [x], {}, F.mish))
    cases.append(case("logsigmoid", [x], {}, F.logsigmoid))
    return cases


def distance_cases():
    cases = []
    a, b = torch.randn(4, 5, dtype=D), torch.randn(4, 5, dtype=D)
    a[1] = 0.0  # a zero vector: similarity 0
    for dim in [1, 0, -1]:
        cases.append(case("cosine_similarity", [a, b], {"dim": dim, "eps": 1e-8},
                          lambda s, t: F.cosine_similarity(s, t, dim=dim, eps=1e-8)))
    row = torch.randn(1, 5, dtype=D)
    cases.append(case("cosine_similarity", [row, b], {"dim": 1, "eps": 1e-8},  # broadcast
                      lambda s, t: F.cosine_similarity(s, t, dim=1)))
    for p, eps, keepdim in [(2.0, 1e-6, False), (1.0, 0.0, True), (3.0, 1e-6, False)]:
        cases.append(case("pairwise_distance", [a, b], {"p": p, "eps": eps, "keepdim": keepdim},
                          lambda s, t: F.pairwise_distance(s, t, p=p, eps=eps, keepdim=keepdim)))
    x = torch.randn(3, 4, 2, dtype=D)
    for p, dim in [(2.0, 1), (1.0, -1), (3.0, 0)]:
        cases.append(case("normalize", [x], {"p": p, "dim": dim, "eps": 1e-12},
                          lambda t: F.normalize(t, p=p, dim=dim)))
    return cases


def conv1d_cases():
    cases = []
    for stride, padding, dilation, groups in [(1, 0, 1, 1), (2, 1, 1, 1), (1, 2, 2, 2), (3, 0, 1, 4)]:
        x = torch.randn(2, 4, 11, dtype=D)
        w = torch.randn(8, 4 // groups, 3, dtype=D)
        bias = torch.randn(8, dtype=D)
        args = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
        cases.append(case("conv1d", [x, w, bias], args,
                          lambda s, t, u: F.conv1d(s, t, u, stride, padding, dilation, groups)))
    return cases


def loss_cases():
    cases = []
    x, target = torch.randn(3, 5, dtype=D) * 2, torch.randn(3, 5, dtype=D)
    x[0, 0] = target[0, 0] + 0.5  # exactly on delta = 0.5's boundary
    for delta in [1.0, 0.5, 2.5]:
        for reduction in ["none", "mean", "sum"]:
            cases.append(case("huber_loss", [x, target], {"delta": delta, "reduction": reduction},
                              lambda s, t: F.huber_loss(s, t, reduction=reduction, delta=delta)))
    log_probs = torch.log_softmax(torch.randn(4, 3, dtype=D), dim=1)
    probs = torch.softmax(torch.randn(4, 3, dtype=D), dim=1)
    for reduction in ["none", "batchmean", "sum", "mean"]:
        for log_target in [False, True]:
            target = torch.log(probs) if log_target else probs
            cases.append(case("kl_div", [log_probs, target], {"reduction": reduction, "log_target": log_target},
                              lambda s, t: F.kl_div(s, t, reduction=reduction, log_target=log_target)))
    # A zero target adds 0; the target's gradient there is NaN in PyTorch and
    # 0 in ember (kl_div's comment), so the target is a constant here.
    with_zero = probs.clone()
    with_zero[0] = torch.tensor([0.0, 0.25, 0.75], dtype=D)
    cases.append(case("kl_div", [log_probs, with_zero], {"reduction": "sum", "log_target": False},
                      lambda s, t: F.kl_div(s, t, reduction="sum"), needs_grad=[True, False]))
    p = torch.rand(4, 3, dtype=D) * 0.98 + 0.01
    t = torch.rand(4, 3, dtype=D)
    weight = torch.rand(3, dtype=D) + 0.5
    for weighted in [False, True]:
        for reduction in ["none", "mean", "sum"]:
            w = weight if weighted else None
            cases.append(case("binary_cross_entropy", [p, t], {"weighted": weighted, "reduction": reduction},
                              lambda s, u: F.binary_cross_entropy(s, u, weight=w, reduction=reduction)))
            cases[-1]["weight"] = tensor(weight) if weighted else None
    # Probabilities at and within 1e-12 of 0 and 1 (a saturated sigmoid), where
    # the gradient divides by max(x (1 - x), 1e-12); the target's gradient is
    # infinite there, so the target is a constant.
    edge = torch.tensor([[0.0, 1.0, 1e-13], [0.5, 1.0 - 1e-13, 0.3]], dtype=D)
    cases.append(case("binary_cross_entropy", [edge, t[:2]], {"weighted": False, "reduction": "sum"},
                      lambda s, u: F.binary_cross_entropy(s, u, reduction="sum"), needs_grad=[True, False]))
    cases[-1]["weight"] = None
    return cases


def main():
    cases = activation_cases() + distance_cases() + conv1d_cases() + loss_cases()
    path = pathlib.Path(__file__).with_name("golden_activations.json")
    path.write_text(json.dumps({"generator": f"torch {torch.__version__}", "cases": cases}) + "\n")
    print(f"wrote {len(cases)} cases to {path}")


if __name__ == "__main__":
    main()

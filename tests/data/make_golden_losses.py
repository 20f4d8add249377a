#!/usr/bin/env python3
"""Golden values for the losses and normalisations, computed with PyTorch
(Debian's python3-torch) in float64: every option combination of cross_entropy
(class indices and probabilities, weight, ignore_index, label smoothing, all
reductions, [C], [N, C] and [N, C, d] inputs), nll_loss, mse_loss, l1_loss,
smooth_l1_loss, binary_cross_entropy_with_logits, layer_norm, rms_norm and
batch_norm (training and eval, running statistics after the update). Each case
stores the inputs, the output, the upstream gradient it was backpropagated
with, and the gradients of the input (and of weight/bias for the norms).
Writes golden_losses.json next to this script; tests/nn/test_loss.cpp checks
ember against it. Rerun after changing a case:
    /usr/bin/python3 tests/data/make_golden_losses.py   (Debian's python, which has torch)
"""
import json
import pathlib

import torch
import torch.nn.functional as F

torch.manual_seed(4321)
D = torch.float64


def tensor(t):
    return None if t is None else {"shape": list(t.shape), "values": t.detach().flatten().tolist()}


def run(output_fn, leaves):
    """output_fn() -> output; backprop a random upstream gradient, return (output, upstream, grads)."""
    for leaf in leaves:
        if leaf is not None:
            leaf.grad = None
    out = output_fn()
    upstream = torch.randn(out.shape, dtype=D)
    out.backward(upstream)
    return out, upstream, [None if leaf is None else leaf.grad for leaf in leaves]


def rms_norm(x, normalized_shape, weight, eps):
    # torch 1.13 has no rms_norm; this is torch.nn.functional.rms_norm's definition (torch >= 2.4):
    # x * rsqrt(mean(x^2 over normalized dims) + eps) * weight, eps defaulting to the eps of the dtype it
    # computes in (finfo(float64).eps here; PyTorch's kernels take f32's for f16, bf16 and f32).
    dims = tuple(range(-len(normalized_shape), 0))
    if eps is None:
        eps = torch.finfo(x.dtype).eps
    y = x * torch.rsqrt(x.pow(2).mean(dim=dims, keepdim=True) + eps)
    return y * weight if weight is not None else y


def class_targets(shape, classes, ignore_index):
    target = torch.randint(0, classes, shape)
    flat = target.view(-1)
    flat[1::3] = ignore_index  # every third target (from the second) is ignored
    return target


def cross_entropy_cases():
    cases = []
    configurations = [((5, 4), (5,)), ((3, 4, 2), (3, 2)), ((4,), ())]
    for input_shape, target_shape in configurations:
        classes = input_shape[1] if len(input_shape) > 1 else input_shape[0]
        weight = torch.rand(classes, dtype=D) + 0.5
        for kind in ["indices", "probabilities"]:
            for weighted in [False, True]:
                for ignore_index in ([-100, 2] if kind == "indices" else [-100]):
                    for smoothing in [0.0, 0.15]:
                        for reduction in ["none", "mean", "sum"]:
                            x = torch.randn(input_shape, dtype=D, requires_grad=True)
                            if kind == "indices":
                                target = class_targets(target_shape, classes, ignore_index) if input_shape != (4,) \
                                    else torch.tensor(1)
                            else:
                                target = torch.softmax(torch.randn(input_shape, dtype=D), dim=0 if len(input_shape) == 1 else 1)
                            w = weight if weighted else None
                            out, upstream, (grad,) = run(lambda: F.cross_entropy(
                                x, target, weight=w, ignore_index=ignore_index, reduction=reduction,
                                label_smoothing=smoothing), [x])
                            cases.append({"op": "cross_entropy", "input": tensor(x), "target": tensor(target),
                                          "target_kind": kind, "weight": tensor(w), "ignore_index": ignore_index,
                                          "reduction": reduction, "label_smoothing": smoothing,
                                          "output": tensor(out), "grad_output": tensor(upstream),
                                          "grad_input": tensor(grad)})
    return cases


def nll_loss_cases():
    cases = []
    for input_shape, target_shape in [((6, 3), (6,)), ((2, 3, 4), (2, 4))]:
        for weighted in [False, True]:
            for ignore_index in [-100, 1]:
                for reduction in ["none", "mean", "sum"]:
                    x = torch.log_softmax(torch.randn(input_shape, dtype=D), dim=1).requires_grad_(True)
                    target = class_targets(target_shape, 3, ignore_index)
                    w = torch.rand(3, dtype=D) + 0.5 if weighted else None
                    out, upstream, (grad,) = run(lambda: F.nll_loss(x, target, weight=w, ignore_index=ignore_index,
                                                                    reduction=reduction), [x])
                    cases.append({"op": "nll_loss", "input": tensor(x), "target": tensor(target), "weight": tensor(w),
                                  "ignore_index": ignore_index, "reduction": reduction, "output": tensor(out),
                                  "grad_output": tensor(upstream), "grad_input": tensor(grad)})
    return cases


def regression_cases():
    cases = []
    for op, fn, betas in [("mse_loss", F.mse_loss, [None]), ("l1_loss", F.l1_loss, [None]),
                          ("smooth_l1_loss", F.smooth_l1_loss, [1.0, 0.5, 0.0])]:
        for beta in betas:
            for reduction in ["none", "mean", "sum"]:
                x = (torch.randn(3, 5, dtype=D) * 2).requires_grad_(True)
                target = torch.randn(3, 5, dtype=D)
                kwargs = {"reduction": reduction} if beta is None else {"reduction": reduction, "beta": beta}
                out, upstream, (grad,) = run(lambda: fn(x, target, **kwargs), [x])
                cases.append({"op": op, "input": tensor(x), "target": tensor(target), "reduction": reduction,
                              "beta": beta, "output": tensor(out), "grad_output": tensor(upstream),
                              "grad_input": tensor(grad)})
    return cases


def bce_cases():
    cases = []
    for weighted in [False, True]:
        for pos_weighted in [False, True]:
            for reduction in ["none", "mean", "sum"]:
                x = (torch.randn(4, 3, dtype=D) * 3)
                x[0, 0], x[1, 1] = 60.0, -60.0  # far beyond exp's range in the naive form
                x.requires_grad_(True)
                target = torch.rand(4, 3, dtype=D)
                w = torch.rand(3, dtype=D) + 0.5 if weighted else None
                pw = torch.rand(3, dtype=D) * 2 + 0.2 if pos_weighted else None
                out, upstream, (grad,) = run(lambda: F.binary_cross_entropy_with_logits(
                    x, target, weight=w, pos_weight=pw, reduction=reduction), [x])
                cases.append({"op": "binary_cross_entropy_with_logits", "input": tensor(x), "target": tensor(target),
                              "weight": tensor(w), "pos_weight": tensor(pw), "reduction": reduction,
                              "output": tensor(out), "grad_output": tensor(upstream), "grad_input": tensor(grad)})
    return cases


def norm_cases():
    cases = []
    for shape, normalized in [((3, 4, 5), (5,)), ((2, 3, 4), (3, 4))]:
        for affine in [False, True]:
            x = torch.randn(shape, dtype=D, requires_grad=True)
            w = (torch.randn(normalized, dtype=D)).requires_grad_(True) if affine else None
            b = (torch.randn(normalized, dtype=D)).requires_grad_(True) if affine else None
            out, upstream, (gx, gw, gb) = run(lambda: F.layer_norm(x, normalized, w, b, 1e-5), [x, w, b])
            cases.append({"op": "layer_norm", "input": tensor(x), "normalized_shape": list(normalized),
                          "weight": tensor(w), "bias": tensor(b), "eps": 1e-5, "output": tensor(out),
                          "grad_output": tensor(upstream), "grad_input": tensor(gx), "grad_weight": tensor(gw),
                          "grad_bias": tensor(gb)})
            for eps in [None, 1e-3]:
                out, upstream, (gx, gw) = run(lambda: rms_norm(x, normalized, w, eps), [x, w])
                cases.append({"op": "rms_norm", "input": tensor(x), "normalized_shape": list(normalized),
                              "weight": tensor(w), "eps": eps, "output": tensor(out), "grad_output": tensor(upstream),
                              "grad_input": tensor(gx), "grad_weight": tensor(gw)})
    for shape in [(4, 3), (2, 3, 2, 2)]:
        for training in [True, False]:
            for momentum in [0.1, 0.3]:
                x = (torch.randn(shape, dtype=D) * 2 + 1).requires_grad_(True)
                w = torch.randn(3, dtype=D).requires_grad_(True)
                b = torch.randn(3, dtype=D).requires_grad_(True)
                running_mean, running_var = torch.randn(3, dtype=D), torch.rand(3, dtype=D) + 0.5
                before_mean, before_var = running_mean.clone(), running_var.clone()
                out, upstream, (gx, gw, gb) = run(lambda: F.batch_norm(
                    x, running_mean, running_var, w, b, training=training, momentum=momentum, eps=1e-5), [x, w, b])
                cases.append({"op": "batch_norm", "input": tensor(x), "weight": tensor(w), "bias": tensor(b),
                              "running_mean": tensor(before_mean), "running_var": tensor(before_var),
                              "training": training, "momentum": momentum, "eps": 1e-5, "output": tensor(out),
                              "running_mean_after": tensor(running_mean), "running_var_after": tensor(running_var),
                              "grad_output": tensor(upstream), "grad_input": tensor(gx), "grad_weight": tensor(gw),
                              "grad_bias": tensor(gb)})
    return cases


def main():
    cases = cross_entropy_cases() + nll_loss_cases() + regression_cases() + bce_cases() + norm_cases()
    path = pathlib.Path(__file__).with_name("golden_losses.json")
    path.write_text(json.dumps({"generator": f"torch {torch.__version__}", "cases": cases}) + "\n")
    print(f"wrote {len(cases)} cases to {path}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Golden values for ember's optim layer, computed with PyTorch (Debian's
python3-torch, 1.13). Writes golden_optim.json next to this script; the tests
in tests/optim/ rebuild each case with ember and compare. Rerun after changing
a case:

    /usr/bin/python3 tests/data/make_golden_optim.py

- optimizers: fixed initial parameters and a fixed sequence of gradients (a
  null gradient means the parameter has none at that step and is skipped),
  run in float32 and float64; the parameters after every step and the final
  state. Lion is not in PyTorch: it is written out below from its paper's
  formula (Chen et al. 2023), as lucidrains/lion-pytorch implements it.
- schedulers: the lr of every group after construction and after each of 30
  steps (and the momentum OneCycleLR cycles). The Hugging Face warmup
  schedules are transformers' lambdas run through torch's LambdaLR, which is
  exactly what transformers does.
- clip_grad_norm: the total norm returned and the clipped gradients.
"""
import json
import math
import os

import torch

torch.manual_seed(20261203)

STEPS = 5
SHAPES = [[2, 3], [4]]


def fixed_values(shape, scale=1.0):
    return (torch.randn(shape, dtype=torch.float64) * scale).tolist()


INITIAL = [fixed_values(shape) for shape in SHAPES]
# Gradients per step and parameter; parameter 1 has no gradient at step 2.
GRADS = [[fixed_values(shape, 0.5) if not (step == 2 and index == 1) else None
          for index, shape in enumerate(SHAPES)] for step in range(STEPS)]


class Lion(torch.optim.Optimizer):
    """update = sign(beta1 * m + (1 - beta1) * g); p *= 1 - lr * wd;
    p -= lr * update; m = beta2 * m + (1 - beta2) * g."""

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0, maximize=False):
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay, maximize=maximize))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = -p.grad if group["maximize"] else p.grad
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p)
                exp_avg = state["exp_avg"]
                update = (exp_avg * beta1 + grad * (1 - beta1)).sign()
                p.mul_(1 - group["lr"] * group["weight_decay"])
                p.add_(update, alpha=-group["lr"])
                exp_avg.mul_(beta2).add_(grad, alpha=1 - beta2)


OPTIMIZERS = {
    "SGD": torch.optim.SGD, "Adam": torch.optim.Adam, "AdamW": torch.optim.AdamW,
    "RMSprop": torch.optim.RMSprop, "Adagrad": torch.optim.Adagrad, "Lion": Lion,
}

# (case name, optimizer, groups: (parameter indices, options))
OPTIMIZER_CASES = [
    ("sgd_plain", "SGD", [([0, 1], dict(lr=0.1))]),
    ("sgd_momentum", "SGD", [([0, 1], dict(lr=0.1, momentum=0.9))]),
    ("sgd_momentum_dampening_weight_decay", "SGD",
     [([0, 1], dict(lr=0.05, momentum=0.8, dampening=0.3, weight_decay=0.1))]),
    ("sgd_nesterov_maximize", "SGD", [([0, 1], dict(lr=0.1, momentum=0.9, nesterov=True, maximize=True))]),
    ("sgd_two_groups", "SGD", [([0], dict(lr=0.1, momentum=0.5)), ([1], dict(lr=0.01, momentum=0.9))]),
    ("adam_default", "Adam", [([0, 1], dict(lr=1e-2))]),
    ("adam_weight_decay_betas", "Adam", [([0, 1], dict(lr=1e-2, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1))]),
    ("adam_amsgrad_maximize", "Adam", [([0, 1], dict(lr=1e-2, amsgrad=True, maximize=True))]),
    ("adam_two_groups", "Adam", [([0], dict(lr=1e-2)), ([1], dict(lr=1e-3, amsgrad=True))]),
    ("adamw_default", "AdamW", [([0, 1], dict(lr=1e-2))]),
    ("adamw_amsgrad_weight_decay", "AdamW", [([0, 1], dict(lr=1e-2, weight_decay=0.5, amsgrad=True))]),
    ("rmsprop_default", "RMSprop", [([0, 1], dict(lr=1e-2))]),
    ("rmsprop_centered_momentum", "RMSprop",
     [([0, 1], dict(lr=1e-2, alpha=0.9, momentum=0.8, centered=True, weight_decay=0.1))]),
    ("rmsprop_momentum_maximize", "RMSprop", [([0, 1], dict(lr=1e-2, momentum=0.5, maximize=True))]),
    ("adagrad_default", "Adagrad", [([0, 1], dict(lr=0.1))]),
    ("adagrad_lr_decay", "Adagrad",
     [([0, 1], dict(lr=0.1, lr_decay=0.1, weight_decay=0.05, initial_accumulator_value=0.5, eps=1e-8))]),
    ("adagrad_two_groups_maximize", "Adagrad", [([0], dict(lr=0.1, maximize=True)), ([1], dict(lr=0.3))]),
    ("lion_default", "Lion", [([0, 1], dict(lr=1e-2))]),
    ("lion_weight_decay_maximize", "Lion", [([0, 1], dict(lr=1e-2, betas=(0.95, 0.98), weight_decay=0.1,
                                                         maximize=True))]),
]


def json_options(options):
    return {key: list(value) if isinstance(value, tuple) else value for key, value in options.items()}


def run_optimizer(kind, groups, dtype):
    params = [torch.tensor(values, dtype=dtype, requires_grad=True) for values in INITIAL]
    # PyTorch's Adagrad fills its "sum" from the constructor's
    # initial_accumulator_value, not from the group's: pass it there too.
    defaults = {key: value for key, value in groups[0][1].items() if key == "initial_accumulator_value"}
    optimizer = OPTIMIZERS[kind]([dict(params=[params[i] for i in indices], **options)
                                  for indices, options in groups], **defaults)
    trajectory = []
    for step in range(STEPS):
        for param, grad in zip(params, GRADS[step]):
            param.grad = None if grad is None else torch.tensor(grad, dtype=dtype)
        optimizer.step()
        trajectory.append([param.detach().flatten().tolist() for param in params])
    state = {}
    order = [i for indices, _ in groups for i in indices]
    for position, param_index in enumerate(order):
        entry = optimizer.state.get(params[param_index], {})
        state[str(position)] = {
            name: (float(value) if name == "step" else value.flatten().tolist())
            for name, value in entry.items() if value is not None}
    return {"params": trajectory, "state": state}


def optimizer_cases():
    cases = []
    for name, kind, groups in OPTIMIZER_CASES:
        cases.append({
            "name": name, "optimizer": kind,
            "groups": [{"params": indices, "options": json_options(options)} for indices, options in groups],
            "f32": run_optimizer(kind, groups, torch.float32),
            "f64": run_optimizer(kind, groups, torch.float64),
        })
    return cases


# --- schedulers -------------------------------------------------------------

SCHEDULER_STEPS = 30
S = torch.optim.lr_scheduler


def hf_cosine(num_warmup_steps, num_training_steps, num_cycles=0.5):
    # transformers.optimization.get_cosine_schedule_with_warmup's lambda
    def lr_lambda(current_step):
        if current_step < num_warmup_steps:
            return float(current_step) / float(max(1, num_warmup_steps))
        progress = float(current_step - num_warmup_steps) / float(max(1, num_training_steps - num_warmup_steps))
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * float(num_cycles) * 2.0 * progress)))
    return lr_lambda


def hf_linear(num_warmup_steps, num_training_steps):
    # transformers.optimization.get_linear_schedule_with_warmup's lambda
    def lr_lambda(current_step):
        if current_step < num_warmup_steps:
            return float(current_step) / float(max(1, num_warmup_steps))
        return max(0.0, float(num_training_steps - current_step) /
                   float(max(1, num_training_steps - num_warmup_steps)))
    return lr_lambda


PLATEAU_METRICS = [1.0, 0.9, 0.95, 0.95, 0.96, 0.89, 0.9, 0.9, 0.9, 0.9, 0.5, 0.5, 0.6, 0.7, 0.8,
                   0.8, 0.8, 0.4, 0.41, 0.42, 0.43, 0.44, 0.45, 0.46, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3]

# (name, optimizer, lrs of its groups, make scheduler, what "momentum" records)
SCHEDULER_CASES = [
    ("lambda", "SGD", [0.1, 0.05], lambda o: S.LambdaLR(o, lambda epoch: 0.95 ** epoch), None),
    ("step", "SGD", [0.1, 0.05], lambda o: S.StepLR(o, step_size=7, gamma=0.5), None),
    ("multi_step", "SGD", [0.1], lambda o: S.MultiStepLR(o, milestones=[3, 8, 8, 15], gamma=0.3), None),
    ("exponential", "SGD", [0.1], lambda o: S.ExponentialLR(o, gamma=0.9), None),
    ("cosine_annealing", "SGD", [0.1, 0.05], lambda o: S.CosineAnnealingLR(o, T_max=10, eta_min=0.001), None),
    ("linear", "SGD", [0.1], lambda o: S.LinearLR(o, start_factor=0.25, end_factor=1.0, total_iters=8), None),
    ("sequential_linear_exponential", "SGD", [0.1, 0.05],
     lambda o: S.SequentialLR(o, [S.LinearLR(o, start_factor=0.1, total_iters=5), S.ExponentialLR(o, gamma=0.9)],
                              milestones=[5]), None),
    ("sequential_three", "SGD", [0.1],
     lambda o: S.SequentialLR(o, [S.LinearLR(o, start_factor=0.5, total_iters=4),
                                  S.CosineAnnealingLR(o, T_max=8, eta_min=0.01),
                                  S.StepLR(o, step_size=3, gamma=0.5)], milestones=[5, 15]), None),
    ("one_cycle_cos", "SGD_momentum", [0.1, 0.05],
     lambda o: S.OneCycleLR(o, max_lr=[0.1, 0.05], total_steps=SCHEDULER_STEPS), "momentum"),
    ("one_cycle_linear_three_phase", "Adam", [0.1],
     lambda o: S.OneCycleLR(o, max_lr=0.2, total_steps=SCHEDULER_STEPS, pct_start=0.25, anneal_strategy="linear",
                            three_phase=True, div_factor=10.0, final_div_factor=100.0,
                            base_momentum=0.8, max_momentum=0.9), "beta1"),
    ("plateau_min_rel", "SGD", [0.1, 0.05],
     lambda o: S.ReduceLROnPlateau(o, mode="min", factor=0.5, patience=2, cooldown=1, min_lr=[0.01, 0.002]),
     None),
    ("plateau_max_abs", "SGD", [0.1],
     lambda o: S.ReduceLROnPlateau(o, mode="max", factor=0.3, patience=1, threshold=0.05, threshold_mode="abs"),
     None),
    ("cosine_with_warmup", "SGD", [0.1, 0.05], lambda o: S.LambdaLR(o, hf_cosine(5, 25)), None),
    ("cosine_with_warmup_cycles", "SGD", [0.1], lambda o: S.LambdaLR(o, hf_cosine(4, 28, num_cycles=1.5)), None),
    ("linear_with_warmup", "SGD", [0.1, 0.05], lambda o: S.LambdaLR(o, hf_linear(5, 25)), None),
]


def make_scheduler_optimizer(kind, lrs):
    params = [torch.zeros(1, requires_grad=True) for _ in lrs]
    groups = [dict(params=[p], lr=lr) for p, lr in zip(params, lrs)]
    if kind == "SGD":
        return torch.optim.SGD(groups)
    if kind == "SGD_momentum":
        return torch.optim.SGD(groups, momentum=0.9)
    return torch.optim.Adam(groups)


def scheduler_cases():
    cases = []
    for name, kind, lrs, make, momentum in SCHEDULER_CASES:
        optimizer = make_scheduler_optimizer(kind, lrs)
        scheduler = make(optimizer)
        plateau = isinstance(scheduler, S.ReduceLROnPlateau)

        def current_lrs():
            return [group["lr"] for group in optimizer.param_groups]

        def current_momentum():
            if momentum == "momentum":
                return [group["momentum"] for group in optimizer.param_groups]
            return [group["betas"][0] for group in optimizer.param_groups]

        lr_sequence = [current_lrs()]
        momentum_sequence = [current_momentum()] if momentum else []
        for step in range(SCHEDULER_STEPS):
            optimizer.step()
            if plateau:
                scheduler.step(PLATEAU_METRICS[step])
            else:
                scheduler.step()
                assert scheduler.get_last_lr() == current_lrs()
            lr_sequence.append(current_lrs())
            if momentum:
                momentum_sequence.append(current_momentum())
        case = {"name": name, "optimizer": kind, "group_lrs": lrs, "lrs": lr_sequence}
        if momentum:
            case["momentum"] = momentum_sequence
        cases.append(case)
    return cases


# --- gradient clipping ------------------------------------------------------

CLIP_CASES = [
    ("norm2_clips", 1.0, 2.0),
    ("norm2_no_clip", 100.0, 2.0),
    ("norm1", 0.5, 1.0),
    ("norm3", 0.5, 3.0),
    ("inf", 0.3, math.inf),
]


def clip_cases():
    grads = [fixed_values(shape) for shape in SHAPES + [[3]]]
    cases = []
    for name, max_norm, norm_type in CLIP_CASES:
        params = [torch.zeros(len(torch.tensor(g).flatten()), requires_grad=True) for g in grads]
        params.append(torch.zeros(2, requires_grad=True))  # no gradient: skipped
        for param, grad in zip(params, grads):
            param.grad = torch.tensor(grad, dtype=torch.float32).flatten()
        total = torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type)
        cases.append({"name": name, "max_norm": max_norm, "norm_type": "inf" if math.isinf(norm_type) else norm_type,
                      "total_norm": float(total), "clipped": [p.grad.tolist() for p in params[:-1]]})
    return {"grads": [torch.tensor(g).flatten().tolist() for g in grads], "cases": cases}


def main():
    golden = {
        "shapes": SHAPES, "initial_params": [torch.tensor(v, dtype=torch.float64).flatten().tolist() for v in INITIAL],
        "grads": [[None if g is None else torch.tensor(g, dtype=torch.float64).flatten().tolist() for g in step]
                  for step in GRADS],
        "optimizers": optimizer_cases(),
        "plateau_metrics": PLATEAU_METRICS,
        "schedulers": scheduler_cases(),
        "clip_grad_norm": clip_cases(),
    }
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden_optim.json")
    with open(path, "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

"""PyTorch 2's side of the comparison: the training rows of training_spec.h
(MLP SGD momentum, MLP AdamW, CNN SGD, GPT AdamW; f32 and bf16 autocast),
eager or under torch.compile, timed the way worker.cpp times the C++ workers
and reported in the same JSON. The models, batches, initial parameters and
optimizer settings are training_spec.{h,cpp}'s, rebuilt here bit for bit
(SplitMix64 seeded by FNV-1a of each parameter's name), so the first losses
agree with ember's and libtorch's to rounding. Run by the driver
compare_libtorch (--torch2-python) in a venv that scripts/bench.sh creates:
  python worker_torch2.py [--compile] --threads N --min-time S --loss-steps K --name NAME | --list
"""
import argparse
import json
import math
import resource
import statistics
import sys
import time
import warnings

# A venv without NumPy is enough here; say nothing about it.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
MIX1 = 0xBF58476D1CE4E5B9
MIX2 = 0x94D049BB133111EB


def signed64(value):
    """The int64 with the same bits as the uint64 `value` (torch has no uint64 arithmetic)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def logical_shift_right(z, bits):
    return (z >> bits) & ((1 << (64 - bits)) - 1)


def splitmix_stream(seed, count):
    """The first `count` outputs of training_spec.cpp's Generator(seed), as int64 bit patterns.
    int64 multiplication wraps modulo 2^64 like the C++ uint64 arithmetic."""
    steps = torch.arange(1, count + 1, dtype=torch.int64)
    z = signed64(seed & MASK64) + steps * signed64(GOLDEN)
    z = (z ^ logical_shift_right(z, 30)) * signed64(MIX1)
    z = (z ^ logical_shift_right(z, 27)) * signed64(MIX2)
    return z ^ logical_shift_right(z, 31)


def symmetric(seed, count):
    """Generator::symmetric: uniform in [-1, 1) from the top 24 bits, exact in f32."""
    top = logical_shift_right(splitmix_stream(seed, count), 40)
    return (top - (1 << 23)).to(torch.float32) / float(1 << 23)


def below(seed, count, bound):
    """Generator::below: next() % bound, unsigned (a few thousand values: plain Python)."""
    values, state = [], seed
    for _ in range(count):
        state = (state + GOLDEN) & MASK64
        z = state
        z = ((z ^ (z >> 30)) * MIX1) & MASK64
        z = ((z ^ (z >> 27)) * MIX2) & MASK64
        values.append((z ^ (z >> 31)) % bound)
    return values


def name_seed(name):
    """FNV-1a of the name's bytes."""
    value = 0xCBF29CE484222325
    for byte in name.encode():
        value = ((value ^ byte) * 0x100000001B3) & MASK64
    return value


def initial_parameter(name, shape):
    """training_spec.cpp's initial_parameter."""
    count = math.prod(shape)
    if len(shape) == 1 and name.endswith("bias"):
        return torch.zeros(shape)
    if len(shape) == 1 and name.endswith("weight"):
        return torch.ones(shape)
    fan_in = torch.tensor(float(count // shape[0]), dtype=torch.float32)
    bound = 1.0 / torch.sqrt(fan_in)  # f32 arithmetic, as the C++ computes it
    return (bound * symmetric(name_seed(name), count)).reshape(shape)


def initialise(model):
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            parameter.copy_(initial_parameter(name, list(parameter.shape)))


def classification_batch(input_shape, classes):
    inputs = symmetric(1, math.prod(input_shape)).reshape(input_shape)
    targets = torch.tensor(below(2, input_shape[0], classes), dtype=torch.int64)
    return inputs, targets


def mlp():
    return nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))


def cnn():
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


GPT = dict(batch=16, sequence=128, vocabulary=65, layers=4, model_dim=256, heads=4, mlp_ratio=4)


class CausalSelfAttention(nn.Module):
    """nanoGPT's attention as PyTorch 2 users run it: scaled_dot_product_attention (ember's
    TransformerBlock calls its own; libtorch 1.13 spells out the composite)."""

    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(width, 3 * width)
        self.c_proj = nn.Linear(width, width)

    def forward(self, x):
        batch, sequence, width = x.shape
        q, k, v = self.c_attn(x).split(width, dim=2)
        q, k, v = (t.view(batch, sequence, self.heads, width // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(batch, sequence, width))


class Mlp(nn.Module):
    def __init__(self, width, ratio):
        super().__init__()
        self.c_fc = nn.Linear(width, ratio * width)
        self.c_proj = nn.Linear(ratio * width, width)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, width, heads, ratio):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = Mlp(width, ratio)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt(nn.Module):
    """The parameter names of training_spec.h's GptSpec (nanoGPT's, no "transformer." prefix); the head is
    tied to the token embedding."""

    def __init__(self):
        super().__init__()
        width = GPT["model_dim"]
        self.wte = nn.Embedding(GPT["vocabulary"], width)
        self.wpe = nn.Embedding(GPT["sequence"], width)
        self.h = nn.ModuleList(Block(width, GPT["heads"], GPT["mlp_ratio"]) for _ in range(GPT["layers"]))
        self.ln_f = nn.LayerNorm(width)

    def forward(self, tokens):
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1], dtype=torch.int64))
        for block in self.h:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)


def gpt_batch():
    rows = below(3, GPT["batch"] * (GPT["sequence"] + 1), GPT["vocabulary"])
    text = torch.tensor(rows, dtype=torch.int64).view(GPT["batch"], GPT["sequence"] + 1)
    return text[:, :-1].contiguous(), text[:, 1:].contiguous()


def sgd(model):
    return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def adamw(model):
    return torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)


def training_step(model, make_optimizer, inputs, targets, bf16, compiled):
    """zero_grad (to none), forward (under bf16 autocast for the _bf16 rows, logits cast back to f32, as
    ember's Accelerator does), cross-entropy, backward, step; returns the loss. torch.compile gets the
    forward and the loss; backward runs its compiled graph, the optimizer stays eager."""
    initialise(model)
    optimizer = make_optimizer(model)

    def forward_loss(inputs, targets):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(inputs).float()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))

    loss_of = torch.compile(forward_loss) if compiled else forward_loss

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = loss_of(inputs, targets)
        loss.backward()
        optimizer.step()
        return loss.item()

    return step


def workloads(compiled):
    def mlp_row(make_optimizer, bf16):
        return lambda: training_step(mlp(), make_optimizer, *classification_batch([128, 784], 10), bf16, compiled)

    def cnn_row(bf16):
        return lambda: training_step(cnn(), sgd, *classification_batch([64, 1, 28, 28], 10), bf16, compiled)

    def gpt_row(bf16):
        return lambda: training_step(Gpt(), adamw, *gpt_batch(), bf16, compiled)

    rows = {}
    for suffix, bf16 in (("", False), ("_bf16", True)):
        rows["train_mlp_sgd" + suffix] = mlp_row(sgd, bf16)
        rows["train_mlp_adamw" + suffix] = mlp_row(adamw, bf16)
        rows["train_cnn_sgd" + suffix] = cnn_row(bf16)
        rows["train_gpt_adamw" + suffix] = gpt_row(bf16)
    return rows


BATCHES = 5


def time_batch(step, count):
    start = time.perf_counter()
    for _ in range(count):
        step()
    return (time.perf_counter() - start) / count


def time_step(step, min_seconds):
    """worker.cpp's time_step: warm-up, batch sizes grown until a batch fills its share of
    min_seconds, then the median mean of 5 batches. Returns (seconds per step, steps timed)."""
    start, warm_steps = time.perf_counter(), 0
    while warm_steps < 2 or time.perf_counter() - start < 0.1 * min_seconds:
        step()
        warm_steps += 1
    batch_seconds, per_batch = min_seconds / BATCHES, 1
    while True:
        seconds = time_batch(step, per_batch) * per_batch
        if seconds >= 0.5 * batch_seconds:
            break
        growth = min(10.0, 1.2 * batch_seconds / max(seconds, 1e-9))
        per_batch = max(per_batch + 1, int(per_batch * growth))
    means = [time_batch(step, per_batch) for _ in range(BATCHES)]
    return statistics.median(means), per_batch * BATCHES


def resident_bytes():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def measure(framework, name, make_step, options):
    try:
        start_rss = resident_bytes()
        step = make_step()
        losses = [step() for _ in range(options.loss_steps)]
        seconds, steps = time_step(step, options.min_time)
        return {"name": name, "ns_per_step": seconds * 1e9, "steps": steps, "losses": losses,
                "start_rss_bytes": start_rss,
                "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    except Exception as error:  # a row that does not compile is reported, not fatal
        message = f"{type(error).__name__}: {error}".splitlines()[0]
        print(f"{framework} worker: {name} failed: {message}", file=sys.stderr)
        return {"name": name, "error": message}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compile", action="store_true", help="torch.compile the forward and loss")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--min-time", type=float, default=0.2)
    parser.add_argument("--filter", default="")
    parser.add_argument("--name", default="")
    parser.add_argument("--loss-steps", type=int, default=5)
    parser.add_argument("--list", action="store_true")
    options = parser.parse_args()
    framework = f"torch {torch.__version__}" + (" compile" if options.compile else "")
    rows = workloads(options.compile)
    if options.list:
        print(json.dumps({"framework": framework, "workloads": list(rows)}, indent=2))
        return 0
    if options.threads > 0:
        torch.set_num_threads(options.threads)
    results = [measure(framework, name, make_step, options) for name, make_step in rows.items()
               if options.filter in name and (not options.name or name == options.name)]
    print(json.dumps({"framework": framework, "threads": options.threads, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The GPT training step of bench_cuda.cpp in PyTorch eager, for the ratio in
bench/RESULTS.md: the same model (nanoGPT's, head tied to the token
embedding, biases, exact GELU, no dropout), the same initial values and the
same batch (bench/compare_libtorch/training_spec.cpp's SplitMix64 scheme,
reproduced here with numpy), bf16 autocast, AdamW, and PyTorch's fused
attention (scaled_dot_product_attention with is_causal). Prints the same
"name: value" lines as bench_cuda. Run by scripts/gpu-check.sh."""
import math
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH, SEQUENCE, VOCABULARY, LAYERS, MODEL_DIM, HEADS = 8, 1024, 50304, 12, 768, 12
MASK64 = (1 << 64) - 1


def splitmix_stream(seed, count):
    """The first `count` outputs of training_spec.cpp's SplitMix64 from `seed`."""
    with np.errstate(over="ignore"):
        steps = np.arange(1, count + 1, dtype=np.uint64)
        z = np.uint64(seed) + steps * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def name_seed(name):
    value = 0xCBF29CE484222325
    for byte in name.encode():
        value = ((value ^ byte) * 0x100000001B3) & MASK64
    return value


def initial_parameter(name, shape):
    count = math.prod(shape)
    if len(shape) == 1:
        return np.zeros(count, np.float32) if name.endswith("bias") else np.ones(count, np.float32)
    bound = np.float32(1.0) / np.sqrt(np.float32(count // shape[0]))
    top = (splitmix_stream(name_seed(name), count) >> np.uint64(40)).astype(np.int64) - (1 << 23)
    return (bound * (top.astype(np.float32) / np.float32(1 << 23))).astype(np.float32).reshape(shape)


def token_batch():
    stream = splitmix_stream(3, BATCH * (SEQUENCE + 1)) % np.uint64(VOCABULARY)
    text = stream.astype(np.int64).reshape(BATCH, SEQUENCE + 1)
    return torch.from_numpy(text[:, :-1].copy()), torch.from_numpy(text[:, 1:].copy())


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(MODEL_DIM)
        self.attn = nn.Module()
        self.attn.c_attn = nn.Linear(MODEL_DIM, 3 * MODEL_DIM)
        self.attn.c_proj = nn.Linear(MODEL_DIM, MODEL_DIM)
        self.ln_2 = nn.LayerNorm(MODEL_DIM)
        self.mlp = nn.Module()
        self.mlp.c_fc = nn.Linear(MODEL_DIM, 4 * MODEL_DIM)
        self.mlp.c_proj = nn.Linear(4 * MODEL_DIM, MODEL_DIM)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.attn.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (y.view(b, t, HEADS, c // HEADS).transpose(1, 2) for y in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x))))


class Gpt(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCABULARY, MODEL_DIM)
        self.wpe = nn.Embedding(SEQUENCE, MODEL_DIM)
        self.h = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(MODEL_DIM)

    def forward(self, tokens):
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.h:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)


def main():
    if not torch.cuda.is_available():
        print("gpt_pytorch: no CUDA GPU: nothing measured")
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False
    model = Gpt()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            parameter.copy_(torch.from_numpy(initial_parameter(name, tuple(parameter.shape))))
    model = model.cuda()
    inputs, targets = (t.cuda() for t in token_batch())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(inputs)
        loss = F.cross_entropy(logits.float().view(-1, VOCABULARY), targets.view(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)
        return loss

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    iterations = 10
    for _ in range(iterations):
        loss = step()
    torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / iterations
    print(f"gpt_step_loss_pytorch: {loss.item():.4f}")
    print(f"gpt_step_pytorch: {BATCH * SEQUENCE / seconds:.0f} tokens/s ({seconds * 1e3:.1f} ms per step)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

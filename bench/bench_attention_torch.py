"""PyTorch's CPU scaled_dot_product_attention at bench_attention's shapes.

Causal, head_dim 64, T = 128 and 512 (batch 4, 8 heads) and 2048 (batch 1,
8 heads), f32 and bf16, forward and forward+backward, one thread unless
--threads says otherwise. Prints one line per case, "attention/torch/<dtype>/
T=<T>/<pass> <calls per second>", the median over --repeats timed batches.
bench/bench_attention.sh runs it interleaved with bench_attention.
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F


def calls_per_second(step, min_time):
    step()  # warm-up: first touch, kernel selection
    rates = []
    for _ in range(3):
        calls, start = 0, time.perf_counter()
        while True:
            step()
            calls += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_time / 3:
                break
        rates.append(calls / elapsed)
    return statistics.median(rates)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--min-time", type=float, default=0.3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for dtype, name in ((torch.float32, "float32"), (torch.bfloat16, "bfloat16")):
        for length in (128, 512, 2048):
            batch = 1 if length >= 2048 else 4
            shape = (batch, 8, length, 64)
            generator = torch.Generator().manual_seed(length)
            q, k, v, grad = (torch.rand(shape, generator=generator).mul(2).sub(1).to(dtype) for _ in range(4))
            for backward in (False, True):
                leaves = [t.clone().requires_grad_(backward) for t in (q, k, v)]

                def step():
                    y = F.scaled_dot_product_attention(*leaves, is_causal=True)
                    if backward:
                        (y * grad).sum().backward()

                rate = calls_per_second(step, args.min_time)
                print(f"attention/torch/{name}/T={length}/{'fwd+bwd' if backward else 'fwd'} {rate:.3f}", flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Plot an example's training metrics (JSON lines) as a PNG.

Usage: scripts/plot_metrics.py metrics.jsonl out.png [--title TEXT]

Reads what examples/support/metrics_writer.h writes (`--metrics-out` of
train_fashion_mnist and train_char_gpt): one JSON object per line with a
"split" ("train", "test", "validation", ...), a "step" and any of "loss" and
"accuracy". Draws loss against step, one curve per split, and beside it
accuracy when any record has one. Needs Debian's python3-matplotlib (run with
/usr/bin/python3).
"""
import argparse
import json
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")  # files only, no display needed
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)


def read_series(path):
    """{metric: {split: ([steps], [values])}} from a JSON-lines file."""
    series = defaultdict(lambda: defaultdict(lambda: ([], [])))
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise SystemExit(f"plot_metrics: {path}:{number}: not JSON ({error})")
            if "step" not in record:
                raise SystemExit(f"plot_metrics: {path}:{number}: record has no \"step\"")
            split = record.get("split", "train")
            for metric in ("loss", "accuracy"):
                if metric in record:
                    steps, values = series[metric][split]
                    steps.append(record["step"])
                    values.append(record[metric])
    return series


def plot(series, out_path, title):
    metrics = [metric for metric in ("loss", "accuracy") if metric in series]
    if not metrics:
        raise SystemExit("plot_metrics: no \"loss\" or \"accuracy\" values to plot")
    figure, axes = plt.subplots(1, len(metrics), figsize=(6 * len(metrics), 4), squeeze=False)
    for axis, metric in zip(axes[0], metrics):
        for split, (steps, values) in sorted(series[metric].items()):
            # Sparse splits (one evaluation per epoch) get markers so single points show.
            axis.plot(steps, values, label=split, marker="o" if len(steps) < 50 else None)
        axis.set_xlabel("step")
        axis.set_ylabel(metric)
        axis.grid(alpha=0.3)
        axis.legend()
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(out_path, dpi=100)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("metrics", help="JSON-lines file written by an example's --metrics-out")
    parser.add_argument("out", help="PNG file to write")
    parser.add_argument("--title", default="", help="figure title")
    arguments = parser.parse_args()
    plot(read_series(arguments.metrics), arguments.out, arguments.title)
    print(f"wrote {arguments.out}")


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Plot training metrics (JSON lines or CSV) as a PNG.

Usage: scripts/plot_metrics.py METRICS out.png [--title TEXT]

METRICS is read by its extension:
- .jsonl: one JSON object per line. Either what examples/support/metrics_writer.h
  writes (`--metrics-out` of train_fashion_mnist and train_char_gpt): a
  "split" ("train", "test", "validation", ...), a "step" and any of "loss"
  and "accuracy", drawn as one curve per split; or what the JSON-lines
  tracker writes (distributed/accelerator/trackers.h): "step" (when logged),
  "time", then the logged values by name.
- .csv: what the CSV tracker writes: a header ("step", "time", then the
  names) and one row per log call, empty where a call had no such value.

A tracker's numeric values are curves named after them, except "step",
"time" and "epoch": names with "loss" in them share the loss panel, names
with "accuracy" the accuracy panel, and any other name (a learning rate, say)
gets a panel of its own. The x axis is "step", or the record's position in
the file for a record logged without one. Text values are not plotted; a
null (how JSON writes NaN) is a gap. Needs Debian's python3-matplotlib (run
with /usr/bin/python3).
"""
import argparse
import csv
import json
import math
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")  # files only, no display needed
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

EXAMPLE_METRICS = ("loss", "accuracy")
NOT_CURVES = ("step", "time", "epoch")


def read_json_lines(path):
    """[(line number, record)] from a JSON-lines file."""
    records = []
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                records.append((number, json.loads(line)))
            except json.JSONDecodeError as error:
                raise SystemExit(f"plot_metrics: {path}:{number}: not JSON ({error})")
    return records


def read_csv(path):
    """[(line number, record)] from a CSV file with a header; empty fields are left out."""
    records = []
    with open(path, encoding="utf-8", newline="") as rows:
        reader = csv.DictReader(rows)
        for row in reader:
            if None in row:  # DictReader's key for fields beyond the header
                raise SystemExit(f"plot_metrics: {path}:{reader.line_num}: more fields than the header names")
            record = {name: number_or_text(field) for name, field in row.items() if field not in ("", None)}
            records.append((reader.line_num, record))
    return records


def number_or_text(field):
    try:
        return int(field)
    except ValueError:
        pass
    try:
        return float(field)
    except ValueError:
        return field


def numeric(value):
    """The value as a float when it is a number (null: NaN, a gap), else None."""
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def panel_of(name):
    for metric in EXAMPLE_METRICS:
        if metric in name:
            return metric
    return name


def read_series(path):
    """{panel: {curve: ([steps], [values])}} from a metrics file, by its extension."""
    if path.endswith(".jsonl"):
        records = read_json_lines(path)
    elif path.endswith(".csv"):
        records = read_csv(path)
    else:
        raise SystemExit(f"plot_metrics: {path}: unknown kind of file; expected .jsonl or .csv")
    series = defaultdict(lambda: defaultdict(lambda: ([], [])))
    for position, (number, record) in enumerate(records):
        if "split" in record:  # an example's record: one curve per split
            if "step" not in record:
                raise SystemExit(f"plot_metrics: {path}:{number}: record has no \"step\"")
            points = {(metric, record["split"]): record[metric] for metric in EXAMPLE_METRICS if metric in record}
        else:  # a tracker's record: one curve per value
            points = {(panel_of(name), name): value for name, value in record.items() if name not in NOT_CURVES}
        step = record.get("step", position)
        for (panel, curve), value in points.items():
            value = numeric(value)
            if value is not None:
                steps, values = series[panel][curve]
                steps.append(step)
                values.append(value)
    return series


def plot(series, out_path, title):
    if not series:
        raise SystemExit("plot_metrics: no numeric values to plot")
    panels = [metric for metric in EXAMPLE_METRICS if metric in series]
    panels += sorted(panel for panel in series if panel not in EXAMPLE_METRICS)
    figure, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4), squeeze=False)
    for axis, panel in zip(axes[0], panels):
        for curve, (steps, values) in sorted(series[panel].items()):
            # Sparse curves (one evaluation per epoch) get markers so single points show.
            axis.plot(steps, values, label=curve, marker="o" if len(steps) < 50 else None)
        axis.set_xlabel("step")
        axis.set_ylabel(panel)
        axis.grid(alpha=0.3)
        axis.legend()
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(out_path, dpi=100)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("metrics", help="an example's --metrics-out (.jsonl) or a tracker's file (.jsonl, .csv)")
    parser.add_argument("out", help="PNG file to write")
    parser.add_argument("--title", default="", help="figure title")
    arguments = parser.parse_args()
    plot(read_series(arguments.metrics), arguments.out, arguments.title)
    print(f"wrote {arguments.out}")


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Checks scripts/plot_metrics.py on a file a tracker wrote (run by
tests/distributed/test_trackers.cpp).

Usage: check_plot_metrics.py PLOT_SCRIPT METRICS EXPECTED OUT_PNG

Runs the script as a user would (METRICS to OUT_PNG) and checks that it drew
a PNG, then checks that what it read from METRICS is exactly EXPECTED, a JSON
file {panel: {curve: [[steps], [values]]}} (null for a NaN value). Exit
status 0 when both hold; otherwise a message saying what differs.
"""
import importlib.util
import json
import math
import subprocess
import sys


def same(read, expected):
    """Whether read_series' result equals EXPECTED, NaN matching null."""
    if set(read) != set(expected):
        return False
    for panel, curves in expected.items():
        if set(read[panel]) != set(curves):
            return False
        for curve, (steps, values) in curves.items():
            read_steps, read_values = read[panel][curve]
            if list(read_steps) != steps or len(read_values) != len(values):
                return False
            for got, want in zip(read_values, values):
                if not (math.isnan(got) if want is None else got == want):
                    return False
    return True


def main():
    script, metrics, expected_path, out_png = sys.argv[1:5]
    run = subprocess.run([sys.executable, script, metrics, out_png], capture_output=True, text=True, timeout=120)
    if run.returncode != 0:
        raise SystemExit(f"plot_metrics.py exited with {run.returncode}: {run.stdout}{run.stderr}")
    with open(out_png, "rb") as png:
        if png.read(8) != b"\x89PNG\r\n\x1a\n":
            raise SystemExit(f"{out_png} is not a PNG")

    specification = importlib.util.spec_from_file_location("plot_metrics", script)
    plot_metrics = importlib.util.module_from_spec(specification)
    specification.loader.exec_module(plot_metrics)
    read = {panel: dict(curves) for panel, curves in plot_metrics.read_series(metrics).items()}
    with open(expected_path, encoding="utf-8") as file:
        expected = json.load(file)
    if not same(read, expected):
        raise SystemExit(f"plot_metrics.py read {read} from {metrics}, expected {expected}")


if __name__ == "__main__":
    main()

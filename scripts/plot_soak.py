#!/usr/bin/env python3
"""Draws scripts/soak.sh's run: resident memory of each process over time
(from the soak_process<r>.csv files the soak scenario writes), and prints
whether memory and open descriptors stayed flat after warm-up: their change
over the last 90% of the run. Exits 1 when resident memory grew by more than
5% (or 16 MiB) or the descriptors grew at all after warm-up.

Usage: plot_soak.py SOAK_DIR OUT.png"""
import csv
import glob
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_process(path):
    with open(path, newline="") as file:
        return [{key: float(value) for key, value in row.items()} for row in csv.DictReader(file)]


def main(directory, out):
    paths = sorted(glob.glob(os.path.join(directory, "soak_process*.csv")))
    if not paths:
        sys.exit(f"plot_soak.py: no soak_process*.csv in {directory}")
    figure, axes = plt.subplots(figsize=(8, 4.5))
    flat = True
    for path in paths:
        rows = read_process(path)
        name = os.path.basename(path)[len("soak_"):-len(".csv")]
        minutes = [row["seconds"] / 60 for row in rows]
        resident = [row["resident_kib"] / 1024 for row in rows]
        axes.plot(minutes, resident, label=name)
        warm = rows[len(rows) // 10:]
        if len(warm) < 2:
            continue
        growth = warm[-1]["resident_kib"] / 1024 - min(r["resident_kib"] for r in warm) / 1024
        fds = [r["open_fds"] for r in warm]
        ok = growth <= max(16, 0.05 * warm[0]["resident_kib"] / 1024) and max(fds) <= fds[0]
        flat = flat and ok
        print(f"{name}: {rows[-1]['step']:.0f} steps in {rows[-1]['seconds'] / 60:.1f} min; after warm-up resident "
              f"{min(r['resident_kib'] for r in warm) / 1024:.1f}-{max(r['resident_kib'] for r in warm) / 1024:.1f} MiB "
              f"(end {warm[-1]['resident_kib'] / 1024:.1f}), open descriptors {min(fds):.0f}-{max(fds):.0f}: "
              f"{'flat' if ok else 'GROWING'}")
    axes.set_xlabel("minutes")
    axes.set_ylabel("resident memory (MiB)")
    axes.set_title("scripts/soak.sh: resident memory per process")
    axes.set_ylim(bottom=0)
    axes.legend()
    figure.tight_layout()
    figure.savefig(out, dpi=100)
    print(f"wrote {out}")
    return 0 if flat else 1


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))

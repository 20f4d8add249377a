#!/usr/bin/env python3
"""Wall time and peak RSS of whole programs, side by side (bench/RESULTS.md,
"CUDA build on a machine without a GPU"): each labelled command runs in a
fresh process, the labels interleaved round by round, and the medians are
printed with each label's ratio to the first one.

  scripts/startup_memory.py --rounds 9 \\
      before="/work/main/build/tools/ember --help" after="build/tools/ember --help"
"""
import argparse
import os
import shlex
import statistics
import subprocess
import time


def run_once(command):
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{shlex.join(command)} failed (status {status})")
    return wall, usage.ru_maxrss / 1024.0  # ru_maxrss is in KiB on Linux


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("runs", nargs="+", help='label="command with arguments"')
    args = parser.parse_args()
    runs = [(text.split("=", 1)[0], shlex.split(text.split("=", 1)[1])) for text in args.runs]
    for _, command in runs:  # warm the page cache: the first run of each would pay for the disk
        run_once(command)
    walls = {label: [] for label, _ in runs}
    rss = {label: [] for label, _ in runs}
    for _ in range(args.rounds):
        for label, command in runs:
            wall, peak = run_once(command)
            walls[label].append(wall)
            rss[label].append(peak)
    first = runs[0][0]
    print(f"{'label':<12} {'wall ms':>9} {'x ' + first:>10} {'peak RSS MiB':>13} {'x ' + first:>10}")
    for label, _ in runs:
        wall, peak = statistics.median(walls[label]), statistics.median(rss[label])
        print(f"{label:<12} {wall * 1e3:>9.1f} {wall / statistics.median(walls[first]):>10.2f} "
              f"{peak:>13.1f} {peak / statistics.median(rss[first]):>10.2f}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Checks that examples/accelerate_fashion_mnist.cpp is examples/train_fashion_mnist.cpp
plus Accelerator lines, minus explicit device moves, and nothing else (issue 6's
four-line promise, kept honest). The files' opening comment blocks are skipped.

Rules, line by line of a difflib comparison:
- an added (or changed-to) line must mention the accelerator, or be a removed
  line with its `.to(device)` moves deleted;
- a removed (or changed-from) line must be a device line (it mentions `device`),
  or be replaced in the same hunk by Accelerator lines (and nothing else new).

Usage: check_accelerate_diff.py BASE ACCELERATED; exits 1 and prints the
offending lines when a rule is broken."""
import difflib
import sys


def body(path):
    with open(path, encoding="utf-8") as file:
        lines = file.read().splitlines()
    start = 0
    while start < len(lines) and lines[start].startswith("//"):
        start += 1
    return lines[start:]


def mentions_accelerator(line):
    return "accelerator" in line.lower()


def main(base_path, accelerated_path):
    base, accelerated = body(base_path), body(accelerated_path)
    problems, added_count, removed_count = [], 0, 0
    matcher = difflib.SequenceMatcher(a=base, b=accelerated, autojunk=False)
    for tag, b1, b2, a1, a2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        removed, added = base[b1:b2], accelerated[a1:a2]
        removed_count += len(removed)
        added_count += len(added)
        without_moves = {line.replace(".to(device)", "") for line in removed}
        for line in added:
            if not (mentions_accelerator(line) or line in without_moves):
                problems.append(f"added line {a1 + 1 + added.index(line)} is not an Accelerator line: {line.strip()}")
        new_lines = [line for line in added if line not in without_moves]
        replaced_by_accelerator = bool(new_lines) and all(mentions_accelerator(line) for line in new_lines)
        for line in removed:
            if not ("device" in line or replaced_by_accelerator):
                problems.append(f"removed line is neither a device move nor replaced by the Accelerator: {line.strip()}")
    print(f"{added_count} lines added or changed, {removed_count} removed")
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))

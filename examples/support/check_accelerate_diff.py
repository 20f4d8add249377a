#!/usr/bin/env python3
"""Checks that examples/accelerate_fashion_mnist.cpp is examples/train_fashion_mnist.cpp
plus Accelerator lines, minus explicit device moves, and nothing else (issue 6's
four-line promise, kept honest). The files' opening comment blocks are skipped.

Rules, line by line of a difflib comparison:
- an added (or changed-to) line must mention the accelerator, or be a removed
  line with its `.to(device)` moves deleted;
- a removed (or changed-from) line must be a device line (it mentions `device`),
  or be replaced in the same hunk by Accelerator lines (and nothing else new).

With README, also checks that the README's ```diff block is this diff
(unified, the opening comments left out), so the README cannot drift from
the examples; --print-readme-diff prints that block.

Usage: check_accelerate_diff.py BASE ACCELERATED [README | --print-readme-diff];
exits 1 and prints the offending lines when a rule is broken."""
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


def readme_diff(base_path, accelerated_path):
    lines = difflib.unified_diff(body(base_path), body(accelerated_path), fromfile="examples/train_fashion_mnist.cpp",
                                 tofile="examples/accelerate_fashion_mnist.cpp", lineterm="")
    return "\n".join(lines)


def readme_block(readme_path):
    with open(readme_path, encoding="utf-8") as file:
        text = file.read()
    start = text.index("```diff\n") + len("```diff\n")
    return text[start:text.index("\n```", start)]


def main(base_path, accelerated_path, readme_path=None):
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
    if readme_path and readme_block(readme_path) != readme_diff(base_path, accelerated_path):
        problems.append(f"the diff block in {readme_path} is not the examples' diff: regenerate it with "
                        "--print-readme-diff")
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    if sys.argv[3:] == ["--print-readme-diff"]:
        print(readme_diff(sys.argv[1], sys.argv[2]))
        sys.exit(0)
    sys.exit(main(*sys.argv[1:]))

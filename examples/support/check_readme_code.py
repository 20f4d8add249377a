#!/usr/bin/env python3
"""Checks that every C++ block of README.md is code that an example compiles.

A block passes when its non-blank lines, stripped of indentation, appear in
that order (not necessarily next to each other) in one file of examples/:
the README may leave out the surrounding program (main, checks, includes),
but every line it shows is a line the build compiles and ctest runs
(STYLE.md, principle 11). Run by ctest as examples.readme_code_blocks.

Usage: check_readme_code.py README.md EXAMPLES_DIR
"""
import pathlib
import re
import sys


def code_blocks(readme_text):
    return re.findall(r"^```cpp\n(.*?)^```", readme_text, flags=re.MULTILINE | re.DOTALL)


def stripped_lines(text):
    return [line.strip() for line in text.splitlines() if line.strip()]


def is_subsequence(needle, haystack):
    position = 0
    for line in haystack:
        if position < len(needle) and line == needle[position]:
            position += 1
    return position == len(needle)


def main(readme_path, examples_dir):
    sources = {path: stripped_lines(path.read_text(encoding="utf-8"))
               for path in sorted(pathlib.Path(examples_dir).rglob("*"))
               if path.suffix in (".cpp", ".h", ".cu")}
    blocks = code_blocks(pathlib.Path(readme_path).read_text(encoding="utf-8"))
    failures = 0
    for number, block in enumerate(blocks, start=1):
        lines = stripped_lines(block)
        if not any(is_subsequence(lines, source) for source in sources.values()):
            failures += 1
            print(f"README.md C++ block {number} is in no example, line for line:\n{block}")
    print(f"{len(blocks) - failures} of {len(blocks)} C++ blocks of README.md found in {examples_dir}")
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))

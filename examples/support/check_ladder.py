#!/usr/bin/env python3
"""Keeps the ladder of examples (examples/ladder/README.md) a ladder.

  check_ladder.py diff LADDER_DIR
    Each step's file differs from the one before by at most its line budget
    (lines added or changed, lines removed; the opening comment blocks are
    skipped), so that no step drifts into a rewrite.
  check_ladder.py losses EMBER BIN_DIR
    Runs ladder_1 alone and ladder_2 ... ladder_6 with `EMBER launch
    --nproc-per-node 2`, and checks that each prints the losses of the step
    before, within the tolerance below (0: the same digits).

Exits 1 and says which step broke which rule."""
import difflib
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_accelerate_diff import body  # noqa: E402  (the same skipping of opening comments)

# Step n: (most lines added or changed, most lines removed) against step n - 1.
BUDGETS = {
    2: (15, 5),    # join the group, take this rank's share, all-reduce each gradient, print the mean loss
    3: (60, 10),   # buckets filled by gradient hooks, all-reduced during backward
    4: (35, 15),   # reduce-scatter instead of all-reduce, optimizer over the shards, all-gather
    5: (8, 3),     # autocast around the forward, the loss in f32
    6: (10, 90),   # the Accelerator; every by-hand line of steps 2 to 5 goes
}

# Step n's losses against step n - 1's, as a relative difference.
TOLERANCES = {
    # The same sums in another order: one process adds 64 samples' gradients
    # in one pass, two ranks add 32 each and then the two sums. Rounding
    # differs in the last bits (measured 1.2e-7) and grows a little over steps.
    2: 1e-6,
    3: 0,  # the same sums of the same f32 numbers (a + b = b + a), only sent in buckets
    4: 0,  # AdamW is element by element: a piece of a flat buffer steps as its parameter does
    # bf16 keeps 8 bits of mantissa: logits differ by about 0.4%, and after 30
    # steps the loss by about 2% (measured 2.2% at step 30).
    5: 5e-2,
    6: 0,  # the Accelerator's zero1 and bf16 autocast do what step 5 does by hand
}


def diff(ladder_dir):
    problems = []
    for step in range(2, 7):
        before = body(os.path.join(ladder_dir, f"ladder_{step - 1}.cpp"))
        after = body(os.path.join(ladder_dir, f"ladder_{step}.cpp"))
        added = removed = 0
        for tag, b1, b2, a1, a2 in difflib.SequenceMatcher(a=before, b=after, autojunk=False).get_opcodes():
            if tag != "equal":
                removed += b2 - b1
                added += a2 - a1
        most_added, most_removed = BUDGETS[step]
        print(f"step {step}: {added} lines added or changed (budget {most_added}), {removed} removed "
              f"(budget {most_removed})")
        if added > most_added or removed > most_removed:
            problems.append(f"step {step} is no longer a small diff from step {step - 1}: {added} lines added, "
                            f"{removed} removed, over its budget of {most_added} and {most_removed}")
    return problems


def losses(ember, bin_dir):
    problems, previous = [], None
    for step in range(1, 7):
        program = os.path.join(bin_dir, f"ladder_{step}")
        command = [program] if step == 1 else [ember, "launch", "--nproc-per-node", "2", "--", program]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            return [f"ladder_{step} exited with {result.returncode}:\n{result.stdout}{result.stderr}"]
        found = [(int(s), float(v)) for s, v in re.findall(r"step (\d+) loss (\S+)", result.stdout)]
        print(f"ladder_{step}: " + ", ".join(f"{s}: {v:.9g}" for s, v in found))
        if not found:
            problems.append(f"ladder_{step} printed no loss:\n{result.stdout}")
        elif previous is not None:
            if [s for s, _ in found] != [s for s, _ in previous]:
                problems.append(f"ladder_{step} printed the losses of other steps than ladder_{step - 1}")
            for (at, value), (_, before) in zip(found, previous):
                if abs(value - before) > TOLERANCES[step] * abs(before):
                    problems.append(f"ladder_{step} at step {at}: loss {value:.9g}, ladder_{step - 1} {before:.9g} "
                                    f"(relative difference {abs(value - before) / abs(before):.2g}, "
                                    f"tolerance {TOLERANCES[step]:g})")
        previous = found
    return problems


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("diff", "losses"):
        sys.exit(__doc__)
    found_problems = diff(sys.argv[2]) if sys.argv[1] == "diff" else losses(*sys.argv[2:4])
    for problem in found_problems:
        print(problem)
    sys.exit(1 if found_problems else 0)

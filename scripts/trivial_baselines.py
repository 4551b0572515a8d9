"""What a model scores on a CHE task without reading its input: the floor a result must clear
before it says anything. "Chance" (1 / number of output classes) is that floor only where the
output classes are equally likely at every position; for some tasks they are not
(modular_arithmetic_brackets: the answer 0 is far more frequent; bucket_sort: the output is
sorted, so its position alone predicts it).

Two rules, each fitted per test length on one half of the samples and scored on the other half
(token accuracy over the scored positions, pooled per length, then the mean over lengths, as
synthlab's per-length score):

- ``constant``: the most frequent output token, one for every position;
- ``position``: the most frequent output token at each output position (it knows the length and
  the position, nothing else).

    python scripts/trivial_baselines.py [--preset quick] [--tasks even_pairs,bucket_sort]
                                        [--samples 400] [--every 1] [--seed 0]

Prints a Markdown table (task, chance = 1 / output classes, constant, position, the lengths).
Deterministic for a seed. Bad input exits 2 with one line before sampling anything.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np


def baselines(task, lengths: list[int], samples: int, seed: int) -> dict[str, float]:
    """{'chance', 'constant', 'position'} in percent for ``task`` (a CHE task instance) over the
    OOD ``lengths``; ``samples`` per length, half to fit the rule, half to score it."""
    half = samples // 2
    constant, position = [], []
    for L in lengths:
        rows = [np.asarray(s.target_ids) for s in task.sample("ood", 2 * half, seed=seed, length=L)]
        if not rows:
            continue
        # scored outputs per sample: equal per length but for the tasks scored up to a terminator
        T = np.full((len(rows), max(len(r) for r in rows)), -1)  # (samples, outputs), -1 = not scored
        for i, r in enumerate(rows):
            T[i, : len(r)] = r
        fit, score = T[:half], T[half:]
        scored = score >= 0
        values, counts = np.unique(fit[fit >= 0], return_counts=True)
        constant.append(float((score == values[counts.argmax()])[scored].mean()))
        per_pos = np.array([np.bincount(col[col >= 0]).argmax() if (col >= 0).any() else -2 for col in fit.T])
        position.append(float((score == per_pos)[scored].mean()))
    n_classes = len([t for t in task.OUTPUTS if t != task.OUTPUT_PAD])
    return {
        "chance": 100.0 / n_classes,
        "constant": 100.0 * float(np.mean(constant)),
        "position": 100.0 * float(np.mean(position)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="quick", help="smoke, quick or paper: the OOD lengths of che.toml's preset")
    parser.add_argument("--tasks", default="", help="comma-separated CHE tasks (default: all fifteen)")
    parser.add_argument("--samples", type=int, default=400, help="samples per length (half fit, half score)")
    parser.add_argument("--every", type=int, default=1, help="every k-th OOD length only")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    from synthlab.core.config import PRESETS
    from synthlab.generators.che import TASKS
    from synthlab.plan.presets import preset_settings

    if args.preset not in PRESETS:
        parser.error(f"--preset: {args.preset!r} is unknown (allowed: {', '.join(PRESETS)})")
    names = [t for t in args.tasks.split(",") if t] or list(TASKS)
    unknown = [t for t in names if t not in TASKS]
    if unknown:
        parser.error(f"--tasks: {', '.join(unknown)} not a CHE task (allowed: {', '.join(TASKS)})")
    if args.samples < 2 or args.every < 1 or not 0 <= args.seed < 2**32:
        parser.error("--samples must be >= 2, --every >= 1, --seed in 0..2**32-1")

    print("| task | chance | constant | position | lengths |")
    print("|---|---|---|---|---|")
    for name in names:
        params = {
            k.removeprefix("task."): v for k, v in preset_settings(name, args.preset).items() if k.startswith("task.")
        }
        task = TASKS[name](**params)
        p = task.params
        lengths = list(range(p["test_min_length"], p["test_max_length"] + 1, args.every))
        b = baselines(task, lengths, args.samples, args.seed)
        print(
            f"| {name} | {b['chance']:.1f} | {b['constant']:.1f} | {b['position']:.1f} | {lengths[0]}..{lengths[-1]} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

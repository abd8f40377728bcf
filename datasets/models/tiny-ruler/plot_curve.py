"""Plots tiny-ruler's learning curve (curve.sh's curve.csv): the full cache's
RULER score per task against the training step, at each length.

  /usr/bin/python3 datasets/models/tiny-ruler/plot_curve.py CURVE.csv OUT.png
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    rows = list(csv.DictReader(open(argv[1])))
    if not rows:
        print(f"plot_curve: {argv[1]}: no rows", file=sys.stderr)
        return 1
    lengths = sorted({int(r["length"]) for r in rows})
    tasks = sorted({r["task"] for r in rows})
    fig, axes = plt.subplots(1, len(lengths), figsize=(5 * len(lengths), 3.6), sharey=True, squeeze=False)
    for ax, L in zip(axes[0], lengths):
        for t in tasks:
            pts = sorted((int(r["step"]), float(r["score"])) for r in rows if r["task"] == t and int(r["length"]) == L)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, label=t)
        ax.axhline(90 if L <= 1024 else 50, color="grey", lw=0.8, ls="--")
        ax.set_title(f"{L:,} tokens (full cache)")
        ax.set_xlabel("training step (from tiny-recall)")
        ax.set_ylim(-2, 102)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("RULER score (%)")
    axes[0][-1].legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(argv[2], dpi=110)
    print(f"wrote {argv[2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

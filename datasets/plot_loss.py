"""Loss curve of a `kvlab train` run: loss.csv -> loss.png beside it.

A recipe trained in stages (train.toml, then train-stage2.toml from its
checkpoint, ...) keeps each earlier stage's loss log as stageN-loss.csv beside
the final loss.csv; the curve then runs through the stages in order, tokens
counted from the start of stage 1, with a dashed line where each stage begins.

  /usr/bin/python3 datasets/plot_loss.py datasets/models/tiny-gqa
"""
import csv
import glob
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    earlier = sorted(glob.glob(os.path.join(argv[1], "stage[0-9]*-loss.csv")),
                     key=lambda p: int(re.search(r"stage(\d+)-loss", p).group(1)))
    paths = earlier + [os.path.join(argv[1], "loss.csv")]
    rows, starts, offset = [], [], 0
    for path in paths:
        try:
            with open(path) as f:
                part = list(csv.DictReader(f))
        except OSError as e:
            print(f"plot_loss: cannot read {path}: {e}", file=sys.stderr)
            return 1
        if not part:
            print(f"plot_loss: {path} has no rows", file=sys.stderr)
            return 1
        starts.append(offset)
        for r in part:
            r["tokens"] = int(r["tokens"]) + offset
        rows += part
        offset = rows[-1]["tokens"]

    def series(key):
        xs, ys = [], []
        for r in rows:
            v = float(r[key])
            if v >= 0:
                xs.append(r["tokens"] / 1e6)
                ys.append(v)
        return xs, ys

    fig, ax = plt.subplots(figsize=(7, 4))
    for key, label in (("text_bpb", "training text (bits/byte)"), ("heldout_bpb", "held-out text (bits/byte)"),
                       ("task_bits", "task answer tokens (bits/token)")):
        xs, ys = series(key)
        if xs:
            ax.plot(xs, ys, "o-" if key == "heldout_bpb" else "-", label=label, markersize=3)
    for i, start in enumerate(starts[1:], start=2):
        ax.axvline(start / 1e6, color="black", linestyle="--", linewidth=0.8)
        ax.annotate(f"stage {i}", (start / 1e6, 1), xycoords=("data", "axes fraction"),
                    xytext=(3, -12), textcoords="offset points", fontsize=8)
    ax.axhline(2.0, color="grey", linestyle=":", linewidth=1, label="2.0 bits/byte bar")
    ax.set_xlabel("training tokens (millions)")
    ax.set_ylabel("bits")
    ax.set_title(os.path.basename(os.path.normpath(argv[1])))
    ax.grid(alpha=0.3)
    ax.legend()
    out = os.path.join(argv[1], "loss.png")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""Loss curve of a `kvlab train` run: loss.csv -> loss.png beside it.

  /usr/bin/python3 datasets/plot_loss.py datasets/models/tiny-gqa
"""
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    path = os.path.join(argv[1], "loss.csv")
    try:
        with open(path) as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        print(f"plot_loss: cannot read {path}: {e}", file=sys.stderr)
        return 1
    if not rows:
        print(f"plot_loss: {path} has no rows", file=sys.stderr)
        return 1

    def series(key):
        xs, ys = [], []
        for r in rows:
            v = float(r[key])
            if v >= 0:
                xs.append(int(r["tokens"]) / 1e6)
                ys.append(v)
        return xs, ys

    fig, ax = plt.subplots(figsize=(7, 4))
    for key, label in (("text_bpb", "training text (bits/byte)"), ("heldout_bpb", "held-out text (bits/byte)"),
                       ("task_bits", "task answer tokens (bits/token)")):
        xs, ys = series(key)
        if xs:
            ax.plot(xs, ys, "o-" if key == "heldout_bpb" else "-", label=label, markersize=3)
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

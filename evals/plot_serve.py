#!/usr/bin/env python3
"""KV pool occupancy over time, from `kvlab serve-bench ... --csv FILE` runs.

    python3 evals/plot_serve.py A.csv [B.csv ...] --out occupancy.png [--labels a,b,...] [--smooth N]

One line per CSV, against the CSV's `time` (scheduler steps), in up to three panels:
  1. pool occupancy: the `occupancy` column (bytes the requests hold / the pool's bytes); where the
     CSV has `cached_bytes` (blocks only the prefix cache holds, free on demand), a lighter band above
     the line up to (bytes_in_use + cached_bytes) / pool_bytes
  2. running (solid) and waiting (dashed) requests
  3. preemptions, cumulative (the `preempted` column summed), when a CSV has that column
Steps in which nothing ran have no row (idle gaps until the next arrival): lines break there.
--smooth N draws a centred moving average over N rows (1, the default, draws every step).
A CSV without a needed column fails with a message naming the file and the column.
"""
import argparse
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.lines  # noqa: E402
import matplotlib.patches  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
import numpy as np  # noqa: E402

REQUIRED = ("time", "running", "waiting", "occupancy")
OPTIONAL = ("cached_bytes", "pool_bytes", "bytes_in_use", "preempted")


class PlotError(Exception):
    pass


def load(path):
    """{column: float array} for the columns this script uses; raises PlotError naming the file."""
    try:
        with open(path, encoding="utf-8", newline="") as f:
            reader = csv.reader(f)
            try:
                header = [h.strip() for h in next(reader)]
            except StopIteration:
                raise PlotError(f"{path}: empty file (no header)") from None
            rows = [r for r in reader if r and any(c.strip() for c in r)]
    except OSError as e:
        raise PlotError(f"{path}: cannot read ({e.strerror})") from None
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise PlotError(f"{path}: missing column{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                        f"(not a `kvlab serve-bench --csv` file?)")
    if "cached_bytes" in header:
        for c in ("bytes_in_use", "pool_bytes"):  # the cache band sits on top of the requests' bytes
            if c not in header:
                raise PlotError(f"{path}: missing column {c} (needed with cached_bytes)")
    if not rows:
        raise PlotError(f"{path}: no rows after the header")
    idx = {c: header.index(c) for c in REQUIRED + OPTIONAL if c in header}
    data = {c: np.empty(len(rows)) for c in idx}
    for n, r in enumerate(rows):
        for c, i in idx.items():
            try:
                data[c][n] = float(r[i])
            except (IndexError, ValueError):
                raise PlotError(f"{path}:{n + 2}: column {c}: not a number: "
                                f"{r[i] if i < len(r) else '(missing)'!r}") from None
    if np.any(np.diff(data["time"]) <= 0):
        raise PlotError(f"{path}: column time does not increase")
    return data


def segments(t):
    """Row ranges between idle gaps (a jump of more than one step in time)."""
    cuts = [0] + list(np.nonzero(np.diff(t) > 1)[0] + 1) + [len(t)]
    return list(zip(cuts[:-1], cuts[1:]))


def smooth(t, y, n):
    """Centred moving average over n rows within each stretch between idle gaps, the window shrunk at the
    ends (no drop towards zero there)."""
    if n <= 1:
        return y
    out = np.empty_like(y)
    for a, b in segments(t):
        seg, m = y[a:b], min(n, b - a)
        k = np.ones(m) / m
        out[a:b] = np.convolve(seg, k, mode="same") / np.convolve(np.ones_like(seg), k, mode="same")
    return out


def with_gaps(t, *ys):
    """Inserts a NaN after each row followed by a jump in time, so lines break over idle gaps."""
    gaps = np.nonzero(np.diff(t) > 1)[0] + 1
    if len(gaps) == 0:
        return (t,) + ys
    return (np.insert(t, gaps, t[gaps - 1] + 1),) + tuple(np.insert(y, gaps, np.nan) for y in ys)


def plot(paths, labels, out, smooth_n=1, title=None):
    runs = [load(p) for p in paths]
    has_preempted = any("preempted" in d for d in runs)
    npanels = 3 if has_preempted else 2
    heights = [3, 2, 1.3][:npanels]
    fig, axes = plt.subplots(npanels, 1, sharex=True, figsize=(11, 1.9 * sum(heights)),
                             gridspec_kw={"height_ratios": heights})
    ax_occ, ax_req = axes[0], axes[1]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    band_drawn = False
    for i, (d, label) in enumerate(zip(runs, labels)):
        color = colors[i % len(colors)]
        t = d["time"]
        occ = smooth(t, d["occupancy"], smooth_n)
        if "cached_bytes" in d and np.any(d["cached_bytes"] > 0):
            top = smooth(t, (d["bytes_in_use"] + d["cached_bytes"]) / d["pool_bytes"], smooth_n)
            tg, lo, hi = with_gaps(t, occ, top)
            ax_occ.fill_between(tg, lo, hi, color=color, alpha=0.18, linewidth=0)
            band_drawn = True
        tg, occ_g = with_gaps(t, occ)
        ax_occ.plot(tg, occ_g, color=color, linewidth=0.8, label=label)
        tg, run_g, wait_g = with_gaps(t, smooth(t, d["running"], smooth_n), smooth(t, d["waiting"], smooth_n))
        ax_req.plot(tg, run_g, color=color, linewidth=0.8)
        ax_req.plot(tg, wait_g, color=color, linewidth=0.8, linestyle="--")
        if "preempted" in d:
            axes[2].plot(t, np.cumsum(d["preempted"]), color=color, linewidth=1.2, drawstyle="steps-post")

    ax_occ.set_ylim(0, 1.02)
    ax_occ.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    ax_occ.set_ylabel("KV pool held\nby requests")
    handles, names = ax_occ.get_legend_handles_labels()
    if band_drawn:
        handles.append(matplotlib.patches.Patch(color="grey", alpha=0.3, linewidth=0))
        names.append("+ blocks only the prefix cache holds")
    # Above the panel: the lines fill the panel's corners.
    ax_occ.legend(handles, names, fontsize="small", ncol=len(names) if len(names) <= 4 else 3, loc="lower left",
                  bbox_to_anchor=(0, 1.02, 1, 0.1), mode="expand", frameon=False)
    ax_req.set_ylabel("requests")
    ax_req.set_ylim(bottom=0)
    ax_req.legend([matplotlib.lines.Line2D([], [], color="k", linewidth=0.8),
                   matplotlib.lines.Line2D([], [], color="k", linewidth=0.8, linestyle="--")],
                  ["running", "waiting"], fontsize="small", loc="upper right", framealpha=0.9)
    if has_preempted:
        axes[2].set_ylabel("preemptions\n(cumulative)")
        axes[2].set_ylim(bottom=0)
        axes[2].yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    axes[-1].set_xlabel("time (scheduler steps)" + (f"; moving average over {smooth_n} steps" if smooth_n > 1 else ""))
    axes[-1].set_xlim(left=0)
    for ax in axes:
        ax.grid(True, alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.align_ylabels(axes)
    fig.tight_layout()
    parent = os.path.dirname(out)
    if parent:
        os.makedirs(parent, exist_ok=True)
    fig.savefig(out, dpi=150)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Plot KV pool occupancy over time from `kvlab serve-bench --csv` files.")
    ap.add_argument("csv", nargs="+", help="serve-bench CSV files, one line each")
    ap.add_argument("--out", required=True, help="output image (PNG)")
    ap.add_argument("--labels", help="comma-separated labels, one per CSV (default: the file names)")
    ap.add_argument("--smooth", type=int, default=1, metavar="N", help="moving average over N steps (default 1: none)")
    ap.add_argument("--title", help="title above the figure")
    args = ap.parse_args(argv)
    if args.labels is not None:
        labels = [s.strip() for s in args.labels.split(",")]
        if len(labels) != len(args.csv):
            ap.error(f"--labels has {len(labels)} labels for {len(args.csv)} CSV files")
    else:
        labels = [os.path.splitext(os.path.basename(p))[0] for p in args.csv]
    if args.smooth < 1:
        ap.error("--smooth must be at least 1")
    try:
        plot(args.csv, labels, args.out, args.smooth, args.title)
    except PlotError as e:
        print(f"plot_serve.py: {e}", file=sys.stderr)
        return 1
    print(f"plot_serve.py: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

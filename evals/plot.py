#!/usr/bin/env python3
"""Plots of a `kvlab run` sweep, from its results.jsonl.

    python3 evals/plot.py results/NAME [--out DIR]

Writes, when their data is present (otherwise one line on stderr says why not):
  pareto.png          peak KV memory / the baseline's vs bpb (and bpb-recompute), retrieval accuracy and the
                      RULER average, one point per setting with its 95% interval, the non-dominated joined
  by_length.png       each accuracy-type metric (and the RULER average) vs context length, per setting,
                      with 95% intervals
  latency.png         decode ms per step (median, bar up to p90) vs context length
  heatmap_TASK.png    retrieval and RULER accuracy by needle depth x length, per setting; cells give n
  kl.png              KL(full cache || policy) by position bucket, per setting
Only the latest "ok" record of each point ("key") counts. Intervals follow the reports' rules
(docs/sweeps.md, "Intervals"): Wilson's for exact-match proportions, else a seeded percentile
bootstrap over the samples (metrics.per_sample; bpb: windows); numpy draws the resamples, so a
bound may differ from summary.md's in its last digit.
"""
import argparse
import json
import math
import os
import sys
import zlib
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

BPB = ("bpb", "bpb-recompute")  # bits per byte, KL and top-1 against the full cache
RETRIEVAL = ("passkey", "multi-needle", "recall")
RULER = ("niah_single_1", "niah_single_2", "niah_single_3", "niah_multikey_1", "niah_multikey_2", "niah_multikey_3",
         "niah_multivalue", "niah_multiquery", "vt", "cwe", "fwe")  # datasets/tasks/ruler.h, in RULER's order
Z95 = 1.959963984540054
RESAMPLES = 2000


def wilson(k, n, z=Z95):
    """Wilson's score interval for k successes of n: (estimate, lo, hi)."""
    if n <= 0:
        return None, None, None
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z / d * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return p, max(0.0, c - h), min(1.0, c + h)


def seed_of(text):
    return zlib.crc32(text.encode("utf-8"))


def bootstrap(strata, seed, resamples=RESAMPLES):
    """Percentile bootstrap of the unweighted mean over strata of each stratum's mean (one stratum: the
    mean of its values): (estimate, lo, hi); no interval when a stratum has fewer than 2 values."""
    strata = [np.asarray(v, dtype=float) for v in strata if len(v)]
    if not strata:
        return None, None, None
    est = float(np.mean([v.mean() for v in strata]))
    if min(len(v) for v in strata) < 2:
        return est, None, None
    rng = np.random.default_rng(seed)
    stats = np.mean([v[rng.integers(0, len(v), size=(resamples, len(v)))].mean(axis=1) for v in strata], axis=0)
    lo, hi = np.quantile(stats, [0.025, 0.975])
    return est, float(lo), float(hi)


def per_sample(r, metric):
    per = r.get("metrics", {}).get("per_sample")
    return isinstance(per, dict) and isinstance(per.get(metric), list)


def units(r, metric):
    """The values a record gives a metric's mean: metrics.per_sample[metric], else the point's own value."""
    if per_sample(r, metric):
        return [float(v) for v in r["metrics"]["per_sample"][metric] if isinstance(v, (int, float)) and not isinstance(v, bool)]
    v = num(r, "metrics", metric)
    return [] if v is None else [v]


def interval(values, seed, trials=False):
    """(estimate, lo, hi, n) of the mean of values: Wilson when they are trials of a proportion
    (per-sample exact-match accuracy) all 0 or 1, else the bootstrap."""
    if not values:
        return None, None, None, 0
    if trials and all(v in (0.0, 1.0) for v in values):
        return (*wilson(sum(values), len(values)), len(values))
    return (*bootstrap([values], seed), len(values))


def yerr(points):
    """Error bars of (estimate, lo, hi) triples (0 where there is no interval)."""
    # max(0, ...): a percentile bound may pass the estimate by a rounding error (or, skewed, by more).
    return [[max(0.0, e - lo) if lo is not None else 0.0 for e, lo, _ in points],
            [max(0.0, hi - e) if hi is not None else 0.0 for e, _, hi in points]]


class PlotError(Exception):
    pass


def note(msg):
    print(f"plot.py: {msg}", file=sys.stderr)


def load_records(results_dir):
    """The latest "ok" record per key, in run order."""
    path = os.path.join(results_dir, "results.jsonl")
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except OSError as e:
        raise PlotError(f"{path}: cannot read the sweep's results ({e.strerror})") from None
    latest = {}
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
            if not isinstance(r, dict) or "key" not in r or "status" not in r:
                raise ValueError("not a sweep record (no 'key' or 'status')")
        except ValueError as e:
            if i == len(lines) - 1:  # unterminated last line: a killed run's, which `kvlab run` drops too
                note(f"{path}:{i + 1}: ignoring a partial last line")
                continue
            raise PlotError(f"{path}:{i + 1}: malformed record: {e}") from None
        if r["status"] == "ok":
            latest[r["key"]] = r
    return sorted(latest.values(), key=lambda r: r.get("index", 0))


def pareto_front(points, higher_is_better=False):
    """Names of the non-dominated (name, x, y) points, by increasing x. Less x
    (memory) is better; less y too, or more with higher_is_better."""
    s = -1 if higher_is_better else 1

    def dominates(a, b):
        return a[1] <= b[1] and s * a[2] <= s * b[2] and (a[1] < b[1] or s * a[2] < s * b[2])

    front = [p for p in points if not any(dominates(q, p) for q in points)]
    return [p[0] for p in sorted(front, key=lambda p: (p[1], s * p[2]))]


def peer(r):  # the baseline a record compares with, as sweep_report.cpp
    return (r.get("model"), r.get("task"), r.get("length"), r.get("batch"), r.get("seed"), r.get("repetition"))


def num(d, *path):
    for k in path:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return float(d) if isinstance(d, (int, float)) and not isinstance(d, bool) and math.isfinite(d) else None


def mean(values):
    v = [x for x in values if x is not None]
    return sum(v) / len(v) if v else None


class Sweep:
    def __init__(self, recs):
        self.recs = recs
        multi = len({r.get("model") for r in recs}) > 1
        self.label = {id(r): (f"{r.get('model')}: " if multi else "") + str(r.get("stack")) for r in recs}
        self.settings = list(dict.fromkeys(self.label[id(r)] for r in recs))
        self.baseline = {self.label[id(r)] for r in recs if r.get("baseline")}
        self.base_of = {peer(r): r for r in recs if r.get("baseline")}
        cmap = plt.get_cmap("tab10" if len(self.settings) <= 10 else "tab20")
        others = [s for s in self.settings if s not in self.baseline]
        self.color = {s: cmap(i % cmap.N) for i, s in enumerate(others)}
        self.color.update({s: "black" for s in self.baseline})

    def of(self, task, setting=None):
        return [r for r in self.recs if r.get("task") == task and (setting is None or self.label[id(r)] == setting)]

    def memory_fraction(self, r):
        """Peak KV bytes / the baseline's (the end bytes for records made before peaks were recorded)."""
        b = self.base_of.get(peer(r))
        if b is None:
            return None
        for key in ("peak_kv_bytes", "kv_bytes_end"):
            mine, theirs = num(r, "metrics", "memory", key), num(b, "metrics", "memory", key)
            if mine is not None and theirs:
                return mine / theirs
        return None


def panels(n, width, height):
    """A figure with n subplots, at most 3 a row; the spare ones hidden."""
    cols = min(3, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False, constrained_layout=True)
    for ax in axes.flat[n:]:
        ax.axis("off")
    return fig, list(axes.flat[:n])


def save(fig, out, name):
    path = os.path.join(out, name)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(path)


def label_points(ax, pts, baseline):
    """Names beside the (name, x, y) points: coincident points share a label,
    and a label moves up until it overlaps no other."""
    ax.figure.canvas.draw()  # settle limits and layout, so that data map to pixels
    k = ax.figure.dpi / 72  # pixels per point
    spots = {}
    for s, x, y in sorted(pts, key=lambda p: (p[1], p[2])):
        px, py = ax.transData.transform((x, y))
        spots.setdefault((round(px / 4), round(py / 4)), [x, y, px, py, []])[4].append(s + (" (baseline)" if s in baseline else ""))
    placed = []
    for x, y, px, py, names in spots.values():
        x0, w, h, dy = px + 5 * k, max(map(len, names)) * 4.3 * k, len(names) * 9 * k, 3
        while any(x0 < b[2] and b[0] < x0 + w and py + dy * k < b[3] and b[1] < py + dy * k + h for b in placed):
            dy += 9
        placed.append((x0, py + dy * k, x0 + w, py + dy * k + h))
        ax.annotate("\n".join(names), (x, y), xytext=(5, dy), textcoords="offset points", fontsize=7)


def setting_value(sw, task, setting, metric, records=None):
    """(estimate, lo, hi, n) of a setting's metric on a task: its records' samples pooled; for "RULER"
    the average over RULER's tasks of each task's mean (a bootstrap stratified by task)."""
    recs = records if records is not None else None
    if task == "RULER":
        groups = []
        for t in RULER:
            rs = [r for r in (recs if recs is not None else sw.of(t, setting)) if r.get("task") == t]
            groups.append([v for r in rs for v in units(r, metric)])
        groups = [g for g in groups if g]
        est, lo, hi = bootstrap(groups, seed_of(f"{setting}|RULER|{metric}"))
        return est, lo, hi, sum(len(g) for g in groups)
    rs = recs if recs is not None else sw.of(task, setting)
    trials = metric == "accuracy" and all(per_sample(r, metric) for r in rs)
    return interval([v for r in rs for v in units(r, metric)], seed_of(f"{setting}|{task}|{metric}"), trials)


def plot_pareto(sw, out):
    tasks = [(t, "bpb", "bits per byte (lower is better)", False) for t in BPB if sw.of(t)]
    tasks += [(t, "accuracy", f"{t} accuracy (higher is better)", True) for t in RETRIEVAL if sw.of(t)]
    if any(sw.of(t) for t in RULER):
        tasks.append(("RULER", "accuracy", "RULER average over its tasks (higher is better)", True))
    panels_pts = []
    for task, metric, _, _ in tasks:
        pts, orphans = [], []  # (setting, mean memory fraction, mean metric, lo, hi); settings without a baseline
        for s in sw.settings:
            rs = [r for t in (RULER if task == "RULER" else (task,)) for r in sw.of(t, s)]
            x = mean(sw.memory_fraction(r) for r in rs)
            y, lo, hi, _ = setting_value(sw, task, s, metric, rs)
            if rs and x is None:
                orphans.append(s)
            elif rs and y is not None:
                pts.append((s, x, y, lo, hi))
        if pts and orphans:
            note(f"pareto.png: {task}: left out {', '.join(orphans)}: no baseline record to compare memory with")
        panels_pts.append(pts)
    if not any(panels_pts):
        return note("skipping pareto.png: no bpb or retrieval records with a baseline to compare memory with")
    fig, axes = panels(len(tasks), 6.5, 5)
    for ax, (task, _, ylabel, higher), pts in zip(axes, tasks, panels_pts):
        front = pareto_front([p[:3] for p in pts], higher)
        xy = {p[0]: p[1:3] for p in pts}
        fx, fy = [xy[n][0] for n in front], [xy[n][1] for n in front]
        ax.plot(fx, fy, "--o", color="grey", lw=1, ms=13, mfc="none", label="Pareto front", zorder=1)
        for s, x, y, lo, hi in pts:
            base = s in sw.baseline
            ax.errorbar([x], [y], yerr=yerr([(y, lo, hi)]), fmt="none", ecolor=sw.color[s], capsize=3, lw=1, zorder=2)
            ax.scatter(x, y, s=160 if base else 40, marker="*" if base else "o", color=sw.color[s], zorder=3,
                       label=f"{s} (baseline)" if base else None)
        ax.set_xlim(left=0, right=max([1.1] + [p[1] * 1.1 for p in pts]))
        ax.set_xlabel("peak KV memory / the baseline's")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{task}: memory vs quality (bars: 95% intervals)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2)
        label_points(ax, [p[:3] for p in pts], sw.baseline)
    save(fig, out, "pareto.png")


def plot_by_length(sw, out):
    """Each accuracy-type metric against context length, a line per setting, 95% interval bars."""
    panels_def = [(t, "bpb", "bits per byte") for t in BPB if sw.of(t)]
    panels_def += [(t, "accuracy", "exact-match accuracy") for t in RETRIEVAL if sw.of(t)]
    panels_def += [(t, "accuracy", "RULER score / 100") for t in RULER if sw.of(t)]
    if any(sw.of(t) for t in RULER):
        panels_def.append(("RULER", "accuracy", "RULER average / 100"))
    if not panels_def:
        return note("skipping by_length.png: no bpb, retrieval or RULER records")
    fig, axes = panels(len(panels_def), 5.5, 4.2)
    for ax, (task, metric, ylabel) in zip(axes, panels_def):
        lengths = set()
        for k, s in enumerate(sw.settings):
            rs = [r for t in (RULER if task == "RULER" else (task,)) for r in sw.of(t, s)]
            xs = sorted({r["length"] for r in rs})
            vals = []
            for L in xs:
                e, lo, hi, _ = setting_value(sw, task, s, metric, [r for r in rs if r["length"] == L])
                vals.append((e, lo, hi))
            keep = [(x, v) for x, v in zip(xs, vals) if v[0] is not None]
            if not keep:
                continue
            lengths.update(x for x, _ in keep)
            dodge = 1 + 0.012 * (k - (len(sw.settings) - 1) / 2)  # keep the bars apart
            ax.errorbar([x * dodge for x, _ in keep], [v[0] for _, v in keep], yerr=yerr([v for _, v in keep]),
                        marker="*" if s in sw.baseline else "o", capsize=3, color=sw.color[s], label=s)
        if lengths and max(lengths) >= 4 * min(lengths):
            ax.set_xscale("log", base=2)
        elif len(lengths) == 1:
            ax.set_xlim(min(lengths) * 0.8, min(lengths) * 1.2)
        if lengths:
            ax.set_xticks(sorted(lengths), [str(L) for L in sorted(lengths)])
        ax.set_xlabel("context length (tokens)")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{task} by length (bars: 95% intervals)", fontsize=9)
        ax.grid(alpha=0.3)
    axes[-1].legend(fontsize=7, loc="best")
    save(fig, out, "by_length.png")


def plot_latency(sw, out):
    recs = [r for r in sw.of("latency") if num(r, "metrics", "decode_ms_median") is not None]
    if not recs:
        return note("skipping latency.png: no latency records")
    batches = sorted({r.get("batch") for r in recs})
    fig, axes = panels(len(batches), 6.5, 4.5)
    for ax, batch in zip(axes, batches):
        lengths = set()
        for k, s in enumerate(sw.settings):
            rs = [r for r in recs if sw.label[id(r)] == s and r.get("batch") == batch]
            xs = sorted({r["length"] for r in rs})
            med = [mean(num(r, "metrics", "decode_ms_median") for r in rs if r["length"] == L) for L in xs]
            p90 = [mean(num(r, "metrics", "decode_ms_p90") for r in rs if r["length"] == L) for L in xs]
            if not xs:
                continue
            lengths.update(xs)
            up = [max(0.0, p - m) if p is not None else 0.0 for m, p in zip(med, p90)]
            dodge = 1 + 0.012 * (k - (len(sw.settings) - 1) / 2)  # keep the p90 bars apart
            ax.errorbar([x * dodge for x in xs], med, yerr=[[0.0] * len(xs), up], marker="*" if s in sw.baseline else "o", capsize=3,
                        color=sw.color[s], label=s)
        if lengths and max(lengths) >= 4 * min(lengths):
            ax.set_xscale("log", base=2)
        elif len(lengths) == 1:
            ax.set_xlim(min(lengths) * 0.8, min(lengths) * 1.2)
        ax.set_xticks(sorted(lengths), [str(L) for L in sorted(lengths)])
        ax.set_xlabel("context length (tokens)")
        ax.set_ylabel("decode ms per step (median; bar to p90)")
        ax.set_title(f"decode latency, batch {batch}")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    axes[-1].legend(fontsize=7, loc="best")
    save(fig, out, "latency.png")


def depth_cells(r):
    """{depth key: (accuracy, samples)} of a record: per depth when it has accuracy_by_depth (n from
    per_sample.depth, else its samples shared evenly), else one row "all"."""
    m = r["metrics"]
    by = m.get("accuracy_by_depth")
    if not isinstance(by, dict):
        v = num(r, "metrics", "accuracy")
        n = len(units(r, "accuracy"))
        return {} if v is None else {"all": (v, n)}
    per = m.get("per_sample", {}).get("depth") if isinstance(m.get("per_sample"), dict) else None
    out = {}
    for d, v in by.items():
        if not isinstance(v, (int, float)):
            continue
        if isinstance(per, list):
            n = sum(1 for x in per if isinstance(x, (int, float)) and abs(float(x) - float(d)) < 5e-4 * max(1.0, abs(float(d))))
        else:
            n = int(num(r, "metrics", "samples") or 0) // max(1, len(by))
        out[d] = (float(v), n)
    return out


def plot_heatmaps(sw, out):
    tasks = [t for t in RETRIEVAL + RULER if any(depth_cells(r) for r in sw.of(t))]
    if not tasks:
        return note("skipping heatmap_*.png: no retrieval or RULER records")
    for task in tasks:
        recs = [r for r in sw.of(task) if depth_cells(r)]
        depths = sorted({d for r in recs for d in depth_cells(r)}, key=lambda d: -1.0 if d == "all" else float(d))
        lengths = sorted({r["length"] for r in recs})
        settings = [s for s in sw.settings if any(sw.label[id(r)] == s for r in recs)]
        fig, axes = panels(len(settings), 1.3 + 1.1 * len(lengths), 1.2 + 0.65 * len(depths))
        for ax, s in zip(axes, settings):
            grid = np.full((len(depths), len(lengths)), np.nan)
            for i, d in enumerate(depths):
                for j, L in enumerate(lengths):
                    cells = [depth_cells(r)[d] for r in recs if sw.label[id(r)] == s and r["length"] == L and d in depth_cells(r)]
                    n = sum(c[1] for c in cells)
                    v = (sum(c[0] * c[1] for c in cells) / n) if n else mean(c[0] for c in cells)
                    if v is not None:
                        grid[i, j] = v
                        ax.text(j, i, f"{v:.2f}\nn={n}", ha="center", va="center", fontsize=7, color="white" if v < 0.5 else "black")
            im = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto")
            ax.set_xticks(range(len(lengths)), [str(L) for L in lengths], fontsize=7)
            ax.set_yticks(range(len(depths)), depths, fontsize=7)
            ax.set_xlabel("length", fontsize=7)
            ax.set_ylabel("depth", fontsize=7)
            ax.set_title(s.replace("+", "+\n"), fontsize=8)
        fig.colorbar(im, ax=axes, shrink=0.8, label="RULER score / 100" if task in RULER else "exact-match accuracy")
        if task == "multi-needle":
            title = "multi-needle: accuracy by context length\n(needles sit at random depths; the depth rows only vary the samples)"
        elif depths == ["all"]:
            title = f"{task}: score by context length (no needle depth in this task); n = samples"
        else:
            title = f"{task}: {'score' if task in RULER else 'accuracy'} by needle depth and context length; n = samples"
        fig.suptitle(title, fontsize=9)
        save(fig, out, f"heatmap_{task}.png")


def plot_kl(sw, out):
    # bpb: the baseline's KL is 0 by definition; bpb-recompute: every setting, the baseline included, is
    # compared with the full cache fed token by token.
    recs = [r for t in BPB for r in sw.of(t) if isinstance(r["metrics"].get("kl_by_bucket"), list)
            and isinstance(r["metrics"].get("bucket_starts"), list) and (t != "bpb" or not r.get("baseline"))]
    if not recs:
        return note("skipping kl.png: no bpb records of a non-baseline setting")
    cases = sorted({(r["task"], r["length"]) for r in recs})
    fig, axes = panels(len(cases), 5.5, 4.2)
    for ax, (task, L) in zip(axes, cases):
        positive = []
        for s in sw.settings:
            by_starts = defaultdict(list)  # records of one bucket layout (windows/prefill fixed per sweep)
            for r in recs:
                if sw.label[id(r)] == s and r["task"] == task and r["length"] == L:
                    by_starts[tuple(r["metrics"]["bucket_starts"])].append(r["metrics"]["kl_by_bucket"])
            for starts, kls in by_starts.items():
                kl = np.mean(np.array(kls, dtype=float), axis=0)
                positive += [v for v in kl if v > 0]
                ax.plot(starts, kl, marker="o", color=sw.color[s], label=s)
        if positive and max(positive) > 100 * min(positive):
            ax.set_yscale("symlog", linthresh=10 ** math.floor(math.log10(min(positive))))
        else:
            ax.set_ylim(bottom=0)
        ax.set_xlabel("position (start of bucket, tokens)")
        ax.set_ylabel("KL(full cache || policy), nats per token")
        ax.set_title(f"{task}: KL by position, length {L}")
        ax.grid(alpha=0.3)
    axes[-1].legend(fontsize=7, loc="best")
    save(fig, out, "kl.png")


def main(argv=None):
    ap = argparse.ArgumentParser(description="Plot a kvlab sweep's results.jsonl (pareto, by length, latency, heatmaps, KL).")
    ap.add_argument("results_dir", help="a sweep's output directory, e.g. results/quickstart")
    ap.add_argument("--out", help="where to write the PNGs (default: the results directory)")
    args = ap.parse_args(argv)
    try:
        recs = load_records(args.results_dir)
    except PlotError as e:
        print(f"plot.py: error: {e}", file=sys.stderr)
        return 1
    if not recs:
        note(f"{os.path.join(args.results_dir, 'results.jsonl')}: no successful records to plot")
    out = args.out or args.results_dir
    os.makedirs(out, exist_ok=True)
    sw = Sweep(recs)
    for plot in (plot_pareto, plot_by_length, plot_latency, plot_heatmaps, plot_kl):
        plot(sw, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

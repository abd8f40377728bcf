#!/usr/bin/env python3
"""Paired differences between two settings of one sweep: for each pair of
stacks, the mean over matched units (the same windows or prompts: same model,
task, length, batch, seed and repetition, units in order) of A - B, with the
95% percentile bootstrap of those differences (2,000 resamples, seeded from
the pair's names, as summary.md does against the baseline; plot.py's
bootstrap). summary.md gives each setting against the full cache; this gives
any setting against any other, which is what a claim such as "heavy hitters
beat recent-only at 5%" needs.

    /usr/bin/python3 evals/compare.py results/NAME --list
    /usr/bin/python3 evals/compare.py results/NAME --metric kl \\
        --pair 'h2o(ratio=0.05)' 'h2o(heavy_fraction=0,ratio=0.05)' [--pair A B ...] [--task bpb] [--length 1024]

A side may name its model or task too, `STACK@model=NAME` or
`STACK@task=NAME,model=NAME`: the units are then matched on the other
fields only, so two models (a converted checkpoint and its source) or two
tasks run on the same windows (bpb and bpb-recompute) pair up; several
results directories are read together (two sweeps of the same windows).

Prints one line a pair: `A - B: +0.0123 [+0.0040, +0.0201] n=8`, and `~` when
the interval contains 0 (the data cannot tell the two apart). Exit 2 on a
stack, metric or results file it cannot find, naming it.
"""
import argparse
import os
import sys
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import plot  # noqa: E402


class CompareError(Exception):
    pass


FIELDS = ("model", "task", "length", "batch", "seed", "repetition")


def parse_side(text):
    """'STACK' or 'STACK@model=M,task=T' -> (stack, {field: value})."""
    stack, _, rest = text.partition("@")
    fixed = {}
    for part in filter(None, rest.split(",")):
        k, eq, v = part.partition("=")
        if not eq or k not in ("model", "task"):
            raise CompareError(f"'{text}': after '@' give model=NAME and / or task=NAME")
        fixed[k] = v
    return stack, fixed


def unit_key(r, skip=()):
    return tuple(r.get(f) for f in FIELDS if f not in skip)


def paired(records, a, b, metric, task=None, length=None):
    """(estimate, lo, hi, n) of mean(A - B) over the units the two sides share."""
    (sa, fa), (sb, fb) = parse_side(a), parse_side(b)
    skip = tuple(set(fa) | set(fb))

    def select(stack, fixed):
        out = {}
        for r in records:
            if r.get("stack") != stack or any(str(r.get(k)) != v for k, v in fixed.items()):
                continue
            if task is not None and "task" not in fixed and r.get("task") != task:
                continue
            if length is not None and r.get("length") != length:
                continue
            vals = plot.units(r, metric)
            if vals:
                out[unit_key(r, skip)] = vals
        return out
    ra, rb = select(sa, fa), select(sb, fb)
    stacks = {r.get("stack") for r in records}
    for s, rs in ((sa, ra), (sb, rb)):
        if s not in stacks:
            raise CompareError(f"no stack '{s}' in the results (--list shows them)")
        if not rs:
            raise CompareError(f"stack '{s}' has no '{metric}' values" + (f" for task '{task}'" if task else "") +
                               (f" at length {length}" if length is not None else ""))
    diffs = []
    for k in sorted(set(ra) & set(rb), key=str):
        va, vb = ra[k], rb[k]
        if len(va) != len(vb):
            raise CompareError(f"'{a}' and '{b}' have {len(va)} and {len(vb)} units for {k}: not the same samples")
        diffs.extend(x - y for x, y in zip(va, vb))
    if not diffs:
        raise CompareError(f"'{a}' and '{b}' share no point (model, task, length, batch, seed, repetition)")
    seed = zlib.crc32(f"{a}|{b}|{metric}|{task}|{length}".encode())
    est, lo, hi = plot.bootstrap([diffs], seed)
    return est, lo, hi, len(diffs)


def fmt(est, lo, hi, n):
    if lo is None:
        return f"{est:+.4g} (no interval) n={n} ~"
    tilde = " ~" if lo <= 0.0 <= hi else ""
    return f"{est:+.4g} [{lo:+.4g}, {hi:+.4g}] n={n}{tilde}"


def main(argv):
    ap = argparse.ArgumentParser(description="Paired differences between settings of one sweep")
    ap.add_argument("results", nargs="+", help="results directories (their results.jsonl, read together)")
    ap.add_argument("--metric", default="kl", help="kl, bpb, top1_agreement, accuracy, ... (default kl)")
    ap.add_argument("--task", help="only this task's records")
    ap.add_argument("--length", type=int, help="only this length")
    ap.add_argument("--pair", nargs=2, action="append", metavar=("A", "B"), default=[], help="stacks A and B: A - B")
    ap.add_argument("--list", action="store_true", help="list the stacks and exit")
    args = ap.parse_args(argv)
    try:
        records = [r for d in args.results for r in plot.load_records(d)]
    except plot.PlotError as e:
        print(f"compare.py: {e}", file=sys.stderr)
        return 2
    if args.list:
        for s in sorted({r.get("stack") for r in records}):
            print(s)
        return 0
    if not args.pair:
        print("compare.py: give at least one --pair A B (or --list)", file=sys.stderr)
        return 2
    for a, b in args.pair:
        try:
            print(f"{a} - {b}: {fmt(*paired(records, a, b, args.metric, args.task, args.length))}")
        except CompareError as e:
            print(f"compare.py: {' '.join(args.results)}: {e}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

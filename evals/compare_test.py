#!/usr/bin/env python3
"""Test of evals/compare.py: paired differences between two stacks of a synthetic sweep (a
constant shift has a zero-width interval; an alternating one contains 0 and is marked ~; two
units 0 and 1 give the enumerated bootstrap's [0, 1]); units are matched by point, not pooled;
a side may fix its model (two models on the same windows pair up); an unknown stack, a
metric no record has, unequal unit counts and a bad side fail naming them, exit 2.

    python3 evals/compare_test.py
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compare  # noqa: E402


def record(index, stack, length, kl, model="m"):
    key = json.dumps({"model": model, "stack": stack, "length": length}, separators=(",", ":"))
    return {"key": key, "index": index, "status": "ok", "model": model, "stack": stack, "task": "bpb",
            "length": length, "batch": 1, "seed": 0, "repetition": 0,
            "metrics": {"kl": sum(kl) / len(kl), "per_sample": {"kl": kl}}}


def write(d, recs):
    with open(os.path.join(d, "results.jsonl"), "w") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")


def run(*args):
    p = subprocess.run([sys.executable, os.path.join(HERE, "compare.py"), *args], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def main():
    fails = 0

    def check(cond, what):
        nonlocal fails
        if not cond:
            fails += 1
            print("FAIL:", what)

    base = [0.1, 0.2, 0.3, 0.4]
    recs = [record(0, "a", 512, base), record(1, "b", 512, [v - 0.05 for v in base]),
            record(2, "c", 512, [v + (0.1 if i % 2 else -0.1) for i, v in enumerate(base)]),
            record(3, "a", 1024, [1.0, 1.0]), record(4, "b", 1024, [1.0, 0.0]),
            record(5, "short", 512, [0.1, 0.2]),
            record(6, "a", 512, [v + 1.0 for v in base], model="m2")]
    with tempfile.TemporaryDirectory() as d:
        write(d, recs)
        records = compare.plot.load_records(d)
        est, lo, hi, n = compare.paired(records, "a", "b", "kl", length=512)
        check(abs(est - 0.05) < 1e-12 and abs(lo - 0.05) < 1e-12 and abs(hi - 0.05) < 1e-12 and n == 4,
              f"constant shift: {est} [{lo}, {hi}] n={n}")
        est, lo, hi, n = compare.paired(records, "a", "c", "kl", length=512)
        check(abs(est) < 1e-12 and lo < 0 < hi, f"alternating shift: {est} [{lo}, {hi}]")
        check(compare.fmt(est, lo, hi, n).endswith("~"), "an interval holding 0 is marked ~")
        # a - b at 1024: differences 0 and 1; resample means 0, 0.5, 1 with odds 1/4, 1/2, 1/4.
        est, lo, hi, n = compare.paired(records, "a", "b", "kl", length=1024)
        check(est == 0.5 and lo == 0.0 and hi == 1.0 and n == 2, f"enumerated bootstrap: {est} [{lo}, {hi}]")
        # both lengths: units matched per point (4 + 2), not pooled across points.
        est, lo, hi, n = compare.paired(records, "a", "b", "kl")
        check(n == 6 and abs(est - (4 * 0.05 + 0.0 + 1.0) / 6) < 1e-12, f"two points: {est} n={n}")
        # across models: a@m2 - a@m on the same units is +1 exactly; without '@' a pairs within each model.
        est, lo, hi, n = compare.paired(records, "a@model=m2", "a@model=m", "kl", length=512)
        check(abs(est - 1.0) < 1e-12 and abs(lo - 1.0) < 1e-12 and n == 4, f"across models: {est} [{lo}, {hi}] n={n}")
        rc, _, err = run(d, "--pair", "a@size=3", "b")
        check(rc == 2 and "after '@' give model=NAME" in err, f"bad side: {rc} {err!r}")
        rc, out, _ = run(d, "--metric", "kl", "--length", "512", "--pair", "a", "b")
        check(rc == 0 and out.startswith("a - b: +0.05 [+0.05, +0.05] n=4"), f"cli: {rc} {out!r}")
        rc, out, _ = run(d, "--list")
        check(rc == 0 and out.split() == ["a", "b", "c", "short"], f"--list: {out!r}")
        rc, _, err = run(d, "--pair", "a", "nope")
        check(rc == 2 and "no stack 'nope'" in err and d in err, f"unknown stack: {rc} {err!r}")
        rc, _, err = run(d, "--metric", "bpb", "--pair", "a", "b")
        check(rc == 2 and "stack 'a' has no 'bpb' values" in err, f"missing metric: {rc} {err!r}")
        rc, _, err = run(d, "--length", "512", "--pair", "a", "short")
        check(rc == 2 and "4 and 2 units" in err, f"unequal units: {rc} {err!r}")
        rc, _, err = run(os.path.join(d, "missing"), "--list")
        check(rc == 2 and "results.jsonl" in err, f"missing results: {rc} {err!r}")
    print("compare_test:", "FAILED" if fails else "ok", f"({fails} failures)")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())

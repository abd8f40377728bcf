#!/usr/bin/env python3
"""Test of evals/plot.py: a synthetic sweep (baseline + two settings; bpb,
bpb-recompute, passkey, RULER and latency records shaped like `kvlab run`'s) gives every plot; a
missing or malformed results.jsonl fails naming the file; the Pareto front; the intervals
(Wilson's for 8 of 10 by hand, the bootstrap's seeding) and the samples behind a heatmap cell.

    python3 evals/plot_test.py
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PLOT = os.path.join(HERE, "plot.py")
sys.path.insert(0, HERE)
import plot  # noqa: E402

# stack -> (memory fraction, bpb, KL scale, passkey accuracy, decode ms factor)
SETTINGS = {"full": (1.0, 2.0, 0.0, 1.0, 1.0), "sink(n_sink=4,window=64)": (0.3, 2.4, 0.05, 0.5, 0.8),
            "kivi(bits=2)": (0.2, 2.1, 0.01, 0.9, 1.1)}


def record(index, stack, task, length, batch=1, status="ok"):
    mem, bpb, kl, acc, dec = SETTINGS[stack]
    key = json.dumps({"model": "small", "stack": stack, "task": task, "length": length, "batch": batch, "seed": 0, "rep": 0},
                     separators=(",", ":"))
    memory = {"kv_bytes_end": int(mem * length * 1024), "kv_bytes_per_token": mem * 1024, "peak_kv_bytes": int(mem * length * 1024)}
    if task in ("bpb", "bpb-recompute"):
        starts = [i * (length - 1) // 4 for i in range(4)]
        m = {"bpb": bpb, "kl": kl, "top1_agreement": 1 - kl, "bucket_starts": starts,
             "kl_by_bucket": [kl * (i + 1) for i in range(4)], "top1_by_bucket": [1 - kl * i for i in range(4)],
             "tokens_scored": 3 * (length - 1), "memory": memory,
             "per_sample": {"bpb": [bpb - 0.1, bpb, bpb + 0.1], "kl": [kl] * 3, "top1_agreement": [1 - kl] * 3}}
    elif task == "passkey":
        m = {"accuracy": acc, "char_accuracy": acc, "accuracy_by_depth": {"0": 1.0, "0.5": acc * 0.5, "1": acc},
             "samples": 6, "memory": memory}
    elif task in ("niah_single_1", "vt"):
        scores = [1.0 if i < round(acc * 10) else 0.0 for i in range(10)]
        m = {"accuracy": sum(scores) / 10, "score": 10 * sum(scores), "samples": 10, "memory": memory,
             "per_sample": {"accuracy": scores, "prompt_tokens": [length - 130] * 10}}
        if task == "niah_single_1":
            depths = [0.0, 0.5] * 5
            m["per_sample"]["depth"] = depths
            m["accuracy_by_depth"] = {d: sum(v for v, x in zip(scores, depths) if x == float(d)) / 5 for d in ("0", "0.5")}
    else:
        ms = dec * (1 + length / 1024) * batch ** 0.5
        m = {"prefill_ms": length * 0.1, "prefill_tokens_per_s": 1e4, "decode_ms_median": ms, "decode_ms_p90": ms * 1.3,
             "decode_steps": 16, "decode_tokens_per_s": 1000 / ms, "memory": memory}
    r = {"key": key, "sweep": "synthetic", "index": index, "status": status, "model": "small", "stack": stack,
         "baseline": stack == "full", "task": task, "length": length, "batch": batch, "seed": 0, "repetition": 0,
         "metrics": m if status == "ok" else {}}
    if status != "ok":
        r["error"] = "Internal: synthetic failure"
    return r


def write_sweep(d):
    recs = []
    for stack in SETTINGS:
        for task in ("bpb", "bpb-recompute", "passkey", "niah_single_1", "vt", "latency"):
            for length in (256, 512, 1024):
                for batch in ((1, 4) if task == "latency" else (1,)):
                    recs.append(record(len(recs), stack, task, length, batch))
    # A failed record of a point that later succeeded, and one that only failed.
    recs.insert(0, record(recs[-1]["index"], "kivi(bits=2)", "latency", 1024, 4, status="error"))
    recs.append(record(len(recs), "kivi(bits=2)", "latency", 2048, status="error"))
    # A point run again (after a --retry-failed, or a merge): the later ok record counts.
    again = record(0, "full", "bpb", 256)
    again["metrics"]["bpb"] = 2.05
    recs.append(again)
    with open(os.path.join(d, "results.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in recs)
    return recs


def run(*args):
    return subprocess.run([sys.executable, PLOT, *args], capture_output=True, text=True, timeout=300)


def test_plots():
    with tempfile.TemporaryDirectory() as d:
        write_sweep(d)
        recs = plot.load_records(d)
        assert len(recs) == 3 * (3 + 3 + 3 + 3 + 3 + 6), len(recs)  # the latest ok record per key; failures dropped
        assert [r["metrics"]["bpb"] for r in recs if r["index"] == 0] == [2.05]
        out = os.path.join(d, "plots")
        p = run(d, "--out", out)
        assert p.returncode == 0, p.stderr
        want = ["pareto.png", "by_length.png", "latency.png", "heatmap_passkey.png", "heatmap_niah_single_1.png",
                "heatmap_vt.png", "kl.png"]
        for name in want:
            path = os.path.join(out, name)
            assert os.path.getsize(path) > 10000, path
            assert path in p.stdout.split("\n"), p.stdout
        assert sorted(os.listdir(out)) == sorted(want), os.listdir(out)
        assert "skipping" not in p.stderr, p.stderr

        # Only latency records: the other plots are skipped, each with a reason.
        with open(os.path.join(d, "results.jsonl"), "w") as f:
            f.write(json.dumps(record(0, "full", "latency", 256)) + "\n")
        out2 = os.path.join(d, "lat")
        p = run(d, "--out", out2)
        assert p.returncode == 0, p.stderr
        assert os.listdir(out2) == ["latency.png"], os.listdir(out2)
        for name in ("pareto.png", "by_length.png", "heatmap_", "kl.png"):
            assert f"skipping {name}" in p.stderr, p.stderr

        # No baseline to divide memory by: no Pareto plot, one line saying so.
        with open(os.path.join(d, "results.jsonl"), "w") as f:
            f.write(json.dumps(record(0, "kivi(bits=2)", "bpb", 256)) + "\n")
        p = run(d, "--out", os.path.join(d, "nobase"))
        assert p.returncode == 0, p.stderr
        assert sorted(os.listdir(os.path.join(d, "nobase"))) == ["by_length.png", "kl.png"], os.listdir(os.path.join(d, "nobase"))
        assert "skipping pareto.png: no bpb or retrieval records with a baseline" in p.stderr, p.stderr


def test_errors():
    with tempfile.TemporaryDirectory() as d:
        p = run(d)
        missing = os.path.join(d, "results.jsonl")
        assert p.returncode != 0 and missing in p.stderr, (p.returncode, p.stderr)
        assert p.stderr.count("\n") == 1, p.stderr  # one line, no traceback

        good = json.dumps(record(0, "full", "bpb", 256))
        with open(missing, "w") as f:
            f.write(good + "\n{not json\n" + good + "\n")
        p = run(d)
        assert p.returncode != 0 and f"{missing}:2:" in p.stderr, p.stderr
        assert "Traceback" not in p.stderr, p.stderr

        # An unterminated last line is a killed run's partial record: dropped, as `kvlab run` drops it.
        with open(missing, "w") as f:
            f.write(good + "\n" + good[:40])
        p = run(d, "--out", os.path.join(d, "o"))
        assert p.returncode == 0 and "partial last line" in p.stderr, p.stderr


def test_pareto_front():
    pts = [("a", 1.0, 2.0), ("b", 0.5, 2.2), ("c", 0.5, 2.5), ("d", 0.2, 3.0), ("e", 0.8, 2.1), ("f", 0.9, 2.05)]
    # c: b holds as little memory with a lower bpb. The others each trade memory for bpb.
    assert plot.pareto_front(pts) == ["d", "b", "e", "f", "a"], plot.pareto_front(pts)
    pts = [("a", 1.0, 2.0), ("b", 0.5, 2.2), ("c", 0.6, 2.3), ("d", 1.2, 1.9)]
    assert plot.pareto_front(pts) == ["b", "a", "d"], plot.pareto_front(pts)
    # Accuracy: higher is better.
    acc = [("full", 1.0, 1.0), ("x", 0.3, 0.5), ("y", 0.2, 0.9), ("z", 0.2, 0.4), ("w", 0.6, 0.9)]
    assert plot.pareto_front(acc, higher_is_better=True) == ["y", "full"], plot.pareto_front(acc, True)
    # Ties: identical points both stay; an equal-memory worse point goes.
    assert plot.pareto_front([("p", 0.5, 1.0), ("q", 0.5, 1.0), ("r", 0.5, 1.1)]) == ["p", "q"]
    assert plot.pareto_front([]) == []


def test_intervals():
    # Wilson for 8 of 10 by hand (z = 1.959964): centre 0.716740, half-width 0.226578.
    p, lo, hi = plot.wilson(8, 10)
    assert p == 0.8 and abs(lo - 0.490162) < 2e-6 and abs(hi - 0.943318) < 2e-6, (lo, hi)
    assert plot.wilson(0, 10)[1] == 0.0 and abs(plot.wilson(0, 10)[2] - 0.2775) < 1e-4
    # 0/1 values take Wilson's interval; others the bootstrap, seeded: same seed, same bounds.
    assert plot.interval([1.0] * 8 + [0.0] * 2, 1, trials=True)[1:] == (lo, hi, 10)
    assert plot.interval([1.0, 1.0, 0.0], 1)[1:3] != plot.wilson(2, 3)[1:]  # windows' agreement: not trials
    a, b = plot.interval([0.1, 0.5, 0.9, 0.3], 7), plot.interval([0.1, 0.5, 0.9, 0.3], 7)
    assert a == b and a[1] < a[0] < a[2] and a[3] == 4, a
    assert plot.interval([0.5], 7)[1] is None  # one sample: no interval
    # The bootstrap of a large sample: about mean +- 1.96 sd / sqrt(n).
    import numpy as np
    x = list(np.random.default_rng(3).uniform(size=900))
    e, lo, hi, _ = plot.interval(x, 5)
    se = float(np.std(x)) / 30
    assert abs(lo - (e - plot.Z95 * se)) < 0.12 * plot.Z95 * se and abs(hi - (e + plot.Z95 * se)) < 0.12 * plot.Z95 * se
    # Per-sample values when recorded, else the point's own value.
    r = record(0, "kivi(bits=2)", "niah_single_1", 512)
    assert plot.units(r, "accuracy") == r["metrics"]["per_sample"]["accuracy"]
    assert plot.units(record(0, "full", "passkey", 512), "accuracy") == [1.0]
    # A heatmap cell's n: the samples at that depth; without depths one row "all".
    cells = plot.depth_cells(r)
    assert cells == {"0": (r["metrics"]["accuracy_by_depth"]["0"], 5), "0.5": (r["metrics"]["accuracy_by_depth"]["0.5"], 5)}, cells
    assert plot.depth_cells(record(0, "full", "vt", 512)) == {"all": (1.0, 10)}
    assert plot.depth_cells(record(0, "full", "passkey", 512))["0.5"] == (0.5, 2)  # 6 samples over 3 depths


if __name__ == "__main__":
    test_intervals()
    test_pareto_front()
    test_errors()
    test_plots()
    print("plot_test: ok")

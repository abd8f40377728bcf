#!/usr/bin/env python3
"""Test of evals/plot_serve.py: synthetic `kvlab serve-bench --csv` files (the header serve_bench.cpp
writes; one run without prefix caching, one with cached blocks and an idle gap) give a PNG; a CSV
missing a needed column fails naming the file and the column; lines break over idle gaps.

    python3 evals/plot_serve_test.py
"""
import math
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PLOT = os.path.join(HERE, "plot_serve.py")
SERVE_BENCH = os.path.join(HERE, "..", "core", "serve_bench.cpp")
sys.path.insert(0, HERE)
import plot_serve  # noqa: E402

# As core/serve/serve_bench.cpp writes it (checked against the source below when it is there).
HEADER = ("time,running,waiting,batched_tokens,prefill_tokens,preempted,bytes_in_use,pool_bytes,occupancy,"
          "token_bytes,largest_request,largest_request_tokens,largest_request_bytes,largest_request_share,wall_ms,"
          "cached_bytes,shared_bytes,prefix_hit_tokens,device_bytes,host_bytes,disk_bytes")
POOL = 15_000_000_000


def check_header_matches_source():
    if not os.path.exists(SERVE_BENCH):
        print("plot_serve_test: core/serve/serve_bench.cpp not found; header not checked against it")
        return
    src = open(SERVE_BENCH, encoding="utf-8").read()
    m = re.search(r'csv << ((?:"[^"]*"\s*)+);', src)
    assert m, "serve_bench.cpp: the CSV header statement was not found"
    header = "".join(re.findall(r'"([^"]*)"', m.group(1))).replace("\\n", "")
    assert header == HEADER, f"serve_bench.cpp writes the header\n  {header}\nthe test has\n  {HEADER}"


def row(t, running, waiting, preempted, in_use, cached):
    occ = in_use / POOL
    return (f"{t},{running},{waiting},{running + 100},100,{preempted},{in_use},{POOL},{occ:.5f},{in_use},0,1000,"
            f"{in_use // 2},{occ / 2:.5f},{t * 0.5:.3f},{cached},0,0,{in_use},0,0")


def write_csv(path, header, rows):
    with open(path, "w", encoding="utf-8") as f:
        f.write(header + "\n")
        for r in rows:
            f.write(r + "\n")


def synthetic(path, cached, gap_at=None):
    rows, t = [], 0
    for i in range(400):
        if gap_at is not None and i == gap_at:
            t += 30  # idle steps: no rows
        in_use = int(POOL * min(1.0, i / 200) * (0.9 + 0.1 * math.sin(i / 7)))
        cache = int(min(POOL - in_use, POOL * 0.2)) if cached else 0
        rows.append(row(t, 1 + i % 20, max(0, i % 30 - 20), 1 if i % 97 == 50 else 0, in_use, cache))
        t += 1
    write_csv(path, HEADER, rows)


def drop_column(src, dst, column):
    lines = open(src, encoding="utf-8").read().splitlines()
    cols = lines[0].split(",")
    k = cols.index(column)
    write_csv(dst, ",".join(c for i, c in enumerate(cols) if i != k),
              [",".join(v for i, v in enumerate(line.split(",")) if i != k) for line in lines[1:]])


def run(*args):
    return subprocess.run([sys.executable, PLOT, *args], capture_output=True, text=True)


def assert_png(path):
    assert os.path.exists(path), f"{path} was not written"
    assert os.path.getsize(path) > 1000, f"{path} is too small ({os.path.getsize(path)} B)"
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"


def main():
    check_header_matches_source()
    with tempfile.TemporaryDirectory() as d:
        a, b = os.path.join(d, "a.csv"), os.path.join(d, "b.csv")
        synthetic(a, cached=False)
        synthetic(b, cached=True, gap_at=250)

        # Two runs, labels, smoothing, an output directory that does not exist yet.
        out = os.path.join(d, "img", "occupancy.png")
        p = run(a, b, "--out", out, "--labels", "plain,prefix caching", "--smooth", "5")
        assert p.returncode == 0, p.stderr
        assert_png(out)

        # Default labels, no smoothing, one run.
        out1 = os.path.join(d, "one.png")
        p = run(b, "--out", out1)
        assert p.returncode == 0, p.stderr
        assert_png(out1)

        # Optional columns absent (no preempted, no cached_bytes): two panels, still a figure.
        minimal = os.path.join(d, "minimal.csv")
        drop_column(a, minimal, "preempted")
        drop_column(minimal, minimal, "cached_bytes")
        out2 = os.path.join(d, "minimal.png")
        p = run(minimal, "--out", out2)
        assert p.returncode == 0, p.stderr
        assert_png(out2)

        # A needed column missing: non-zero exit, the message names the file and the column.
        for column in ("waiting", "occupancy", "time"):
            bad = os.path.join(d, f"no-{column}.csv")
            drop_column(a, bad, column)
            out3 = os.path.join(d, f"no-{column}.png")
            p = run(a, bad, "--out", out3)
            assert p.returncode != 0, f"a CSV without {column} was accepted"
            assert bad in p.stderr and column in p.stderr, f"message does not name {bad} and {column}: {p.stderr!r}"
            assert not os.path.exists(out3), "a failed run wrote a figure"

        # cached_bytes without pool_bytes: the band cannot be drawn, and the message says why.
        bad = os.path.join(d, "no-pool.csv")
        drop_column(b, bad, "pool_bytes")
        p = run(bad, "--out", os.path.join(d, "no-pool.png"))
        assert p.returncode != 0 and bad in p.stderr and "pool_bytes" in p.stderr, p.stderr

        # Header only; a value that is not a number; a file that does not exist.
        empty = os.path.join(d, "empty.csv")
        write_csv(empty, HEADER, [])
        p = run(empty, "--out", os.path.join(d, "empty.png"))
        assert p.returncode != 0 and empty in p.stderr and "no rows" in p.stderr, p.stderr
        garbled = os.path.join(d, "garbled.csv")
        lines = open(a, encoding="utf-8").read().splitlines()
        cells = lines[3].split(",")
        cells[1] = "x"  # running, on the file's line 4
        lines[3] = ",".join(cells)
        write_csv(garbled, lines[0], lines[1:])
        p = run(garbled, "--out", os.path.join(d, "garbled.png"))
        assert p.returncode != 0 and f"{garbled}:4" in p.stderr and "running" in p.stderr, p.stderr
        p = run(os.path.join(d, "absent.csv"), "--out", os.path.join(d, "absent.png"))
        assert p.returncode != 0 and "absent.csv" in p.stderr, p.stderr

        # --labels must give one label per CSV.
        p = run(a, b, "--out", os.path.join(d, "x.png"), "--labels", "only-one")
        assert p.returncode != 0 and "--labels" in p.stderr, p.stderr

    # Lines break over idle gaps; smoothing stays within each stretch.
    import numpy as np
    t = np.array([0, 1, 2, 10, 11], dtype=float)
    y = np.array([1, 1, 1, 5, 5], dtype=float)
    tg, yg = plot_serve.with_gaps(t, y)
    assert list(tg) == [0, 1, 2, 3, 10, 11] and math.isnan(yg[3]), (tg, yg)
    assert list(plot_serve.smooth(t, y, 3)) == [1, 1, 1, 5, 5], plot_serve.smooth(t, y, 3)
    print("plot_serve_test: OK")


if __name__ == "__main__":
    main()

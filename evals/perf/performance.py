#!/usr/bin/env python3
"""The kernel figures of docs/performance.md, measured and rendered by one script.

  python3 evals/perf/performance.py measure [--build build] [--engine DIR]   # this host: results/perf/<host>.json
  python3 evals/perf/performance.py render                    # docs/performance.md's kernel tables
  python3 evals/perf/performance.py check                     # exit 1 when the page differs from render

`measure` first measures the host's read bandwidth once: attention_bench's
BM_ReadBandwidth (an integer sum over 1 GiB on every core, the median of
five repetitions). Every floor fraction on the page is a kernel's bytes read
per second over that one figure. It then runs each benchmark program once
with the cases below (median of three repetitions, --benchmark_min_time=0.5)
and keeps, per case, the median time, the bytes the case reads per second
(the benchmark's own counter) and the fraction. With --engine DIR it also
runs the engine's decode step against its floor
(evals/configs/weights16/step-floor.sh, its 3.8 GB checkpoint kept in DIR)
with that same bandwidth. Nothing else may run on the
host meanwhile: the 2-core hosts are shared, and a figure taken under load
is not a figure.

`render` rewrites the part of docs/performance.md between the markers
<!-- perf:begin --> and <!-- perf:end --> from every results/perf/*.json, one
column per host kind; the rest of the page is written by hand.
"""
import argparse
import datetime
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(ROOT, "results", "perf")
PAGE = os.path.join(ROOT, "docs", "performance.md")
BEGIN, END = "<!-- perf:begin -->", "<!-- perf:end -->"
FLAGS = ["--benchmark_min_time=0.5", "--benchmark_repetitions=3", "--benchmark_report_aggregates_only=true",
         "--benchmark_format=json"]
BANDWIDTH = ("attention_bench", ["--benchmark_filter=^BM_ReadBandwidth/", "--benchmark_repetitions=5",
                                 "--benchmark_report_aggregates_only=true", "--benchmark_format=json"])

# (section, label, program, benchmark, counter[, time counter]). The counter
# is the bytes the case reads per second; "GBps" is kivi_bench's, in GB/s;
# "A*B" multiplies two counters (block_runs_bench's fraction of its own
# bandwidth times that bandwidth in GB/s). The time is the benchmark's
# real time, or the named counter in milliseconds.
CASES = [
    ("Paged decode attention", "paged decode, 4K, layout 1", "attention_bench",
     "BM_PagedDecodeCpu/ctx:4096/batch:1/layout:1/real_time", "kv_read"),
    ("Paged decode attention", "paged decode, 16K, layout 1", "attention_bench",
     "BM_PagedDecodeCpu/ctx:16384/batch:1/layout:1/real_time", "kv_read"),
    ("Paged decode attention", "paged decode, 16K, layout 3", "attention_bench",
     "BM_PagedDecodeCpu/ctx:16384/batch:1/layout:3/real_time", "kv_read"),
    ("Paged decode attention", "paged decode, batch 4, 4K, layout 1", "attention_bench",
     "BM_PagedDecodeCpu/ctx:4096/batch:4/layout:1/real_time", "kv_read"),
    ("Paged decode attention", "plain sum over the same blocks, 16K, layout 3", "attention_bench",
     "BM_PagedGatherRead/ctx:16384/batch:1/layout:3/real_time", "kv_read"),
    ("Decode-time block runs", "all prefilled (l3)", "block_runs_bench",
     "BM_GrownDecode/prefill:1024/decode:15360/runs:32/aged:0/real_time", "frac_l3*bw_GBps", "l3_ms"),
    ("Decode-time block runs", "grown by decode, runs off", "block_runs_bench",
     "BM_GrownDecode/prefill:1024/decode:15360/runs:32/aged:0/real_time", "frac_off*bw_GBps", "off_ms"),
    ("Decode-time block runs", "grown by decode, runs of 32", "block_runs_bench",
     "BM_GrownDecode/prefill:1024/decode:15360/runs:32/aged:0/real_time", "frac_on*bw_GBps", "on_ms"),
    ("Sealed encodings", "bf16, 16K, layout 3", "kivi_bench", "BM_DecodeBf16/ctx:16384/layout:3/real_time", "GBps"),
    ("Sealed encodings", "KIVI-2 exact, 16K, layout 3", "kivi_bench", "BM_DecodeKivi2/ctx:16384/layout:3/real_time",
     "GBps"),
    ("Sealed encodings", "KIVI-2 int8 scores, 16K, layout 3", "kivi_bench",
     "BM_DecodeKivi2Int8/ctx:16384/layout:3/real_time", "GBps"),
    ("Sealed encodings", "quant int8, 16K, layout 3", "kivi_bench", "BM_DecodeQuantInt8/ctx:16384/layout:3/real_time",
     "GBps"),
    ("Sealed encodings", "quant fp8, 16K, layout 3", "kivi_bench", "BM_DecodeQuantFp8/ctx:16384/layout:3/real_time",
     "GBps"),
    ("Quest reads", "decode step, 16K, every page", "read_bench", "BM_DecodeStep/ctx:16384/budget:0/real_time",
     "kv_read"),
    ("Quest reads", "decode step, 16K, token budget 1024", "read_bench",
     "BM_DecodeStep/ctx:16384/budget:1024/real_time", "kv_read"),
    ("16-bit weights", "bf16 weights, fp32 arithmetic, 1 row", "matmul_bench", "BM_MatMul16F32/1/real_time",
     "w_read"),
    ("16-bit weights", "bf16 weights, fp32 arithmetic, 64 rows", "matmul_bench", "BM_MatMul16F32/64/real_time",
     "w_read"),
]

SECTIONS = {
    "Paged decode attention": "One layer of llama-3.1-8b shape (32 query heads, 8 KV heads, head_dim 128, bf16 K/V, "
                              "block_size 16), batch 1 unless named, `kernels/attention_bench.cpp`. Layouts: 1 = every "
                              "block at a random place on huge pages (what `BlockPool` asks for), 3 = runs of 32 "
                              "contiguous blocks in random order (the engine's chunked prefill and decode-time runs).",
    "Decode-time block runs": "One llama-3.1-8b sequence grown in the engine's `KVCache` to 16,384 tokens (1,024 "
                              "prefilled, 15,360 decoded one by one), each call reading one layer of the 32 "
                              "(`core/cache/block_runs_bench.cpp`): the same cache all prefilled, grown without "
                              "decode-time runs, and grown with runs of 32 blocks (`run_blocks`, the default).",
    "Sealed encodings": "The same layer's decode over sealed blocks, `kernels/kivi_bench.cpp`: KIVI-2 (keys per "
                        "channel, values per token, 2 bits, group 32, residual 128), int8 and fp8 per-token scales "
                        "(`quant`); bytes are the encoded blocks plus the plain residual; in brackets the speed-up "
                        "over bf16 on the same host.",
    "Quest reads": "A decode step of the llama-3.1-8b layer with Quest's page ranking "
                   "(`core/cache/read_bench.cpp`); bytes are the K/V the step reads.",
    "16-bit weights": "One product at Llama-3.1-8B's MLP shape, bf16 weights widened to fp32 in the kernel "
                      "(`core/model/matmul_bench.cpp`); bytes are the weights.",
}


# Sections whose cells also give the speed-up over one of their cases.
BASELINE = {"Sealed encodings": "bf16, 16K, layout 3"}


def host_kind():
    """Zen 3 / Zen 4 / Zen 5 / Xeon from /proc/cpuinfo, and the raw facts."""
    info = {}
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        for line in f:
            if ":" in line:
                k, v = (s.strip() for s in line.split(":", 1))
                info.setdefault(k, v)
    vendor, family, model = info.get("vendor_id", ""), int(info.get("cpu family", "0")), int(info.get("model", "0"))
    if vendor == "AuthenticAMD" and family == 25:
        kind = "Zen 4" if 0x10 <= model <= 0x1F or 0x60 <= model <= 0xAF else "Zen 3"
    elif vendor == "AuthenticAMD" and family == 26:
        kind = "Zen 5"
    elif vendor == "GenuineIntel":
        kind = "Xeon"
    else:
        kind = vendor or "unknown"
    return kind, {"model_name": info.get("model name", ""), "family": family, "model": model,
                  "cores": os.cpu_count()}


def run_json(build, program, args):
    cmd = [os.path.join(build, program)] + args
    out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout
    return json.loads(out[out.index("{"):]), " ".join(["build/" + program] + [a if "|" not in a and "^" not in a else "'" + a + "'"
                                                             for a in args])


def median_of(doc, name):
    for b in doc["benchmarks"]:
        if b.get("run_name") == name and b.get("aggregate_name") == "median":
            return b
    raise SystemExit(f"performance.py: {name} has no median in the benchmark output")


def to_ms(b):
    scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b["time_unit"]]
    return b["real_time"] * scale


ENGINE_COLUMNS = ["prefill tok/s", "prefill FMA share", "decode ms/step", "bytes a step", "floor ms",
                  "frac of floor"]


def measure_engine(build, engine_dir, bandwidth, kind):
    """step-floor.sh at this host's one bandwidth; its table's rows."""
    out = os.path.join(RESULTS, kind.lower().replace(" ", "-") + "-engine")
    env = dict(os.environ, KVLAB_READ_BW_GBPS=f"{bandwidth / 1e9:.3f}")
    modes = os.environ.get("KVLAB_STEP_FLOOR_MATMUL", "")
    script = os.path.join("evals", "configs", "weights16", "step-floor.sh")
    subprocess.run(["bash", script, engine_dir, build, out], cwd=ROOT, env=env, check=True, capture_output=True)
    rows = []
    with open(os.path.join(out, "step-floor.md"), encoding="utf-8") as f:
        for line in f:
            cells = [c.strip().strip("*") for c in line.strip().strip("|").split("|")]
            if len(cells) == 8 and cells[0] not in ("weights, arithmetic", "---"):
                rows.append(dict(zip(["weights"] + ENGINE_COLUMNS, [cells[0]] + cells[1:4] + cells[4:5] + cells[6:8])))
    prefix = f"KVLAB_STEP_FLOOR_MATMUL='{modes}' " if modes else ""
    return rows, (f"{prefix}KVLAB_READ_BW_GBPS={bandwidth / 1e9:.3f} bash {script} DIR build "
                  f"{os.path.relpath(out, ROOT)}")


def measure(build, engine_dir=None):
    kind, facts = host_kind()
    load_before = os.getloadavg()[0]
    doc, bw_cmd = run_json(build, *BANDWIDTH)
    bw = median_of(doc, "BM_ReadBandwidth/real_time")
    bandwidth = bw["read"]  # bytes per second
    cases, commands = [], {}
    for program in dict.fromkeys(c[2] for c in CASES):
        names = list(dict.fromkeys(c[3] for c in CASES if c[2] == program))
        filt = "^(" + "|".join(re.escape(n[: -len("/real_time")]) for n in names) + ")/real_time$"
        doc, cmd = run_json(build, program, ["--benchmark_filter=" + filt] + FLAGS)
        commands[program] = cmd
        for section, label, prog, name, counter, *time_key in CASES:
            if prog != program:
                continue
            b = median_of(doc, name)
            for key in counter.split("*") + time_key:
                if key not in b:
                    raise SystemExit(f"performance.py: {name} reports no counter '{key}'")
            if "*" in counter:
                first, second = counter.split("*")
                rate = b[first] * b[second] * 1e9
            else:
                rate = b[counter] * 1e9 if counter == "GBps" else b[counter]
            time_ms = b[time_key[0]] if time_key else to_ms(b)
            cases.append({"section": section, "label": label, "benchmark": name, "time_ms": time_ms,
                          "GBps": rate / 1e9, "frac": rate / bandwidth,
                          "cpu_isa": doc["context"].get("cpu_isa", "")})
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    if engine_dir:
        engine, engine_cmd = measure_engine(build, engine_dir, bandwidth, kind)
    else:  # keep the host's last engine rows
        engine, engine_cmd = [], ""
        old_path = os.path.join(RESULTS, kind.lower().replace(" ", "-") + ".json")
        if os.path.exists(old_path):
            with open(old_path, encoding="utf-8") as f:
                old = json.load(f)
            engine, engine_cmd = old.get("engine", []), old.get("engine_command", "")
    result = {"host": kind, "cpu": facts, "commit": commit, "date": datetime.date.today().isoformat(),
              "engine": engine, "engine_command": engine_cmd,
              "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],
              "bandwidth_GBps": bandwidth / 1e9, "bandwidth_command": bw_cmd, "commands": commands, "cases": cases}
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, kind.lower().replace(" ", "-") + ".json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {os.path.relpath(path, ROOT)}: {kind}, read bandwidth {bandwidth / 1e9:.1f} GB/s")


def fmt_ms(ms):
    return f"{ms:.3g}" if ms < 100 else f"{ms:.0f}"


def render_block():
    hosts = []
    for name in sorted(os.listdir(RESULTS)) if os.path.isdir(RESULTS) else []:
        if name.endswith(".json"):
            with open(os.path.join(RESULTS, name), encoding="utf-8") as f:
                hosts.append(json.load(f))
    out = [BEGIN, "", "<!-- written by `python3 evals/perf/performance.py render` from results/perf/*.json; "
           "edit the script, not this part -->", ""]
    out.append("| host | CPU | kernel path | read bandwidth | load average before / after | measured at |")
    out.append("| --- | --- | --- | --- | --- | --- |")
    for h in hosts:
        isa = sorted({c["cpu_isa"] for c in h["cases"] if c["cpu_isa"]})
        out.append(f"| {h['host']} | {h['cpu']['model_name']}, family {h['cpu']['family']} model "
                   f"{h['cpu']['model']}, {h['cpu']['cores']} cores | {', '.join(isa) or '?'} | "
                   f"{h['bandwidth_GBps']:.1f} GB/s | {h['load_average'][0]} / {h['load_average'][1]} | "
                   f"commit {h['commit']}, {h['date']} |")
    out.append("")
    out.append("Each cell: median time per call · bytes read per second · fraction of the host's read "
               "bandwidth (the floor fraction). The bandwidth is measured once per host with "
               + " / ".join(sorted({f"`{h['bandwidth_command']}`" for h in hosts})) + " (median of five sums "
               "over 1 GiB on every core), and every fraction of that host uses it. A fraction above 1 is a kernel that "
               "reads faster than that sum's loop (several streams in flight on each core).")
    for section in dict.fromkeys(c[0] for c in CASES):
        out += ["", f"### {section}", "", SECTIONS[section], ""]
        out.append("| case | " + " | ".join(h["host"] for h in hosts) + " |")
        out.append("| --- |" + " --- |" * len(hosts))
        for _, label, program, name, *_ in (c for c in CASES if c[0] == section):
            cells = []
            for h in hosts:
                got = [c for c in h["cases"] if c["benchmark"] == name and c["label"] == label]
                base = [c for c in h["cases"] if c["section"] == section and c["label"] == BASELINE.get(section)]
                if not got:
                    cells.append("not measured")
                    continue
                cell = f"{fmt_ms(got[0]['time_ms'])} ms · {got[0]['GBps']:.1f} GB/s · {got[0]['frac']:.2f}"
                if base and label != BASELINE[section]:
                    cell += f" ({base[0]['time_ms'] / got[0]['time_ms']:.2f}× {BASELINE[section].split(',')[0]})"
                cells.append(cell)
            out.append(f"| {label} | " + " | ".join(cells) + " |")
        programs = dict.fromkeys(c[2] for c in CASES if c[0] == section)
        for h in hosts:
            for p in programs:
                if p in h["commands"]:
                    out += ["", f"{h['host']}: `{h['commands'][p]}`"]
    out += ["", "### The engine's decode step against its floor", "",
            "The engine at Llama-3.1-8B's shape cut to 4 layers, batch 1, a 4,096-token prompt, 32 new tokens, "
            "fp32 weights and the bf16 checkpoint under each `--matmul` (`evals/configs/weights16/step-floor.sh`). "
            "Floor = the bytes a decode step reads (every weight but the embedding table, plus the KV read) over "
            "the host's read bandwidth above; prefill FMA share = its multiply-adds per second over kivi_bench's "
            "8-lane fp32 FMA peak.", ""]
    engine_hosts = [h for h in hosts if h.get("engine")]
    if not engine_hosts:
        out.append("No host has run `performance.py measure --engine DIR` yet.")
    for h in engine_hosts:
        out.append(f"| {h['host']}: weights, arithmetic | " + " | ".join(ENGINE_COLUMNS) + " |")
        out.append("| --- |" + " --- |" * len(ENGINE_COLUMNS))
        for r in h["engine"]:
            out.append(f"| {r['weights']} | " + " | ".join(r[c] for c in ENGINE_COLUMNS) + " |")
        out += ["", f"{h['host']}: `{h['engine_command']}`", ""]
    out += ["", END]
    return "\n".join(out)


def render(write):
    with open(PAGE, encoding="utf-8") as f:
        page = f.read()
    if BEGIN not in page or END not in page:
        raise SystemExit(f"performance.py: {PAGE} has no {BEGIN} ... {END} markers")
    new = page[: page.index(BEGIN)] + render_block() + page[page.index(END) + len(END):]
    if write:
        with open(PAGE, "w", encoding="utf-8") as f:
            f.write(new)
        return 0
    if new != page:
        print("docs/performance.md differs from results/perf/*.json: run python3 evals/perf/performance.py render",
              file=sys.stderr)
        return 1
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("command", choices=["measure", "render", "check"])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--engine", metavar="DIR", help="also the engine's step against its floor (checkpoint in DIR)")
    a = ap.parse_args()
    if a.command == "measure":
        measure(a.build, a.engine)
        return render(True)
    return render(a.command == "render")


if __name__ == "__main__":
    sys.exit(main())

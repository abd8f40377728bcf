#!/usr/bin/env bash
# The engine's decode step against its bandwidth floor, and prefill's speed,
# with 16-bit weights: a random llama-3.1-8b cut to its first 4 layers, in
# bf16 (written to DIR once, 3.8 GB), batch 1, a 4,096-token prompt, 32 new
# tokens; generated with fp32 weights (the preset, 2x the bytes) and with the
# bf16 checkpoint under each --matmul arithmetic (f32, prefill, weights).
#
#   bash evals/configs/weights16/step-floor.sh DIR [BUILD [OUT]]
#
# floor = bytes a decode step reads (every weight tensor but the embedding
# table, of which a step reads one row; plus the KV read that kvlab reports)
# / the host's read bandwidth: KVLAB_READ_BW_GBPS when set (what
# evals/perf/performance.py measured once for the host), else measured just
# before and just after each run (block_runs_bench's BM_ReadBandwidth, a
# 1 GiB sum on every thread, median of 3; the floor takes their mean).
# KVLAB_STEP_FLOOR_MATMUL: the --matmul modes run on the bf16 checkpoint
# (default "f32 prefill weights"; bf16 arithmetic without the CPU's bf16
# instructions, as on Zen 3, takes over ten minutes a prefill). frac = floor / the median step. Prefill's FMA share: the products' and attention's
# multiply-adds (every layer matrix per token, the head on the last token;
# QK and PV over the causal half) per second, over kivi_bench's measured
# 8-lane fp32 FMA peak (fma_peak_G_per_core) x 8 lanes x the threads.
# Needs ~12 GB of memory (the fp32 preset holds 7.7 GB of weights).
set -euo pipefail
cd "$(dirname "$0")/../../.."
dir=${1:?usage: step-floor.sh DIR [BUILD [OUT]]}
B=${2:-build}
out=${3:-results/weights16}
mkdir -p "$dir" "$out"
ck=$dir/llama-3.1-8b-4layers-bf16
[ -f "$ck/model.safetensors" ] || "$B/kvlab" init --model llama-3.1-8b --layers 4 --dtype bf16 --seed 0 --out "$ck" >/dev/null
# 4,096 Llama 3 ids: BOS, then a fixed pseudo-random sequence.
python3 -c 'import random; random.seed(1); print(" ".join(["128000"] + [str(random.randrange(1000, 120000)) for _ in range(4095)]))' > "$dir/prompt4096.ids"

log=$out/step-floor.log
{
  echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, load average at the start $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# $("$B/kvlab" --version | grep 'cpu kernel path')"
  "$B/kivi_bench" --benchmark_filter='BM_DecodeBf16/ctx:4096/layout:3' --benchmark_min_time=0.1 2>&1 |
    grep -E '^(fma_peak_G_per_core|omp_threads):'
  bandwidth() {
    if [ -n "${KVLAB_READ_BW_GBPS:-}" ]; then echo "$KVLAB_READ_BW_GBPS"; return; fi
    "$B/block_runs_bench" --benchmark_filter=BM_ReadBandwidth --benchmark_min_time=0.5 --benchmark_repetitions=3 \
      --benchmark_report_aggregates_only=true 2>&1 | sed -n 's/^BM_ReadBandwidth.*_median.* read=\([0-9.]*\)G.*/\1/p'
  }
  run() {  # NAME, then generate's arguments
    local name=$1; shift
    local shown="$*"
    echo "## $name: kvlab generate ${shown//$dir/DIR} --prompt-file DIR/prompt4096.ids --max-new-tokens 32"
    echo "bw_before_GBps: $(bandwidth)"
    "$B/kvlab" generate "$@" --prompt-file "$dir/prompt4096.ids" --max-new-tokens 32 |
      grep -E '^(prefill:|KV read per decode step:|weights:)'
    echo "bw_after_GBps: $(bandwidth)"
  }
  run "f32 weights" --model llama-3.1-8b --layers 4
  for m in ${KVLAB_STEP_FLOOR_MATMUL:-f32 prefill weights}; do run "bf16 weights, --matmul $m" --model "$ck" --matmul "$m"; done
  echo "# load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$log"

# The table, from the log and the checkpoint's header.
python3 - "$log" "$ck/model.safetensors" > "$out/step-floor.md" <<'EOF'
import json, re, struct, sys
log, st = open(sys.argv[1]).read(), sys.argv[2]
with open(st, "rb") as f:
    header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
size = {"BF16": 2, "F16": 2, "F32": 4}
shapes = {k: v for k, v in header.items() if k != "__metadata__"}
def numel(v):
    n = 1
    for d in v["shape"]:
        n *= d
    return n
# bf16 bytes a step reads: every tensor but the embedding table (norms are f32 in the file and in memory).
step16 = sum(numel(v) * size[v["dtype"]] for k, v in shapes.items() if "embed_tokens" not in k)
step32 = sum(numel(v) * 4 for k, v in shapes.items() if "embed_tokens" not in k)
layer_params = sum(numel(v) for k, v in shapes.items() if ".layers." in k and v["shape"] and len(v["shape"]) == 2)
head_params = numel(shapes["lm_head.weight"])
cfg = json.load(open(st.rsplit("/", 1)[0] + "/config.json"))
L, Hq, d = cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["head_dim"]
peak1 = float(re.search(r"fma_peak_G_per_core: ([0-9.]+)", log).group(1)) * 1e9 * 8
threads = int(re.search(r"omp_threads: ([0-9]+)", log).group(1))
print(f"Host: {log.splitlines()[0][2:]}; {log.splitlines()[1][2:]}.")
print(f"fp32 FMA peak {peak1 * threads / 1e9:.0f} G/s ({threads} threads x {peak1 / 1e9:.1f} G, 8 lanes).")
print()
print("| weights, arithmetic | prefill tok/s | prefill FMA share | decode ms/step | bytes a step | "
      "read GB/s before / after | floor ms | frac of floor |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for sec in log.split("## ")[1:]:
    name = sec.split(":")[0]
    m = re.search(r"prefill: (\d+) tokens x 1 in ([0-9.]+) ms; decode: \d+ steps, median ([0-9.]+) ms/step", sec)
    T, pre_ms, step_ms = int(m.group(1)), float(m.group(2)), float(m.group(3))
    kv = int(re.search(r"KV read per decode step: (\d+) B", sec).group(1))
    w = step32 if name.startswith("f32") else step16
    b0 = float(re.search(r"bw_before_GBps: ([0-9.]+)", sec).group(1))
    b1 = float(re.search(r"bw_after_GBps: ([0-9.]+)", sec).group(1))
    bw = (b0 + b1) / 2 * 1e9
    fmas = T * layer_params + head_params + L * Hq * d * T * T  # QK and PV: 2 x d x T^2/2 each head
    floor_ms = (w + kv) / bw * 1e3
    print(f"| {name} | {T / pre_ms * 1e3:.1f} | {fmas / (pre_ms / 1e3) / (peak1 * threads):.2f} | {step_ms:.1f} | "
          f"{(w + kv) / 1e9:.3f} GB | {b0:.1f} / {b1:.1f} | {floor_ms:.0f} | **{floor_ms / step_ms:.2f}** |")
EOF
cat "$out/step-floor.md"

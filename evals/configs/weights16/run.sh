#!/usr/bin/env bash
# 16-bit weights at full size: writes a random-weight llama-3.1-8b checkpoint in
# bf16 (all 32 layers, 16 GB; skipped when DIR already holds one), then
# generates from it with fp32 arithmetic (default) and with --matmul weights,
# and keeps kvlab's reports (peak resident memory against the checkpoint's
# size, prefill and decode times) in results/weights16/ (or OUT).
# Needs ~17 GB of free disk in DIR and ~17 GB of memory.
#   bash evals/configs/weights16/run.sh DIR [path/to/kvlab [OUT]]
set -euo pipefail
cd "$(dirname "$0")/../../.."
dir=${1:?usage: run.sh DIR [kvlab [OUT]]}
KVLAB=${2:-build/kvlab}
out=${3:-results/weights16}
mkdir -p "$out"
[ -f "$dir/model.safetensors" ] || "$KVLAB" init --model llama-3.1-8b --dtype bf16 --out "$dir" --seed 0
# A 16-token prompt of Llama 3 ids (the preset ships no tokenizer).
tokens=128000,791,1401,6636,374,264,1160,315,279,7447,323,2819,315,1475,3347,4037
for matmul in f32 weights; do
  {
    echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "# $KVLAB generate --model DIR --tokens $tokens --max-new-tokens 8 --matmul $matmul"
    "$KVLAB" generate --model "$dir" --tokens "$tokens" --max-new-tokens 8 --matmul "$matmul"
  } > "$out/llama-3.1-8b-bf16-matmul-$matmul.txt"
  cat "$out/llama-3.1-8b-bf16-matmul-$matmul.txt"
done

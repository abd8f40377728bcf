#!/usr/bin/env bash
# Regenerates every committed reproduction under results/ (and the model-card
# figures), in two lanes of one thread each on a 2-core machine (the last
# whole run: 116 minutes, loaded). Each command also works alone; rerunning skips recorded points
# unless the results directory is removed first.
set -euo pipefail
cd "$(dirname "$0")/../../.."
k=${KVLAB:-build/kvlab}
lane_a() {
  $k run evals/configs/model-card.toml --set threads=1 --no-progress
  $k run evals/configs/model-card-kjv.toml --set threads=1 --no-progress
  $k run evals/configs/model-card-brown.toml --set threads=1 --no-progress
  $k run evals/configs/papers/streamingllm.toml --set threads=1 --no-progress
  $k run evals/configs/papers/streamingllm-recompute.toml --set threads=1 --no-progress
  $k run evals/configs/papers/kivi.toml --set threads=1 --no-progress
  $k run evals/configs/papers/paging.toml --set threads=1 --no-progress
}
lane_b() {
  $k run evals/configs/papers/h2o.toml --set threads=1 --no-progress
  $k run evals/configs/papers/gqa.toml --set threads=1 --no-progress
  $k run evals/configs/composition.toml --set threads=1 --no-progress
  $k run evals/configs/retrieval.toml --set threads=1 --no-progress
  bash evals/configs/qwen3-random/run.sh "$k"
  bash evals/configs/papers/duo.sh
  bash evals/configs/papers/gqa-uptrain.sh
}
lane_a > results/run-all-a.log 2>&1 &
a=$!
lane_b > results/run-all-b.log 2>&1 &
b=$!
wait $a
wait $b
for d in results/paper-* results/composition results/retrieval results/model-card; do
  /usr/bin/python3 evals/plot.py "$d" > /dev/null || true
done
/usr/bin/python3 datasets/models/make_card.py datasets/models/tiny-gqa
/usr/bin/python3 datasets/models/make_card.py datasets/models/tiny-mha

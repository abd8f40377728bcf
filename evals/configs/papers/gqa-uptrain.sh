#!/usr/bin/env bash
# GQA reproduction, after uptraining: pool tiny-mha's 8 KV heads to 4, 2 and
# 1 (mean), uptrain each for 5% of tiny-mha's steps, then evaluate all with
# the full cache (gqa-uptrained.toml). The checkpoints go to
# results/paper-gqa-uptrained/models/ (not committed: rerun this to rebuild).
#   bash evals/configs/papers/gqa-uptrain.sh
set -euo pipefail
k=${KVLAB:-build/kvlab}
cd "$(dirname "$0")/../../.."
models=results/paper-gqa-uptrained/models
mkdir -p "$models"
for g in 2 4 8; do
  $k convert datasets/models/tiny-mha "$models/pool$g-mean" --pool-kv-heads "$g" --merge mean
  $k train evals/configs/papers/gqa-uptrain.toml --init "$models/pool$g-mean" --out "$models/pool$g-mean-up" --quiet
done
$k run evals/configs/papers/gqa-uptrained.toml --no-progress

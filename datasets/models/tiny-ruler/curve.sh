#!/usr/bin/env bash
# tiny-ruler's learning curve on its three RULER tasks: the full cache's
# score (evals/configs/ruler-check.toml: niah_single_1, niah_multikey_1, vt,
# 50 prompts a task at 1,024 and 2,048 tokens) every EVERY steps of
# train.toml. Trains a fresh copy into DIR, stopping every EVERY steps
# (`kvlab train --max-steps`: the run is deterministic in the config and the
# step, so a stop and resume gives the same weights as one run), scores each
# checkpoint, and writes DIR/curve.csv (step, task, length, score, samples).
# With CHECKPOINTS=D, scores D/step-N/ (copies of the checkpoint taken while
# train.toml ran) instead of training. Then:
#   /usr/bin/python3 datasets/models/tiny-ruler/plot_curve.py DIR/curve.csv datasets/models/tiny-ruler/curve.png
#
#   bash datasets/models/tiny-ruler/curve.sh [DIR] [EVERY]   # DIR: out/tiny-ruler-curve, EVERY: 500
set -euo pipefail
cd "$(dirname "$0")/../../.."
k=${KVLAB:-build/kvlab}
dir=${1:-out/tiny-ruler-curve}
every=${2:-500}
cfg=datasets/models/tiny-ruler/train.toml
mkdir -p "$dir"
csv=$dir/curve.csv
echo "step,task,length,score,samples" > "$csv"
score() {  # STEP CHECKPOINT_DIR
  rm -rf "$dir/eval-$1"
  "$k" run evals/configs/ruler-check.toml --set "models=[\"$(realpath "$2")\"]" --set threads=1 \
    --out "$dir/eval-$1" > "$dir/eval-$1.log" 2>&1
  python3 - "$1" "$dir/eval-$1/results.jsonl" >> "$csv" <<'PY'
import json, sys
for line in open(sys.argv[2]):
    r = json.loads(line)
    if r.get("status") == "ok":
        m = r["metrics"]
        print(f"{sys.argv[1]},{r['task']},{r['length']},{m['score']:.1f},{m['samples']}")
PY
  echo "step $1: $(grep "^$1," "$csv" | cut -d, -f2-4 | tr '\n' ' ')"
}
if [ -n "${CHECKPOINTS:-}" ]; then
  for d in $(ls -d "$CHECKPOINTS"/step-* | sort -t- -k2 -n); do score "${d##*step-}" "$d"; done
  exit 0
fi
total=$(python3 -c 'import sys, tomllib; print(sum(p["steps"] for p in tomllib.load(open(sys.argv[1], "rb"))["phase"]))' "$cfg")
step=0
while [ "$step" -lt "$total" ]; do
  "$k" train "$cfg" --out "$dir/model" --max-steps "$every" --quiet
  step=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["step"])' "$dir/model/trainer_state.json")
  score "$step" "$dir/model"
done

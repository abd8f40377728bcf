#!/usr/bin/env bash
# Trains a committed model from scratch with its own configs into a scratch
# directory, then compares the weights with the committed checkpoint. Training
# is deterministic in the config and seed (one thread, data drawn from
# (seed, step)), so a faithful config gives the same bytes. A recipe in stages
# (train.toml, then train-stage2.toml, ... each from the checkpoint before it)
# runs stage N into DIR/stageN and the last stage into DIR. Rerunning the same
# command resumes from the last checkpoint; the progress logs are DIR/train.log
# (and DIR/stageN/train.log).
#   bash datasets/models/reproduce.sh tiny-recall [DIR]   # DIR: out/NAME-fresh
set -euo pipefail
cd "$(dirname "$0")/../.."
k=${KVLAB:-build/kvlab}
name=${1:?usage: reproduce.sh NAME [DIR] (NAME: a directory of datasets/models)}
dir=${2:-out/$name-fresh}
ref=datasets/models/$name
[ -f "$ref/train.toml" ] || { echo "reproduce.sh: $ref/train.toml: no such file" >&2; exit 2; }
configs=("$ref/train.toml")
n=2
while [ -f "$ref/train-stage$n.toml" ]; do configs+=("$ref/train-stage$n.toml"); n=$((n + 1)); done
prev=
for i in "${!configs[@]}"; do
  stage=$((i + 1))
  out=$dir
  [ "$stage" -lt "${#configs[@]}" ] && out=$dir/stage$stage
  mkdir -p "$out"
  args=(train "${configs[$i]}" --out "$out")
  [ -n "$prev" ] && args+=(--init "$prev")
  echo "stage $stage of ${#configs[@]}: $k ${args[*]}"
  $k "${args[@]}" 2>> "$out/train.log"
  prev=$out
done
sha256sum "$ref/model.safetensors" "$dir/model.safetensors"
if cmp -s "$ref/model.safetensors" "$dir/model.safetensors"; then
  echo "$name: identical to the committed checkpoint"
else
  echo "$name: differs from the committed checkpoint" >&2
  exit 1
fi

#!/usr/bin/env bash
# Trains a committed model from scratch with its own train.toml into a scratch
# directory, then compares the weights with the committed checkpoint. Training
# is deterministic in the config and seed (one thread, data drawn from
# (seed, step)), so a faithful config gives the same bytes. Rerunning the same
# command resumes from the last checkpoint; the progress log is DIR/train.log.
#   bash datasets/models/reproduce.sh tiny-recall [DIR]   # DIR: out/NAME-fresh
set -euo pipefail
cd "$(dirname "$0")/../.."
k=${KVLAB:-build/kvlab}
name=${1:?usage: reproduce.sh NAME [DIR] (NAME: a directory of datasets/models)}
dir=${2:-out/$name-fresh}
ref=datasets/models/$name
[ -f "$ref/train.toml" ] || { echo "reproduce.sh: $ref/train.toml: no such file" >&2; exit 2; }
mkdir -p "$dir"
$k train "$ref/train.toml" --out "$dir" 2>> "$dir/train.log"
sha256sum "$ref/model.safetensors" "$dir/model.safetensors"
if cmp -s "$ref/model.safetensors" "$dir/model.safetensors"; then
  echo "$name: identical to the committed checkpoint"
else
  echo "$name: differs from the committed checkpoint" >&2
  exit 1
fi

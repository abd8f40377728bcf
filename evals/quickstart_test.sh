#!/usr/bin/env bash
# The README's main job as a user runs it: the quickstart sweep on the
# committed tiny-gqa prints the summary and writes its results.
set -euo pipefail
kvlab=$1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$kvlab" run evals/configs/quickstart.toml --out "$out" --no-progress > "$out/stdout.txt"
fail() { echo "FAIL: $*" >&2; cat "$out/stdout.txt" >&2; exit 1; }
grep -q '^| `full` | 1.000 | 1.000 | 1.000 | 1.00x |' "$out/stdout.txt" || fail "no baseline row in the printed summary"
for s in 'sink(n_sink=4,window=256)' 'h2o(budget=256)' 'kivi(bits=2)' 'kivi(bits=4)' 'quant(format=int8)'; do
  grep -qF "| \`$s\` |" "$out/stdout.txt" || fail "no row for $s"
done
[ "$(grep -c '"status":"ok"' "$out/results.jsonl")" -eq 12 ] || fail "expected 12 ok records (6 stacks x bpb, latency)"
# Accuracy cells carry their interval and sample count (4 windows).
grep -qE '^\| `h2o\(budget=256\)` \|.*[0-9] \[[0-9.]+, [0-9.]+\] n=4' "$out/stdout.txt" || fail "no interval over 4 windows in h2o's row"
grep -q 'passkey' "$out/stdout.txt" && fail "a passkey column on a model that cannot retrieve"
for f in results.csv summary.md config.toml; do [ -s "$out/$f" ] || fail "missing $f"; done
echo "quickstart: ok"

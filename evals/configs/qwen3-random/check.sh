#!/usr/bin/env bash
# ctest qwen3_sweep_test: the Qwen3-shaped sweep from scratch into a scratch
# directory; every point must succeed and record model_type "qwen3", and each
# of full, h2o, sink and kivi must have run both tasks; then serve-bench on the
# same checkpoint must finish every request of its workload.
#   bash evals/configs/qwen3-random/check.sh path/to/kvlab
set -euo pipefail
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
bash "$(dirname "$0")/run.sh" "$1" "$out" > "$out/log" 2>&1 || { cat "$out/log"; exit 1; }
/usr/bin/python3 - "$out/results.jsonl" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
bad = [r["key"] for r in recs if r["status"] != "ok" or r.get("model_type") != "qwen3"]
ran = {(r["stack_specs"][0]["name"], r["task"]) for r in recs if r["status"] == "ok"}
want = {(p, t) for p in ("full", "h2o", "sink", "kivi") for t in ("bpb", "passkey")}
if bad or ran != want:
    sys.exit(f"qwen3 sweep: failed or unlabelled points {bad}; ran {sorted(ran)}, want {sorted(want)}")
print(f"qwen3 sweep: {len(recs)} points ok, model_type qwen3, policies {sorted({p for p, _ in ran})}")
PY
report=$("$1" serve-bench "$(dirname "$0")/serve.toml" 2>&1) || { echo "$report"; exit 1; }
line=$(grep -E '^ *workload ' <<<"$report")
grep -qE ' 0 rejected, 0 aborted, 0 unfinished' <<<"$line" && ! grep -qE ' 0 finished' <<<"$line" ||
  { echo "qwen3 serve-bench: not every request finished: $line"; exit 1; }
echo "qwen3 serve-bench: $line"

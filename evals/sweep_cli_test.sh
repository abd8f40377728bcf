#!/usr/bin/env bash
# `kvlab run` as a user runs it: a real kill -9 in the middle of a sweep, then
# the same command again (nothing lost, nothing duplicated); --dry-run;
# --shard + merge; config errors exit non-zero with file:line:col.
set -euo pipefail
kvlab=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
head -c 3000 /dev/zero | tr '\0' 'a' | sed 's/aaaaaaa/the cache /g' > "$dir/text.txt"
cat > "$dir/s.toml" <<'TOML'
name = "killme"
models = ["small"]
tasks = ["bpb"]
lengths = [64, 80]
seeds = [0, 1]
threads = 1
[task.bpb]
text = "text.txt"
prefill = 4
[[sweep]]
[[sweep.policy]]
name = "sink"
n_sink = 2
window = [16, 32]
TOML
points=12
fail() { echo "FAIL: $*" >&2; exit 1; }

"$kvlab" run "$dir/s.toml" --dry-run --out "$dir/out" | grep -q "12 points to run" || fail "dry-run count"

"$kvlab" run "$dir/s.toml" --out "$dir/out" --no-progress > /dev/null 2>&1 &
pid=$!
for _ in $(seq 1 600); do
  n=$(cat "$dir/out/results.jsonl" 2>/dev/null | wc -l || true)
  [ "${n:-0}" -ge 3 ] && break
  sleep 0.1
done
kill -9 "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
before=$(wc -l < "$dir/out/results.jsonl")
[ "$before" -lt "$points" ] || fail "the run finished before it was killed ($before records)"
"$kvlab" run "$dir/s.toml" --out "$dir/out" --no-progress > "$dir/rerun.txt" 2>&1 || fail "rerun: $(cat "$dir/rerun.txt")"
grep -q "already in" "$dir/rerun.txt" || fail "rerun did not skip the recorded points"
lines=$(wc -l < "$dir/out/results.jsonl")
keys=$(/usr/bin/python3 -c "import json,sys; print(len({json.loads(l)['key'] for l in open(sys.argv[1])}))" "$dir/out/results.jsonl" 2>/dev/null \
       || grep -o '"key":"[^}]*}' "$dir/out/results.jsonl" | sort -u | wc -l)
[ "$lines" -eq "$points" ] || fail "$lines records after the rerun, expected $points"
[ "$keys" -eq "$points" ] || fail "$keys distinct points, expected $points"

# Shards and merge.
"$kvlab" run "$dir/s.toml" --out "$dir/s0" --shard 0/2 --no-progress > /dev/null
"$kvlab" run "$dir/s.toml" --out "$dir/s1" --shard 1/2 --no-progress > /dev/null
"$kvlab" merge "$dir/s0" "$dir/s1" --out "$dir/m" | grep -q "into $points points" || fail "merge"
[ "$(wc -l < "$dir/m/results.jsonl")" -eq "$points" ] || fail "merged count"

# Errors: non-zero exit, one line naming file:line:col.
printf 'models = ["small"]\ntasks = ["bpb"]\nbogus = 1\n' > "$dir/bad.toml"
if "$kvlab" run "$dir/bad.toml" > "$dir/err.txt" 2>&1; then fail "bad config accepted"; fi
grep -q "bad.toml:3:[0-9]*: unknown key 'bogus'" "$dir/err.txt" || fail "error text: $(cat "$dir/err.txt")"
if "$kvlab" run "$dir/s.toml" --shard 2/2 > "$dir/err.txt" 2>&1; then fail "bad shard accepted"; fi
grep -q -- "--shard" "$dir/err.txt" || fail "shard error text"
# A sweep whose every point fails (its model does not exist) exits non-zero, after writing its records.
printf 'models = ["no-such-model"]\ntasks = ["passkey"]\nlengths = [64]\n[task.passkey]\ndepths = [0.5]\nsamples = 1\n' > "$dir/gone.toml"
if "$kvlab" run "$dir/gone.toml" --out "$dir/gone" --no-progress > "$dir/err.txt" 2>&1; then fail "a sweep of failed points exited 0"; fi
grep -q "every one of the 1 point(s) failed" "$dir/err.txt" || fail "all-failed text: $(cat "$dir/err.txt")"
[ -s "$dir/gone/results.jsonl" ] || fail "the failed point was not recorded"
echo "sweep CLI: kill -9 + rerun, shards + merge, errors: ok"

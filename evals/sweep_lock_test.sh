#!/usr/bin/env bash
# Two `kvlab run` processes on one results directory at once (two jobs launched
# without --shard, or a rerun while the first still runs): with --if-locked
# wait the second queues behind the first and then finds every point recorded;
# with the default (fail) it exits at once naming the holder's pid. Either way
# results.jsonl ends with each point once and no torn line.
set -euo pipefail
kvlab=$1
dir=$(mktemp -d)
holder=""
trap '[ -n "$holder" ] && kill "$holder" 2>/dev/null; rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
head -c 3000 /dev/zero | tr '\0' 'a' | sed 's/aaaaaaa/the cache /g' > "$dir/text.txt"
cat > "$dir/s.toml" <<'TOML'
name = "twice"
models = ["small"]
tasks = ["bpb"]
lengths = [48, 64]
seeds = [0, 1]
threads = 1
[task.bpb]
text = "text.txt"
prefill = 4
[[sweep]]
[[sweep.policy]]
name = "sink"
n_sink = 2
window = [16, 24]
TOML
points=12
mkdir -p "$dir/out"

# A stand-in for a first run that holds the directory until we let go: it takes
# the same flock, writes its pid, and holds it until its stdin closes.
cat > "$dir/holder.py" <<'PY'
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
os.ftruncate(fd, 0)
os.write(fd, f"{os.getpid()}\n".encode())
open(sys.argv[2], "w").write(str(os.getpid()))
sys.stdin.read()
PY
mkfifo "$dir/release"
/usr/bin/python3 "$dir/holder.py" "$dir/out/.kvlab.lock" "$dir/ready" < "$dir/release" &
holder=$!
exec 3> "$dir/release"
while [ ! -s "$dir/ready" ]; do sleep 0.05; done
[ "$(cat "$dir/ready")" = "$holder" ] || fail "holder pid"

# The default: refuse at once, naming the holder.
if "$kvlab" run "$dir/s.toml" --out "$dir/out" --no-progress > "$dir/refused.txt" 2>&1 3>&-; then
  fail "a second run on a held directory was not refused"
fi
grep -q "kvlab: error: .*$dir/out is in use by another kvlab process (pid $holder, holding $dir/out/.kvlab.lock); nothing was run" \
  "$dir/refused.txt" || fail "refusal text: $(cat "$dir/refused.txt")"
[ ! -e "$dir/out/results.jsonl" ] || fail "the refused run wrote records"

# Two runs that wait, started while the directory is held, then released (they
# must not inherit fd 3, the holder's stdin, or it would never see the release).
"$kvlab" run "$dir/s.toml" --out "$dir/out" --no-progress --if-locked wait > "$dir/a.txt" 2>&1 3>&- &
a=$!
"$kvlab" run "$dir/s.toml" --out "$dir/out" --no-progress --if-locked wait > "$dir/b.txt" 2>&1 3>&- &
b=$!
exec 3>&-
wait "$holder"
holder=""
wait "$a" || fail "first waiting run: $(cat "$dir/a.txt")"
wait "$b" || fail "second waiting run: $(cat "$dir/b.txt")"
ran=$(cat "$dir/a.txt" "$dir/b.txt" | grep -o "ran [0-9]* of $points points" | sort | tr '\n' ',')
[ "$ran" = "ran 0 of $points points,ran $points of $points points," ] || fail "runs: $ran"

/usr/bin/python3 - "$dir/out/results.jsonl" "$points" <<'PY' || fail "records"
import json, sys
lines = open(sys.argv[1]).read().split("\n")
assert lines[-1] == "", "torn last line"
recs = [json.loads(l) for l in lines[:-1]]  # a torn line would not parse
keys = [r["key"] for r in recs]
assert len(recs) == int(sys.argv[2]), f"{len(recs)} records"
assert len(set(keys)) == len(keys), "a point recorded twice"
PY
echo "sweep_lock_test: ok"

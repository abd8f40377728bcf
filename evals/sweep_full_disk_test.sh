#!/usr/bin/env bash
# `kvlab run` into a real full file system: a 64 KiB tmpfs, mounted in a
# private mount namespace (unshare; as root of a user namespace when not root),
# so it goes when the test ends. A first run records 3 of a sweep's 12 points;
# then the disk is filled. With no space at all, and again with one page free,
# the run exits non-zero naming the file and "No space left on device", never
# says it wrote its results, keeps every record written before byte for byte
# (no torn line), and leaves results.csv and summary.md whole. Once the space
# is freed, a rerun runs exactly the missing points and the file holds the 12
# points once each. Skips (77) where a tmpfs cannot be mounted.
set -euo pipefail
kvlab=$(realpath "$1")
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }

if [ "${KVLAB_FULL_DISK_NS:-}" != 1 ]; then
  unshare -rm true 2>/dev/null || skip "unshare -rm is not allowed here (no mount namespace for a tmpfs)"
  exec env KVLAB_FULL_DISK_NS=1 unshare -rm bash "$0" "$kvlab"
fi

dir=$(mktemp -d)
trap 'umount "$dir/mnt" 2>/dev/null || true; rm -rf "$dir"' EXIT
mkdir "$dir/mnt"
mount -t tmpfs -o size=64k tmpfs "$dir/mnt" 2>"$dir/mount.txt" || skip "cannot mount a tmpfs: $(cat "$dir/mount.txt")"
cat > "$dir/s.toml" <<'TOML'
name = "full-disk"
models = ["small"]
tasks = ["bpb"]
lengths = [48]
seeds = [0, 1, 2, 3]
threads = 1
[task.bpb]
prefill = 16
[[sweep]]
[[sweep.policy]]
name = "sink"
n_sink = 4
window = [16, 24]
TOML
points=12
out=$dir/mnt/out
run() { "$kvlab" run "$dir/s.toml" --out "$out" --no-progress "$@" > "$dir/stdout.txt" 2> "$dir/stderr.txt"; }

# Every line of results.jsonl a whole record, each point once; prints the count.
check_records() {
  /usr/bin/python3 - "$out/results.jsonl" <<'PY'
import json, sys
data = open(sys.argv[1]).read()
assert data == "" or data.endswith("\n"), "a torn last line"
keys = [json.loads(l)["key"] for l in data.splitlines()]
assert len(set(keys)) == len(keys), "a point recorded twice"
print(len(keys))
PY
}

run --set 'seeds=[0]' || fail "first run: $(cat "$dir/stderr.txt")"
[ "$(check_records)" = 3 ] || fail "first run: $(check_records) records"
mkdir "$dir/before"
cp "$out/results.jsonl" "$out/results.csv" "$out/summary.md" "$dir/before/"

# A failed run: non-zero, the cause and a file named, no claim of results, the
# earlier records intact, each report the previous one or a whole new one.
check_failed_run() {
  local what=$1 rc=0
  run || rc=$?
  [ "$rc" != 0 ] || fail "$what: exit 0 on a full disk: $(cat "$dir/stdout.txt")"
  grep -q "No space left on device" "$dir/stderr.txt" || fail "$what: no cause: $(cat "$dir/stderr.txt")"
  grep -Eq "$out/(results.jsonl|results.csv|summary.md|config.toml|.kvlab.lock)" "$dir/stderr.txt" ||
    fail "$what: no file named: $(cat "$dir/stderr.txt")"
  if grep -q "wrote" "$dir/stdout.txt"; then fail "$what: claims to have written: $(cat "$dir/stdout.txt")"; fi
  cmp -s -n "$(stat -c %s "$dir/before/results.jsonl")" "$dir/before/results.jsonl" "$out/results.jsonl" ||
    fail "$what: a record written before changed or went"
  local n
  n=$(check_records) || fail "$what: results.jsonl damaged"
  for f in results.csv summary.md; do
    if ! cmp -s "$dir/before/$f" "$out/$f"; then
      # A new version: whole, one row per point recorded.
      [ "$f" = summary.md ] || [ "$(wc -l < "$out/$f")" = $((n + 1)) ] || fail "$what: $f is neither old nor whole"
    fi
  done
  ls -A "$out" | grep -q '\.tmp-' && fail "$what: a temporary file left: $(ls -A "$out")"
  echo "$what: exit $rc, $n records kept: $(grep -o 'kvlab: error: .*' "$dir/stderr.txt" | head -c 300)"
}

# No space at all.
cat /dev/zero > "$dir/mnt/fill" 2>/dev/null || true
[ "$(df --output=avail "$dir/mnt" | tail -1 | tr -d ' ')" = 0 ] || fail "the tmpfs is not full"
check_failed_run "no space"
# One page free: some records fit, then the disk is full again.
truncate -s -4096 "$dir/mnt/fill"
check_failed_run "one page free"
kept=$(check_records)

# Space again: the rerun runs exactly the missing points.
rm "$dir/mnt/fill"
run || fail "rerun: $(cat "$dir/stderr.txt")"
grep -q "ran $((points - kept)) of $points points" "$dir/stdout.txt" || fail "rerun: $(cat "$dir/stdout.txt")"
[ "$(check_records)" = $points ] || fail "after the rerun: $(check_records) records"
cmp -s -n "$(stat -c %s "$dir/before/results.jsonl")" "$dir/before/results.jsonl" "$out/results.jsonl" ||
  fail "the rerun changed a record written before"
echo "sweep_full_disk_test: ok ($kept of $points points kept through the full disk, $((points - kept)) run again)"

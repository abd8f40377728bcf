#!/usr/bin/env bash
# The paged decode's launch-shape sweep on a GPU: builds paged_decode_test and
# paged_decode_bench as evals/gpu/device-check.sh does (KVLAB_CUDA_ONLY, the
# same build directory), runs the test, then the benchmark's default bf16
# points at 16K and BM_PagedDecodeTune (pipeline depth 2 / 3 / 4 x heads per
# thread 4 / 2 / 1, bf16 / int8 / KIVI-2, batch 1 / 16 / 64 at 16K tokens; and
# bf16 on the tensor-core kernel, tc 1, at each depth).
# Writes results/gpu/decode-tune.{json,log,txt} (and copies them to $OUT when
# set). The table in docs/kernels.md ("Launch shape") comes from it.
#
#   bash evals/gpu/decode-tune.sh
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT" || exit 2
BUILD="${KVLAB_GPU_BUILD_DIR:-$ROOT/build-gpu}"
THIRD="${KVLAB_THIRD_PARTY:-$ROOT/shared/third_party}"
RESULTS="$ROOT/results/gpu"
mkdir -p "$RESULTS"
LOG="$RESULTS/decode-tune.log"
NVCC="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
ARCH="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .')"
GEN=()
command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja)
{
  echo "git: $(git rev-parse HEAD 2>/dev/null || echo none)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
  cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DKVLAB_CUDA_ONLY=ON -DKVLAB_CUDA=ON \
    -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CUDA_ARCHITECTURES="${ARCH:-90}" -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
    -DKVLAB_GTEST_SOURCE_DIR="$THIRD/googletest" -DKVLAB_BENCHMARK_SOURCE_DIR="$THIRD/benchmark" &&
  cmake --build "$BUILD" -j "$(nproc)" --target paged_decode_test paged_decode_bench
} >"$LOG" 2>&1 || { echo "build failed"; tail -n 30 "$LOG"; exit 2; }
status=0
"$BUILD/kernels/cuda/paged_decode_test" --gtest_brief=1 >>"$LOG" 2>&1 || status=1
grep -E "PASSED|FAILED" "$LOG" | tail -n 12
timeout 420 "$BUILD/paged_decode_bench" --benchmark_filter='BM_PagedDecode/bf16/.*ctx:16384|BM_PagedDecodeTune' \
  --benchmark_out="$RESULTS/decode-tune.json" --benchmark_out_format=json >>"$LOG" 2>&1 || status=1
python3 - "$RESULTS/decode-tune.json" >"$RESULTS/decode-tune.txt" <<'PY'
import json, sys
b = json.load(open(sys.argv[1]))
print(f"{'format':>6} {'batch':>5} {'tc':>2} {'st':>2} {'hpt':>3} {'tile':>4} {'cta/sm':>6} {'us':>8} {'TB/s':>5} {'vs bf16 default':>15}")
for r in b["benchmarks"]:
    n = r["name"].split("/")
    if n[0] != "BM_PagedDecodeTune":
        continue
    if r.get("error_occurred"):
        print(*n[1:], "ERROR", r.get("error_message"))
        continue
    print(f"{n[1]:>6} {n[2].split(':')[1]:>5} {int(r.get('tensor_cores', 0)):>2} {int(r['stages']):>2} {int(r['heads_per_thread']):>3} "
          f"{int(r['tile_tokens']):>4} {int(r['ctas_per_sm']):>6} {r['real_time']:8.1f} "
          f"{r['kv_bytes_per_s'] / 1e12:5.2f} {r.get('time_vs_default_bf16', float('nan')):15.2f}")
PY
cat "$RESULTS/decode-tune.txt"
source "$ROOT/evals/gpu/scrub-paths.sh"  # scrub_paths
scrub_paths "$RESULTS"/decode-tune.*
if [[ -n "${OUT:-}" && -d "${OUT:-}" ]]; then cp "$RESULTS"/decode-tune.* "$OUT/"; fi
exit $status

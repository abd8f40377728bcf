#!/usr/bin/env bash
# The GPU device check: builds the CUDA kernels (KVLAB_CUDA_ONLY: no libtorch,
# no Debian dev packages), runs their test against the CPU reference and the
# decode benchmark, writes results/gpu/ (and copies it to $OUT when set), and
# prints a short summary. Meant for a GPU machine with no network: googletest
# and Google Benchmark come from $KVLAB_THIRD_PARTY (default
# shared/third_party, made by evals/gpu/prepare-third-party.sh) or from the
# system. On a machine without a GPU it builds, and reports that the tests
# were skipped. Budget: about 8 minutes in all (H200, 16 cores).
#
#   bash evals/gpu/device-check.sh
#
# Environment: KVLAB_THIRD_PARTY, KVLAB_GPU_BUILD_DIR (default build-gpu),
# KVLAB_CUDA_ARCH (default: the GPU's compute capability, else 90),
# KVLAB_BENCH_FILTER (Google Benchmark regex, default all), OUT.
# Exit status: 0 when everything built and no test failed.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT" || exit 2
T0=$(date +%s)
BUILD="${KVLAB_GPU_BUILD_DIR:-$ROOT/build-gpu}"
RESULTS="$ROOT/results/gpu"
THIRD="${KVLAB_THIRD_PARTY:-$ROOT/shared/third_party}"
mkdir -p "$RESULTS"
LOG="$RESULTS/device-check.log"
: >"$LOG"
say() { echo "[device-check +$(( $(date +%s) - T0 ))s] $*" | tee -a "$LOG"; }
run_logged() { "$@" >>"$LOG" 2>&1; }  # full output in the log only
status=0

copy_out() {
  if [[ -n "${OUT:-}" && -d "${OUT:-}" ]]; then
    for f in device-check.log env.txt paged_decode_test.json paged_decode_bench.json summary.txt; do
      [[ -f "$RESULTS/$f" ]] && cp "$RESULTS/$f" "$OUT/"
    done
  fi
}
finish() {
  say "done in $(( $(date +%s) - T0 ))s, exit status $status; results in $RESULTS"
  copy_out
  exit "$status"
}

# --- Tools ---------------------------------------------------------------
NVCC="$(command -v nvcc || true)"
for c in /usr/local/cuda/bin/nvcc /usr/local/cuda-*/bin/nvcc; do
  [[ -z "$NVCC" && -x "$c" ]] && NVCC="$c"
done
CMAKE="$(command -v cmake || true)"
if [[ -z "$NVCC" || -z "$CMAKE" ]]; then
  say "FAIL: need nvcc and cmake (nvcc='$NVCC', cmake='$CMAKE')"
  status=2
  finish
fi
GEN=()
command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja)
JOBS="$(nproc 2>/dev/null || echo 4)"

HAVE_GPU=0
GPU_CC=""
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  HAVE_GPU=1
  GPU_CC="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .')"
fi
ARCH="${KVLAB_CUDA_ARCH:-${GPU_CC:-90}}"
[[ -z "$ARCH" ]] && ARCH=90

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "git: $(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo 'not a git checkout')"
  echo "host: $(uname -a)"
  echo "cores: $JOBS"
  echo "nvcc: $("$NVCC" --version 2>&1 | tail -n 2 | tr '\n' ' ')"
  echo "cmake: $("$CMAKE" --version | head -n 1)"
  echo "c++: $(c++ --version 2>&1 | head -n 1)"
  echo "cuda arch: $ARCH"
  echo "python torch (not used by this build): $(python3 -c 'import torch; print(torch.__version__, torch.utils.cmake_prefix_path)' 2>/dev/null || echo none)"
  if [[ $HAVE_GPU == 1 ]]; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>&1
  else
    echo "gpu: none (nvidia-smi absent or failing)"
  fi
} >"$RESULTS/env.txt" 2>&1
say "nvcc $NVCC, cmake $CMAKE ${GEN[*]:-(make)}, $JOBS cores, arch sm_$ARCH, gpu: $([[ $HAVE_GPU == 1 ]] && echo yes || echo none)"

# --- Configure -----------------------------------------------------------
CFG=(-S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DKVLAB_CUDA_ONLY=ON -DKVLAB_CUDA=ON
     -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DCMAKE_POLICY_VERSION_MINIMUM=3.5)
if [[ -f "$THIRD/googletest/CMakeLists.txt" ]]; then
  CFG+=(-DKVLAB_GTEST_SOURCE_DIR="$THIRD/googletest")
  say "googletest: source tree $THIRD/googletest"
elif [[ -f /usr/src/googletest/CMakeLists.txt ]]; then
  CFG+=(-DKVLAB_GTEST_SOURCE_DIR=/usr/src/googletest)
  say "googletest: source tree /usr/src/googletest"
else
  say "googletest: none in $THIRD; trying an installed GTest"
fi
if [[ -f "$THIRD/benchmark/CMakeLists.txt" ]]; then
  CFG+=(-DKVLAB_BENCHMARK_SOURCE_DIR="$THIRD/benchmark")
  say "benchmark: source tree $THIRD/benchmark"
elif [[ -d "$THIRD/benchmark-prefix" ]]; then
  CFG+=(-DCMAKE_PREFIX_PATH="$THIRD/benchmark-prefix")
  say "benchmark: prefix $THIRD/benchmark-prefix"
else
  say "benchmark: none in $THIRD; trying an installed one"
fi
if ! run_logged timeout 180 "$CMAKE" "${CFG[@]}"; then
  say "FAIL: cmake configure (see $LOG)"
  tail -n 30 "$LOG"
  status=2
  finish
fi

# --- Build ---------------------------------------------------------------
if ! run_logged timeout 360 "$CMAKE" --build "$BUILD" -j "$JOBS" --target paged_decode_test; then
  say "FAIL: building paged_decode_test (see $LOG)"
  grep -E "error|Error" "$LOG" | head -n 20
  status=2
  finish
fi
HAVE_BENCH=0
if run_logged timeout 240 "$CMAKE" --build "$BUILD" -j "$JOBS" --target paged_decode_bench; then
  HAVE_BENCH=1
else
  say "benchmark not built (no Google Benchmark?): continuing with the test only"
fi
say "built"

# --- Test ----------------------------------------------------------------
TEST_BIN="$BUILD/kernels/cuda/paged_decode_test"
timeout 240 "$TEST_BIN" --gtest_output="json:$RESULTS/paged_decode_test.json" >>"$LOG" 2>&1
test_rc=$?
[[ $test_rc != 0 ]] && status=1
say "test exit status $test_rc"

# --- Benchmark -----------------------------------------------------------
if [[ $HAVE_BENCH == 1 ]]; then
  if [[ $HAVE_GPU == 1 ]]; then
    timeout 240 "$BUILD/paged_decode_bench" --benchmark_filter="${KVLAB_BENCH_FILTER:-.}" \
      --benchmark_out="$RESULTS/paged_decode_bench.json" --benchmark_out_format=json >>"$LOG" 2>&1
    bench_rc=$?
    [[ $bench_rc != 0 ]] && say "benchmark exit status $bench_rc" && status=1
  else
    "$BUILD/paged_decode_bench" >>"$LOG" 2>&1 || status=1
  fi
fi

# --- Summary -------------------------------------------------------------
SUMMARY="$RESULTS/summary.txt"
if command -v python3 >/dev/null 2>&1; then
  python3 - "$RESULTS" "$HAVE_GPU" >"$SUMMARY" 2>&1 <<'EOF'
import json, os, sys
res, have_gpu = sys.argv[1], sys.argv[2] == "1"
code = 0
tj = os.path.join(res, "paged_decode_test.json")
if os.path.exists(tj):
    t = json.load(open(tj))
    cases = [c for s in t.get("testsuites", []) for c in s.get("testsuite", [])]
    skipped = [c for c in cases if c.get("result") == "SKIPPED"]
    failed = [c for c in cases if c.get("failures")]
    print(f"test: {len(cases)} tests, {len(failed)} failed, {len(skipped)} skipped")
    for c in failed[:10]:
        msg = c["failures"][0].get("failure", "").splitlines()
        print(f"  FAILED {c.get('classname')}.{c.get('name')}: {msg[1] if len(msg) > 1 else (msg[0] if msg else '')}")
    if skipped and not have_gpu:
        print("no GPU: CUDA tests skipped (only the host-side tests ran)")
    elif skipped:
        print(f"WARNING: nvidia-smi sees a GPU but {len(skipped)} CUDA tests were skipped "
              "(cudaGetDeviceCount failed: driver / runtime mismatch? see device-check.log)")
        code = 3
else:
    print("test: no JSON output (did it crash? see device-check.log)")
    code = 3
bj = os.path.join(res, "paged_decode_bench.json")
if os.path.exists(bj):
    b = json.load(open(bj))
    ctx = b.get("context", {})
    print(f"bench: {ctx.get('gpu', '?')}, copy (read+write) {float(ctx.get('copy_bytes_rw_per_s', 0)) / 1e12:.2f} TB/s")
    rows = {}
    for r in b.get("benchmarks", []):
        name = r.get("name", "")
        if r.get("error_occurred"):
            print(f"  ERROR {name}: {r.get('error_message')}")
            continue
        if name.startswith("BM_DeviceCopy"):
            print(f"  device copy: {r.get('bytes_rw_per_s', 0) / 1e12:.2f} TB/s ({100 * r.get('frac_of_peak', 0):.0f}% of 4.8)")
            continue
        parts = name.split("/")
        if len(parts) < 4:
            continue
        kind = parts[1]
        batch = parts[2].split(":")[-1]
        c = parts[3].split(":")[-1]
        rows.setdefault((int(batch), int(c)), {})[kind] = r
    if rows:
        print(f"  {'batch':>5} {'ctx':>6} | {'bf16 us':>8} {'TB/s':>5} {'%peak':>5} {'%copy':>5} splits | {'kivi2 us':>8} {'x bf16':>6}")
        for (batch, c), d in sorted(rows.items()):
            bf, kv = d.get("bf16", {}), d.get("kivi2", {})
            t_bf = bf.get("real_time", float("nan"))
            print(f"  {batch:>5} {c:>6} | {t_bf:8.1f} {bf.get('kv_bytes_per_s', 0) / 1e12:5.2f} "
                  f"{100 * bf.get('frac_of_peak', 0):5.0f} {100 * bf.get('frac_of_copy', 0):5.0f} {int(bf.get('splits', 0)):>6} | "
                  f"{kv.get('real_time', float('nan')):8.1f} {kv.get('time_vs_bf16', float('nan')):6.2f}")
else:
    print("bench: not run")
sys.exit(code)
EOF
  [[ $? != 0 ]] && status=1
else
  {
    echo "python3 not found: summary from grep"
    grep -E "PASSED|FAILED|SKIPPED" "$LOG" | tail -n 5
  } >"$SUMMARY"
fi
if [[ $HAVE_GPU == 0 ]] && ! grep -q "no GPU" "$SUMMARY"; then
  echo "no GPU: CUDA tests skipped" >>"$SUMMARY"
fi
tee -a "$LOG" <"$SUMMARY"
finish

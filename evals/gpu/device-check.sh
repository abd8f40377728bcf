#!/usr/bin/env bash
# The GPU device check: builds the CUDA kernels (KVLAB_CUDA_ONLY: no libtorch,
# no Debian dev packages), runs their test against the CPU reference and the
# decode benchmark, writes results/gpu/ (and copies it to $OUT when set), and
# prints a short summary. Meant for a GPU machine with no network: googletest
# and Google Benchmark come from $KVLAB_THIRD_PARTY (default
# shared/third_party, made by evals/gpu/prepare-third-party.sh) or from the
# system. When Python's torch has CUDA, it also builds sdpa_bench against
# that libtorch (torch.utils.cmake_prefix_path) in a build directory of its
# own, in the background while the test and benchmark run, and runs it:
# kvlab's decode against PyTorch's attention in one process. Its build may
# fail (the libtorch's CMake config checks the CUDA toolkit): that is
# reported, not counted as a failure. On a machine without a GPU it builds,
# and reports that the tests were skipped.
#
# Budget: the whole run stays within KVLAB_CHECK_BUDGET_S seconds (default
# 450, under 8 minutes): every step's timeout is the smaller of its own cap
# and the time left, and sdpa_bench is skipped when too little is left.
# Expected on an H200 with 16 cores: configure + build ~2 min, test < 1 min,
# benchmark ~1 min, sdpa_bench build (overlapped) ~2 min and run < 1 min.
#
#   bash evals/gpu/device-check.sh
#
# Environment: KVLAB_THIRD_PARTY, KVLAB_GPU_BUILD_DIR (default build-gpu; the
# sdpa_bench build goes to it + "-sdpa"), KVLAB_CUDA_ARCH (default: the GPU's
# compute capability, else 90), KVLAB_BENCH_FILTER (Google Benchmark regex,
# default all), KVLAB_SDPA=0 (skip sdpa_bench), KVLAB_CHECK_BUDGET_S, OUT.
# Exit status: 0 when everything built and no test failed (and sdpa_bench,
# when it was built, ran without error and its outputs agreed).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT" || exit 2
T0=$(date +%s)
BUDGET="${KVLAB_CHECK_BUDGET_S:-450}"
BUILD="${KVLAB_GPU_BUILD_DIR:-$ROOT/build-gpu}"
SDPA_BUILD="$BUILD-sdpa"
RESULTS="$ROOT/results/gpu"
THIRD="${KVLAB_THIRD_PARTY:-$ROOT/shared/third_party}"
mkdir -p "$RESULTS"
LOG="$RESULTS/device-check.log"
: >"$LOG"
say() { echo "[device-check +$(( $(date +%s) - T0 ))s] $*" | tee -a "$LOG"; }
run_logged() { "$@" >>"$LOG" 2>&1; }  # full output in the log only
left() { echo $(( T0 + BUDGET - $(date +%s) )); }  # seconds left in the budget
# cap SECONDS [RESERVE]: a step's timeout, at most SECONDS and at most the time
# left minus RESERVE (default 15 s, for the summary), at least 1.
cap() {
  local t=$(( $(left) - ${2:-15} ))
  (( t > $1 )) && t=$1
  (( t < 1 )) && t=1
  echo "$t"
}
status=0

copy_out() {
  if [[ -n "${OUT:-}" && -d "${OUT:-}" ]]; then
    for f in device-check.log env.txt paged_decode_test.json select_compact_test.json paged_decode_bench.json \
             sdpa_bench.json sdpa-build.log \
             summary.txt; do
      [[ -f "$RESULTS/$f" ]] && cp "$RESULTS/$f" "$OUT/"
    done
  fi
}
source "$ROOT/evals/gpu/scrub-paths.sh"  # scrub_paths
finish() {
  say "done in $(( $(date +%s) - T0 ))s, exit status $status; results in $RESULTS"
  scrub_paths "$RESULTS"/*.log "$RESULTS"/*.txt "$RESULTS"/*.json
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
rm -f "$RESULTS/sdpa_bench.json" "$RESULTS/sdpa-build.log" "$RESULTS/paged_decode_bench.json"  # no stale figures
if ! run_logged timeout "$(cap 180)" "$CMAKE" "${CFG[@]}"; then
  say "FAIL: cmake configure (see $LOG)"
  tail -n 30 "$LOG"
  status=2
  finish
fi

# --- Build ---------------------------------------------------------------
if ! run_logged timeout "$(cap 360)" "$CMAKE" --build "$BUILD" -j "$JOBS" --target paged_decode_test select_compact_test; then
  say "FAIL: building paged_decode_test / select_compact_test (see $LOG)"
  grep -E "error|Error" "$LOG" | head -n 20
  status=2
  finish
fi
HAVE_BENCH=0
if run_logged timeout "$(cap 240)" "$CMAKE" --build "$BUILD" -j "$JOBS" --target paged_decode_bench; then
  HAVE_BENCH=1
else
  say "benchmark not built (no Google Benchmark?): continuing with the test only"
fi
say "built"

# --- sdpa_bench build (background) ---------------------------------------
# Needs Python's torch with CUDA; its own build directory, so that a libtorch
# CMake config that fails cannot touch the test's build.
SDPA_PID=""
SDPA_WHY=""
TORCH_PREFIX=""
if [[ "${KVLAB_SDPA:-1}" == 0 ]]; then
  SDPA_WHY="skipped (KVLAB_SDPA=0)"
elif [[ $HAVE_GPU == 0 ]]; then
  SDPA_WHY="skipped (no GPU)"
else
  TORCH_PREFIX="$(timeout 60 python3 -c 'import torch; print(torch.utils.cmake_prefix_path if torch.version.cuda else "")' 2>/dev/null | tail -n 1)"
  if [[ -z "$TORCH_PREFIX" ]]; then
    SDPA_WHY="skipped (no Python torch with CUDA)"
  elif (( $(left) < 200 )); then
    SDPA_WHY="skipped ($(left) s left in the budget)"
  fi
fi
if [[ -z "$SDPA_WHY" ]]; then
  SDPA_CFG=(-S "$ROOT" -B "$SDPA_BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DKVLAB_CUDA_ONLY=ON -DKVLAB_CUDA=ON
            -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DCMAKE_POLICY_VERSION_MINIMUM=3.5
            -DKVLAB_BUILD_TESTS=OFF -DKVLAB_BUILD_BENCHMARKS=OFF -DKVLAB_SDPA_TORCH_PREFIX="$TORCH_PREFIX")
  SDPA_JOBS=$(( JOBS > 3 ? JOBS - 2 : 1 ))  # leave the test and benchmark a core or two
  # Must end (built or not) with 90 s left: time to run sdpa_bench.
  SDPA_T=$(cap 400 90)
  (
    timeout "$SDPA_T" bash -c '"$0" "${@:2}" && "$0" --build "$1" -j "'"$SDPA_JOBS"'" --target sdpa_bench' \
      "$CMAKE" "$SDPA_BUILD" "${SDPA_CFG[@]}"
  ) >"$RESULTS/sdpa-build.log" 2>&1 &
  SDPA_PID=$!
  say "sdpa_bench: building in the background against $TORCH_PREFIX (log: sdpa-build.log, limit ${SDPA_T}s)"
else
  say "sdpa_bench: $SDPA_WHY"
fi

# --- Test ----------------------------------------------------------------
TEST_BIN="$BUILD/kernels/cuda/paged_decode_test"
timeout "$(cap 240)" "$TEST_BIN" --gtest_output="json:$RESULTS/paged_decode_test.json" >>"$LOG" 2>&1
test_rc=$?
[[ $test_rc != 0 ]] && status=1
say "test exit status $test_rc"
# Top-k selection (CUB), compaction and offload moves.
timeout "$(cap 120)" "$BUILD/kernels/cuda/select_compact_test" \
  --gtest_output="json:$RESULTS/select_compact_test.json" >>"$LOG" 2>&1
sc_rc=$?
[[ $sc_rc != 0 ]] && status=1
say "select_compact_test exit status $sc_rc"

# --- Benchmark -----------------------------------------------------------
if [[ $HAVE_BENCH == 1 ]]; then
  if [[ $HAVE_GPU == 1 ]]; then
    timeout "$(cap 240 75)" "$BUILD/paged_decode_bench" --benchmark_filter="${KVLAB_BENCH_FILTER:-.}" \
      --benchmark_out="$RESULTS/paged_decode_bench.json" --benchmark_out_format=json >>"$LOG" 2>&1
    bench_rc=$?
    [[ $bench_rc != 0 ]] && say "benchmark exit status $bench_rc" && status=1
  else
    "$BUILD/paged_decode_bench" >>"$LOG" 2>&1 || status=1
  fi
fi

# --- sdpa_bench run ------------------------------------------------------
if [[ -n "$SDPA_PID" ]]; then
  wait "$SDPA_PID"
  sdpa_build_rc=$?
  if [[ $sdpa_build_rc != 0 || ! -x "$SDPA_BUILD/sdpa_bench" ]]; then
    SDPA_WHY="not built (exit status $sdpa_build_rc; see sdpa-build.log)"
    tail -n 15 "$RESULTS/sdpa-build.log" >>"$LOG"
  elif (( $(left) < 40 )); then
    SDPA_WHY="built, not run ($(left) s left in the budget)"
  else
    # --self-check: the paged and dense layouts agree on the CPU (kvlab's reference), so that a
    # disagreement on the GPU points at a kernel.
    timeout 60 "$SDPA_BUILD/sdpa_bench" --self-check >>"$LOG" 2>&1
    sdpa_rc=$?
    if [[ $sdpa_rc == 0 ]]; then
      timeout "$(cap 150)" "$SDPA_BUILD/sdpa_bench" --out="$RESULTS/sdpa_bench.json" >>"$LOG" 2>&1
      sdpa_rc=$?
    fi
    if [[ $sdpa_rc != 0 ]]; then
      SDPA_WHY="exit status $sdpa_rc (see device-check.log)"
      status=1
    fi
  fi
  say "sdpa_bench: ${SDPA_WHY:-ran}"
fi
echo "${SDPA_WHY:-ran}" >"$RESULTS/.sdpa_status"

# --- Summary -------------------------------------------------------------
SUMMARY="$RESULTS/summary.txt"
if command -v python3 >/dev/null 2>&1; then
  python3 - "$RESULTS" "$HAVE_GPU" "$(cat "$RESULTS/.sdpa_status")" >"$SUMMARY" 2>&1 <<'EOF'
import json, os, sys
res, have_gpu, sdpa_status = sys.argv[1], sys.argv[2] == "1", sys.argv[3]
code = 0
for test_name in ("paged_decode_test", "select_compact_test"):
  tj = os.path.join(res, test_name + ".json")
  if os.path.exists(tj):
    t = json.load(open(tj))
    cases = [c for s in t.get("testsuites", []) for c in s.get("testsuite", [])]
    skipped = [c for c in cases if c.get("result") == "SKIPPED"]
    failed = [c for c in cases if c.get("failures")]
    print(f"{test_name}: {len(cases)} tests, {len(failed)} failed, {len(skipped)} skipped")
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
    print(f"{test_name}: no JSON output (did it crash? see device-check.log)")
    code = 3
bj = os.path.join(res, "paged_decode_bench.json")
if os.path.exists(bj):
    b = json.load(open(bj))
    ctx = b.get("context", {})
    print(f"bench: {ctx.get('gpu', '?')}, copy (read+write) {float(ctx.get('copy_bytes_rw_per_s', 0)) / 1e12:.2f} TB/s")
    rows = {}
    tune = []
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
        if parts[0] == "BM_PagedDecodeTune":
            tune.append(r)
            continue
        kind = parts[1]
        batch = parts[2].split(":")[-1]
        c = parts[3].split(":")[-1]
        rows.setdefault((int(batch), int(c)), {})[kind] = r
    if rows:
        enc = ("kivi2", "int8", "fp8")
        head = " | ".join(f"{k + ' us':>8} {'TB/s':>5} {'x bf16':>6}" for k in enc)
        print(f"  {'batch':>5} {'ctx':>6} | {'bf16 us':>8} {'TB/s':>5} {'%peak':>5} {'%copy':>5} splits | {head}")
        for (batch, c), d in sorted(rows.items()):
            bf = d.get("bf16", {})
            t_bf = bf.get("real_time", float("nan"))
            cols = " | ".join(f"{d.get(k, {}).get('real_time', float('nan')):8.1f} "
                              f"{d.get(k, {}).get('kv_bytes_per_s', 0) / 1e12:5.2f} "
                              f"{d.get(k, {}).get('time_vs_bf16', float('nan')):6.2f}" for k in enc)
            print(f"  {batch:>5} {c:>6} | {t_bf:8.1f} {bf.get('kv_bytes_per_s', 0) / 1e12:5.2f} "
                  f"{100 * bf.get('frac_of_peak', 0):5.0f} {100 * bf.get('frac_of_copy', 0):5.0f} {int(bf.get('splits', 0)):>6} | {cols}")
    # The launch-shape sweep: the tensor-core kernel (tc:1) against the default kernel's bf16 time.
    tc = [r for r in tune if "/tc:1/" in r.get("name", "")]
    if tc:
        print("  tensor cores (bf16, BM_PagedDecodeTune/.../tc:1): us, TB/s, time over the default kernel's bf16")
        for r in tc:
            n = r["name"].split("/")
            if r.get("error_occurred"):
                print(f"    {n[2]} {n[3]} {n[5]}: ERROR {r.get('error_message')}")
                continue
            print(f"    {n[2]:>9} {n[3]:>9} {n[5]:>8}: {r['real_time']:8.1f} {r.get('kv_bytes_per_s', 0) / 1e12:5.2f} "
                  f"{r.get('time_vs_default_bf16', float('nan')):6.2f}")
else:
    print("bench: not run")
sj = os.path.join(res, "sdpa_bench.json")
if os.path.exists(sj):
    b = json.load(open(sj))
    ctx = b.get("context", {})
    print(f"sdpa: kvlab bf16 decode vs {ctx.get('dense_attention', '?')} (libtorch {ctx.get('torch_version', '?')}), "
          f"{ctx.get('skipped', 'same K/V, same run')}")
    pts = b.get("benchmarks", [])
    if pts:
        print(f"  {'batch':>5} {'ctx':>6} | {'kvlab us':>8} {'TB/s':>5} | {'sdpa us':>8} {'TB/s':>5} | {'sdpa/kv':>7} {'max|d|':>8}")
    for r in pts:
        parts = r.get("name", "").split("/")
        batch, c = parts[2].split(":")[-1], parts[3].split(":")[-1]
        if r.get("error_occurred"):
            print(f"  {batch:>5} {c:>6} | ERROR {r.get('error_message')}")
            continue
        print(f"  {batch:>5} {c:>6} | {r['kvlab_us']:8.1f} {r['kvlab_bytes_per_s'] / 1e12:5.2f} | "
              f"{r['sdpa_us']:8.1f} {r['sdpa_bytes_per_s'] / 1e12:5.2f} | {r['sdpa_over_kvlab']:7.2f} {r['max_abs_diff']:8.1e}")
else:
    print(f"sdpa: {sdpa_status}")
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

#!/usr/bin/env bash
# Fuzzes every parser of untrusted input (evals/fuzz/README.md) with libFuzzer:
# configures build-fuzz/ with clang and KVLAB_FUZZ=ON (ASan + UBSan on all of
# kvlab's code), builds the targets and runs each for SECONDS (default 60).
#
#   bash .ci/fuzz.sh [SECONDS] [TARGET...]      e.g. bash .ci/fuzz.sh 600 records
#
# Each target starts from its committed seeds (evals/fuzz/corpus/NAME/) and
# crash inputs (evals/fuzz/regressions/NAME/); what it discovers goes to
# build-fuzz/fuzz-work/NAME/, never into the source tree. Per target it prints
# the executions, the rate and any crash; a crash, leak, sanitizer report,
# timeout (-timeout, 10 s an input) or out-of-memory (-rss_limit_mb) leaves
# its input in build-fuzz/fuzz-artifacts/NAME/ and makes the script exit 1.
# Commit such an input to evals/fuzz/regressions/NAME/ with the fix, so that
# ctest fuzz_replay_test replays it in the ordinary build.
#
# JOBS (default 2) is the build's parallelism.
set -uo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-60}
shift || true
ALL=(safetensors model_config tokenizer run_config serve_bench_config train_config records sweep_config datasets
     chat_template)
[ $# -gt 0 ] && TARGETS=("$@") || TARGETS=("${ALL[@]}")
B=build-fuzz
JOBS=${JOBS:-2}

if [ ! -f "$B/CMakeCache.txt" ]; then
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
        -DKVLAB_FUZZ=ON ${CMAKE_CXX_COMPILER_LAUNCHER:+-DCMAKE_CXX_COMPILER_LAUNCHER=$CMAKE_CXX_COMPILER_LAUNCHER} \
        > "$B.configure.log" 2>&1 || { cat "$B.configure.log"; echo "fuzz.sh: configure failed"; exit 1; }
fi
mkdir -p "$B/fuzz-logs"
built=()
for t in "${TARGETS[@]}"; do
  if cmake --build "$B" -j"$JOBS" --target "fuzz_$t" > "$B/fuzz-logs/build-$t.log" 2>&1; then
    built+=("$t")
  else
    echo "fuzz.sh: fuzz_$t did not build (see $B/fuzz-logs/build-$t.log): skipped"
    tail -5 "$B/fuzz-logs/build-$t.log"
  fi
done

export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=0
printf '%-20s %8s %12s %10s  %s\n' target seconds executions exec/s result
for t in "${built[@]}"; do
  work="$B/fuzz-work/$t" art="$B/fuzz-artifacts/$t" log="$B/fuzz-logs/$t.log"
  rm -rf "$art"; mkdir -p "$work" "$art"
  seeds=("evals/fuzz/corpus/$t")
  [ -d "evals/fuzz/regressions/$t" ] && seeds+=("evals/fuzz/regressions/$t")
  start=$(date +%s)
  "$B/fuzz/fuzz_$t" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$art/" "$work" "${seeds[@]}" > "$log" 2>&1
  rc=$?
  took=$(( $(date +%s) - start ))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  crash=$(ls -A "$art" 2>/dev/null | head -3 | tr '\n' ' ')
  if [ $rc -eq 0 ] && [ -z "$crash" ]; then
    result="no crash"
  else
    result="FAILED (exit $rc) $crash: see $log"
    failed=1
  fi
  printf '%-20s %8s %12s %10s  %s\n' "$t" "$took" "${execs:-?}" "${rate:-?}" "$result"
  if [ "$result" != "no crash" ]; then grep -m3 -E "ERROR: |runtime error|SUMMARY" "$log" | sed 's/^/    /'; fi
done
[ ${#built[@]} -eq ${#TARGETS[@]} ] || echo "fuzz.sh: $(( ${#TARGETS[@]} - ${#built[@]} )) target(s) skipped (did not build)"
exit $failed

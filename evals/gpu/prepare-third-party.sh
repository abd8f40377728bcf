#!/usr/bin/env bash
# Prepares the third-party sources that evals/gpu/device-check.sh builds on a
# GPU machine that has no network and no Debian dev packages: googletest and
# Google Benchmark. Run it once on a machine with Debian's package registry
# (a kvlab dev machine); it writes into $KVLAB_THIRD_PARTY, default
# shared/third_party in the repository (not for committing: see docs/kernels.md).
#
#   bash evals/gpu/prepare-third-party.sh
#
# googletest: a copy of /usr/src/googletest (Debian package googletest).
# Google Benchmark: a source tree from $BENCHMARK_SRC if set, else Debian's
# source package (apt-get source, with a private deb-src list: the system's
# apt configuration is not changed), else a prefix of the installed
# libbenchmark-dev (headers, shared library, CMake config) as a last resort.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DEST="${KVLAB_THIRD_PARTY:-$ROOT/shared/third_party}"
mkdir -p "$DEST"
say() { echo "[prepare-third-party] $*"; }

# googletest
if [[ -f "$DEST/googletest/CMakeLists.txt" ]]; then
  say "googletest: already in $DEST/googletest"
elif [[ -f /usr/src/googletest/CMakeLists.txt ]]; then
  cp -a /usr/src/googletest "$DEST/googletest"
  say "googletest: copied /usr/src/googletest"
else
  say "googletest: /usr/src/googletest is missing (apt-get install googletest), or copy a googletest tree to $DEST/googletest"
  exit 1
fi

# Google Benchmark
if [[ -f "$DEST/benchmark/CMakeLists.txt" ]]; then
  say "benchmark: already in $DEST/benchmark"
  exit 0
fi
if [[ -n "${BENCHMARK_SRC:-}" ]]; then
  cp -a "$BENCHMARK_SRC" "$DEST/benchmark"
  say "benchmark: copied $BENCHMARK_SRC"
  exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
suite="$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-bookworm}")"
mkdir -p "$tmp/lists/partial" "$tmp/src"
# The machine's own Debian mirror (the first URI apt is configured with).
mirror="$(grep -hoE '^(URIs:|deb) +[a-z]+://[^ ]+' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null |
          awk '{print $2}' | head -n 1 || true)"  # a missing list makes grep fail: not fatal
if [[ -z "$mirror" ]]; then
  say "benchmark: no apt mirror configured; cannot fetch the Debian source package"
else
  echo "deb-src $mirror ${suite:-bookworm} main" >"$tmp/sources.list"
fi
apt_opts=(-o "Dir::Etc::SourceList=$tmp/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
          -o "Dir::State::Lists=$tmp/lists")
if [[ -n "$mirror" ]] && apt-get "${apt_opts[@]}" update >"$tmp/apt.log" 2>&1 &&
   (cd "$tmp/src" && apt-get "${apt_opts[@]}" source --download-only benchmark >>"$tmp/apt.log" 2>&1); then
  orig="$(ls "$tmp"/src/benchmark_*.orig.tar.* | head -n 1)"
  mkdir -p "$tmp/x"
  tar -xf "$orig" -C "$tmp/x"
  mv "$tmp"/x/* "$DEST/benchmark"
  say "benchmark: Debian source package $(basename "$orig") -> $DEST/benchmark"
  exit 0
fi
say "benchmark: apt-get source failed (log: $(tail -n 2 "$tmp/apt.log" | tr '\n' ' '))"
if dpkg -s libbenchmark-dev >/dev/null 2>&1; then
  prefix="$DEST/benchmark-prefix"
  rm -rf "$prefix"
  dpkg -L libbenchmark-dev libbenchmark1debian | while read -r f; do
    case "$f" in
      /usr/include/benchmark/* | /usr/lib/*/libbenchmark* | /usr/lib/*/cmake/benchmark/*)
        if [[ -f "$f" || -L "$f" ]]; then
          mkdir -p "$prefix/$(dirname "${f#/usr/}")"
          cp -a "$f" "$prefix/${f#/usr/}"
        fi ;;
    esac
  done
  say "benchmark: installed libbenchmark-dev copied as a prefix to $prefix (a Debian 12 build: needs glibc >= 2.32 there)"
  exit 0
fi
say "benchmark: none found; set BENCHMARK_SRC to a Google Benchmark source tree (the test still runs without it)"
exit 1

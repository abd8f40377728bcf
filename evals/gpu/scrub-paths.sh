# Sourced by evals/gpu/device-check.sh and decode-tune.sh (needs $ROOT, the
# repository root): scrub_paths FILE... rewrites the repository root as "."
# and the Python environment's prefix as "<python prefix>" in each file, so
# that committed results speak of the repository only.
scrub_paths() {
  local py f
  py="$(python3 -c 'import sys; print(sys.prefix)' 2>/dev/null || true)"
  for f in "$@"; do
    [[ -f "$f" ]] || continue
    sed -i -e "s#$ROOT/##g" -e "s#$ROOT#.#g" "$f"
    if [[ -n "$py" && "$py" != / && "$py" != /usr ]]; then sed -i "s#$py#<python prefix>#g" "$f"; fi
  done
  return 0
}

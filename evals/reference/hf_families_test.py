"""Checks `kvlab logits` against the float64 family reference (hf_families.py).

For each family and a few variants (GQA ratio > 1, an explicit head_dim != hidden/heads, tied and untied
heads, F32 and BF16 storage, sliding window 8 crossed six times by 48 tokens), writes a random checkpoint
with hf_families_writer.py, runs
  KVLAB logits --model DIR --tokens a,b,... --out OUT.bin --kv-dtype f32 --mode prefill
  KVLAB logits ... --mode decode --block-size 4
  KVLAB logits ... --mode prefill --prefill-chunk 5 --block-size 4        (chunked prefill)
and requires max |kvlab - reference| / max |reference| <= 1e-4 in each mode. OUT.bin holds
little-endian float32 logits [num_tokens, vocab]. `--prefill-chunk N` (the prompt fed N tokens at a time
through the paged cache, every chunk's logits written in order) is a flag kvlab logits must offer for this
test. A checkpoint lacking a tensor of its own kind (qwen3 / gemma3 q_norm or k_norm, phi3 qkv_proj, a
qwen2 q_proj bias, a llama o_proj bias under attention_bias, a gemma2 pre_feedforward_layernorm), an
unknown model_type and an unmodelled rope type must make kvlab fail with a message naming the tensor
or the file and key.

  /usr/bin/python3 evals/reference/hf_families_test.py --kvlab build/kvlab [--only qwen3]
  /usr/bin/python3 evals/reference/hf_families_test.py --self-check     # numpy side only
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_families as ref  # noqa: E402
import hf_families_writer as wr  # noqa: E402
from check_util import run_checks  # noqa: E402
from llama_numpy import load_checkpoint  # noqa: E402

TOLERANCE = 1e-4  # relative to max |reference logit|
NUM_TOKENS = 48  # window 8: crossed six times
MODES = {  # name: extra kvlab arguments
    "prefill": ["--mode", "prefill"],
    "decode": ["--mode", "decode", "--block-size", "4"],
    "chunked": ["--mode", "prefill", "--prefill-chunk", "5", "--block-size", "4"],
}
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}  # small, so that head_dim 16 has all three bands

# name: (family, write_checkpoint keyword arguments)
CASES = {
    "llama_bias_llama3_f32": ("llama", dict(dtype="f32", tied=False, seed=1, overrides=dict(
        attention_bias=True, mlp_bias=True, rope_scaling=LLAMA3))),
    "llama_linear_headdim_tied_bf16": ("llama", dict(dtype="bf16", tied=True, seed=2, kv_heads=1, head_dim=24,
                                                     overrides=dict(rope_scaling={"rope_type": "linear",
                                                                                  "factor": 2.0}))),
    "mistral_window_f32": ("mistral", dict(dtype="f32", tied=False, seed=3)),
    "mistral_headdim_tied_bf16": ("mistral", dict(dtype="bf16", tied=True, seed=4, head_dim=32, kv_heads=1)),
    "qwen2_window_tied_bf16": ("qwen2", dict(dtype="bf16", tied=True, seed=5)),
    "qwen2_layer_types_f32": ("qwen2", dict(dtype="f32", tied=False, seed=6, layers=4, overrides=dict(
        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"]))),
    "qwen3_headdim_window_f32": ("qwen3", dict(dtype="f32", tied=False, seed=7, head_dim=24)),
    "qwen3_bias_tied_bf16": ("qwen3", dict(dtype="bf16", tied=True, seed=8, head_dim=32, kv_heads=1,
                                           overrides=dict(attention_bias=True))),
    "phi3_longrope_partial_f32": ("phi3", dict(dtype="f32", tied=False, seed=9)),
    # 48 tokens > original_max_position_embeddings 32: the long factors for every position, as transformers'
    # forward over the whole text computes them (and as Phi3ForCausalLM's generate does by recomputing the
    # cache once the text crosses the original length). kvlab has to pick the factors from the request's
    # whole length, not per step.
    "phi3_longrope_long_bf16": ("phi3", dict(dtype="bf16", tied=False, seed=15, overrides=dict(
        original_max_position_embeddings=32, max_position_embeddings=128))),
    "phi3_default_rope_tied_bf16": ("phi3", dict(dtype="bf16", tied=True, seed=10, kv_heads=4,
                                                 overrides=dict(rope_scaling=None))),
    "gemma2_headdim_softcap_f32": ("gemma2", dict(dtype="f32", tied=True, seed=11, head_dim=24)),
    "gemma2_hidden96_untied_bf16": ("gemma2", dict(dtype="bf16", tied=False, seed=12, hidden=96, heads=6,
                                                   kv_heads=2, head_dim=16)),
    "gemma3_pattern_linear_f32": ("gemma3_text", dict(dtype="f32", tied=True, seed=13, head_dim=24)),
    "gemma3_layer_types_cap_bf16": ("gemma3_text", dict(dtype="bf16", tied=False, seed=14, layers=4, hidden=96,
                                                        heads=4, kv_heads=2, head_dim=32, overrides=dict(
        layer_types=["full_attention", "sliding_attention", "sliding_attention", "full_attention"],
        final_logit_softcapping=3.0))),
}


def tokens_for(vocab, n=NUM_TOKENS, seed=11):
    return [int(t) for t in np.random.default_rng(seed).integers(0, vocab, n)]


def rel_diff(a, b):
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def write(tmp, name):
    family, kw = CASES[name]
    d = os.path.join(tmp, name)
    wr.write_checkpoint(family, d, **kw)
    return d


def run_kvlab(kvlab, model_dir, tokens, extra, out):
    cmd = [kvlab, "logits", "--model", model_dir, "--tokens", ",".join(str(t) for t in tokens),
           "--out", out, "--kv-dtype", "f32"] + extra
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        return subprocess.CompletedProcess(cmd, 1, "", f"could not run {' '.join(cmd)}: {e}")


def end_to_end(tmp, kvlab, c, only):
    for name, (family, _) in CASES.items():
        if only and family not in only:
            continue
        model_dir = write(tmp, name)
        cfg, w = load_checkpoint(model_dir)  # the stored (rounded) values
        tokens = tokens_for(cfg["vocab_size"])
        want = ref.forward(cfg, w, tokens, src=model_dir)
        for mode, extra in MODES.items():
            out = os.path.join(tmp, f"{name}.{mode}.bin")
            r = run_kvlab(kvlab, model_dir, tokens, extra, out)
            what = f"{name} ({family}) {mode} [{' '.join(extra)}]"
            if r.returncode != 0:
                c.check(False, f"{what}: kvlab exited {r.returncode}: {(r.stderr or r.stdout).strip()[-1500:]}")
                continue
            got = np.fromfile(out, dtype="<f4") if os.path.exists(out) else np.zeros(0, np.float32)
            if got.size != want.size:
                c.check(False, f"{what}: {out} holds {got.size} floats, expected {len(tokens)} x {cfg['vocab_size']}")
                continue
            diff = rel_diff(got.reshape(want.shape).astype(np.float64), want)
            c.check(diff <= TOLERANCE, f"{what}: max|diff|/max|ref| = {diff:.3e} (tolerance {TOLERANCE:g})")
    bad_input(tmp, kvlab, c, only)


def bad_input(tmp, kvlab, c, only):
    """A checkpoint without a tensor of its family's kind, an unknown model_type, an unmodelled rope type."""
    missing = [("qwen3", {}, "model.layers.1.self_attn.q_norm.weight"),
               ("gemma3_text", {}, "model.layers.2.self_attn.k_norm.weight"),
               ("phi3", {}, "model.layers.0.self_attn.qkv_proj.weight"),
               ("qwen2", {}, "model.layers.2.self_attn.q_proj.bias"),
               ("llama", dict(attention_bias=True), "model.layers.1.self_attn.o_proj.bias"),
               ("gemma2", {}, "model.layers.1.pre_feedforward_layernorm.weight")]
    for family, overrides, tensor in missing:
        if only and family not in only:
            continue
        d = os.path.join(tmp, f"missing_{family}")
        wr.write_checkpoint(family, d, seed=20, omit=(tensor,), overrides=overrides)
        r = run_kvlab(kvlab, d, [5, 17, 42], MODES["prefill"], os.path.join(tmp, "bad.bin"))
        text = r.stdout + r.stderr
        c.check(r.returncode != 0 and tensor in text and "Traceback" not in text,
                f"{family} without {tensor}: exit {r.returncode}, message names it: {text.strip()[-300:]!r}")
    configs = [("model_type", "mamba", dict(model_type="mamba")),
               ("rope_scaling", "yarn", dict(rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                                           "original_max_position_embeddings": 64}))]
    for key, value, overrides in configs:
        if only and "llama" not in only:
            continue
        d = os.path.join(tmp, f"bad_{key}")
        wr.write_checkpoint("llama", d, seed=21)
        with open(os.path.join(d, "config.json")) as f:
            cfg = json.load(f)
        cfg.update(overrides)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f)
        r = run_kvlab(kvlab, d, [5, 17, 42], MODES["prefill"], os.path.join(tmp, "bad.bin"))
        text = r.stdout + r.stderr
        c.check(r.returncode != 0 and key in text and value in text and "config.json" in text,
                f"{key} {value!r}: exit {r.returncode}, message names config.json, the key and the value: "
                f"{text.strip()[-300:]!r}")


from hf_families_selfcheck import self_check  # noqa: E402  (the numpy-only properties)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kvlab", help="path to the kvlab binary")
    ap.add_argument("--self-check", action="store_true", help="check the numpy side only")
    ap.add_argument("--only", action="append", choices=ref.FAMILIES, help="families to run against kvlab")
    ap.add_argument("--keep", action="store_true", help="keep the temporary checkpoints")
    args = ap.parse_args()
    if not args.self_check and not args.kvlab:
        ap.error("--kvlab PATH is required (or --self-check)")
    if args.kvlab and not os.access(args.kvlab, os.X_OK):
        print(f"FAIL: kvlab binary {args.kvlab} does not exist or is not executable", file=sys.stderr)
        return 1
    if args.self_check:
        return run_checks("kvlab_hf_families_", args.keep, self_check)
    return run_checks("kvlab_hf_families_", args.keep, lambda tmp, c: end_to_end(tmp, args.kvlab, c, args.only))


if __name__ == "__main__":
    sys.exit(main())

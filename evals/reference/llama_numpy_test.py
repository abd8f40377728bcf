"""Checks `kvlab logits` against the independent numpy reference (llama_numpy.py).

Builds small random checkpoints in Hugging Face layout with numpy alone (GQA with
Llama 3 rope scaling and a mix of F32/F16/BF16 tensors; tied-embedding MHA; a
sharded index; head_dim != hidden/heads), runs
  KVLAB logits --model DIR --tokens a,b,... --out OUT.bin --kv-dtype f32 --mode MODE
for MODE in prefill and decode, and requires max |kvlab - reference| <= 1e-4.
OUT.bin holds little-endian float32 logits [num_tokens, vocab]. A checkpoint whose
config claims one layer more than its tensors must make kvlab fail, naming the
missing tensor.

  /usr/bin/python3 evals/reference/llama_numpy_test.py --kvlab build/kvlab
  /usr/bin/python3 evals/reference/llama_numpy_test.py --self-check   # numpy side only
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_numpy as ref  # noqa: E402
from hf_families_writer import encode, write_safetensors  # noqa: E402,F401
from check_util import run_checks  # noqa: E402

TOLERANCE = 1e-4
NUM_TOKENS = 40


def make_model(model_dir, *, layers, hidden, heads, kv_heads, inter, vocab, tied, rope_scaling=None,
               head_dim=None, dtypes=("F32",), shards=1, seed=0):
    """Writes config.json and random weights; returns the config dict."""
    os.makedirs(model_dir, exist_ok=True)
    rng = np.random.default_rng(seed)
    d = head_dim or hidden // heads
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab,
           "hidden_size": hidden, "intermediate_size": inter, "num_hidden_layers": layers,
           "num_attention_heads": heads, "num_key_value_heads": kv_heads, "rms_norm_eps": 1e-5,
           "rope_theta": 10000.0, "rope_scaling": rope_scaling, "max_position_embeddings": 4096,
           "tie_word_embeddings": tied, "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2}
    if head_dim:
        cfg["head_dim"] = head_dim

    def mat(rows, cols, std):
        return rng.normal(0, std, (rows, cols))

    t = [("model.embed_tokens.weight", mat(vocab, hidden, 0.1))]
    for i in range(layers):
        p = f"model.layers.{i}."
        t += [(p + "input_layernorm.weight", 1 + rng.normal(0, 0.1, hidden)),
              (p + "self_attn.q_proj.weight", mat(heads * d, hidden, 0.1)),
              (p + "self_attn.k_proj.weight", mat(kv_heads * d, hidden, 0.1)),
              (p + "self_attn.v_proj.weight", mat(kv_heads * d, hidden, 0.08)),
              (p + "self_attn.o_proj.weight", mat(hidden, heads * d, 0.08)),
              (p + "post_attention_layernorm.weight", 1 + rng.normal(0, 0.1, hidden)),
              (p + "mlp.gate_proj.weight", mat(inter, hidden, 0.08)),
              (p + "mlp.up_proj.weight", mat(inter, hidden, 0.08)),
              (p + "mlp.down_proj.weight", mat(hidden, inter, 0.08))]
    t.append(("model.norm.weight", 1 + rng.normal(0, 0.1, hidden)))
    if not tied:
        t.append(("lm_head.weight", mat(vocab, hidden, 0.05)))
    entries = [(name, dtypes[i % len(dtypes)], a) for i, (name, a) in enumerate(t)]

    if shards == 1:
        write_safetensors(os.path.join(model_dir, "model.safetensors"), entries)
    else:
        weight_map = {}
        for s in range(shards):
            fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            part = entries[s::shards]  # interleaved, so every shard holds several layers' pieces
            write_safetensors(os.path.join(model_dir, fname), part)
            weight_map.update({name: fname for name, _, _ in part})
        with open(os.path.join(model_dir, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {}, "weight_map": weight_map}, f, indent=2)
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    return cfg


LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  # small, so that head_dim 16 has high, medium and low frequency bands
                  "original_max_position_embeddings": 64}

CASES = {
    "gqa_llama3_mixed_dtypes": dict(layers=3, hidden=128, heads=8, kv_heads=2, inter=256, vocab=300, tied=False,
                                    rope_scaling=LLAMA3_SCALING, dtypes=("F32", "F16", "BF16"), seed=1),
    "mha_tied": dict(layers=2, hidden=128, heads=4, kv_heads=4, inter=200, vocab=301, tied=True,
                     dtypes=("BF16", "F32"), seed=2),
    "gqa_sharded": dict(layers=2, hidden=128, heads=8, kv_heads=4, inter=256, vocab=300, tied=False,
                        rope_scaling=LLAMA3_SCALING, dtypes=("F16", "F32", "BF16"), shards=2, seed=3),
    "explicit_head_dim": dict(layers=2, hidden=96, heads=4, kv_heads=2, head_dim=32, inter=160, vocab=290,
                              tied=False, dtypes=("F32",), seed=4),
}


def self_check(tmp, c):
    """The numpy side on its own: writer/reader, reference properties."""
    rng = np.random.default_rng(7)
    a = np.concatenate([rng.normal(0, 3, 61), [1 / 3, 1 + 2.0**-8, 1 + 3 * 2.0**-8, 0.0, -2.5, 65504.0]])
    path = os.path.join(tmp, "roundtrip.safetensors")
    write_safetensors(path, [("x.f32", "F32", a.reshape(1, 67)), ("x.f16", "F16", a), ("x.bf16", "BF16", a)])
    back = ref.read_safetensors(path)
    a32 = a.astype(np.float32)
    c.check(np.array_equal(back["x.f32"], a32.astype(np.float64).reshape(1, 67)), "self-check: F32 round trip")
    c.check(np.array_equal(back["x.f16"], a32.astype(np.float16).astype(np.float64)), "self-check: F16 round trip")
    bf = back["x.bf16"]
    c.check(np.all(np.abs(bf - a32) <= 2.0**-8 * np.abs(a32)) and bf[62] == 1.0 and bf[63] == 1 + 2.0**-6,
            "self-check: BF16 round trip (within 2^-8 relative, ties to even)")
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    offs = [header[k]["data_offsets"] for k in ("x.f32", "x.f16", "x.bf16")]
    c.check(n % 8 == 0 and offs == [[0, 268], [268, 402], [402, 536]], "self-check: header padding and offsets")

    single, sharded = os.path.join(tmp, "single"), os.path.join(tmp, "sharded")
    spec = dict(CASES["gqa_sharded"])
    make_model(single, **dict(spec, shards=1))
    make_model(sharded, **spec)
    cfg, w = ref.load_checkpoint(single)
    _, w2 = ref.load_checkpoint(sharded)
    c.check(w.keys() == w2.keys() and all(np.array_equal(w[k], w2[k]) for k in w), "self-check: sharded == single")

    tokens = list(np.random.default_rng(8).integers(0, cfg["vocab_size"], NUM_TOKENS))
    full = ref.forward(cfg, w, tokens)
    prefix = ref.forward(cfg, w, tokens[:17])
    c.check(np.max(np.abs(full[:17] - prefix)) < 1e-10, "self-check: causal (appending tokens leaves a prefix's logits)")

    # GQA equals MHA with each KV head's weights repeated for its query heads.
    rep = cfg["num_attention_heads"] // cfg["num_key_value_heads"]
    d = cfg["hidden_size"] // cfg["num_attention_heads"]
    w_mha = dict(w)
    for k in w:
        if k.endswith(("k_proj.weight", "v_proj.weight")):
            w_mha[k] = np.repeat(w[k].reshape(-1, d, w[k].shape[1]), rep, axis=0).reshape(-1, w[k].shape[1])
    mha = ref.forward(dict(cfg, num_key_value_heads=cfg["num_attention_heads"]), w_mha, tokens)
    c.check(np.max(np.abs(mha - full)) < 1e-10, "self-check: GQA == MHA with repeated KV heads")

    # A single token attends only to itself: q and k cannot matter, while later rows must change.
    w_qk = {k: (v[::-1].copy() if k.endswith(("q_proj.weight", "k_proj.weight")) else v) for k, v in w.items()}
    scrambled = ref.forward(cfg, w_qk, tokens)
    c.check(np.max(np.abs(scrambled[0] - full[0])) < 1e-12 and np.max(np.abs(scrambled[1:] - full[1:])) > 1e-3,
            "self-check: first position independent of q/k weights")

    # RoPE: a score depends only on the distance between positions.
    inv = ref.rope_inv_freq(cfg, d)
    q, k = rng.normal(size=(1, 1, d)), rng.normal(size=(1, 1, d))
    s1 = np.sum(ref.apply_rope(q, np.array([9]), inv) * ref.apply_rope(k, np.array([4]), inv))
    s2 = np.sum(ref.apply_rope(q, np.array([30]), inv) * ref.apply_rope(k, np.array([25]), inv))
    c.check(abs(s1 - s2) < 1e-10, "self-check: RoPE scores depend on relative position only")

    # Llama 3 scaling, head_dim 16, theta 1e4, original length 64: wavelengths 2*pi*1e4^(i/8).
    base = 1e4 ** -(np.arange(0, 16, 2) / 16)
    wl = 2 * np.pi / base
    hi, lo = wl < 16, wl > 64
    mid = ~hi & ~lo
    c.check(np.allclose(inv[hi], base[hi]) and np.allclose(inv[lo], base[lo] / 8) and mid.any()
            and np.all((inv[mid] < base[mid]) & (inv[mid] > base[mid] / 8)),
            "self-check: llama3 rope scaling keeps high, divides low, blends medium frequencies")


def run_kvlab(kvlab, model_dir, tokens, mode, out):
    cmd = [kvlab, "logits", "--model", model_dir, "--tokens", ",".join(str(t) for t in tokens),
           "--out", out, "--kv-dtype", "f32", "--mode", mode]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        return subprocess.CompletedProcess(cmd, 1, "", f"could not run {' '.join(cmd)}: {e}")


def end_to_end(tmp, kvlab, c):
    for name, spec in CASES.items():
        model_dir = os.path.join(tmp, name)
        make_model(model_dir, **spec)
        cfg, w = ref.load_checkpoint(model_dir)  # the stored (rounded) values
        tokens = [int(t) for t in np.random.default_rng(11).integers(0, cfg["vocab_size"], NUM_TOKENS)]
        want = ref.forward(cfg, w, tokens)
        spread = float(np.max(want) - np.min(want))
        c.check(spread > 0.1, f"{name}: reference logits spread {spread:.3f} > 0.1")
        for mode in ("prefill", "decode"):
            out = os.path.join(tmp, f"{name}.{mode}.bin")
            r = run_kvlab(kvlab, model_dir, tokens, mode, out)
            what = f"{name} --mode {mode}"
            if r.returncode != 0:
                c.check(False, f"{what}: kvlab exited {r.returncode}: {(r.stderr or r.stdout).strip()[-2000:]}")
                continue
            got = np.fromfile(out, dtype="<f4") if os.path.exists(out) else np.zeros(0, np.float32)
            if got.size != want.size:
                c.check(False, f"{what}: {out} holds {got.size} floats, expected {len(tokens)} x {cfg['vocab_size']}")
                continue
            diff = float(np.max(np.abs(got.reshape(want.shape).astype(np.float64) - want)))
            c.check(diff <= TOLERANCE, f"{what}: max |diff| = {diff:.3e} (tolerance {TOLERANCE:g})")

    # One layer more in config.json than in the tensors: must fail and name what is missing.
    broken = os.path.join(tmp, "missing_layer")
    shutil.copytree(os.path.join(tmp, "mha_tied"), broken)
    with open(os.path.join(broken, "config.json")) as f:
        cfg = json.load(f)
    missing = cfg["num_hidden_layers"]
    cfg["num_hidden_layers"] += 1
    with open(os.path.join(broken, "config.json"), "w") as f:
        json.dump(cfg, f)
    r = run_kvlab(kvlab, broken, [5, 17, 42], "prefill", os.path.join(tmp, "broken.bin"))
    text = r.stdout + r.stderr
    c.check(r.returncode != 0 and f"model.layers.{missing}." in text,
            f"missing layer: exit {r.returncode}, message names model.layers.{missing}.*: {text.strip()[-300:]!r}")


def committed_models(tmp, kvlab, c):
    """The trained models under datasets/models/: numpy's logits equal the engine's."""
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "datasets", "models")
    text = b"In the beginning the KV cache was small; then came long chats. The pass key is 71432."
    tokens = [256] + list(text)
    for name in ("tiny-gqa", "tiny-mha", "tiny-recall"):
        model_dir = os.path.join(root, name)
        if not os.path.exists(os.path.join(model_dir, "model.safetensors")):
            print(f"note: {name} not found under datasets/models, skipped")
            continue
        cfg, w = ref.load_checkpoint(model_dir)
        want = ref.forward(cfg, w, tokens)
        for mode in ("prefill", "decode"):
            out = os.path.join(tmp, f"committed_{name}.{mode}.bin")
            r = run_kvlab(kvlab, model_dir, tokens, mode, out)
            if r.returncode != 0:
                c.check(False, f"{name} --mode {mode}: kvlab exited {r.returncode}: {(r.stderr or r.stdout).strip()[-500:]}")
                continue
            got = np.fromfile(out, dtype="<f4").reshape(want.shape)
            os.remove(out)
            diff = float(np.max(np.abs(got.astype(np.float64) - want)))
            c.check(diff <= TOLERANCE, f"{name} (trained) --mode {mode}: max |diff| = {diff:.3e} (tolerance {TOLERANCE:g})")
            print(f"{name} --mode {mode}: max |kvlab - numpy| = {diff:.2e}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kvlab", help="path to the kvlab binary")
    ap.add_argument("--self-check", action="store_true", help="check the numpy side only")
    ap.add_argument("--keep", action="store_true", help="keep the temporary checkpoints")
    args = ap.parse_args()
    if not args.self_check and not args.kvlab:
        ap.error("--kvlab PATH is required (or --self-check)")
    if args.kvlab and not os.access(args.kvlab, os.X_OK):
        print(f"FAIL: kvlab binary {args.kvlab} does not exist or is not executable", file=sys.stderr)
        return 1
    def body(tmp, c):
        self_check(tmp, c)
        if not args.self_check:
            end_to_end(tmp, args.kvlab, c)
            committed_models(tmp, args.kvlab, c)
    return run_checks("kvlab_numpy_ref_", args.keep, body)


if __name__ == "__main__":
    sys.exit(main())

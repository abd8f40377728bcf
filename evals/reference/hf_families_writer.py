"""Writes small random-weight checkpoints of each family in Hugging Face layout:
config.json with the keys transformers' configuration classes read (model_type,
architectures, ...) and model.safetensors with exactly the state dict's tensor
names and shapes, in F32 or BF16. Used by hf_families.py (`write`) and
hf_families_test.py; numpy only.
"""
import json
import os

import numpy as np

import hf_families as ref


def encode(a, dtype):
    a32 = np.ascontiguousarray(a, dtype=np.float32)
    if dtype == "F32":
        return a32.astype("<f4").tobytes()
    if dtype == "F16":
        return a32.astype("<f2").tobytes()
    assert dtype == "BF16", dtype  # round to nearest even on the f32 bits (inputs hold no NaN)
    u = a32.view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2").tobytes()


def write_safetensors(path, tensors):
    """tensors: [(name, dtype, array)], laid out in order; header padded to 8 bytes."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, dtype, a in tensors:
        b = encode(a, dtype)
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)


def make_config(family, *, layers=3, hidden=64, heads=4, kv_heads=2, head_dim=None, inter=128, vocab=300,
                tied=None, window=8, dtype="f32", overrides=None):
    """A config.json dict of `family` with small shapes; `overrides` replaces or adds keys (None deletes)."""
    if family not in ref.FAMILIES:
        raise ValueError(f"unknown family {family!r} (families: {', '.join(ref.FAMILIES)})")
    gemma = family in ref.GEMMA
    if tied is None:
        tied = ref.DEFAULTS[family]["tie_word_embeddings"]
    cfg = {"architectures": [ref.ARCHITECTURES[family]], "model_type": family, "vocab_size": vocab,
           "hidden_size": hidden, "intermediate_size": inter, "num_hidden_layers": layers,
           "num_attention_heads": heads, "num_key_value_heads": kv_heads, "max_position_embeddings": 4096,
           "rms_norm_eps": 1e-6, "tie_word_embeddings": tied, "attention_dropout": 0.0,
           "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": {"f32": "float32", "bf16": "bfloat16"}[dtype],
           "rope_theta": 10000.0, "rope_scaling": None}
    if gemma:
        cfg.update(hidden_activation="gelu_pytorch_tanh", hidden_act="gelu_pytorch_tanh", pad_token_id=0)
    else:
        cfg["hidden_act"] = "silu"
    if head_dim or family in ("qwen3",) + ref.GEMMA:  # their defaults are 128 / 256, not hidden / heads
        cfg["head_dim"] = head_dim or hidden // heads
    if family == "llama":
        cfg.update(attention_bias=False, mlp_bias=False)
    elif family == "mistral":
        cfg["sliding_window"] = window
    elif family in ("qwen2", "qwen3"):
        cfg.update(use_sliding_window=window is not None, sliding_window=window, max_window_layers=1)
        if family == "qwen3":
            cfg["attention_bias"] = False
    elif family == "phi3":
        d = cfg.get("head_dim") or hidden // heads
        rot = d // 2  # partial_rotary_factor 0.5
        cfg.update(sliding_window=window, partial_rotary_factor=0.5, original_max_position_embeddings=64,
                   max_position_embeddings=256, resid_pdrop=0.0, embd_pdrop=0.0,
                   rope_scaling={"type": "longrope",
                                 "short_factor": [1.0 + 0.25 * i for i in range(rot // 2)],
                                 "long_factor": [2.0 + 1.5 * i for i in range(rot // 2)]})
    elif family == "gemma2":
        cfg.update(query_pre_attn_scalar=24, sliding_window=window, final_logit_softcapping=2.0,
                   attn_logit_softcapping=1.5, attention_bias=False)
    elif family == "gemma3_text":
        cfg.update(query_pre_attn_scalar=24, sliding_window=window, sliding_window_pattern=3,
                   rope_local_base_freq=10000.0, rope_theta=1_000_000.0,
                   rope_scaling={"rope_type": "linear", "factor": 4.0}, final_logit_softcapping=None,
                   attn_logit_softcapping=None, attention_bias=False)
    for k, v in (overrides or {}).items():
        if v is None and k not in ("rope_scaling", "sliding_window", "final_logit_softcapping",
                                   "attn_logit_softcapping"):
            cfg.pop(k, None)
        else:
            cfg[k] = v
    return cfg


def random_tensors(m, seed):
    """{name: float64 array} for every tensor of the model, seeded."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in ref.expected_tensors(m).items():
        if len(shape) == 1 and name.endswith("norm.weight"):
            # Gemma's norms scale by (1 + w), so w near 0; the others by w, so w near 1.
            out[name] = (0.0 if m.norm_plus_one else 1.0) + rng.normal(0, 0.1, shape)
        elif name.endswith(".bias"):
            out[name] = rng.normal(0, 0.05, shape)
        elif name == "model.embed_tokens.weight":
            out[name] = rng.normal(0, 0.1 if m.norm_plus_one else 0.5, shape)
        else:
            out[name] = rng.normal(0, 1.0 / np.sqrt(shape[1]), shape)
    return out


def write_checkpoint(family, out_dir, *, dtype="f32", tied=None, seed=0, omit=(), overrides=None, **shape):
    """Writes config.json and model.safetensors; returns the config dict. `omit`: tensor names left out
    (for the missing-tensor tests). `shape`: make_config's keyword arguments."""
    cfg = make_config(family, tied=tied, dtype=dtype, overrides=overrides, **shape)
    m = ref.parse_config(cfg, os.path.join(out_dir, "config.json"))
    tensors = random_tensors(m, seed)
    st = {"f32": "F32", "bf16": "BF16"}[dtype]
    os.makedirs(out_dir, exist_ok=True)
    write_safetensors(os.path.join(out_dir, "model.safetensors"),
                      [(n, st, a) for n, a in tensors.items() if n not in omit])
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    return cfg

"""Independent numpy reference of the Llama forward pass, in float64.

Written from the math and Hugging Face's conventions (rotate_half RoPE, Llama 3
rope scaling as in transformers' _compute_llama3_parameters, GQA by
repeat_interleave of KV heads), not from kvlab's C++, so that agreement between the
two means something. Reads a Hugging Face directory: config.json plus
model.safetensors or model.safetensors.index.json with shards. numpy only.
Used by llama_numpy_test.py; also `python3 llama_numpy.py DIR 1,2,3` prints logits.
"""
import json
import math
import os
import sys

import numpy as np


def read_safetensors(path):
    """Returns {name: float64 array} holding exactly the stored values."""
    with open(path, "rb") as f:
        raw = f.read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        begin, end = e["data_offsets"]
        buf = data[begin:end]
        if e["dtype"] == "F32":
            a = np.frombuffer(buf, dtype="<f4")
        elif e["dtype"] == "F16":
            a = np.frombuffer(buf, dtype="<f2")
        elif e["dtype"] == "BF16":  # bf16 is the top half of an f32
            a = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(f"{path}: tensor {name}: unsupported dtype {e['dtype']}")
        out[name] = a.astype(np.float64).reshape(e["shape"])
    return out


def load_checkpoint(model_dir):
    """Returns (config dict, {tensor name: float64 array})."""
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    single = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(single):
        return cfg, read_safetensors(single)
    with open(os.path.join(model_dir, "model.safetensors.index.json")) as f:
        weight_map = json.load(f)["weight_map"]
    tensors = {}
    for shard in sorted(set(weight_map.values())):
        tensors.update(read_safetensors(os.path.join(model_dir, shard)))
    return cfg, tensors


def rope_inv_freq(cfg, head_dim):
    """theta^(-2i/d), then Llama 3's frequency-dependent scaling when configured."""
    inv_freq = 1.0 / cfg.get("rope_theta", 10000.0) ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    rs = cfg.get("rope_scaling")
    if not rs or rs.get("rope_type", rs.get("type")) == "default":
        return inv_freq
    assert rs.get("rope_type", rs.get("type")) == "llama3", rs
    factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old_len = rs["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    # Long wavelengths are slowed by `factor`, short ones kept, the band between blended.
    scaled = np.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
    return np.where(medium, blended, scaled)


def apply_rope(x, positions, inv_freq):
    """x: [T, H, d]. HF convention: channel i pairs with channel i + d/2."""
    angles = positions[:, None].astype(np.float64) * inv_freq[None, :]  # [T, d/2]
    cos = np.concatenate([np.cos(angles)] * 2, axis=-1)[:, None, :]
    sin = np.concatenate([np.sin(angles)] * 2, axis=-1)[:, None, :]
    half = x.shape[-1] // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def forward(cfg, w, tokens):
    """Logits [T, vocab] (float64); row i predicts the token after tokens[i]."""
    n_heads = cfg["num_attention_heads"]
    n_kv = cfg.get("num_key_value_heads") or n_heads
    d = cfg.get("head_dim") or cfg["hidden_size"] // n_heads
    eps = cfg["rms_norm_eps"]
    T = len(tokens)
    inv_freq = rope_inv_freq(cfg, d)
    pos = np.arange(T)
    causal = np.triu(np.full((T, T), -np.inf), k=1)
    x = w["model.embed_tokens.weight"][np.asarray(tokens)]
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = apply_rope((h @ w[p + "self_attn.q_proj.weight"].T).reshape(T, n_heads, d), pos, inv_freq)
        k = apply_rope((h @ w[p + "self_attn.k_proj.weight"].T).reshape(T, n_kv, d), pos, inv_freq)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(T, n_kv, d)
        rep = n_heads // n_kv  # query head j reads KV head j // rep (HF's repeat_kv)
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
        scores = np.einsum("thd,shd->hts", q, k) / math.sqrt(d) + causal
        probs = np.exp(scores - scores.max(axis=-1, keepdims=True))
        probs /= probs.sum(axis=-1, keepdims=True)
        attn = np.einsum("hts,shd->thd", probs, v).reshape(T, n_heads * d)
        x = x + attn @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate = h @ w[p + "mlp.gate_proj.weight"].T
        up = h @ w[p + "mlp.up_proj.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ w[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, w["model.norm.weight"], eps)
    tied = cfg.get("tie_word_embeddings", False)
    return x @ w["model.embed_tokens.weight" if tied else "lm_head.weight"].T


def main(argv):
    if len(argv) != 3:
        print("usage: llama_numpy.py MODEL_DIR TOKEN,TOKEN,...", file=sys.stderr)
        return 2
    cfg, w = load_checkpoint(argv[1])
    logits = forward(cfg, w, [int(t) for t in argv[2].split(",")])
    np.set_printoptions(precision=5, suppress=True)
    print(logits)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

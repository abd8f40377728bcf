"""Float64 numpy reference of the decoder families kvlab loads, and a writer of
random-weight checkpoints for them, in Hugging Face layout.

Written from transformers' modelling files (models/<family>/modeling_*.py and
configuration_*.py, modeling_rope_utils.py, masking_utils.py), not from kvlab's
C++, so that agreement between the two means something. Families: llama,
mistral, qwen2, qwen3, phi3, gemma2, gemma3_text. A config value the reference
does not model (a rope type, an activation, bidirectional attention, ...) is a
ValueError naming the file and the key; a missing tensor is a KeyError naming it.

Rules taken from transformers (file: function), each cited where it is applied:
  sliding window   masking_utils.py: sliding_window_overlay + causal_mask_function:
                   key j is visible from query i when i - window < j <= i.
  which layers     qwen2/qwen3 configuration: __post_init__ (layer_types);
  slide            gemma2/gemma3 configuration: __post_init__; mistral, phi3: all
                   layers when sliding_window is set (modeling: create_sliding_window_causal_mask).
  rope             modeling_rope_utils.py: _compute_{default,linear_scaling,llama3,longrope}_parameters
                   and dynamic_rope_update.longrope_frequency_update.
numpy only; run with the system python3 (/usr/bin/python3).

  hf_families.py write FAMILY OUT_DIR [--dtype f32|bf16] [--tied|--untied] [--seed N] [--head-dim N] ...
  hf_families.py logits DIR 1,2,3 [--out FILE]     # FILE: float32 little-endian [T, vocab]
"""
import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_numpy import load_checkpoint  # noqa: E402  (safetensors reader, shards; numpy only)

FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "phi3", "gemma2", "gemma3_text")
ARCHITECTURES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
                 "qwen3": "Qwen3ForCausalLM", "phi3": "Phi3ForCausalLM", "gemma2": "Gemma2ForCausalLM",
                 "gemma3_text": "Gemma3ForCausalLM"}
GEMMA = ("gemma2", "gemma3_text")

# The configuration classes' defaults for keys a config.json may leave out (they differ per family:
# Gemma's head_dim is 256 and Qwen3's 128 whatever hidden/heads is; Mistral's window is 4096).
DEFAULTS = {
    "llama": dict(rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False, num_key_value_heads=None),
    "mistral": dict(rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False, num_key_value_heads=8,
                    sliding_window=4096),
    "qwen2": dict(rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False, num_key_value_heads=32,
                  sliding_window=4096, use_sliding_window=False, max_window_layers=28),
    "qwen3": dict(rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False, num_key_value_heads=32,
                  sliding_window=4096, use_sliding_window=False, max_window_layers=28, head_dim=128),
    "phi3": dict(rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False, num_key_value_heads=None,
                 sliding_window=None),
    "gemma2": dict(rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=True, num_key_value_heads=4,
                   sliding_window=4096, head_dim=256, query_pre_attn_scalar=256, final_logit_softcapping=30.0,
                   attn_logit_softcapping=50.0),
    "gemma3_text": dict(rms_norm_eps=1e-6, rope_theta=1_000_000.0, tie_word_embeddings=True, num_key_value_heads=4,
                        sliding_window=4096, head_dim=256, query_pre_attn_scalar=256, final_logit_softcapping=None,
                        attn_logit_softcapping=None, rope_local_base_freq=10000.0, sliding_window_pattern=6),
}
ROPE_TYPES = {"default", "linear", "llama3"}  # plus longrope for phi3

# Gemma multiplies the embeddings by sqrt(hidden_size) cast to the activations' dtype
# (modeling_gemma2.py Gemma2Model.forward: torch.tensor(hidden_size**0.5, dtype=hidden_states.dtype);
# gemma3: Gemma3TextScaledWordEmbedding, embed_scale.to(weight.dtype)). kvlab computes in float32, so the
# reference takes HF run in float32: float32(sqrt(hidden)). HF run in bf16 would use bf16(sqrt(hidden)).
EMBED_SCALE_DTYPE = np.float32


class Model:
    """The decoder description the forward pass reads, filled from config.json."""


def _fail(src, key, value, why):
    raise ValueError(f"{src}: {key} = {json.dumps(value)}: {why}")


def _rope(cfg, src, m, layer_type):
    """(inv_freq over the rotary dims, attention_factor, long inv_freq or None) for one layer type."""
    fam = m.family
    rp = cfg.get("rope_parameters")  # transformers >= 5 writes this instead of rope_theta / rope_scaling
    if isinstance(rp, dict) and layer_type in rp:
        rp = rp[layer_type]
    key = "rope_parameters"
    if not isinstance(rp, dict):
        key = "rope_scaling"
        rp = dict(cfg.get("rope_scaling") or {})
        rp.setdefault("rope_theta", cfg.get("rope_theta", DEFAULTS[fam]["rope_theta"]))
    if fam == "gemma3_text" and layer_type == "sliding_attention" and "rope_parameters" not in cfg:
        # Gemma3TextConfig.convert_rope_params_to_dict: rope_scaling goes to full_attention only;
        # local layers take rope_local_base_freq with the default rope.
        rp = {"rope_type": "default", "rope_theta": cfg.get("rope_local_base_freq",
                                                            DEFAULTS[fam]["rope_local_base_freq"])}
    rtype = rp.get("rope_type", rp.get("type", "default"))
    if fam == "phi3" and rtype in ("su", "yarn"):
        rtype = "longrope"  # Phi3Config.convert_rope_params_to_dict maps the old names
    allowed = ROPE_TYPES | ({"longrope"} if fam == "phi3" else set())
    if rtype not in allowed:
        _fail(src, key + ".rope_type", rtype, f"not modelled for {fam} (modelled: {', '.join(sorted(allowed))})")
    prf = float(rp.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0)))
    if prf != 1.0 and fam != "phi3":  # only phi3's apply_rotary_pos_emb rotates part of a head
        _fail(src, "partial_rotary_factor", prf, f"{fam} rotates whole heads; not modelled")
    dim = int(m.head_dim * prf)
    if dim % 2 or dim <= 0:
        _fail(src, "partial_rotary_factor", prf, f"gives an odd or empty rotary dim {dim}")
    m.rotary_dim = dim
    try:
        return _inv_freq(cfg, m, rp, rtype, dim)
    except KeyError as e:
        _fail(src, f"{key}.{e.args[0]}", None, f"rope_type {rtype} needs it")


def _inv_freq(cfg, m, rp, rtype, dim):
    base = float(rp["rope_theta"])
    inv = 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    if rtype == "default":
        return inv, 1.0, None
    if rtype == "linear":  # _compute_linear_scaling_rope_parameters
        return inv / float(rp["factor"]), 1.0, None
    if rtype == "llama3":  # _compute_llama3_parameters
        factor, low, high = float(rp["factor"]), float(rp["low_freq_factor"]), float(rp["high_freq_factor"])
        old_len = float(rp["original_max_position_embeddings"])
        wavelen = 2 * math.pi / inv
        scaled = np.where(wavelen > old_len / low, inv / factor, inv)
        smooth = (old_len / wavelen - low) / (high - low)
        blended = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < old_len / high) & ~(wavelen > old_len / low)
        return np.where(medium, blended, scaled), 1.0, None
    # longrope: _compute_longrope_parameters. The factors divide the frequencies; cos and sin are multiplied
    # by attention_factor (so the rotary part of q.k by its square).
    # Phi3Config's original_max_position_embeddings defaults to 4096; transformers 5 also reads it from
    # the rope parameters.
    orig = rp.get("original_max_position_embeddings", cfg.get("original_max_position_embeddings", 4096))
    factor = rp.get("factor")
    if factor is None:
        factor = cfg.get("max_position_embeddings", 4096) / orig  # Phi3Config's default, 4096
    att = rp.get("attention_factor")
    if att is None:
        att = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(orig))
    shape = np.arange(0, dim, 2, dtype=np.float64) / dim
    for name in ("short_factor", "long_factor"):
        if len(rp.get(name) or []) != dim // 2:
            raise ValueError(f"{m.source}: rope_scaling.{name} = {json.dumps(rp.get(name))}: needs rotary_dim / 2 "
                             f"= {dim // 2} numbers")
    short = 1.0 / (np.asarray(rp["short_factor"], np.float64) * base ** shape)
    long_ = 1.0 / (np.asarray(rp["long_factor"], np.float64) * base ** shape)
    m.longrope_original = int(orig)
    return short, float(att), long_


def parse_config(cfg, src="config.json"):
    """Returns a Model; ValueError naming src and the key for anything not modelled."""
    fam = cfg.get("model_type")
    if fam not in FAMILIES:
        _fail(src, "model_type", fam, f"not a family the reference models ({', '.join(FAMILIES)})")
    d = DEFAULTS[fam]
    m = Model()
    m.family, m.source = fam, src
    for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size"):
        if not isinstance(cfg.get(k), int) or cfg[k] <= 0:
            _fail(src, k, cfg.get(k), "must be a positive integer")
    m.hidden, m.inter, m.layers = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    m.heads, m.vocab = cfg["num_attention_heads"], cfg["vocab_size"]
    m.kv_heads = cfg.get("num_key_value_heads", d["num_key_value_heads"]) or m.heads
    if m.heads % m.kv_heads:
        _fail(src, "num_key_value_heads", m.kv_heads, f"does not divide num_attention_heads {m.heads}")
    m.head_dim = cfg.get("head_dim") or d.get("head_dim") or m.hidden // m.heads
    m.eps = float(cfg.get("rms_norm_eps", d["rms_norm_eps"]))
    m.tied = bool(cfg.get("tie_word_embeddings", d["tie_word_embeddings"]))
    gemma = fam in GEMMA

    # Activation: the Llama-like families read hidden_act; Gemma reads hidden_activation (Gemma2MLP).
    act_key = "hidden_activation" if gemma else "hidden_act"
    act = cfg.get(act_key, cfg.get("hidden_act", "gelu_pytorch_tanh") if gemma else "silu")
    if act != ("gelu_pytorch_tanh" if gemma else "silu"):
        _fail(src, act_key, act, f"the reference models {fam} with "
              + ("gelu_pytorch_tanh" if gemma else "silu") + " only")
    m.gelu = gemma
    if cfg.get("use_bidirectional_attention"):
        _fail(src, "use_bidirectional_attention", True, "bidirectional attention is not modelled")

    # Biases. llama: attention_bias on q, k, v, o; mlp_bias on gate, up, down (LlamaAttention, LlamaMLP).
    # qwen2: q, k, v always, o never (Qwen2Attention: bias=True / bias=False). qwen3, gemma: attention_bias
    # on q, k, v, o. mistral, phi3: none.
    ab = bool(cfg.get("attention_bias", False))
    m.qkv_bias = fam == "qwen2" or (ab and fam in ("llama", "qwen3") + GEMMA)
    m.o_bias = ab and fam in ("llama", "qwen3") + GEMMA
    m.mlp_bias = fam == "llama" and bool(cfg.get("mlp_bias", False))
    m.fused = fam == "phi3"  # qkv_proj and gate_up_proj (Phi3Attention, Phi3MLP)
    m.qk_norm = fam in ("qwen3", "gemma3_text")  # per-head RMSNorm over head_dim, before RoPE
    m.norm_plus_one = gemma  # Gemma2RMSNorm: x * (1 + w)
    m.four_norms = gemma  # input, post_attention (on the attention output), pre_ and post_feedforward

    # Per-layer attention type.
    if fam in ("llama", "mistral", "phi3") and cfg.get("layer_types") is not None:
        # Only the qwen and gemma configurations read layer_types; MistralConfig warns and ignores it.
        _fail(src, "layer_types", cfg["layer_types"], f"transformers' {fam} ignores layer_types; not modelled")
    window = cfg.get("sliding_window", d.get("sliding_window"))
    if fam in ("qwen2", "qwen3"):
        # Qwen2Config/Qwen3Config.__post_init__: sliding_window only with use_sliding_window; then layer i
        # slides when i >= max_window_layers; explicit layer_types win. The config's docstring says the
        # opposite ("the bottom layers use SWA"; transformers issue #35896, closed); the per-layer rule,
        # which an attention refactor once dropped and transformers PR #36162 restored, is what runs.
        if not cfg.get("use_sliding_window", d["use_sliding_window"]):
            window = None
        mwl = cfg.get("max_window_layers", d["max_window_layers"])
        default_types = ["sliding_attention" if window is not None and i >= mwl else "full_attention"
                         for i in range(m.layers)]
    elif fam == "gemma2":  # Gemma2Config.__post_init__: even layers (0, 2, ...) slide
        default_types = ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(m.layers)]
    elif fam == "gemma3_text":  # Gemma3TextConfig: layer i is global when (i + 1) % sliding_window_pattern == 0
        pattern = cfg.get("sliding_window_pattern", d["sliding_window_pattern"])
        default_types = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(m.layers)]
    else:  # llama: none; mistral, phi3: every layer once sliding_window is set
        default_types = ["sliding_attention" if window is not None and fam != "llama" else "full_attention"
                         for i in range(m.layers)]
    types = cfg.get("layer_types") or default_types
    if len(types) != m.layers or any(t not in ("full_attention", "sliding_attention") for t in types):
        _fail(src, "layer_types", types, f"needs {m.layers} entries of full_attention / sliding_attention")
    if window is not None and (not isinstance(window, int) or window <= 0):
        _fail(src, "sliding_window", window, "must be a positive integer or null")
    if window is None and "sliding_attention" in types:
        # masking_utils.create_sliding_window_causal_mask raises when the config has no sliding_window
        # (qwen2/qwen3 drop it unless use_sliding_window is true).
        _fail(src, "sliding_window", window, "layers of type sliding_attention need a window")
    m.layer_types = list(types)
    m.windows = [window if t == "sliding_attention" and window is not None else None for t in types]

    # Attention scale, soft-capping, embedding scale.
    m.scaling = (float(cfg.get("query_pre_attn_scalar", d["query_pre_attn_scalar"])) ** -0.5 if gemma
                 else m.head_dim ** -0.5)
    m.attn_softcap = cfg.get("attn_logit_softcapping", d.get("attn_logit_softcapping")) if gemma else None
    if fam == "gemma3_text" and m.attn_softcap is not None:
        # Gemma3Attention.forward does not pass softcap to the attention function: transformers stores
        # the value and ignores it. An engine applying it would differ from HF; refuse instead.
        _fail(src, "attn_logit_softcapping", m.attn_softcap, "Gemma3Attention ignores it; not modelled")
    m.final_softcap = cfg.get("final_logit_softcapping", d.get("final_logit_softcapping")) if gemma else None
    m.embed_scale = float(EMBED_SCALE_DTYPE(math.sqrt(m.hidden))) if gemma else 1.0

    m.longrope_original = None
    m.rope = {t: _rope(cfg, src, m, t) for t in sorted(set(types))}
    return m


def expected_tensors(m):
    """{name: shape} of exactly the tensors transformers' state dict holds (lm_head only when untied)."""
    H, KV, d, D, I = m.heads, m.kv_heads, m.head_dim, m.hidden, m.inter
    t = {"model.embed_tokens.weight": (m.vocab, D), "model.norm.weight": (D,)}
    for i in range(m.layers):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = (D,)
        t[p + "post_attention_layernorm.weight"] = (D,)
        if m.four_norms:
            t[p + "pre_feedforward_layernorm.weight"] = (D,)
            t[p + "post_feedforward_layernorm.weight"] = (D,)
        if m.fused:
            t[p + "self_attn.qkv_proj.weight"] = ((H + 2 * KV) * d, D)
            t[p + "mlp.gate_up_proj.weight"] = (2 * I, D)
        else:
            for n, rows in (("q", H * d), ("k", KV * d), ("v", KV * d)):
                t[p + f"self_attn.{n}_proj.weight"] = (rows, D)
                if m.qkv_bias:
                    t[p + f"self_attn.{n}_proj.bias"] = (rows,)
            for n, shape in (("gate", (I, D)), ("up", (I, D))):
                t[p + f"mlp.{n}_proj.weight"] = shape
                if m.mlp_bias:
                    t[p + f"mlp.{n}_proj.bias"] = (I,)
        t[p + "self_attn.o_proj.weight"] = (D, H * d)
        if m.o_bias:
            t[p + "self_attn.o_proj.bias"] = (D,)
        t[p + "mlp.down_proj.weight"] = (D, I)
        if m.mlp_bias:
            t[p + "mlp.down_proj.bias"] = (D,)
        if m.qk_norm:
            t[p + "self_attn.q_norm.weight"] = (d,)
            t[p + "self_attn.k_norm.weight"] = (d,)
    if not m.tied:
        t["lm_head.weight"] = (m.vocab, D)
    return t


def check_tensors(m, w, src="model.safetensors"):
    for name, shape in expected_tensors(m).items():
        if name not in w:
            raise KeyError(f"{src}: missing tensor {name} (a {m.family} checkpoint needs it)")
        if tuple(w[name].shape) != tuple(shape):
            raise ValueError(f"{src}: tensor {name} has shape {list(w[name].shape)}, expected {list(shape)}")


def rms_norm(x, w, eps, plus_one):
    # Llama: w * (x / rms); Gemma: (x / rms) * (1 + w). Same in float64.
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * ((1.0 + w) if plus_one else w)


def gelu_tanh(x):  # gelu_pytorch_tanh
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def rope_tables(m, layer_type, T):
    """cos, sin [T, rotary_dim] already multiplied by the attention factor."""
    inv, att, long_inv = m.rope[layer_type]
    # dynamic_rope_update.longrope_frequency_update: long factors when max(position_ids) + 1 exceeds
    # original_max_position_embeddings, for the whole forward call. The reference is one call over T tokens.
    if long_inv is not None and T > m.longrope_original:
        inv = long_inv
    ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
    emb = np.concatenate([ang, ang], axis=-1)
    return np.cos(emb) * att, np.sin(emb) * att


def apply_rope(x, cos, sin):
    """x [T, heads, d]. rotate_half on the first rotary_dim channels (i pairs with i + rotary_dim/2),
    the rest passes (phi3's apply_rotary_pos_emb with partial_rotary_factor)."""
    r = cos.shape[-1]
    xr, xp = x[..., :r], x[..., r:]
    rot = np.concatenate([-xr[..., r // 2:], xr[..., :r // 2]], axis=-1)
    return np.concatenate([xr * cos[:, None, :] + rot * sin[:, None, :], xp], axis=-1)


def attention_mask(T, window):
    """Additive mask [T, T]: causal, and with a window, key j visible from query i iff i - window < j <= i
    (masking_utils.py: causal_mask_function and sliding_window_overlay)."""
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    ok = j <= i
    if window is not None:
        ok &= j > i - window
    return np.where(ok, 0.0, -np.inf)


def forward(cfg, w, tokens, src="model"):
    """Logits [T, vocab] in float64; row i predicts the token after tokens[i]."""
    m = parse_config(cfg, src + "/config.json")
    check_tensors(m, w, src)
    T, H, KV, d = len(tokens), m.heads, m.kv_heads, m.head_dim
    tok = np.asarray(tokens)
    if tok.size == 0 or tok.min() < 0 or tok.max() >= m.vocab:
        raise ValueError(f"tokens must be in [0, {m.vocab})")
    tables = {t: rope_tables(m, t, T) for t in m.rope}
    masks = {win: attention_mask(T, win) for win in set(m.windows)}

    def lin(x, name, bias=False):
        # Only the biases the family has: transformers ignores (and warns about) extra tensors.
        y = x @ w[name + ".weight"].T
        return y + w[name + ".bias"] if bias else y

    def norm(x, name):
        return rms_norm(x, w[name], m.eps, m.norm_plus_one)

    x = w["model.embed_tokens.weight"][tok] * m.embed_scale
    for layer in range(m.layers):
        p = f"model.layers.{layer}."
        h = norm(x, p + "input_layernorm.weight")
        if m.fused:  # Phi3Attention: q, then k, then v along the output rows
            qkv = lin(h, p + "self_attn.qkv_proj")
            q, k, v = np.split(qkv, [H * d, H * d + KV * d], axis=-1)
        else:
            q, k, v = (lin(h, p + f"self_attn.{n}_proj", m.qkv_bias) for n in "qkv")
        q, k, v = q.reshape(T, H, d), k.reshape(T, KV, d), v.reshape(T, KV, d)
        if m.qk_norm:  # Qwen3Attention / Gemma3Attention: norm per head over head_dim, then RoPE
            q = norm(q, p + "self_attn.q_norm.weight")
            k = norm(k, p + "self_attn.k_norm.weight")
        cos, sin = tables[m.layer_types[layer]]
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        rep = H // KV  # repeat_kv: query head j reads KV head j // rep
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
        scores = np.einsum("thd,shd->hts", q, k) * m.scaling
        if m.attn_softcap is not None:  # Gemma2 eager_attention_forward: cap before the mask
            scores = np.tanh(scores / m.attn_softcap) * m.attn_softcap
        scores = scores + masks[m.windows[layer]]
        probs = np.exp(scores - scores.max(axis=-1, keepdims=True))
        probs /= probs.sum(axis=-1, keepdims=True)
        attn = np.einsum("hts,shd->thd", probs, v).reshape(T, H * d)
        o = lin(attn, p + "self_attn.o_proj", m.o_bias)
        if m.four_norms:
            x = x + norm(o, p + "post_attention_layernorm.weight")
            h = norm(x, p + "pre_feedforward_layernorm.weight")
        else:
            x = x + o
            h = norm(x, p + "post_attention_layernorm.weight")
        if m.fused:  # Phi3MLP: gate_up_proj output is [gate | up]
            gate, up = np.split(lin(h, p + "mlp.gate_up_proj"), 2, axis=-1)
        else:
            gate, up = lin(h, p + "mlp.gate_proj", m.mlp_bias), lin(h, p + "mlp.up_proj", m.mlp_bias)
        act = gelu_tanh(gate) if m.gelu else gate / (1.0 + np.exp(-gate))
        y = lin(act * up, p + "mlp.down_proj", m.mlp_bias)
        x = x + (norm(y, p + "post_feedforward_layernorm.weight") if m.four_norms else y)
    x = norm(x, "model.norm.weight")
    logits = x @ w["model.embed_tokens.weight" if m.tied else "lm_head.weight"].T
    if m.final_softcap is not None:
        logits = np.tanh(logits / m.final_softcap) * m.final_softcap
    return logits


def logits_of_dir(model_dir, tokens):
    cfg, w = load_checkpoint(model_dir)
    return forward(cfg, w, tokens, src=model_dir)


def main(argv):
    from hf_families_writer import write_checkpoint  # the writer imports this module
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    wr = sub.add_parser("write", help="write a random-weight checkpoint")
    wr.add_argument("family", choices=FAMILIES)
    wr.add_argument("out_dir")
    wr.add_argument("--dtype", choices=("f32", "bf16"), default="f32")
    tie = wr.add_mutually_exclusive_group()
    tie.add_argument("--tied", dest="tied", action="store_true", default=None)
    tie.add_argument("--untied", dest="tied", action="store_false")
    wr.add_argument("--seed", type=int, default=0)
    wr.add_argument("--layers", type=int, default=3)
    wr.add_argument("--hidden", type=int, default=64)
    wr.add_argument("--heads", type=int, default=4)
    wr.add_argument("--kv-heads", type=int, default=2)
    wr.add_argument("--head-dim", type=int, default=None, help="explicit head_dim (config key head_dim)")
    wr.add_argument("--vocab", type=int, default=300)
    wr.add_argument("--window", type=int, default=8, help="sliding_window where the family has one (0: none)")
    lg = sub.add_parser("logits", help="print or write the reference logits")
    lg.add_argument("model_dir")
    lg.add_argument("tokens", help="comma-separated token ids")
    lg.add_argument("--out", help="float32 little-endian [T, vocab] (as kvlab logits writes)")
    args = ap.parse_args(argv[1:])
    try:
        if args.cmd == "write":
            cfg = write_checkpoint(args.family, args.out_dir, dtype=args.dtype, tied=args.tied, seed=args.seed,
                                   layers=args.layers, hidden=args.hidden, heads=args.heads,
                                   kv_heads=args.kv_heads, head_dim=args.head_dim, vocab=args.vocab,
                                   window=args.window or None)
            print(f"wrote {args.family} checkpoint to {args.out_dir} ({cfg['num_hidden_layers']} layers, "
                  f"{args.dtype}, tied={cfg['tie_word_embeddings']})")
            return 0
        out = logits_of_dir(args.model_dir, [int(t) for t in args.tokens.split(",")])
        if args.out:
            out.astype("<f4").tofile(args.out)
            print(f"wrote {out.shape[0]} x {out.shape[1]} logits to {args.out}")
        else:
            np.set_printoptions(precision=5, suppress=True)
            print(out)
        return 0
    except (ValueError, KeyError, OSError) as e:
        print(f"error: {e.args[0] if e.args else e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))

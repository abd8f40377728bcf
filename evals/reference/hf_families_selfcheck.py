"""Properties of the family reference (hf_families.py) checked with numpy alone, each one an assertion
that a wrong reference would fail: cross-family identities (qwen2 with zero biases is llama, phi3 with
its fused matrices split is llama, mistral with a window longer than the text is llama), window
behaviour, soft-capping bounds, tied heads, q/k-norm scale invariance, RoPE variants, and the errors
for configs and checkpoints the reference does not model. Run by hf_families_test.py --self-check.
"""
import math
import os

import numpy as np

import hf_families as ref
import hf_families_writer as wr
import llama_numpy
from llama_numpy import load_checkpoint

T = 48


def _toks(vocab, n=T, seed=5):
    return [int(t) for t in np.random.default_rng(seed).integers(0, vocab, n)]


def _model(tmp, name, family, **kw):
    d = os.path.join(tmp, name)
    wr.write_checkpoint(family, d, **kw)
    return load_checkpoint(d)


def _raises(fn, exc, *needles):
    try:
        fn()
    except exc as e:
        msg = str(e.args[0] if e.args else e)
        return all(n in msg for n in needles)
    return False


def _maxdiff(a, b):
    return float(np.max(np.abs(a - b)))


def writer_and_layout(tmp, c):
    rng = np.random.default_rng(7)
    a = np.concatenate([rng.normal(0, 3, 61), [1 / 3, 1 + 2.0**-8, 1 + 3 * 2.0**-8, 0.0, -2.5, 65504.0]])
    path = os.path.join(tmp, "roundtrip.safetensors")
    wr.write_safetensors(path, [("x.f32", "F32", a.reshape(1, 67)), ("x.bf16", "BF16", a)])
    back = llama_numpy.read_safetensors(path)
    a32 = a.astype(np.float32)
    c.check(np.array_equal(back["x.f32"], a32.astype(np.float64).reshape(1, 67)), "writer: F32 round trip")
    bf = back["x.bf16"]
    c.check(np.all(np.abs(bf - a32) <= 2.0**-8 * np.abs(a32)) and bf[62] == 1.0 and bf[63] == 1 + 2.0**-6,
            "writer: BF16 round trip (within 2^-8 relative, ties to even)")
    # Every family: the stored names and shapes are exactly the state dict's, with HF's model_type.
    some = {"qwen3": "model.layers.0.self_attn.q_norm.weight", "phi3": "model.layers.0.mlp.gate_up_proj.weight",
            "qwen2": "model.layers.0.self_attn.v_proj.bias", "gemma2": "model.layers.2.post_feedforward_layernorm.weight",
            "gemma3_text": "model.layers.1.self_attn.k_norm.weight", "llama": "model.layers.2.mlp.down_proj.weight",
            "mistral": "lm_head.weight"}
    for fam in ref.FAMILIES:
        cfg, w = _model(tmp, "layout_" + fam, fam, dtype="bf16", seed=1)
        m = ref.parse_config(cfg)
        exp = ref.expected_tensors(m)
        ok = (set(w) == set(exp) and all(tuple(w[k].shape) == tuple(v) for k, v in exp.items())
              and cfg["model_type"] == fam and cfg["architectures"] == [ref.ARCHITECTURES[fam]] and some[fam] in w)
        c.check(ok, f"writer: {fam} checkpoint holds exactly HF's tensor names and shapes ({len(exp)} tensors)")
    m = ref.parse_config(wr.make_config("phi3", head_dim=None))
    exp = ref.expected_tensors(m)
    c.check(exp["model.layers.0.self_attn.qkv_proj.weight"] == ((4 + 2 * 2) * 16, 64)
            and exp["model.layers.0.mlp.gate_up_proj.weight"] == (256, 64) and "model.layers.0.self_attn.q_proj.weight"
            not in exp, "writer: phi3 qkv_proj is [(heads + 2 kv_heads) * head_dim, hidden], gate_up [2 inter, hidden]")


def layer_types_and_masks(c):
    def types(fam, **ov):
        return ref.parse_config(wr.make_config(fam, **ov)).windows
    c.check(types("qwen2") == [None, 8, 8], "qwen2: use_sliding_window, max_window_layers 1: layers 1, 2 slide")
    c.check(types("qwen2", overrides=dict(use_sliding_window=False)) == [None] * 3,
            "qwen2: use_sliding_window false: no layer slides, whatever sliding_window says")
    c.check(types("qwen3", layers=4, overrides=dict(max_window_layers=3)) == [None, None, None, 8],
            "qwen3: layer i slides iff i >= max_window_layers")
    c.check(types("gemma2", layers=4) == [8, None, 8, None], "gemma2: even layers slide")
    c.check(types("gemma3_text", layers=12, overrides=dict(sliding_window_pattern=6))
            == [8] * 5 + [None] + [8] * 5 + [None], "gemma3: sliding_window_pattern 6: layers 5 and 11 global")
    c.check(types("mistral") == [8] * 3 and types("phi3") == [8] * 3 and types("llama") == [None] * 3,
            "mistral, phi3: every layer slides; llama none")
    c.check(types("mistral", overrides=dict(sliding_window=None)) == [None] * 3
            and types("mistral", overrides={"sliding_window": None}) == [None] * 3,
            "mistral: sliding_window null: no window")
    cfg = wr.make_config("mistral")
    del cfg["sliding_window"]
    c.check(ref.parse_config(cfg).windows == [4096] * 3, "mistral: sliding_window absent: MistralConfig's 4096")
    mk = ref.attention_mask(20, 8) == 0
    rows_ok = all(mk[i].sum() == min(i + 1, 8) and mk[i, i] and (i < 8 or (mk[i, i - 7] and not mk[i, i - 8]))
                  for i in range(20))
    c.check(rows_ok and not mk[3, 4], "mask: key j visible from i iff i - 8 < j <= i (8 keys, self included)")


def windows(tmp, c):
    """Windowed models equal their unwindowed selves up to the window and differ beyond it."""
    cases = [("mistral", {}, dict(sliding_window=None)),
             ("qwen2", {}, dict(use_sliding_window=False)),
             ("phi3", {}, dict(sliding_window=None)),
             ("gemma2", {}, dict(layer_types=["full_attention"] * 3)),
             ("gemma3_text", dict(head_dim=24), dict(layer_types=["full_attention"] * 3, rope_local_base_freq=1e6,
                                                     rope_scaling=None))]
    for fam, kw, unwindowed in cases:
        cfg, w = _model(tmp, "win_" + fam, fam, seed=2, **kw)
        tokens = _toks(cfg["vocab_size"])
        full_cfg = dict(cfg, **unwindowed)
        if fam == "gemma3_text":  # compare windowing alone: local and global rope made equal first
            cfg = dict(cfg, rope_local_base_freq=1e6, rope_scaling=None)
        a, b = ref.forward(cfg, w, tokens), ref.forward(full_cfg, w, tokens)
        c.check(_maxdiff(a[:8], b[:8]) < 1e-10 and np.min(np.max(np.abs(a[8:] - b[8:]), axis=1)) > 1e-3,
                f"{fam}: window 8 equals no window for the first 8 positions and differs at every later one")
    # The window only ever looks back 8 tokens: tokens before i - 7 do not change row i in a one-layer
    # mistral; in a 3-layer one the receptive field grows to 3 * 7 + 1 positions.
    cfg, w = _model(tmp, "win_receptive", "mistral", seed=3, layers=1)
    tokens = _toks(cfg["vocab_size"])
    changed = list(tokens)
    changed[:10] = [(t + 1) % cfg["vocab_size"] for t in changed[:10]]
    a, b = ref.forward(cfg, w, tokens), ref.forward(cfg, w, changed)
    c.check(_maxdiff(a[17:], b[17:]) < 1e-10 and _maxdiff(a[16], b[16]) > 1e-3,
            "mistral 1 layer: row i depends on tokens i-7..i only")


def identities(tmp, c):
    """Cross-family identities: the same weights give the same logits where transformers' models coincide."""
    cfg, w = _model(tmp, "id_llama", "llama", seed=4, head_dim=24)
    tokens = _toks(cfg["vocab_size"])
    base = ref.forward(cfg, w, tokens)
    c.check(_maxdiff(base, llama_numpy.forward(cfg, w, tokens)) < 1e-10,
            "llama: equals llama_numpy.py (the older, separately written reference)")
    m_cfg = dict(cfg, model_type="mistral", sliding_window=T)
    c.check(_maxdiff(ref.forward(m_cfg, w, tokens), base) < 1e-10, "mistral with window >= length == llama")
    q_cfg = dict(cfg, model_type="qwen2", use_sliding_window=False)
    wq = dict(w)
    for i in range(cfg["num_hidden_layers"]):
        for n in "qkv":
            wq[f"model.layers.{i}.self_attn.{n}_proj.bias"] = np.zeros(w[f"model.layers.{i}.self_attn.{n}_proj.weight"].shape[0])
    c.check(_maxdiff(ref.forward(q_cfg, wq, tokens), base) < 1e-10, "qwen2 with zero q/k/v biases == llama")
    wq2 = dict(wq)
    wq2["model.layers.0.self_attn.k_proj.bias"] = np.full_like(wq["model.layers.0.self_attn.k_proj.bias"], 0.3)
    wq2["model.layers.0.self_attn.v_proj.bias"] = np.full_like(wq["model.layers.0.self_attn.v_proj.bias"], 0.3)
    c.check(_maxdiff(ref.forward(q_cfg, wq2, tokens), base) > 1e-3, "qwen2: the k/v biases are applied")
    b_cfg = dict(cfg, attention_bias=True, mlp_bias=True)
    wb = dict(wq)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        wb[p + "self_attn.o_proj.bias"] = np.zeros(cfg["hidden_size"])
        wb[p + "mlp.gate_proj.bias"] = wb[p + "mlp.up_proj.bias"] = np.zeros(cfg["intermediate_size"])
        wb[p + "mlp.down_proj.bias"] = np.full(cfg["hidden_size"], 0.0)
    c.check(_maxdiff(ref.forward(b_cfg, wb, tokens), base) < 1e-10, "llama attention_bias/mlp_bias with zeros == llama")
    wb["model.layers.1.mlp.down_proj.bias"] = np.full(cfg["hidden_size"], 0.2)
    c.check(_maxdiff(ref.forward(b_cfg, wb, tokens), base) > 1e-3, "llama mlp_bias is applied")
    # phi3: qkv_proj = [q; k; v] and gate_up_proj = [gate; up] along the rows.
    p_cfg = dict(cfg, model_type="phi3", rope_scaling=None, sliding_window=None)
    wp = {k: v for k, v in w.items() if not any(s in k for s in ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"))}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        wp[p + "self_attn.qkv_proj.weight"] = np.concatenate([w[p + f"self_attn.{n}_proj.weight"] for n in "qkv"])
        wp[p + "mlp.gate_up_proj.weight"] = np.concatenate([w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"]])
    c.check(_maxdiff(ref.forward(p_cfg, wp, tokens), base) < 1e-10, "phi3 with fused matrices from llama's == llama")
    # Tied: the head is the embedding (an lm_head tensor, if any, is ignored).
    cfg_t, w_t = _model(tmp, "id_tied", "qwen2", seed=5, tied=True)
    tied = ref.forward(cfg_t, w_t, tokens)
    untied = ref.forward(dict(cfg_t, tie_word_embeddings=False),
                         dict(w_t, **{"lm_head.weight": w_t["model.embed_tokens.weight"]}), tokens)
    junk = ref.forward(cfg_t, dict(w_t, **{"lm_head.weight": w_t["model.embed_tokens.weight"][::-1].copy()}), tokens)
    c.check(_maxdiff(tied, untied) < 1e-10 and _maxdiff(tied, junk) < 1e-10,
            "tied head uses model.embed_tokens.weight (lm_head.weight ignored when tied)")
    c.check(_raises(lambda: ref.forward(dict(cfg_t, tie_word_embeddings=False), w_t, tokens), KeyError,
                    "lm_head.weight"), "untied config without lm_head.weight: KeyError naming it")


def norms_and_caps(tmp, c):
    # q/k norms remove the scale of q_proj / k_proj (up to eps), which llama's attention does not.
    for fam in ("qwen3", "gemma3_text"):
        cfg, w = _model(tmp, "qk_" + fam, fam, seed=6, head_dim=24)
        tokens = _toks(cfg["vocab_size"])
        base = ref.forward(cfg, w, tokens)
        ws = dict(w)
        for i in range(cfg["num_hidden_layers"]):
            ws[f"model.layers.{i}.self_attn.q_proj.weight"] = 3.0 * w[f"model.layers.{i}.self_attn.q_proj.weight"]
            ws[f"model.layers.{i}.self_attn.k_proj.weight"] = 0.5 * w[f"model.layers.{i}.self_attn.k_proj.weight"]
        scaled = ref.forward(cfg, ws, tokens)
        wn = dict(w, **{"model.layers.0.self_attn.q_norm.weight": 2 * w["model.layers.0.self_attn.q_norm.weight"] + 0.5})
        c.check(_maxdiff(base, scaled) < 1e-5 * np.max(np.abs(base)) and _maxdiff(ref.forward(cfg, wn, tokens), base) > 1e-3,
                f"{fam}: per-head q/k RMSNorm makes q_proj/k_proj scale-free, and q_norm.weight matters")
    # Gemma soft-capping bounds the logits; removing it changes them; the attention cap matters too.
    cfg, w = _model(tmp, "cap_gemma2", "gemma2", seed=7, head_dim=24)
    tokens = _toks(cfg["vocab_size"])
    capped = ref.forward(cfg, w, tokens)
    free = ref.forward(dict(cfg, final_logit_softcapping=None), w, tokens)
    noattn = ref.forward(dict(cfg, attn_logit_softcapping=None), w, tokens)
    c.check(np.max(np.abs(capped)) < cfg["final_logit_softcapping"] and np.max(np.abs(free)) > 1.0
            and np.allclose(capped, np.tanh(free / 2.0) * 2.0, atol=1e-12) and _maxdiff(noattn, capped) > 1e-3,
            "gemma2: final cap is tanh(x / cap) * cap and bounds |logits|; the attention cap changes logits")
    c.check(ref.parse_config(cfg).scaling == 24 ** -0.5 and ref.parse_config(cfg).head_dim == 24,
            "gemma2: scale is query_pre_attn_scalar^-1/2 (24), not head_dim's")
    m96 = ref.parse_config(wr.make_config("gemma2", hidden=96, heads=6))
    c.check(m96.embed_scale == float(np.float32(math.sqrt(96))) and m96.embed_scale != math.sqrt(96),
            "gemma: embedding scale is float32(sqrt(hidden_size))")
    c.check(ref.parse_config(dict(wr.make_config("gemma3_text"), final_logit_softcapping=None)).final_softcap is None
            and ref.parse_config({k: v for k, v in wr.make_config("gemma2").items()
                                  if k != "final_logit_softcapping"}).final_softcap == 30.0,
            "soft-capping defaults: gemma3 none, gemma2 30 when the key is absent")


def rope(tmp, c):
    # Partial rotary (phi3): channels past rotary_dim pass unrotated, the rest pair i with i + r/2.
    m = ref.parse_config(wr.make_config("phi3"))
    cos, sin = ref.rope_tables(m, "sliding_attention", 30)
    x = np.random.default_rng(1).normal(size=(30, 1, 16))
    y = ref.apply_rope(x, cos, sin)
    att = m.rope["sliding_attention"][1]
    c.check(m.rotary_dim == 8 and np.array_equal(y[..., 8:], x[..., 8:]) and abs(att - math.sqrt(1 + math.log(4) / math.log(64))) < 1e-12,
            "phi3: partial_rotary_factor 0.5 rotates 8 of 16 dims; longrope attention factor sqrt(1 + ln 4 / ln 64)")
    q, k = x[:, :, :8] / att, x[::-1, :, :8].copy() / att  # undo the factor: scores then depend on distance only
    qr, kr = ref.apply_rope(q, cos, sin), ref.apply_rope(k, cos, sin)
    s1, s2 = np.sum(ref.apply_rope(q[:1], cos[9:10], sin[9:10]) * ref.apply_rope(k[:1], cos[4:5], sin[4:5])), \
        np.sum(ref.apply_rope(q[:1], cos[25:26], sin[25:26]) * ref.apply_rope(k[:1], cos[20:21], sin[20:21]))
    c.check(abs(s1 / att**2 - s2 / att**2) < 1e-10 and qr.shape == q.shape and kr.shape == k.shape,
            "rope: scores depend on relative position only")
    inv_short, _, inv_long = m.rope["sliding_attention"]
    base = 1e4 ** -(np.arange(0, 8, 2) / 8)
    c.check(np.allclose(inv_short, base / np.array([1, 1.25, 1.5, 1.75])) and np.allclose(inv_long, base / np.array([2, 3.5, 5, 6.5])),
            "phi3 longrope: inv_freq = 1 / (factor * theta^(2i/rotary_dim))")
    # Long factors once the forward call is longer than original_max_position_embeddings (64).
    cfg, w = _model(tmp, "rope_phi3", "phi3", seed=8, overrides=dict(sliding_window=None))
    tokens = _toks(cfg["vocab_size"], 70)
    c.check(_maxdiff(ref.forward(cfg, w, tokens[:64]), ref.forward(cfg, w, tokens[:65])[:64]) > 1e-3
            and _maxdiff(ref.forward(cfg, w, tokens[:40]), ref.forward(cfg, w, tokens[:64])[:40]) < 1e-10,
            "phi3 longrope: short factors up to 64 tokens, long factors (for every position) past it")
    # Llama 3 bands (original 64, head_dim 16, theta 1e4); linear divides every frequency.
    m3 = ref.parse_config(wr.make_config("llama", overrides=dict(rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64})))
    inv = m3.rope["full_attention"][0]
    base = 1e4 ** -(np.arange(0, 16, 2) / 16)
    wl = 2 * np.pi / base
    hi, lo = wl < 16, wl > 64
    mid = ~hi & ~lo
    c.check(np.allclose(inv[hi], base[hi]) and np.allclose(inv[lo], base[lo] / 8) and mid.any()
            and np.all((inv[mid] < base[mid]) & (inv[mid] > base[mid] / 8)), "llama3 rope: high kept, low / 8, medium blended")
    ml = ref.parse_config(wr.make_config("llama", overrides=dict(rope_scaling={"type": "linear", "factor": 2.0})))
    c.check(np.allclose(ml.rope["full_attention"][0], base / 2), "linear rope (old key 'type'): inv_freq / factor")
    # Gemma 3: local layers rope_local_base_freq without scaling, global rope_theta with linear scaling.
    mg = ref.parse_config(wr.make_config("gemma3_text", head_dim=16))
    c.check(np.allclose(mg.rope["sliding_attention"][0], base)
            and np.allclose(mg.rope["full_attention"][0], 1e6 ** -(np.arange(0, 16, 2) / 16) / 4.0),
            "gemma3: local rope 1e4 unscaled, global 1e6 / linear factor 4")
    v5 = {k: v for k, v in wr.make_config("gemma3_text", head_dim=16).items()
          if k not in ("rope_theta", "rope_scaling", "rope_local_base_freq")}
    v5["rope_parameters"] = {"full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1e6},
                             "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}
    mv = ref.parse_config(v5)
    c.check(all(np.allclose(mv.rope[t][0], mg.rope[t][0]) for t in mg.rope),
            "gemma3: transformers 5's per-layer-type rope_parameters read the same")


def errors(c):
    cfgs = {
        "model_type": (dict(wr.make_config("llama"), model_type="mamba"), "mamba"),
        "rope_scaling.rope_type": (dict(wr.make_config("llama"), rope_scaling={"rope_type": "yarn", "factor": 2.0}), "yarn"),
        "hidden_act": (dict(wr.make_config("qwen3"), hidden_act="gelu"), "gelu"),
        "hidden_activation": (dict(wr.make_config("gemma2"), hidden_activation="gelu"), "gelu"),
        "attn_logit_softcapping": (dict(wr.make_config("gemma3_text"), attn_logit_softcapping=50.0), "50.0"),
        "use_bidirectional_attention": (dict(wr.make_config("gemma3_text"), use_bidirectional_attention=True), "true"),
        "layer_types": (dict(wr.make_config("qwen2"), layer_types=["full_attention"]), "full_attention"),
        "num_key_value_heads": (dict(wr.make_config("llama"), num_key_value_heads=3), "3"),
        "partial_rotary_factor": (dict(wr.make_config("qwen3"), partial_rotary_factor=0.5), "0.5"),
        "rope_scaling.factor": (dict(wr.make_config("llama"), rope_scaling={"rope_type": "linear"}), "linear"),
        "rope_scaling.long_factor": (dict(wr.make_config("phi3"), rope_scaling={"type": "longrope",
                                                                               "short_factor": [1.0] * 4}), "4"),
        "sliding_window": (dict(wr.make_config("gemma2"), sliding_window=None), "null"),
        "layer_types ": (dict(wr.make_config("mistral"), layer_types=["sliding_attention"] * 3), "sliding_attention"),
    }
    for key, (cfg, value) in cfgs.items():
        c.check(_raises(lambda: ref.parse_config(cfg, "DIR/config.json"), ValueError, "DIR/config.json", key.strip(),
                        value),
                f"config error names the file, {key} and {value}")
    m = ref.parse_config(wr.make_config("qwen3"))
    w = wr.random_tensors(m, 1)
    del w["model.layers.2.self_attn.k_norm.weight"]
    c.check(_raises(lambda: ref.check_tensors(m, w, "DIR/model.safetensors"), KeyError,
                    "model.layers.2.self_attn.k_norm.weight"), "missing tensor: KeyError naming it")
    w = wr.random_tensors(m, 1)
    w["model.layers.0.self_attn.q_norm.weight"] = np.ones(7)
    c.check(_raises(lambda: ref.check_tensors(m, w), ValueError, "q_norm", "[7]", "[16]"),
            "wrong tensor shape: ValueError naming tensor and both shapes")


def self_check(tmp, c):
    writer_and_layout(tmp, c)
    layer_types_and_masks(c)
    windows(tmp, c)
    identities(tmp, c)
    norms_and_caps(tmp, c)
    rope(tmp, c)
    errors(c)
    # Causal in every family: appending tokens leaves a prefix's logits.
    for fam in ref.FAMILIES:
        cfg, w = _model(tmp, "causal_" + fam, fam, seed=9)
        tokens = _toks(cfg["vocab_size"])
        c.check(_maxdiff(ref.forward(cfg, w, tokens)[:21], ref.forward(cfg, w, tokens[:21])) < 1e-10,
                f"{fam}: causal (a prefix's logits do not change when tokens follow)")

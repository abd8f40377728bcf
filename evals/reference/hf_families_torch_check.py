"""Cross-checks the numpy family reference (hf_families.py) against a second transcription of
transformers' modelling code, in torch float64, kept as close to the HF source as a page allows:
the RMSNorm classes, RotaryEmbedding.forward (cat(freqs, freqs), cos/sin times attention_scaling),
apply_rotary_pos_emb (with phi3's rotary_dim slicing), repeat_kv (expand + reshape),
eager_attention_forward (Gemma's softcap before the mask), the masks as masking_utils'
predicates (causal_mask_function, sliding_window_overlay), the decoder layers and the lm_head
with final soft-capping. Config semantics (which layers slide, rope parameters) come from
hf_families.parse_config, whose rules hf_families_selfcheck.py tests; this file checks the math.

Needs python3-torch (Debian); exits 77 (ctest: skipped) without it.
  /usr/bin/python3 evals/reference/hf_families_torch_check.py
"""
import os
import shutil
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_families as ref  # noqa: E402
import hf_families_test as cases  # noqa: E402
import hf_families_writer as wr  # noqa: E402
from llama_numpy import load_checkpoint  # noqa: E402

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("skipped: python3-torch is not installed")
    sys.exit(77)

TOLERANCE = 1e-10


class RMSNorm:  # LlamaRMSNorm / Qwen3RMSNorm (w * x_hat) and Gemma2RMSNorm (x_hat * (1 + w))
    def __init__(self, weight, eps, gemma):
        self.weight, self.eps, self.gemma = weight, eps, gemma

    def __call__(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.eps)
        return x * (1.0 + self.weight) if self.gemma else self.weight * x


def rotary_embedding(m, layer_type, position_ids):
    inv_freq, attention_scaling, long_inv = m.rope[layer_type]
    if long_inv is not None and int(position_ids.max()) + 1 > m.longrope_original:  # longrope_frequency_update
        inv_freq = long_inv
    inv_freq = torch.tensor(inv_freq, dtype=torch.float64)
    freqs = (inv_freq[None, :, None] @ position_ids[:, None, :].double()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos() * attention_scaling, emb.sin() * attention_scaling


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    rotary_dim = cos.shape[-1]
    q_rot, q_pass = q[..., :rotary_dim], q[..., rotary_dim:]
    k_rot, k_pass = k[..., :rotary_dim], k[..., rotary_dim:]
    q_embed = torch.cat([(q_rot * cos) + (rotate_half(q_rot) * sin), q_pass], dim=-1)
    k_embed = torch.cat([(k_rot * cos) + (rotate_half(k_rot) * sin), k_pass], dim=-1)
    return q_embed, k_embed


def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


def causal_mask(T, sliding_window):
    q_idx, kv_idx = torch.arange(T)[:, None], torch.arange(T)[None, :]
    allowed = kv_idx <= q_idx  # causal_mask_function
    if sliding_window is not None:
        allowed = allowed & (kv_idx > q_idx - sliding_window)  # sliding_window_overlay
    mask = torch.zeros(T, T, dtype=torch.float64)
    return mask.masked_fill(~allowed, torch.finfo(torch.float64).min)[None, None]


def eager_attention_forward(query, key, value, attention_mask, scaling, n_rep, softcap):
    key_states, value_states = repeat_kv(key, n_rep), repeat_kv(value, n_rep)
    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    if softcap is not None:
        attn_weights = torch.tanh(attn_weights / softcap) * softcap
    attn_weights = attn_weights + attention_mask[:, :, :, : key_states.shape[-2]]
    attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float64)
    return torch.matmul(attn_weights, value_states).transpose(1, 2).contiguous()


def act_fn(x, gemma):
    return F.gelu(x, approximate="tanh") if gemma else F.silu(x)


def torch_forward(cfg, w_np, tokens):
    m = ref.parse_config(cfg)
    w = {k: torch.tensor(v, dtype=torch.float64) for k, v in w_np.items()}
    gemma = m.norm_plus_one

    def linear(x, name, bias):
        return F.linear(x, w[name + ".weight"], w[name + ".bias"] if bias else None)

    def norm(name):
        return RMSNorm(w[name], m.eps, gemma)

    input_ids = torch.tensor([tokens])
    T = input_ids.shape[1]
    position_ids = torch.arange(T)[None]
    hidden_states = F.embedding(input_ids, w["model.embed_tokens.weight"])
    if gemma:  # normalizer = torch.tensor(hidden_size**0.5, dtype=hidden_states.dtype): see EMBED_SCALE_DTYPE
        hidden_states = hidden_states * torch.tensor(m.embed_scale, dtype=torch.float64)
    position_embeddings = {t: rotary_embedding(m, t, position_ids) for t in set(m.layer_types)}
    for i in range(m.layers):
        p = f"model.layers.{i}."
        residual = hidden_states
        hidden_states = norm(p + "input_layernorm.weight")(hidden_states)
        hidden_shape = (1, T, -1, m.head_dim)
        if m.fused:
            qkv = linear(hidden_states, p + "self_attn.qkv_proj", False)
            query_pos = m.heads * m.head_dim
            q = qkv[..., :query_pos]
            k = qkv[..., query_pos: query_pos + m.kv_heads * m.head_dim]
            v = qkv[..., query_pos + m.kv_heads * m.head_dim:]
        else:
            q, k, v = (linear(hidden_states, p + f"self_attn.{n}_proj", m.qkv_bias) for n in "qkv")
        q, k, v = (x.view(hidden_shape).transpose(1, 2) for x in (q, k, v))
        if m.qk_norm:
            q, k = norm(p + "self_attn.q_norm.weight")(q), norm(p + "self_attn.k_norm.weight")(k)
        cos, sin = position_embeddings[m.layer_types[i]]
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        attn = eager_attention_forward(q, k, v, causal_mask(T, m.windows[i]), m.scaling, m.heads // m.kv_heads,
                                       m.attn_softcap).reshape(1, T, -1)
        attn = linear(attn, p + "self_attn.o_proj", m.o_bias)
        if m.four_norms:
            attn = norm(p + "post_attention_layernorm.weight")(attn)
            hidden_states = residual + attn
            residual = hidden_states
            hidden_states = norm(p + "pre_feedforward_layernorm.weight")(hidden_states)
        else:
            hidden_states = residual + attn
            residual = hidden_states
            hidden_states = norm(p + "post_attention_layernorm.weight")(hidden_states)
        if m.fused:
            gate, up = linear(hidden_states, p + "mlp.gate_up_proj", False).chunk(2, dim=-1)
        else:
            gate = linear(hidden_states, p + "mlp.gate_proj", m.mlp_bias)
            up = linear(hidden_states, p + "mlp.up_proj", m.mlp_bias)
        hidden_states = linear(act_fn(gate, gemma) * up, p + "mlp.down_proj", m.mlp_bias)
        if m.four_norms:
            hidden_states = norm(p + "post_feedforward_layernorm.weight")(hidden_states)
        hidden_states = residual + hidden_states
    hidden_states = norm("model.norm.weight")(hidden_states)
    logits = F.linear(hidden_states, w["model.embed_tokens.weight" if m.tied else "lm_head.weight"])
    if m.final_softcap is not None:
        logits = torch.tanh(logits / m.final_softcap) * m.final_softcap
    return logits[0].numpy()


def main():
    tmp = tempfile.mkdtemp(prefix="kvlab_hf_torch_")
    failures = 0
    try:
        todo = {n: (f, kw, cases.NUM_TOKENS) for n, (f, kw) in cases.CASES.items()}
        todo["phi3_long_context"] = ("phi3", dict(seed=30, overrides=dict(sliding_window=None)), 70)
        for name, (family, kw, n) in todo.items():
            d = os.path.join(tmp, name)
            wr.write_checkpoint(family, d, **kw)
            cfg, w = load_checkpoint(d)
            tokens = cases.tokens_for(cfg["vocab_size"], n)
            a, b = ref.forward(cfg, w, tokens), torch_forward(cfg, w, tokens)
            diff = float(np.max(np.abs(a - b)) / np.max(np.abs(a)))
            ok = diff <= TOLERANCE
            failures += not ok
            print(f"{'ok  ' if ok else 'FAIL'}  {name} ({family}, {n} tokens): numpy vs torch max|diff|/max|ref| "
                  f"= {diff:.1e}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("all checks passed" if not failures else f"{failures} check(s) failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

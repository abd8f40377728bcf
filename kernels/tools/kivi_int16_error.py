#!/usr/bin/env python3
"""How far integer (int16) arithmetic in KIVI decode attention would move the
output, measured against the tolerance that core/cache/attention_encoded_test.cpp
holds every CPU path to (|o - o_dense| <= 1e-5 + 1e-4 |o_dense|).

Two candidate shortcuts for the CPU kernel (kernels/attention_kivi_cpu.cpp),
each applied alone on top of exact KIVI dequantisation:

  queries: scores from int16 queries. Per encoded block and query head the
           folded query q * s_k (key scales per channel) is rounded to int16
           against its largest magnitude, as an integer dot product with the
           codes (vpmaddwd) would need.
  weights: value sums from int16 weights. Per 32-row tile and value group the
           weights p * s_v (softmax probability times the token's value
           scale) are rounded to 0..32767 against their largest value.

The data follow the test: q, K, V standard normal; keys quantised per channel
over a block of G tokens, values per token in groups of G channels; the most
recent `residual` tokens unquantised; sequences of 300, 1,000 and 4,133
tokens; head_dim 64 and 128; G = 16 .. 128; 2 and 4 bits. Prints the worst
|error| / tolerance over every output element of every case (> 1 fails).

Run: /usr/bin/python3 kernels/tools/kivi_int16_error.py   (needs numpy)
"""
import numpy as np

CASES = [  # (head_dim, G, bits, tokens, residual)
    (64, 32, 2, 300, 24), (64, 32, 2, 1000, 24), (64, 16, 2, 1000, 24), (64, 64, 2, 1000, 24),
    (64, 32, 4, 1000, 24), (128, 128, 2, 550, 24), (128, 32, 2, 4133, 128), (128, 32, 4, 4133, 128),
]
TRIALS = 20


def quantise(x, axis, bits):
    """Asymmetric min/max quantisation of x along `axis`: codes, scale, zero."""
    lo, hi = x.min(axis=axis, keepdims=True), x.max(axis=axis, keepdims=True)
    scale = (hi - lo) / (2**bits - 1)
    scale[scale == 0] = 1.0
    codes = np.clip(np.round((x - lo) / scale), 0, 2**bits - 1)
    return codes, scale, lo


def one_case(rng, d, G, bits, T, residual):
    q, k, v = rng.standard_normal(d), rng.standard_normal((T, d)), rng.standard_normal((T, d))
    n_enc = max(0, (T - residual) // G * G)
    sm = 1.0 / np.sqrt(d)
    kd, vd = k.copy(), v.copy()
    kcodes, kscale, kzero = [], [], []
    vcodes = np.zeros((n_enc, d))
    vscale = np.zeros((n_enc, d // G))
    for b in range(n_enc // G):
        rows = slice(b * G, (b + 1) * G)
        c, s, z = quantise(k[rows], 0, bits)  # keys: per channel over the block
        kcodes.append(c), kscale.append(s[0]), kzero.append(z[0])
        kd[rows] = c * s + z
        for g in range(d // G):  # values: per token, groups of G channels
            cols = slice(g * G, (g + 1) * G)
            c, s, z = quantise(v[rows, cols], 1, bits)
            vcodes[rows, cols], vscale[rows, g] = c, s[:, 0]
            vd[rows, cols] = c * s + z

    def attend(scores, weight_fn=None):
        p = np.exp(scores - scores.max())
        l = p.sum()
        if weight_fn is None:
            return p @ vd / l
        return weight_fn(p) / l

    s_exact = kd @ q * sm
    o_exact = attend(s_exact)

    # int16 folded queries: score = sigma * (Q . code) + q . z on encoded rows.
    s_int = s_exact.copy()
    for b in range(n_enc // G):
        qk = q * kscale[b] * sm
        sigma = np.abs(qk).max() / 32767
        s_int[b * G:(b + 1) * G] = kcodes[b] @ np.round(qk / sigma) * sigma + (q * kzero[b]).sum() * sm
    o_queries = attend(s_int)

    # int16 weights: p * s_v rounded per 32-row tile and value group.
    mid = (2**bits - 1) / 2

    def int16_weights(p):
        out = p @ vd
        for t0 in range(0, n_enc, 32):
            rows = slice(t0, min(t0 + 32, n_enc))
            for g in range(d // G):
                cols = slice(g * G, (g + 1) * G)
                w = p[rows] * vscale[rows, g]
                mu = w.max() / 32767
                wq = np.round(w / mu) * mu if mu > 0 else w
                out[cols] += (wq - w) @ (vcodes[rows, cols] - mid)
        return out

    o_weights = attend(s_exact, int16_weights)
    tol = 1e-5 + 1e-4 * np.abs(o_exact)
    return np.max(np.abs(o_queries - o_exact) / tol), np.max(np.abs(o_weights - o_exact) / tol)


def main():
    rng = np.random.default_rng(1)
    worst_q = worst_w = 0.0
    for d, G, bits, T, residual in CASES:
        case_q = case_w = 0.0
        for _ in range(TRIALS):
            eq, ew = one_case(rng, d, G, bits, T, residual)
            case_q, case_w = max(case_q, eq), max(case_w, ew)
        print(f"d={d:3d} G={G:3d} bits={bits} tokens={T:4d}: int16 queries {case_q:7.3f}  int16 weights {case_w:7.3f}")
        worst_q, worst_w = max(worst_q, case_q), max(worst_w, case_w)
    print(f"worst error / tolerance over {len(CASES)} cases x {TRIALS} draws: "
          f"int16 queries {worst_q:.2f}, int16 weights {worst_w:.3f}")


if __name__ == "__main__":
    main()

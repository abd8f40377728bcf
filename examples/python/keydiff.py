"""KeyDiff in Python (Park et al. 2025, "KeyDiff: Key Similarity-Based KV
Cache Eviction for Long-Context LLM Inference", arXiv:2504.15364): keeps the
keys least similar (cosine) to the anchor, the mean of the stream's keys
scaled to unit length (kvpress's KeyDiffPress), plus the newest slot;
query-free. The same rule as the C++ `keydiff` (policies/keydiff.cpp), so
its kept slots and logits equal keydiff's (python/tests/test_policies.py).
Compared against the C++ keydiff, h2o and snapkv on tiny-gqa's held-out bits
per byte:

    PYTHONPATH=build/python /usr/bin/python3 examples/python/keydiff.py [TEXT_FILE]
"""
import os
import sys

import kvlab


class KeyDiffPy(kvlab.ScorerPolicy):
    """keeps the keys least similar to the mean unit key (KeyDiff, Python)"""
    paper = "Park et al. 2025, KeyDiff: Key Similarity-Based KV Cache Eviction"

    def score(self, keys, values, attention, positions, state):
        # keydiff's arithmetic: float64, norms clamped as torch's normalize and cosine_similarity do.
        k = keys.double()
        norm = k.pow(2).sum(dim=1).sqrt()
        anchor = (k / norm.clamp_min(1e-12).unsqueeze(1)).sum(dim=0) / k.shape[0]
        cos = (k * anchor).sum(dim=1) / (norm.clamp_min(1e-8) * anchor.pow(2).sum().sqrt().clamp_min(1e-8))
        return (-cos).float()


kvlab.register_policy("keydiff-py", KeyDiffPy)

if __name__ == "__main__":
    text = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "datasets/corpus/heldout.txt")
    budgets = [64, 128]
    config = {
        "name": "keydiff-python",
        "models": [os.path.abspath("datasets/models/tiny-gqa")],
        "tasks": ["bpb"],
        "lengths": [512],
        "task": {"bpb": {"text": text, "windows": 2, "prefill": 128}},
        "sweep": [{"policy": [{"name": n, "budget": budgets}]} for n in ("keydiff-py", "keydiff", "h2o", "snapkv")],
    }
    out = kvlab.run(config)
    df = kvlab.load_results(out)
    print(df[["stack", "bpb", "bpb_lo", "bpb_hi", "kl", "top1_agreement", "memory_ratio"]].to_string(index=False))

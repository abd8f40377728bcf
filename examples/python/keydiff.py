"""KeyDiff in Python (Park et al. 2025, "KeyDiff: Key Similarity-Based KV
Cache Eviction for Long-Context LLM Inference", arXiv:2504.15364): keeps the
keys least similar (cosine) to the stream's mean key, plus the recent slots;
query-free. Compared against h2o and snapkv on tiny-gqa's held-out bits per
byte:

    PYTHONPATH=build/python /usr/bin/python3 examples/python/keydiff.py [TEXT_FILE]
"""
import os
import sys

import kvlab


class KeyDiff(kvlab.ScorerPolicy):
    """keeps the keys least similar to the mean key (KeyDiff, Python)"""
    paper = "Park et al. 2025, KeyDiff: Key Similarity-Based KV Cache Eviction"

    def score(self, keys, values, attention, positions, state):
        anchor = keys.mean(dim=0, keepdim=True)
        return -kvlab_cosine(keys, anchor)


def kvlab_cosine(a, b):
    return (a * b).sum(dim=1) / (a.norm(dim=1) * b.norm(dim=1)).clamp_min(1e-12)


kvlab.register_policy("keydiff", KeyDiff)

if __name__ == "__main__":
    text = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "datasets/corpus/heldout.txt")
    budgets = [64, 128]
    config = {
        "name": "keydiff-python",
        "models": [os.path.abspath("datasets/models/tiny-gqa")],
        "tasks": ["bpb"],
        "lengths": [512],
        "task": {"bpb": {"text": text, "windows": 2, "prefill": 128}},
        "sweep": [{"policy": [{"name": n, "budget": budgets}]} for n in ("keydiff", "h2o", "snapkv")],
    }
    out = kvlab.run(config)
    df = kvlab.load_results(out)
    print(df[["stack", "bpb", "bpb_lo", "bpb_hi", "kl", "top1_agreement", "memory_ratio"]].to_string(index=False))

"""The Python path's cost: the median decode step with key-norm written in
Python (examples/python/key_norm_py.py) against the C++ key-norm, same budget,
same kept slots.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/step_cost.py [THREADS]
"""
import statistics
import sys

import kvlab
import key_norm_py  # noqa: F401

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 0
m = kvlab.Model("datasets/models/tiny-gqa", threads=threads)
prompt = m.encode("The KV cache of a decoder grows with every token it reads. " * 12)
for budget in (64, 256):
    row = []
    for name in ("key-norm", "key-norm-py", "full"):
        policy = name if name == "full" else f"{name}:budget={budget}"
        runs = [m.generate(prompt, policy=policy, max_new_tokens=64, stop_at_eos=False) for _ in range(3)]
        step = statistics.median(s for r in runs for s in r["decode_step_ms"])
        row.append(f"{name} {step:.3f} ms")
    print(f"prompt {len(prompt)} tokens, budget {budget}: " + ", ".join(row))

"""The Python path's cost: the median decode step with key-norm written in
Python (examples/python/key_norm_py.py) against the C++ key-norm and the
full cache, same budget, same kept slots.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/step_cost.py [MODEL [THREADS [PROMPT_TOKENS]]]

PROMPT_TOKENS defaults to 1,024.

MODEL is a preset or a model directory (default datasets/models/tiny-gqa);
a Llama 3.1 8B layer's shape is `kvlab init --model
examples/python/llama-3.1-8b-layer/config.json --dtype bf16 --out DIR`: one
layer of llama-3.1-8b's config.json with a vocab_size of 256, so that the
128,256-row output layer does not swamp the step. Once a stream is over its budget, every decode step
calls the scorer once per (layer, KV head): the per-call figure is the extra
step time over the C++ key-norm divided by layers x KV heads.
"""
import json
import os
import statistics
import sys

import kvlab
import key_norm_py  # noqa: F401

model = sys.argv[1] if len(sys.argv) > 1 else "datasets/models/tiny-gqa"
threads = int(sys.argv[2]) if len(sys.argv) > 2 else 0
prompt_tokens = int(sys.argv[3]) if len(sys.argv) > 3 else 1024
m = kvlab.Model(model, threads=threads)
try:
    prompt = m.encode("The KV cache of a decoder grows with every token it reads. " * 200)
except kvlab.Error:  # a checkpoint without a tokenizer (kvlab init): token ids spread over the vocabulary
    prompt = [(1 + 7919 * i) % 256 for i in range(prompt_tokens)]
prompt = prompt[:prompt_tokens]
streams = None
if os.path.isdir(model):
    with open(os.path.join(model, "config.json"), encoding="utf-8") as f:
        c = json.load(f)
    streams = c["num_hidden_layers"] * c.get("num_key_value_heads", c["num_attention_heads"])
print(f"model {model}, prompt {len(prompt)} tokens, 64 new tokens, median of 3 runs' decode steps"
      + (f", {streams} streams (layers x KV heads)" if streams else ""))
names = ("full", "key-norm", "key-norm-py")
for budget in (64, 256):
    steps = {name: [] for name in names}
    for _ in range(3):  # the three policies take turns, so a drift of the host's speed falls on each alike
        for name in names:
            policy = name if name == "full" else f"{name}:budget={budget}"
            steps[name] += m.generate(prompt, policy=policy, max_new_tokens=64, stop_at_eos=False)["decode_step_ms"]
    ms = {name: statistics.median(s) for name, s in steps.items()}
    extra = ms["key-norm-py"] - ms["key-norm"]
    line = (f"budget {budget}: full {ms['full']:.3f} ms/step, key-norm {ms['key-norm']:.3f}, "
            f"key-norm-py {ms['key-norm-py']:.3f} (+{extra:.3f} ms/step")
    if streams:
        line += f", {1000 * extra / streams:.1f} us per scorer call"
    print(line + ")")

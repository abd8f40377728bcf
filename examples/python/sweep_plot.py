"""A sweep from Python, plotted from its DataFrame: bits per byte against the
KV memory kept, one line per policy, with the 95% intervals.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/sweep_plot.py [TEXT_FILE]

Writes results/python-sweep/ and results/python-sweep/bpb_vs_memory.png.
"""
import os
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import kvlab  # noqa: E402

text = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "datasets/corpus/heldout.txt")
out = kvlab.run({
    "name": "python-sweep",
    "models": [os.path.abspath("datasets/models/tiny-gqa")],
    "tasks": ["bpb"],
    "lengths": [512],
    "task": {"bpb": {"text": text, "windows": 2, "prefill": 128}},
    "sweep": [{"policy": [{"name": "h2o", "ratio": [0.1, 0.2, 0.4]}]},
              {"policy": [{"name": "key-norm", "ratio": [0.1, 0.2, 0.4]}]}],
})
df = kvlab.load_results(out)
df = df[df["status"] == "ok"]
fig, ax = plt.subplots(figsize=(5, 3.5))
for policy, g in df.groupby("policy"):
    g = g.sort_values("memory_ratio")
    ax.errorbar(g["memory_ratio"], g["bpb"], yerr=[g["bpb"] - g["bpb_lo"], g["bpb_hi"] - g["bpb"]], marker="o",
                label=policy.split("(")[0])
ax.set_xlabel("KV memory kept (of full)")
ax.set_ylabel("held-out bits per byte")
ax.legend()
fig.tight_layout()
fig.savefig(os.path.join(out, "bpb_vs_memory.png"), dpi=120)
print(os.path.join(out, "bpb_vs_memory.png"))

"""The kvlab module: import, generate, logits, memory, policies, run and
load_results, and the errors of bad input."""
import glob
import os

import pytest
import torch

import kvlab

TINY = "datasets/models/tiny-gqa"


def test_import():
    assert kvlab.Model.__doc__ and kvlab.ScorerPolicy.__doc__ and kvlab.run.__doc__
    assert issubclass(kvlab.PolicyError, kvlab.Error)


def test_generate_cpp_policy():
    m = kvlab.Model(TINY)
    full = m.generate("The KV cache", max_new_tokens=8, stop_at_eos=False)
    assert len(full["tokens"]) == 8 and isinstance(full["text"], str)
    h2o = m.generate("The KV cache", policy={"name": "h2o", "budget": 16}, max_new_tokens=8, stop_at_eos=False)
    assert h2o["policy"].startswith("h2o")
    assert h2o["memory"]["bytes_in_use"] > 0
    ids = m.encode("The KV cache")
    assert m.generate(ids, max_new_tokens=8, stop_at_eos=False)["tokens"] == full["tokens"]


def test_logits_full_is_dense_shape():
    m = kvlab.Model(TINY)
    ids = m.encode("hello world, hello kv")
    lg = m.logits(ids)
    assert lg.shape == (len(ids), 259) and lg.dtype == torch.float32


def test_memory_and_policies():
    e = kvlab.memory(TINY, 4096, "kivi:bits=2")
    assert e["bytes_per_sequence"] < e["uncompressed_bytes"] and "report" in e
    names = {p["name"]: p for p in kvlab.policies()}
    assert "h2o" in names and any(q["name"] == "ratio" for q in names["h2o"]["params"])


def test_bad_policy_string():
    m = kvlab.Model(TINY)
    with pytest.raises(kvlab.Error, match="nosuch"):
        m.generate("x", policy="nosuch:ratio=0.2", max_new_tokens=2)
    with pytest.raises(kvlab.Error, match="ratio"):
        m.generate("x", policy="h2o:ratio=banana", max_new_tokens=2)


def test_load_results_committed():
    dirs = sorted(d for d in glob.glob("results/*/") if os.path.exists(os.path.join(d, "results.csv")))
    assert dirs
    df = kvlab.load_results(dirs[0])
    with open(os.path.join(dirs[0], "results.csv")) as f:
        header = f.readline().strip().split(",")
    assert list(df.columns) == header
    assert any(c.endswith("_lo") for c in df.columns) and len(df) > 0


def test_run_dict_and_resume(scratch, text_file):
    cfg = {
        "name": "pytest-sweep",
        "models": [os.path.abspath(TINY)],
        "tasks": ["bpb"],
        "lengths": [96],
        "task": {"bpb": {"text": text_file, "windows": 1, "prefill": 64}},
        "point": [{"policy": [{"name": "h2o", "budget": 48}]}],
    }
    out = os.path.join(scratch, "out")
    assert kvlab.run(cfg, out_dir=out, progress=False) == out
    df = kvlab.load_results(out)
    assert set(df["status"]) == {"ok"} and len(df) == 2
    kvlab.run(cfg, out_dir=out, progress=False)  # resumes: nothing new
    assert len(kvlab.load_results(out)) == 2

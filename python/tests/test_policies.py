"""Policies written in Python: key-norm re-implemented equals the C++ one bit
for bit, stacking with the other concerns, real memory, and clear errors."""
import pytest
import torch

import kvlab
import key_norm_py  # noqa: F401  (registers key-norm-py)
import keydiff  # noqa: F401  (registers keydiff-py)

TINY = "datasets/models/tiny-gqa"
PROMPT = ("The KV cache of a decoder grows with every token it reads, so long prompts need a policy "
          "that keeps what matters. ") * 3


def model():
    return kvlab.Model(TINY)


def test_generate_python_policy():
    out = model().generate(PROMPT, policy="key-norm-py:budget=32", max_new_tokens=8, stop_at_eos=False)
    assert len(out["tokens"]) == 8 and out["policy"].startswith("key-norm-py")


def test_key_norm_python_equals_cpp_bit_for_bit():
    m = model()
    ids = m.encode(PROMPT)
    for params in ("budget=32", "budget=48,recent=8", "ratio=0.3"):
        cpp, cpp_extra = m.logits(ids, "key-norm:" + params, return_kept=True)
        py, py_extra = m.logits(ids, "key-norm-py:" + params, return_kept=True)
        assert py_extra["kept"] == cpp_extra["kept"], params
        assert torch.equal(py, cpp), params
        assert py_extra["kept"][0][0] != list(range(len(ids)))  # it did evict
    a = m.generate(PROMPT, policy="key-norm:budget=32", max_new_tokens=12, stop_at_eos=False)
    b = m.generate(PROMPT, policy="key-norm-py:budget=32", max_new_tokens=12, stop_at_eos=False)
    assert a["tokens"] == b["tokens"] and a["memory"] == b["memory"]


def test_keydiff_python_equals_cpp():
    """examples/python/keydiff.py, KeyDiff in a few lines of Python, keeps
    the C++ keydiff's slots, so the logits are the same."""
    m = model()
    ids = m.encode(PROMPT)
    for params in ("budget=32", "ratio=0.3"):
        cpp, cpp_extra = m.logits(ids, "keydiff:" + params, return_kept=True)
        py, py_extra = m.logits(ids, "keydiff-py:" + params, return_kept=True)
        assert py_extra["kept"] == cpp_extra["kept"], params
        assert torch.equal(py, cpp), params
        assert py_extra["kept"][0][0] != list(range(len(ids)))  # it did evict


def test_per_layer_and_per_head():
    """A Python policy sees each stream's layer and KV head and may decide
    per head: here layer 0's heads keep their oldest slots and the others
    their newest, and the pools hold exactly what each head kept."""

    class OldestOnLayer0(kvlab.ScorerPolicy):
        """oldest slots on layer 0, newest elsewhere (test)"""

        def score(self, keys, values, attention, positions, state):
            order = positions.float()
            return -order if state["layer"] == 0 else order

    kvlab.register_policy("oldest-on-layer0", OldestOnLayer0)
    m = model()
    ids = m.encode(PROMPT)
    _, extra = m.logits(ids, "oldest-on-layer0:budget=32", return_kept=True)
    kept = extra["kept"]  # [layer][head] -> positions kept
    n = len(ids)
    for h, slots in enumerate(kept[0]):
        assert slots == list(range(31)) + [n - 1], h  # the 31 oldest, then the newest (recent = 1)
    for layer in kept[1:]:
        for slots in layer:
            assert slots == list(range(n - 32, n))


def test_stacked_with_kivi_and_offload():
    m = model()
    kivi = m.generate(PROMPT, policy="key-norm-py:budget=96+kivi:bits=2,residual=32", max_new_tokens=8,
                      stop_at_eos=False)
    assert "kivi" in kivi["policy"] and kivi["memory"]["encoded_blocks_in_use"] > 0
    alone = m.generate(PROMPT, policy="key-norm-py:budget=64", max_new_tokens=8, stop_at_eos=False)
    off = m.generate(PROMPT, policy=["key-norm-py:budget=64", {"name": "offload", "device_budget": 16384,
                                                               "keep_sinks": 0, "keep_recent": 16}],
                     max_new_tokens=8, stop_at_eos=False)
    assert "offload" in off["policy"] and off["memory"]["host_bytes"] > 0
    assert off["tokens"] == alone["tokens"]  # offload is lossless: the Python policy read the host tier's blocks


class Budget(kvlab.ScorerPolicy):
    """keeps the slots with the largest mean |value| (a test policy)"""
    default_budget = 40

    def score(self, keys, values, attention, positions, state):
        return values.abs().mean(dim=1)


kvlab.register_policy("py-budget", Budget)


def test_memory_is_real():
    m = model()
    _, extra = m.logits(m.encode(PROMPT), "py-budget", return_kept=True)
    mem = extra["memory"]
    block = 16
    blocks = sum(-(-len(h) // block) for layer in extra["kept"] for h in layer)
    assert all(len(h) == 40 for layer in extra["kept"] for h in layer)
    assert mem["blocks_in_use"] == blocks
    assert mem["bytes_in_use"] == blocks * mem["block_bytes"]


def make(name, **methods):
    cls = type(name, (kvlab.ScorerPolicy,), dict(methods, __doc__="a test policy"))
    kvlab.register_policy(name, cls)
    return name + ":budget=32"


def raises(policy, match):
    with pytest.raises(kvlab.PolicyError, match=match) as e:
        model().generate(PROMPT, policy=policy, max_new_tokens=4)
    return str(e.value)


def test_python_exception_is_one_clear_error():
    def score(self, keys, values, attention, positions, state):
        raise ValueError("my scorer broke")
    msg = raises(make("py-raises", score=score), "ValueError: my scorer broke")
    assert "py-raises" in msg and "layer 0" in msg


@pytest.mark.parametrize("result,match", [
    (lambda k: torch.zeros(k.shape[0] + 1), r"shape \[\d+\], not \[\d+\]"),
    (lambda k: torch.zeros(k.shape[0], dtype=torch.float64), "Double scores, not float32"),
    (lambda k: torch.full((k.shape[0],), float("nan")), "non-finite score"),
    (lambda k: [0.0] * k.shape[0], "returned a list, not a torch.Tensor"),
])
def test_bad_scores(result, match):
    name = "py-bad-%d" % abs(hash(match))
    msg = raises(make(name, score=lambda self, k, v, a, p, s: result(k)), match)
    assert name in msg


@pytest.mark.parametrize("slots,match", [
    (lambda n, b: [n + 3], "outside"),
    (lambda n, b: [0, 0], "twice"),
    (lambda n, b: list(range(b + 1)), "more than the budget"),
])
def test_bad_select(slots, match):
    name = "py-sel-%d" % abs(hash(match))
    raises(make(name, select=lambda self, k, v, a, p, s, b: slots(k.shape[0], b)), match)


def test_select_and_fold():
    def select(self, keys, values, attention, positions, state, budget):
        return list(range(keys.shape[0] - budget, keys.shape[0]))  # a window
    out = model().generate(PROMPT, policy=make("py-window", select=select), max_new_tokens=4, stop_at_eos=False)
    assert len(out["tokens"]) == 4

    def fold(self, step, score):
        return score * 0.5 + step
    def score(self, keys, values, attention, positions, state):
        return attention
    out = model().generate(PROMPT, policy=make("py-decay", fold=fold, score=score), max_new_tokens=4,
                           stop_at_eos=False)
    assert len(out["tokens"]) == 4


def test_failed_point_in_a_sweep(scratch, text_file):
    def score(self, keys, values, attention, positions, state):
        raise RuntimeError("sweep scorer broke")
    name = make("py-sweep-raises", score=score).split(":")[0]
    import os
    cfg = {"name": "pytest-fail", "models": [os.path.abspath(TINY)], "tasks": ["bpb"], "lengths": [96],
           "task": {"bpb": {"text": text_file, "windows": 1, "prefill": 64}},
           "point": [{"policy": [{"name": name, "budget": 32}]}]}
    out = kvlab.run(cfg, out_dir=os.path.join(scratch, "out"), progress=False)
    df = kvlab.load_results(out)
    failed = df[df["status"] != "ok"]
    assert len(failed) == 1 and "sweep scorer broke" in failed["error"].iloc[0]

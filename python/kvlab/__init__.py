"""kvlab from Python: the paged decode engine, its KV-cache policies and the
sweep harness, with policies written in Python.

    import kvlab
    m = kvlab.Model("datasets/models/tiny-gqa")
    out = m.generate("The KV cache", policy="h2o:budget=64", max_new_tokens=16)
    print(out["text"], out["memory"]["bytes_in_use"])

Errors of the C++ side raise kvlab.Error; a Python policy's error (an
exception in it, or a result it must not return) raises kvlab.PolicyError,
a subclass, naming the policy, the layer and what was wrong.
"""
import os

import torch  # before _kvlab: its tensors cross the boundary through libtorch_python

from . import _kvlab
from ._kvlab import Error, PolicyError

__all__ = ["Error", "PolicyError", "Model", "ScorerPolicy", "register_policy", "policies", "memory", "run",
           "load_results"]


def _policy_strings(policy):
    """A policy stack as the registry's strings: "h2o:ratio=0.2", "sink+kivi:bits=2",
    a list of such strings, or a list of dicts {"name": ..., param: value}."""
    if policy is None:
        return []
    if isinstance(policy, (str, dict)):
        policy = [policy]
    out = []
    for p in policy:
        if isinstance(p, str):
            out.extend(s.strip() for s in p.split("+") if s.strip())
        elif isinstance(p, dict):
            if "name" not in p:
                raise Error(f"policy {p!r}: no 'name'")
            params = ",".join(f"{k}={_param_text(v)}" for k, v in p.items() if k != "name")
            out.append(p["name"] + (":" + params if params else ""))
        else:
            raise Error(f"policy {p!r}: expected a string or a dict")
    return out


def _param_text(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


class Model:
    """A model: a preset name (random weights) or a Hugging Face model directory.

    Each generate / logits call runs its own engine, its cache sized for that
    call's tokens and policy stack. Options as `kvlab generate`'s: kv_dtype
    (bf16, f16, f32), block_size, threads (0: all cores), weight_seed (a
    preset's weights), max_step_tokens, prefill_chunk, run_blocks,
    allow_long_context.
    """

    def __init__(self, model, **options):
        self.path = os.fspath(model)
        self._m = _kvlab.Model(self.path, **options)

    @property
    def config(self):
        """The model's shape (layers, heads, head_dim, vocabulary) as a dict."""
        return self._m.config()

    def encode(self, text, add_bos=True):
        """Token ids of `text` by the model's tokenizer (BOS first)."""
        return self._m.encode(text, add_bos)

    def decode(self, ids):
        """Text of token ids (None without a tokenizer)."""
        return self._m.decode([int(i) for i in ids])

    def _ids(self, prompt):
        if isinstance(prompt, str):
            return self.encode(prompt)
        if isinstance(prompt, torch.Tensor):
            prompt = prompt.tolist()
        return [int(i) for i in prompt]

    def generate(self, prompt, policy="full", max_new_tokens=32, temperature=0.0, top_p=1.0, seed=0,
                 stop_at_eos=True):
        """Generates from `prompt` (text, or token ids) under the policy stack
        (a string such as "h2o:ratio=0.2" or "sink+kivi:bits=2", or a list of
        strings or of dicts {"name": "h2o", "ratio": 0.2}).

        Returns a dict: tokens (generated ids), text (None without a
        tokenizer), policy (the stack as resolved), prefill_ms,
        decode_step_ms, and memory (the cache's figures at the end, bytes_in_use
        among them, as `kvlab generate` reports them).
        """
        return self._m.generate(self._ids(prompt), _policy_strings(policy), int(max_new_tokens), float(temperature),
                                float(top_p), int(seed), bool(stop_at_eos))

    def logits(self, tokens, policy="full", return_kept=False):
        """Teacher-forced next-token logits, a float32 tensor [len(tokens), vocab],
        with the policy stack acting as the tokens go in (steps of
        max_step_tokens). With return_kept, also a dict: kept[layer][kv_head]
        (the positions each stream holds at the end) and memory."""
        return self._m.logits(self._ids(tokens), _policy_strings(policy), bool(return_kept))


def policies():
    """The policy registry, Python policies included: a list of dicts (name,
    summary, paper, concerns, params: name, type, default, help, valid)."""
    return _kvlab.policies()


def memory(model, tokens, policy="full", bits=16):
    """The KV memory calculator (`kvlab memory`): a dict of its figures for
    `model` (preset, directory or config.json) at `tokens` tokens; 'report'
    is the command's text."""
    return _kvlab.memory(os.fspath(model), int(tokens), _policy_strings(policy), int(bits))


class ScorerPolicy:
    """Base of a selection policy written in Python. Subclass it, implement
    score (or select), and register it with kvlab.register_policy(name, cls).

    A stream over its budget keeps its `recent` newest slots plus the
    highest-scoring others; the engine compacts the cache by that choice.

      score(keys, values, attention, positions, state) -> float32 tensor [n]
          keys, values: float32 [n, head_dim], the stream's slots (decoded
          where encoded; copies, so the cache is never changed through them);
          attention: float32 [n], the accumulated attention (None unless
          needs_attention or fold); positions: int64 [n]; state: dict with
          layer, kv_head, num_layers, seq_length, step_tokens, budget, recent.
          Higher keeps. One finite score per slot, on the CPU.
      select(keys, values, attention, positions, state, budget) -> slot ids
          Optional: replaces the top-k rule; at most `budget` distinct slots
          in [0, n).
      fold(step, score) -> float32 tensor [n]
          Optional: how one step's attention per slot joins the running
          statistic (default: the sum, H2O's).

    Class attributes: params (extra parameters: name -> default int, float,
    bool or str), default_budget (0: by ratio), default_ratio, default_recent,
    needs_attention, paper. An instance is made per run with every
    parameter as a keyword argument, kept in self.params.
    """

    params = {}
    default_budget = 0
    default_ratio = 0.5
    default_recent = 1
    needs_attention = False
    paper = ""

    def __init__(self, **params):
        self.params = params

    @classmethod
    def _defines(cls, method):
        return getattr(cls, method, None) is not getattr(ScorerPolicy, method, None)

    def score(self, keys, values, attention, positions, state):
        raise NotImplementedError(f"{type(self).__name__}.score")

    def select(self, keys, values, attention, positions, state, budget):
        raise NotImplementedError

    def fold(self, step, score):
        raise NotImplementedError


def register_policy(name, cls):
    """Registers `cls` (a ScorerPolicy subclass) as selection policy `name`,
    usable wherever a built-in one is: generate, logits, run's configs,
    stacked with the other concerns (kivi, quant, offload, gqa-reuse)."""
    if not (isinstance(cls, type) and issubclass(cls, ScorerPolicy)):
        raise Error(f"register_policy('{name}'): {cls!r} is not a kvlab.ScorerPolicy subclass")
    if not (cls._defines("score") or cls._defines("select")):
        raise Error(f"register_policy('{name}'): {cls.__name__} defines neither score nor select")
    _kvlab.register_policy(name, cls)


def _toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise Error(f"run: {v!r} is not a TOML value (str, int, float, bool or a list of them)")


def _toml(d, prefix=""):
    """A sweep config dict as TOML: values, tables (dicts) and arrays of tables (lists of dicts)."""
    lines, tables = [], []
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else k
        if isinstance(v, dict):
            tables.append(f"[{key}]\n" + _toml(v, key))
        elif isinstance(v, (list, tuple)) and v and all(isinstance(x, dict) for x in v):
            for x in v:
                tables.append(f"[[{key}]]\n" + _toml(x, key))
        else:
            lines.append(f"{k} = {_toml_value(v)}")
    return "\n".join(lines + [""] + tables) + "\n"


def run(config, out_dir="", sets=(), progress=True, retry_failed=False, dry_run=False, shard=0, num_shards=1):
    """Runs a sweep as `kvlab run` does: `config` is a TOML file's path or a
    dict of the same keys (models and other paths relative to the current
    directory; name defaults to "python"). Progress on stderr; results.jsonl,
    results.csv and summary.md in out_dir (default results/NAME); a rerun
    resumes past the points recorded. Ctrl-C stops it (the point in progress
    is not recorded). Returns the output directory."""
    if isinstance(config, dict):
        config = dict(config)
        config.setdefault("name", "python")
        path, text = os.path.join(os.getcwd(), config["name"] + ".toml"), _toml(config)
    else:
        path, text = os.fspath(config), ""
    report, out = _kvlab.run_sweep(path, text, list(sets), os.fspath(out_dir), bool(progress), bool(retry_failed),
                                   bool(dry_run), int(shard), int(num_shards))
    if text and not dry_run:
        with open(os.path.join(out, "config.toml"), "w") as f:
            f.write("# kvlab.run's config, from a dict\n" + text)
    if progress and report:
        print(report)
    return out


def load_results(directory):
    """A results directory's results.csv (`kvlab run`'s) as a pandas DataFrame,
    every column of the file, the confidence intervals (*_lo, *_hi) among them."""
    import pandas
    path = os.path.join(os.fspath(directory), "results.csv")
    if not os.path.exists(path):
        raise Error(f"load_results: no {path} (run the sweep first, or `kvlab merge` its shards)")
    return pandas.read_csv(path, keep_default_na=True)

#!/usr/bin/env python3
"""Writes the seed corpus of each fuzz target (corpus/NAME/) from the repo's own
configs, fixtures and test shapes: valid inputs and near-valid ones (one key
wrong, a torn record, a deep nesting), each a few KB at most. The committed
corpus is what this wrote; rerun it from the source root after changing it:

  python3 evals/fuzz/make_seeds.py
"""
import json
import os
import shutil
import struct

ROOT = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(ROOT))
MAX_BYTES = 6000


def out(target, name, data):
    d = os.path.join(ROOT, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    assert len(data) <= MAX_BYTES, (target, name, len(data))
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def copy(target, name, path, max_bytes=MAX_BYTES):
    with open(os.path.join(SRC, path), "rb") as f:
        data = f.read()
    if len(data) > max_bytes:  # whole lines only
        data = data[:max_bytes]
        data = data[: data.rfind(b"\n") + 1]
    out(target, name, data)


def safetensors(header, data=b"", pad=True):
    h = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def safetensors_seeds():
    t = "safetensors"
    f32 = struct.pack("<4f", 1, 2, 3, 4)
    out(t, "one-f32.safetensors", safetensors({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}, f32))
    out(t, "metadata-and-dtypes.safetensors", safetensors({
        "__metadata__": {"format": "pt", "step": "3"},
        "a": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 6]},
        "b": {"dtype": "F16", "shape": [1, 2], "data_offsets": [6, 10]},
        "c": {"dtype": "I8", "shape": [2], "data_offsets": [10, 12]},
        "d": {"dtype": "F32", "shape": [], "data_offsets": [12, 16]}}, bytes(range(16))))
    out(t, "zero-elements.safetensors", safetensors({"e": {"dtype": "F32", "shape": [0, 4], "data_offsets": [0, 0]}}))
    out(t, "offsets-past-end.safetensors", safetensors({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 32]}}, f32))
    out(t, "shape-size-mismatch.safetensors", safetensors({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}}, f32))
    out(t, "bad-dtype.safetensors", safetensors({"w": {"dtype": "Q4", "shape": [4], "data_offsets": [0, 16]}}, f32))
    out(t, "header-length-past-end.safetensors", struct.pack("<Q", 1 << 40) + b"{}")
    out(t, "deep-shape.safetensors", safetensors({"w": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]}}, f32[:4])
        .replace(b'"shape":[]', b'"shape":' + b"[" * 200 + b"]" * 200))
    # The reference reader's layout rule broken: overlap, gap, bytes past the end, a name twice.
    entry = lambda n, b, e: '"%s":{"dtype":"F32","shape":[%d],"data_offsets":[%d,%d]}' % (n, (e - b) // 4, b, e)
    raw = lambda text, data: struct.pack("<Q", len(text)) + text.encode() + data
    out(t, "overlap.safetensors", raw("{" + entry("a", 0, 16) + "," + entry("b", 8, 24) + "}", bytes(24)))
    out(t, "gap.safetensors", raw("{" + entry("a", 0, 8) + "," + entry("b", 16, 24) + "}", bytes(24)))
    out(t, "bytes-past-last-tensor.safetensors", safetensors({"w": {"dtype": "F32", "shape": [4],
                                                                    "data_offsets": [0, 16]}}, f32 + bytes(8)))
    out(t, "name-twice.safetensors", raw("{" + entry("w", 0, 16) + "," + entry("w", 0, 16) + "}", f32))
    # The first tensors of the committed tiny model's header, re-based onto data of their own.
    with open(os.path.join(SRC, "datasets/models/tiny-gqa/model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    names = [k for k in sorted(header) if k != "__metadata__"][:4]
    small = {"__metadata__": header.get("__metadata__", {"format": "pt"})}
    small.update({k: header[k] for k in names})
    out(t, "tiny-gqa-header-truncated-data.safetensors", safetensors(small, bytes(64)))


def model_config_seeds():
    t = "model_config"
    copy(t, "tiny-gqa.json", "datasets/models/tiny-gqa/config.json")
    copy(t, "qwen3-random.json", "evals/configs/qwen3-random/config.json")
    with open(os.path.join(SRC, "datasets/models/tiny-gqa/config.json")) as f:
        base = json.load(f)
    c = dict(base, model_type="gemma2", sliding_window=8, query_pre_attn_scalar=16, hidden_activation="gelu_pytorch_tanh")
    out(t, "gemma2.json", json.dumps(c))
    c = {"model_type": "gemma3", "text_config": dict(base, model_type="gemma3_text", sliding_window=8)}
    out(t, "gemma3-text-config.json", json.dumps(c))
    c = dict(base, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 64})
    out(t, "llama3-rope.json", json.dumps(c))
    c = dict(base, model_type="phi3", rope_scaling={"type": "longrope", "short_factor": [1.0] * 4,
                                                    "long_factor": [2.0] * 4})
    out(t, "phi3-longrope.json", json.dumps(c))
    out(t, "unknown-family.json", json.dumps({"model_type": "mamba", "num_hidden_layers": 2,
                                              "num_attention_heads": 4, "hidden_size": 64}))
    out(t, "missing-key.json", json.dumps({k: v for k, v in base.items() if k != "hidden_size"}))
    out(t, "huge-layers.json", json.dumps(dict(base, num_hidden_layers=3000000, eos_token_id=[2, 3])))
    out(t, "deep-value.json", json.dumps(dict(base, torch_dtype="X")).replace('"X"', "[" * 200 + "]" * 200))


def tokenizer_seeds():
    t = "tokenizer"
    byte_level = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [
            {"id": 9, "content": "<s>", "special": True, "normalized": False, "lstrip": False, "rstrip": False,
             "single_word": False},
            {"id": 10, "content": "</s>", "special": True, "normalized": False, "lstrip": False, "rstrip": False,
             "single_word": False}],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": " ?\\p{L}+|\\s+"}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": {"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                        {"SpecialToken": {"id": "</s>", "type_id": 0}}],
             "pair": [],
             "special_tokens": {"<s>": {"id": "<s>", "ids": [9], "tokens": ["<s>"]},
                                "</s>": {"id": "</s>", "ids": [10], "tokens": ["</s>"]}}}]},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {"h": 0, "e": 1, "l": 2, "o": 3, "\u0120": 4, "he": 5, "ll": 6, "hell": 7, "hello": 8},
                  "merges": ["h e", ["l", "l"], "he ll", "hell o"]}}
    out(t, "byte-level.json", json.dumps(byte_level))
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for i in range(256):
        vocab["<0x%02X>" % i] = 3 + i
    for w in ["\u2581", "a", "b", "\u2581a", "ab", "\u2581ab", "1", "2"]:
        vocab[w] = len(vocab)
    spm = {
        "version": "1.0",
        "added_tokens": [{"id": 0, "content": "<unk>", "special": True, "normalized": False, "lstrip": False,
                          "rstrip": False, "single_word": False},
                         {"id": 1, "content": "<s>", "special": True, "normalized": False, "lstrip": True,
                          "rstrip": True, "single_word": True}],
        "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                                           {"type": "Replace", "pattern": {"String": " "},
                                                            "content": "\u2581"},
                                                           {"type": "NFC"}]},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True},
                                                                {"type": "Metaspace", "replacement": "\u2581",
                                                                 "prepend_scheme": "first", "split": False}]},
        "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                                                    {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "\u2581"},
                                                      "content": " "},
                                                     {"type": "ByteFallback"}, {"type": "Fuse"},
                                                     {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "unk_token": "<unk>", "fuse_unk": True, "byte_fallback": True,
                  "ignore_merges": False, "vocab": vocab,
                  "merges": ["\u2581 a", "a b", "\u2581a b"]}}
    out(t, "sentencepiece-style.json", json.dumps(spm))
    ws = json.loads(json.dumps(byte_level))
    ws["pre_tokenizer"] = {"type": "WhitespaceSplit"}
    ws["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Strip", "left": True,
                                                                               "right": True}]}
    ws["post_processor"] = {"type": "RobertaProcessing", "sep": ["</s>", 10], "cls": ["<s>", 9]}
    ws["decoder"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always"}
    ws["model"]["ignore_merges"] = True
    out(t, "whitespace-nfkc.json", json.dumps(ws))
    bad = json.loads(json.dumps(byte_level))
    bad["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed"
    out(t, "bad-regex.json", json.dumps(bad))
    bad = json.loads(json.dumps(byte_level))
    bad["model"]["merges"].append("o h")
    out(t, "merge-not-in-vocab.json", json.dumps(bad))
    bad = json.loads(json.dumps(byte_level))
    bad["post_processor"]["processors"][1]["single"][0]["SpecialToken"]["id"] = "<x>"
    out(t, "template-unknown-token.json", json.dumps(bad))
    out(t, "deep-decoder.json", '{"decoder": ' + "[" * 200 + "]" * 200 + "}")
    bad = json.loads(json.dumps(byte_level))
    bad["model"]["vocab"]["ll"] = 2
    out(t, "vocab-id-twice.json", json.dumps(bad))
    bad = json.loads(json.dumps(byte_level))
    bad["added_tokens"][1]["id"] = 3
    out(t, "added-token-id-taken.json", json.dumps(bad))
    bad = json.loads(json.dumps(byte_level))
    bad["added_tokens"][1]["id"] = 1 << 40
    out(t, "added-token-id-out-of-range.json", json.dumps(bad))


def toml_seeds():
    for t, files in {
        "run_config": [],
        "serve_bench_config": ["evals/configs/serve/small-engine.toml", "evals/configs/serve/seed-70b-prefix.toml",
                               "evals/configs/serve/tiny-gqa-h2o.toml", "evals/configs/qwen3-random/serve.toml",
                               "evals/configs/serve/seed-70b-fp8.toml"],
        "train_config": ["datasets/models/tiny-gqa/train.toml", "datasets/models/tiny-recall/train.toml",
                         "evals/configs/train/throughput.toml", "datasets/models/tiny-gqa/train-brown70-stage3.toml",
                         "evals/int8-attention/train.toml"],
        "sweep_config": ["evals/configs/quickstart.toml", "evals/configs/ruler.toml", "evals/configs/papers/paging.toml",
                         "evals/configs/composition.toml", "evals/configs/retrieval.toml",
                         "evals/configs/papers/kivi.toml", "docs/examples/copy-check.toml"],
    }.items():
        for path in files:
            parts = path.split("/")
            copy(t, "-".join(parts[-2:]), path)
        out(t, "deep-array.toml", "x = " + "[" * 200 + "]" * 200 + "\n")
        out(t, "deep-tables.toml", "[" + ".".join("t%d" % i for i in range(200)) + "]\nx = 1\n")
    t = "run_config"
    out(t, "all-keys.toml", 'model = "small"\nprompt = "hello"\nmax_new_tokens = 8\nkv_dtype = "f16"\n'
        'block_size = 1\ntemperature = 0.7\ntop_p = 0.9\nseed = 3\ndevice = "cuda"\n[[policy]]\nname = "full"\n')
    out(t, "tokens.toml", "tokens = [1, 2, 3]\n")
    out(t, "stack.toml", 'model = "small"\nprompt = "hi"\n[[policy]]\nname = "sink"\nsink_tokens = 4\nwindow = 64\n'
        '[[policy]]\nname = "kivi"\nbits = 2\n')
    out(t, "huge-tokens.toml", 'model = "small"\nprompt = "x"\nmax_new_tokens = 9223372036854775807\n'
        'block_size = 4294967312\ntemperature = nan\n')
    out(t, "unknown-key.toml", 'model = "small"\nprompt = "x"\nmax_new_token = 8\n')


def records_seeds():
    t = "records"
    copy(t, "passkey-check.jsonl", "results/passkey-check/results.jsonl")
    copy(t, "int8-attention.jsonl", "results/int8-attention/results.jsonl")
    copy(t, "paper-paging.jsonl", "results/paper-paging/results.jsonl", 4000)
    copy(t, "model-card-kjv.jsonl", "results/model-card-kjv/results.jsonl", 4000)
    with open(os.path.join(SRC, "results/passkey-check/results.jsonl")) as f:
        lines = f.read().splitlines()
    first = json.loads(lines[0])
    out(t, "torn-last-line.jsonl", lines[0] + "\n" + lines[1][: len(lines[1]) // 2])
    out(t, "no-metrics.jsonl", json.dumps({k: v for k, v in first.items() if k != "metrics"}) + "\n")
    out(t, "wrong-types.jsonl", json.dumps(dict(first, metrics=[1, 2], index="x", baseline=3)) + "\n")
    out(t, "duplicate-keys.jsonl", lines[0] + "\n" + lines[0] + "\n")
    out(t, "deep-record.jsonl", '{"key": ' + "[" * 200 + "]" * 200 + "}\n")


def main():
    shutil.rmtree(os.path.join(ROOT, "corpus"), ignore_errors=True)
    safetensors_seeds()
    model_config_seeds()
    tokenizer_seeds()
    toml_seeds()
    records_seeds()


if __name__ == "__main__":
    main()

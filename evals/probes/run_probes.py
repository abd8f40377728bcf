#!/usr/bin/env python3
"""The probe table (evals/probes/probes.txt): hostile but fair input to every kvlab
command, one line each, and what kvlab must answer. Each row gives the exit status,
the words the answer must contain and kvlab's arguments. An exit status of 1 must
come with exactly one line on stderr that starts "kvlab: error:", holding every
word; no row may print a crash (std::terminate, a signal, a torch stack trace) or
run past the per-row time limit.

    python3 evals/probes/run_probes.py [-j N] build/kvlab [SUBSTRING...]

-j N: rows run N at a time (2). SUBSTRING: only the rows whose name contains one. The fixtures (a
tiny checkpoint from `kvlab init`, broken copies of it, tokenizers, chat
templates, results directories with links) are made in a scratch directory
under $TMPDIR, removed at exit, failed or not. Standard library only.
"""
import json
import os
import re
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
TABLE = os.path.join(HERE, "probes.txt")
ROW_TIMEOUT_S = 60
# Case-sensitive: serve-bench's report says "aborted" as a count.
CRASH_WORDS = ["terminate", "Segmentation", "Abort", "core dumped", "c10::"]


# ---- the table ----

class Row:
    def __init__(self, line_no, name, exit_code, words, args):
        self.line_no, self.name, self.exit_code, self.words, self.args = line_no, name, exit_code, words, args


def parse_table(path):
    """Rows of `name | exit | word; word | arguments`; '#' starts a comment line;
    `define NAME = TEXT` makes {NAME} stand for TEXT in the rows below it."""
    rows, names, defines = [], set(), {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            line = re.sub(r"\{([A-Z][A-Z0-9_]+)\}", lambda m: defines.get(m.group(1), m.group(0)), line)
            m = re.match(r"define ([A-Z][A-Z0-9_]+) = (.*)$", line)
            if m:
                defines[m.group(1)] = m.group(2)
                continue
            parts = line.split(" | ", 3)
            if len(parts) != 4 or not parts[1].strip().isdigit():
                raise SystemExit(f"{path}:{n}: expected 'name | exit | word; word | arguments', got: {line}")
            name = parts[0].strip()
            if name in names:
                raise SystemExit(f"{path}:{n}: a second row named '{name}'")
            names.add(name)
            words = [w.strip() for w in parts[2].split(";") if w.strip()]
            rows.append(Row(n, name, int(parts[1]), words, parts[3].strip()))
    return rows


def unescape(text):
    return re.sub(r"\\([nt\\])", lambda m: {"n": "\n", "t": "\t", "\\": "\\"}[m.group(1)], text)


def expand(text, scratch):
    """{T}: the scratch directory; {ok}: the good checkpoint; {C*N}: the character C N times."""
    text = re.sub(r"\{(.)\*(\d+)\}", lambda m: m.group(1) * int(m.group(2)), text)
    return text.replace("{ok}", os.path.join(scratch, "ok")).replace("{T}", scratch)


def write_inline_files(args, scratch, record):
    """Each {file:NAME:CONTENT} becomes the path {T}/files/NAME holding CONTENT (\\n, \\t and
    \\\\ unescaped, placeholders expanded); CONTENT may hold balanced braces."""
    out, i = [], 0
    while True:
        at = args.find("{file:", i)
        if at < 0:
            return "".join(out) + args[i:]
        depth, end = 0, at
        while end < len(args):
            depth += {"{": 1, "}": -1}.get(args[end], 0)
            if depth == 0:
                break
            end += 1
        if depth != 0:
            raise ValueError("a {file:NAME:CONTENT} without its closing brace")
        name, _, content = args[at + len("{file:"):end].partition(":")
        text = expand(unescape(content), scratch)
        record(name, text)
        write(os.path.join(scratch, "files", name), text)
        out.append(args[i:at] + "{T}/files/" + name)
        i = end + 1


# ---- the fixtures ----

def kvlab_ok(kvlab, *args):
    p = subprocess.run([kvlab, *args], capture_output=True, text=True, timeout=ROW_TIMEOUT_S)
    if p.returncode != 0:
        raise SystemExit(f"fixture: kvlab {' '.join(args)} exited {p.returncode}: {p.stderr}")


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)


def copy_of_ok(t, name, config_changes=None, link_weights=True):
    """DIR with ok's config.json (changed by config_changes) and its weights linked."""
    d = os.path.join(t, name)
    os.makedirs(d)
    with open(os.path.join(t, "ok", "config.json")) as f:
        config = json.load(f)
    config.update(config_changes or {})
    write(os.path.join(d, "config.json"), json.dumps(config, indent=1))
    if link_weights:
        os.symlink(os.path.join(t, "ok", "model.safetensors"), os.path.join(d, "model.safetensors"))
    return d


def safetensors_fixtures(t):
    """st/NAME: ok with one fault in model.safetensors."""
    with open(os.path.join(t, "ok", "model.safetensors"), "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header, data = json.loads(raw[8:8 + n]), raw[8 + n:]

    def variant(name, change=None, header_text=None, body=None, whole=None):
        d = copy_of_ok(t, "st/" + name, link_weights=False)
        if whole is None:
            h = json.loads(json.dumps(header))
            if change:
                change(h)
            text = header_text if header_text is not None else json.dumps(h).encode()
            whole = struct.pack("<Q", len(text)) + text + (data if body is None else body)
        write(os.path.join(d, "model.safetensors"), whole)

    norm, embed = "model.norm.weight", "model.embed_tokens.weight"
    variant("truncated", body=data[:-1000])
    variant("header-past-end", whole=struct.pack("<Q", 1 << 40) + raw[8:])
    variant("short", whole=b"\1\2\3")
    variant("bad-json", header_text=b'{"model.norm.weight": {"dtype": "F32",')
    variant("not-object", header_text=b"[1, 2, 3]")
    variant("deep", header_text=b'{"w":' + b"[" * 100000 + b"]" * 100000 + b"}")
    variant("dtype-i64", lambda h: h[norm].update(dtype="I64"))
    variant("shape-size", lambda h: h[norm].update(shape=[128]))
    variant("shape-negative", lambda h: h[norm].update(shape=[-256]))
    variant("shape-overflow", lambda h: h[norm].update(shape=[1 << 62, 4]))
    variant("offsets-reversed", lambda h: h[norm].update(data_offsets=h[norm]["data_offsets"][::-1]))
    variant("offsets-past-end", lambda h: h[norm].update(data_offsets=[len(data) + 16, len(data) + 16 + 1024]))
    variant("offsets-string", lambda h: h[norm].update(data_offsets="0-1024"))
    # The last tensor by offset, dropped with its bytes (the data still ends where a tensor ends).
    variant("missing-tensor", lambda h: h.pop(norm), body=data[:header[norm]["data_offsets"][0]])
    variant("overlap", lambda h: h[norm].update(data_offsets=[h[embed]["data_offsets"][0],
                                                              h[embed]["data_offsets"][0] + 1024]))
    variant("trailing", body=data + b"\0" * 4096)
    os.makedirs(os.path.join(copy_of_ok(t, "st/directory", link_weights=False), "model.safetensors"))
    write(os.path.join(copy_of_ok(t, "st/pickle", link_weights=False), "pytorch_model.bin"), "not a pickle\n")
    write(os.path.join(copy_of_ok(t, "spm"), "tokenizer.model"), "not a sentencepiece model\n")


def config_fixtures(t):
    """cj/NAME: ok's weights under a changed config.json."""
    for name, change in [("hidden-overflow", {"hidden_size": 1 << 62, "head_dim": 1 << 62}),
                         ("layers-3m", {"num_hidden_layers": 3000000}),
                         ("layers-negative", {"num_hidden_layers": -1}),
                         ("heads-zero", {"num_attention_heads": 0}),
                         ("kv-heads-3", {"num_key_value_heads": 3}),
                         ("hidden-string", {"hidden_size": "256"}),
                         ("hidden-float", {"hidden_size": 256.5}),
                         ("model-type-bert", {"model_type": "bert"}),
                         ("intermediate-512", {"intermediate_size": 512}),
                         ("positions-2048", {"max_position_embeddings": 2048})]:
        copy_of_ok(t, "cj/" + name, change)
    d = copy_of_ok(t, "cj/no-hidden")
    with open(os.path.join(d, "config.json")) as f:
        c = json.load(f)
    del c["hidden_size"]
    write(os.path.join(d, "config.json"), json.dumps(c))
    write(os.path.join(copy_of_ok(t, "cj/truncated-json"), "config.json"), '{"model_type": "llama",')
    write(os.path.join(copy_of_ok(t, "cj/deep"), "config.json"), '{"rope_scaling": ' + "[" * 100000 + "]" * 100000 + "}")
    os.makedirs(os.path.join(t, "cj", "no-config"))


def sharded_fixtures(t):
    """sh/NAME: ok's tensors behind a model.safetensors.index.json."""
    with open(os.path.join(t, "ok", "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        names = [k for k in json.loads(f.read(n)) if k != "__metadata__"]
    for name, shard in [("missing-shard", "part-1.safetensors"), ("dotdot", "../ok/model.safetensors"),
                        ("absolute", os.path.join(t, "ok", "model.safetensors"))]:
        d = copy_of_ok(t, "sh/" + name, link_weights=False)
        write(os.path.join(d, "model.safetensors.index.json"), json.dumps({"weight_map": {k: shard for k in names}}))
    d = copy_of_ok(t, "sh/no-map", link_weights=False)
    write(os.path.join(d, "model.safetensors.index.json"), '{"metadata": {}}')


# A byte-level BPE (core/tokenizer/hf_tokenizer_test.cpp's TinyByteLevel without its post-processor).
TOKENIZER = {
    "version": "1.0", "truncation": None, "padding": None,
    "added_tokens": [{"id": 9, "content": "<s>", "special": True, "normalized": False, "lstrip": False,
                      "rstrip": False, "single_word": False},
                     {"id": 10, "content": "</s>", "special": True, "normalized": False, "lstrip": False,
                      "rstrip": False, "single_word": False}],
    "normalizer": None,
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": " ?\\p{L}+|\\s+"}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
    "post_processor": None,
    "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
    "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
              "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
              "vocab": {"h": 0, "e": 1, "l": 2, "o": 3, "\u0120": 4, "he": 5, "ll": 6, "hell": 7, "hello": 8},
              "merges": ["h e", ["l", "l"], "he ll", "hell o"]},
}


def tokenizer_fixtures(t):
    """tk/NAME/tokenizer.json: the tiny BPE, good and with one fault each."""
    def variant(name, change=None, text=None):
        j = json.loads(json.dumps(TOKENIZER))
        if change:
            change(j)
        write(os.path.join(t, "tk", name, "tokenizer.json"), text if text is not None else json.dumps(j))

    model = lambda j: j["model"]  # noqa: E731
    variant("good")
    variant("malformed", text='{"model": {"type": "BPE",')
    variant("empty", text="")
    variant("not-object", text="[1, 2, 3]")
    variant("deep", text='{"decoder": ' + "[" * 100000 + "]" * 100000 + "}")
    variant("added-id-2p40", lambda j: j["added_tokens"][1].update(id=1 << 40))
    variant("added-empty", lambda j: j["added_tokens"][0].update(content=""))
    variant("added-not-list", lambda j: j.update(added_tokens={"<s>": 9}))
    variant("vocab-negative", lambda j: model(j)["vocab"].update(x=-1))
    variant("vocab-2p40", lambda j: model(j)["vocab"].update(x=1 << 40))
    variant("vocab-string-id", lambda j: model(j)["vocab"].update(x="7"))
    variant("vocab-list", lambda j: model(j).update(vocab=[1, 2]))
    variant("merge-unknown", lambda j: model(j)["merges"].append("q z"))
    variant("merge-one-token", lambda j: model(j)["merges"].append("h"))
    variant("unigram", lambda j: model(j).update(type="Unigram"))
    variant("regex", lambda j: j["pre_tokenizer"]["pretokenizers"][0]["pattern"].update(Regex="(unclosed"))
    variant("normalizer", lambda j: j.update(normalizer={"type": "NoSuch"}))
    variant("vocab-id-twice", lambda j: model(j)["vocab"].update(ll=5))
    variant("added-id-2p30", lambda j: j["added_tokens"][1].update(id=1 << 30))
    os.makedirs(os.path.join(t, "tk", "directory", "tokenizer.json"))
    os.makedirs(os.path.join(t, "tk", "none"))
    write(os.path.join(t, "tk", "bad-config", "tokenizer.json"), json.dumps(TOKENIZER))
    write(os.path.join(t, "tk", "bad-config", "tokenizer_config.json"), '{"bos_token": 5}')


def chat_fixtures(t):
    """ct/NAME: ok's weights with a chat template (chat_template.jinja)."""
    for name, template in [
            ("ok", "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>\n{{ m.content | trim }}\n{% endfor %}"
                   "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"),
            ("loop", "{% for i in range(1000000000) %}x{% endfor %}{{ messages[0].content }}"),
            ("recurse", "{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}"),
            ("multiply", '{{ "x" * 100000000000 }}'),
            ("nested", "{{ " + "(" * 1000 + "1" + ")" * 1000 + " }}"),
            ("syntax", "{% for m in messages %}{{ m.content }"),
            ("raise", '{{ raise_exception("Conversation roles must alternate") }}'),
            ("filter", "{{ messages | nosuchfilter }}"),
            ("undefined", "{{ nosuchvar.attr }}"),
            ("busy", "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}")]:
        d = copy_of_ok(t, "ct/" + name)
        write(os.path.join(d, "chat_template.jinja"), template)
        write(os.path.join(d, "tokenizer_config.json"), '{"bos_token": "<s>", "eos_token": "</s>"}')
    copy_of_ok(t, "ct/none")


def results_fixtures(t):
    """res/NAME: results directories (the committed export fixture's records), one fault each."""
    with open(os.path.join(SOURCE, "evals", "fixtures", "export", "results.jsonl"), encoding="utf-8") as f:
        lines = f.read().splitlines()

    def variant(name, first_line=None, change=None):
        records = list(lines)
        if change:
            r = json.loads(records[0])
            change(r)
            records[0] = json.dumps(r)
        if first_line is not None:
            records[0] = first_line
        write(os.path.join(t, "res", name, "results.jsonl"), "\n".join(records) + "\n")

    variant("good")
    variant("not-json", "{ not json")
    variant("array", "[1, 2]")
    variant("deep", "[" * 100000 + "]" * 100000)
    variant("key-number", change=lambda r: r.update(key=5))
    variant("status-number", change=lambda r: r.update(status=3))
    variant("model-dotdot", change=lambda r: r.update(model="../../x"))
    variant("key-not-key", change=lambda r: r.update(key="not a key"))
    variant("status-unknown", change=lambda r: r.update(status="maybe"))
    os.makedirs(os.path.join(t, "res", "empty"))
    write(os.path.join(t, "victim.txt"), "not kvlab's to write\n")
    for f in ["results.jsonl", "results.csv", "summary.md", "config.toml", ".kvlab.lock"]:
        d = os.path.join(t, "links", f.lstrip("."))
        shutil.copytree(os.path.join(t, "res", "good"), d)
        if os.path.exists(os.path.join(d, f)):
            os.remove(os.path.join(d, f))
        os.symlink(os.path.join(t, "victim.txt"), os.path.join(d, f))
    run = os.path.join(t, "links", "export-run", "kvlab_bpb__1024__tiny-gqa__no_press__0.00")
    os.makedirs(run)
    os.symlink(os.path.join(t, "victim.txt"), os.path.join(run, "metrics.json"))


def prepare(kvlab, t):
    kvlab_ok(kvlab, "init", "--model", "small", "--out", os.path.join(t, "ok"), "--seed", "3")
    text = ("the key value cache holds the keys and values of every token seen so far. " * 60)
    write(os.path.join(t, "text.txt"), text)
    write(os.path.join(t, "prompt.ids"), "256, 79 110\n99\n")
    write(os.path.join(t, "bad.ids"), "256, 79\n110 999\n")
    write(os.path.join(t, "long.ids"), ",".join(["65"] * 3001))
    write(os.path.join(t, "not-utf8.toml"), b"model = \"\xff\xfe\"\n")
    safetensors_fixtures(t)
    config_fixtures(t)
    sharded_fixtures(t)
    tokenizer_fixtures(t)
    chat_fixtures(t)
    results_fixtures(t)
    os.makedirs(os.path.join(t, "tmp"))


# ---- running a row ----

def row_argv(row, t, written):
    """kvlab's arguments of `row`, its inline files written (`written`: NAME -> TEXT, so
    that two rows may share a file only with the same text)."""
    def record(name, text):
        if written.setdefault(name, text) != text:
            raise ValueError(f"a second {{file:{name}:...}} with another text")
    return [expand(a, t) for a in shlex.split(write_inline_files(row.args, t, record))]


def check(row, argv, kvlab, t):
    """None when the row holds, else what went wrong."""
    words = [expand(w, t) for w in row.words]
    env = dict(os.environ, TMPDIR=os.path.join(t, "tmp"))
    try:
        p = subprocess.run([kvlab, *argv], cwd=t, env=env, capture_output=True, timeout=ROW_TIMEOUT_S,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return f"no answer within {ROW_TIMEOUT_S} s"
    out, err = p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
    shown = (err or out).strip()[:600]
    if p.returncode != row.exit_code:
        return f"exit {p.returncode} (want {row.exit_code}): {shown}"
    crash = [w for w in CRASH_WORDS if w in err]
    if crash:
        return f"crash words {crash}: {shown}"
    if row.exit_code == 1:
        n = sum(1 for line in err.splitlines() if line.startswith("kvlab: error:"))
        if n != 1:
            return f"{n} lines start 'kvlab: error:' (want 1): {shown}"
        where = err
    else:
        where = out + err
    missing = [w for w in words if w not in where]
    if missing:
        return f"missing {missing}: {shown}"
    return None


def timed_check(row, argv, kvlab, t):
    start = time.monotonic()
    problem = argv if isinstance(argv, str) else check(row, argv, kvlab, t)
    return problem, time.monotonic() - start


def main():
    args = sys.argv[1:]
    jobs = 2
    if args[:1] == ["-j"] and len(args) >= 2:
        jobs, args = int(args[1]), args[2:]
    if not args:
        raise SystemExit(__doc__)
    kvlab, only = os.path.abspath(args[0]), args[1:]
    rows = [r for r in parse_table(TABLE) if not only or any(s in r.name for s in only)]
    # SIGTERM (ctest's timeout) ends the run through the finally below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    scratch = tempfile.mkdtemp(prefix="kvlab_probes_")
    fails, start = 0, time.monotonic()
    try:
        prepare(kvlab, scratch)
        # Every inline file is written before any row runs: rows run `jobs` at a time.
        written, argvs = {}, []
        for row in rows:
            try:
                argvs.append(row_argv(row, scratch, written))
            except ValueError as e:
                argvs.append(f"{TABLE_NAME}:{row.line_no}: {e}")
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            results = pool.map(lambda ra: timed_check(ra[0], ra[1], kvlab, scratch), zip(rows, argvs))
            for row, (problem, took) in zip(rows, results):
                if problem:
                    fails += 1
                    print(f"FAIL  {row.name} ({TABLE_NAME}:{row.line_no}, {took:.1f} s): {problem}", flush=True)
                else:
                    print(f"ok    {row.name} ({took:.1f} s)", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"{len(rows) - fails} of {len(rows)} probes held, {fails} failed, in {time.monotonic() - start:.0f} s "
          f"({jobs} at a time)")
    return 1 if fails else 0


TABLE_NAME = os.path.relpath(TABLE, SOURCE)

if __name__ == "__main__":
    sys.exit(main())

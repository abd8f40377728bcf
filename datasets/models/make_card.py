"""Writes a model card (README.md) for a model trained by `kvlab train`, from
its own files (train.toml, trainer_state.json, loss.csv, config.json) and the
full-cache points of the sweeps that evaluate it (results/model-card/ and,
for the retrieval model, results/retrieval/), followed by the hand-written
notes.md beside it; then the loss curve (loss.png).

A recipe trained in stages has train.toml (stage 1) and train-stage2.toml,
train-stage3.toml, ... each starting from the checkpoint before it; the
earlier stages' records sit beside the final ones as stageN-state.json and
stageN-loss.csv, and the card sums steps, tokens and wall time over them.

  build/kvlab run evals/configs/model-card.toml
  build/kvlab run evals/configs/retrieval.toml
  /usr/bin/python3 datasets/models/make_card.py datasets/models/tiny-gqa
"""
import csv
import glob
import json
import os
import re
import subprocess
import sys
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))


def params(cfg):
    D, I, L, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    d = cfg.get("head_dim") or D // cfg["num_attention_heads"]
    attn = D * d * (2 * cfg["num_attention_heads"] + 2 * cfg["num_key_value_heads"])
    per_layer = attn + 3 * D * I + 2 * D
    emb = V * D * (1 if cfg.get("tie_word_embeddings", False) else 2)
    return L * per_layer + emb + D


# The sweeps whose full-cache points fill a card, first found wins
# (ruler-check: RULER's tasks, for a model trained on them).
SWEEPS = ("model-card", "retrieval", "ruler-check")
# Held-out bits per byte on each held-out text alone (bpb only).
TEXT_SWEEPS = (("model-card-kjv", "King James (7 held-out books)"),
               ("model-card-brown", "Brown Corpus (50 held-out documents)"))
# The language target of the tiny models: held-out bits per byte at most this.
BPB_BAR = 2.0


def sweep_windows(sweep):
    """The bpb task's window count in evals/configs/SWEEP.toml."""
    with open(os.path.join(ROOT, "evals", "configs", sweep + ".toml"), "rb") as f:
        return tomllib.load(f).get("task", {}).get("bpb", {}).get("windows", "?")


def records(name, sweeps=SWEEPS):
    """(task, length) -> record of the full cache, and the sweeps used."""
    out, used = {}, []
    for sweep in sweeps:
        path = os.path.join(ROOT, "results", sweep, "results.jsonl")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                if r.get("model") != name or r.get("status") != "ok" or r.get("stack") != "full":
                    continue
                if (r["task"], r["length"]) not in out:
                    out[(r["task"], r["length"])] = r
                    if sweep not in used:
                        used.append(sweep)
    return out, used


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    mdir = os.path.normpath(argv[1])
    name = os.path.basename(mdir)
    later = sorted(glob.glob(os.path.join(mdir, "train-stage[0-9]*.toml")),
                   key=lambda p: int(re.search(r"train-stage(\d+)\.toml$", p).group(1)))
    tomls = [os.path.join(mdir, "train.toml")] + later
    try:
        cfg = json.load(open(os.path.join(mdir, "config.json")))
        stages = []  # (config path, parsed config, trainer state) in training order
        for i, path in enumerate(tomls, start=1):
            last_stage = i == len(tomls)
            state_path = os.path.join(mdir, "trainer_state.json" if last_stage else f"stage{i}-state.json")
            try:
                train_toml = tomllib.loads(open(path).read())
            except tomllib.TOMLDecodeError as e:
                print(f"make_card: {path}: {e}", file=sys.stderr)
                return 1
            stages.append((path, train_toml, json.load(open(state_path))))
        rows = list(csv.DictReader(open(os.path.join(mdir, "loss.csv"))))
    except OSError as e:
        print(f"make_card: {e}", file=sys.stderr)
        return 1
    recs, used = records(name)
    train_cfg = stages[-1][1]
    phases = [ph for _, c, _ in stages for ph in c.get("phase", [])]
    text_mix = any(ph.get("text", 1.0) > 0 for ph in phases)
    heldout = [(int(r["step"]), float(r["heldout_bpb"])) for r in rows if float(r["heldout_bpb"]) >= 0]
    elapsed = sum(st["elapsed_seconds"] for _, _, st in stages)
    tokens = sum(st["tokens"] for _, _, st in stages)
    state = {"step": sum(st["step"] for _, _, st in stages),
             "total_steps": sum(st["total_steps"] for _, _, st in stages)}
    size = os.path.getsize(os.path.join(mdir, "model.safetensors"))
    out = []
    w = out.append
    w(f"# {name}\n")
    ruler_tasks = sorted({t for ph in phases if ph.get("ruler", 0) > 0 for t in ph.get("ruler_tasks", [])})
    if text_mix:
        w(f"A byte-level Llama-family model trained by kvlab on this repository's corpora "
          f"(King James Bible + Brown Corpus, datasets/README.md), for the testbed's accuracy measurements.\n")
    elif ruler_tasks:
        w("A byte-level Llama-family retrieval model trained by kvlab on RULER's synthetic tasks ("
          + ", ".join(ruler_tasks) + "; datasets/tasks/ruler.h, RULER's own templates) with kvlab's passkey tasks "
          "beside them, no corpus text: the model the testbed's RULER measurements run on. It is not a language "
          "model.\n")
    else:
        w("A byte-level Llama-family retrieval model trained by kvlab on the synthetic long-context tasks only "
          "(copy, passkey, multi-needle, associative recall; datasets/tasks/tasks.h), no corpus text: the model the "
          "testbed's retrieval measurements run on. It is not a language model.\n")
    w("| | |\n|---|---|")
    w(f"| shape | {cfg['num_hidden_layers']} layers x {cfg['hidden_size']}, {cfg['num_attention_heads']} query heads, "
      f"{cfg['num_key_value_heads']} KV heads (H_q/H_kv = {cfg['num_attention_heads'] // cfg['num_key_value_heads']}), "
      f"head dim {cfg.get('head_dim') or cfg['hidden_size'] // cfg['num_attention_heads']}, MLP {cfg['intermediate_size']}, "
      f"tied embeddings, RoPE theta {cfg['rope_theta']:g} |")
    w(f"| parameters | {params(cfg):,} |")
    w(f"| checkpoint | model.safetensors, fp32, {size / 1e6:.1f} MB |")
    w(f"| vocabulary | 259: bytes 0-255, BOS 256, EOS 257, PAD 258 |")
    last = phases[-1]["seq_len"] if phases else cfg["max_position_embeddings"]
    longest = max((ph["seq_len"] for ph in phases), default=last)
    ctx = f"{last:,} tokens (last phase)"
    if longest > last:
        ctx += f"; longest phase {longest:,}"
    w(f"| trained context | {ctx} |")
    if len(stages) > 1:
        w(f"| stages | {len(stages)}, each from the checkpoint before it: "
          + "; ".join(f"{st['step']:,} steps, {st['tokens'] / 1e6:.2f}M tokens, {st['elapsed_seconds'] / 60:.0f} min"
                      for _, _, st in stages) + " |")
    if stages[0][1].get("init"):
        w(f"| initialised from | {stages[0][1]['init']} (relative to train.toml: its `init`) |")
    w(f"| steps | {state['step']:,} of {state['total_steps']:,} |")
    w(f"| tokens | {tokens:,} |")
    w(f"| wall time | {elapsed / 3600:.2f} h ({elapsed / 60:.0f} min) |")
    w(f"| tokens/s | {tokens / elapsed:,.0f} (mean over the run) |")
    if heldout:
        tr = train_cfg.get("train", {})
        text = os.path.basename(train_cfg.get("data", {}).get("heldout", "held-out text"))
        at = f"step {heldout[-1][0]}" + (f" of stage {len(stages)}" if len(stages) > 1 else "")
        w(f"| held-out bits per byte (trainer: first {tr.get('eval_tokens', 65536) // 1024}K bytes of {text}, "
          f"windows of {tr.get('eval_seq_len', 0) or last}, fp32) | {heldout[-1][1]:.3f} at {at} |")
    w("")
    w("## How it was trained\n")
    for path, _, _ in stages:
        w("    build/kvlab train " + os.path.relpath(path, ROOT))
    w("")
    if len(stages) == 1:
        w("The config (phases, data mix, schedule) is train.toml beside this card; the log of the run is train.log "
          "and the loss per step loss.csv. Training resumes from its last checkpoint when the command is run again.\n")
    else:
        w(f"The recipe has {len(stages)} stages, run in this order, each starting from the checkpoint the one before "
          "wrote (its `init`): the configs are beside this card; the last stage's log and loss per step are "
          "train.log and loss.csv, the earlier stages' stageN-train.log, stageN-loss.csv and stageN-state.json. "
          "Each command resumes from its last checkpoint when run again. "
          f"`bash datasets/models/reproduce.sh {name}` runs all of them into a scratch directory and compares "
          "the final weights with the committed ones.\n")
    w("![loss curve](loss.png)\n")
    w("## Evaluation (full cache)\n")
    for sweep in used or ["model-card"]:
        w(f"    build/kvlab run evals/configs/{sweep}.toml")
    w(f"    /usr/bin/python3 datasets/models/make_card.py {os.path.relpath(mdir, ROOT)}\n")
    if not recs:
        w(f"(no full-cache records for {name} under results/ yet)\n")
    else:
        lengths = sorted({k[1] for k in recs})
        w("| task | " + " | ".join(f"L = {L}" for L in lengths) + " |")
        w("|---|" + "---|" * len(lengths))
        for task, key, fmt in (("bpb", "bpb", "{:.3f}"), ("passkey", "accuracy", "{:.2f}"),
                               ("multi-needle", "accuracy", "{:.2f}"), ("recall", "accuracy", "{:.2f}")):
            if not any((task, L) in recs for L in lengths):
                continue
            cells = []
            for L in lengths:
                r = recs.get((task, L))
                cells.append(fmt.format(r["metrics"][key]) if r else "–")
            label = (f"held-out bits per byte (heldout.txt, KJV + Brown, {sweep_windows('model-card')} random windows)"
                     if task == "bpb" else f"{task} accuracy")
            w(f"| {label} | " + " | ".join(cells) + " |")
        for task in sorted({k[0] for k in recs if k[0].startswith(("niah_", "vt", "cwe", "fwe"))}):
            cells = []
            for L in lengths:
                r = recs.get((task, L))
                cells.append(f"{r['metrics']['score']:.1f} (n={r['metrics']['samples']})" if r else "–")
            w(f"| RULER {task} score (%) | " + " | ".join(cells) + " |")
        w("")
    if recs and any(k[0] == "passkey" for k in recs):
        w("Passkey accuracy by depth (rows) and length (columns):\n")
        depths = []
        for L in lengths:
            r = recs.get(("passkey", L))
            if r:
                for d in r["metrics"]["accuracy_by_depth"]:
                    if d not in depths:
                        depths.append(d)
        w("| depth | " + " | ".join(str(L) for L in lengths) + " |")
        w("|---|" + "---|" * len(lengths))
        for d in depths:
            cells = []
            for L in lengths:
                r = recs.get(("passkey", L))
                cells.append(f"{r['metrics']['accuracy_by_depth'].get(d, float('nan')):.2f}" if r else "–")
            w(f"| {d} | " + " | ".join(cells) + " |")
        w("")
        chance = {"passkey": "1e-5 (5 digits)", "multi-needle": "1e-5", "recall": "0.1 (one digit)"}
        w("Chance levels: " + "; ".join(f"{k} {v}" for k, v in chance.items()) + ".\n")
    text_rows = []
    for sweep, label in TEXT_SWEEPS:
        trecs, _ = records(name, (sweep,))
        if any(k[0] == "bpb" for k in trecs):
            text_rows.append((sweep, label, {k[1]: r["metrics"]["bpb"] for k, r in trecs.items() if k[0] == "bpb"}))
    if text_rows:
        counts = sorted({sweep_windows(sweep) for sweep, _, _ in text_rows})
        w("Held-out bits per byte on each held-out text alone (full cache, bf16 paged cache, "
          f"{' / '.join(str(c) for c in counts)} random windows a length):\n")
        for sweep, _, _ in text_rows:
            w(f"    build/kvlab run evals/configs/{sweep}.toml")
        w("")
        lengths = sorted({L for _, _, v in text_rows for L in v})
        w("| held-out text | " + " | ".join(f"L = {L}" for L in lengths) + " |")
        w("|---|" + "---|" * len(lengths))
        for _, label, v in text_rows:
            w(f"| {label} | " + " | ".join(f"{v[L]:.3f}" if L in v else "–" for L in lengths) + " |")
        worst = max(x for _, _, v in text_rows for x in v.values())
        verdict = "met" if worst <= BPB_BAR else "not met"
        w(f"\nAgainst the bar of {BPB_BAR:.1f} bits per byte on held-out text: {verdict} "
          f"(worst cell {worst:.3f}).\n")
    notes = os.path.join(mdir, "notes.md")
    if os.path.exists(notes):
        out.append(open(notes).read())
    open(os.path.join(mdir, "README.md"), "w").write("\n".join(out) + "\n")
    subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "datasets", "plot_loss.py"), mdir], check=False)
    print(f"wrote {os.path.join(mdir, 'README.md')} (figures from the files above; notes.md appended)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

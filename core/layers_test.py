"""The include arrows between kvlab's rooms, checked over every source file.

The rooms, lowest first; a file may include headers of its own room and of the
rooms below it, never of a room above (docs/design.md draws the map). A
project include that names no room is an error too, so a new folder must be
placed here before it is used.

  python3 core/layers_test.py            # from the source root; exit 1 on a violation
"""
import os
import re
import sys

# Lowest first. The arrows are written once, here.
ROOMS = [
    "core/base",    # dtype, Status: the vocabulary everyone shares
    "kernels",      # attention and cache kernels (CPU, CUDA, reference)
    "policies",     # the KVPolicy interface, the registry, one file per policy
    "core/cache",   # block pools, KV cache streams, prefix cache, offload tiers
    "core/attention",  # the attention backends (CPU, reference, CUDA) behind the model
    "core/model",   # configs, loaders, the model, memory calculator
    # Above core/model: LoadTokenizer takes a model's config and knows its presets.
    "core/tokenizer",  # tokenizers, token-id files, the Jinja subset, chat templates
    "core/engine",  # the engine, run configs, sampling
    "core/serve",   # scheduler, workload, executors, serve-bench
    "datasets",     # synthetic task generators, the trainer
    "evals",        # the CLI, the sweep harness
    "python",       # the kvlab Python module (pybind11) and Python policies
]
SOURCE_EXT = (".h", ".hpp", ".cc", ".cpp", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def room_of(path):
    """Index of the room a repository path belongs to, or None."""
    best = None
    for i, r in enumerate(ROOMS):
        if path == r or path.startswith(r + "/"):
            if best is None or len(ROOMS[best]) < len(r):
                best = i
    return best


def check(root):
    errors = []
    for top in ("core", "kernels", "policies", "datasets", "evals", "python"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in files:
                if not name.endswith(SOURCE_EXT):
                    continue
                path = os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")
                own = room_of(path)
                if own is None:
                    errors.append(f"{path}: in no room (add its folder to ROOMS in core/layers_test.py)")
                    continue
                with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
                    text = f.read()
                for inc in INCLUDE.findall(text):
                    if "/" not in inc:
                        continue  # a file beside it, or a system-style local header
                    target = room_of(inc)
                    if target is None:
                        if os.path.exists(os.path.join(root, inc)):
                            errors.append(f"{path}: includes {inc}, which is in no room")
                        continue  # a third-party header with a path (CLI/CLI.hpp, toml++/toml.h)
                    if target > own:
                        errors.append(f"{path} ({ROOMS[own]}) includes {inc} ({ROOMS[target]}), a room above it")
    return errors


def self_test():
    """The checker itself: an upward include must be reported."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        for p, text in {"kernels/a.h": '#include "core/engine/engine.h"\n',
                        "core/engine/engine.h": '#include "kernels/a.h"\n',
                        "core/stray.h": ""}.items():
            os.makedirs(os.path.join(d, os.path.dirname(p)), exist_ok=True)
            with open(os.path.join(d, p), "w") as f:
                f.write(text)
        errs = check(d)
        assert any("kernels/a.h (kernels) includes core/engine/engine.h" in e for e in errs), errs
        assert any("core/stray.h: in no room" in e for e in errs), errs
        assert not any(e.startswith("core/engine/engine.h") for e in errs), errs


if __name__ == "__main__":
    self_test()
    errs = check(os.getcwd())
    for e in errs:
        print("layers: " + e)
    print(f"layers: {len(errs)} upward or unplaced includes")
    sys.exit(1 if errs else 0)

"""Source files over 600 lines and functions over 120 lines, each of which must
have a one-line reason in docs/design.md's "Size exceptions" list.

A function is found the simple way: a line at column 0 that ends in "{" and is
a signature (or a TEST), up to the next "}" at column 0, which is how the
project's code is formatted. Exceptions are written as
  - `path` (N lines): reason          for a file
  - `path:Name` (N lines): reason     for a function (Name as it is defined)
  python3 core/sizes_test.py          # from the source root; exit 1 on an unlisted one
"""
import os
import re
import sys

MAX_FILE, MAX_FUNC = 600, 120
ROOTS = ("core", "kernels", "policies", "datasets", "evals")
CODE = (".h", ".cpp", ".cu", ".cuh")
NOT_FUNC = ("namespace", "struct", "class", "enum", "union", "extern", "template", "#", "//", " ", "\t")


def function_name(signature):
    signature = re.sub(r"__launch_bounds__\([^)]*\)", "", signature)
    m = re.search(r"([A-Za-z_][\w:~]*)\s*\(", signature)
    return m.group(1) if m else signature


def scan(root):
    found = []  # (kind, key, lines)
    for top in ROOTS:
        for d, _, files in os.walk(os.path.join(root, top)):
            if "node_modules" in d:
                continue
            for f in files:
                if not f.endswith(CODE + (".py", ".sh", ".mjs")):
                    continue
                rel = os.path.relpath(os.path.join(d, f), root).replace(os.sep, "/")
                lines = open(os.path.join(root, rel), errors="replace").read().split("\n")
                if len(lines) > MAX_FILE:
                    found.append(("file", rel, len(lines)))
                if not f.endswith(CODE):
                    continue
                i = 0
                while i < len(lines):
                    line = lines[i]
                    test = re.match(r"^(TEST|TEST_F|TEST_P)\((\w+),\s*(\w+)", line)
                    head = " ".join(lines[max(0, i - 3):i + 1])
                    if test or (line.endswith("{") and not line.startswith(NOT_FUNC) and "(" in head):
                        j = i + 1
                        while j < len(lines) and not lines[j].startswith("}"):
                            j += 1
                        if j - i + 1 > MAX_FUNC:
                            name = f"{test.group(2)}.{test.group(3)}" if test else function_name(line)
                            found.append(("function", f"{rel}:{name}", j - i + 1))
                        i = j
                    i += 1
    return found


def listed(root):
    text = open(os.path.join(root, "docs", "design.md")).read()
    section = text.split("## Size exceptions", 1)
    if len(section) < 2:
        return set()
    body = section[1].split("\n## ", 1)[0]
    return set(re.findall(r"^- `([^`]+)` \(\d+ lines\): \S", body, re.M))


if __name__ == "__main__":
    root = os.getcwd()
    ok = listed(root)
    missing = [(k, key, n) for k, key, n in scan(root) if key not in ok]
    for kind, key, n in missing:
        print(f"sizes: {kind} {key} has {n} lines; split it or give a reason in docs/design.md (Size exceptions)")
    print(f"sizes: {len(missing)} unlisted")
    sys.exit(1 if missing else 0)

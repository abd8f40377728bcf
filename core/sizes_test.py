"""Source files over 600 lines and functions over 120 lines, each of which must
have a one-line reason in docs/design.md's "Size exceptions" list.

A function is found the simple way, which is how the project's code is
formatted: a signature (or a TEST) that starts at column 0, perhaps wrapped
over indented continuation lines, up to the line that ends in "{", then the
body up to the next "}" at column 0. Its size counts from the signature's first
line to that "}". A signature has balanced parentheses when its "{" is reached
and no "=" before its first "(" (other than in an operator's name), so a lambda
passed to a macro or assigned at namespace scope is not a function; overloads
of one name in one file count as the largest. Exceptions are written as
  - `path` (N lines): reason          for a file
  - `path:Name` (N lines): reason     for a function (Name as it is defined)
and N must be the real count; an entry that names nothing over the limit is
stale and fails too.
  python3 core/sizes_test.py              # from the source root; exit 1 on a fault
  python3 core/sizes_test.py --self-test  # checks the scanner on made-up sources
"""
import os
import re
import sys
import tempfile

MAX_FILE, MAX_FUNC = 600, 120
ROOTS = ("core", "kernels", "policies", "datasets", "evals")
CODE = (".h", ".cpp", ".cu", ".cuh")
NOT_FUNC = ("namespace", "struct", "class", "enum", "union", "extern", "template", "#", "/", "*", "}", "{", " ", "\t")
MAX_SIGNATURE_LINES = 12
TEST = re.compile(r"^(TEST|TEST_F|TEST_P)\((\w+),\s*(\w+)")


def function_name(signature):
    signature = re.sub(r"__launch_bounds__\([^)]*\)", "", signature)
    m = re.search(r"([A-Za-z_][\w:~]*)\s*\(", signature)
    return m.group(1) if m else signature


def signature_end(lines, i):
    """The index of the line ending in "{" that closes the signature starting
    at column 0 on line i, or None where line i starts no function."""
    if not lines[i] or lines[i].startswith(NOT_FUNC):
        return None
    for j in range(i, min(len(lines), i + MAX_SIGNATURE_LINES)):
        line = lines[j].split("//", 1)[0].rstrip()
        if j > i and not lines[j].startswith((" ", "\t")):
            return None  # a column-0 line of its own: the signature did not open a body
        if line.endswith(";"):
            return None  # a declaration, a call or an initializer
        if line.endswith("{"):
            text = " ".join(lines[i:j + 1])
            before = text.split("(", 1)[0]
            if "(" not in text or text.count("(") != text.count(")"):
                return None
            if "=" in before and "operator" not in before:
                return None
            return j
    return None


def scan(root):
    """Every source file and every function: {key: (kind, lines)}."""
    found = {}

    def add(kind, key, n):
        if key not in found or found[key][1] < n:
            found[key] = (kind, n)

    for top in ROOTS:
        for d, _, files in os.walk(os.path.join(root, top)):
            if "node_modules" in d:
                continue
            for f in files:
                if not f.endswith(CODE + (".py", ".sh", ".mjs")):
                    continue
                rel = os.path.relpath(os.path.join(d, f), root).replace(os.sep, "/")
                lines = open(os.path.join(root, rel), errors="replace").read().split("\n")
                if lines[-1] == "":
                    lines.pop()  # the end of the last line, not a line
                add("file", rel, len(lines))
                if not f.endswith(CODE):
                    continue
                i = 0
                while i < len(lines):
                    test = TEST.match(lines[i])
                    open_line = signature_end(lines, i)
                    if open_line is None:
                        i += 1
                        continue
                    j = open_line + 1
                    while j < len(lines) and not lines[j].startswith("}"):
                        j += 1
                    name = f"{test.group(2)}.{test.group(3)}" if test else function_name(" ".join(lines[i:open_line + 1]))
                    add("function", f"{rel}:{name}", j - i + 1)
                    i = j + 1
    return found


def listed(root):
    """The Size exceptions entries: {key: stated lines}."""
    text = open(os.path.join(root, "docs", "design.md")).read()
    section = text.split("## Size exceptions", 1)
    if len(section) < 2:
        return {}
    body = section[1].split("\n## ", 1)[0]
    return {key: int(n) for key, n in re.findall(r"^- `([^`]+)` \((\d+) lines\): \S", body, re.M)}


def check(root):
    """The faults, one message each, and how many of them are unlisted sizes."""
    found, entries = scan(root), listed(root)
    over = {key: (kind, n) for key, (kind, n) in found.items()
            if n > (MAX_FILE if kind == "file" else MAX_FUNC)}
    faults, unlisted = [], 0
    for key, (kind, n) in sorted(over.items()):
        if key not in entries:
            unlisted += 1
            faults.append(f"sizes: {kind} {key} has {n} lines; split it or give a reason in docs/design.md (Size exceptions)")
        elif entries[key] != n:
            faults.append(f"sizes: {kind} {key} is listed with {entries[key]} lines but has {n}")
    for key in sorted(entries):
        if key in over:
            continue
        if key in found:
            faults.append(f"sizes: stale entry {key}: it has {found[key][1]} lines, within the limit")
        else:
            faults.append(f"sizes: stale entry {key}: no such file or function")
    return faults, unlisted


def self_test():
    """Made-up sources with one fault of each kind; every one must be caught."""
    body = ["  x += 1;"] * (MAX_FUNC + 10)
    wrapped = (["Status Wrapped(const Config& config, Executor* executor,", "               Result* out) {"]
               + body + ["}", ""])
    stale_count = ["int Counted(int x) {"] + body + ["}", ""]
    lambda_in_macro = (["REGISTER_THING(Name, [](int x) {"] + body + ["});", ""])
    assigned_lambda = (["const auto kTable = [](int x) {"] + body + ["};", ""])
    small = ["void Small(int a,", "           int b) {", "  a += b;", "}", ""]
    test = ["TEST(Suite, Case) {"] + body + ["}", ""]
    sources = {
        # Two functions over the limit, one listed with a wrong count, and a small wrapped one.
        "core/a.cpp": ["namespace kvlab {", ""] + wrapped + stale_count + small + ["}  // namespace kvlab", ""],
        # Lambdas whose bodies are over the limit, and a test that is listed.
        "core/b.cpp": lambda_in_macro + assigned_lambda + test,
    }
    design = ["## Size exceptions", "",
              f"- `core/a.cpp:Counted` ({MAX_FUNC + 50} lines): a count that is wrong.",
              f"- `core/a.cpp:Small` (130 lines): a function within the limit.",
              f"- `core/a.cpp:Gone` (130 lines): a function that does not exist.",
              f"- `core/b.cpp:Suite.Case` ({MAX_FUNC + 12} lines): a test with its true count.", ""]
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "core"))
        os.makedirs(os.path.join(root, "docs"))
        for rel, lines in sources.items():
            with open(os.path.join(root, rel), "w") as f:
                f.write("\n".join(lines))
        with open(os.path.join(root, "docs", "design.md"), "w") as f:
            f.write("\n".join(design))
        found = scan(root)
        faults, unlisted = check(root)
    expect = [
        f"sizes: function core/a.cpp:Counted is listed with {MAX_FUNC + 50} lines but has {MAX_FUNC + 12}",
        f"sizes: function core/a.cpp:Wrapped has {MAX_FUNC + 13} lines; split it or give a reason in docs/design.md (Size exceptions)",
        "sizes: stale entry core/a.cpp:Gone: no such file or function",
        "sizes: stale entry core/a.cpp:Small: it has 4 lines, within the limit",
    ]
    ok = True
    if faults != expect or unlisted != 1:
        ok = False
        print("sizes self-test: expected faults:\n  " + "\n  ".join(expect) + "\ngot:\n  " + "\n  ".join(faults))
    functions = sorted(k for k, (kind, _) in found.items() if kind == "function")
    expect_functions = ["core/a.cpp:Counted", "core/a.cpp:Small", "core/a.cpp:Wrapped", "core/b.cpp:Suite.Case"]
    if functions != expect_functions:
        ok = False
        print(f"sizes self-test: expected functions {expect_functions}, got {functions}")
    print("sizes self-test: " + ("ok" if ok else "FAILED"))
    return ok


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(0 if self_test() else 1)
    faults, unlisted = check(os.getcwd())
    for fault in faults:
        print(fault)
    print(f"sizes: {unlisted} unlisted, {len(faults) - unlisted} wrong or stale")
    sys.exit(1 if faults else 0)

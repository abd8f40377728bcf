"""What the reference tests share: a check list that prints each check and keeps
the failures, and the run in a scratch directory that reports them."""
import shutil
import sys
import tempfile


class Checker:
    def __init__(self):
        self.failures = []

    def check(self, ok, what):
        print(("ok    " if ok else "FAIL  ") + what, flush=True)
        if not ok:
            self.failures.append(what)


def run_checks(prefix, keep, body):
    """Runs body(tmp, checker) in a fresh scratch directory (kept when `keep`);
    returns the exit status: 1 when a check failed, else 0."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    c = Checker()
    try:
        body(tmp, c)
    finally:
        if keep:
            print(f"checkpoints kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    if c.failures:
        print(f"\n{len(c.failures)} check(s) failed:\n  " + "\n  ".join(f[:300] for f in c.failures), file=sys.stderr)
        return 1
    print("all checks passed")
    return 0

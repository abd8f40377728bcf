# The tests run from the repository root (ctest's working directory) with
# PYTHONPATH at build/python; examples/python holds the policies they share.
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "examples", "python"))

import tempfile

import pytest


@pytest.fixture
def scratch():
    """A directory under $TMPDIR (ctest's test-tmp) removed after the test:
    pytest's own tmp_path keeps its directories, which the tests' empty-check
    would report."""
    with tempfile.TemporaryDirectory(prefix="kvlab-pytest-") as d:
        yield d


TEXT = ("In the beginning the cache held every key and every value, and the memory grew with the text. "
        "Then the policies came, and each kept what it judged would be read again. ") * 20


@pytest.fixture
def text_file(scratch):
    path = os.path.join(scratch, "text.txt")
    with open(path, "w") as f:
        f.write(TEXT)
    return path

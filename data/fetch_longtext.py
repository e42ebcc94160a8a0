"""Build the byte LM's training text: long unsummarized manuals from Debian, plus the summarization domains' train
splits (offline apart from ``apt-get download``).

    python -m strandline.data.fetch_summaries                       # the summarization pairs first (their train/val splits)
    python -m strandline.data.fetch_longtext [--out data/cache/longtext] [--debs DIR]

Sources (Debian bookworm, ``apt-get download``; each manual's plain-text or Info form, so no HTML is parsed):
the Debian Policy Manual, the Developer's Reference, the Debian Reference, and the GNU manuals of Bash, the GNU
coding and maintainer standards, binutils (as, ld, binutils, gprof), coreutils, sed, grep, findutils and diffutils.
Markup is stripped (Info node headers, menus and indexes, heading underlines, table borders, cross-reference
syntax); the licence appendices (GFDL, GPL) are left out, since they repeat verbatim across manuals.

Writes into the git-ignored output folder:

- ``longtext.jsonl``: rows ``{"id", "source", "package", "split", "text"}``, each manual cut at paragraph
  boundaries into documents of about ``PIECE_CHARS`` characters; 95% train / 5% val by a hash of the id.
- ``lm-train.jsonl`` / ``lm-val.jsonl``: the LM recipe's inputs (``configs/text/summarizer-lm.yaml``): the long
  text of that split plus the documents of the summarization domains' train (resp. val) split. The test
  documents of the summarization benchmark are never included.
- ``long-train.jsonl`` / ``long-val.jsonl``: whole long documents for long-window training
  (``configs/text/long-131k-cpu.yaml``): each manual uncut, split by manual (``HELD_OUT_MANUALS`` are val, never
  trained on), plus the ACLSum papers of that split (whole scientific papers).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from strandline.data.debian import download, extract
from strandline.data.fetch_summaries import load_pairs
from strandline.errors import UserInputError, script
from strandline.files import atomic_write_text

DEFAULT_OUT = Path(__file__).resolve().parent / "cache" / "longtext"
PIECE_CHARS = 20_000  # a manual is cut into documents of about this size, so a val split can be held out
VAL_SHARE = 0.05
# Whole manuals held out from long-window training (long-*.jsonl), about 17% of the manual text: the Bash manual,
# GNU findutils and diffutils (868 kB together, each longer than a 131,072-byte window).
HELD_OUT_MANUALS = ("bash", "findutils", "diffutils")

# the summarization domains whose train and val documents join the corpus: fixed, so that the corpus (and the text
# models trained on it) does not change when a domain is added to the summarizer's data
DOMAINS = ("aclsum", "python-guides", "python-library", "pypi-readme", "manuals", "r-vignettes")


@dataclass(frozen=True)
class Source:
    """One manual: the package that ships it, the files (globs inside the package) and their form."""

    name: str
    package: str
    files: tuple[str, ...]
    kind: str  # "text" (plain text, gzipped) or "info" (GNU Info, gzipped, possibly split in parts)
    licence: str


SOURCES = (
    Source("debian-policy", "debian-policy", ("usr/share/doc/debian-policy/policy.txt.gz",), "text", "GPL-2+"),
    Source("developers-reference", "developers-reference",
           ("usr/share/developers-reference/developers-reference.txt.gz",), "text", "GPL-2"),
    Source("debian-reference", "debian-reference-en",
           ("usr/share/debian-reference/debian-reference.en.txt.gz",), "text", "GPL-2+"),
    Source("bash", "bash-doc", ("usr/share/info/bash.info.gz",), "info", "GFDL-1.3 (no invariant sections)"),
    Source("gnu-standards", "gnu-standards", ("usr/share/info/standards.info.gz", "usr/share/info/maintain.info.gz"),
           "info", "GFDL-1.3 (no invariant sections)"),
    Source("binutils", "binutils-doc", ("usr/share/info/as.info.gz", "usr/share/info/ld.info.gz",
           "usr/share/info/binutils.info.gz", "usr/share/info/gprof.info.gz"), "info", "GFDL-1.3"),
    Source("coreutils", "coreutils", ("usr/share/info/coreutils.info.gz",), "info", "GFDL-1.3 (no invariant sections)"),
    Source("sed", "sed", ("usr/share/info/sed.info.gz",), "info", "GFDL-1.3+ (no invariant sections)"),
    Source("grep", "grep", ("usr/share/info/grep.info.gz",), "info", "GFDL-1.3+ (no invariant sections)"),
    Source("findutils", "findutils", ("usr/share/info/find.info*.gz",), "info", "GFDL-1.3 (no invariant sections)"),
    Source("diffutils", "diffutils", ("usr/share/info/diffutils.info.gz",), "info", "GFDL-1.3 (no invariant sections)"),
)  # fmt: skip

_UNDERLINE = re.compile(r"^\s*([*=\-.~^#+_])\1{2,}\s*$")  # heading underlines and rules: "*****", "-----"
_TABLE_RULE = re.compile(r"^\s*[+|]?(?:[-=+]{3,}[ +|]*)+$")  # "+----+----+", "====  ====="
_MENU_ENTRY = re.compile(r"^\* [^:]+::|^\* [^:]+:\s+[^.]+\.")  # "* Node::  text" / "* Label: Node.  text"
_NOTE = re.compile(r"\*[Nn]ote[ \n]+([^:]+?)(?:::|:[ \n]+(?:\([^)]*\))?[^.,:]*([.,]))")  # *note A:: / *note A: (m)N.
_LICENCE_NODES = re.compile(r"(Free Documentation License|Copying This Manual|GNU General Public|Index)", re.I)


def split_of(doc_id: str) -> str:
    """The fixed split of a long-text document: 95% train, 5% val by a hash of its id."""
    return "val" if int(hashlib.sha1(doc_id.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF < VAL_SHARE else "train"


def clean_lines(text: str) -> str:
    """Plain text without heading underlines, table borders, Info menus or cross-reference syntax."""
    out, in_menu = [], False
    for line in text.splitlines():
        if line.strip() == "* Menu:":
            in_menu = True
            continue
        if in_menu and (_MENU_ENTRY.match(line) or line.startswith("\t") or not line.strip()):
            continue  # menu entries and their tab-indented continuations
        in_menu = False
        if _UNDERLINE.match(line) or _TABLE_RULE.match(line):
            continue
        out.append(line.rstrip())
    text = _NOTE.sub(lambda m: "see " + " ".join(m.group(1).split()) + (m.group(2) or ""), "\n".join(out))
    text = text.replace("see see ", "see ")  # "Also see *note X::"
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def info_text(raw: str) -> str:
    """The prose of a GNU Info file: its nodes without headers, the preamble, tag tables, indexes and licences."""
    nodes = []
    for part in raw.split("\x1f"):
        head, _, body = part.lstrip("\n").partition("\n")
        m = re.match(r"File: [^,]+,\s+Node: ([^,\n]+)", head)
        if m and not _LICENCE_NODES.search(m.group(1)):
            nodes.append(clean_lines(body))
    return "\n\n".join(n for n in nodes if n)


def plain_text(raw: str) -> str:
    """A plain-text manual (Sphinx text output): cleaned, licence appendix dropped."""
    cut = re.search(r"^.*(GNU General Public License|Free Documentation License)\s*\n[=*\-]{3,}", raw, re.M)
    return clean_lines(raw[: cut.start()] if cut else raw)


def pieces(text: str, size: int = PIECE_CHARS) -> Iterator[str]:
    """``text`` cut at blank lines into pieces of at least ``size`` characters (the last may be shorter)."""
    buf: list[str] = []
    n = 0
    for para in text.split("\n\n"):
        buf.append(para)
        n += len(para) + 2
        if n >= size:
            yield "\n\n".join(buf)
            buf, n = [], 0
    if buf:
        yield "\n\n".join(buf)


def read_source(src: Source, root: Path) -> str:
    """The cleaned text of one manual from the package unpacked under ``root``."""
    files = sorted(f for pattern in src.files for f in root.glob(pattern))
    if not files:
        raise UserInputError(f"{src.package} has none of {src.files}")
    texts = [gzip.decompress(f.read_bytes()).decode("utf-8", errors="replace") for f in files]
    if src.kind == "info":
        return "\n\n".join(info_text(t) for t in texts)
    return "\n\n".join(plain_text(t) for t in texts)


def unpack(package: str, debs: Path | None, tmp: Path) -> Path:
    """The package's files: from ``debs/<package>_*.deb`` when given and there, else ``download``-ed into ``tmp``."""
    found = sorted(debs.glob(f"{package}_*.deb")) if debs is not None else []
    found = found or sorted(download((package,), tmp).glob(f"{package}_*.deb"))
    if not found:
        raise UserInputError(f"{package}: not in the archive (apt-get download)")
    return extract(found[-1], tmp / "x" / package)


def manual_texts(debs: Path | None = None) -> Iterator[tuple[Source, str]]:
    """Every source with its whole cleaned text."""
    with tempfile.TemporaryDirectory() as tmp:
        for src in SOURCES:
            yield src, read_source(src, unpack(src.package, debs, Path(tmp)))


def longtext_rows(manuals: list[tuple[Source, str]]) -> Iterator[dict]:
    """Rows of ``longtext.jsonl``: every manual cut into pieces."""
    for src, text in manuals:
        for k, piece in enumerate(pieces(text)):
            doc_id = f"{src.name}#{k}"
            yield {"id": doc_id, "source": src.name, "package": src.package, "licence": src.licence,
                   "split": split_of(doc_id), "text": piece}  # fmt: skip


def build(out: Path, debs: Path | None = None, summaries: Path | None = None) -> dict[str, dict[str, int]]:
    """Write the five files; returns {file: {"documents", "bytes"}}."""
    manuals = list(manual_texts(debs))
    rows = list(longtext_rows(manuals))
    files = {"longtext.jsonl": rows}
    kw = {} if summaries is None else {"root": summaries}
    for split in ("train", "val"):
        docs = [{"id": r["id"], "source": r["source"], "text": r["text"]} for r in rows if r["split"] == split]
        for domain in DOMAINS:  # the summarization documents of this split (never a test document)
            docs += [{"id": d["id"], "source": domain, "text": d["text"]} for d in load_pairs(domain, split, **kw)]
        # ordered by a hash of the id, so any prefix (the first validation batches) mixes every source
        files[f"lm-{split}.jsonl"] = sorted(docs, key=lambda r: hashlib.sha1(r["id"].encode()).hexdigest())
    for split in ("train", "val"):  # whole documents: manuals uncut (split by manual), then the papers
        files[f"long-{split}.jsonl"] = [
            {"id": src.name, "source": src.name, "text": text}
            for src, text in manuals
            if (src.name in HELD_OUT_MANUALS) == (split == "val")
        ] + [{"id": d["id"], "source": "aclsum", "text": d["text"]} for d in load_pairs("aclsum", split, **kw)]
    for name, items in files.items():
        atomic_write_text(out / name, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in items))
    return {n: {"documents": len(v), "bytes": sum(len(r["text"].encode()) for r in v)} for n, v in files.items()}


@script("fetch_longtext")
def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(DEFAULT_OUT), help="output folder (git-ignored)")
    p.add_argument("--debs", default=None, help="a folder of already downloaded .deb files (default: apt-get)")
    args = p.parse_args(argv)
    counts = build(Path(args.out), Path(args.debs) if args.debs else None)
    for name, c in counts.items():
        print(f"{name:<16} {c['documents']:>5} documents {c['bytes']:>12,} bytes")
    rows = [json.loads(line) for line in (Path(args.out) / "longtext.jsonl").read_text(encoding="utf-8").splitlines()]
    for src in SOURCES:
        mine = [r for r in rows if r["source"] == src.name]
        print(f"  {src.name:<22} {len(mine):>4} pieces {sum(len(r['text'].encode()) for r in mine):>10,} bytes")


if __name__ == "__main__":
    raise SystemExit(main())

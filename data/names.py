"""Record names as a genome browser knows them: ``scan --rename``.

A FASTA header's first word is often not the name the browser's genome uses: NCBI downloads say
``gi|49175990|ref|NC_000913.2|`` or ``ref|NC_000913.3|`` where the browser (and the annotation) say
``NC_000913.3`` or ``chr``-style names. ``RecordNames`` renames every record as it is read, so that the tracks,
the summary, the reports, the calls and the plots all carry the browser's name:

- ``accession``: an NCBI-style ``db|id|`` chain keeps its accession (the id after ``ref``, ``gb``, ``emb``,
  ``dbj``, ``lcl`` and the other database tags; a ``gi`` number is skipped when an accession follows);
- a TSV file of two columns, ``NAME_IN_THE_INPUT<TAB>NAME_TO_WRITE`` (a chromAlias table with the input's
  names first; ``#`` lines are comments); a name not listed is kept as it is.

Feature names of the annotation are renamed the same way, so GenBank/EMBL inputs keep their features.
"""

from __future__ import annotations

import re
from pathlib import Path

from strandline.errors import UserInputError

DB_TAGS = ("ref", "gb", "emb", "dbj", "lcl", "pdb", "sp", "tr", "gnl", "pir", "prf", "tpg", "tpe", "tpd")
_TAGGED = re.compile(r"(?:^|\|)(" + "|".join(DB_TAGS) + r")\|([^|]+)")


class RenameError(UserInputError):
    """A ``--rename`` table that cannot be used; the message is one line."""


def accession(name: str) -> str:
    """``gi|49175990|ref|NC_000913.2|`` -> ``NC_000913.2``; ``lcl|contig_7`` -> ``contig_7``; others unchanged."""
    if "|" not in name:
        return name
    found = _TAGGED.findall(name)
    if found:
        return found[0][1]
    parts = [p for p in name.split("|") if p]
    return parts[-1] if parts else name


class RecordNames:
    """The renaming of ``--rename``: ``names(original) -> the name written``. Picklable (worker processes)."""

    def __init__(self, table: dict[str, str] | None = None, rule: str | None = None, source: str = ""):
        self.table, self.rule, self.source = dict(table or {}), rule, source

    @classmethod
    def from_option(cls, spec: str | None) -> RecordNames | None:
        """None (no renaming), ``"accession"``, or the path of a two-column TSV."""
        if spec is None or spec == "":
            return None
        if spec == "accession":
            return cls(rule="accession", source="accession")
        return cls(read_table(spec), source=spec)

    @classmethod
    def from_signature(cls, sig: object) -> RecordNames | None:
        """The renaming a ``signature()`` describes (None: none): how a scan job rebuilds it from its options."""
        if sig is None:
            return None
        if sig == "accession":
            return cls(rule="accession", source="accession")
        return cls({old: new for old, new in sig})

    def __call__(self, name: str) -> str:
        if self.rule == "accession":
            return accession(name)
        return self.table.get(name, name)

    def signature(self) -> object:
        """What the outputs depend on (a resumed scan must rename the same way)."""
        return self.rule or [[old, new] for old, new in sorted(self.table.items())]


def read_table(path: str) -> dict[str, str]:
    """The TSV of ``--rename``: ``input_name<TAB>name_to_write`` per line (``#`` comments, blank lines skipped).

    Raises:
        RenameError: unreadable file, a line without two tab-separated names, a name given twice, or two
            names renamed to the same one.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else "not UTF-8 text"
        raise RenameError(f"--rename {path}: cannot read ({why})") from None
    table: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        cols = line.rstrip("\r").split("\t")
        if len(cols) < 2 or not cols[0] or not cols[1]:
            raise RenameError(f"--rename {path}: line {n}: expected NAME<TAB>NEW_NAME, got {line[:60]!r}")
        old, new = cols[0], cols[1]
        if old in table:
            raise RenameError(f"--rename {path}: line {n}: {old!r} is renamed twice")
        table[old] = new
    if not table:
        raise RenameError(f"--rename {path}: no NAME<TAB>NEW_NAME line")
    seen: dict[str, str] = {}
    for old, new in table.items():
        if new in seen:
            raise RenameError(f"--rename {path}: {seen[new]!r} and {old!r} are both renamed to {new!r}")
        seen[new] = old
    return table

"""The inputs of a scan, surveyed before the first base is scored.

``survey_inputs`` reads every input file once, cheaply, before any model work: FASTA headers are found
in raw blocks (no tokenizing, ~10x faster than parsing) and each record's length is its byte count
without line breaks; GenBank/EMBL records come from ``strandline.data.fasta.iter_records``. That gives, up front:
unreadable files, files with no records, a byte that is not a base, duplicate record names within and
across files, a name that a track file cannot hold, a header-only input with no bases at all, the record
names and lengths that ``--region`` and annotations are checked against, where each record's first
scorable base is (``--plot``'s default region), and the exact total for the progress bar's ETA. Stdin cannot
be read twice: its records are
checked as they stream (``ScanJob``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from strandline.data.fasta import MAX_HEADER, FastaError, open_binary, read_block, record_format
from strandline.data.fasta import iter_records as read_records
from strandline.data.tokenizers import DNA_LUT, INVALID, A
from strandline.data.tracks import track_name_problem

__all__ = ["InputRecord", "check_track_name", "read_records", "survey", "survey_inputs"]

BLOCK = 1 << 22
WHITESPACE = b"\n\r\t "
SCORED = re.compile(rb"[ACGTUacgtu]")  # the bases that get a value (strandline.data.tokenizers: U is read as T)
BASES = bytes(np.flatnonzero(DNA_LUT != INVALID).tolist())  # every byte the reader takes for a base


@dataclass
class InputRecord:
    """One record of an input file, as the survey saw it."""

    path: str
    name: str
    length: int
    first_base: int | None = None  # offset of the first base that gets a value (A, C, G, T/U); None: all N


def survey(path: str) -> list[InputRecord]:
    """Names and lengths of the records of one FASTA/GenBank/EMBL file (plain or compressed).

    Raises:
        FastaError: missing, unreadable or empty file, data before the first header, a duplicate name.
    """
    fh = open_binary(path)
    try:
        if record_format(path, fh) != "fasta":
            return _survey_annotated(path)
        return _survey_fasta(fh, path)
    except OSError as e:  # a read error mid-file (the open itself is checked by open_binary)
        raise FastaError(f"{path}: cannot read ({e.strerror or e})") from None
    finally:
        fh.close()


def _survey_annotated(path: str) -> list[InputRecord]:
    records: dict[str, InputRecord] = {}
    for ch in read_records(path, 1 << 24):
        rec = records.setdefault(ch.name, InputRecord(path, ch.name, 0))
        scored = np.flatnonzero((ch.ids >= A) & (ch.ids < A + 4))
        if rec.first_base is None and len(scored):
            rec.first_base = rec.length + int(scored[0])
        rec.length += len(ch.ids)
    return list(records.values())


def _survey_fasta(fh, path: str) -> list[InputRecord]:
    records: list[InputRecord] = []
    seen: set[str] = set()
    header, in_header, line_start = b"", False, True
    while True:
        block = read_block(fh, path, BLOCK)
        if not block:
            break
        data = block.replace(b"\r", b"\n")  # CR, CRLF and LF all end lines (CRLF adds an empty line: harmless)
        i = 0
        while i < len(data):
            if in_header:
                nl = data.find(b"\n", i)
                header += data[i : len(data) if nl < 0 else nl]
                if len(header) > MAX_HEADER:
                    raise FastaError(f"{path}: a header line longer than {MAX_HEADER} bytes (not FASTA?)")
                if nl < 0:
                    break
                records.append(_new_record(path, header, seen))
                header, in_header, line_start, i = b"", False, True, nl + 1
                continue
            if line_start and data[i] == 0x3E:  # '>'
                in_header, i = True, i + 1
                continue
            j = data.find(b"\n>", i)
            end = len(data) if j < 0 else j + 1
            seg = data[i:end]
            if records:
                bases = seg.translate(None, WHITESPACE)
                if bases.translate(None, BASES):  # a byte that is no base: the reader names record, line, byte
                    _raise_reader_error(path)
                rec = records[-1]
                if rec.first_base is None and (m := SCORED.search(seg)):
                    rec.first_base = rec.length + len(seg[: m.start()].translate(None, WHITESPACE))
                rec.length += len(bases)
            elif seg.strip():
                what = "binary data" if b"\0" in seg or any(b >= 0x80 for b in seg[:4096]) else "sequence"
                raise FastaError(f"{path}: {what} before the first '>' header (not FASTA?)")
            line_start, i = data[end - 1] == 0x0A, end
    if in_header:
        records.append(_new_record(path, header, seen))
    if not records:
        raise FastaError(f"{path}: no FASTA records (empty file?)")
    return records


def _raise_reader_error(path: str) -> None:
    """Read ``path`` with the reader, which raises the FastaError naming the record, line and character."""
    for _ in read_records(path, 1 << 24):
        pass
    raise FastaError(f"{path}: a character that is not a base")  # not reached: the reader refuses what the survey did


def _new_record(path: str, header: bytes, seen: set[str]) -> InputRecord:
    try:
        words = header.decode("utf-8").split(None, 1)  # the reader's rule: the first word is the name
    except UnicodeDecodeError:
        raise FastaError(f"{path}: header {header[:40]!r} is not text (binary file?)") from None
    if not words:
        raise FastaError(f"{path}: empty record name after '>'")
    if words[0] in seen:
        raise FastaError(f"{path}: duplicate record name {words[0]!r}")
    seen.add(words[0])
    return InputRecord(path, words[0], 0)


def check_track_name(path: str, name: str) -> None:
    """Refuse a record whose name a track file cannot hold (``strandline.data.tracks.track_name_problem``)."""
    problem = track_name_problem(name)
    if problem:
        raise FastaError(f"{path}: record {name!r} {problem}; rename the record")


def survey_inputs(inputs: list[str]) -> list[InputRecord]:
    """Survey every input file (not stdin) in order; duplicate names across files are refused here.

    Raises:
        FastaError: as ``survey``, a record name that appears in two inputs, or one that a track file cannot
            hold (``track``, ``browser``, ``#...``, a control character: ``check_track_name``).
    """
    out: list[InputRecord] = []
    where: dict[str, str] = {}
    for p in inputs:
        if p == "-":
            continue
        if not os.path.isfile(p):
            raise FastaError(f"{p}: no such file" if not Path(p).exists() else f"{p}: not a regular file")
        if not os.access(p, os.R_OK):
            raise FastaError(f"{p}: cannot read (permission denied)")
        for rec in survey(p):
            check_track_name(p, rec.name)
            if rec.name in where:
                raise FastaError(f"{p}: record {rec.name!r} already read from {where[rec.name]}")
            where[rec.name] = p
            out.append(rec)
    return out

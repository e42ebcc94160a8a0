"""The survey: every record's name and length in a sequence file, read cheaply before any scoring.

``survey(path)`` reads a FASTA file once in raw blocks (no tokenizing, ~10x faster than the reader): headers
are found by their ``>`` at a line start, a record's name is its header's first word (the reader's rule),
and its length is its byte count without line breaks. GenBank/EMBL records come from ``iter_records``.
It refuses what the reader would, with the reader's words: an unreadable or empty file, data before the
first header, a byte that is not a base (the reader is asked for the record, line and byte), a header
longer than ``MAX_HEADER``, a duplicate name within the file. It also finds each record's first base that
gets a value (A, C, G, T/U), where a default plot region starts. Any compression ``open_binary`` reads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from strandline.data.fasta import MAX_HEADER, FastaError, iter_records, open_binary, read_block, record_format
from strandline.data.tokenizers import DNA_LUT, INVALID, A

__all__ = ["SurveyedRecord", "survey"]

BLOCK = 1 << 22  # bytes read at a time
WHITESPACE = b"\n\r\t "
SCORED = re.compile(rb"[ACGTUacgtu]")  # the bases that get a value (strandline.data.tokenizers: U is read as T)
BASES = bytes(np.flatnonzero(DNA_LUT != INVALID).tolist())  # every byte the reader takes for a base


@dataclass
class SurveyedRecord:
    """One record of an input file, as the survey saw it (its length in bases, as the reader will count them)."""

    path: str
    name: str
    length: int
    first_base: int | None = None  # offset of the first base that gets a value (A, C, G, T/U); None: all N


def survey(path: str) -> list[SurveyedRecord]:
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


def _survey_annotated(path: str) -> list[SurveyedRecord]:
    records: dict[str, SurveyedRecord] = {}
    for ch in iter_records(path, 1 << 24):
        rec = records.setdefault(ch.name, SurveyedRecord(path, ch.name, 0))
        scored = np.flatnonzero((ch.ids >= A) & (ch.ids < A + 4))
        if rec.first_base is None and len(scored):
            rec.first_base = rec.length + int(scored[0])
        rec.length += len(ch.ids)
    return list(records.values())


def _survey_fasta(fh, path: str) -> list[SurveyedRecord]:
    records: list[SurveyedRecord] = []
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
    for _ in iter_records(path, 1 << 24):
        pass
    raise FastaError(f"{path}: a character that is not a base")  # not reached: the reader refuses what the survey did


def _new_record(path: str, header: bytes, seen: set[str]) -> SurveyedRecord:
    try:
        words = header.decode("utf-8").split(None, 1)  # the reader's rule: the first word is the name
    except UnicodeDecodeError:
        raise FastaError(f"{path}: header {header[:40]!r} is not text (binary file?)") from None
    if not words:
        raise FastaError(f"{path}: empty record name after '>'")
    if words[0] in seen:
        raise FastaError(f"{path}: duplicate record name {words[0]!r}")
    seen.add(words[0])
    return SurveyedRecord(path, words[0], 0)

"""Constant-memory FASTA streaming: plain, gzip/BGZF, xz or stdin, any record size.

A 250 Mb chromosome is never one Python string: the file is read in blocks and each record comes out as
``FastaChunk``s of at most ``chunk_size`` token ids. Compression is detected from the magic bytes, not the
file name. Errors are ``FastaError`` with one line naming the file, record and line.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .tokenizers import DNA_LUT, INVALID, IS_AMBIGUOUS, IS_LOWER

BLOCK = 1 << 20  # bytes read at a time
MAX_HEADER = 1 << 20


class FastaError(ValueError):
    """Bad FASTA input; the message is a single line for users."""


@dataclass
class FastaChunk:
    """Consecutive bases of one record: ``ids`` [n] uint8 starting at 0-based ``offset``.

    A record starts with a chunk at offset 0 (an empty record yields one empty chunk). ``soft`` marks
    lowercase (soft-masked) bases; ``n_ambiguous`` counts IUPAC codes mapped to N in this chunk.
    """

    name: str
    description: str
    offset: int
    ids: np.ndarray
    soft: np.ndarray
    n_ambiguous: int


def open_binary(path: str | Path) -> io.BufferedIOBase:
    """Open a path (or '-' for stdin) for binary reading, decompressing gzip/BGZF, xz or bzip2 by magic."""
    if str(path) == "-":
        raw = sys.stdin.buffer
    else:
        p = Path(path)
        if not p.exists():
            raise FastaError(f"{path}: no such file")
        if p.is_dir():
            raise FastaError(f"{path}: is a directory, expected a FASTA file")
        raw = open(p, "rb")  # noqa: SIM115 - returned to the caller, closed by iter_fasta
    if not hasattr(raw, "peek"):
        raw = io.BufferedReader(raw)
    magic = raw.peek(6)[:6]
    if magic[:2] == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw)  # BGZF is multi-member gzip
    if magic[:6] == b"\xfd7zXZ\x00":
        return lzma.LZMAFile(raw)
    if magic[:3] == b"BZh":
        return bz2.BZ2File(raw)
    return raw


def _read(fh, path) -> bytes:
    try:
        return fh.read(BLOCK)
    except (EOFError, gzip.BadGzipFile, lzma.LZMAError, OSError, ValueError) as e:
        raise FastaError(f"{path}: truncated or corrupt compressed file ({type(e).__name__}: {e})") from None


def iter_fasta(path: str | Path, chunk_size: int = 1 << 20) -> Iterator[FastaChunk]:
    """Stream the records of a FASTA file as chunks of token ids; memory is O(chunk_size + BLOCK)."""
    parser = _Parser(str(path), chunk_size)
    fh = open_binary(path)
    try:
        buf = b""
        while True:
            block = _read(fh, path)
            if not block:
                break
            buf = yield from parser.feed(buf + block)
        if buf:
            yield from parser.feed(buf + b"\n")  # a last header line without a newline
        yield from parser.finish()
    finally:
        if fh is not sys.stdin.buffer:
            fh.close()


class _Parser:
    """Block-wise state machine: headers are parsed line by line, sequence runs in bulk with numpy."""

    def __init__(self, path: str, chunk_size: int):
        self.path, self.chunk_size = path, chunk_size
        self.name: str | None = None
        self.desc = ""
        self.offset = 0  # bases of the current record already emitted
        self.pending: list[tuple[np.ndarray, np.ndarray, int]] = []
        self.pending_n = 0
        self.line = 1  # line number at the start of the data being fed
        self.at_line_start = True
        self.seen: set[str] = set()
        self.emitted_record = False

    def feed(self, data: bytes):
        """Consume ``data``; returns the unconsumed tail (an incomplete header line)."""
        i = 0
        while i < len(data):
            if self.at_line_start and data[i] == 0x3E:  # '>'
                nl = data.find(b"\n", i)
                if nl < 0:
                    if len(data) - i > MAX_HEADER:
                        raise FastaError(f"{self.path}: line {self.line}: header longer than {MAX_HEADER} bytes")
                    return data[i:]
                yield from self._start_record(data[i + 1 : nl].rstrip(b"\r"))
                self.line += 1
                i = nl + 1
                continue
            j = data.find(b"\n>", i)
            end = len(data) if j < 0 else j + 1
            yield from self._sequence(data[i:end])
            self.at_line_start = data[end - 1] == 0x0A
            i = end
        return b""

    def _start_record(self, header: bytes):
        yield from self._flush(final=True)
        try:
            text = header.decode("utf-8")
        except UnicodeDecodeError:
            raise FastaError(f"{self.path}: line {self.line}: header is not text (binary file?)") from None
        name, _, desc = text.strip().partition(" ")
        if not name:
            raise FastaError(f"{self.path}: line {self.line}: empty record name after '>'")
        if name in self.seen:
            raise FastaError(f"{self.path}: line {self.line}: duplicate record name {name!r}")
        self.seen.add(name)
        self.name, self.desc, self.offset, self.emitted_record = name, desc.strip(), 0, False

    def _sequence(self, seg: bytes):
        raw = np.frombuffer(seg, dtype=np.uint8)
        keep = (raw != 0x0A) & (raw != 0x0D) & (raw != 0x20) & (raw != 0x09)  # newlines and blanks
        bases = raw[keep]
        if self.name is None:
            if bases.size:
                what = "binary data" if (raw == 0).any() or (raw >= 0x80).any() else "sequence"
                raise FastaError(f"{self.path}: line {self.line}: {what} before the first '>' header (not FASTA?)")
            self.line += seg.count(b"\n")
            return
        ids = DNA_LUT[bases]
        bad = np.flatnonzero(ids == INVALID)
        if bad.size:
            pos = int(np.flatnonzero(keep)[bad[0]])
            line = self.line + seg.count(b"\n", 0, pos)
            ch = int(raw[pos])
            shown = repr(chr(ch)) if 0x20 < ch < 0x7F else f"byte 0x{ch:02x} (binary file?)"
            raise FastaError(f"{self.path}: record {self.name!r} line {line}: invalid character {shown}")
        self.line += seg.count(b"\n")
        self.pending.append((ids, IS_LOWER[bases], int(IS_AMBIGUOUS[bases].sum())))
        self.pending_n += ids.size
        yield from self._flush(final=False)

    def _flush(self, final: bool):
        if self.name is None:
            return
        while self.pending_n >= self.chunk_size or (final and (self.pending_n or not self.emitted_record)):
            ids = np.concatenate([p[0] for p in self.pending]) if self.pending else np.zeros(0, np.uint8)
            soft = np.concatenate([p[1] for p in self.pending]) if self.pending else np.zeros(0, bool)
            n_amb = sum(p[2] for p in self.pending)
            take = min(self.chunk_size, ids.size)
            if take < ids.size:  # ambiguity counts stay with the chunk they were seen in, to within one chunk
                self.pending = [(ids[take:], soft[take:], 0)]
            else:
                self.pending = []
            self.pending_n = ids.size - take
            yield FastaChunk(self.name, self.desc, self.offset, ids[:take], soft[:take], n_amb)
            self.offset += take
            self.emitted_record = True

    def finish(self):
        yield from self._flush(final=True)
        if not self.seen:
            raise FastaError(f"{self.path}: no FASTA records (empty file?)")


def read_fasta(path: str | Path) -> dict[str, np.ndarray]:
    """Whole records as {name: ids}; for small files (phage, bacteria, tests), not chromosomes."""
    out: dict[str, list[np.ndarray]] = {}
    for ch in iter_fasta(path):
        out.setdefault(ch.name, []).append(ch.ids)
    return {k: np.concatenate(v) for k, v in out.items()}

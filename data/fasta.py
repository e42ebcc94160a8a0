"""Sequence records as token-id chunks: constant-memory FASTA, and GenBank/EMBL through Biopython.

``iter_records(path)`` is the one reader of training and scanning. FASTA (plain, gzip/BGZF, xz, bzip2 or
stdin) is streamed in blocks, so a 250 Mb chromosome is never one Python string: each record comes out
as ``FastaChunk``s of at most ``chunk_size`` token ids. GenBank and EMBL (detected from the first bytes,
``LOCUS`` / ``ID   ``, or else from the extension) are parsed with ``Bio.SeqIO``, which holds one record
at a time: fine for the annotated genomes these formats carry (phages, bacteria, organelles).
Compression (gzip/BGZF, xz, bzip2; zstd with the optional ``zstandard`` package) is detected from the magic
bytes, not the file name; a leading UTF-8 byte-order mark is skipped. Line breaks may be LF, CRLF or CR
alone (old Mac). Record names are the header's first word (split on any whitespace). Errors are
``FastaError`` (a ``UserInputError``) with one line naming the file, record and line.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from strandline.data.tokenizers import DNA_LUT, INVALID, IS_AMBIGUOUS, IS_LOWER, IS_URACIL
from strandline.errors import UserInputError, first_line

BLOCK = 1 << 20  # bytes read at a time
MAX_HEADER = 1 << 20
ANNOTATED_SUFFIXES = {".gb": "genbank", ".gbk": "genbank", ".gbff": "genbank", ".genbank": "genbank",
                      ".embl": "embl", ".eml": "embl"}  # fmt: skip
COMPRESSED_SUFFIXES = (".gz", ".bgz", ".xz", ".bz2", ".zst")
FASTA_SUFFIXES = (".fa", ".fasta", ".fna", ".fas", ".ffn", ".seq", *ANNOTATED_SUFFIXES)  # names of files we read
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
UTF8_BOM = b"\xef\xbb\xbf"
DECOMPRESS_ERRORS = (EOFError, lzma.LZMAError, OSError)  # a cut or corrupt stream (gzip's BadGzipFile is an OSError)
COMPRESSED_MAGIC = ((b"\x1f\x8b", "gzip"), (b"\xfd7zXZ\x00", "xz"), (b"BZh", "bzip2"), (ZSTD_MAGIC, "zstd"))
DECOMPRESSORS = {"gzip": lambda f: gzip.GzipFile(fileobj=f), "xz": lzma.LZMAFile, "bzip2": bz2.BZ2File}
"""The standard library's decompressing readers, by ``compression``'s name (zstd needs ``zstandard``)."""


def compression(head: bytes) -> str | None:
    """The compression of a stream by its first bytes ("gzip" (BGZF too), "xz", "bzip2", "zstd"), or None."""
    return next((kind for magic, kind in COMPRESSED_MAGIC if head.startswith(magic)), None)


class FastaError(UserInputError):
    """Bad sequence input (FASTA, GenBank, EMBL); the message is a single line for users."""


@dataclass
class FastaChunk:
    """Consecutive bases of one record: ``ids`` [n] uint8 starting at 0-based ``offset``.

    A record starts with a chunk at offset 0 (an empty record yields one empty chunk). ``soft`` marks
    lowercase (soft-masked) bases; ``n_ambiguous`` counts IUPAC codes mapped to N and ``n_uracil`` the
    RNA ``U`` bases read as T, in this chunk (to within one chunk: counts stay with the block they were
    read in). Sum them over a record's chunks to report them.
    """

    name: str
    description: str
    offset: int
    ids: np.ndarray
    soft: np.ndarray
    n_ambiguous: int
    n_uracil: int = 0


def open_binary(path: str | Path) -> io.BufferedIOBase:
    """Open a path (or '-' for stdin) for binary reading, decompressing gzip/BGZF, xz, bzip2 or zstd by magic.

    A leading UTF-8 byte-order mark (some Windows editors write one) is skipped. zstd needs the optional
    ``zstandard`` package; without it, or for UTF-16 text, the FastaError says what to do.
    """
    if str(path) == "-":
        raw = sys.stdin.buffer
    else:
        p = Path(path)
        if not p.exists():
            raise FastaError(f"{path}: no such file")
        if p.is_dir():
            raise FastaError(f"{path}: is a directory, expected a FASTA file")
        try:
            raw = open(p, "rb")  # noqa: SIM115 - returned to the caller, closed by iter_records
        except OSError as e:
            raise FastaError(f"{path}: cannot read ({e.strerror or e})") from None
    if not hasattr(raw, "peek"):
        raw = io.BufferedReader(raw)
    kind = compression(raw.peek(6)[:6])
    if kind in DECOMPRESSORS:  # closed by the caller, as the file is; BGZF is multi-member gzip
        stream = DECOMPRESSORS[kind](raw)
    elif kind == "zstd":
        stream = _open_zstd(raw, path)
    else:
        stream = raw
    return _skip_bom(stream, path)


def _open_zstd(raw, path) -> io.BufferedIOBase:
    try:
        import zstandard
    except ImportError:
        _close(raw)
        raise FastaError(
            f"{path}: zstd-compressed; decompress it first (zstd -d) or pip install zstandard to read it directly"
        ) from None
    return io.BufferedReader(_ZstdReader(raw, zstandard), BLOCK)


class _ZstdReader(io.RawIOBase):
    """zstd frames, one or many (as ``zstd -d`` reads them), as a raw stream.

    ``zstandard``'s own ``stream_reader`` ends quietly when the input is cut inside a frame; here that is an
    EOFError and corrupt data an OSError, which the readers report as a truncated or corrupt file.
    """

    def __init__(self, raw, zstandard):
        self.raw, self.zstd, self.obj = raw, zstandard, None
        self.out, self.pos = b"", 0  # decompressed bytes not yet handed out

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        while self.pos == len(self.out):
            data = self.raw.read(BLOCK)
            if not data:
                if self.obj is not None and not self.obj.eof:
                    raise EOFError("the zstd stream ends inside a frame")
                return 0
            self.out, self.pos = self._decompress(data), 0
        n = min(len(b), len(self.out) - self.pos)
        b[:n] = self.out[self.pos : self.pos + n]
        self.pos += n
        return n

    def _decompress(self, data: bytes) -> bytes:
        parts = []
        while data:
            if self.obj is None or self.obj.eof:  # the next frame
                self.obj = self.zstd.ZstdDecompressor().decompressobj()
            try:
                parts.append(self.obj.decompress(data))
            except self.zstd.ZstdError as e:
                raise OSError(str(e)) from None
            data = self.obj.unused_data if self.obj.eof else b""
        return b"".join(parts)

    def close(self) -> None:
        _close(self.raw)
        super().close()


def _skip_bom(stream, path) -> io.BufferedIOBase:
    """Consume a leading UTF-8 byte-order mark; refuse UTF-16 text (its every other byte is NUL)."""
    try:
        head = stream.peek(3)[:3]
    except (*DECOMPRESS_ERRORS, ValueError) as e:
        _close(stream)
        raise corrupt_error(path, e) from None
    if head == UTF8_BOM:
        stream.read(3)
    elif head[:2] in (b"\xff\xfe", b"\xfe\xff"):
        _close(stream)
        raise FastaError(f"{path}: UTF-16 text (it starts with a UTF-16 byte-order mark); save it as UTF-8 or ASCII")
    return stream


def _close(stream) -> None:
    if stream is not sys.stdin.buffer:
        stream.close()


def corrupt_error(path, e: BaseException) -> FastaError:
    """The one message of a compressed input that cannot be decompressed."""
    return FastaError(f"{path}: truncated or corrupt compressed file ({type(e).__name__}: {e})")


def read_block(fh, path, size: int = BLOCK) -> bytes:
    """Up to ``size`` bytes of an ``open_binary`` stream; a decompression failure is a one-line FastaError."""
    try:
        return fh.read(size)
    except (*DECOMPRESS_ERRORS, ValueError) as e:
        raise corrupt_error(path, e) from None


def record_format(path: str | Path, fh=None) -> str:
    """'fasta', 'genbank' or 'embl': from the first bytes when they tell, else from the file extension."""
    head = b""
    if fh is not None:
        try:
            head = fh.peek(64)[:64].lstrip()
        except (*DECOMPRESS_ERRORS, ValueError) as e:
            raise corrupt_error(path, e) from None
    if head.startswith(b">"):
        return "fasta"
    if head.startswith(b"LOCUS"):
        return "genbank"
    if head.startswith(b"ID   "):
        return "embl"
    return ANNOTATED_SUFFIXES.get(Path(_uncompressed_name(Path(str(path)).name)).suffix, "fasta")


def is_fasta_name(name: str) -> bool:
    """True for a file name this reader takes (``FASTA_SUFFIXES``, compressed or not): how a folder is globbed."""
    return _uncompressed_name(name).endswith(FASTA_SUFFIXES)


def _uncompressed_name(name: str) -> str:
    """``name`` lowercased, without its compression suffixes (``g.fa.gz`` -> ``g.fa``)."""
    name = name.lower()
    for ext in COMPRESSED_SUFFIXES:
        name = name.removesuffix(ext)
    return name


def iter_records(path: str | Path, chunk_size: int = 1 << 20) -> Iterator[FastaChunk]:
    """Stream the records of a FASTA, GenBank or EMBL file (or '-') as chunks of token ids.

    Memory is O(chunk_size + BLOCK) for FASTA and one record for the annotated formats.

    Raises:
        FastaError: missing/unreadable file, truncated compression, a malformed record, an invalid base,
            a duplicate record name, or no records at all.
    """
    fh = open_binary(path)
    try:
        fmt = record_format(path, fh)
        if fmt == "fasta":
            yield from _iter_fasta(fh, str(path), chunk_size)
        else:
            yield from _iter_annotated(fh, str(path), fmt, chunk_size)
    finally:
        _close(fh)


def iter_fasta(path: str | Path, chunk_size: int = 1 << 20) -> Iterator[FastaChunk]:
    """Alias of ``iter_records`` (kept for callers that read FASTA by name)."""
    return iter_records(path, chunk_size)


def _iter_fasta(fh, path: str, chunk_size: int) -> Iterator[FastaChunk]:
    parser = _Parser(path, chunk_size)
    buf, cr = b"", b""
    while True:
        block = read_block(fh, path)
        if not block:
            break
        block = cr + block
        cr = b"\r" if block.endswith(b"\r") else b""  # a CRLF may straddle two blocks: decide with the next one
        if cr:
            block = block[:-1]
        if b"\r" in block:  # CRLF or old-Mac CR line breaks: LF for the parser (a scan, no copy, for LF files)
            block = block.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buf = yield from parser.feed(buf + block)
    if buf or cr:
        yield from parser.feed(buf + b"\n")  # a last header line without a newline
    yield from parser.finish()


_AMBIGUOUS_BYTES, _URACIL_BYTES = np.flatnonzero(IS_AMBIGUOUS), np.flatnonzero(IS_URACIL)


def _encode(bases: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Bytes [n] -> (ids [n], soft-mask [n], ambiguity count, U count); invalid bytes come out as INVALID."""
    counts = np.bincount(bases, minlength=256)  # one pass for both counts: faster than two mask sums
    n_amb, n_u = int(counts[_AMBIGUOUS_BYTES].sum()), int(counts[_URACIL_BYTES].sum())
    return DNA_LUT[bases], IS_LOWER[bases], n_amb, n_u


def _shown(ch: int) -> str:
    return repr(chr(ch)) if 0x20 < ch < 0x7F else f"byte 0x{ch:02x} (binary file?)"


def _iter_annotated(fh, path: str, fmt: str, chunk_size: int) -> Iterator[FastaChunk]:
    """GenBank/EMBL records through ``Bio.SeqIO``; each record is cut into chunks like a FASTA record."""
    from Bio import BiopythonParserWarning, SeqIO
    from Bio.Seq import UndefinedSequenceError

    text = io.TextIOWrapper(fh, encoding="utf-8", errors="strict")
    try:
        yield from _annotated_chunks(
            SeqIO.parse(text, fmt), path, fmt, chunk_size, UndefinedSequenceError, BiopythonParserWarning
        )
    finally:
        text.detach()  # the caller closes the binary stream (never stdin)


def _annotated_chunks(records, path: str, fmt: str, chunk_size: int, undefined, parser_warning) -> Iterator[FastaChunk]:
    seen: set[str] = set()
    while True:
        try:
            with warnings.catch_warnings():  # a truncated file is only a warning to Biopython: refuse it
                warnings.simplefilter("error", parser_warning)
                rec = next(records, None)
            if rec is None:
                break
            raw = np.frombuffer(bytes(rec.seq), dtype=np.uint8)
        except undefined:
            raise FastaError(
                f"{path}: {fmt} record {rec.id!r} has no sequence (a CONTIG or WGS master record?)"
            ) from None
        except DECOMPRESS_ERRORS as e:
            raise corrupt_error(path, e) from None
        except UnicodeDecodeError:
            raise FastaError(f"{path}: not text (binary file?); expected {fmt}") from None
        except (ValueError, AssertionError, IndexError, KeyError, parser_warning) as e:  # Biopython's parse errors
            msg = first_line(e)
            raise FastaError(f"{path}: malformed {fmt} file ({msg})") from None
        name = rec.id
        if name in seen:
            raise FastaError(f"{path}: duplicate record name {name!r}")
        seen.add(name)
        ids, _, n_amb, n_u = _encode(raw)
        soft = np.zeros(ids.size, bool)  # these formats write every base in lowercase: no soft-mask to keep
        bad = np.flatnonzero(ids == INVALID)
        if bad.size:
            raise FastaError(
                f"{path}: record {name!r} base {int(bad[0]) + 1}: invalid character {_shown(int(raw[bad[0]]))}"
            )
        for s in range(0, max(1, ids.size), chunk_size):
            e = s + chunk_size
            first = s == 0  # the record's counts go with its first chunk
            yield FastaChunk(name, rec.description, s, ids[s:e], soft[s:e], n_amb if first else 0, n_u if first else 0)
    if not seen:
        raise FastaError(f"{path}: no {fmt} records (empty or malformed file?)")


class _Parser:
    """Block-wise state machine: headers are parsed line by line, sequence runs in bulk with numpy."""

    def __init__(self, path: str, chunk_size: int):
        self.path, self.chunk_size = path, chunk_size
        self.name: str | None = None
        self.desc = ""
        self.offset = 0  # bases of the current record already emitted
        self.pending: list[tuple[np.ndarray, np.ndarray, int, int]] = []
        self.pending_n = 0
        self.line = 1  # line number at the start of the data being fed
        self.at_line_start = True
        self.seen: set[str] = set()
        self.emitted_record = False

    def feed(self, data: bytes):
        """Consume ``data`` (LF line breaks); returns the unconsumed tail (an incomplete header line)."""
        i = 0
        while i < len(data):
            if self.at_line_start and data[i] == 0x3E:  # '>'
                nl = data.find(b"\n", i)
                if nl < 0:
                    if len(data) - i > MAX_HEADER:
                        raise FastaError(f"{self.path}: line {self.line}: header longer than {MAX_HEADER} bytes")
                    return data[i:]
                yield from self._start_record(data[i + 1 : nl])
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
        words = text.split(None, 1)  # any whitespace: a tab must not end up inside the name
        if not words:
            raise FastaError(f"{self.path}: line {self.line}: empty record name after '>'")
        name, desc = words[0], (words[1].strip() if len(words) > 1 else "")
        if name in self.seen:
            raise FastaError(f"{self.path}: line {self.line}: duplicate record name {name!r}")
        self.seen.add(name)
        self.name, self.desc, self.offset, self.emitted_record = name, desc, 0, False

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
        ids, soft, n_amb, n_u = _encode(bases)
        bad = np.flatnonzero(ids == INVALID)
        if bad.size:
            pos = int(np.flatnonzero(keep)[bad[0]])
            line = self.line + seg.count(b"\n", 0, pos)
            raise FastaError(
                f"{self.path}: record {self.name!r} line {line}: invalid character {_shown(int(raw[pos]))}"
            )
        self.line += seg.count(b"\n")
        self.pending.append((ids, soft, n_amb, n_u))
        self.pending_n += ids.size
        yield from self._flush(final=False)

    def _flush(self, final: bool):
        if self.name is None:
            return
        while self.pending_n >= self.chunk_size or (final and (self.pending_n or not self.emitted_record)):
            ids = np.concatenate([p[0] for p in self.pending]) if self.pending else np.zeros(0, np.uint8)
            soft = np.concatenate([p[1] for p in self.pending]) if self.pending else np.zeros(0, bool)
            n_amb, n_u = sum(p[2] for p in self.pending), sum(p[3] for p in self.pending)
            take = min(self.chunk_size, ids.size)
            self.pending = [(ids[take:], soft[take:], 0, 0)] if take < ids.size else []
            self.pending_n = ids.size - take
            yield FastaChunk(self.name, self.desc, self.offset, ids[:take], soft[:take], n_amb, n_u)
            self.offset += take
            self.emitted_record = True

    def finish(self):
        yield from self._flush(final=True)
        if not self.seen:
            raise FastaError(f"{self.path}: no FASTA records (empty file?)")


def read_fasta(path: str | Path) -> dict[str, np.ndarray]:
    """Whole records as {name: ids}; for small files (phage, bacteria, tests), not chromosomes."""
    out: dict[str, list[np.ndarray]] = {}
    for ch in iter_records(path):
        out.setdefault(ch.name, []).append(ch.ids)
    return {k: np.concatenate(v) for k, v in out.items()}

"""Text documents: streaming UTF-8 reading, loading through HF ``datasets``, and packing into training sequences.

- ``iter_text(path_or_dash)`` reads one document in pieces (constant memory; gzip, xz and bzip2 files
  decompressed as they stream) and raises ``DocumentError`` with one line for invalid UTF-8 (naming the byte
  offset), binary (NUL), truncated compressed or empty input.
- ``PdfText(path)`` reads a PDF's text layer page by page with pypdf (the ``pdf`` extra), for ``summarize``.
- ``load_documents(source)`` loads local ``json``/``jsonl``/``parquet``/``txt`` files with
  ``datasets.load_dataset`` (or a hub dataset name when a network exists), optionally streaming.
- ``pack_tokens(texts, seq_len)`` joins ``BOS text EOS`` byte tokens of many documents into one stream and cuts it
  into training windows of ``seq_len + 1`` tokens (input and next-token target), any length (131,072 and beyond).
"""

from __future__ import annotations

import codecs
import io
import os
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from strandline.data.fasta import DECOMPRESS_ERRORS, DECOMPRESSORS, compression
from strandline.data.tokenizers import ByteTokenizer
from strandline.errors import UserInputError, first_line

LOCAL_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".txt": "text", ".md": "text"}
TOKENS_DTYPE = np.uint16  # byte ids and the 4 specials (< 260) fit in 16 bits: half the memory of int32


class DocumentError(UserInputError):
    """Bad document input (invalid UTF-8, binary, empty, unreadable); ``str(e)`` is the one line shown."""


def iter_text(path: str | Path, piece_bytes: int = 1 << 16, name: str | None = None) -> Iterator[str]:
    """Yield the decoded text of one document in pieces; '-' reads stdin. Constant memory.

    Args:
        path: a UTF-8 text file (gzip, xz or bzip2 compressed or not), or '-' for standard input.
        piece_bytes: bytes read per piece.
        name: how the input is named in error messages (default: the path).

    Raises:
        DocumentError: missing file, invalid UTF-8 (with the byte offset), a NUL byte, or no text at all.
    """
    name = name or ("<stdin>" if str(path) == "-" else str(path))
    if str(path) == "-":  # read1: what the pipe holds now (up to a piece), so a live stream is read as it grows
        yield from _decode_stream(sys.stdin.buffer, piece_bytes, name, partial=True)
        return
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below; a generator cannot use `with` across yields cleanly
    except OSError as e:
        raise DocumentError(f"cannot read {name}: {e.strerror or e}") from None
    with f:
        kind = compression(f.peek(6)[:6])  # peeked, not read: a pipe is read once
        if kind in DECOMPRESSORS:  # offsets and errors count the decompressed text
            yield from _decode_stream(_Decompressed(f, kind, name), piece_bytes, f"{name} (decompressed)")
        else:
            yield from _decode_stream(f, piece_bytes, name)


def is_regular_file(path: str | Path) -> bool:
    """True for a regular file: one that can be opened twice and read from the start each time. A pipe
    (``<(cmd)``, a named FIFO) or a device is read once, so nothing may probe its first bytes beforehand."""
    return str(path) != "-" and os.path.isfile(path)


def compression_of(path: str | Path) -> str | None:
    """The compression of a file by its first bytes ("gzip", "xz", "bzip2", "zstd"), None for stdin, a pipe, an
    uncompressed file or one that cannot be read (the reader names that problem)."""
    if not is_regular_file(path):
        return None
    try:
        with open(path, "rb") as f:
            head = f.read(6)
    except OSError:
        return None
    return compression(head)


class _Decompressed:
    """``read`` of a compressed file's content; truncated or corrupt data is a one-line ``DocumentError``."""

    def __init__(self, raw, kind: str, name: str):
        self.stream, self.kind, self.name = DECOMPRESSORS[kind](raw), kind, name

    def read(self, n: int = -1) -> bytes:
        try:
            return self.stream.read(n)
        except DECOMPRESS_ERRORS as e:
            raise DocumentError(f"{self.name}: truncated or corrupt {self.kind} data ({first_line(e)})") from None


def iter_text_pieces(text: str | bytes, piece_chars: int = 1 << 16, name: str = "<text>") -> Iterator[str]:
    """The same checks as ``iter_text`` for a document already in memory (str or UTF-8 bytes)."""
    if isinstance(text, bytes):
        yield from _decode_stream(_BytesReader(text), piece_chars, name)
        return
    check_text(text, name)
    text = text.replace("\r\n", "\n").replace("\r", "\n")  # the line ends of _decode_stream
    for i in range(0, len(text), piece_chars):
        yield text[i : i + piece_chars]


def check_text(text: str, name: str = "<text>") -> str:
    """Raise ``DocumentError`` if a whole document is empty, blank or binary; return it unchanged."""
    if "\x00" in text:
        raise DocumentError(f"{name}: binary input (NUL byte at character {text.index(chr(0))}); expected UTF-8 text")
    if not text.strip():
        raise DocumentError(f"{name}: empty document (no text to read)")
    return text


class _BytesReader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def read(self, n: int) -> bytes:
        out = self.data[self.pos : self.pos + n]
        self.pos += len(out)
        return out


def _decode_stream(f, piece_bytes: int, name: str, partial: bool = False) -> Iterator[str]:
    """Incremental strict UTF-8 decoding: a character split across pieces is joined, a bad byte is an error.

    Line ends are normalized as in Python's universal newlines: ``\r\n`` and a lone ``\r`` (old Mac text)
    become ``\n``, also when a ``\r\n`` is split across pieces; offsets count the normalized text.
    ``partial``: a piece is what one ``read1`` returns (whatever has arrived, at most ``piece_bytes``), not a
    full ``piece_bytes`` that would wait for more.
    """
    read = f.read1 if partial and hasattr(f, "read1") else f.read
    utf8 = codecs.getincrementaldecoder("utf-8")("strict")
    decoder = io.IncrementalNewlineDecoder(utf8, translate=True)
    offset, seen_text = 0, False
    while True:
        try:
            raw = read(piece_bytes)
        except OSError as e:  # EIO, a read error of a device or network file: names no file by itself
            raise DocumentError(f"cannot read {name}: {e.strerror or first_line(e)}") from None
        final = not raw
        if offset == 0 and (kind := _document_kind(raw)):
            raise DocumentError(f"{name}: {kind}, not text: extract its text first{_HINTS.get(kind, '')}")
        pending = len(utf8.getstate()[0])  # bytes of a character split across pieces, decoded with this one
        try:
            text = decoder.decode(raw, final=final)
        except UnicodeDecodeError as e:
            raise DocumentError(_not_utf8(name, raw if offset == 0 else b"", offset - pending + e.start, e)) from None
        if "\x00" in text:
            raise DocumentError(f"{name}: binary input (NUL byte); expected UTF-8 text")
        offset += len(raw)
        if text:
            seen_text = seen_text or not text.isspace()
            yield text
        if final:
            break
    if not seen_text:
        raise DocumentError(f"{name}: empty document (no text to read)")


DOCUMENT_MAGIC = (
    (b"%PDF-", "a PDF file"),
    (b"PK\x03\x04", "a ZIP archive (a .docx, .odt or .epub document?)"),
    (b"\xd0\xcf\x11\xe0", "an old Microsoft Office document (.doc)"),
    (b"{\\rtf", "an RTF document"),
)
"""First bytes of document formats that are not text, each named in the one-line error."""
_HINTS = {"a PDF file": " (e.g. `pdftotext FILE.pdf FILE.txt`; `strandline summarize` reads a PDF file's text itself)"}


def is_pdf(path: str | Path) -> bool:
    """True for a readable regular file (not stdin or a pipe: probing would consume what the reader needs) that
    starts like a PDF, also once decompressed (``x.pdf.gz``)."""
    if not is_regular_file(path):
        return False
    kind = compression_of(path)
    try:
        with open(path, "rb") as f:
            return (_Decompressed(f, kind, str(path)) if kind in DECOMPRESSORS else f).read(5) == b"%PDF-"
    except (OSError, DocumentError):
        return False  # iter_text names the problem


# the dot leaders of a table of contents: "Usage . . . 12", "Usage ........ 12" (an ellipsis "..." is not one)
_LEADER_DOTS = re.compile(r"(?:(?:[ \t]+\.){3,}|[ \t]*\.{4,})[ \t]*[\dIVXLCivxlc]*[ \t]*$", re.M)
_SECTION_LINE = re.compile(r"\s*\d+(?:\.\d+)+\.?\s+\S")  # "16.1.2 Training the model": a numbered heading
_LIGATURES = str.maketrans({"\ufb00": "ff", "\ufb01": "fi", "\ufb02": "fl", "\ufb03": "ffi", "\ufb04": "ffl"})
_HYPHEN_BREAK = re.compile(r"(?<=[^\W\d_])-\n(?=[a-z])")  # "man-\nagement": a word cut at the line's end


class PdfText:
    """The text layer of a PDF, one page at a time (pypdf, the ``pdf`` extra): ``len()`` is its page count, and
    iterating yields each page's text followed by a blank line: words hyphenated at a line's end joined, the
    fi/fl ligatures spelled out, the dot leaders of a table of contents removed, short unpunctuated lines (running
    heads, headings) made paragraphs of their own.

    Memory holds pypdf's parsed objects of the pages read so far, not only one page: a PDF is not a stream.
    Images carry no text: a scanned PDF without a text layer is refused (run OCR first).

    Raises:
        DocumentError: pypdf missing, an unreadable, damaged or encrypted PDF, or no text on any page.
    """

    def __init__(self, path: str | Path, name: str | None = None):
        self.name = name or str(path)
        try:
            import pypdf
        except ImportError:
            raise DocumentError(
                f"{self.name}: a PDF file: install the pdf extra (pip install 'strandline[pdf]') to read its text, "
                "or extract it first (e.g. `pdftotext FILE.pdf FILE.txt`)"
            ) from None
        import logging

        logging.getLogger("pypdf").setLevel(logging.ERROR)  # repairs of damaged files are not the user's business
        self._errors = (pypdf.errors.PyPdfError, ValueError, KeyError, TypeError, AttributeError, OSError)
        kind = compression_of(path)
        if kind in DECOMPRESSORS:  # pypdf seeks: the PDF is decompressed into a temporary file first
            import shutil
            import tempfile

            self._file = tempfile.TemporaryFile()  # noqa: SIM115 - open while the reader reads its pages
            with open(path, "rb") as f:
                shutil.copyfileobj(_Decompressed(f, kind, self.name), self._file)
            self._file.seek(0)
        try:
            self.reader = pypdf.PdfReader(self._file if kind in DECOMPRESSORS else str(path))
            if self.reader.is_encrypted and not self.reader.decrypt(""):
                raise DocumentError(f"{self.name}: an encrypted PDF; decrypt it first (e.g. `qpdf --decrypt`)")
            self.pages = len(self.reader.pages)
        except DocumentError:
            raise
        except self._errors as e:
            raise DocumentError(f"{self.name}: not a readable PDF ({first_line(e)})") from None

    def __len__(self) -> int:
        return self.pages

    def __iter__(self) -> Iterator[str]:
        seen_text = False
        for i in range(self.pages):
            try:
                text = self.reader.pages[i].extract_text() or ""
            except self._errors as e:
                raise DocumentError(f"{self.name}: page {i + 1} of the PDF cannot be read ({first_line(e)})") from None
            text = text.replace("\r\n", "\n").replace("\x00", "").translate(_LIGATURES)
            text = _HYPHEN_BREAK.sub("", _LEADER_DOTS.sub("", text))
            if text.strip():
                seen_text = True
                yield _short_lines_apart(text) + "\n\n"
        if not seen_text:
            raise DocumentError(f"{self.name}: a PDF without a text layer (scanned pages?); run OCR on it first")


SHORT_LINE = 5  # words: a line of a two-column paper holds more, a running head or a heading fewer


def _short_lines_apart(page: str) -> str:
    """A PDF page's text with its short unpunctuated lines (running heads, page numbers, headings: at most
    ``SHORT_LINE`` words, not ending in . , ; : ! ? or a hyphen) and its numbered headings ("2.1 Usage", up to
    12 words) as paragraphs of their own, so they are not read as the start of the next sentence. PDF text has
    no blank lines between paragraphs."""
    out = []
    for line in page.strip("\n").split("\n"):
        words = line.split()
        short = len(words) <= SHORT_LINE and not re.search(r"[.,;:!?\-–—]$", line.rstrip())
        if words and (short or (len(words) <= 2 * SHORT_LINE + 2 and _SECTION_LINE.match(line))):
            out += ["", line, ""]
        else:
            out.append(line)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip("\n")


def _document_kind(head: bytes) -> str | None:
    return next((kind for magic, kind in DOCUMENT_MAGIC if head.startswith(magic)), None)


def _not_utf8(name: str, head: bytes, at: int, e: UnicodeDecodeError) -> str:
    """The message for undecodable input; a compressed or UTF-16 file (seen in ``head``, the first piece) is named
    as such: "invalid UTF-8 at byte 1" alone sends the user looking for a bad character."""
    if packed := compression(head):
        return f"{name}: a {packed}-compressed file; decompress it first (expected UTF-8 text)"
    if head[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return f"{name}: UTF-16 text (byte-order mark); convert it to UTF-8 first"
    return f"{name}: invalid UTF-8 at byte {at} ({e.reason}); expected UTF-8 text"


def load_documents(
    source: str | list[str],
    split: str = "train",
    streaming: bool = False,
    cache_dir: str | None = None,
):
    """Load documents with ``datasets.load_dataset``.

    Args:
        source: local file(s) (``.json``/``.jsonl``/``.parquet``: one document per row; ``.txt``/``.md``: one
            document per file) or a hub dataset name (needs a network).
        split: the split to load ('train' for local files).
        streaming: return an ``IterableDataset`` that reads rows lazily.
        cache_dir: where ``datasets`` caches Arrow files (a temp dir in tests).

    Returns:
        A ``datasets.Dataset`` (or ``IterableDataset`` when streaming).
    """
    import datasets  # imported here: slow, and only the loaders need it

    files = [source] if isinstance(source, str) else list(source)
    found = local_documents(source)
    if found is None:
        return datasets.load_dataset(source, split=split, streaming=streaming, cache_dir=cache_dir)  # the hub
    builder, local = found
    kwargs = {"sample_by": "document"} if builder == "text" else {}  # a whole .txt file is one document
    if builder == "text":
        check_text_files(local)  # datasets says only "An error occurred while generating the dataset"
    try:
        return datasets.load_dataset(
            builder, data_files=[str(p) for p in local], split=split, streaming=streaming, cache_dir=cache_dir, **kwargs
        )
    except (UnicodeDecodeError, ValueError, datasets.exceptions.DatasetGenerationError) as e:
        if isinstance(e, datasets.exceptions.DatasetGenerationError) and (e.__cause__ or e.__context__):
            e = e.__cause__ or e.__context__  # the reader's own error (bad JSON, ...), not the wrapper's
        raise DocumentError(f"cannot load {files[0]}: {first_line(e)}") from None


def local_documents(source: str | list[str]) -> tuple[str, list[Path]] | None:
    """(datasets builder, files) of a local source, None for a hub dataset name; DocumentError for a missing
    file or files of mixed or unknown kinds."""
    files = [source] if isinstance(source, str) else list(source)
    local = [Path(f) for f in files if Path(f).exists()]
    if not local and isinstance(source, str) and Path(source).suffix.lower() not in LOCAL_BUILDERS:
        return None
    missing = [f for f in files if not Path(f).exists()]
    if missing:
        raise DocumentError(f"document file not found: {missing[0]}")
    if not local:
        raise DocumentError("no document files given")
    suffixes = {p.suffix.lower() for p in local}
    builders = {LOCAL_BUILDERS.get(s) for s in suffixes}
    if len(builders) != 1 or None in builders:
        raise DocumentError(f"expected files of one kind among {sorted(LOCAL_BUILDERS)}, got {sorted(suffixes)}")
    return builders.pop(), local


def check_text_files(paths: Iterable[str | Path]) -> None:
    """Read each text document through once (constant memory): DocumentError naming the file if one is not
    UTF-8 text, is binary or empty."""
    for p in paths:
        for _ in iter_text(p):
            pass


def iter_documents(dataset, text_field: str = "text") -> Iterator[str]:
    """The text of each row, checked (non-empty, not binary); the error names the row."""
    for i, row in enumerate(dataset):
        if text_field not in row:
            raise DocumentError(f"row {i} has no field {text_field!r} (fields: {sorted(row)})")
        if not isinstance(row[text_field], str):
            kind = type(row[text_field]).__name__
            raise DocumentError(f"row {i}: field {text_field!r} is {kind}, expected text")
        yield check_text(row[text_field], f"row {i}")


def tokenize_documents(texts: Iterable[str]) -> np.ndarray:
    """``BOS bytes EOS`` for every document, concatenated: one uint16 token stream [N]."""
    tok = ByteTokenizer()
    parts = []
    for text in texts:
        parts += [np.array([tok.bos_id]), tok.encode(text), np.array([tok.eos_id])]
    if not parts:
        raise DocumentError("no documents to tokenize")
    return np.concatenate(parts).astype(TOKENS_DTYPE)


def iter_packed(texts: Iterable[str], seq_len: int) -> Iterator[np.ndarray]:
    """Like ``pack_tokens(tokenize_documents(texts), seq_len)`` but lazy: holds one window, not the corpus."""
    tok = ByteTokenizer()
    buf = np.empty(0, dtype=TOKENS_DTYPE)
    for text in texts:
        doc = np.concatenate([[tok.bos_id], tok.encode(text), [tok.eos_id]]).astype(TOKENS_DTYPE)
        buf = np.concatenate([buf, doc])
        while len(buf) >= seq_len + 1:
            yield buf[: seq_len + 1].copy()
            buf = buf[seq_len:]  # the last token of a window is the first input of the next
    if len(buf) > 1:
        yield pack_tokens(buf, seq_len)[0]


def load_aclsum(split: str) -> list[dict]:
    """ACLSum papers from the installed ``aclsum`` package (offline): id, title, text (body), abstract.

    The ``text`` is the S2ORC body of the paper (sections as paragraphs with their headings, abstract excluded)
    and ``abstract`` the paper's own abstract: the reference summary. Splits: 'train' (100), 'val' (50), 'test' (100).
    """
    import json

    from aclsum import ACLSum
    from aclsum.aclsum import DATA_DIR

    docs = []
    for d in ACLSum(split):
        with open(DATA_DIR / "paper_jsons" / f"{d.id}.json", encoding="utf-8") as f:
            parse = json.load(f)["pdf_parse"]
        paragraphs, section = [], None
        for block in parse["body_text"]:
            if block["section"] and block["section"] != section:
                section = block["section"]
                paragraphs.append(section)
            paragraphs.append(block["text"].strip())
        abstract = " ".join(b["text"].strip() for b in parse["abstract"])
        docs.append(
            {"id": d.id, "title": d.title, "text": "\n\n".join(p for p in paragraphs if p), "abstract": abstract}
        )
    return docs


def pack_tokens(stream: np.ndarray, seq_len: int, drop_last: bool = False) -> np.ndarray:
    """Cut a token stream into windows [N, seq_len + 1]; window i starts at i * seq_len (targets overlap by one).

    The last window is padded with PAD (ignored in the loss) unless ``drop_last``. A stream shorter than one window
    gives one padded window, so even a short corpus trains at the configured context length.
    """
    if seq_len < 1:
        raise ValueError(f"seq_len must be >= 1, got {seq_len}")
    n = max(1, (len(stream) - 1 + seq_len - 1) // seq_len)
    if drop_last and len(stream) - 1 >= seq_len:
        n = (len(stream) - 1) // seq_len
    out = np.full((n, seq_len + 1), ByteTokenizer.pad_id, dtype=TOKENS_DTYPE)
    for i in range(n):
        piece = stream[i * seq_len : i * seq_len + seq_len + 1]
        out[i, : len(piece)] = piece
    return out

"""Tokenizers that need no download: DNA (one token per base) and UTF-8 bytes.

DNA ids (docs/architecture.md §4): specials first, then bases. Lowercase (soft-masked) bases map to the same
ids; IUPAC ambiguity codes map to N and RNA's U to T (both counted by the FASTA reader, which reports
them); any other byte is invalid.
"""

from __future__ import annotations

import numpy as np

PAD, BOS, EOS, MASK = 0, 1, 2, 3
A, C, G, T, N = 4, 5, 6, 7, 8
BASES = "ACGT"
DNA_VOCAB_SIZE = 16  # 9 used; room for more specials without changing saved models
INVALID = 255
IUPAC_AMBIGUOUS = "RYSWKMBDHV"  # map to N (and are counted)
URACIL = "U"  # RNA: read as T, and counted so that the reader can say so (never silently)
IGNORE = -100  # target id that losses and metrics skip (N bases, padding); the one definition

DNA_LUT = np.full(256, INVALID, dtype=np.uint8)
for _i, _b in enumerate("ACGTN"):
    DNA_LUT[ord(_b)] = DNA_LUT[ord(_b.lower())] = A + _i
for _b in IUPAC_AMBIGUOUS:
    DNA_LUT[ord(_b)] = DNA_LUT[ord(_b.lower())] = N
DNA_LUT[ord(URACIL)] = DNA_LUT[ord(URACIL.lower())] = T
IS_AMBIGUOUS = np.zeros(256, dtype=bool)
IS_AMBIGUOUS[[ord(b) for b in IUPAC_AMBIGUOUS + IUPAC_AMBIGUOUS.lower()]] = True
IS_URACIL = np.zeros(256, dtype=bool)
IS_URACIL[[ord(URACIL), ord(URACIL.lower())]] = True
IS_LOWER = np.zeros(256, dtype=bool)
IS_LOWER[ord("a") : ord("z") + 1] = True

COMPLEMENT = np.arange(DNA_VOCAB_SIZE, dtype=np.uint8)  # specials and N map to themselves
COMPLEMENT[[A, C, G, T]] = [T, G, C, A]
ID_TO_CHAR = np.frombuffer(b"<>$?ACGTN" + b"?" * (DNA_VOCAB_SIZE - 9), dtype=np.uint8)


def reverse_complement(ids: np.ndarray) -> np.ndarray:
    """Reverse-complement ids [n] -> [n] (position i -> n-1-i, A<->T, C<->G; N and specials unchanged)."""
    return COMPLEMENT[np.asarray(ids)[::-1]]


class DNATokenizer:
    """Bytes of sequence -> uint8 ids; see the module docstring for the mapping."""

    kind = "dna"
    vocab_size = DNA_VOCAB_SIZE
    pad_id, bos_id, eos_id, mask_id, n_id = PAD, BOS, EOS, MASK, N
    base_ids = (A, C, G, T)
    sample_ids = base_ids  # what generation may emit: bases only, never a special (or an uninformative N)

    def encode(self, seq: str | bytes) -> np.ndarray:
        if isinstance(seq, str) and not seq.isascii():  # name the character itself, not the '?' of a replace
            at = next(i for i, c in enumerate(seq) if not c.isascii())
            raise ValueError(f"invalid DNA character {seq[at]!r} at position {at}")
        raw = np.frombuffer(seq.encode("ascii") if isinstance(seq, str) else seq, dtype=np.uint8)
        ids = DNA_LUT[raw]
        bad = np.flatnonzero(ids == INVALID)
        if bad.size:
            raise ValueError(f"invalid DNA character {chr(raw[bad[0]])!r} at position {bad[0]}")
        return ids

    def decode(self, ids) -> str:
        return ID_TO_CHAR[np.asarray(ids, dtype=np.uint8)].tobytes().decode("ascii")


class ByteTokenizer:
    """UTF-8 bytes as ids 0-255 plus specials: any document works without a downloaded vocabulary."""

    kind = "bytes"
    pad_id, bos_id, eos_id, sep_id = 256, 257, 258, 259
    vocab_size = 260
    sample_ids = tuple(range(256))  # what generation may emit: bytes, never a special

    def encode(self, text: str | bytes) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8") if isinstance(text, str) else text, dtype=np.uint8).astype(np.int64)

    def decode(self, ids) -> str:
        b = bytes(int(i) for i in ids if 0 <= int(i) < 256)
        return b.decode("utf-8", errors="replace")


TOKENIZERS = {"dna": DNATokenizer, "bytes": ByteTokenizer}


def get_tokenizer(kind: str) -> DNATokenizer | ByteTokenizer:
    """The tokenizer named in a model's config.json ('dna' or 'bytes')."""
    if kind not in TOKENIZERS:
        raise ValueError(f"unknown tokenizer {kind!r}; expected one of {sorted(TOKENIZERS)}")
    return TOKENIZERS[kind]()


def datamodule_tokenizer(datamodule) -> str | None:
    """The tokenizer kind a data module gives ('dna', 'bytes', 'copy'), or None when it does not say.

    Each DataModule declares it as ``tokenizer_kind`` (a class attribute or property); ``tokenizer``, a string
    attribute, is read too for data modules written before that name.
    """
    for name in ("tokenizer_kind", "tokenizer"):
        kind = getattr(datamodule, name, None)
        if isinstance(kind, str):
            return kind
    return None

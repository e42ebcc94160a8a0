"""Random-access DNA for training: a memory-mapped uint8 cache per FASTA, splits, and windows.

The cache is written once by streaming the records (``strandline.data.fasta.iter_records``: FASTA in constant memory,
any compression, or GenBank/EMBL), then memory-mapped, so a window is a slice of a page-cached file whatever
the input format. It lives beside the input (``NAME.strandline.u8`` + ``NAME.strandline.json``) or, when that
directory is not writable or ``cache_dir`` is given, under ``cache_dir``. Both are keyed on the input's
resolved path (a symlink's target, not the link's name), and the index records that path, the input's
device, inode, size, mtime and a checksum of its first and last MiB: the cache is rebuilt when any of
these, the cache format, or the cache file's length do not match.

Coordinates are 0-based half-open, as in BED. A ``Span`` is a stretch of one record assigned to one split.
"""

from __future__ import annotations

import glob
import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from strandline.data.fasta import FastaError, is_fasta_name, iter_records
from strandline.data.tokenizers import IGNORE, PAD, A, N, T
from strandline.data.tracks import bed_rows
from strandline.files import atomic_output, atomic_write_text

SPLITS = ("train", "val", "test")
_SPLIT_ALIASES = {"train": "train", "val": "val", "valid": "val", "validation": "val", "test": "test"}
CACHE_VERSION = 3  # bump when the cache layout changes: older caches are rebuilt
CHECKSUM_BYTES = 1 << 20  # the input's first and last MiB are hashed into the cache's stamp
log = logging.getLogger(__name__)


class DNADataError(FastaError):
    """Bad DNA training input (paths, BED splits, record names); one line for users.

    A FastaError, so the CLI already reports it as a user error (one line, exit 2).
    """


@dataclass(frozen=True)
class Span:
    """``record[start:end]`` (0-based half-open) of the named record, assigned to ``split``."""

    record: str
    start: int
    end: int
    split: str = "train"

    def __len__(self) -> int:
        return self.end - self.start


class GenomeCache:
    """Token ids of every record of one FASTA file, memory-mapped from a one-time uint8 cache.

    The cache is ours (named after the FASTA's resolved path, ``.strandline.u8``): it is rebuilt whenever its
    index does not match the FASTA (``_stamp``: resolved path, device, inode, size, mtime, head/tail
    checksum), the cache format, or the length of the uint8 file (a truncated or half-copied cache is never
    read as PAD). Two links of the same name to different files never share a cache.

    Attributes:
        names: record names in file order.
        lengths: {name: length in bases}.
        n_uracil: {name: RNA U bases read as T} (reported once per open when any).
    """

    def __init__(self, fasta: str | Path, cache_dir: str | Path | None = None):
        self.fasta = Path(fasta)
        if not self.fasta.is_file():
            raise DNADataError(f"{fasta}: no such FASTA file")
        self.data_path, self.index_path = _cache_paths(self.fasta, cache_dir)
        self.stamp = self._stamp()  # before a build: an input changed while it is read is rebuilt next time
        index = self._load_index()
        if index is None:
            index = self._build()
        self.names: list[str] = [r[0] for r in index["records"]]
        self._offsets = {r[0]: int(r[1]) for r in index["records"]}
        self.lengths: dict[str, int] = {r[0]: int(r[2]) for r in index["records"]}
        self.n_uracil: dict[str, int] = {r[0]: int(r[4]) for r in index["records"] if r[4]}
        if self.n_uracil:
            log.warning("%s: read %d RNA U bases as T", self.fasta, sum(self.n_uracil.values()))
        total = sum(self.lengths.values())
        self._data = np.memmap(self.data_path, dtype=np.uint8, mode="r") if total else np.zeros(0, np.uint8)

    def _stamp(self) -> dict:
        """What identifies the input's bytes: a cache whose index differs in any of these is rebuilt."""
        real = os.path.realpath(self.fasta)
        try:
            with open(real, "rb") as f:
                st = os.fstat(f.fileno())
                digest = hashlib.sha256(f.read(CHECKSUM_BYTES))
                if st.st_size > CHECKSUM_BYTES:
                    f.seek(max(CHECKSUM_BYTES, st.st_size - CHECKSUM_BYTES))
                    digest.update(f.read(CHECKSUM_BYTES))
        except OSError as e:
            raise DNADataError(f"{self.fasta}: cannot read ({e.strerror or e})") from None
        return {
            "cache_version": CACHE_VERSION, "source": real, "device": st.st_dev, "inode": st.st_ino,
            "size": st.st_size, "mtime_ns": st.st_mtime_ns, "checksum": digest.hexdigest(),
        }  # fmt: skip

    def _load_index(self) -> dict | None:
        """The cache index if it matches the FASTA and the uint8 file's length, else None (rebuild)."""
        try:
            index = json.loads(self.index_path.read_text())
            data_size = self.data_path.stat().st_size
        except (OSError, ValueError):
            return None
        if not isinstance(index, dict) or any(index.get(k) != v for k, v in self.stamp.items()):
            return None
        records = index.get("records")
        if not isinstance(records, list) or not all(isinstance(r, list) and len(r) == 5 for r in records):
            return None
        if data_size != sum(int(r[2]) for r in records):  # truncated (or grown) behind our back
            return None
        return index

    def _build(self) -> dict:
        """Stream the records into the uint8 file (temp name, then rename: a crash leaves no stale cache)."""
        records: list[list] = []  # [name, offset, length, n_ambiguous, n_uracil]
        pos = 0
        try:
            with atomic_output(self.data_path) as tmp, open(tmp, "wb") as out:
                for ch in iter_records(self.fasta):
                    if ch.offset == 0:
                        records.append([ch.name, pos, 0, 0, 0])
                    out.write(ch.ids.tobytes())
                    records[-1][2] += ch.ids.size
                    records[-1][3] += ch.n_ambiguous
                    records[-1][4] += ch.n_uracil
                    pos += ch.ids.size
            index = {**self.stamp, "records": records}
            atomic_write_text(self.index_path, json.dumps(index))
        except OSError as e:
            raise DNADataError(f"{self.data_path}: cannot write the training cache ({e.strerror or e})") from None
        return index

    def fetch(self, name: str, start: int, end: int) -> np.ndarray:
        """ids of ``name[start:end]`` (clipped to the record) as a view of the memory map."""
        if name not in self._offsets:
            raise DNADataError(f"{self.fasta}: no record named {name!r}")
        length = self.lengths[name]
        start, end = max(0, start), min(end, length)
        off = self._offsets[name]
        return self._data[off + start : off + max(start, end)]

    def has_bases(self, block: int = 1 << 24) -> bool:
        """Whether any record holds an A/C/G/T base (read block by block; stops at the first block with one)."""
        for i in range(0, len(self._data), block):
            part = self._data[i : i + block]
            if bool(((part >= A) & (part <= T)).any()):
                return True
        return False


class Genome:
    """Several FASTA files seen as one set of uniquely named records."""

    def __init__(self, paths: list[str] | str, cache_dir: str | Path | None = None):
        files = expand_paths(paths)
        self.caches = [GenomeCache(f, cache_dir) for f in files]
        self._by_name: dict[str, GenomeCache] = {}
        for c in self.caches:
            for name in c.names:
                if name in self._by_name:
                    raise DNADataError(f"record {name!r} appears in both {self._by_name[name].fasta} and {c.fasta}")
                self._by_name[name] = c
        self.lengths = {n: c.lengths[n] for n, c in self._by_name.items()}
        self.names = list(self.lengths)

    def file_of(self) -> dict[str, str]:
        """Record name -> the FASTA file it is read from."""
        return {name: str(c.fasta) for name, c in self._by_name.items()}

    def fetch(self, name: str, start: int, end: int) -> np.ndarray:
        if name not in self._by_name:
            raise DNADataError(f"no record named {name!r} in {[str(c.fasta) for c in self.caches]}")
        return self._by_name[name].fetch(name, start, end)


def expand_paths(paths: list[str] | str) -> list[Path]:
    """FASTA files from paths, globs or directories (files ending .fa/.fasta/.fna/... optionally .gz/.xz/.bz2)."""
    if isinstance(paths, (str, Path)):
        paths = [str(paths)]
    if not paths:
        raise DNADataError("data.paths is empty: give FASTA files, globs or directories")
    files: list[Path] = []
    for p in paths:
        if Path(p).is_dir():
            found = sorted(f for f in Path(p).iterdir() if f.is_file() and is_fasta_name(f.name))
        elif any(ch in str(p) for ch in "*?["):
            found = sorted(Path(f) for f in glob.glob(str(p), recursive=True) if Path(f).is_file())
        elif Path(p).is_file():
            found = [Path(p)]
        else:
            raise DNADataError(f"{p}: no such FASTA file or directory")
        if not found:
            raise DNADataError(f"{p}: no FASTA files found")
        files += [f for f in found if f not in files]
    return files


def _cache_paths(fasta: Path, cache_dir: str | Path | None) -> tuple[Path, Path]:
    """Beside the FASTA when writable (and no ``cache_dir``), else in ``cache_dir`` / ~/.cache/strandline."""
    real = Path(os.path.realpath(fasta))  # a link's target: links of one name to different files differ
    if cache_dir is None and os.access(real.parent, os.W_OK):
        base = real.parent / f"{real.name}.strandline"
    else:
        xdg = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
        root = Path(cache_dir) if cache_dir is not None else xdg / "strandline" / "dna"
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise DNADataError(f"cache_dir {root}: cannot create this directory ({e.strerror or e})") from None
        key = hashlib.sha1(str(real).encode()).hexdigest()[:12]
        base = root / f"{real.name}.{key}.strandline"
    return base.with_name(base.name + ".u8"), base.with_name(base.name + ".json")


# ---- splits -------------------------------------------------------------------------------------
def read_bed_splits(path: str | Path, lengths: dict[str, int]) -> list[Span]:
    """Spans from a BED file with columns ``chrom start end split`` (hyena-dna's convention).

    ``split`` is train, val (or valid/validation) or test; comment, ``track`` and ``browser`` lines are skipped.
    """
    spans = []
    for i, f in bed_rows(path, DNADataError):
        if len(f) < 4:
            raise DNADataError(f"{path}: line {i}: expected 'chrom start end split', got {' '.join(f)!r}")
        try:
            start, end = int(f[1]), int(f[2])
        except ValueError:
            raise DNADataError(f"{path}: line {i}: start and end must be integers") from None
        split = _SPLIT_ALIASES.get(f[3].lower())
        if split is None:
            raise DNADataError(f"{path}: line {i}: split must be train, val or test, got {f[3]!r}")
        if f[0] not in lengths:
            raise DNADataError(f"{path}: line {i}: no record named {f[0]!r} in the FASTA")
        if not 0 <= start < end <= lengths[f[0]]:
            raise DNADataError(f"{path}: line {i}: bad interval {start}-{end} for {f[0]} of length {lengths[f[0]]}")
        spans.append(Span(f[0], start, end, split))
    return spans


def split_by_records(lengths: dict[str, int], val: list[str], test: list[str]) -> list[Span]:
    """Whole records: those named in ``val`` / ``test`` are held out, every other record trains."""
    for name in [*val, *test]:
        if name not in lengths:
            raise DNADataError(f"split names record {name!r}, which is not in the FASTA")
    split = {**{n: "val" for n in val}, **{n: "test" for n in test}}
    return [Span(n, 0, L, split.get(n, "train")) for n, L in lengths.items() if L > 0]


def split_auto(lengths: dict[str, int], val_fraction: float = 0.05, test_fraction: float = 0.05) -> list[Span]:
    """A held-out span at the end of every record: ``[.. train | val | test]``.

    Held-out bases are contiguous (not scattered windows) so no training window overlaps them.
    """
    spans = []
    for name, L in lengths.items():
        n_test, n_val = int(L * test_fraction), int(L * val_fraction)
        a, b = L - n_val - n_test, L - n_test
        for s, e, split in ((0, a, "train"), (a, b, "val"), (b, L, "test")):
            if e > s:
                spans.append(Span(name, s, e, split))
    return spans


# ---- windows ------------------------------------------------------------------------------------
def make_example(ids: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
    """Split ``window + 1`` (or fewer) ids into (input [window], target [window]) int64 arrays.

    target[t] = ids[t+1]; N targets and padding are ``-100`` (ignored); input padding is PAD.
    """
    inp = np.full(window, PAD, dtype=np.int64)
    tgt = np.full(window, IGNORE, dtype=np.int64)
    n = max(0, min(window, len(ids) - 1))
    inp[:n] = ids[:n]
    t = ids[1 : n + 1].astype(np.int64)
    t[t == N] = IGNORE
    tgt[:n] = t
    return inp, tgt


def tile_windows(spans: list[Span], window: int) -> list[tuple[Span, int]]:
    """Deterministic windows covering every span: starts ``start, start+window, ...``.

    Each window reads ``window + 1`` bases, so every base of a span except its first is a target exactly once.
    """
    out = []
    for sp in spans:
        out += [(sp, s) for s in range(sp.start, sp.end - 1, window)]
    return out


def sample_window(
    spans: list[Span], window: int, rng: np.random.Generator, weights: np.ndarray | None = None
) -> tuple[Span, int]:
    """A random window start: uniform over all spans' starts (spans weighted by the starts they allow), or with
    ``weights`` [len(spans)] (a multiplier per span on top of that: ``span_weights``)."""
    starts = np.array([max(1, len(sp) - window) for sp in spans], dtype=np.float64)
    p = starts if weights is None else starts * weights
    sp = spans[int(rng.choice(len(spans), p=p / p.sum()))]
    return sp, sp.start + int(rng.integers(0, max(1, len(sp) - window)))


def span_weights(spans: list[Span], file_of: dict[str, str], power: float) -> np.ndarray | None:
    """Per-span multipliers that give each file a share of the windows ∝ (its bases in ``spans``) ** power.

    power 1: every base equally likely (None: no multiplier); 0: every file alike, however long; 0.5 between
    (a 70 Mb chromosome gets ~7x the windows of a 1.6 Mb bacterium instead of ~44x). ``file_of``: record -> file.
    """
    if power == 1.0:
        return None
    size: dict[str, int] = {}
    for sp in spans:
        size[file_of[sp.record]] = size.get(file_of[sp.record], 0) + len(sp)
    return np.array([float(size[file_of[sp.record]]) ** (power - 1.0) for sp in spans], dtype=np.float64)


def insert_repeat(
    ids: np.ndarray, rng: np.random.Generator, min_len: int, max_len: int, mutation: float = 0.0
) -> tuple[np.ndarray, tuple[int, int, int] | None]:
    """Copy a random segment of a window to a random later place in the same window (a synthetic repeat).

    Real genomes repeat (transposons, rRNA operons, duplications) but rarely inside one short training window;
    this gives the model something to copy. The length is log-uniform in [min_len, min(max_len, len/2)] (as
    many short repeats as long ones per octave); the copy overwrites the bases at its destination, so the
    window keeps its length, and each A/C/G/T base of the copy is replaced by another base with probability
    ``mutation`` (real repeats are not exact).

    Args:
        ids: token ids of one window [n] (not modified).
        rng: the window's generator (so a window is fixed by its seed).
        min_len, max_len: bounds of the segment length.
        mutation: per-base substitution probability in the copy.

    Returns:
        (new ids [n], (source, destination, length)), or (ids, None) when the window is shorter than 2·min_len.
    """
    n = len(ids)
    hi = min(max_len, n // 2)
    if hi < min_len:
        return ids, None
    length = int(round(np.exp(rng.uniform(np.log(min_len), np.log(hi)))))
    src = int(rng.integers(0, n - 2 * length + 1))
    dst = int(rng.integers(src + length, n - length + 1))
    seg = ids[src : src + length].copy()
    if mutation > 0:
        hit = (rng.random(length) < mutation) & (seg >= A) & (seg <= A + 3)
        seg[hit] = A + (seg[hit] - A + rng.integers(1, 4, int(hit.sum()))) % 4  # always a different base
    out = ids.copy()
    out[dst : dst + length] = seg
    return out, (src, dst, length)


def lanes(spans: list[Span], n_lanes: int) -> list[list[Span]]:
    """Cut the spans into ``n_lanes`` streams of (nearly) equal length, keeping order inside each stream.

    For truncated BPTT: lane b is row b of every batch; a span cut between two lanes starts afresh (reset).
    """
    total = sum(len(sp) for sp in spans)
    per = -(-total // n_lanes)
    out: list[list[Span]] = [[] for _ in range(n_lanes)]
    lane, room = 0, per
    for sp in spans:
        s = sp.start
        while s < sp.end:
            take = min(room, sp.end - s)
            out[lane].append(Span(sp.record, s, s + take, sp.split))
            s, room = s + take, room - take
            if room == 0 and lane < n_lanes - 1:
                lane, room = lane + 1, per
    return out

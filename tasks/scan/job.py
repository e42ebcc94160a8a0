"""One shard of a genome scan: records through the LM chunk by chunk, carrying the recurrent state.

Each record is read as chunks of ``chunk`` bases and fed to the model in chunked mode, the state carried
from chunk to chunk and reset at every record. This is exactly what feeding one base at a time with
``model.step`` gives (``mode="step"``, kept for input that arrives as a stream and for checking), up to
float32 rounding of the per-chunk products. The carried state is kept in float64 by default
(``load_for_scan``), so it does not stall on chromosome-length records.

Scores (docs/architecture.md §7): the score at base i is about base i given the bases < i of its record; the
first base is predicted from BOS. The model's distribution is renormalized over A, C, G, T. Tracks, in bits:
``logprob`` (log2 P of the observed base; its negation is the surprisal), ``entropy`` and the four base
log-probabilities ``A C G T``. N bases get no value, but they are fed to the model as the N token, as in
training (where N is an input but never a target), so the state runs through an N gap and the bases after
it are scored with the N run in their context.

Strand averaging adds a reverse-complement pass, re-aligned to forward coordinates (the RC score of
``comp(x_i)`` and RC base columns swapped A<->T, C<->G) and averaged with the forward scores. The RC pass
needs each record backwards: its ids are staged in a temporary file (1 byte/base) and the re-aligned RC
scores in another (24 bytes/base), read and written a chunk at a time, so memory stays flat and disk
grows with the longest record. Within-record checkpoints are off in that mode (a resume redoes the record).

Resume: ``ScanJob.run`` checkpoints (``models.save_state``) the model state plus the byte length of every
part file and its CRC-32 (checked on resume, so bytes changed inside a part are refused, not carried into the
output), the writers' open runs, the window sums and the summary sums, at chunk boundaries. Chunk
boundaries are fixed by the record offsets, so a resumed scan recomputes exactly the same chunks and
ends byte-identical to an uninterrupted one.
"""

from __future__ import annotations

import math
import os
import re
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError

from strandline.data.fasta import FastaChunk, FastaError
from strandline.data.names import RecordNames
from strandline.data.tokenizers import BOS, A, N, reverse_complement
from strandline.data.tracks import DEFAULT_FORMAT, TrackFormat, WindowMean, track_format
from strandline.errors import UserInputError
from strandline.files import reads_once
from strandline.models import LinearTransformerLM, load, load_state, save_state
from strandline.models.persist.state import StateFileError
from strandline.models.state import LMState
from strandline.tasks.scan.inputs import check_track_name, read_records

TRACKS = ("logprob", "entropy", "A", "C", "G", "T")
RC_ORDER = [0, 1, 5, 4, 3, 2]  # RC columns re-aligned to the forward strand: A<-T, C<-G, G<-C, T<-A
LN2 = math.log(2.0)
CHECKPOINT_KEYS = ("pos", "carry", "rec", "bytes", "crc32", "input_crc32", "writers", "agg", "index")


class ScanError(UserInputError):
    """A scan that cannot run as asked (options, paths, inputs); one line for users."""


class ScanCheckpointError(ScanError):
    """A work folder or checkpoint that does not belong to this scan, or is damaged; the folder is kept."""


def load_for_scan(path: str, state_dtype: str = "float64") -> LinearTransformerLM:
    """Load a model for scanning with its carried state accumulated in ``state_dtype``."""
    from strandline.models.streaming import bound_memory

    model = load(path)
    model.config.state_dtype = state_dtype  # every layer reads the shared config when it builds a state
    model.meta["streaming"] = bound_memory(model, where=str(path))  # a softmax model: a window, memory stays flat
    return model.eval()


@torch.inference_mode()
def base_scores(logits: torch.Tensor, targets: np.ndarray) -> np.ndarray:
    """Per-base tracks from next-base logits.

    Args:
        logits: [T, vocab] logits predicting ``targets``.
        targets: [T] uint8 token ids of the bases scored.

    Returns:
        [T, 6] float32 in bits, columns ``TRACKS``; rows of non-ACGT targets (N) are NaN.
    """
    lp = torch.log_softmax(logits[:, A : A + 4].cpu().double(), -1) / LN2  # (T, 4) bits, renormalized over ACGT
    tgt = torch.from_numpy(targets.astype(np.int64)) - A
    is_base = (tgt >= 0) & (tgt < 4)
    out = torch.empty(len(targets), 6, dtype=torch.float64)
    out[:, 0] = lp.gather(1, tgt.clamp(0, 3)[:, None])[:, 0]
    out[:, 1] = -(lp.exp2() * lp).sum(-1)
    out[:, 2:] = lp
    out[~is_base] = float("nan")
    return out.float().numpy()


@torch.inference_mode()
def score_chunk(
    model: LinearTransformerLM, ids: np.ndarray, state: LMState | None, carry: int, mode: str = "chunk"
) -> tuple[np.ndarray, LMState | None, int]:
    """Score ``ids`` [n] uint8 that follow ``carry`` (the previous base, or BOS) and ``state``.

    Returns (scores [n, 6] float32, new state, new carry). ``mode="chunk"`` runs one chunked pass;
    ``"step"`` feeds one base at a time through ``model.step``.
    """
    if len(ids) == 0:
        return np.zeros((0, 6), np.float32), state, carry
    device = model.embed.weight.device
    inp = torch.from_numpy(np.concatenate([[carry], ids[:-1]]).astype(np.int64)).to(device)
    if mode == "chunk":
        logits, state = model(inp[None], state, donate=True)  # the old state is never read again
        logits = logits[0]
    elif mode == "step":
        rows = []
        for t in range(len(inp)):
            lt, state = model.step(inp[t : t + 1], state)
            rows.append(lt[0])
        logits = torch.stack(rows)
    else:
        raise ValueError(f"mode must be 'chunk' or 'step', got {mode!r}")
    return base_scores(logits, ids), state, int(ids[-1])


def score_sequence(model: LinearTransformerLM, ids: np.ndarray, chunk: int = 8192, mode: str = "chunk") -> np.ndarray:
    """Scores [n, 6] of one whole (in-memory) record: the reference the streaming scan must match."""
    out, state, carry = [], None, BOS
    for i in range(0, len(ids), chunk):
        s, state, carry = score_chunk(model, ids[i : i + chunk], state, carry, mode)
        out.append(s)
    return np.concatenate(out) if out else np.zeros((0, 6), np.float32)


@dataclass
class ScanOptions:
    """What to compute and write. Every field but ``checkpoint_every`` changes the output, so a resume
    must use the same (they are part of the work folder's signature)."""

    tracks: list[str] = field(default_factory=lambda: ["logprob"])
    fmt: str = DEFAULT_FORMAT  # a --format name (strandline.data.tracks.TRACK_FORMATS)
    window: int = 1
    mode: str = "chunk"
    strand_average: bool = False
    chunk: int = 8192  # bases per model call: cache-friendly on CPU; use 65536+ on a GPU
    state_dtype: str = "float64"  # accumulation dtype of the carried state
    checkpoint_every: float = 60.0  # seconds between checkpoints; 0 = after every chunk
    rename: object = None  # --rename as RecordNames.signature(): "accession" or [[old, new], ...] (None: none)
    regions: list | None = None  # --region/--regions: [[record, [[start, end], ...]], ...] (None: every record)
    warmup: int | None = None  # --warmup: bases read before each region, from a fresh state (regions only)

    def names(self) -> RecordNames | None:
        """The record renaming of ``rename`` (``strandline.data.names``), or None."""
        return RecordNames.from_signature(self.rename)

    @property
    def track_format(self) -> TrackFormat:
        """The format ``fmt`` names (``strandline.data.tracks``): its writer, part suffix and finish step."""
        return track_format(self.fmt)


def part_paths(workdir: Path, opts: ScanOptions, shard: int) -> list[Path]:
    """The part files of one shard, one per track, named with the format's part suffix."""
    return [Path(workdir) / f"part{shard}.{t}{opts.track_format.part_suffix}" for t in opts.tracks]


def crc32_range(fd: int, start: int, end: int, crc: int = 0, block: int = 1 << 22) -> int:
    """``zlib.crc32`` of the bytes [start, end) of the open file ``fd``, continuing from ``crc``."""
    for lo in range(start, end, block):
        crc = zlib.crc32(os.pread(fd, min(block, end - lo), lo), crc)
    return crc


def _with_last(chunks: Iterable[FastaChunk]) -> Iterator[tuple[FastaChunk, bool]]:
    """(chunk, is the last chunk of its record), one chunk of look-ahead."""
    prev = None
    for ch in chunks:
        if prev is not None:
            yield prev, ch.offset == 0
        prev = ch
    if prev is not None:
        yield prev, True


class ScanJob:
    """Scan the records ``ordinal % n_shards == shard`` of ``inputs`` into part files under ``workdir``.

    Part files hold the job's records in input order; ``index`` lists each record with its byte span in
    every part file and its summary sums, so parts of several jobs can be merged in input order.
    ``scan_id`` names the scan (a hash of its signature): a checkpoint with another id is refused.
    ``progress`` is called with the number of bases after every chunk. ``file_records`` (name -> file, from
    the input survey) lets a stdin record that repeats a file's name be refused at its header.
    """

    def __init__(
        self, model: LinearTransformerLM, inputs: list[str], workdir: Path, opts: ScanOptions, shard: int = 0,
        n_shards: int = 1, scan_id: str = "", progress: Callable[[int], object] | None = None,
        file_records: dict[str, str] | None = None,
    ):  # fmt: skip
        self.model, self.inputs, self.opts = model, list(inputs), opts
        self.workdir, self.shard, self.n_shards, self.scan_id = Path(workdir), shard, n_shards, scan_id
        self.progress = progress
        self.file_records = file_records or {}  # record name -> input file, from the survey (to check stdin early)
        self.cols = [TRACKS.index(t) for t in opts.tracks]
        self.part_paths = part_paths(self.workdir, opts, shard)
        self.ckpt_path = self.workdir / f"state{shard}.safetensors"
        self.index: list[dict] = []
        self.fhs: list = []
        self.crc: list[int] = []  # crc32 of each part's first crc_end bytes, as of the last checkpoint
        self.crc_end: list[int] = []
        self.writers: list = []
        self.agg: WindowMean | None = None
        self.rec: dict | None = None

    # ---- the loop -------------------------------------------------------------------------------
    def run(self, resume: bool = False) -> list[dict]:
        """Scan, checkpointing as it goes; returns the record index. Resumes from the checkpoint if asked."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        pos, meta, state = (0, 0), None, None
        if resume and self.ckpt_path.exists():
            try:
                state, meta = load_state(self.ckpt_path, device=self.model.embed.weight.device)
            except StateFileError as e:  # a damaged checkpoint: the folder is kept, the message says so
                raise ScanCheckpointError(str(e)) from None
            if (
                not isinstance(meta, dict)
                or meta.get("scan_id") != self.scan_id
                or meta.get("shard") != [self.shard, self.n_shards]
            ):
                raise ScanCheckpointError(f"{self.ckpt_path}: checkpoint is from a different scan")
            if any(k not in meta for k in CHECKPOINT_KEYS):
                raise ScanCheckpointError(f"{self.ckpt_path}: damaged checkpoint (fields missing)")
            pos = tuple(meta["pos"])
        # oneDNN caches a primitive per input shape and each record's last chunk has a new length: with it on,
        # RSS grew with the number of records (1.5 GB after 600 short records); off, it stays flat and as fast
        onednn = torch.backends.mkldnn.enabled
        torch.backends.mkldnn.enabled = False  # set and restored by hand: flags() warns about TF32 on every call
        try:
            self._open_parts(meta)
            self._loop(pos, meta, state)
        finally:
            torch.backends.mkldnn.enabled = onednn
            for fh in self.fhs:
                fh.close()
        return self.index

    def _loop(self, pos: tuple[int, int], meta: dict | None, state: LMState | None) -> None:
        if self.opts.regions is not None:
            self.in_crc = meta["input_crc32"] if meta else 0  # regions read an index, not the whole input
            self._region_loop(pos)
            return
        ordinal, last_ckpt, seen, checked = -1, time.monotonic(), {}, meta is None
        self.in_crc = 0  # crc32 of every record name and base read so far (all shards'), checked on resume
        self.rec = meta["rec"] if meta and pos[1] > 0 else None
        carry = meta["carry"] if meta else BOS
        rename = self.opts.names()
        for path in self.inputs:
            once = reads_once(path)  # stdin or a pipe: not surveyed
            for ch, last in _with_last(read_records(path, self.opts.chunk)):
                if rename is not None:
                    ch.name = rename(ch.name)
                if ch.offset == 0:
                    if ch.name in seen:  # tracks need unique record names (stdin is not in the pre-pass)
                        raise FastaError(f"{path}: record {ch.name!r} already read from {seen[ch.name]}")
                    if once and ch.name in self.file_records:  # as soon as its header is read
                        raise FastaError(f"{path}: record {ch.name!r} is also in {self.file_records[ch.name]}")
                    if once:  # files' names were checked by the survey
                        check_track_name(path, ch.name)
                    seen[ch.name] = path
                    ordinal += 1
                if not checked and (ordinal, ch.offset) >= pos:
                    checked = self._check_input(meta)
                self.in_crc = zlib.crc32(ch.ids, zlib.crc32(ch.name.encode(), self.in_crc))
                if ordinal % self.n_shards != self.shard or (ordinal, ch.offset) < pos:
                    continue
                if ch.offset == 0:
                    state, carry = None, BOS
                    self._start_record(ordinal, ch.name)
                self.rec["u_as_t"] += ch.n_uracil  # RNA U read as T: counted so that the summary says so
                if self.opts.strand_average:
                    self._stage(ch)
                    if last:
                        self._strand_averaged_record()
                else:
                    scores, state, carry = score_chunk(self.model, ch.ids, state, carry, self.opts.mode)
                    self._emit(ch.offset, ch.ids, scores, ch.offset + len(ch.ids) if last else None)
                if last:
                    self._finish_record(ch.offset + len(ch.ids))
                done = last or not self.opts.strand_average
                if done and time.monotonic() - last_ckpt >= self.opts.checkpoint_every:
                    nxt = (ordinal + 1, 0) if last else (ordinal, ch.offset + len(ch.ids))
                    self._checkpoint(nxt, None if last else state, carry)
                    last_ckpt = time.monotonic()
        if not checked:  # the input ended before the checkpoint's position
            self._check_input(meta)

    def _region_loop(self, pos: tuple[int, int]) -> None:
        """Score the spans of ``opts.regions`` through an index (``strandline.tasks.scan.regions``), each after a
        warm-up of ``opts.warmup`` bases read from a fresh state; each record's spans are written as the record.
        Checkpoints fall between records."""
        from strandline.tasks.scan.regions import IndexedGenome

        genome = IndexedGenome(self.inputs, self.opts.names())
        C, last_ckpt = self.opts.chunk, time.monotonic()
        for ordinal, (name, spans) in enumerate(self.opts.regions):
            if ordinal % self.n_shards != self.shard or (ordinal, 0) < pos:
                continue
            length = genome.lengths[name]
            self._start_record(ordinal, name)
            for k, (a, b) in enumerate(spans):
                lo = max(0, a - self.opts.warmup)
                ids = genome.fetch(name, lo, b)
                state, carry = None, BOS
                for i in range(0, a - lo, C):  # the warm-up: scores dropped
                    seg = ids[i : min(i + C, a - lo)]
                    _, state, carry = score_chunk(self.model, seg, state, carry, self.opts.mode)
                    if self.progress is not None:
                        self.progress(len(seg))
                for i in range(a - lo, b - lo, C):
                    j = min(i + C, b - lo)
                    scores, state, carry = score_chunk(self.model, ids[i:j], state, carry, self.opts.mode)
                    last = k == len(spans) - 1 and j == b - lo
                    self._emit(lo + i, ids[i:j], scores, length if last else None)
            self._finish_record(length)
            if time.monotonic() - last_ckpt >= self.opts.checkpoint_every:
                self._checkpoint((ordinal + 1, 0), None, BOS)
                last_ckpt = time.monotonic()

    def _check_input(self, meta: dict) -> bool:
        """Refuse to resume when the bases read up to the checkpoint differ from the killed scan's (stdin, or a
        file edited with its size and modification time kept): the output would stitch two inputs."""
        if self.in_crc != meta["input_crc32"]:
            raise ScanCheckpointError(
                f"{self.ckpt_path}: the input read up to the checkpoint differs from the killed scan's (another stdin or pipe?)"
            )
        return True

    # ---- records, emission ----------------------------------------------------------------------
    def _start_record(self, ordinal: int, name: str) -> None:
        self.agg = WindowMean(self.opts.window, len(self.cols)) if self.opts.window > 1 else None
        self.rec = {
            "ordinal": ordinal, "name": name, "length": 0, "n_count": 0, "scored": 0,
            "sum_bits": 0.0, "sum_entropy": 0.0, "u_as_t": 0, "first_scored": None,
            "start": [fh.tell() for fh in self.fhs],
        }  # fmt: skip

    def _emit(self, offset: int, ids: np.ndarray, scores: np.ndarray, record_end: int | None) -> None:
        """Write the scores [n, 6] of bases offset.. of the current record; ``record_end`` closes it."""
        rec, name = self.rec, self.rec["name"]
        ok = ~np.isnan(scores[:, 0])
        if rec.get("first_scored") is None and ok.any():  # where --plot's default region starts (stdin input)
            rec["first_scored"] = offset + int(np.argmax(ok))
        rec["n_count"] += int((ids == N).sum())
        rec["scored"] += int(ok.sum())
        rec["sum_bits"] -= float(scores[ok, 0].astype(np.float64).sum())
        rec["sum_entropy"] += float(scores[ok, 1].astype(np.float64).sum())
        if self.agg is not None:
            for w, (s, e, v) in zip(self.writers, self.agg.add(offset, scores[:, self.cols], record_end), strict=True):
                w.write(name, s, e, v)
        else:
            starts = offset + np.flatnonzero(ok)
            for w, c in zip(self.writers, self.cols, strict=True):
                w.write(name, starts, starts + 1, scores[ok, c])
        if self.progress is not None:
            self.progress(len(ids))

    def _finish_record(self, length: int) -> None:
        for w in self.writers:
            w.end_record()
        rec = self.rec
        rec["length"] = length
        rec["bytes"] = [fh.tell() - s for fh, s in zip(self.fhs, rec.pop("start"), strict=True)]
        self.index.append(rec)
        self.rec = None

    # ---- strand averaging -----------------------------------------------------------------------
    def _stage(self, ch: FastaChunk) -> None:
        """Append the record's ids to a staging file (the RC pass reads it backwards)."""
        with open(self.workdir / f"rec{self.shard}.ids", "wb" if ch.offset == 0 else "ab") as f:
            f.write(ch.ids.tobytes())

    def _strand_averaged_record(self) -> None:
        ids_path, rc_path = self.workdir / f"rec{self.shard}.ids", self.workdir / f"rec{self.shard}.rc"
        n, C = ids_path.stat().st_size, self.opts.chunk
        row = 6 * 4  # bytes of one re-aligned RC score row (float32)
        with open(ids_path, "rb") as fi, open(rc_path, "w+b") as frc:
            state, carry = None, BOS
            for hi in range(n, 0, -C):  # RC pass: forward positions [lo, hi) in decreasing order
                lo = max(0, hi - C)
                seg = np.frombuffer(os.pread(fi.fileno(), hi - lo, lo), np.uint8)
                rc_scores, state, carry = score_chunk(self.model, reverse_complement(seg), state, carry, self.opts.mode)
                os.pwrite(frc.fileno(), np.ascontiguousarray(rc_scores[::-1][:, RC_ORDER]).tobytes(), lo * row)
            state, carry = None, BOS
            for lo in range(0, n, C):  # forward pass, averaged with the stored RC rows
                k = min(C, n - lo)
                seg = np.frombuffer(os.pread(fi.fileno(), k, lo), np.uint8)
                fwd, state, carry = score_chunk(self.model, seg, state, carry, self.opts.mode)
                rc = np.frombuffer(os.pread(frc.fileno(), k * row, lo * row), np.float32).reshape(k, 6)
                self._emit(lo, seg, (fwd + rc) / 2, n if lo + k == n else None)
        ids_path.unlink()
        rc_path.unlink()

    # ---- part files and checkpoints -------------------------------------------------------------
    def _open_parts(self, meta: dict | None) -> None:
        self.fhs = []
        for i, p in enumerate(self.part_paths):
            if meta:  # drop whatever was written after the checkpoint; a shorter part is damage, not padding
                size = p.stat().st_size if p.exists() else -1
                if size < meta["bytes"][i]:
                    got = "is missing" if size < 0 else f"has {size} bytes"
                    raise ScanCheckpointError(f"{p}: part file {got}, its checkpoint says {meta['bytes'][i]}")
            fh = open(p, "r+b" if meta else "w+b")  # noqa: SIM115 - closed in run()
            self.fhs.append(fh)
            if meta:  # bytes changed inside the checkpointed prefix would be carried into the output
                if crc32_range(fh.fileno(), 0, meta["bytes"][i]) != meta["crc32"][i]:
                    raise ScanCheckpointError(f"{p}: part file was changed since its checkpoint (its checksum differs)")
                fh.truncate(meta["bytes"][i])
                fh.seek(meta["bytes"][i])
        self.crc = list(meta["crc32"]) if meta else [0] * len(self.fhs)
        self.crc_end = list(meta["bytes"]) if meta else [0] * len(self.fhs)
        self.writers = [self.opts.track_format.writer(fh) for fh in self.fhs]
        self.agg = WindowMean(self.opts.window, len(self.cols)) if self.opts.window > 1 else None
        if meta:
            self.index = meta["index"]
            for w, s in zip(self.writers, meta["writers"], strict=True):
                w.set_state(s)
            if self.agg is not None and meta.get("agg"):
                self.agg.set_state(meta["agg"])

    def _checkpoint(self, pos: tuple[int, int], state: LMState | None, carry: int) -> None:
        """Flush the parts, then atomically save the state with the byte length each part must have."""
        for i, fh in enumerate(self.fhs):
            fh.flush()
            os.fsync(fh.fileno())
            self.crc[i] = crc32_range(fh.fileno(), self.crc_end[i], fh.tell(), self.crc[i])  # only the new bytes
            self.crc_end[i] = fh.tell()
        meta = {
            "scan_id": self.scan_id, "shard": [self.shard, self.n_shards], "pos": list(pos), "carry": carry,
            "rec": self.rec, "bytes": [fh.tell() for fh in self.fhs], "crc32": self.crc, "input_crc32": self.in_crc,
            "writers": [w.get_state() for w in self.writers],
            "agg": self.agg.get_state() if self.agg is not None else None, "index": self.index,
        }  # fmt: skip
        try:
            save_state(state, self.ckpt_path, meta)
        except SafetensorError as e:  # safetensors wraps the OS error (a full disk) in its own type
            code = re.search(r"os error (\d+)", str(e))
            if code is None:
                raise
            raise OSError(int(code[1]), os.strerror(int(code[1])), str(self.ckpt_path)) from None

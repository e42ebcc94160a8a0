"""The genome-scanning engine: FASTA records through the LM chunk by chunk, carrying the recurrent state.

Each record is read as chunks of ``chunk`` bases (``data.fasta.iter_fasta``) and fed to the model in
chunked mode, the state carried from chunk to chunk and reset at every record. This is exactly what
feeding one base at a time with ``model.step`` gives (``mode="step"``, kept for input that arrives as a
stream and for checking), up to float32 rounding of the per-chunk products. The carried state is kept
in float64 by default (``load_for_scan``), so it does not stall on chromosome-length records.

Scores (ARCHITECTURE.md §7): the score at base i is about base i given the bases < i of its record; the
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
part file, the writers' open runs, the window sums and the summary sums, at chunk boundaries. Chunk
boundaries are fixed by the record offsets, so a resumed scan recomputes exactly the same chunks and
ends byte-identical to an uninterrupted one.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from data.fasta import FastaChunk, FastaError, iter_fasta
from data.tokenizers import BOS, COMPLEMENT, A, N
from data.tracks import EXTENSIONS, WindowMean, make_writer
from models import LinearTransformerLM, load, load_state, save_state

TRACKS = ("logprob", "entropy", "A", "C", "G", "T")
RC_ORDER = [0, 1, 5, 4, 3, 2]  # RC columns re-aligned to the forward strand: A<-T, C<-G, G<-C, T<-A
LN2 = math.log(2.0)


class ScanCheckpointError(ValueError):
    """A checkpoint that does not belong to this scan (other inputs or options); one line for users."""


class ScanInterrupted(RuntimeError):
    """Raised by the test hook ``ScanJob.stop_after`` to simulate a kill between two chunks."""


def load_for_scan(path: str, state_dtype: str = "float64") -> LinearTransformerLM:
    """Load a model for scanning with its carried state accumulated in ``state_dtype``."""
    model = load(path)
    model.config.state_dtype = state_dtype  # every layer reads the shared config when it builds a state
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
    model: LinearTransformerLM, ids: np.ndarray, state: tuple | None, carry: int, mode: str = "chunk"
) -> tuple[np.ndarray, tuple, int]:
    """Score ``ids`` [n] uint8 that follow ``carry`` (the previous base, or BOS) and ``state``.

    Returns (scores [n, 6] float32, new state, new carry). ``mode="chunk"`` runs one chunked pass;
    ``"step"`` feeds one base at a time through ``model.step``.
    """
    if len(ids) == 0:
        return np.zeros((0, 6), np.float32), state, carry
    device = model.embed.weight.device
    inp = torch.from_numpy(np.concatenate([[carry], ids[:-1]]).astype(np.int64)).to(device)
    if mode == "chunk":
        logits, state = model(inp[None], state)
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
    """What to compute and write; part of a checkpoint's signature (a resume must use the same)."""

    tracks: list[str] = field(default_factory=lambda: ["logprob"])
    fmt: str = "bedgraph"
    window: int = 1
    mode: str = "chunk"
    strand_average: bool = False
    chunk: int = 8192  # bases per model call: cache-friendly on CPU; use 65536+ on a GPU
    checkpoint_every: float = 60.0  # seconds between checkpoints; 0 = after every chunk


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
    every part file and its summary, so parts of several jobs can be merged in input order.
    """

    stop_after: int | None = None
    """Test hook: raise ``ScanInterrupted`` after this many chunks (a kill between two chunks)."""

    def __init__(self, model, inputs: list[str], workdir: Path, opts: ScanOptions, shard: int = 0, n_shards: int = 1):
        self.model, self.inputs, self.opts = model, list(inputs), opts
        self.workdir, self.shard, self.n_shards = Path(workdir), shard, n_shards
        self.cols = [TRACKS.index(t) for t in opts.tracks]
        ext = ".bin" if opts.fmt == "bigwig" else EXTENSIONS[opts.fmt]
        self.part_paths = [self.workdir / f"part{shard}.{t}{ext}" for t in opts.tracks]
        self.ckpt_path = self.workdir / f"state{shard}.safetensors"
        self.index: list[dict] = []
        self.progress = None  # a tqdm-like object with update(n), or None

    def signature(self) -> dict:
        return {"inputs": self.inputs, "shard": self.shard, "n_shards": self.n_shards, **asdict(self.opts)}

    # ---- the loop -------------------------------------------------------------------------------
    def run(self, resume: bool = False) -> list[dict]:
        """Scan, checkpointing as it goes; returns the record index. Resumes from the checkpoint if asked."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        pos, meta, state = (0, 0), None, None
        if resume and self.ckpt_path.exists():
            state, meta = load_state(self.ckpt_path, device=self.model.embed.weight.device)
            if meta.get("signature") != json.loads(json.dumps(self.signature())):
                raise ScanCheckpointError(
                    f"{self.ckpt_path}: checkpoint is from a different scan (inputs or options differ)"
                )
            pos = tuple(meta["pos"])
        self._open_parts(meta)
        # oneDNN caches a primitive per input shape and each record's last chunk has a new length: with it on,
        # RSS grew with the number of records (1.5 GB after 600 short records); off, it stays flat and as fast
        onednn = torch.backends.mkldnn.enabled
        torch.backends.mkldnn.enabled = False  # set and restored by hand: flags() warns about TF32 on every call
        try:
            self._loop(pos, meta, state or None)
        finally:
            torch.backends.mkldnn.enabled = onednn
            for fh in self.fhs:
                fh.close()
        return self.index

    def _loop(self, pos: tuple[int, int], meta: dict | None, state) -> None:
        ordinal, n_chunks, last_ckpt, seen = -1, 0, time.monotonic(), {}
        self.rec = meta["rec"] if meta and pos[1] > 0 else None
        carry = meta["carry"] if meta else BOS
        for path in self.inputs:
            for ch, last in _with_last(iter_fasta(path, self.opts.chunk)):
                if ch.offset == 0:
                    if ch.name in seen:  # tracks need unique record names; iter_fasta checks within a file
                        raise FastaError(f"{path}: record {ch.name!r} already read from {seen[ch.name]}")
                    seen[ch.name] = path
                    ordinal += 1
                if ordinal % self.n_shards != self.shard or (ordinal, ch.offset) < pos:
                    continue
                if ch.offset == 0:
                    state, carry = None, BOS
                    self._start_record(ordinal, ch.name)
                if self.opts.strand_average:
                    self._stage(ch, last)
                    if last:
                        self._strand_averaged_record()
                else:
                    scores, state, carry = score_chunk(self.model, ch.ids, state, carry, self.opts.mode)
                    self._emit(ch.offset, ch.ids, scores, ch.offset + len(ch.ids) if last else None)
                if last:
                    self._finish_record(ch.offset + len(ch.ids))
                n_chunks += 1
                done = last or not self.opts.strand_average
                if done and time.monotonic() - last_ckpt >= self.opts.checkpoint_every:
                    nxt = (ordinal + 1, 0) if last else (ordinal, ch.offset + len(ch.ids))
                    self._checkpoint(nxt, None if last else state, carry)
                    last_ckpt = time.monotonic()
                if self.stop_after is not None and n_chunks >= self.stop_after:
                    raise ScanInterrupted(f"stopped after {n_chunks} chunks (test hook)")

    # ---- records, emission ----------------------------------------------------------------------
    def _start_record(self, ordinal: int, name: str) -> None:
        self.agg = WindowMean(self.opts.window, len(self.cols)) if self.opts.window > 1 else None
        self.rec = {
            "ordinal": ordinal, "name": name, "length": 0, "n_count": 0, "scored": 0,
            "sum_bits": 0.0, "sum_entropy": 0.0, "start": [fh.tell() for fh in self.fhs],
        }  # fmt: skip

    def _emit(self, offset: int, ids: np.ndarray, scores: np.ndarray, record_end: int | None) -> None:
        """Write the scores [n, 6] of bases offset.. of the current record; ``record_end`` closes it."""
        rec, name = self.rec, self.rec["name"]
        ok = ~np.isnan(scores[:, 0])
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
            self.progress.update(len(ids))

    def _finish_record(self, length: int) -> None:
        for w in self.writers:
            w.end_record()
        rec = self.rec
        rec["length"] = length
        rec["bytes"] = [fh.tell() - s for fh, s in zip(self.fhs, rec.pop("start"), strict=True)]
        self.index.append(rec)
        self.rec = None

    # ---- strand averaging -----------------------------------------------------------------------
    def _stage(self, ch: FastaChunk, last: bool) -> None:
        """Append the record's ids to a staging file (the RC pass reads it backwards)."""
        mode = "wb" if ch.offset == 0 else "ab"
        with open(self.workdir / f"rec{self.shard}.ids", mode) as f:
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
                rc_scores, state, carry = score_chunk(self.model, COMPLEMENT[seg[::-1]], state, carry, self.opts.mode)
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
            fh = open(p, "r+b" if meta and p.exists() else "w+b")  # noqa: SIM115 - closed in run()
            if meta:  # drop whatever was written after the checkpoint
                fh.truncate(meta["bytes"][i])
                fh.seek(meta["bytes"][i])
            self.fhs.append(fh)
        self.writers = [make_writer(self.opts.fmt, fh) for fh in self.fhs]
        self.agg = WindowMean(self.opts.window, len(self.cols)) if self.opts.window > 1 else None
        if meta:
            self.index = meta["index"]
            for w, s in zip(self.writers, meta["writers"], strict=True):
                w.set_state(s)
            if self.agg is not None and meta.get("agg"):
                self.agg.set_state(meta["agg"])

    def _checkpoint(self, pos: tuple[int, int], state, carry: int) -> None:
        """Flush the parts, then atomically save the state with the byte length each part must have."""
        for fh in self.fhs:
            fh.flush()
            os.fsync(fh.fileno())
        meta = {
            "signature": self.signature(), "pos": list(pos), "carry": carry, "rec": self.rec,
            "bytes": [fh.tell() for fh in self.fhs], "writers": [w.get_state() for w in self.writers],
            "agg": self.agg.get_state() if self.agg is not None else None, "index": self.index,
        }  # fmt: skip
        save_state(state if state is not None else (), self.ckpt_path, meta)


# ---- Lightning predict (DDP): each rank scans whole records into its own part files ------------------
# The Lightning classes are built on first use (module ``__getattr__``) so that ``strandline scan`` without
# ``--devices`` never pays Lightning's import time; they still live at module level, so they pickle.


def predict_scan(
    model: str, inputs: list[str], workdir: Path, opts: ScanOptions, state_dtype: str, devices: int,
    accelerator: str = "cpu", resume: bool = False,
) -> list[tuple[list[dict], list[Path]]] | None:  # fmt: skip
    """Scan with ``Trainer.predict`` on ``devices`` ranks (DDP when > 1), rank r taking records ``i % world == r``.

    Returns on rank 0 the (index, part paths) of every rank for ``app.scan`` to merge, and None on other
    ranks. Launch it like any Lightning DDP script (one process per device; Lightning starts them on a
    single machine, torchrun/srun on clusters).
    """
    import lightning as L

    module_cls, writer_cls = _lightning_classes()
    writer = writer_cls(workdir)
    trainer = L.Trainer(
        accelerator=accelerator, devices=devices, strategy="ddp" if devices > 1 else "auto",
        use_distributed_sampler=False, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, callbacks=[writer],
    )  # fmt: skip
    module = module_cls(model, inputs, workdir, opts, state_dtype, resume)
    trainer.predict(module, return_predictions=False)
    trainer.strategy.barrier()  # every rank has written its index before rank 0 merges
    if trainer.global_rank != 0:
        return None
    out = []
    for r in range(trainer.world_size):
        index = json.loads((Path(workdir) / f"index{r}.json").read_text())
        ext = ".bin" if opts.fmt == "bigwig" else EXTENSIONS[opts.fmt]
        out.append((index, [Path(workdir) / f"part{r}.{t}{ext}" for t in opts.tracks]))
    return out


def _lightning_classes() -> tuple[type, type]:
    if "ScanPredictModule" in globals():
        return globals()["ScanPredictModule"], globals()["ScanPredictionWriter"]
    import lightning as L
    from lightning.pytorch.callbacks import BasePredictionWriter

    class ScanPredictModule(L.LightningModule):
        """Holds the LM; its predict data is one item per rank: that rank's share of the records."""

        def __init__(self, model: str, inputs, workdir, opts: ScanOptions, state_dtype: str, resume: bool):
            super().__init__()
            self.lm = load_for_scan(model, state_dtype)
            self.inputs, self.workdir, self.opts, self.resume = list(inputs), Path(workdir), opts, resume

        def predict_dataloader(self):
            rank, world = self.trainer.global_rank, self.trainer.world_size
            if self.device.type == "cpu":  # ranks share the cores
                torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
            return torch.utils.data.DataLoader([(rank, world)], batch_size=None)

        def predict_step(self, batch, batch_idx: int = 0):
            rank, world = batch
            job = ScanJob(self.lm, self.inputs, self.workdir, self.opts, shard=int(rank), n_shards=int(world))
            job.resume = self.resume
            return job  # run lazily by the writer, which streams it into this rank's files

    class ScanPredictionWriter(BasePredictionWriter):
        """Streams each rank's records into ``part{rank}.*`` files and writes ``index{rank}.json``."""

        def __init__(self, workdir):
            super().__init__(write_interval="batch")
            self.workdir = Path(workdir)

        def write_on_batch_end(self, trainer, pl_module, prediction, batch_indices, batch, batch_idx, dataloader_idx):
            index = prediction.run(resume=prediction.resume)
            tmp = self.workdir / f"index{prediction.shard}.json.tmp"
            tmp.write_text(json.dumps(index))
            os.replace(tmp, self.workdir / f"index{prediction.shard}.json")

    for cls in (ScanPredictModule, ScanPredictionWriter):
        cls.__module__, cls.__qualname__ = __name__, cls.__name__
        globals()[cls.__name__] = cls
    return ScanPredictModule, ScanPredictionWriter


def __getattr__(name: str):
    if name in ("ScanPredictModule", "ScanPredictionWriter"):
        return dict(zip(("ScanPredictModule", "ScanPredictionWriter"), _lightning_classes(), strict=True))[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

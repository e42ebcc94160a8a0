"""``DNADataModule``: FASTA paths/globs/directories -> batches of windows for ``strandline.tasks.lm.LMTask``.

Batch format (shared with the text DataModule): ``{"input": LongTensor[B, T], "target": LongTensor[B, T]
(next base; -100 for N and padding), "reset": BoolTensor[B]}``.

Two modes:

- random windows (default): training windows start anywhere in the train spans, drawn from a generator seeded by
  ``(seed, epoch, index)`` so a run is reproducible and resumes at the same data; each window is
  reverse-complemented with probability ``rc_prob``. Validation/test tile the held-out spans.
- ``sequential=True`` (truncated BPTT): each split is cut into ``batch_size`` lanes; row b of consecutive
  batches walks lane b's windows in order, and ``reset`` marks the first window of each span. One worker and one
  rank own each lane (under DDP each rank takes its own lanes), so the order holds. No RC augmentation here.

``repeat_prob`` > 0 (training windows only, either mode): with that probability a window gets a synthetic repeat,
a random segment of it copied to a later place in the same window (``strandline.data.dna.insert_repeat``), so that training
rewards copying from context. Validation and test windows are never changed.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import lightning as L
import numpy as np
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, IterableDataset, Sampler

from strandline.data.batch import make_sample, stack_samples
from strandline.data.dna import (
    SPLITS,
    DNADataError,
    Genome,
    Span,
    insert_repeat,
    lanes,
    make_example,
    read_bed_splits,
    sample_window,
    span_weights,
    split_auto,
    split_by_records,
    tile_windows,
)
from strandline.data.tokenizers import reverse_complement


def _rank_world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class Repeats(NamedTuple):
    """The synthetic-repeat option of training windows (see the module docstring)."""

    prob: float
    min_len: int
    max_len: int
    mutation: float

    def maybe_insert(self, ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """``ids`` with a repeat inserted with probability ``prob`` (no draw at all when ``prob`` is 0)."""
        if self.prob <= 0 or not rng.random() < self.prob:
            return ids
        return insert_repeat(ids, rng, self.min_len, self.max_len, self.mutation)[0]


def _example(
    genome: Genome,
    sp: Span,
    start: int,
    window: int,
    rc: bool,
    reset: bool,
    repeats: Repeats | None = None,
    rng: np.random.Generator | None = None,
) -> dict:
    ids = np.asarray(genome.fetch(sp.record, start, min(start + window + 1, sp.end)))
    if repeats is not None:
        ids = repeats.maybe_insert(ids, rng)
    if rc:
        ids = reverse_complement(ids)
    return make_sample(*make_example(ids, window), reset=reset)


class RandomWindows(Dataset):
    """``n`` random training windows per epoch; item ``epoch * n + i`` is fixed by ``(seed, epoch, i)``."""

    def __init__(
        self,
        genome: Genome,
        spans: list[Span],
        window: int,
        n: int,
        seed: int = 0,
        rc_prob: float = 0.5,
        repeats: Repeats | None = None,
        weights: np.ndarray | None = None,
    ):
        self.genome, self.spans, self.window, self.n, self.seed, self.rc_prob = genome, spans, window, n, seed, rc_prob
        self.repeats, self.weights = repeats, weights

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, k: int) -> dict:
        epoch, i = divmod(int(k), self.n)
        rng = np.random.default_rng([self.seed, epoch, i])
        sp, start = sample_window(self.spans, self.window, rng, self.weights)
        rc = bool(rng.random() < self.rc_prob)  # drawn first: windows without repeats are those of older runs
        return _example(self.genome, sp, start, self.window, rc, reset=True, repeats=self.repeats, rng=rng)


class EpochSampler(Sampler[int]):
    """Indices ``epoch * n + i`` for this rank's share of ``i``; Lightning calls ``set_epoch`` each epoch."""

    def __init__(self, n: int):
        self.n, self.epoch = n, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        rank, world = _rank_world()
        return iter(range(self.epoch * self.n + rank, (self.epoch + 1) * self.n, world))

    def __len__(self) -> int:
        rank, world = _rank_world()
        return len(range(rank, self.n, world))


class TiledWindows(Dataset):
    """Deterministic windows covering held-out spans (every base but each span's first is scored once)."""

    def __init__(self, genome: Genome, spans: list[Span], window: int, max_windows: int | None = None):
        self.genome, self.window = genome, window
        self.items = tile_windows(spans, window)
        if max_windows and len(self.items) > max_windows:  # evenly spaced subset, still deterministic
            keep = np.linspace(0, len(self.items) - 1, max_windows).round().astype(int)
            self.items = [self.items[i] for i in keep]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict:
        sp, start = self.items[i]
        return _example(self.genome, sp, start, self.window, rc=False, reset=True)


class LaneBatches(IterableDataset):
    """Whole batches [B, T] whose row b walks lane b in order (truncated BPTT); yields ``ceil(lane/T)`` batches.

    With ``repeats``, window j of lane b draws its repeat from a generator seeded by ``(seed, b, j)``.
    """

    def __init__(
        self,
        genome: Genome,
        spans: list[Span],
        window: int,
        batch_size: int,
        repeats: Repeats | None = None,
        seed: int = 0,
    ):
        self.genome, self.spans, self.window, self.batch_size = genome, spans, window, batch_size
        self.repeats, self.seed = repeats, seed

    def _lane_windows(self, lane: list[Span], b: int):
        j = 0
        for sp in lane:
            for s in range(sp.start, sp.end - 1, self.window):
                rng = np.random.default_rng([self.seed, b, j]) if self.repeats else None
                yield _example(self.genome, sp, s, self.window, False, s == sp.start, self.repeats, rng)
                j += 1

    def __iter__(self):
        rank, world = _rank_world()
        all_lanes = lanes(self.spans, self.batch_size * world)
        mine = all_lanes[rank * self.batch_size : (rank + 1) * self.batch_size]
        n_steps = max(self._n_windows(lane) for lane in all_lanes)  # equal on every rank: no DDP hang
        its = [self._lane_windows(lane, rank * self.batch_size + i) for i, lane in enumerate(mine)]
        empty = make_sample(*make_example(np.zeros(0, np.uint8), self.window), reset=True)
        for _ in range(n_steps):
            yield stack_samples([next(it, empty) for it in its])

    def _n_windows(self, lane: list[Span]) -> int:
        return sum(math.ceil((len(sp) - 1) / self.window) for sp in lane if len(sp) > 1)


def _check_options(
    window, batch_size, samples_per_epoch, val_fraction, test_fraction, rc_prob, eval_window, repeats: Repeats
) -> None:
    """One line for an option that cannot work, before any file is read."""
    for name, v in (("window", window), ("batch_size", batch_size), ("samples_per_epoch", samples_per_epoch)):
        if v < 1:
            raise DNADataError(f"data.{name} must be >= 1, got {v}")
    if eval_window is not None and eval_window < 1:
        raise DNADataError(f"data.eval_window must be >= 1 or null, got {eval_window}")
    if not (0 <= val_fraction < 1 and 0 <= test_fraction < 1 and val_fraction + test_fraction < 1):
        raise DNADataError(
            f"data.val_fraction + test_fraction must lie in [0, 1), got {val_fraction} + {test_fraction}"
        )
    if not 0 <= rc_prob <= 1:
        raise DNADataError(f"data.rc_prob must lie in [0, 1], got {rc_prob}")
    if not (0 <= repeats.prob <= 1 and 0 <= repeats.mutation <= 1):
        raise DNADataError(
            f"data.repeat_prob and repeat_mutation must lie in [0, 1], got {repeats.prob} and {repeats.mutation}"
        )
    if not 1 <= repeats.min_len <= repeats.max_len:
        raise DNADataError(
            f"data.repeat_min_len must be >= 1 and <= repeat_max_len, got {repeats.min_len} and {repeats.max_len}"
        )


def _as_list(paths: list[str] | str | None) -> list[str]:
    return [] if not paths else [paths] if isinstance(paths, str) else list(paths)


class DNADataModule(L.LightningDataModule):
    """Windows of DNA from FASTA files for next-base prediction."""

    tokenizer_kind = "dna"  # the tokens it gives (strandline.data.tokenizers.datamodule_tokenizer)

    def __init__(
        self,
        paths: list[str] | str,
        window: int = 1024,
        batch_size: int = 8,
        samples_per_epoch: int = 1024,
        splits_bed: str | None = None,
        val_records: list[str] | None = None,
        test_records: list[str] | None = None,
        val_fraction: float = 0.05,
        test_fraction: float = 0.05,
        rc_prob: float = 0.5,
        sequential: bool = False,
        eval_window: int | None = None,
        max_eval_windows: int | None = None,
        num_workers: int = 0,
        seed: int = 0,
        cache_dir: str | None = None,
        repeat_prob: float = 0.0,
        repeat_min_len: int = 50,
        repeat_max_len: int = 2000,
        repeat_mutation: float = 0.0,
        file_balance: float = 1.0,
        val_paths: list[str] | str | None = None,
        test_paths: list[str] | str | None = None,
    ):
        """Args:
        paths: FASTA files, globs or directories (plain, .gz/BGZF, .xz, .bz2).
        window: tokens per training window (T); each window reads T+1 bases.
        batch_size: windows per batch (per device).
        samples_per_epoch: random training windows per epoch (ignored when ``sequential``).
        splits_bed: BED file ``chrom start end split`` (train/val/test); overrides the other split options.
        val_records: records held out whole for validation.
        test_records: records held out whole for testing.
        val_fraction: without a BED or record lists: fraction at the end of every record held out for val...
        test_fraction: ...and for test (after the val span).
        rc_prob: probability of reverse-complementing a training window.
        sequential: truncated-BPTT batches (rows walk their lane in order); pair with ``long_context: tbptt``.
        eval_window: window of val/test (default: ``window``).
        max_eval_windows: cap on val/test windows (evenly spaced), for quick validation of big genomes.
        num_workers: DataLoader workers (sequential mode uses at most one, to keep order).
        seed: seed of the training windows.
        cache_dir: where uint8 caches go (default: beside each FASTA if writable, else ~/.cache/strandline).
        repeat_prob: probability that a training window gets a synthetic repeat (a segment copied later in it).
        repeat_min_len: shortest repeated segment (bases).
        repeat_max_len: longest repeated segment (bases; at most half the window).
        repeat_mutation: per-base substitution probability inside the copy.
        file_balance: random training windows: each FASTA file's share ∝ (its training bases) ** file_balance;
            1 (default): every base alike, 0: every file alike, 0.5: a multi-genome corpus where one long
            chromosome would otherwise drown the bacteria.
        val_paths: FASTA files whose records are all held out whole for validation (genomes the training never
            reads: selection on unseen genomes); read beside ``paths``, like ``val_records``.
        test_paths: the same for testing.
        """
        super().__init__()
        self.repeats = Repeats(repeat_prob, repeat_min_len, repeat_max_len, repeat_mutation)
        _check_options(
            window, batch_size, samples_per_epoch, val_fraction, test_fraction, rc_prob, eval_window, self.repeats
        )
        if not (math.isfinite(file_balance) and 0 <= file_balance <= 1):
            raise DNADataError(f"data.file_balance must lie in [0, 1], got {file_balance}")
        self.save_hyperparameters()
        self.genome: Genome | None = None
        self.spans: dict[str, list[Span]] = {}

    def setup(self, stage: str | None = None) -> None:
        if self.genome is not None:
            return
        hp = self.hparams
        held = {"val": _as_list(hp.val_paths), "test": _as_list(hp.test_paths)}
        self.genome = Genome(_as_list(hp.paths) + held["val"] + held["test"], hp.cache_dir)
        if hp.splits_bed:
            spans = read_bed_splits(hp.splits_bed, self.genome.lengths)
        elif hp.val_records or hp.test_records or held["val"] or held["test"]:
            whole = {s: (Genome(files, hp.cache_dir).names if files else []) for s, files in held.items()}
            val, test = (hp.val_records or []) + whole["val"], (hp.test_records or []) + whole["test"]
            spans = split_by_records(self.genome.lengths, val, test)
        else:
            spans = split_auto(self.genome.lengths, hp.val_fraction, hp.test_fraction)
        self.spans = {s: [sp for sp in spans if sp.split == s] for s in SPLITS}

    def _loader(self, ds, **kw) -> DataLoader:
        return DataLoader(ds, num_workers=self.hparams.num_workers, persistent_workers=False, **kw)

    def train_dataloader(self) -> DataLoader:
        return self._split_loader("train")

    def val_dataloader(self) -> DataLoader:
        return self._split_loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._split_loader("test")

    def check_stage(self, stage: str) -> None:
        """Read the inputs and check that the splits a stage needs have bases, before the Trainer starts.

        Called by the CLI before fit/validate/test, so a bad input ends with one line before any logger
        or checkpoint folder is created. Raises ``DNADataError`` naming the files and what is short.
        """
        self.setup(stage)
        needed = {"fit": ("train", "val"), "validate": ("val",), "test": ("test",)}.get(stage, ())
        for split in needed:
            self._usable_spans(split)
        for cache in self.genome.caches:  # a file of N only (or of no DNA) would train on nothing, silently
            if cache.lengths and not cache.has_bases():
                raise DNADataError(f"{cache.fasta}: no A/C/G/T bases (every base is N or not DNA)")

    def _usable_spans(self, split: str) -> list[Span]:
        """The spans of ``split`` that hold a window (at least 2 bases: one input, one target)."""
        spans = [sp for sp in self.spans.get(split) or [] if len(sp) >= 2]
        if not spans:
            raise DNADataError(self._why_empty(split))
        return spans

    def _why_empty(self, split: str) -> str:
        hp, lengths = self.hparams, self.genome.lengths
        files = ", ".join(str(c.fasta) for c in self.genome.caches)
        total = sum(lengths.values())
        if total == 0:
            return f"{files}: every record is empty (no bases to train on)"
        if hp.splits_bed:
            return f"{hp.splits_bed}: no {split} interval of 2 or more bases (column 4 names train, val or test)"
        if hp.val_records or hp.test_records:
            if split == "train":
                return f"{files}: every record is held out in val_records/test_records; none is left to train on"
            return f"{files}: no {split} bases: give {split}_records (records named for {split}), or use fractions"
        frac = {"train": 1 - hp.val_fraction - hp.test_fraction, "val": hp.val_fraction, "test": hp.test_fraction}
        need = math.ceil(2 / frac[split]) if frac[split] > 0 else None
        longest = max(lengths.values())
        what = f"{split}_fraction" if split != "train" else "1 - val_fraction - test_fraction"
        hint = f"records of at least {need} bases" if need else f"{what} > 0"
        return (
            f"{files}: the {split} split is empty: {len(lengths)} record(s) of at most {longest} bases are too short "
            f"for {what} = {frac[split]:g} (needs {hint}, or set val_records/test_records/splits_bed)"
        )

    def _split_loader(self, split: str) -> DataLoader:
        hp = self.hparams
        spans = self._usable_spans(split)
        window = hp.window if split == "train" else (hp.eval_window or hp.window)
        repeats = self.repeats if split == "train" and self.repeats.prob > 0 else None  # held-out data: never
        if hp.sequential:
            ds = LaneBatches(self.genome, spans, window, hp.batch_size, repeats, hp.seed)
            return DataLoader(ds, batch_size=None, num_workers=min(1, hp.num_workers))
        if split == "train":
            weights = span_weights(spans, self.genome.file_of(), hp.file_balance)
            ds = RandomWindows(self.genome, spans, window, hp.samples_per_epoch, hp.seed, hp.rc_prob, repeats, weights)
            return self._loader(ds, batch_size=hp.batch_size, sampler=EpochSampler(len(ds)), drop_last=True)
        ds = TiledWindows(self.genome, spans, window, hp.max_eval_windows)
        return self._loader(ds, batch_size=hp.batch_size, shuffle=False)

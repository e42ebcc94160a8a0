"""Callbacks for long-context training: sequence-length warmup and a tokens-per-second meter."""

from __future__ import annotations

import math
import time

import lightning as L
from lightning.pytorch.callbacks import Callback, ModelCheckpoint


def warmup_seq_len(step: int, min_len: int, max_len: int, warmup_steps: int) -> int:
    """Training length at ``step``: doubles from ``min_len`` to ``max_len`` in equal stages over ``warmup_steps``.

    Powers-of-two multiples of ``min_len`` so that a window of ``max_len`` reshapes into whole rows.
    """
    if step >= warmup_steps or min_len >= max_len:
        return max_len
    n_stages = int(math.log2(max_len // min_len)) + 1
    stage = step * n_stages // warmup_steps
    return min(max_len, min_len * 2**stage)


class SeqLenWarmup(Callback):
    """Sequence-length warmup (hyena-dna's ``SeqlenWarmupReload``) with constant tokens per batch.

    Instead of reloading the data at each stage, every [B, T] training batch is viewed as
    [B·T/L, L] rows of the current length L (see ``LMTask._crop``), so the batch keeps T·B tokens while the
    context grows: L = min_len, 2·min_len, ... up to T over ``warmup_steps`` optimizer steps. Only for
    ``long_context: full`` (truncated BPTT needs whole windows in order).
    """

    def __init__(self, min_len: int = 1024, warmup_steps: int = 1000):
        """Args:
        min_len: context length at step 0; must divide the window length (powers of two do).
        warmup_steps: optimizer steps until the full window length is used.
        """
        self.min_len, self.warmup_steps = min_len, warmup_steps

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch, batch_idx: int) -> None:
        T = batch["input"].shape[1]
        L_ = warmup_seq_len(trainer.global_step, self.min_len, T, self.warmup_steps)
        pl_module.train_seq_len = L_ if L_ < T else None
        pl_module.log("train/seq_len", float(L_), on_step=True, on_epoch=False)


class TokensPerSecond(Callback):
    """Logs ``train/tokens_per_s`` (input tokens, this rank) averaged over each logging interval."""

    def __init__(self):
        self._t0: float | None = None
        self._tokens = 0

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx) -> None:
        now = time.perf_counter()
        self._tokens += int(batch["input"].numel())
        if self._t0 is None:
            self._t0, self._tokens = now, 0  # the first batch includes warm-up costs
            return
        if (batch_idx + 1) % max(1, trainer.log_every_n_steps) == 0 and now > self._t0:
            pl_module.log("train/tokens_per_s", self._tokens / (now - self._t0), on_step=True, on_epoch=False)
            self._t0, self._tokens = now, 0


class LatestCheckpoint(ModelCheckpoint):
    """``ModelCheckpoint`` whose ``last.ckpt`` is always the run's latest state: written after every validation
    and when training ends, besides the best-by-monitor files.

    Lightning 2.6 writes ``last.ckpt`` only when it saves another checkpoint, so with a monitor it is the best
    step's copy: ``--ckpt_path last`` went back to the best validation, and the weights of a run whose validation
    never improved again after some step were never written.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._latest_step: int | None = None

    def _save_last_checkpoint(self, trainer: L.Trainer, monitor_candidates: dict) -> None:
        super()._save_last_checkpoint(trainer, monitor_candidates)
        if self.save_last:
            self._latest_step = trainer.global_step

    def _save_latest(self, trainer: L.Trainer) -> None:
        if self.save_last and self._latest_step != trainer.global_step and not trainer.sanity_checking:
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_validation_end(trainer, pl_module)
        if not self._should_skip_saving_checkpoint(trainer):
            self._save_latest(trainer)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_end(trainer, pl_module)
        self._save_latest(trainer)

"""Genome scanning through Lightning ``Trainer.predict`` (DDP): each rank scans whole records.

Imported only when ``scan(..., devices=N)`` asks for it, so a plain scan never pays Lightning's import time.
Rank r takes the records whose index is r modulo the world size (``use_distributed_sampler=False``: the
predict data is one item per rank, its share), runs a ``ScanJob`` into ``part{r}.*`` in the shared work
folder, and writes ``index{r}.json``; rank 0 merges after a barrier (``strandline.tasks.scan``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import BasePredictionWriter

from strandline.files import atomic_write_text
from strandline.tasks.scan.job import ScanJob, ScanOptions, load_for_scan, part_paths


class ScanPredictModule(L.LightningModule):
    """Holds the LM; its predict data is one item per rank: that rank's share of the records."""

    def __init__(self, model: str, inputs: list[str], workdir: Path, opts: ScanOptions, scan_id: str, resume: bool):
        super().__init__()
        self.lm = load_for_scan(model, opts.state_dtype)
        self.inputs, self.workdir, self.opts = list(inputs), Path(workdir), opts
        self.scan_id, self.resume = scan_id, resume

    def predict_dataloader(self):
        rank, world = self.trainer.global_rank, self.trainer.world_size
        if self.device.type == "cpu":  # ranks share the cores
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
        return torch.utils.data.DataLoader([(rank, world)], batch_size=None)

    def predict_step(self, batch, batch_idx: int = 0) -> ScanJob:
        rank, world = (int(x) for x in batch)
        return ScanJob(self.lm, self.inputs, self.workdir, self.opts, rank, world, self.scan_id)  # run by the writer


class ScanPredictionWriter(BasePredictionWriter):
    """Runs each rank's ``ScanJob`` (streaming into its part files) and writes ``index{rank}.json``."""

    def __init__(self, workdir: Path, resume: bool):
        super().__init__(write_interval="batch")
        self.workdir, self.resume = Path(workdir), resume

    def write_on_batch_end(self, trainer, pl_module, prediction, batch_indices, batch, batch_idx, dataloader_idx):
        index = prediction.run(resume=self.resume)
        atomic_write_text(self.workdir / f"index{prediction.shard}.json", json.dumps(index))


def predict_scan(
    model: str, inputs: list[str], workdir: Path, opts: ScanOptions, scan_id: str, devices: int,
    accelerator: str = "cpu", resume: bool = False,
) -> list[tuple[list[dict], list[Path]]] | None:  # fmt: skip
    """Scan on ``devices`` ranks; returns on rank 0 the (index, part paths) of every rank, None elsewhere."""
    trainer = L.Trainer(
        accelerator=accelerator, devices=devices, strategy="ddp" if devices > 1 else "auto",
        use_distributed_sampler=False, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, callbacks=[ScanPredictionWriter(workdir, resume)],
    )  # fmt: skip
    trainer.predict(ScanPredictModule(model, inputs, workdir, opts, scan_id, resume), return_predictions=False)
    trainer.strategy.barrier()  # every rank has written its index before rank 0 merges
    if trainer.global_rank != 0:
        return None
    return [
        (json.loads((Path(workdir) / f"index{r}.json").read_text()), part_paths(workdir, opts, r))
        for r in range(trainer.world_size)
    ]

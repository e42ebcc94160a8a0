"""``ConvertArgs``: every option of a softmax -> linear conversion, in one place, and the checks made before any work.

``strandline.tasks.convert.run_conversion`` takes a ``ConvertArgs`` and ``strandline convert`` builds its parser
from it (``strandline.app.cli``: fields are options, attribute docstrings their help, fields without a default
positionals). ``task_args`` and ``trainer_args`` split it into what ``ConvertTask`` and ``lightning.Trainer`` take.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import lightning as L

from strandline.models.convert.maps import ConvertError

Method = Literal["t2r", "hedgehog", "lolcats"]


@dataclass
class ConvertArgs:
    """A conversion: the softmax model, where the linear one goes, the data, the two stages and the Trainer."""

    model: str
    """the softmax model: a model directory or a ``strandline fit`` checkpoint (``attention: softmax``)."""
    out_dir: str
    """the linear model directory to write (must not exist, or be empty)."""
    method: Method = "hedgehog"
    """'t2r' (relu(Wx+b) map, then full fine-tuning), 'hedgehog' (attention-weight distillation, then full
    fine-tuning) or 'lolcats' (attention-output transfer, then LoRA fine-tuning)."""
    data: L.LightningDataModule | None = None
    """the conversion data, a LightningDataModule (``--data.class_path strandline.data.dna_datamodule.DNADataModule
    --data.init_args.paths [...]``, or the ``data:`` section of configs/convert/dna-tiny.yaml, text-tiny.yaml)."""
    steps: int = 200
    """optimizer steps in all (distillation + fine-tuning)."""
    distill_steps: int | None = None
    """distillation steps (None: 0 for t2r, half of ``steps`` otherwise)."""
    distill_len: int = 256
    """tokens per distillation row (T×T attention matrices are formed)."""
    lr: float = 1e-3
    """peak learning rate of fine-tuning."""
    distill_lr: float = 1e-2
    """peak learning rate of the feature maps during distillation."""
    warmup_steps: int = 10
    """linear warmup at the start of each stage."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    lora_rank: int = 8
    """LoRA rank (lolcats)."""
    lora_alpha: float = 16.0
    """LoRA scale numerator (update = alpha / rank · B A)."""
    feature_dim: int | None = None
    """features per head of the t2r map (default: head dim)."""
    decay: Literal["retnet"] | list[float] | None = None
    """per-head γ ∈ (0, 1] of the linear model: 'retnet' (γ_h = 1 - 2^(-5-h)) or one per head (default: none,
    as the softmax model)."""
    long_context: str = "full"
    """stage 2 (LM fine-tuning): 'full' (each window read from a fresh state) or 'tbptt' (the state carried
    across consecutive windows, detached: give sequential data, ``--data.init_args.sequential true``)."""
    window: int | None = None
    """softmax window W of a hybrid student (exact softmax over the last W tokens, φ over older ones; 0: pure
    linear attention); default: the method's (64 for lolcats, 0 for t2r and hedgehog)."""
    run_dir: str | None = None
    """checkpoints and logs (default: runs/convert/<OUT_DIR name>)."""
    resume: bool = False
    """continue the run in ``run_dir`` from its ``last.ckpt``."""
    val_every: int = 50
    """validate every this many steps."""
    limit_val_batches: int | None = None
    """validation batches per check (None: all)."""
    ckpt_every: int = 50
    """write ``last.ckpt`` every this many steps."""
    log_every: int = 10
    """log training losses every this many steps."""
    accelerator: str = "auto"
    """Lightning accelerator ('cpu', 'gpu', 'auto')."""
    devices: int = 1
    """devices to use."""
    precision: str = "32-true"
    """Lightning precision ('32-true', 'bf16-mixed', ...)."""
    progress: bool = True
    """show a progress bar."""
    seed: int = 0
    """seed of the run (LoRA initialization, data order)."""

    @property
    def run_path(self) -> Path:
        """The run folder: ``run_dir``, or runs/convert/<OUT_DIR name>."""
        return Path(self.run_dir) if self.run_dir else Path("runs") / "convert" / Path(self.out_dir).name

    def task_args(self) -> dict:
        """Keyword arguments of ``ConvertTask`` besides ``teacher``."""
        names = ("method", "distill_steps", "distill_len", "lr", "distill_lr", "warmup_steps", "weight_decay",
                 "lora_rank", "lora_alpha", "feature_dim", "decay", "long_context")  # fmt: skip
        return {**{k: getattr(self, k) for k in names}, "softmax_window": self.window}

    def trainer_args(self) -> dict:
        """Keyword arguments of ``lightning.Trainer`` (the run folder, logger and checkpoints are added later)."""
        return dict(
            max_steps=self.steps, val_check_interval=self.val_every, limit_val_batches=self.limit_val_batches,
            log_every_n_steps=self.log_every, accelerator=self.accelerator, devices=self.devices,
            precision=self.precision, enable_progress_bar=self.progress,
        )  # fmt: skip

    def check(self) -> L.LightningDataModule:
        """Refuse what can be refused before any data is read or anything is written; returns the data module."""
        for name in ("steps", "val_every", "ckpt_every", "log_every"):
            if getattr(self, name) < 1:  # --val_every 0 was a ZeroDivisionError once training had started
                raise ConvertError(f"--{name} must be >= 1, got {getattr(self, name)}")
        data = datamodule(self.data)
        check_paths(self.model, Path(self.out_dir), self.run_path, self.resume)
        return data


def datamodule(data) -> L.LightningDataModule:
    """The data module itself, also when the CLI hands over its spec ({class_path, init_args}) uninstantiated."""
    if data is None:
        raise ConvertError("no conversion data: give --data (a LightningDataModule) or a --config with a data section")
    if isinstance(data, L.LightningDataModule):
        return data
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--data", type=L.LightningDataModule)
    try:
        return parser.instantiate(parser.parse_object({"data": data})).data
    except Exception as e:  # jsonargparse reports a bad class path or argument in several exception types
        raise ConvertError(f"--data: {str(e).splitlines()[0]}") from None


def check_paths(model: str, out: Path, run: Path, resume: bool) -> None:
    """Refuse outputs that would overwrite something before any work starts."""
    from strandline.models.persist.io import check_checkpoint

    src = Path(model)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConvertError(f"{out}: exists and is not an empty directory; choose a new OUT_DIR")
    if src.exists() and out.exists() and os.path.samefile(src, out):
        raise ConvertError(f"{out}: the output must differ from the input model")
    if run.resolve() == out.resolve() or out.resolve() in run.resolve().parents:
        raise ConvertError(f"--run_dir {run}: inside OUT_DIR {out}, which must hold only the model; choose another")
    last = run / "checkpoints" / "last.ckpt"
    if resume and not last.is_file():
        raise ConvertError(f"{run}: no conversion run to resume (no checkpoints/last.ckpt)")
    if resume and not check_checkpoint(last).resumable:  # Lightning loads it next: check it safely first
        raise ConvertError(f"{last}: holds the weights only (no optimizer state); cannot resume from it")
    if not resume and run.exists() and any(run.iterdir()):
        raise ConvertError(f"{run}: holds another run; pass --resume to continue it or choose --run_dir")

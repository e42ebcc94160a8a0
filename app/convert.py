"""``strandline convert SOFTMAX_MODEL OUT_DIR --method t2r|hedgehog|lolcats --data ...``: train softmax, run as an RNN.

A Lightning run of ``strandline.tasks.convert.ConvertTask`` (checkpoints every ``ckpt_every`` steps to
``RUN_DIR/checkpoints/last.ckpt``, CSV logs in ``RUN_DIR/logs``, a progress bar), then the student with any
LoRA merged is written as an ordinary linear model directory that ``scan``, ``summarize``, ``generate`` and
``models.load`` use unchanged. ``--resume`` continues a killed run from its last checkpoint.

    strandline convert my-softmax-model my-rnn --config configs/convert/dna-tiny.yaml --method hedgehog

Everything that can be refused is refused before any data is read or anything is written: a model that is not
a softmax model, a data module whose tokenizer differs from the model's, an OUT_DIR that exists and is not
empty, a RUN_DIR that holds another run (without ``--resume``) or none (with it).
"""

from __future__ import annotations

import os
from pathlib import Path

import lightning as L

from strandline.models.convert.maps import ConvertError
from strandline.tasks.convert import Method


def convert(
    model: str,
    out_dir: str,
    method: Method = "hedgehog",
    data: L.LightningDataModule | None = None,
    steps: int = 200,
    distill_steps: int | None = None,
    distill_len: int = 256,
    lr: float = 1e-3,
    distill_lr: float = 1e-2,
    warmup_steps: int = 10,
    weight_decay: float = 0.0,
    lora_rank: int = 8,
    lora_alpha: float = 16.0,
    feature_dim: int | None = None,
    decay: list[float] | None = None,
    window: int | None = None,
    run_dir: str | None = None,
    resume: bool = False,
    val_every: int = 50,
    limit_val_batches: int | None = None,
    ckpt_every: int = 50,
    log_every: int = 10,
    accelerator: str = "auto",
    devices: int = 1,
    precision: str = "32-true",
    progress: bool = True,
    seed: int = 0,
) -> str:
    """Convert a softmax model into a linear-attention (RNN) model directory.

    Args:
        model: the softmax model: a model directory or a ``strandline fit`` checkpoint (``attention: softmax``).
        out_dir: the linear model directory to write (must not exist, or be empty).
        method: 't2r' (relu(Wx+b) map, then full fine-tuning), 'hedgehog' (attention-weight distillation,
            then full fine-tuning) or 'lolcats' (attention-output transfer, then LoRA fine-tuning).
        data: the conversion data, a LightningDataModule (``--data.class_path strandline.data.dna_datamodule.DNADataModule
            --data.init_args.paths [...]``, or the ``data:`` section of configs/convert/dna-tiny.yaml, text-tiny.yaml).
        steps: optimizer steps in all (distillation + fine-tuning).
        distill_steps: distillation steps (None: 0 for t2r, half of ``steps`` otherwise).
        distill_len: tokens per distillation row (T×T attention matrices are formed).
        lr: peak learning rate of fine-tuning.
        distill_lr: peak learning rate of the feature maps during distillation.
        warmup_steps: linear warmup at the start of each stage.
        weight_decay: AdamW weight decay.
        lora_rank: LoRA rank (lolcats).
        lora_alpha: LoRA scale numerator (update = alpha / rank · B A).
        feature_dim: features per head of the t2r map (default: head dim).
        decay: per-head γ ∈ (0, 1] of the linear model (default: none, as the softmax model).
        window: softmax window W of a hybrid student (exact softmax over the last W tokens, φ over older ones;
            0: pure linear attention); default: the method's (64 for lolcats, 0 for t2r and hedgehog).
        run_dir: checkpoints and logs (default: runs/convert/<OUT_DIR name>).
        resume: continue the run in ``run_dir`` from its ``last.ckpt``.
        val_every: validate every this many steps.
        limit_val_batches: validation batches per check (None: all).
        ckpt_every: write ``last.ckpt`` every this many steps.
        log_every: log training losses every this many steps.
        accelerator: Lightning accelerator ('cpu', 'gpu', 'auto').
        devices: devices to use.
        precision: Lightning precision ('32-true', 'bf16-mixed', ...).
        progress: show a progress bar.
        seed: seed of the run (LoRA initialization, data order).

    Returns:
        The path of the written model directory.
    """
    from strandline.tasks.convert import run_conversion

    out, run = Path(out_dir), Path(run_dir) if run_dir else Path("runs") / "convert" / Path(out_dir).name
    for name, value in (
        ("steps", steps),
        ("val_every", val_every),
        ("ckpt_every", ckpt_every),
        ("log_every", log_every),
    ):
        if value < 1:  # --val_every 0 was a ZeroDivisionError once training had started
            raise ConvertError(f"--{name} must be >= 1, got {value}")
    data = _datamodule(data)
    _check_paths(model, out, run, resume)
    task_args = dict(
        method=method, distill_steps=distill_steps, distill_len=distill_len, lr=lr, distill_lr=distill_lr,
        warmup_steps=warmup_steps, weight_decay=weight_decay, lora_rank=lora_rank, lora_alpha=lora_alpha,
        feature_dim=feature_dim, decay=decay, softmax_window=window,
    )  # fmt: skip
    trainer_args = dict(
        max_steps=steps, val_check_interval=val_every, limit_val_batches=limit_val_batches, log_every_n_steps=log_every,
        accelerator=accelerator, devices=devices, precision=precision, enable_progress_bar=progress,
    )  # fmt: skip
    student = run_conversion(model, data, run, task_args, trainer_args, ckpt_every, resume, seed)
    student.save(out)
    print(f"wrote {out} ({method}, {student.num_params():,} parameters, tokenizer {student.meta.get('tokenizer')!r})")
    return str(out)


def _datamodule(data) -> L.LightningDataModule:
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


def _check_paths(model: str, out: Path, run: Path, resume: bool) -> None:
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

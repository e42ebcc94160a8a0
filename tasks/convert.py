"""Softmax -> linear conversion as a Lightning task: train softmax, run as an RNN.

``ConvertTask`` is ``LMTask`` with a frozen softmax teacher and a linear student built from it
(``strandline.models.convert.maps.to_linear``: every weight copied, a new feature map φ per layer, the teacher's RoPE
kept as ``position: rope``). Training has up to two stages, chosen by ``global_step`` so that a resumed run
is in the same stage with the same learning rates:

1. distillation (``distill_steps`` steps): only φ trains, on the layer-wise loss of
   ``strandline.models.convert.attn.distill_loss`` over windows cut to ``distill_len`` tokens (the T×T teacher weights);
2. LM fine-tuning (the remaining ``trainer.max_steps``): next-token loss, with what the method trains.

``window`` W > 0 makes the student the LoLCATs hybrid (``ModelConfig.window``): the teacher's exact softmax
over the last W tokens and φ over every older token, one shared normalizer (``lolcats`` defaults to W = 64,
the others to 0, pure linear attention). Stage 1 then matches the hybrid's weights or outputs, so φ learns
only what the window does not already give.

| method     | φ                    | stage 1                                  | stage 2 trains                |
| ---------- | -------------------- | ---------------------------------------- | ----------------------------- |
| ``t2r``      | relu(xW + b)         | none                                     | everything (φ included)       |
| ``hedgehog`` | softmax([xW, -xW])   | KL of attention weights (Hedgehog)       | everything (φ included)       |
| ``lolcats``  | softmax([xW, -xW])   | MSE of attention outputs (LoLCATs)       | LoRA on q/k/v and out only    |

Checkpoints keep ``LMTask``'s contract (``hparams["model"]`` is the student's config, its weights are the
``model.*`` keys), so ``models.load`` and ``strandline export`` read a conversion checkpoint as a plain
linear model: LoRA factors are merged into ``model.*`` when saving and kept apart under
``checkpoint["lora"]`` so that resuming restores them exactly.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Literal

import lightning as L
import torch
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from torch import Tensor

from strandline.data.tokenizers import datamodule_tokenizer
from strandline.errors import first_line
from strandline.models import LinearTransformerLM, ModelConfig, load
from strandline.models.convert.attn import distill_loss
from strandline.models.convert.maps import (
    ConvertError,
    LoRALinear,
    add_lora,
    feature_map_parameters,
    merge_lora,
    to_linear,
)
from strandline.tasks.convert_args import ConvertArgs, Method
from strandline.tasks.convert_args import datamodule as convert_datamodule
from strandline.tasks.lm import LMTask, lr_factor

__all__ = ["METHODS", "ConvertArgs", "ConvertTask", "Method", "check_data", "load_teacher", "run_conversion"]
TRAINER_OPTIONS = ("accelerator", "devices", "precision")  # named in the one line when the Trainer refuses them
METHODS: dict[str, dict] = {
    # feature map of the student, stage-1 loss (None: no stage 1), what stage 2 trains, default window
    "t2r": {"feature_map": "t2r", "distill": None, "finetune": "all", "window": 0},
    "hedgehog": {"feature_map": "hedgehog", "distill": "hedgehog", "finetune": "all", "window": 0},
    "lolcats": {"feature_map": "hedgehog", "distill": "transfer", "finetune": "lora", "window": 64},
}


def load_teacher(path: str) -> LinearTransformerLM:
    """A softmax model from a model directory or checkpoint; ``ConvertError`` if it is not one."""
    model = load(path)  # ModelLoadError (a user error) for anything that is not a Strandline model
    if model.config.attention != "softmax":
        raise ConvertError(f"{path}: the model is already {model.config.attention!r} attention; convert needs softmax")
    return model


def check_data(teacher: LinearTransformerLM, datamodule: L.LightningDataModule, where: str) -> None:
    """Refuse data whose tokenizer differs from the model's, before any data is read."""
    model_kind, data_kind = teacher.meta.get("tokenizer"), datamodule_tokenizer(datamodule)
    if model_kind and data_kind and model_kind != data_kind:
        raise ConvertError(
            f"{where}: the model reads {model_kind!r} tokens but the data gives {data_kind!r} "
            f"({type(datamodule).__name__})"
        )


class ConvertTask(LMTask):
    """Convert a softmax ``LinearTransformerLM`` into a linear one (see the module docstring)."""

    def __init__(
        self,
        teacher: str,
        method: Method = "hedgehog",
        distill_steps: int | None = None,
        distill_len: int = 256,
        lr: float = 1e-3,
        distill_lr: float = 1e-2,
        warmup_steps: int = 10,
        min_lr_ratio: float = 0.1,
        weight_decay: float = 0.0,
        grad_clip: float = 1.0,
        lora_rank: int = 8,
        lora_alpha: float = 16.0,
        feature_dim: int | None = None,
        decay: Literal["retnet"] | list[float] | None = None,
        softmax_window: int | None = None,
        long_context: str = "full",
    ):
        """Args:
        teacher: the softmax model (a model directory or a ``strandline fit`` checkpoint).
        method: 't2r', 'hedgehog' or 'lolcats' (see the module docstring).
        distill_steps: stage-1 steps; None: 0 for t2r, half of ``trainer.max_steps`` otherwise.
        distill_len: tokens per distillation row; longer windows are cut into rows of this length.
        lr: peak learning rate of the LM fine-tuning stage.
        distill_lr: peak learning rate of φ in the distillation stage.
        warmup_steps: linear warmup at the start of each stage.
        min_lr_ratio: each stage's cosine decay ends at this fraction of its peak.
        weight_decay: AdamW weight decay (0: keep the teacher's weights where they are).
        grad_clip: max global gradient norm (0 disables).
        lora_rank: rank r of the LoRA update (lolcats).
        lora_alpha: LoRA scale numerator: the update is (alpha / r) · B A.
        feature_dim: output features per head of the t2r map (default: head dim).
        decay: per-head γ of the student (None: γ = 1, as the paper; 'retnet' or one float per head).
        softmax_window: softmax window W of the hybrid student (``ModelConfig.window``; 0: pure linear);
            None: the method's default (64 for lolcats, 0 otherwise). Not ``window``: a data module's
            hparams use that name, and Lightning refuses two different values under one key.
        long_context: stage 2 reads each window from a fresh state ('full') or carries the detached state
            across consecutive windows ('tbptt', as the DNA recipes train): the student then learns to read
            a state that has seen far more than one window, as it will when it streams a genome.
        """
        if method not in METHODS:
            raise ConvertError(f"unknown method {method!r}; choose one of {sorted(METHODS)}")
        for name, value, low in (
            ("distill_len", distill_len, 1),
            ("lora_rank", lora_rank, 1),
            ("distill_steps", distill_steps, 0),
            ("window", softmax_window, 0),  # the convert command's --window
        ):
            if value is not None and value < low:
                raise ConvertError(f"{name} must be >= {low}, got {value}")
        if not (math.isfinite(distill_lr) and distill_lr > 0):
            raise ConvertError(f"distill_lr must be a finite number > 0, got {distill_lr}")
        spec = METHODS[method]
        soft = load_teacher(teacher)
        window = spec["window"] if softmax_window is None else softmax_window
        student = to_linear(soft, spec["feature_map"], feature_dim, decay, window)
        super().__init__(
            model=student.config, tokenizer=soft.meta.get("tokenizer") or "dna", lr=lr, weight_decay=weight_decay,
            warmup_steps=warmup_steps, min_lr_ratio=min_lr_ratio, grad_clip=grad_clip, long_context=long_context,
        )  # fmt: skip
        self.hparams["model"] = student.config.to_dict()  # what models.load builds from a checkpoint
        self.model = student.train()
        if spec["finetune"] == "lora":
            add_lora(self.model, lora_rank, lora_alpha)
        self.teacher = soft.requires_grad_(False).eval()
        self.spec = spec

    # ---- stages -----------------------------------------------------------------------------------
    def distill_total(self) -> int:
        """Number of stage-1 (distillation) steps."""
        if self.spec["distill"] is None:
            return 0
        if self.hparams.distill_steps is not None:
            return self.hparams.distill_steps
        return self._total_steps() // 2

    def in_distill(self) -> bool:
        return self.global_step < self.distill_total()

    def _groups(self) -> tuple[list, list]:
        """(φ parameters, the other parameters stage 2 trains)."""
        fmap = feature_map_parameters(self.model)
        if self.spec["finetune"] == "lora":
            rest = [p for m in self.model.modules() if isinstance(m, LoRALinear) for p in (m.lora_A, m.lora_B)]
        else:
            ids = {id(p) for p in fmap}
            rest = [p for p in self.model.parameters() if id(p) not in ids]
        return fmap, rest

    def _set_trainable(self) -> None:
        """requires_grad for this step's stage: frozen tensors get no gradient, so AdamW leaves them (and
        their moments) untouched."""
        fmap, rest = self._groups()
        distill = self.in_distill()
        for p in self.model.parameters():
            p.requires_grad_(False)
        for p in fmap:
            p.requires_grad_(distill or self.spec["finetune"] == "all")
        for p in rest:
            p.requires_grad_(not distill)

    def train(self, mode: bool = True):
        super().train(mode)
        self.teacher.eval()  # the teacher is a fixed function, whatever Lightning switches
        return self

    # ---- steps ------------------------------------------------------------------------------------
    def on_train_batch_start(self, batch: dict, batch_idx: int) -> None:
        self._set_trainable()

    def training_step(self, batch: dict, batch_idx: int) -> Tensor:
        if not self.in_distill():
            return super().training_step(batch, batch_idx)
        if not self.automatic_optimization and self._replayed():  # tbptt: counted as LMTask counts, for resumes
            return None
        x = batch["input"]
        L_ = min(self.hparams.distill_len, x.shape[1])
        rows = x[:, : x.shape[1] // L_ * L_].reshape(-1, L_)  # (B·T/L, L): all tokens, T×T kept small
        loss = distill_loss(self.teacher, self.model, rows, self.spec["distill"])
        self.check_finite(loss)
        self.log("train/distill_loss", loss.detach(), on_step=True, prog_bar=True)
        if self.automatic_optimization:
            return loss
        self._manual_step(self.optimizers(), self.lr_schedulers(), loss)  # tbptt: Lightning leaves steps to us
        return None

    # ---- optimization -----------------------------------------------------------------------------
    def configure_optimizers(self):
        hp = self.hparams
        fmap, rest = self._groups()
        for p in (*fmap, *rest):
            p.requires_grad_(True)  # the optimizer must see them; each step's stage sets the flags again
        first_lr = hp.distill_lr if self.spec["distill"] else hp.lr
        opt = torch.optim.AdamW(
            [{"params": fmap, "lr": first_lr}, {"params": rest, "lr": hp.lr}],
            lr=hp.lr, betas=tuple(hp.betas), weight_decay=hp.weight_decay,
        )  # fmt: skip
        D, total = self.distill_total(), self._total_steps()
        ft_fmap = 1.0 if self.spec["finetune"] == "all" else 0.0

        def stage2(step: int) -> float:
            return lr_factor(step - D, hp.warmup_steps, max(1, total - D), hp.min_lr_ratio)

        def fmap_factor(step: int) -> float:
            if step < D:
                return lr_factor(step, hp.warmup_steps, D, hp.min_lr_ratio)
            return ft_fmap * stage2(step) * hp.lr / first_lr

        def rest_factor(step: int) -> float:
            return 0.0 if step < D else stage2(step)

        sched = torch.optim.lr_scheduler.LambdaLR(opt, [fmap_factor, rest_factor])
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    # ---- checkpoints: LoRA merged into model.*, the factors kept apart ---------------------------
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        super().on_save_checkpoint(checkpoint)
        sd, lora = checkpoint["state_dict"], {}
        for name, m in self.model.named_modules():
            if isinstance(m, LoRALinear):
                pre = f"model.{name}."
                lora[name] = {k: sd.pop(pre + k) for k in ("base.weight", "lora_A", "lora_B")}
                sd[pre + "weight"] = m.merged_weight().detach().clone()
        if lora:
            checkpoint["lora"] = lora

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        super().on_load_checkpoint(checkpoint)
        sd = checkpoint["state_dict"]
        for name, parts in checkpoint.pop("lora", {}).items():
            sd.pop(f"model.{name}.weight")
            sd.update({f"model.{name}.{k}": v for k, v in parts.items()})


def check_resumes(task: ConvertTask, last: Path) -> None:
    """Refuse a run whose checkpoint holds another student (another method, window or feature size): Lightning
    would end in a state_dict error once the run has started."""
    from strandline.models.persist.io import check_checkpoint

    saved = ModelConfig.renamed_keys(check_checkpoint(last).config)  # a checkpoint may use older key names
    mine = task.hparams["model"]
    diff = sorted(k for k in set(saved) | set(mine) if saved.get(k) != mine.get(k))
    if diff:
        k = diff[0]
        raise ConvertError(
            f"{last}: the run to resume converts to another model ({k} {saved.get(k)!r}, these options give "
            f"{mine.get(k)!r}); resume with the run's options or choose --run_dir"
        )


def run_conversion(
    args: ConvertArgs, datamodule: L.LightningDataModule | None = None, callbacks: tuple[L.Callback, ...] = ()
) -> LinearTransformerLM:
    """Fit a ``ConvertTask`` with checkpoints in ``args.run_path`` and return the plain student (LoRA merged).

    ``strandline convert`` runs ``args.check()`` first (options, data, paths); this function refuses only a
    tokenizer mismatch and a resume of another student. ``checkpoints/last.ckpt`` (every ``args.ckpt_every``
    steps) and ``logs/`` (CSV) go in the run folder; ``args.seed`` seeds everything before the task is built.

    Args:
        args: every option of the conversion (``ConvertArgs``).
        datamodule: the conversion data (default: ``args.data``); its tokenizer is checked against the
            model's before it is read.
        callbacks: extra Trainer callbacks.
    """
    teacher, run_dir, resume, ckpt_every = args.model, args.run_path, args.resume, args.ckpt_every
    datamodule = convert_datamodule(args.data) if datamodule is None else datamodule
    trainer_args = args.trainer_args()
    L.seed_everything(args.seed, verbose=False)
    task = ConvertTask(teacher, **args.task_args())
    check_data(task.teacher, datamodule, teacher)
    last = run_dir / "checkpoints" / "last.ckpt"
    if resume:
        check_resumes(task, last)
    ckpt = ModelCheckpoint(
        dirpath=run_dir / "checkpoints", save_last=True, save_top_k=0, every_n_train_steps=ckpt_every
    )
    try:
        trainer = L.Trainer(
            check_val_every_n_epoch=None, num_sanity_val_steps=0, enable_model_summary=False,
            logger=CSVLogger(run_dir, name="logs"), default_root_dir=run_dir, callbacks=[ckpt, *callbacks],
            **trainer_args,
        )  # fmt: skip
    except (MisconfigurationException, ValueError, TypeError, ImportError) as e:  # e.g. --precision foo, --devices 0
        shown = " ".join(f"--{k} {trainer_args[k]}" for k in TRAINER_OPTIONS if k in trainer_args)
        raise ConvertError(f"{shown}: {first_line(e)}") from None
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", ".*module\\(s\\) in eval mode.*")  # the frozen teacher, on purpose
        trainer.fit(task, datamodule=datamodule, ckpt_path=str(last) if resume else None)
    student = merge_lora(task.model).eval()
    facts = {"converted_from": str(teacher), "method": task.hparams.method, "global_step": trainer.global_step}
    student.meta = {"tokenizer": task.hparams.tokenizer, "training": facts}
    return student

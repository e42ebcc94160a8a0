"""``strandline fit | validate | test | predict``: LightningCLI over ``LMTask`` and any LightningDataModule.

The data module is chosen in the YAML by class path, so the DNA and text pipelines share this entry point::

    data:
      class_path: strandline.data.dna_datamodule.DNADataModule
      init_args: {paths: [data/genomes/...], window: 4096}

Defaults added here: a ``WandbLogger`` (its mode comes from ``WANDB_MODE``; unset means ``offline``, so a
machine without network still logs and ``wandb sync`` uploads later) and a ``ModelCheckpoint`` exposed as
``--checkpoint.*`` with ``save_last=True`` and ``dirpath`` set per config, so ``--ckpt_path last`` resumes.
Use ``--trainer.logger lightning.pytorch.loggers.CSVLogger`` for plain CSV logs.
"""

from __future__ import annotations

import importlib
import os
import urllib.parse
from argparse import ArgumentError
from pathlib import Path

import lightning as L
import torch
from jsonargparse import Namespace
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from strandline.app.errors import UsageError, usage_message
from strandline.errors import UserInputError, first_line
from strandline.models.config import ModelConfig
from strandline.models.persist.checkpoint import CheckpointParts
from strandline.models.persist.io import check_checkpoint
from strandline.models.persist.modeldir import ModelLoadError
from strandline.tasks.callbacks import LatestCheckpoint
from strandline.tasks.lm import LMTask
from strandline.tasks.preflight import check_fits

DEFAULT_LOGGER = {
    "class_path": "lightning.pytorch.loggers.WandbLogger",
    "init_args": {"project": "strandline", "save_dir": "runs"},
}


class StrandlineCLI(LightningCLI):
    """LightningCLI with a configurable ModelCheckpoint (``--checkpoint.*``) that always keeps ``last.ckpt``."""

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_lightning_class_args(LatestCheckpoint, "checkpoint")
        parser.set_defaults(
            {
                "checkpoint.save_last": True,
                "checkpoint.monitor": "val/bits_per_token",
                "checkpoint.mode": "min",
                "checkpoint.save_top_k": 1,
                "checkpoint.filename": "best-{step}",
                "checkpoint.auto_insert_metric_name": False,
            }
        )

    def parse_arguments(self, parser: LightningArgumentParser, args) -> None:
        """Parse, then check the user's paths before anything is built or trained.

        ``strandline.app.cli`` forwards the command line as ``args``, so the base class's warning about giving both
        ``args`` and ``sys.argv`` (printed by every call, even ``--help``) does not apply and is not raised.
        """
        self.config = parser.parse_object(args) if isinstance(args, (dict, Namespace)) else parser.parse_args(args)
        sub = self.config.get("subcommand")
        if sub:
            cfg = self.config[sub]
            check_stage_options(cfg, sub)
            path, ckpt = check_run_paths(cfg, sub)
            if str(cfg.get("ckpt_path")).startswith("file://"):  # fsspec would read it as remote: unpickling code
                cfg["ckpt_path"] = str(path)
            data = check_data(cfg, sub)
            if sub == "fit" and data is not None:
                check_step_memory(cfg, data)
            if ckpt is not None and data is not None:
                check_ckpt_fits_data(ckpt, data, cfg.get("ckpt_path"))
            if ckpt is not None and sub == "fit" and not ckpt.resumable:
                raise UserInputError(
                    f"--ckpt_path {path}: holds the weights only (no optimizer state), so a run cannot resume from it"
                )

    def _parse_ckpt_path(self) -> None:
        """Lightning's own step (the hyperparameters of the ``--ckpt_path`` file become the config), with the model
        config of an older checkpoint under its current key names first (``ModelConfig.renamed_keys``), which the
        parser would otherwise refuse as unknown keys."""
        sub = self.config.get("subcommand")
        path = self.config[sub].get("ckpt_path") if sub else None
        if not (path and Path(path).is_file()):
            return
        hparams = torch.load(path, weights_only=True, map_location="cpu").get("hyper_parameters", {})
        hparams.pop("_instantiator", None)
        if isinstance(hparams.get("model"), dict):
            hparams["model"] = ModelConfig.renamed_keys(hparams["model"])
        if "_class_path" in hparams:
            hparams = {"class_path": hparams.pop("_class_path"), "dict_kwargs": hparams}
        if hparams:
            self.config = self.parser.parse_object({sub: {"model": hparams}}, self.config)

    def instantiate_classes(self) -> None:
        """Build model, data and trainer; a user error raised inside (e.g. a bad ``--model.model.decay``) is
        re-raised as itself (one line), not as jsonargparse's multi-line union error that wraps it."""
        try:
            super().instantiate_classes()
        except MisconfigurationException as e:  # a Trainer option Lightning refuses, e.g. --trainer.max_steps -5
            raise UsageError(first_line(e)) from None
        except (ValueError, TypeError) as e:
            cause = _user_error_in(e)
            if cause is None:
                raise
            raise cause from None

    def _instantiate_trainer(self, config: dict, callbacks: list) -> L.Trainer:
        """The Trainer; an accelerator, device count or precision it refuses (``--trainer.devices -2`` raised a
        TypeError, ``--trainer.accelerator tpu`` an ImportError) is one line."""
        try:
            return super()._instantiate_trainer(config, callbacks)
        except (MisconfigurationException, ValueError, TypeError, ImportError) as e:
            shown = " ".join(
                f"--trainer.{k} {config[k]}" for k in ("accelerator", "devices", "precision") if k in config
            )
            raise UsageError(f"{shown}: {first_line(e)}") from None


def _user_error_in(e: BaseException) -> UserInputError | None:
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, UserInputError):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


def check_stage_options(cfg: Namespace, stage: str) -> None:
    """Options that Lightning takes and only fails on once the run has started: refuse them in one line now."""
    if stage == "predict" and LMTask.predict_step is L.LightningModule.predict_step:
        raise UsageError(
            "predict: LMTask has no prediction step; for per-base scores of a genome use "
            "`strandline scan MODEL GENOME.fa -o OUT.bedGraph`, for metrics `strandline validate` or `test`"
        )
    interval = cfg.get("trainer.val_check_interval") if "trainer" in cfg else None
    if stage == "fit" and isinstance(interval, (int, float)) and not interval > 0:  # 0: a ZeroDivisionError
        raise UsageError(f"--trainer.val_check_interval must be > 0 (steps, or a fraction of an epoch), got {interval}")


def check_data(cfg: Namespace, stage: str) -> L.LightningDataModule | None:
    """Read the data of a stage now, if its DataModule can check itself (``check_stage``, e.g. DNADataModule).

    This runs before the seed is set, the Trainer is built or a logger starts, so a bad input ends with one
    line and leaves no run folder. The DataModule built later reuses what this one cached.
    """
    data = cfg.get("data")
    if not isinstance(data, Namespace) or not data.get("class_path"):
        return None
    module, _, name = data.class_path.rpartition(".")
    cls = getattr(importlib.import_module(module), name, None)
    if cls is None or not hasattr(cls, "check_stage"):
        return None
    init = data.get("init_args")
    module = cls(**(init.as_dict() if isinstance(init, Namespace) else {}))
    module.check_stage(stage)
    return module


def check_step_memory(cfg: Namespace, data: L.LightningDataModule) -> None:
    """A window that cannot fit in memory, said before training starts (``tasks/preflight.py``)."""
    window, batch = getattr(data.hparams, "window", None), getattr(data.hparams, "batch_size", None)
    model = cfg.get("model.model") if "model" in cfg else None
    if not isinstance(window, int) or not isinstance(batch, int) or not isinstance(model, (ModelConfig, Namespace)):
        return
    mc = model if isinstance(model, ModelConfig) else ModelConfig(**model.as_dict())
    accel = str(cfg.get("trainer.accelerator") or "cpu")
    check_fits(mc, batch, window, "cpu" if accel == "cpu" or not torch.cuda.is_available() else "gpu")


def check_ckpt_fits_data(ckpt: CheckpointParts, data: L.LightningDataModule, path) -> None:
    """A resumed run keeps the checkpoint's model (LightningCLI loads its hyperparameters over the config's), so
    data of another tokenizer would end in an IndexError deep in the embedding: refuse it in one line now."""
    from strandline.data.tokenizers import datamodule_tokenizer

    kind = datamodule_tokenizer(data)
    if ckpt.tokenizer and kind and ckpt.tokenizer != kind:
        raise UserInputError(
            f"--ckpt_path {path}: the checkpoint's model reads {ckpt.tokenizer!r} tokens but the data gives {kind!r} "
            f"({type(data).__name__})"
        )


def _check_dir(path: str | Path, what: str) -> None:
    """A directory that Lightning will create or write in: refuse a file, or a folder we cannot write."""
    p = Path(path)
    existing = next((d for d in (p, *p.parents) if d.exists()), Path("."))
    if not existing.is_dir():
        shown = "exists and is not a directory" if existing == p else f"{existing} is not a directory"
        raise UserInputError(f"{what} {path}: {shown}")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserInputError(f"{what} {path}: cannot write in {existing} (permission denied)")


def check_run_paths(cfg: Namespace, stage: str = "fit") -> tuple[Path | None, CheckpointParts | None]:
    """``--ckpt_path`` must be a usable Strandline checkpoint; output folders must be writable directories, and a
    new ``fit`` must not write into a checkpoint folder that holds another run's checkpoints.

    Returns:
        The checkpoint file and its parts when ``--ckpt_path`` names one (a file, a ``file://`` URL, or ``last``),
        else (None, None).
    """
    dirpath = cfg.get("checkpoint.dirpath") if "checkpoint" in cfg else None
    ckpt, parts = ckpt_file(cfg.get("ckpt_path"), dirpath), None
    if ckpt is not None:
        try:
            parts = check_checkpoint(ckpt)  # missing, random, truncated, a pickle payload, not ours, NaN
        except ModelLoadError as e:
            raise ModelLoadError(f"--ckpt_path {e}") from None
    if dirpath:
        _check_dir(dirpath, "--checkpoint.dirpath")
        if stage == "fit" and cfg.get("checkpoint.enable_version_counter") is not False:
            check_no_other_run(Path(dirpath), ckpt)
    root = cfg.get("trainer.default_root_dir") if "trainer" in cfg else None
    if root:
        _check_dir(root, "--trainer.default_root_dir")
    return ckpt, parts


def ckpt_file(ckpt, dirpath) -> Path | None:
    """The local file that ``--ckpt_path`` makes Lightning load, found as Lightning finds it, or None for none.

    ``last`` is the newest ``last*.ckpt`` of the checkpoint folder; ``file://`` URLs are local paths. Other URLs
    and ``best`` cannot be checked here (remote files are unpickled with code, ``best`` exists only inside one
    Python run) and are refused; ``hpc`` and ``registry:`` are left to Lightning.
    """
    if not ckpt:
        return None
    text = str(ckpt)
    if text == "last":
        found = sorted(Path(dirpath).glob("last*.ckpt"), key=lambda f: f.stat().st_mtime) if dirpath else []
        return found[-1] if found else None  # none yet: Lightning starts a new run
    if text == "best":
        raise UserInputError("--ckpt_path best: the best checkpoint is known only inside one run; give its file")
    if text == "hpc" or text.startswith("registry"):
        return None
    if text.startswith("file://"):
        return Path(urllib.parse.unquote(urllib.parse.urlparse(text).path))
    if "://" in text:
        raise UserInputError(f"--ckpt_path {text}: only local checkpoints can be checked before loading; copy it here")
    return Path(text)


def check_no_other_run(dirpath: Path, ckpt: Path | None) -> None:
    """Refuse a checkpoint folder holding checkpoints that this run does not resume: Lightning would write
    ``last-v1.ckpt`` beside the old ``last.ckpt``, and ``export .../last.ckpt`` would take the old run's model."""
    if not dirpath.is_dir():
        return
    resumed = ckpt is not None and ckpt.parent.resolve() == dirpath.resolve()
    others = sorted(p.name for p in dirpath.glob("*.ckpt"))
    if others and not resumed:
        raise UserInputError(
            f"--checkpoint.dirpath {dirpath}: holds another run's checkpoints ({', '.join(others[:3])}); "
            "resume it with --ckpt_path last, or give a new --checkpoint.dirpath"
        )


def build_cli(argv: list[str] | None, run: bool = True) -> StrandlineCLI:
    """Parse ``argv`` (e.g. ``["fit", "--config", "configs/dna/tiny-cpu.yaml"]``) and, if ``run``, execute it.

    With ``run=False`` pass no subcommand: the config is parsed and the model, data module and trainer are built.
    """
    os.environ.setdefault("WANDB_MODE", "offline")  # never block on a network login; `wandb sync` later
    no_exit = {"exit_on_error": False}  # usage errors are raised, and strandline.app.cli prints them as one line
    return StrandlineCLI(
        LMTask,
        L.LightningDataModule,
        subclass_mode_data=True,
        trainer_defaults={"logger": DEFAULT_LOGGER, "default_root_dir": "runs"},  # never litter the cwd
        save_config_kwargs={"overwrite": True},
        args=argv,
        run=run,
        auto_configure_optimizers=False,
        parser_kwargs={**no_exit, **{c: no_exit for c in ("fit", "validate", "test", "predict")}},
    )


def run_lightning_cli(argv: list[str] | None = None) -> None:
    """Entry point of ``strandline fit|validate|test|predict ...`` (called by ``strandline.app.cli``).

    Raises:
        UsageError: a bad option or config value (one line).
        UserInputError: bad paths or data (one line).
    """
    try:
        build_cli(argv, run=True)
    except ArgumentError as e:
        command = argv[0] if argv and argv[0] in ("fit", "validate", "test", "predict") else "fit"
        raise UsageError(f"{usage_message(str(e))} (see strandline {command} --help)") from None

"""``strandline fit | validate | test | predict``: LightningCLI over ``LMTask`` and any LightningDataModule.

The data module is chosen in the YAML by class path, so the DNA and text pipelines share this entry point::

    data:
      class_path: data.dna_datamodule.DNADataModule
      init_args: {paths: [data/genomes/...], window: 4096}

Defaults added here: a ``WandbLogger`` (its mode comes from ``WANDB_MODE``; unset means ``offline``, so a
machine without network still logs and ``wandb sync`` uploads later) and a ``ModelCheckpoint`` exposed as
``--checkpoint.*`` with ``save_last=True`` and ``dirpath`` set per config, so ``--ckpt_path last`` resumes.
Use ``--trainer.logger lightning.pytorch.loggers.CSVLogger`` for plain CSV logs.
"""

from __future__ import annotations

import importlib
import os
from argparse import ArgumentError
from pathlib import Path

import lightning as L
from jsonargparse import Namespace
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from app.errors import UsageError, usage_message
from models.checkpoint import CheckpointParts, read_checkpoint
from models.errors import UserInputError, first_line
from models.modeldir import ModelLoadError
from tasks.lm import LMTask

CKPT_KEYWORDS = ("last", "best", "hpc")  # resolved by Lightning itself, not paths

DEFAULT_LOGGER = {
    "class_path": "lightning.pytorch.loggers.WandbLogger",
    "init_args": {"project": "strandline", "save_dir": "runs"},
}


class StrandlineCLI(LightningCLI):
    """LightningCLI with a configurable ModelCheckpoint (``--checkpoint.*``) that always keeps ``last.ckpt``."""

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
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

        ``app.cli`` forwards the command line as ``args``, so the base class's warning about giving both
        ``args`` and ``sys.argv`` (printed by every call, even ``--help``) does not apply and is not raised.
        """
        self.config = parser.parse_object(args) if isinstance(args, (dict, Namespace)) else parser.parse_args(args)
        sub = self.config.get("subcommand")
        if sub:
            ckpt = check_run_paths(self.config[sub])
            data = check_data(self.config[sub], sub)
            if ckpt is not None and data is not None:
                check_ckpt_fits_data(ckpt, data, self.config[sub].get("ckpt_path"))

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


def _user_error_in(e: BaseException) -> UserInputError | None:
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, UserInputError):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


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


def check_ckpt_fits_data(ckpt: CheckpointParts, data: L.LightningDataModule, path) -> None:
    """A resumed run keeps the checkpoint's model (LightningCLI loads its hyperparameters over the config's), so
    data of another tokenizer would end in an IndexError deep in the embedding: refuse it in one line now."""
    from tasks.convert import data_tokenizer

    kind = data_tokenizer(data)
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


def check_run_paths(cfg: Namespace) -> CheckpointParts | None:
    """``--ckpt_path`` must be a readable Strandline checkpoint; output folders must be writable directories.

    Returns:
        The checkpoint's parts when ``--ckpt_path`` names a file, else None.
    """
    ckpt, parts = cfg.get("ckpt_path"), None
    if ckpt and str(ckpt) not in CKPT_KEYWORDS and "://" not in str(ckpt) and not str(ckpt).startswith("registry"):
        try:
            parts = read_checkpoint(ckpt)  # missing, random, truncated, or not ours
        except ModelLoadError as e:
            raise ModelLoadError(f"--ckpt_path {e}") from None
    dirpath = cfg.get("checkpoint.dirpath") if "checkpoint" in cfg else None
    if dirpath:
        _check_dir(dirpath, "--checkpoint.dirpath")
    root = cfg.get("trainer.default_root_dir") if "trainer" in cfg else None
    if root:
        _check_dir(root, "--trainer.default_root_dir")
    return parts


def build_cli(argv: list[str] | None, run: bool = True) -> StrandlineCLI:
    """Parse ``argv`` (e.g. ``["fit", "--config", "configs/dna/tiny-cpu.yaml"]``) and, if ``run``, execute it.

    With ``run=False`` pass no subcommand: the config is parsed and the model, data module and trainer are built.
    """
    os.environ.setdefault("WANDB_MODE", "offline")  # never block on a network login; `wandb sync` later
    no_exit = {"exit_on_error": False}  # usage errors are raised, and app.cli prints them as one line
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
    """Entry point of ``strandline fit|validate|test|predict ...`` (called by ``app.cli``).

    Raises:
        UsageError: a bad option or config value (one line).
        UserInputError: bad paths or data (one line).
    """
    try:
        build_cli(argv, run=True)
    except ArgumentError as e:
        command = argv[0] if argv and argv[0] in ("fit", "validate", "test", "predict") else "fit"
        raise UsageError(f"{usage_message(str(e))} (see strandline {command} --help)") from None

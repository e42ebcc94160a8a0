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

import os

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from tasks.lm import LMTask

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


def build_cli(argv: list[str] | None, run: bool = True) -> StrandlineCLI:
    """Parse ``argv`` (e.g. ``["fit", "--config", "configs/dna/tiny-cpu.yaml"]``) and, if ``run``, execute it.

    With ``run=False`` pass no subcommand: the config is parsed and the model, data module and trainer are built.
    """
    os.environ.setdefault("WANDB_MODE", "offline")  # never block on a network login; `wandb sync` later
    return StrandlineCLI(
        LMTask,
        L.LightningDataModule,
        subclass_mode_data=True,
        trainer_defaults={"logger": DEFAULT_LOGGER, "default_root_dir": "runs"},  # never litter the cwd
        save_config_kwargs={"overwrite": True},
        args=argv,
        run=run,
        auto_configure_optimizers=False,
    )


def run_lightning_cli(argv: list[str] | None = None) -> None:
    """Entry point of ``strandline fit|validate|test|predict ...`` (called by ``app.cli``)."""
    build_cli(argv, run=True)

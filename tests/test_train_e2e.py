"""Short ``fit`` runs end to end, in process: checkpoints, export, resume after a kill, and TBPTT training."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch

from strandline.app.export import export
from strandline.app.train import build_cli
from strandline.models import load

REPO = Path(__file__).resolve().parents[1]
LAMBDA = str(REPO / "data" / "genomes" / "lambda.fasta.gz")


class Killed(Exception):
    """Stands in for SIGKILL: training stops abruptly after a checkpoint was written."""


class KillAt(L.Callback):
    def __init__(self, step: int):
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == self.step:
            raise Killed


def fit_args(tmp: Path, max_steps: int, *extra: str) -> list[str]:
    return [
        "fit",
        "--config", str(REPO / "configs" / "dna" / "tiny-cpu.yaml"),
        "--data.init_args.paths", f"[{LAMBDA}]",
        "--data.init_args.cache_dir", str(tmp / "cache"),
        "--data.init_args.window", "64",
        "--data.init_args.batch_size", "4",
        "--data.init_args.samples_per_epoch", "12",  # 3 steps per epoch: the kill lands on an epoch boundary
        "--data.init_args.max_eval_windows", "4",
        "--model.model.d_model", "32",
        "--model.warmup_steps", "2",
        "--trainer.max_steps", str(max_steps),
        "--trainer.val_check_interval", "3",
        "--trainer.enable_progress_bar", "false",
        "--trainer.enable_model_summary", "false",
        "--trainer.logger", "lightning.pytorch.loggers.CSVLogger",
        "--trainer.logger.save_dir", str(tmp / "logs"),
        "--trainer.default_root_dir", str(tmp),
        "--checkpoint.dirpath", str(tmp / "ckpt"),
        "--checkpoint.every_n_train_steps", "1",
        *extra,
    ]  # fmt: skip


def run(args: list[str], callbacks=(), ckpt_path: str | None = None):
    """``strandline fit ARGS [--ckpt_path CKPT]`` in process, with extra callbacks."""
    cli = build_cli(args[1:], run=False)  # without the subcommand: parse and build only
    cli.trainer.callbacks.extend(callbacks)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule, ckpt_path=ckpt_path)
    return cli


def test_fit_checkpoint_export_and_load(tmp_path):
    cli = run(fit_args(tmp_path, 4))
    assert cli.trainer.global_step == 4
    last = tmp_path / "ckpt" / "last.ckpt"
    assert last.is_file()
    metrics = cli.trainer.callback_metrics
    assert "val/bits_per_token" in metrics and 0 < float(metrics["val/bits_per_token"]) < 5
    scored = sum(int((b["target"] != -100).sum()) for b in cli.datamodule.val_dataloader())
    assert int(metrics["val/tokens"]) == scored > 0  # a token-weighted mean over every scored base of the epoch
    out = tmp_path / "model"
    export(str(last), str(out))
    model = load(out)
    assert model.meta["tokenizer"] == "dna" and model.meta["training"]["global_step"] == 4
    x = torch.randint(4, 8, (1, 50))
    ref = cli.model.model.eval()(x)[0]
    assert torch.allclose(model(x)[0], ref, atol=1e-6)


def test_resume_after_kill_continues_exactly(tmp_path):
    straight = run(fit_args(tmp_path / "a", 6))
    with pytest.raises(Killed):
        run(fit_args(tmp_path / "b", 6), callbacks=[KillAt(3)])
    assert (tmp_path / "b" / "ckpt" / "last.ckpt").is_file()
    assert torch.load(tmp_path / "b" / "ckpt" / "last.ckpt", weights_only=True)["global_step"] == 3
    resumed = run(fit_args(tmp_path / "b", 6), ckpt_path="last")
    assert resumed.trainer.global_step == 6
    for (n, p), q in zip(straight.model.named_parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(p, q), n
    lr = [g["lr"] for g in resumed.trainer.optimizers[0].param_groups]
    assert lr == [g["lr"] for g in straight.trainer.optimizers[0].param_groups]


def test_tbptt_fit_counts_optimizer_steps(tmp_path):
    args = fit_args(tmp_path, 4, "--model.long_context", "tbptt", "--model.tbptt_split", "32",
                    "--data.init_args.sequential", "true", "--trainer.limit_val_batches", "2")  # fmt: skip
    cli = run(args)
    assert cli.trainer.global_step == 4  # 2 windows x 2 segments: manual optimization steps
    assert cli.model._carried.get("train") is not None  # state carried into the next window
    assert (tmp_path / "ckpt" / "last.ckpt").is_file()


KMER = ("--model.model.kmer_orders", "[6, 10]", "--model.model.kmer_buckets", "4096",
          "--model.model.kmer_decay", "0.999", "--data.init_args.repeat_prob", "0.5",
          "--data.init_args.repeat_min_len", "8")  # fmt: skip


@pytest.mark.parametrize("extra", [(), KMER], ids=["gated", "with-kmer-memory"])
def test_tbptt_resume_mid_epoch_continues_exactly(tmp_path, extra):
    """A TBPTT run killed mid-epoch resumes with its carried state and data position: equal to an uninterrupted run
    (also with the k-mer memory, whose tables, fingerprints, write log and track record are carried and saved)."""
    tbptt = ("--model.long_context", "tbptt", "--model.tbptt_split", "32", "--data.init_args.sequential", "true",
             "--trainer.limit_val_batches", "1", "--trainer.val_check_interval", "2", *extra)  # fmt: skip
    straight = run(fit_args(tmp_path / "a", 8, *tbptt))
    with pytest.raises(Killed):
        run(fit_args(tmp_path / "b", 8, *tbptt), callbacks=[KillAt(4)])  # after 2 of ~180 windows of epoch 0
    saved = torch.load(tmp_path / "b" / "ckpt" / "last.ckpt", weights_only=True)
    assert saved["global_step"] == 4 and saved["tbptt"]["windows_done"] == 2 and saved["epoch"] == 0
    assert saved["tbptt"]["carried"] is not None
    resumed = run(fit_args(tmp_path / "b", 8, *tbptt), ckpt_path="last")
    assert resumed.trainer.global_step == 8
    for (n, p), q in zip(straight.model.named_parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(p, q), n
    carried = straight.model._carried["train"]
    assert (type(carried.memory).__name__ == "KmerMemoryState") == bool(extra)
    assert saved["tbptt"]["carried"]["format"] == 2  # the packed LMState: layers and memory by name
    back = resumed.model._carried["train"]
    assert [type(s) for s in back.layers] == [type(s) for s in carried.layers]
    assert all(torch.equal(x, y) for x, y in zip(carried.tensors(), back.tensors(), strict=True))


def sigkill_after_checkpoint(args: list[str], env: dict, last: Path, step: int = 2, timeout: float = 300) -> int:
    """Run ``args`` in a subprocess, SIGKILL it once ``last`` holds ``global_step >= step``; return the killed step."""
    import signal
    import subprocess
    import time

    proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if last.exists() and torch.load(last, weights_only=True)["global_step"] >= step:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return torch.load(last, weights_only=True)["global_step"]


@pytest.mark.slow
def test_cli_fit_survives_sigkill_and_resumes(tmp_path):
    """`strandline fit` killed with SIGKILL mid-run resumes from last.ckpt with --ckpt_path last."""
    import os
    import subprocess
    import sys

    args = [sys.executable, "-m", "strandline.app.cli", *fit_args(tmp_path, 30)]
    env = {**os.environ, "WANDB_MODE": "disabled"}
    last = tmp_path / "ckpt" / "last.ckpt"
    killed_at = sigkill_after_checkpoint(args, env, last)
    assert 2 <= killed_at < 30
    done = subprocess.run([*args, "--ckpt_path", "last"], cwd=REPO, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert torch.load(last, weights_only=True)["global_step"] == 30


def to_format_before_the_kmer_rename(path: Path) -> None:
    """Rewrite a checkpoint as the code before the named state wrote it: ``recall_*`` config keys, ``recall.*``
    weights and the carried state as a flat list with the memory's ``RecallState`` last."""
    ckpt = torch.load(path, weights_only=True)
    old = {"kmer_orders": "recall_orders", "kmer_buckets": "recall_buckets", "kmer_alphabet": "recall_alphabet",
           "kmer_decay": "recall_decay"}  # fmt: skip
    ckpt["hyper_parameters"]["model"] = {old.get(k, k): v for k, v in ckpt["hyper_parameters"]["model"].items()}
    ckpt["state_dict"] = {k.replace("model.memory.", "model.recall.", 1): v for k, v in ckpt["state_dict"].items()}
    carried = ckpt["tbptt"]["carried"]
    memory = {**carried["memory"], "type": "strandline.models.ops.kmer.RecallState"}
    ckpt["tbptt"]["carried"] = [*carried["layers"], memory]
    torch.save(ckpt, path)


def test_a_tbptt_checkpoint_from_before_the_kmer_memory_rename_resumes_exactly(tmp_path):
    """``fit --ckpt_path FILE`` reads the checkpoint's hyperparameters into the config: older key names, weight
    names and the older packed state still resume, to the same weights and carried state as a straight run."""
    tbptt = ("--model.long_context", "tbptt", "--model.tbptt_split", "32", "--data.init_args.sequential", "true",
             "--trainer.limit_val_batches", "1", "--trainer.val_check_interval", "2", *KMER)  # fmt: skip
    straight = run(fit_args(tmp_path / "a", 6, *tbptt))
    with pytest.raises(Killed):
        run(fit_args(tmp_path / "b", 6, *tbptt), callbacks=[KillAt(4)])
    last = tmp_path / "b" / "ckpt" / "last.ckpt"
    to_format_before_the_kmer_rename(last)
    resumed = build_cli([*fit_args(tmp_path / "b", 6, *tbptt), "--ckpt_path", str(last)])
    assert resumed.trainer.global_step == 6 and resumed.model.model.config.kmer_orders == [6, 10]
    for (n, p), q in zip(straight.model.named_parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(p, q), n
    a, b = straight.model._carried["train"], resumed.model._carried["train"]
    assert all(torch.equal(x, y) for x, y in zip(a.tensors(), b.tensors(), strict=True))


HPYLORI = str(REPO / "data" / "genomes" / "h_pylori_G27.fasta.gz")


def test_the_gpu_recipe_trains_on_the_cpu_for_a_few_steps(tmp_path):
    """configs/dna/131k-gpu.yaml as it is (its model, k-mer memory, bf16 autocast, callbacks) on the CPU, on the
    shipped genomes with shorter windows: a GPU machine starts from a recipe known to run."""
    args = [
        "fit",
        "--config", str(REPO / "configs" / "dna" / "131k-gpu.yaml"),
        "--trainer.accelerator", "cpu",
        "--trainer.strategy", "auto",
        "--trainer.max_steps", "2",
        "--trainer.val_check_interval", "2",
        "--trainer.limit_val_batches", "1",
        "--trainer.log_every_n_steps", "1",
        "--trainer.enable_progress_bar", "false",
        "--trainer.enable_model_summary", "false",
        "--trainer.logger", "lightning.pytorch.loggers.CSVLogger",
        "--trainer.logger.save_dir", str(tmp_path / "logs"),
        "--trainer.default_root_dir", str(tmp_path),
        "--data.init_args.paths", f"[{HPYLORI}]",
        "--data.init_args.val_paths", f"[{LAMBDA}]",
        "--data.init_args.cache_dir", str(tmp_path / "cache"),
        "--data.init_args.window", "4096",  # the warmup's first length
        "--data.init_args.batch_size", "1",
        "--data.init_args.samples_per_epoch", "8",
        "--data.init_args.max_eval_windows", "1",
        "--data.init_args.num_workers", "0",
        "--checkpoint.dirpath", str(tmp_path / "ckpt"),
    ]  # fmt: skip
    cli = run(args)
    assert cli.trainer.global_step == 2 and cli.trainer.precision == "bf16-mixed"
    assert cli.model.model.config.kmer_orders and cli.model.model.config.checkpoint_activations
    bits = float(cli.trainer.callback_metrics["val/bits_per_token"])
    assert 0 < bits < 5
    assert (tmp_path / "ckpt" / "last.ckpt").is_file()


def test_last_checkpoint_is_the_latest_step_not_the_best(tmp_path):
    """last.ckpt holds the run's final state (step 7, after the last validation at 6), not a copy of the best
    validation's checkpoint (what Lightning alone keeps there), so `--ckpt_path last` resumes where the run
    stopped and export gets the final weights."""
    args = fit_args(tmp_path, 7, "--trainer.val_check_interval", "2")
    i = args.index("--checkpoint.every_n_train_steps")
    del args[i : i + 2]
    run(args)
    last = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)
    assert last["global_step"] == 7
    best = [int(p.stem.split("-")[1]) for p in (tmp_path / "ckpt").glob("best-*.ckpt")]
    assert len(best) == 1 and best[0] <= 6

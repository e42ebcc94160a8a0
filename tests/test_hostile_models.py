"""Hostile inputs to model directories, export, checkpoints and the training and convert commands.

Every case ends with exit 2 (or 1 for a run that diverged) and one line on stderr, before any work, and
leaves the user's files as they were.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import torch
from test_io import one_line_error, tiny, write_ckpt

import strandline.app.train  # noqa: F401 - import Lightning now: its log handlers bind to the session's stderr, not a test's capsys
from strandline.app.cli import main
from strandline.models import load
from strandline.models.persist.modeldir import save_model

ROOT = Path(__file__).resolve().parents[1]
LAMBDA = str(ROOT / "data" / "genomes" / "lambda.fasta.gz")


def _files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir())}


def _refused(argv: list[str], capsys, needle: str, rc: int = 2) -> str:
    capsys.readouterr()
    got = main(argv)
    err = one_line_error(capsys)
    assert got == rc and needle in err, f"exit {got}: {err}"
    return err


# ---- export over an existing directory: explicit --overwrite, the whole directory swapped ------------------------
def test_export_over_a_model_directory_needs_overwrite(tmp_path, capsys):
    save_model(tiny(), tmp_path / "m", tokenizer="dna")
    before = _files(tmp_path / "m")
    ckpt = write_ckpt(tmp_path / "new.ckpt", tiny())
    _refused(["export", str(ckpt), str(tmp_path / "m")], capsys, "already holds a model; pass --overwrite")
    assert _files(tmp_path / "m") == before


def test_export_overwrite_of_a_summarizer_leaves_no_salience_head_beside_the_new_lm(tmp_path, capsys):
    """The LM was replaced and the old head kept: the next summarize crashed with an IndexError."""
    import shutil

    shutil.copytree(ROOT / "data/models/summarizer", tmp_path / "summ")
    new = tiny()
    ckpt = write_ckpt(tmp_path / "new.ckpt", new)
    assert main(["export", str(ckpt), str(tmp_path / "summ"), "--overwrite"]) == 0
    assert sorted(p.name for p in (tmp_path / "summ").iterdir()) == ["README.md", "config.json", "model.safetensors"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "a temporary directory was left"
    x = torch.randint(4, 8, (1, 12))
    torch.testing.assert_close(load(tmp_path / "summ")(x)[0], new.eval()(x)[0], rtol=0, atol=0)
    _refused(["summarize", str(tmp_path / "summ"), str(ROOT / "data/documents/2022.acl-long.286.txt")], capsys, "summ")


def test_export_overwrite_refuses_a_model_directory_holding_user_files(tmp_path, capsys):
    save_model(tiny(), tmp_path / "m", tokenizer="dna")
    (tmp_path / "m" / "notes.txt").write_text("precious")
    before = _files(tmp_path / "m")
    ckpt = write_ckpt(tmp_path / "new.ckpt", tiny())
    _refused(["export", str(ckpt), str(tmp_path / "m"), "--overwrite"], capsys, "not a model's (notes.txt)")
    assert _files(tmp_path / "m") == before


def test_export_overwrite_never_touches_a_directory_that_is_not_a_model(tmp_path, capsys):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "model.safetensors").write_bytes(b"mine")  # our file name, not our directory
    ckpt = write_ckpt(tmp_path / "new.ckpt", tiny())
    _refused(["export", str(ckpt), str(tmp_path / "mine"), "--overwrite"], capsys, "not a Strandline model directory")
    assert _files(tmp_path / "mine") == {"model.safetensors": b"mine"}


# ---- file modes: exported files as config.json, whatever safetensors does ---------------------------------------
def test_exported_files_get_the_usual_mode(tmp_path):
    old = os.umask(0o022)
    try:
        save_model(tiny(), tmp_path / "m", tokenizer="dna")
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "m").iterdir()}
    assert modes == {"README.md": 0o644, "config.json": 0o644, "model.safetensors": 0o644}, modes
    assert stat.S_IMODE((tmp_path / "m").stat().st_mode) == 0o755


def test_shipped_model_files_are_0644_in_git():
    import subprocess

    out = subprocess.run(["git", "ls-files", "-s", "data/models"], cwd=ROOT, capture_output=True, text=True, check=True)
    modes = {line.split()[3]: line.split()[0] for line in out.stdout.splitlines()}
    assert modes and set(modes.values()) == {"100644"}, modes


# ---- weights of the wrong dtype -----------------------------------------------------------------------------------
def _retyped(src: Path, dst: Path, dtype: torch.dtype) -> Path:
    """A copy of a model directory whose weights are cast to ``dtype`` (same names, same shapes)."""
    from safetensors.torch import load_file, save_file

    save_model(load(src), dst, tokenizer="dna")
    weights = load_file(dst / "model.safetensors")
    save_file({k: v.to(dtype) for k, v in weights.items()}, dst / "model.safetensors")
    return dst


@pytest.mark.parametrize("dtype", [torch.int64, torch.int8, torch.bool], ids=["int64", "int8", "bool"])
def test_integer_weights_are_refused_not_cast_into_a_flat_track(dtype, tmp_path, capsys):
    save_model(tiny(), tmp_path / "src", tokenizer="dna")
    model = _retyped(tmp_path / "src", tmp_path / "int", dtype)
    (tmp_path / "in.fa").write_text(">r\nACGTACGTAAGGCCTT\n")
    out = tmp_path / "out.bedGraph"
    _refused(["scan", str(model), str(tmp_path / "in.fa"), "-o", str(out)], capsys, "a floating-point dtype")
    assert not out.exists()
    ckpt = tmp_path / "int.ckpt"
    write_ckpt(ckpt, tiny())
    saved = torch.load(ckpt, weights_only=True)
    saved["state_dict"] = {k: v.to(dtype) for k, v in saved["state_dict"].items()}
    torch.save(saved, ckpt)
    _refused(["export", str(ckpt), str(tmp_path / "out_model")], capsys, "a floating-point dtype")
    assert not (tmp_path / "out_model").exists()


def test_half_precision_weights_still_load(tmp_path):
    save_model(tiny(), tmp_path / "src", tokenizer="dna")
    assert load(_retyped(tmp_path / "src", tmp_path / "bf16", torch.bfloat16)).config.d_model == 32


# ---- a summarizer whose LM is not a byte LM -------------------------------------------------------------------------
def test_summarizer_with_a_dna_lm_is_one_line(tmp_path, capsys):
    import shutil

    shutil.copytree(ROOT / "data/models/summarizer", tmp_path / "summ")
    (tmp_path / "summ" / "config.json").unlink()
    (tmp_path / "summ" / "model.safetensors").unlink()
    dna = load(ROOT / "data/models/dna-corpus-tbptt")
    save_model(dna, tmp_path / "dna", tokenizer="dna")
    for name in ("config.json", "model.safetensors"):
        shutil.copy(tmp_path / "dna" / name, tmp_path / "summ" / name)
    doc = str(ROOT / "data/documents/2022.acl-long.286.txt")
    out = tmp_path / "out.jsonl"
    _refused(["summarize", str(tmp_path / "summ"), doc, "-o", str(out)], capsys, "needs a 'bytes' LM")
    assert not out.exists()


# ---- a checkpoint folder that holds another run: "last" is always this run's ----------------------------------------
def _fit(tmp: Path, steps: int, *extra: str) -> list[str]:
    from test_train_e2e import fit_args

    return fit_args(tmp, steps, *extra)


def test_fit_into_a_folder_holding_another_run_is_refused_before_training(tmp_path, capsys):
    """A second fit wrote last-v1.ckpt beside the first run's last.ckpt, which `export .../last.ckpt` then took."""
    assert main(_fit(tmp_path, 2)) == 0
    before = _files(tmp_path / "ckpt")
    _refused(_fit(tmp_path, 3), capsys, "holds another run's checkpoints (last.ckpt)")
    assert _files(tmp_path / "ckpt") == before
    assert main(_fit(tmp_path, 3, "--ckpt_path", "last")) == 0  # resuming the run in the folder is fine
    assert sorted(p.name for p in (tmp_path / "ckpt").glob("last*")) == ["last.ckpt"]
    assert load(tmp_path / "ckpt" / "last.ckpt").meta["training"]["global_step"] == 3


def test_demo_twice_exports_what_it_just_trained(tmp_path, monkeypatch, capsys):
    import strandline.app.demo
    import strandline.app.scan
    import strandline.app.summarize

    monkeypatch.setattr(strandline.app.demo, "CONFIG", "dna/tiny-cpu.yaml")  # the demo's path, on the tiny recipe
    monkeypatch.setattr(strandline.app.scan, "scan", lambda args: [])  # steps 3 to 5 are not what is tested here
    monkeypatch.setattr(strandline.app.scan, "report", lambda *a, **k: None)
    monkeypatch.setattr(strandline.app.demo, "_check_made", lambda *a: None)  # nor that they made their outputs
    monkeypatch.setattr(strandline.app.summarize, "summarize", lambda *a, **k: 0)
    argv = ["demo", "--workdir", str(tmp_path / "demo"), "--genome", LAMBDA]
    for steps in (2, 3):
        assert main([*argv, "--steps", str(steps)]) == 0
        assert load(tmp_path / "demo" / "dna-model").meta["training"]["global_step"] == steps
    assert sorted(p.name for p in (tmp_path / "demo" / "checkpoints").iterdir()) == ["last.ckpt"]
    assert sorted(p.name for p in (tmp_path / "demo" / "dna-model").iterdir()) == [
        "README.md",
        "config.json",
        "model.safetensors",
    ]


def test_demo_never_replaces_a_folder_of_the_users_named_like_its_model(tmp_path, capsys):
    (tmp_path / "demo" / "dna-model").mkdir(parents=True)
    (tmp_path / "demo" / "dna-model" / "mine.txt").write_text("keep")
    _refused(["demo", "--workdir", str(tmp_path / "demo"), "--genome", LAMBDA], capsys, "not a Strandline model")
    assert sorted(p.name for p in (tmp_path / "demo").iterdir()) == ["dna-model"]


# ---- a diverging run stops at once, and saves no NaN checkpoint -----------------------------------------------------
def test_fit_with_a_huge_learning_rate_stops_with_one_line_and_exit_1(tmp_path, capsys):
    err = _refused(_fit(tmp_path, 6, "--model.lr", "1e30", "--model.warmup_steps", "0"), capsys, "diverged", rc=1)
    assert "learning rate 1e+30" in err
    for ckpt in (tmp_path / "ckpt").glob("*.ckpt") if (tmp_path / "ckpt").exists() else ():
        assert load(ckpt) is not None  # ModelLoadError for NaN weights: every saved checkpoint is usable


def test_a_non_finite_weight_is_never_written_to_a_checkpoint(tmp_path):
    from strandline.errors import TrainingDiverged
    from strandline.tasks.lm import LMTask

    task = LMTask(tiny().config)
    sd = {f"model.{k}": v.clone() for k, v in task.model.state_dict().items()}
    next(iter(sd.values())).fill_(float("inf"))
    with pytest.raises(TrainingDiverged, match="is not finite"):
        task.on_save_checkpoint({"state_dict": sd})


# ---- checkpoints that Lightning itself loads are checked first, with the safe reader --------------------------------
class _Payload:
    """Pickled, it runs code when unpickled without weights_only."""

    def __reduce__(self):
        return (print, ("payload ran",))


def _zip_not_a_checkpoint(path: Path) -> None:
    import zipfile

    with zipfile.ZipFile(path, "w") as z:
        z.writestr("notes.txt", "a zip, but not a checkpoint")


HOSTILE_CKPTS = {
    "random": lambda p: p.write_bytes(os.urandom(4096)),
    "truncated": lambda p: p.write_bytes(write_ckpt(p, tiny()).read_bytes()[:3000]),
    "zip": _zip_not_a_checkpoint,
    "pickle-payload": lambda p: torch.save({"state_dict": _Payload()}, p),
    "weights-only": lambda p: write_ckpt(p, tiny()),  # a valid model, but nothing to resume a run from
}


@pytest.mark.parametrize("kind", list(HOSTILE_CKPTS))
def test_fit_resume_from_a_hostile_last_ckpt_is_one_line(kind, tmp_path, capsys):
    (tmp_path / "ckpt").mkdir()
    HOSTILE_CKPTS[kind](tmp_path / "ckpt" / "last.ckpt")
    before = _files(tmp_path / "ckpt")
    for ckpt in ("last", f"file://{tmp_path / 'ckpt' / 'last.ckpt'}"):
        err = _refused(_fit(tmp_path, 1, "--ckpt_path", ckpt), capsys, "last.ckpt")
        assert "payload ran" not in capsys.readouterr().out + err
    assert _files(tmp_path / "ckpt") == before
    assert not (tmp_path / "logs").exists()


def test_fit_resume_from_a_checkpoint_url_or_directory_is_one_line(tmp_path, capsys):
    _refused(_fit(tmp_path, 1, "--ckpt_path", "https://example.org/last.ckpt"), capsys, "only local checkpoints")
    _refused(_fit(tmp_path, 1, "--ckpt_path", str(tmp_path)), capsys, "not a file")
    _refused(_fit(tmp_path, 1, "--ckpt_path", "best"), capsys, "--ckpt_path best")


def test_fit_resume_from_a_file_url_reads_the_checked_file(tmp_path):
    assert main(_fit(tmp_path, 2)) == 0
    assert main(_fit(tmp_path, 3, "--ckpt_path", f"file://{tmp_path / 'ckpt' / 'last.ckpt'}")) == 0
    assert load(tmp_path / "ckpt" / "last.ckpt").meta["training"]["global_step"] == 3


@pytest.mark.parametrize("kind", ["random", "pickle-payload", "weights-only"])
def test_convert_resume_from_a_hostile_last_ckpt_is_one_line(kind, tmp_path, capsys):
    from test_convert import softmax_model

    softmax_model().save(tmp_path / "softmax", tokenizer="dna")
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    HOSTILE_CKPTS[kind](tmp_path / "run" / "checkpoints" / "last.ckpt")
    _refused(_convert(tmp_path, "--resume"), capsys, "last.ckpt")
    assert not (tmp_path / "out").exists() and not (tmp_path / "run" / "logs").exists()


# ---- predict: no prediction step, said before the Trainer starts ----------------------------------------------------
def test_predict_with_the_dna_config_is_one_line(tmp_path, capsys):
    argv = ["predict", *_fit(tmp_path, 1)[1:]]
    _refused(argv, capsys, "use `strandline scan")
    assert not (tmp_path / "logs").exists()


# ---- Trainer options Lightning refuses, and validation intervals of 0 -----------------------------------------------
def _convert(tmp: Path, *extra: str) -> list[str]:
    return ["convert", str(tmp / "softmax"), str(tmp / "out"), "--data.class_path", "strandline.data.dna_datamodule.DNADataModule",
            "--data.init_args.paths", f"[{LAMBDA}]", "--data.init_args.cache_dir", str(tmp / "cache"),
            "--run_dir", str(tmp / "run"), "--steps", "2", "--no_progress", *extra]  # fmt: skip


@pytest.mark.parametrize(
    "extra,needle",
    [
        (["--precision", "foo"], "Precision 'foo' is invalid"),
        (["--devices", "0"], "--devices 0"),
        (["--accelerator", "gpu"], "--accelerator gpu"),
        (["--accelerator", "foo"], "invalid accelerator name"),
        (["--val_every", "0"], "--val_every must be >= 1, got 0"),
        (["--ckpt_every", "0"], "--ckpt_every must be >= 1, got 0"),
        (["--log_every", "-1"], "--log_every must be >= 1, got -1"),
    ],
    ids=["precision", "devices-0", "no-cuda", "accelerator", "val-every-0", "ckpt-every-0", "log-every"],
)
def test_convert_trainer_options_that_cannot_work_are_one_line(extra, needle, tmp_path, capsys):
    from test_convert import softmax_model

    if extra[:2] == ["--accelerator", "gpu"] and torch.cuda.is_available():
        pytest.skip("a GPU is there: --accelerator gpu works")
    softmax_model().save(tmp_path / "softmax", tokenizer="dna")
    _refused(_convert(tmp_path, *extra), capsys, needle)
    assert not (tmp_path / "out").exists() and not (tmp_path / "run").exists() and not (tmp_path / "cache").exists()


@pytest.mark.parametrize("value", ["0", "0.0", "-3"])
def test_fit_validation_interval_of_zero_is_one_line(value, tmp_path, capsys):
    _refused(_fit(tmp_path, 1, "--trainer.val_check_interval", value), capsys, "val_check_interval must be > 0")
    assert not (tmp_path / "logs").exists() and not (tmp_path / "ckpt").exists()


# ---- convert: --run_dir inside OUT_DIR, refused before the conversion -----------------------------------------------
@pytest.mark.parametrize("run", ["out/run", "out"])
def test_convert_run_dir_inside_out_dir_is_refused_before_work(run, tmp_path, capsys):
    from test_convert import softmax_model

    softmax_model().save(tmp_path / "softmax", tokenizer="dna")
    argv = _convert(tmp_path, "--run_dir", str(tmp_path / run))
    _refused(argv, capsys, "inside OUT_DIR")
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()


# ---- more hostile inputs: options the optimizer or Trainer refuse only once the run has started -------------------
@pytest.mark.parametrize(
    "extra,needle",
    [
        (["--model.lr", "-1"], "lr must be a finite number > 0, got -1"),  # was AdamW's ValueError traceback
        (["--model.grad_clip", "-1"], "grad_clip must be a finite number >= 0"),
        (["--model.warmup_steps", "-2"], "warmup_steps must be an integer >= 0"),
        (["--model.betas", "[0.9, 1.5]"], "betas must be two numbers in [0, 1)"),
        (["--model.long_context", "tbptt", "--model.tbptt_split", "0"], "tbptt_split must be >= 1"),  # range() step 0
        (["--model.long_context", "foo"], "long_context must be 'full' or 'tbptt'"),  # was a ValueError traceback
        (["--trainer.devices", "-2"], "--trainer.devices -2"),  # was a TypeError traceback
        (["--trainer.accelerator", "tpu"], "--trainer.accelerator tpu"),  # was an ImportError traceback
    ],
    ids=["lr-negative", "grad-clip", "warmup", "betas", "tbptt-split-0", "long-context", "devices", "tpu"],
)
def test_fit_options_refused_in_one_line_before_training(extra, needle, tmp_path, capsys):
    _refused(_fit(tmp_path, 1, *extra), capsys, needle)
    assert not (tmp_path / "logs").exists() and not (tmp_path / "ckpt").exists()


def test_convert_resume_of_a_run_of_another_student_is_one_line(tmp_path, capsys):
    from test_convert import softmax_model

    softmax_model().save(tmp_path / "softmax", tokenizer="dna")
    assert main(_convert(tmp_path, "--method", "t2r", "--ckpt_every", "1")) == 0
    (tmp_path / "out").rename(tmp_path / "first")
    before = _files(tmp_path / "run" / "checkpoints")
    _refused(_convert(tmp_path, "--method", "hedgehog", "--resume"), capsys, "converts to another model")
    assert _files(tmp_path / "run" / "checkpoints") == before and not (tmp_path / "out").exists()


def test_export_through_a_symlink_replaces_the_linked_model_directory(tmp_path):
    save_model(tiny(), tmp_path / "real", tokenizer="dna")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    new = tiny()
    assert main(["export", str(write_ckpt(tmp_path / "new.ckpt", new)), str(tmp_path / "link"), "--overwrite"]) == 0
    assert (tmp_path / "link").is_symlink()
    x = torch.randint(4, 8, (1, 12))
    torch.testing.assert_close(load(tmp_path / "link")(x)[0], new.eval()(x)[0], rtol=0, atol=0)


def test_export_of_another_projects_checkpoint_or_to_a_file_is_one_line(tmp_path, capsys):
    other = tmp_path / "other.ckpt"
    torch.save({"state_dict": {"encoder.weight": torch.zeros(2, 2)}, "hyper_parameters": {"hidden": 8}}, other)
    _refused(["export", str(other), str(tmp_path / "out_model")], capsys, "not a Strandline checkpoint")
    (tmp_path / "file.txt").write_text("mine")
    _refused(["export", str(write_ckpt(tmp_path / "a.ckpt", tiny())), str(tmp_path / "file.txt")], capsys, "not a dir")
    assert (tmp_path / "file.txt").read_text() == "mine" and not (tmp_path / "out_model").exists()

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

import app.train  # noqa: F401 - import Lightning now: its log handlers bind to the session's stderr, not a test's capsys
from app.cli import main
from models import load
from models.modeldir import save_model

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
    assert sorted(p.name for p in (tmp_path / "summ").iterdir()) == ["config.json", "model.safetensors"]
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
    assert modes == {"config.json": 0o644, "model.safetensors": 0o644}, modes
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
    dna = load(ROOT / "data/models/dna-tiny")
    save_model(dna, tmp_path / "dna", tokenizer="dna")
    for name in ("config.json", "model.safetensors"):
        shutil.copy(tmp_path / "dna" / name, tmp_path / "summ" / name)
    doc = str(ROOT / "data/documents/2022.acl-long.286.txt")
    out = tmp_path / "out.jsonl"
    _refused(["summarize", str(tmp_path / "summ"), doc, "-o", str(out)], capsys, "needs a 'bytes' LM")
    assert not out.exists()

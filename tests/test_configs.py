"""Every YAML recipe in configs/ parses and builds (model, data module, trainer) with LightningCLI(run=False)."""

from __future__ import annotations

from pathlib import Path

import pytest

# configs/convert/ holds options of the `convert` command, not LightningCLI recipes: tests/test_convert.py parses them
CONFIGS = sorted(
    p for p in (Path(__file__).resolve().parents[1] / "configs").rglob("*.yaml") if p.parent.name != "convert"
)


@pytest.mark.parametrize("path", CONFIGS, ids=[str(p.relative_to(p.parents[1])) for p in CONFIGS])
def test_config_parses_and_instantiates(path, tmp_path, monkeypatch):
    from strandline.app.train import build_cli
    from strandline.tasks.lm import LMTask

    monkeypatch.chdir(tmp_path)  # nothing a config builds may land in the repo
    repo = Path(__file__).resolve().parents[1]
    args = ["--config", str(path), "--trainer.accelerator", "cpu"]
    if "paths" in path.read_text():  # relative data paths in the recipes are relative to the repo root
        monkeypatch.chdir(repo)
        args += ["--trainer.default_root_dir", str(tmp_path), "--checkpoint.dirpath", str(tmp_path / "ckpt")]
    cli = build_cli(args, run=False)
    assert isinstance(cli.model, LMTask)
    assert cli.model.hparams["model"]["vocab_size"] >= 2
    assert any(type(cb).__name__ == "ModelCheckpoint" and cb.save_last for cb in cli.trainer.callbacks)


def test_copy_config_softmax_switch():
    from strandline.app.train import build_cli

    path = Path(__file__).resolve().parents[1] / "configs" / "paper" / "copy.yaml"
    cli = build_cli(["--config", str(path), "--model.model.attention", "softmax"], run=False)
    assert cli.model.model.config.attention == "softmax"
    assert type(cli.model.model.blocks[0].mixer).__name__ == "SoftmaxAttention"

"""Every YAML recipe in configs/ parses and builds (model, data module, trainer) with LightningCLI(run=False)."""

from __future__ import annotations

from pathlib import Path

import pytest

# configs/convert/ holds options of the `convert` command, not LightningCLI recipes: tests/test_convert.py parses them
CONFIGS = sorted(
    p for p in (Path(__file__).resolve().parents[1] / "configs").rglob("*.yaml") if p.parent.name != "convert"
)
# a folder of fragments, each layered over one recipe (`--config BASE --config FRAGMENT`, as their comments say)
LAYERED = {
    "sweep": "configs/dna/corpus-tbptt-cpu.yaml",
    "corpus-131k": "configs/dna/corpus-131k-cpu.yaml",
    "long-data": "configs/text/summarizer-lm.yaml",
    "long-131k": "configs/text/long-131k-cpu.yaml",
}


@pytest.mark.parametrize("path", CONFIGS, ids=[str(p.relative_to(p.parents[1])) for p in CONFIGS])
def test_config_parses_and_instantiates(path, tmp_path, monkeypatch):
    from strandline.app.train import build_cli
    from strandline.tasks.lm import LMTask

    monkeypatch.chdir(tmp_path)  # nothing a config builds may land in the repo
    repo = Path(__file__).resolve().parents[1]
    base = [repo / LAYERED[path.parent.name]] if path.parent.name in LAYERED else []
    args = [a for p in [*base, path] for a in ("--config", str(p))] + ["--trainer.accelerator", "cpu"]
    if "paths" in "".join(
        p.read_text() for p in [*base, path]
    ):  # relative data paths in the recipes are relative to the repo root
        monkeypatch.chdir(repo)
        args += ["--trainer.default_root_dir", str(tmp_path), "--checkpoint.dirpath", str(tmp_path / "ckpt")]
    cli = build_cli(args, run=False)
    assert isinstance(cli.model, LMTask)
    assert cli.model.hparams["model"]["vocab_size"] >= 2
    assert any(type(cb).__name__ == "LatestCheckpoint" and cb.save_last for cb in cli.trainer.callbacks)


def test_copy_config_softmax_switch():
    from strandline.app.train import build_cli

    path = Path(__file__).resolve().parents[1] / "configs" / "paper" / "copy.yaml"
    cli = build_cli(["--config", str(path), "--model.model.attention", "softmax"], run=False)
    assert cli.model.model.config.attention == "softmax"
    assert type(cli.model.model.blocks[0].mixer).__name__ == "SoftmaxAttention"

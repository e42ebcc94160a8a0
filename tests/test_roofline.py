"""benchmarks/roofline.py: the FLOP count, the one-line refusal, and the old-tree package root (no timing here)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path

import pytest

from strandline.models import ModelConfig

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "roofline.py"


@pytest.fixture(scope="module")
def roofline():
    spec = importlib.util.spec_from_file_location("bench_roofline", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tiny() -> ModelConfig:
    return ModelConfig(vocab_size=16, d_model=32, n_layers=3, n_heads=2, mlp_ratio=4.0, conv_width=4, chunk_size=16)


def test_linear_parts_match_a_count_by_hand(roofline):
    f = roofline.flops_per_token(tiny(), train=False)
    D, L, V = 32, 3, 16
    assert f["qkv"] == L * 2 * D * (3 * D)  # 18,432
    assert f["proj"] == L * 2 * D * D  # 6,144
    assert f["mlp"] == L * (2 * D * 128 + 2 * 128 * D)  # 49,152
    assert f["head"] == 2 * D * V  # 1,024
    assert f["conv"] == L * 2 * (3 * D) * 4
    C, K, hd, H = 16, 16, 16, 2  # elu1: φ keeps the head dim
    assert f["attention"] == L * H * (2 * C * K + 2 * C * hd + 2 * 2 * K * hd)
    assert f["feature map"] == 0 and f["gates"] == 0 and f["k-mer memory"] == 0
    rec = roofline.flops_per_token(tiny(), train=False, mode="recurrent")
    assert rec["attention"] == L * H * 2 * 2 * K * hd and rec["qkv"] == f["qkv"]


def test_training_is_three_forwards(roofline):
    cfg = ModelConfig(d_model=32, n_layers=2, n_heads=2, gate="scalar", normalizer="rmsnorm", kmer_orders=[12, 20])
    fwd, train = roofline.flops_per_token(cfg, train=False), roofline.flops_per_token(cfg, train=True)
    assert fwd.keys() == train.keys()
    assert all(train[k] == 3 * fwd[k] for k in fwd)
    assert fwd["k-mer memory"] == 2 * 32 * 2 + 6 * 2 * 4 and fwd["gates"] == 2 * 2 * 32 * 2


def test_an_uncountable_config_is_one_line_and_exit_2(roofline, tmp_path, capsys):
    recipe = tmp_path / "softmax.yaml"
    recipe.write_text("model:\n  model:\n    d_model: 32\n    n_heads: 2\n    attention: softmax\n")
    assert roofline.main(["--count", str(recipe)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("roofline: error: ") and "softmax" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert roofline.main(["--recipes", str(recipe), "--sections", "train"]) == 2  # refused before any measurement
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_pkgroot_imports_the_old_tree(roofline, tmp_path):
    tree = roofline.export_tree("HEAD", tmp_path / "tree")
    pkgroot = roofline.build_pkgroot(tree)
    (tree / "models" / "marker_only_in_the_old_tree.py").write_text("")
    code = "import pathlib, strandline.models as m; print(m.__file__); print(pathlib.Path(m.__file__).resolve())"
    code += "; import strandline.models.marker_only_in_the_old_tree"
    env = {**os.environ, "PYTHONPATH": str(pkgroot)}
    cmd = roofline.Tree("old", tree, pkgroot).python("-c", roofline.ISOLATE + code)  # as the workers run
    r = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    seen, real = r.stdout.strip().splitlines()
    assert Path(seen).is_relative_to(pkgroot / "strandline")
    assert Path(real) == (tree / "models" / "__init__.py").resolve()
    assert not Path(real).is_relative_to(ROOT)

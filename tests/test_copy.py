"""The paper's copy task (§4.1): data layout at the paper's size and the recipe that trains it."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from strandline.data.copy_task import IGNORE, PAD, SEP, CopyTaskDataModule, copy_example

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))


def test_recipe_matches_the_paper_size():
    """configs/paper/copy.yaml: 10 symbols, 128-token sequences copying 32..63 symbols, linear with positions.

    Its linear variant is the best one measured (docs/results.md, Copy task): Based's taylor map.
    """
    cfg = yaml.safe_load((REPO / "configs/paper/copy.yaml").read_text())
    data = cfg["data"]["init_args"]
    assert data["n_symbols"] == 10 and 2 * data["max_len"] + 2 == 128 and data["min_len"] == 32
    model = cfg["model"]["model"]
    assert model["attention"] == "linear" and model["position"] == "sinusoidal"  # the paper's model had positions
    assert model["feature_map"] == "taylor"
    assert model["vocab_size"] >= data["n_symbols"] + 2


def test_paper_size_examples_copy_the_first_half():
    rng = np.random.default_rng(1)
    lengths = set()
    for _ in range(50):
        inp, tgt = copy_example(rng, 10, 63, 32)
        n = int((tgt != IGNORE).sum())
        lengths.add(n)
        assert inp.shape == tgt.shape == (127,) and 32 <= n <= 63
        assert inp[0] == SEP and inp[n + 1] == SEP and np.all(inp[2 * n + 2 :] == PAD)
        np.testing.assert_array_equal(tgt[n + 1 : 2 * n + 1], inp[1 : n + 1])
        np.testing.assert_array_equal(inp[n + 2 : 2 * n + 2], inp[1 : n + 1])  # the input repeats the sequence
    assert min(lengths) < 40 and max(lengths) > 55  # lengths vary over the whole range


def test_datamodule_batches_and_held_out_set():
    dm = CopyTaskDataModule(n_symbols=10, max_len=63, min_len=32, batch_size=8, train_size=16, val_size=8)
    train = next(iter(dm.train_dataloader()))
    val = next(iter(dm.val_dataloader()))
    assert train["input"].shape == (8, 127) and train["reset"].all()
    assert val["input"].shape == (8, 127)
    val_again = next(iter(dm.val_dataloader()))
    assert torch.equal(val["input"], val_again["input"])  # fixed held-out set
    train_rows = {tuple(r.tolist()) for b in dm.train_dataloader() for r in b["input"]}
    assert not train_rows & {tuple(r.tolist()) for r in val["input"]}  # a different seed stream


def _tiny_recipe(**over) -> dict:
    """The recipe as benchmarks/copy_task.py reads it, shrunk so a step takes milliseconds."""
    import copy_task

    r = copy_task.load_recipe()
    r["model"].update(d_model=16, n_layers=1, n_heads=2, chunk_size=8)
    r["data"].update(max_len=5, min_len=2, batch_size=4, val_size=8, train_size=64)
    return {**r, **over}


def test_copy_benchmark_reads_the_recipe_it_documents():
    """The benchmark trains with configs/paper/copy.yaml's optimizer, schedule and stopping threshold."""
    import copy_task

    cfg = yaml.safe_load((REPO / "configs/paper/copy.yaml").read_text())
    r = copy_task.load_recipe()
    assert r["model"] == cfg["model"]["model"] and r["data"] == cfg["data"]["init_args"]
    assert r["lr"] == cfg["model"]["lr"] and r["warmup_steps"] == cfg["model"]["warmup_steps"]
    assert r["max_steps"] == cfg["trainer"]["max_steps"] and r["val_every"] == cfg["trainer"]["val_check_interval"]
    assert r["threshold"] == 0.05
    model = copy_task.LinearTransformerLM(copy_task.ModelConfig(**{**r["model"], "d_model": 16, "n_heads": 2}))
    opt, sched = copy_task.make_optimizer(model, r)
    decayed = {id(p) for p in opt.param_groups[0]["params"]}
    assert all((p.dim() >= 2) == (id(p) in decayed) for p in model.parameters())  # LMTask's groups
    lrs = []
    for _ in range(3):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs == pytest.approx([r["lr"] * (s + 1) / r["warmup_steps"] for s in range(3)])  # linear warmup


@pytest.mark.parametrize(
    "name",
    [
        "softmax",
        "elu1",
        "taylor",
        "delta",
        "gated-delta",
        "taylor-delta",
        "delta-silu",
        "gated-delta-silu",
        "delta-silu-1x64-conv8",
        "taylor-conv8",
        "taylor-kmer",
    ],
)
def test_copy_benchmark_variants_build_on_the_recipe(name):
    """Every variant is the recipe's model with its own keys: it builds and scores the held-out set."""
    import copy_task

    res = copy_task.train_copy(_tiny_recipe(val_every=1, threshold=-1.0), copy_task.VARIANTS[name], budget=2)
    assert res["steps"] is None and res["trained"] == 2 and len(res["bits"]) == 2
    assert all(0 < b < 10 for b in res["bits"])
    heads = copy_task.VARIANTS[name].get("n_heads", 2)  # a variant's own keys win over the recipe's (here 2 x 8)
    assert res["heads"] == f"{heads}x{16 // heads}"


def test_copy_benchmark_stops_at_the_threshold():
    """'steps' is the first evaluated step below the threshold, and training stops there."""
    import copy_task

    res = copy_task.train_copy(_tiny_recipe(val_every=2, threshold=100.0), copy_task.VARIANTS["elu1"], budget=10)
    assert res["steps"] == 2 and res["trained"] == 2 and len(res["bits"]) == 1
    assert copy_task.parse_set(["n_heads=1", "decay=[0.9, 0.99]", "feature_dim=null"]) == {
        "n_heads": 1,
        "decay": [0.9, 0.99],
        "feature_dim": None,
    }

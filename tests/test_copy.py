"""The paper's copy task (§4.1): data layout at the paper's size and the recipe that trains it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import yaml

from data.copy_task import IGNORE, PAD, SEP, CopyTaskDataModule, copy_example

REPO = Path(__file__).resolve().parents[1]


def test_recipe_matches_the_paper_size():
    """configs/paper/copy.yaml: 10 symbols, 128-token sequences copying 32..63 symbols, linear with positions."""
    cfg = yaml.safe_load((REPO / "configs/paper/copy.yaml").read_text())
    data = cfg["data"]["init_args"]
    assert data["n_symbols"] == 10 and 2 * data["max_len"] + 2 == 128 and data["min_len"] == 32
    model = cfg["model"]["model"]
    assert model["attention"] == "linear" and model["position"] == "sinusoidal"  # the paper's model had positions
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

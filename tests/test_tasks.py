"""The LM task: loss and metrics, the lr schedule, carried state (TBPTT), checkpointed backprop, seq-len warmup."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from strandline.data.copy_task import IGNORE, SEP, copy_example
from strandline.models import LMState, ModelConfig
from strandline.models.layers import LinearState
from strandline.tasks.callbacks import warmup_seq_len
from strandline.tasks.lm import LMTask, lr_factor, nll_sum, pack_state, reset_state, unpack_state

TINY = ModelConfig(vocab_size=16, d_model=32, n_layers=2, n_heads=2, chunk_size=16)


def test_nll_sum_excludes_ignored_targets():
    logits = torch.randn(2, 5, 16)
    target = torch.tensor([[4, 5, -100, 6, 7], [-100, -100, 8, 4, 5]])
    total, count = nll_sum(logits, target)
    keep = target != -100
    ref = F.cross_entropy(logits[keep], target[keep], reduction="sum")
    assert count == 7 and torch.allclose(total, ref)
    total0, count0 = nll_sum(logits, torch.full((2, 5), -100))
    assert count0 == 0 and total0 == 0


def test_lr_schedule_warmup_then_cosine():
    f = [lr_factor(s, 10, 110, 0.1) for s in range(120)]
    assert f[0] == pytest.approx(0.1) and f[9] == pytest.approx(1.0)
    assert all(a <= b for a, b in zip(f[:10], f[1:10], strict=False))
    assert all(a >= b for a, b in zip(f[10:110], f[11:111], strict=False))
    assert f[60] == pytest.approx(0.1 + 0.9 * 0.5, abs=1e-9)  # half way: cosine at 1/2
    assert f[110] == pytest.approx(0.1) and f[119] == pytest.approx(0.1)


def test_reset_state_detaches_and_zeros_rows():
    S = torch.randn(3, 2, 4, 4, requires_grad=True)
    z = torch.randn(3, 2, 4, requires_grad=True)
    conv = torch.randn(3, 3, 8, requires_grad=True)
    new = reset_state(LMState((LinearState(S * 2, z * 2, conv * 2),), None), torch.tensor([False, True, False]))
    s = new.layers[0]
    assert not s.S.requires_grad and not s.conv.requires_grad
    assert torch.all(s.S[1] == 0) and torch.all(s.z[1] == 0) and torch.all(s.conv[1] == 0)
    assert torch.equal(s.S[0], (S * 2)[0].detach()) and torch.equal(s.z[2], (z * 2)[2].detach())
    assert reset_state(new, torch.tensor([True, True, True])) is None


def test_carried_state_packs_for_weights_only_checkpoints():
    task = LMTask(model=TINY)
    _, state = task.model(torch.randint(4, 9, (2, 20)))
    buf = io.BytesIO()
    torch.save({"tbptt": pack_state(state)}, buf)
    buf.seek(0)
    back = unpack_state(torch.load(buf, weights_only=True)["tbptt"])
    assert isinstance(back, LMState) and back.memory is None
    assert [type(s) for s in back.layers] == [type(s) for s in state.layers]
    assert all(torch.equal(x, y) for x, y in zip(state.tensors(), back.tensors(), strict=True))
    assert pack_state(None) is None and unpack_state(None) is None
    with pytest.raises(ValueError, match="not a strandline.models state"):
        unpack_state([{"type": "os.system", "fields": {}}])


def test_tbptt_carried_state_equals_one_long_pass():
    """Window 2 scored with the state carried from window 1 == the second half of one pass over both."""
    task = LMTask(model=TINY, long_context="tbptt").double().eval()
    x = torch.randint(4, 9, (2, 81))
    inp, tgt = x[:, :-1], x[:, 1:]
    full, _ = task.model(inp)
    ref = F.cross_entropy(full[:, 40:].reshape(-1, 16), tgt[:, 40:].reshape(-1))
    b1 = {"input": inp[:, :40], "target": tgt[:, :40], "reset": torch.tensor([True, True])}
    b2 = {"input": inp[:, 40:], "target": tgt[:, 40:], "reset": torch.tensor([False, False])}
    with torch.no_grad():
        task._window_loss(b1, "val")
        loss, count = task._window_loss(b2, "val")
        assert count == 80 and torch.allclose(loss, ref, atol=1e-10)
        b2["reset"] = torch.tensor([True, False])  # row 0 restarts: its loss must change, row 1's not
        task._window_loss(b1, "val")
        loss_reset, _ = task._window_loss(b2, "val")
    assert not torch.allclose(loss_reset, ref)


def test_checkpointed_backprop_matches_plain():
    torch.manual_seed(0)
    plain = LMTask(model=TINY).double()
    ckpt = LMTask(model=ModelConfig(**{**TINY.to_dict(), "checkpoint_activations": True})).double()
    ckpt.load_state_dict(plain.state_dict())
    x = torch.randint(4, 9, (2, 70))
    batch = {"input": x[:, :-1], "target": x[:, 1:], "reset": torch.ones(2, dtype=torch.bool)}
    for t in (plain, ckpt):
        t.train()
        t._window_loss(batch, "train")[0].backward()
    for (n, p), q in zip(plain.named_parameters(), ckpt.parameters(), strict=True):
        assert torch.allclose(p.grad, q.grad, atol=1e-10), n


def test_hparams_are_plain_and_load_with_weights_only():
    task = LMTask(model=TINY, tokenizer="bytes", betas=(0.8, 0.9))
    hp = dict(task.hparams)
    assert hp["model"] == TINY.to_dict() and hp["tokenizer"] == "bytes" and hp["betas"] == [0.8, 0.9]
    buf = io.BytesIO()
    torch.save({"hyper_parameters": hp, "state_dict": task.state_dict()}, buf)
    buf.seek(0)
    back = torch.load(buf, weights_only=True)
    again = LMTask(**back["hyper_parameters"])
    assert again.model.config == TINY
    with pytest.raises(ValueError, match="long_context"):
        LMTask(model=TINY, long_context="chunks")


def test_seq_len_warmup_schedule_and_crop():
    lens = [warmup_seq_len(s, 64, 1024, 100) for s in range(0, 120, 10)]
    assert lens[0] == 64 and lens[-1] == 1024 and sorted(lens) == lens
    assert all(1024 % L == 0 for L in lens)
    task = LMTask(model=TINY)
    batch = {"input": torch.arange(2 * 256).view(2, 256), "target": torch.zeros(2, 256, dtype=torch.long)}
    task.train_seq_len = 64
    out = task._crop(batch)
    assert out["input"].shape == (8, 64) and torch.equal(out["input"][1], torch.arange(64, 128))
    task.train_seq_len = 100  # does not divide: batch unchanged
    assert task._crop(batch)["input"].shape == (2, 256)


def test_copy_example_scores_only_the_copy():
    rng = np.random.default_rng(0)
    for _ in range(20):
        inp, tgt = copy_example(rng, 10, 16)
        n = int((tgt != IGNORE).sum())
        assert inp.shape == (33,) and 1 <= n <= 16
        assert inp[0] == SEP and inp[n + 1] == SEP
        np.testing.assert_array_equal(tgt[n + 1 : 2 * n + 1], inp[1 : n + 1])  # the copy of x_1..x_n
        assert np.all((inp[1 : n + 1] >= 2) & (inp[1 : n + 1] < 12))

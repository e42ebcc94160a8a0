"""Feature maps: non-negative, per-token (so every mode stays exact), selected by name."""

import math

import pytest
import torch

from models import FEATURE_MAPS, make_feature_map


@pytest.mark.parametrize("name", sorted(FEATURE_MAPS))
def test_positive_kernel_and_per_token(name):
    fm = make_feature_map(name, head_dim=8, n_heads=3, feature_dim=16)
    x = torch.randn(2, 30, 3, 8) * 2
    kernel = torch.einsum("bthm,bshm->bhts", fm(x, is_query=True), fm(x))
    assert (kernel >= 0).all()  # what keeps the normalizer q·z >= 0 (relu rows can be all-zero: eps covers it)
    for is_query in (False, True):
        y = fm(x, is_query=is_query)
        assert y.shape == (2, 30, 3, fm.out_dim)
        assert torch.isfinite(y).all()
        if name != "taylor":  # Taylor features can be negative; its kernel is >= 1/2 (tested below)
            assert (y >= 0).all()
        # a per-token function: mapping a slice equals slicing the map
        torch.testing.assert_close(fm(x[:, 7:19], is_query=is_query), y[:, 7:19])


def test_performer_estimates_the_softmax_kernel():
    """FAVOR+ features: φ(q)·φ(k) is an unbiased estimate of exp(q·k/√d); many features make it close."""
    d = 16
    fm = make_feature_map("performer", head_dim=d, n_heads=1, feature_dim=4096)
    q, k = torch.randn(1, 50, 1, d) * 0.5, torch.randn(1, 50, 1, d) * 0.5
    est = torch.einsum("bthm,bshm->ts", fm(q), fm(k))
    exact = torch.exp(torch.einsum("bthd,bshd->ts", q, k) / math.sqrt(d))
    rel = ((est - exact).abs() / exact).median().item()
    assert rel < 0.1, rel


def test_unknown_name():
    with pytest.raises(ValueError, match="unknown feature map"):
        make_feature_map("cosine", 8, 2)


@pytest.mark.parametrize("feature_dim", [None, 6], ids=["no-proj", "proj6"])
def test_taylor_is_the_second_order_expansion(feature_dim):
    """φ(q)·φ(k) = 1 + s + s²/2 with s = q'·k'/√d (q', k' the projected inputs), stored in 1 + d + d(d+1)/2 dims."""
    fm = make_feature_map("taylor", head_dim=8, n_heads=2, feature_dim=feature_dim).double()
    d = feature_dim or 8
    assert fm.out_dim == 1 + d + d * (d + 1) // 2
    q, k = torch.randn(1, 20, 2, 8, dtype=torch.float64), torch.randn(1, 20, 2, 8, dtype=torch.float64)
    if feature_dim is not None:
        qp, kp = (torch.einsum("bthk,hkd->bthd", x, fm.proj) for x in (q, k))
    else:
        qp, kp = q, k
    s = torch.einsum("bthd,bshd->bhts", qp, kp) / math.sqrt(d)
    kernel = torch.einsum("bthm,bshm->bhts", fm(q, is_query=True), fm(k))
    torch.testing.assert_close(kernel, 1 + s + s * s / 2, rtol=1e-12, atol=1e-12)
    assert kernel.min() >= 0.5 - 1e-12


def test_taylor_projection_is_learned():
    fm = make_feature_map("taylor", head_dim=8, n_heads=2, feature_dim=4)
    fm(torch.randn(1, 5, 2, 8)).sum().backward()
    assert fm.proj.grad is not None and fm.proj.grad.abs().sum() > 0

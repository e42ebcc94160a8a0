"""Feature maps: non-negative, per-token (so every mode stays exact), selected by name."""

import math

import pytest
import torch

from models import FEATURE_MAPS, make_feature_map


@pytest.mark.parametrize("name", sorted(FEATURE_MAPS))
def test_nonnegative_and_per_token(name):
    fm = make_feature_map(name, head_dim=8, n_heads=3, feature_dim=16)
    x = torch.randn(2, 30, 3, 8) * 2
    for is_query in (False, True):
        y = fm(x, is_query=is_query)
        assert y.shape == (2, 30, 3, fm.out_dim)
        assert (y >= 0).all() and torch.isfinite(y).all()
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

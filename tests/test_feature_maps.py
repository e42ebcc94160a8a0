"""Feature maps: non-negative, per-token (so every mode stays exact), selected by name."""

import math

import pytest
import torch

from strandline.models import FEATURE_MAPS, make_feature_map


@pytest.mark.parametrize("name", sorted(n for n, c in FEATURE_MAPS.items() if c.positive_kernel))
def test_positive_kernel_and_per_token(name):  # the signed silu, identity: tests/test_feature_maps_signed.py
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


def test_elu1_autograd_function():
    """Elu1 saves only its output (backward grad·min(φ, 1)): gradcheck in float64, across x = 0, and the
    values and gradients of max(x, 0) + e^min(x, 0) (= F.elu(x) + 1, without its rounding)."""
    fm = make_feature_map("elu1", head_dim=4, n_heads=2)
    x = torch.cat([torch.randn(60, dtype=torch.float64) * 3, torch.tensor([0.0, -1e-9, 1e-9], dtype=torch.float64)])
    x = x.view(1, 7, 3, 3).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: fm(t), (x,))
    y = fm(x)
    assert y.grad_fn is not None and "Elu1" in type(y.grad_fn).__name__
    w = torch.arange(63.0, dtype=torch.float64).view(y.shape)
    (g,) = torch.autograd.grad((y * w).sum(), x)
    xd = x.detach()
    torch.testing.assert_close(y, torch.where(xd > 0, xd + 1, xd.exp()), rtol=1e-15, atol=0)
    torch.testing.assert_close(g, w * torch.where(xd > 0, torch.ones_like(xd), xd.exp()), rtol=1e-15, atol=0)
    torch.testing.assert_close(y, torch.nn.functional.elu(xd) + 1, rtol=0, atol=1e-15)  # the paper's map
    with torch.no_grad():
        assert fm(x).grad_fn is None


@pytest.mark.parametrize("name", ["elu1", "relu"])
def test_pointwise_maps_match_their_modules(name):
    """The block form of a pointwise map (used inside the chunked op) and its derivative from the output."""
    from strandline.models.feature_maps import POINTWISE

    fm = make_feature_map(name, head_dim=8, n_heads=2)
    assert fm.pointwise == name
    x = torch.randn(2, 30, 2, 8, dtype=torch.float64) * 2
    block = x[0, 3:27, 1].view(3, 8, 8)  # a strided view, as the op passes it
    phi, dphi = POINTWISE[name]
    torch.testing.assert_close(phi(block), fm(block.contiguous()), rtol=0, atol=0)
    assert phi(block).data_ptr() != block.data_ptr()  # never in place on the caller's tensor
    xg = block.clone().requires_grad_()
    (auto,) = torch.autograd.grad(fm(xg).sum(), xg)
    torch.testing.assert_close(dphi(phi(block)), auto, rtol=0, atol=1e-15)
    assert make_feature_map("taylor", 8, 2).pointwise is None


def test_elu1_keeps_every_digit_of_a_tiny_exponential_in_float32():
    """elu(x) + 1 = e^x for x <= 0: computed as (e^x - 1) + 1 it rounds to 0 at x = -20; here it is e^x
    to float32 precision everywhere, as the chunked op's own block map computes it."""
    from strandline.models.feature_maps import POINTWISE, elu1

    x = torch.linspace(-30, 8, 4001)
    ref = torch.where(x.double() > 0, x.double() + 1, torch.exp(x.double()))
    for phi in (elu1(x), POINTWISE["elu1"][0](x)):
        assert ((phi.double() - ref).abs() / ref).max() < 1e-6

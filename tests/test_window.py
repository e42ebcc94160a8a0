"""Sliding-window attention (``window: W``): the softmax window and the window + linear hybrid.

Op (models/ops/window.py): naive == chunked == recurrent for outputs, final state and gradients (the
incoming buffers, S and z included) across splits, T < W, T = W, T >> W, W not a multiple of C, lanes at
different positions; the degenerate cases (W = 0 is linear attention, W >= T is causal softmax).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from test_variants import TOL

from strandline.models.ops import window as ops_window
from strandline.models.ops.linear import linear_attention
from strandline.models.ops.window import WindowState, window_attention


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Max error relative to the reference's largest entry, absolute below 1e-2: with W = 1 the softmax
    window's dq is 0 in theory and ~1e-16 in practice (test_variants' version divides by the 0)."""
    return ((out.double() - ref.double()).abs().max() / ref.double().abs().max().clamp(min=1e-2)).item()


def assert_rel(name: str, out, ref, dtype) -> None:
    err = rel_err(out, ref)
    assert err < TOL[dtype], f"{name}: relative error {err:.2e} >= {TOL[dtype]:.0e}"


def phi(x: torch.Tensor) -> torch.Tensor:
    return F.elu(x) + 1


def op_inputs(T: int, W: int, dtype, hybrid: bool, seed: int = 0, B: int = 2, H: int = 2, d: int = 4, V: int = 3):
    """Leaf tensors: q, k, v and an incoming state whose buffers are full of junk where a lane has no token."""
    g = torch.Generator().manual_seed(seed)
    x = {
        "q": torch.randn(B, T, H, d, generator=g, dtype=dtype),
        "k": torch.randn(B, T, H, d, generator=g, dtype=dtype),
        "v": torch.randn(B, T, H, V, generator=g, dtype=dtype),
        "bk": torch.randn(B, W, H, d, generator=g, dtype=dtype),
        "bv": torch.randn(B, W, H, V, generator=g, dtype=dtype),
    }
    if hybrid:
        x["S0"] = torch.rand(B, H, d, V, generator=g, dtype=dtype)
        x["z0"] = torch.rand(B, H, d, generator=g, dtype=dtype) + 0.5
    return {n: t.requires_grad_() for n, t in x.items()}


SEEN = torch.tensor([2, 50])  # lane 0 has read 2 tokens (fewer than any W tested), lane 1 more than W


def run(x: dict, W: int, mode: str, C: int, cuts=(), decay=None, seen=SEEN):
    """The op over x's sequence in calls split at ``cuts``; outputs, final state and every gradient."""
    hybrid = "S0" in x
    T = x["q"].shape[1]
    state = WindowState(x["bk"], x["bv"], x.get("S0"), x.get("z0"))
    outs = []
    for a, b in zip([0, *cuts], [*cuts, T], strict=True):
        q, k, v = (x[n][:, a:b] for n in ("q", "k", "v"))
        fq = phi(q) if hybrid else None
        o, state = window_attention(
            q, k, v, W, state, seen + a, fq=fq, phi=phi if hybrid else None, mode=mode, chunk_size=C,
            decay=decay, state_dtype=x["q"].dtype,
        )  # fmt: skip
        outs.append(o)
    out = torch.cat(outs, 1)
    g = torch.Generator().manual_seed(9)
    loss = (out * torch.cos(out)).sum()
    for t in state:
        if t is not None:
            loss = loss + (t * torch.randn(t.shape, generator=g, dtype=t.dtype)).sum()
    grads = torch.autograd.grad(loss, list(x.values()), allow_unused=True)
    res = {"out": out, **{f"state.{n}": t for n, t in state._asdict().items() if t is not None}}
    res.update({f"d{n}": gr for n, gr in zip(x, grads, strict=True) if gr is not None})
    return res


CASES = [
    pytest.param(5, 12, 8, id="T5<W12"),
    pytest.param(12, 12, 8, id="T12=W12"),
    pytest.param(61, 5, 8, id="T61>>W5"),
    pytest.param(70, 13, 8, id="T70-W13-C8"),
    pytest.param(40, 1, 16, id="W1"),
]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("T,W,C", CASES)
@pytest.mark.parametrize("hybrid", [True, False], ids=["hybrid", "softmax"])
def test_op_modes_agree(hybrid, T, W, C, dtype):
    x = op_inputs(T, W, dtype, hybrid)
    decay = [0.9, 0.99] if hybrid else None
    ref = run(x, W, "naive", C, decay=decay)
    for mode in ("chunked", "recurrent"):
        got = run(x, W, mode, C, decay=decay)
        assert got.keys() == ref.keys()
        for name in ref:
            assert_rel(f"{mode} {name}", got[name], ref[name], dtype)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("hybrid", [True, False], ids=["hybrid", "softmax"])
def test_op_any_split_is_exact(hybrid, dtype):
    """f(x) == f(x[:a]) then f(x[a:], state), gradients included, cuts on and off chunk and window sizes."""
    T, W, C = 50, 7, 8
    x = op_inputs(T, W, dtype, hybrid, seed=1)
    ref = run(x, W, "chunked", C)
    for cuts in ([1], [7], [8], [3, 4, 29], list(range(5, T, 6)), list(range(1, T))):
        for mode in ("chunked", "recurrent"):
            got = run(x, W, mode, C, cuts)
            for name in ref:
                assert_rel(f"{mode} cuts={cuts} {name}", got[name], ref[name], dtype)


@pytest.mark.parametrize("hybrid", [True, False], ids=["hybrid", "softmax"])
def test_slots_a_lane_has_not_read_are_ignored(hybrid):
    """Junk in the buffer slots before a lane's first token changes nothing and gets no gradient."""
    T, W = 9, 6
    x = op_inputs(T, W, torch.float64, hybrid)
    seen = torch.tensor([2, 0])
    ref = run(x, W, "chunked", 8, seen=seen)
    unread = torch.zeros(2, W, 1, 1, dtype=torch.bool)
    unread[0, : W - 2] = unread[1] = True
    for n in ("bk", "bv"):
        assert (ref[f"d{n}"].masked_select(unread) == 0).all(), n
    y = {
        n: (t.detach().masked_fill(unread, 7.0) if n in ("bk", "bv") else t.detach()).requires_grad_()
        for n, t in x.items()
    }
    got = run(y, W, "chunked", 8, seen=seen)
    torch.testing.assert_close(got["out"], ref["out"], rtol=0, atol=1e-14)


def test_lanes_at_different_positions_equal_each_lane_alone():
    x = op_inputs(20, 6, torch.float64, True)
    both = run(x, 6, "chunked", 8, seen=torch.tensor([3, 40]))
    for lane, s in ((0, 3), (1, 40)):
        one = {n: t.detach()[lane : lane + 1].requires_grad_() for n, t in x.items()}
        alone = run(one, 6, "chunked", 8, seen=torch.tensor([s]))
        torch.testing.assert_close(alone["out"], both["out"][lane : lane + 1], rtol=0, atol=1e-13)


@pytest.mark.parametrize("decay", [None, [0.8, 0.97]], ids=["no-decay", "decay"])
@pytest.mark.parametrize("mode", ["chunked", "recurrent", "naive"])
def test_window_zero_hybrid_is_linear_attention(mode, decay):
    """No window: the hybrid's formula is the paper's normalized linear attention, eps in the same place."""
    x = {n: t.detach() for n, t in op_inputs(33, 0, torch.float64, True).items()}
    out, st = window_attention(
        x["q"], x["k"], x["v"], 0, WindowState(x["bk"], x["bv"], x["S0"], x["z0"]), fq=phi(x["q"]), phi=phi,
        mode=mode, chunk_size=8, decay=decay, state_dtype=torch.float64,
    )  # fmt: skip
    from strandline.models.ops.linear import AttnState

    ref, ref_st = linear_attention(
        phi(x["q"]), phi(x["k"]), x["v"], AttnState(x["S0"], x["z0"]), mode="naive", decay=decay
    )
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(st.S, ref_st.S, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(st.z, ref_st.z, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode", ["chunked", "recurrent", "naive"])
def test_window_covering_the_sequence_is_causal_softmax(mode):
    x = {n: t.detach() for n, t in op_inputs(30, 30, torch.float64, False).items()}
    out, _ = window_attention(x["q"], x["k"], x["v"], 30, mode=mode)
    q, k, v = (x[n].transpose(1, 2) for n in ("q", "k", "v"))
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    short, _ = window_attention(x["q"], x["k"], x["v"], 4, mode=mode)
    assert rel_err(short, ref) > 1e-2  # a window shorter than T really cuts


def test_hybrid_stays_finite_for_large_and_very_negative_scores():
    """Scores of ±300 overflow e^s in float32; the shared stabilizer keeps every term <= 1."""
    x = {n: t.detach() for n, t in op_inputs(40, 6, torch.float32, True).items()}
    for scale in (300.0, -300.0):
        q = x["q"].sign() * scale / 2
        k = x["k"].sign() * 2.0
        outs = [
            window_attention(q, k, x["v"], 6, fq=phi(x["q"]), phi=phi, mode=m, chunk_size=8)[0]
            for m in ("chunked", "recurrent")
        ]
        assert all(torch.isfinite(o).all() for o in outs)
        torch.testing.assert_close(outs[0], outs[1], rtol=1e-4, atol=1e-5)


def test_op_state_is_a_value_and_buffer_stays_w():
    x = {n: t.detach() for n, t in op_inputs(10, 4, torch.float64, True).items()}
    st = WindowState(x["bk"], x["bv"], x["S0"], x["z0"])
    snap = [t.clone() for t in st]
    seen = torch.tensor([0, 0])
    for _ in range(10):  # 10 calls of 10 tokens = 25 windows
        o, new = window_attention(
            x["q"], x["k"], x["v"], 4, st, seen, fq=phi(x["q"]), phi=phi, state_dtype=torch.float64
        )
        seen = seen + 10
    assert new.k.shape == (2, 4, 2, 4) and new.v.shape == (2, 4, 2, 3)
    assert all(torch.equal(a, b) for a, b in zip(st, snap, strict=True))


def test_bf16_autocast_keeps_float32_state():
    x = {n: t.detach().float() for n, t in op_inputs(40, 9, torch.float64, True).items()}
    st = WindowState(x["bk"], x["bv"], x["S0"], x["z0"])
    ref, ref_st = window_attention(x["q"], x["k"], x["v"], 9, st, SEEN, fq=phi(x["q"]), phi=phi, chunk_size=16)
    for mode in ("chunked", "recurrent"):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            qb, kb, vb = (x[n].bfloat16() for n in ("q", "k", "v"))
            out, new = window_attention(qb, kb, vb, 9, st, SEEN, fq=phi(qb), phi=phi, mode=mode, chunk_size=16)
        assert out.dtype == torch.bfloat16 and new.S.dtype == new.z.dtype == new.k.dtype == torch.float32, mode
        assert rel_err(out, ref) < 3e-2 and rel_err(new.S, ref_st.S) < 3e-2, mode


@pytest.mark.parametrize("recompute", [False, True], ids=["keep-scores", "recompute"])
@pytest.mark.parametrize("hybrid", [True, False], ids=["hybrid", "softmax"])
def test_chunked_backward_memory_is_never_t_squared(hybrid, recompute, monkeypatch):
    """Saved for backward: the window scores of Cq queries against their Cq+W-1 keys (never T×T), or past
    ``RECOMPUTE_ELEMS`` only the inputs, the scores recomputed by group; the gradients are the same."""
    T, W = 512, 8
    x = op_inputs(T, W, torch.float32, hybrid)
    ref = run(x, W, "chunked", 16)
    monkeypatch.setattr(ops_window, "RECOMPUTE_ELEMS", 0 if recompute else 1 << 40)
    sizes = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: sizes.append(t.numel()) or t, lambda t: t):
        got = run(x, W, "chunked", 16)
    B, H = x["q"].shape[0], x["q"].shape[2]
    scores = B * H * T * (32 + W - 1)  # Cq = 32 for W = 8
    assert sizes and sum(sizes) < B * H * T * T  # everything saved together is below one T×T score matrix
    assert max(sizes) <= scores and (max(sizes) < scores // 2) == recompute
    for name in ref:
        torch.testing.assert_close(got[name], ref[name], rtol=0, atol=1e-6)


def test_a_state_without_its_token_counter_is_refused():
    x = {n: t.detach() for n, t in op_inputs(4, 3, torch.float64, False).items()}
    with pytest.raises(ValueError, match="without seen"):
        window_attention(x["q"], x["k"], x["v"], 3, WindowState(x["bk"], x["bv"]))
    with pytest.raises(ValueError, match="buffers 3 tokens, the window is 5"):
        window_attention(x["q"], x["k"], x["v"], 5, WindowState(x["bk"], x["bv"]), SEEN)

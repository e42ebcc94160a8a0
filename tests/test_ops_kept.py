"""What the chunked op's forward keeps for its backward, stored in the gradients' own memory (``_Kept``).

The chunk states live in dv's rows when K <= C, the masked scores in dq's columns when C <= K, and q, k, v
that are the slots of one projection get their gradients as the slots of one buffer, which
``unbind_slots`` hands back without a stack. Every layout must give the naive op's gradients.
"""

import pytest
import torch
import torch.nn.functional as F
from test_ops import assert_close, make_inputs, run_mode

from strandline.models.ops.gated import gated_linear_attention
from strandline.models.ops.linear import AttnState, linear_attention
from strandline.models.ops.linear.kept import _Kept, _Slots, unbind_slots

# (K, C): the states in dv and the scores in dq; the scores only (K > C: S kept apart); the states only (K < C)
LAYOUTS = [
    pytest.param(8, 8, id="K8-C8-both"),
    pytest.param(12, 8, id="K12-C8-scores"),
    pytest.param(6, 8, id="K6-C8-states"),
]


@pytest.mark.parametrize("K,C", LAYOUTS)
@pytest.mark.parametrize("T", [101, 96, 5], ids=["tail", "whole-chunks", "shorter-than-a-chunk"])
@pytest.mark.parametrize("decay", [None, [1.0, 0.9]], ids=["nodecay", "decay"])
@pytest.mark.parametrize("budget", [1, 3000], ids=["one-chunk-blocks", "few-chunk-blocks"])
def test_kept_layouts_match_naive(monkeypatch, K, C, T, decay, budget):
    import strandline.models.ops.linear.chunked as oc

    monkeypatch.setitem(oc.BLOCK_ELEMS, "cpu", budget)
    inputs = make_inputs(2, T, 2, K, 8, torch.float64)
    d = None if decay is None else torch.tensor(decay, dtype=torch.float64)
    ref, got = run_mode("naive", *inputs, C, d), run_mode("chunked", *inputs, C, d)
    for name in ref:
        assert_close(name, ref[name].detach(), got[name].detach(), 1e-10)


def test_layout_choice():
    """K == C keeps both in the gradients (no S of its own); K > C keeps S apart; a tail chunk's state apart."""
    q, k, v, S0, z0 = make_inputs(1, 20, 2, 8, 8, torch.float32)
    both = _Kept.allocate(q, k, v, S0, z0, 8)
    assert both.scores and both.S is None and both.S_tail.shape == (1, 2, 8, 8) and both.grads[1] is None
    q, k, _, S0, z0 = make_inputs(1, 16, 2, 12, 8, torch.float32)
    apart = _Kept.allocate(q, k, v[:, :16], S0, z0, 8)
    assert apart.scores and apart.S.shape == (1, 2, 2, 12, 8) and apart.S_tail is None and apart.grads[2] is None
    bf = _Kept.allocate(*(x.bfloat16() for x in (q, k, v[:, :16])), S0, z0, 16)  # float32 S does not fit bf16 dv
    assert not bf.scores and bf.S is not None


@pytest.mark.parametrize("fmap", [None, "elu1"], ids=["phi-outside", "phi-inside"])
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)], ids=["f64", "f32"])
def test_slots_of_one_projection(fmap, dtype, tol):
    """q, k, v as the slots of one [B, T, 3, H, D] tensor (the layer's call): the op writes their gradients
    into one buffer and ``unbind_slots`` returns it as h's gradient; equal to h.unbind(2) + the naive op."""
    g = torch.Generator().manual_seed(5)
    h = torch.randn(2, 75, 3, 2, 8, generator=g, dtype=dtype, requires_grad=True)
    w = torch.randn(2, 75, 2, 8, generator=g, dtype=dtype)
    res = {}
    for name, split, mode in (("ref", lambda x: x.unbind(2), "naive"), ("slots", unbind_slots, "chunked")):
        q, k, v = split(h)
        if fmap is None:
            q, k = F.elu(q) + 1, F.elu(k) + 1
        out, st = linear_attention(q, k, v, mode=mode, chunk_size=8, feature_map=fmap if mode == "chunked" else None)
        if fmap is not None and mode == "naive":
            out, st = linear_attention(F.elu(q) + 1, F.elu(k) + 1, v, mode="naive")
        res[name] = (out.detach(), *torch.autograd.grad((out * w).sum() + st.S.sum(), h))
    for i, name in enumerate(("out", "dh")):
        assert_close(name, res["ref"][i], res["slots"][i], tol)


def test_slots_backward_reuses_the_shared_buffer_and_stacks_otherwise():
    """The gradient of h is the buffer the three slot gradients share (no copy); separate ones are stacked,
    and a missing one counts as zeros."""
    G = torch.randn(2, 5, 3, 2, 4)
    assert _Slots.backward(None, *G.unbind(2)).data_ptr() == G.data_ptr()
    dq, dk, dv = (torch.randn(2, 5, 2, 4) for _ in range(3))
    stacked = _Slots.backward(None, dq, dk, dv)
    assert torch.equal(stacked, torch.stack([dq, dk, dv], 2))
    assert torch.equal(_Slots.backward(None, dq, None, dv)[:, :, 1], torch.zeros_like(dk))
    swapped = G.unbind(2)
    assert torch.equal(_Slots.backward(None, swapped[1], swapped[0], swapped[2]), G[:, :, [1, 0, 2]])


def test_second_backward_recomputes_what_the_first_overwrote():
    """retain_graph: the first backward writes dq, dv over the kept scores and states; a second one
    recomputes them and gets the same gradients."""
    q, k, v, S0, z0 = make_inputs(2, 101, 2, 8, 8, torch.float64)
    xs = [t.clone().requires_grad_() for t in (q, k, v, S0, z0)]
    out, st = linear_attention(*xs[:3], AttnState(xs[3], xs[4]), chunk_size=8, decay=[1.0, 0.9])
    loss = out.square().sum() + st.S.sum()
    first = torch.autograd.grad(loss, xs, retain_graph=True)
    second = torch.autograd.grad(loss, xs)
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("normalize", [True, False], ids=["z", "no-z"])
def test_gated_with_kept_scores_and_states(normalize):
    """The gated op (per-block gate tables) with K == C: scores and states kept in dq and dv."""
    q, k, v, S0, z0 = make_inputs(2, 77, 2, 8, 8, torch.float64)
    gate = torch.randn(2, 77, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    res = {}
    for mode in ("naive", "chunked"):
        xs = [t.clone().requires_grad_() for t in (q, k, v, S0, z0, gate)]
        state = AttnState(xs[3], xs[4] if normalize else None)
        log_a = F.logsigmoid(xs[5] + 2) * 3
        out, st = gated_linear_attention(*xs[:3], log_a, state, mode=mode, chunk_size=8, normalize=normalize)
        (out.square().sum() + st.S.sum()).backward()
        res[mode] = [out.detach()] + [x.grad for x in xs if x.grad is not None]
    for a, b in zip(res["naive"], res["chunked"], strict=True):
        assert_close("gated", a, b, 1e-10)


def test_kept_buffers_under_activation_checkpointing():
    """Non-reentrant checkpointing recomputes the forward (and its kept buffers) in the backward: the gradients
    equal those of the same step without checkpointing, with φ inside and q, k, v the slots of one projection."""
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    proj = torch.nn.Linear(16, 48).double()
    x = torch.randn(2, 90, 16, dtype=torch.float64)

    def body(x):
        q, k, v = unbind_slots(proj(x).view(2, 90, 3, 2, 8))
        out, st = linear_attention(q, k, v, chunk_size=8, decay=[1.0, 0.9], feature_map="elu1")
        return out, st.S

    grads = []
    for ckpt in (False, True):
        proj.zero_grad()
        out, S = checkpoint(body, x, use_reentrant=False) if ckpt else body(x)
        (out.square().sum() + S.sum()).backward()
        grads.append([p.grad.clone() for p in proj.parameters()])
    for a, b in zip(*grads, strict=True):
        assert torch.equal(a, b)


def test_prefaulted_buffers_give_the_same_results(monkeypatch):
    # every full-length buffer of the op (out, den, dq, dk, dv, kept states) zero-filled first, as big CPU ones
    # are, against none: the op writes every element, so outputs, final state and gradients agree bit for bit
    import strandline.models.ops.linear.kept as ok

    inputs = make_inputs(2, 101, 2, 8, 8, torch.float32)
    runs = []
    for threshold in (0, 1 << 62):
        monkeypatch.setattr(ok, "PREFAULT_BYTES", threshold)
        runs.append(run_mode("chunked", *inputs, 8, torch.tensor([1.0, 0.9], dtype=torch.float64)))
    for name in runs[0]:
        assert torch.equal(runs[0][name], runs[1][name]), name
    x = torch.ones(3)
    monkeypatch.setattr(ok, "PREFAULT_BYTES", 0)
    got = ok.fresh((2, 3), x, torch.float64)
    assert got.shape == (2, 3) and got.dtype == torch.float64 and not got.any()  # pre-faulted: zeros


def test_fresh_leaves_small_buffers_unwritten(monkeypatch):
    import strandline.models.ops.linear.kept as ok

    calls = []
    monkeypatch.setattr(torch.Tensor, "zero_", lambda self: calls.append(self.nbytes) or self)
    ok.fresh((4, 4), torch.ones(1))  # 64 bytes: from glibc's heap, already mapped
    big = ok.fresh((ok.PREFAULT_BYTES // 4,), torch.ones(1))
    assert calls == [big.nbytes]

"""The exactness suite of the op: naive == chunked == recurrent, for outputs, final state and gradients."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from strandline.models.ops.linear import AttnState, linear_attention

MODES = ("naive", "chunked", "recurrent")


def assert_close(name, ref, out, ratio):
    """Relative error ‖out-ref‖∞ / ‖ref‖∞ below ``ratio`` (FLA's error-ratio check)."""
    err = (out - ref).abs().max().item() / max(ref.abs().max().item(), 1e-30)
    assert err <= ratio, f"{name}: relative error {err:.3e} > {ratio:.0e}"


def make_inputs(B, T, H, K, V, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = F.elu(torch.randn(B, T, H, K, generator=g, dtype=dtype)) + 1
    k = F.elu(torch.randn(B, T, H, K, generator=g, dtype=dtype)) + 1
    v = torch.randn(B, T, H, V, generator=g, dtype=dtype)
    S0 = torch.rand(B, H, K, V, generator=g, dtype=dtype) * 3
    z0 = torch.rand(B, H, K, generator=g, dtype=dtype) * 3
    return q, k, v, S0, z0


def run_mode(mode, q, k, v, S0, z0, chunk_size, decay):
    """Forward + backward of a loss that touches the output and both parts of the final state."""
    xs = [t.clone().requires_grad_() for t in (q, k, v, S0, z0)]
    out, st = linear_attention(*xs[:3], AttnState(xs[3], xs[4]), mode=mode, chunk_size=chunk_size, decay=decay)
    g = torch.Generator().manual_seed(1)
    w_out = torch.randn(out.shape, generator=g, dtype=out.dtype)
    w_S = torch.randn(st.S.shape, generator=g, dtype=out.dtype)
    w_z = torch.randn(st.z.shape, generator=g, dtype=out.dtype)
    loss = (out * w_out).sum() + (st.S * w_S).sum() + (st.z * w_z).sum()
    loss.backward()
    return {
        "out": out,
        "S": st.S,
        "z": st.z,
        **{f"d{n}": x.grad for n, x in zip(("q", "k", "v", "S0", "z0"), xs, strict=True)},
    }


CASES = [
    pytest.param(2, 77, 2, 8, 6, 16, None, id="B2-T77-H2-C16"),
    pytest.param(1, 64, 3, 5, 7, 16, None, id="B1-T64-boundary-C16"),
    pytest.param(2, 5, 2, 4, 4, 16, None, id="B2-T5-shorter-than-chunk"),
    pytest.param(1, 300, 2, 8, 8, 32, [0.9, 0.5], id="B1-T300-decay"),
    pytest.param(2, 131, 3, 6, 4, 8, [1.0, 0.97, 0.7], id="B2-T131-decay-mixed"),
    pytest.param(1, 1, 2, 4, 4, 16, 0.9, id="T1-decay"),
]


@pytest.mark.parametrize("B,T,H,K,V,C,decay", CASES)
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 1e-4)], ids=["f64", "f32"])
def test_modes_agree(B, T, H, K, V, C, decay, dtype, tol):
    inputs = make_inputs(B, T, H, K, V, dtype)
    d = None if decay is None else torch.tensor(decay, dtype=torch.float64)
    ref = run_mode("naive", *inputs, C, d)
    for mode in ("chunked", "recurrent"):
        got = run_mode(mode, *inputs, C, d)
        for name in ref:
            assert_close(f"{mode}/{name}", ref[name].detach(), got[name].detach(), tol)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("split", [1, 13, 16, 32, 50, 63])
@pytest.mark.parametrize("decay", [None, 0.95], ids=["nodecay", "decay"])
def test_split_equals_whole(mode, split, decay):
    """f(x) == f(x[:a]) then f(x[a:], state), on and off chunk boundaries (C=16)."""
    q, k, v, _, _ = make_inputs(2, 64, 2, 6, 5, torch.float64)
    out, st = linear_attention(q, k, v, mode=mode, chunk_size=16, decay=decay)
    o1, s1 = linear_attention(q[:, :split], k[:, :split], v[:, :split], mode=mode, chunk_size=16, decay=decay)
    o2, s2 = linear_attention(q[:, split:], k[:, split:], v[:, split:], s1, mode=mode, chunk_size=16, decay=decay)
    assert_close("out", out, torch.cat([o1, o2], 1), 1e-12)
    assert_close("S", st.S, s2.S, 1e-12)
    assert_close("z", st.z, s2.z, 1e-12)


def test_split_gradients_flow_through_state():
    """Gradients of a loss on the second call reach the first call's inputs through the carried state."""
    q, k, v, _, _ = make_inputs(1, 40, 2, 4, 4, torch.float64)
    grads = []
    for split in (None, 17):
        xs = [t.clone().requires_grad_() for t in (q, k, v)]
        if split is None:
            out, _ = linear_attention(*xs, chunk_size=8)
        else:
            o1, s1 = linear_attention(*(x[:, :split] for x in xs), chunk_size=8)
            o2, _ = linear_attention(*(x[:, split:] for x in xs), s1, chunk_size=8)
            out = torch.cat([o1, o2], 1)
        (out.sin()).sum().backward()
        grads.append([x.grad for x in xs])
    for a, b in zip(*grads, strict=True):
        assert_close("grad", a, b, 1e-12)


def test_state_is_a_value():
    """The state passed in is never modified, so it can be forked."""
    q, k, v, S0, z0 = make_inputs(1, 20, 2, 4, 4, torch.float64)
    st = AttnState(S0.clone(), z0.clone())
    for mode in MODES:
        linear_attention(q, k, v, st, mode=mode, chunk_size=8)
        assert torch.equal(st.S, S0) and torch.equal(st.z, z0)


def test_state_dtype_float64_with_float32_compute():
    q, k, v, _, _ = make_inputs(1, 50, 2, 4, 4, torch.float32)
    out, st = linear_attention(q, k, v, chunk_size=8, state_dtype=torch.float64)
    assert st.S.dtype == torch.float64 and out.dtype == torch.float32
    ref, _ = linear_attention(q.double(), k.double(), v.double(), mode="naive")
    assert_close("out", ref, out.double(), 1e-5)


def test_bad_arguments():
    q, k, v, _, _ = make_inputs(1, 8, 2, 4, 4, torch.float32)
    with pytest.raises(ValueError, match="decay"):
        linear_attention(q, k, v, decay=1.5)
    with pytest.raises(ValueError, match="mode"):
        linear_attention(q, k, v, mode="fast")
    with pytest.raises(ValueError, match="expected"):
        linear_attention(q, k[:, :4], v)


@pytest.fixture
def single_thread():
    """Tiny ops: a thread pool only adds barrier waits (seconds on a busy machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_float32_running_sum_stalls_but_float64_state_does_not(single_thread):
    """2^25 tokens: a per-token float32 sum stalls at 2^24; the op's float64 state stays exact.

    Small dims (H=K=V=1), fed in 32 calls of 2^20 tokens through the chunked op, as a scan does.
    """
    n_calls, per_call = 32, 1 << 20
    ones = np.ones(n_calls * per_call, dtype=np.float32)
    assert np.cumsum(ones, dtype=np.float32)[-1] == 2.0**24  # the hazard: +1 is lost past 2^24

    g = torch.Generator().manual_seed(0)
    state, exact = None, 0.0

    for _ in range(n_calls):
        k = torch.rand(1, per_call, 1, 1, generator=g) + 0.5  # float32 keys in [0.5, 1.5)
        v = torch.ones(1, per_call, 1, 1)
        _, state = linear_attention(k, k, v, state, state_dtype=torch.float64)
        exact += k.double().sum().item()
    # float32 keys: each chunk's partial sum carries float32 rounding (~1e-7 relative), but nothing stalls
    assert state.z.item() == pytest.approx(exact, rel=1e-7)
    assert state.z.item() > 2**25 * 0.99

    # one more token at a time in recurrent mode: float64 keeps counting, a float32 state would not
    one = torch.ones(1, 1, 1, 1)
    z64 = AttnState(state.S, state.z)
    z32 = AttnState(state.S.float(), state.z.float())
    for _ in range(3):
        _, z64 = linear_attention(one, one, one, z64, mode="recurrent")
        _, z32 = linear_attention(one, one, one, z32, mode="recurrent")
    assert z64.z.item() == pytest.approx(state.z.item() + 3, rel=1e-15)
    assert z32.z.item() == pytest.approx(state.z.float().item(), rel=0)  # float32: +1 lost, stalled


@pytest.mark.parametrize("decay", [None, [1.0, 0.9]], ids=["nodecay", "decay"])
@pytest.mark.parametrize("budget", [1, 3000], ids=["one-chunk-blocks", "few-chunk-blocks"])
def test_multi_block_matches_naive(monkeypatch, decay, budget):
    """Blocks of one or a few chunks (the carry between blocks and the backward's reverse walk over them)."""
    import strandline.models.ops.linear.chunked as oc

    monkeypatch.setitem(oc.BLOCK_ELEMS, "cpu", budget)
    inputs = make_inputs(2, 101, 2, 6, 5, torch.float64)
    d = None if decay is None else torch.tensor(decay, dtype=torch.float64)
    ref = run_mode("naive", *inputs, 8, d)
    got = run_mode("chunked", *inputs, 8, d)
    for name in ref:
        assert_close(name, ref[name].detach(), got[name].detach(), 1e-10)


def test_auto_chunk_size():
    """chunk_size=None picks C from the head dims (≈ the head dim, within [32, 256]) and stays exact."""
    from strandline.models.ops.linear import auto_chunk_size

    assert [auto_chunk_size(d, d) for d in (1, 16, 64, 100, 128, 512)] == [32, 32, 64, 64, 128, 256]
    inputs = make_inputs(1, 150, 2, 4, 4, torch.float64)
    ref = run_mode("naive", *inputs, 16, None)
    got = run_mode("chunked", *inputs, None, None)
    for name in ref:
        assert_close(name, ref[name].detach(), got[name].detach(), 1e-10)


def test_strided_inputs_and_expanded_gradient():
    """q, k, v as views of one [B, T, 3, H, D] projection (how the layer calls it) and out.sum()'s expanded grad."""
    g = torch.Generator().manual_seed(3)
    h = torch.randn(2, 70, 3, 2, 8, generator=g, dtype=torch.float64, requires_grad=True)
    grads = []
    for mode in ("naive", "chunked"):
        q, k, v = h.unbind(2)
        out, _ = linear_attention(F.elu(q) + 1, F.elu(k) + 1, v, mode=mode, chunk_size=16, decay=0.9)
        (dh,) = torch.autograd.grad(out.sum(), h)
        grads.append((out.detach(), dh))
    assert_close("out", grads[0][0], grads[1][0], 1e-12)
    assert_close("grad", grads[0][1], grads[1][1], 1e-12)


def test_bf16_autocast_backward_with_checkpointing():
    """bf16 products under autocast, recomputed by activation checkpointing: float32 state, gradients that
    match the float32 computation to bf16 precision, and identical to the same step without checkpointing."""
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    proj = torch.nn.Linear(16, 3 * 16).double().float()
    x = torch.randn(1, 200, 16)

    def step(x, bf16: bool, ckpt: bool):
        def body(x):
            q, k, v = proj(x).view(1, 200, 3, 2, 8).unbind(2)
            out, st = linear_attention(F.elu(q) + 1, F.elu(k) + 1, v, chunk_size=32, decay=[1.0, 0.95])
            return out, st.S, st.z

        proj.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out, S, z = checkpoint(body, x, use_reentrant=False) if ckpt else body(x)
        (out.float().square().sum() + S.sum()).backward()
        return out, S, z, proj.weight.grad.clone()

    out32, S32, _, gw32 = step(x, bf16=False, ckpt=False)
    out16, S16, z16, gw16 = step(x, bf16=True, ckpt=True)
    assert out16.dtype == torch.bfloat16 and S16.dtype == torch.float32 and z16.dtype == torch.float32
    assert_close("out", out32.detach(), out16.detach().float(), 3e-2)
    assert_close("S", S32.detach(), S16.detach(), 3e-2)
    assert_close("dW", gw32, gw16, 5e-2)
    *_, gw16_plain = step(x, bf16=True, ckpt=False)
    assert torch.equal(gw16, gw16_plain)  # the recomputed forward is the same computation


def test_matches_fast_transformers_causal_dot_product():
    """The paper's own CPU kernel (optional benchmark peer, ``make bench-deps``), normalized as in its
    ``CausalLinearAttention``: same outputs and gradients in float32."""
    causal_product = pytest.importorskip("fast_transformers.causal_product", reason="optional peer: make bench-deps")
    q, k, v, _, _ = make_inputs(1, 300, 2, 16, 16, torch.float32)
    res = []
    for impl in ("ours", "fast_transformers"):
        xs = [t.clone().requires_grad_() for t in (q, k, v)]
        if impl == "ours":
            out, _ = linear_attention(*xs, chunk_size=64)
        else:
            Q, K, V = xs
            Z = 1 / (torch.einsum("nlhi,nlhi->nlh", Q, K.cumsum(1)) + 1e-6)
            num = causal_product.causal_dot_product(*(x.permute(0, 2, 1, 3).contiguous() for x in (Q, K, V)))
            out = num.permute(0, 2, 1, 3) * Z[..., None]
        (out * torch.linspace(-1, 1, out.numel()).view(out.shape)).sum().backward()
        res.append([out.detach()] + [x.grad for x in xs])
    for name, a, b in zip(("out", "dq", "dk", "dv"), *res, strict=True):
        assert_close(name, b, a, 1e-4)


def test_thread_pool_keeps_modes_and_thread_count():
    """The CPU op shares heads over threads: inference mode and autocast carry over, the thread count is restored."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # the pool needs >= 2 threads and >= 2 (sequence, head) pairs
    try:
        q, k, v, _, _ = make_inputs(2, 50, 3, 4, 4, torch.float32)
        ref, _ = linear_attention(q, k, v, mode="naive", decay=0.9)
        with torch.inference_mode():
            out, st = linear_attention(q, k, v, chunk_size=16, decay=0.9)
            _, st2 = linear_attention(q, k, v, st, chunk_size=16, decay=0.9)  # inference tensors in and out
        assert out.is_inference() and st2.S.is_inference()
        assert_close("out", ref, out, 1e-5)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)


def _raw_inputs(B, T, H, K, V, dtype, seed=0):
    """Raw (not φ-mapped) q, k with both signs, v and a positive initial state."""
    g = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(B, T, H, K, generator=g, dtype=dtype) * 1.5 for _ in range(2))
    v = torch.randn(B, T, H, V, generator=g, dtype=dtype)
    return q, k, v, torch.rand(B, H, K, V, generator=g, dtype=dtype) * 3, torch.rand(B, H, K, generator=g, dtype=dtype)


@pytest.mark.parametrize("fmap", ["elu1", "relu"])
@pytest.mark.parametrize("decay", [None, [1.0, 0.9]], ids=["nodecay", "decay"])
@pytest.mark.parametrize("budget", [1, 1 << 19], ids=["one-chunk-blocks", "default-blocks"])
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 1e-4)], ids=["f64", "f32"])
def test_feature_map_inside_the_op_matches_it_outside(monkeypatch, fmap, decay, budget, dtype, tol):
    """``feature_map=`` applies φ inside the chunked op (block by block, recomputed in backward): outputs,
    final state and every gradient (raw q, k, and the initial state) equal φ applied outside + the naive op."""
    import strandline.models.ops.linear.chunked as oc
    from strandline.models.feature_maps import make_feature_map

    monkeypatch.setitem(oc.BLOCK_ELEMS, "cpu", budget)
    inputs = _raw_inputs(2, 101, 2, 6, 5, dtype)
    fm = make_feature_map(fmap, 6, 2)

    def run(mode, inside):
        xs = [t.clone().requires_grad_() for t in inputs]
        q, k = (xs[0], xs[1]) if inside else (fm(xs[0], is_query=True), fm(xs[1]))
        out, st = linear_attention(
            q, k, xs[2], AttnState(xs[3], xs[4]), mode=mode, chunk_size=8, decay=decay,
            feature_map=fmap if inside else None,
        )  # fmt: skip
        w = torch.linspace(-1, 1, out.numel(), dtype=dtype).view(out.shape)
        ((out * w).sum() + (st.S * st.S).sum() + st.z.sum()).backward()
        return [out, st.S, st.z] + [x.grad for x in xs]

    ref = run("naive", inside=False)
    for mode in ("chunked", "recurrent", "naive"):
        for name, a, b in zip(("out", "S", "z", "dq", "dk", "dv", "dS0", "dz0"), ref, run(mode, True), strict=True):
            assert_close(f"{mode} {name}", a.detach(), b.detach(), tol)


@pytest.mark.parametrize("split", [1, 37, 64])
def test_feature_map_inside_split_equals_whole(split):
    """With φ inside, f(x) == f(x[:a]) then f(x[a:], state), gradients through the carried state included."""
    q, k, v, _, _ = _raw_inputs(1, 100, 2, 8, 8, torch.float64)

    def run(parts):
        xs = [t.clone().requires_grad_() for t in (q, k, v)]
        outs, st = [], None
        for a, b in parts:
            o, st = linear_attention(xs[0][:, a:b], xs[1][:, a:b], xs[2][:, a:b], st, chunk_size=16, feature_map="elu1")
            outs.append(o)
        out = torch.cat(outs, 1)
        (out.square().sum() + st.S.sum()).backward()
        return [out, st.S, st.z] + [x.grad for x in xs]

    for a, b in zip(run([(0, 100)]), run([(0, split), (split, 100)]), strict=True):
        assert_close("split", a.detach(), b.detach(), 1e-12)


def test_feature_map_inside_bad_name_and_strided_projection():
    """An unknown name is refused; q, k, v as views of one projection (the layer's layout) work with φ inside."""
    q, k, v, _, _ = _raw_inputs(1, 20, 2, 4, 4, torch.float32)
    with pytest.raises(ValueError, match="feature_map must be one of"):
        linear_attention(q, k, v, feature_map="taylor")
    h = torch.randn(2, 70, 3, 2, 8, dtype=torch.float64, requires_grad=True)
    grads = []
    for inside in (False, True):
        q, k, v = h.unbind(2)
        if not inside:
            q, k = F.elu(q) + 1, F.elu(k) + 1
        out, _ = linear_attention(q, k, v, chunk_size=16, decay=0.9, feature_map="elu1" if inside else None)
        grads.append((out.detach(), torch.autograd.grad(out.sum(), h)[0]))
    assert_close("out", grads[0][0], grads[1][0], 1e-12)
    assert_close("grad", grads[0][1], grads[1][1], 1e-12)


@pytest.mark.parametrize("normalize", [True, False], ids=["z", "no-z"])
@pytest.mark.parametrize("budget", [1, 3000], ids=["one-chunk-blocks", "few-chunk-blocks"])
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 1e-4)], ids=["f64", "f32"])
def test_gated_multi_block_matches_naive(monkeypatch, normalize, budget, dtype, tol):
    """The gated op runs on the chunked op's blocks with per-block gate tables: the carry of gated states
    across chunks and blocks, the reverse walk, and the gate's gradient (a reverse cumsum over all blocks)."""
    import strandline.models.ops.linear.chunked as oc
    from strandline.models.ops.gated import gated_linear_attention

    monkeypatch.setitem(oc.BLOCK_ELEMS, "cpu", budget)
    q, k, v, S0, z0 = make_inputs(2, 101, 2, 6, 5, dtype)
    gate = torch.randn(2, 101, 2, dtype=dtype, generator=torch.Generator().manual_seed(4))

    def run(mode):
        xs = [t.clone().requires_grad_() for t in (q, k, v, S0, z0, gate)]
        log_a = F.logsigmoid(xs[5] + 2) * 3  # α from ~0.05 to ~1
        state = AttnState(xs[3], xs[4] if normalize else None)
        out, st = gated_linear_attention(*xs[:3], log_a, state, mode=mode, chunk_size=8, normalize=normalize)
        loss = (out * torch.cos(out)).sum() + 0.3 * st.S.square().sum()
        if normalize:
            loss = loss + 0.1 * st.z.square().sum()
        grads = torch.autograd.grad(loss, xs if normalize else xs[:4] + xs[5:])
        return [out, st.S] + ([st.z] if normalize else []) + list(grads)

    for i, (a, b) in enumerate(zip(run("naive"), run("chunked"), strict=True)):
        assert_close(f"item {i}", a.detach(), b.detach(), tol)


@pytest.mark.parametrize("normalize", [True, False], ids=["z", "no-z"])
def test_gated_feature_map_inside(normalize):
    """gated_linear_attention(..., feature_map='elu1'): φ inside the chunked op equals φ outside + naive."""
    from strandline.models.ops.gated import gated_linear_attention

    q, k, v, S0, z0 = _raw_inputs(1, 70, 2, 6, 5, torch.float64)
    gate = torch.randn(1, 70, 2, dtype=torch.float64)

    def run(mode, inside):
        xs = [t.clone().requires_grad_() for t in (q, k, v, S0, z0, gate)]
        qq, kk = (xs[0], xs[1]) if inside else (F.elu(xs[0]) + 1, F.elu(xs[1]) + 1)
        state = AttnState(xs[3], xs[4] if normalize else None)
        out, st = gated_linear_attention(
            qq, kk, xs[2], F.logsigmoid(xs[5]), state, mode=mode, chunk_size=16, normalize=normalize,
            feature_map="elu1" if inside else None,
        )  # fmt: skip
        grads = torch.autograd.grad(out.square().sum() + st.S.sum(), xs if normalize else xs[:4] + xs[5:])
        return [out, st.S, *grads]

    ref = run("naive", False)
    for mode in ("chunked", "recurrent"):
        for i, (a, b) in enumerate(zip(ref, run(mode, True), strict=True)):
            assert_close(f"{mode} item {i}", a.detach(), b.detach(), 1e-10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_block_elu1_and_its_derivative_match_f_elu(dtype):
    """The op's per-block φ (exp2-based for float32/64, F.elu for bf16) and dφ/dx = min(φ, 1) agree with F.elu + 1."""
    from strandline.models.ops.linear.chunked import _phi_fns

    x = torch.linspace(-30, 30, 4 * 8 * 16, dtype=torch.float64).view(4, 8, 16)[:, :, ::2]  # strided, crosses 0
    x = x.to(dtype)
    phi, both = _phi_fns("elu1", dtype)
    ref = F.elu(x.double()) + 1
    y, d = both(x)
    tol = {torch.float32: 1e-6, torch.float64: 1e-14, torch.bfloat16: 1e-2}[dtype]
    assert y.dtype == dtype and y.shape == x.shape
    torch.testing.assert_close(y.double(), ref, rtol=tol, atol=tol)
    torch.testing.assert_close(phi(x).double(), y.double(), rtol=0, atol=0)
    torch.testing.assert_close(d.double(), torch.clamp(ref, max=1), rtol=tol, atol=tol)


@pytest.mark.parametrize("needs", ["v", "S0", "q-z0"], ids=["only-v", "only-S0", "q-and-z0"])
def test_gradients_when_only_some_inputs_need_them(monkeypatch, needs):
    """The forward keeps the chunk states whenever any input needs a gradient (not only q): a backward
    that reaches the op through v alone or the initial state alone gets the naive op's gradients."""
    import strandline.models.ops.linear.chunked as oc

    monkeypatch.setitem(oc.BLOCK_ELEMS, "cpu", 3000)  # several blocks, several chunks each
    inputs = make_inputs(2, 101, 2, 6, 5, torch.float64)
    grads = {}
    for mode in ("naive", "chunked"):
        xs = [
            t.clone().requires_grad_(n in needs.split("-"))
            for n, t in zip(("q", "k", "v", "S0", "z0"), inputs, strict=True)
        ]
        out, st = linear_attention(*xs[:3], AttnState(xs[3], xs[4]), mode=mode, chunk_size=8, decay=[1.0, 0.9])
        (out.square().sum() + st.S.sum() + st.z.sum()).backward()
        grads[mode] = [x.grad for x in xs]
    for name, ref, got in zip(("q", "k", "v", "S0", "z0"), grads["naive"], grads["chunked"], strict=True):
        assert (ref is None) == (got is None) == (name not in needs.split("-"))
        if ref is not None:
            assert_close(f"d{name}", ref, got, 1e-10)

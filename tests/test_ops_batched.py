"""The training fast paths give the results of the reference paths: the batched chunked form, the sparse owner
update and the in-place (donated) k-mer tables, the carried-state reset without copies, the conv1d short conv."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from strandline.models import ModelConfig
from strandline.models import layers as layers_mod
from strandline.models.lm import LinearTransformerLM
from strandline.models.ops.gated import gated_linear_attention
from strandline.models.ops.kmer import KmerSpec, _last_writer, kmer_memory
from strandline.models.ops.linear import linear_attention
from strandline.models.ops.linear.batched import batched_chunked, use_batched
from strandline.models.ops.linear.chunked import ChunkedLinearAttention
from strandline.models.state import LMState
from strandline.tasks.lm import reset_state

TOL = {torch.float64: 1e-12, torch.float32: 1e-4}


def _inputs(dt, B, T, H, K, V, gate_kind, norm, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(B, T, H, K, dtype=dt, generator=g).requires_grad_() for _ in range(2))
    v = torch.randn(B, T, H, V, dtype=dt, generator=g).requires_grad_()
    S0 = torch.randn(B, H, K, V, dtype=dt, generator=g).requires_grad_()
    z0 = (torch.rand(B, H, K, dtype=dt, generator=g) + 1).requires_grad_() if norm else None
    log_g = gate = None
    if gate_kind == "fixed":
        log_g = torch.tensor([0.9, 0.99, 0.999, 1.0][:H], dtype=torch.float64).log()
    elif gate_kind == "gate":  # strong and weak gates: log α down to ~-7
        gate = F.logsigmoid(3 * torch.randn(B, T, H, dtype=torch.float64, generator=g) + 2).requires_grad_()
    return q, k, v, S0, z0, log_g, gate


def _run(fn, ins, chunk, phi):
    q, k, v, S0, z0, log_g, gate = ins
    qq, kk = (q, k) if phi else (F.elu(q) + 1, F.elu(k) + 1)
    if fn == "walk":
        out, S, z = ChunkedLinearAttention.apply(qq, kk, v, S0, z0, log_g, chunk, 1e-6, phi, gate)
    else:
        out, S, z = batched_chunked(qq, kk, v, S0, z0, log_g, gate, chunk, 1e-6, phi)
    loss = (out * out.cos()).sum() + 0.3 * (S * S.sin()).sum() + (0.1 * z.square().sum() if z is not None else 0)
    wrt = [x for x in (q, k, v, S0, z0, gate) if x is not None]
    return [out, S, *([z] if z is not None else []), *torch.autograd.grad(loss, wrt)]


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach(), b.detach()
    return float((a - b).abs().max() / b.abs().max().clamp(min=1e-30))


@pytest.mark.parametrize("dt", [torch.float64, torch.float32])
@pytest.mark.parametrize("gate_kind", [None, "fixed", "gate"])
@pytest.mark.parametrize("norm", [True, False])
@pytest.mark.parametrize("phi", [None, "elu1"])
@pytest.mark.parametrize("T", [1, 37, 128, 300])
def test_batched_form_equals_the_walk_outputs_states_and_gradients(dt, gate_kind, norm, phi, T):
    ins = _inputs(dt, 3, T, 4, 8, 6, gate_kind, norm)
    walk, batched = _run("walk", ins, 32, phi), _run("batched", ins, 32, phi)
    for a, b in zip(batched, walk, strict=True):
        assert _rel(a, b) < TOL[dt]


@pytest.mark.parametrize("split", [1, 100, 255])
def test_the_layer_ops_route_short_windows_batched_and_agree_with_naive_across_a_split(split):
    """The default recipe's shape (many lanes, 256 tokens) takes the batched form; chunked == naive, carried
    across any split point, in float64, for the gated op and the paper's op."""
    B, T, H, K = 8, 256, 4, 8
    assert use_batched(B, T, H, 64, torch.device("cpu")) and not use_batched(1, 65536, H, 64, torch.device("cpu"))
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(B, T, H, K, dtype=torch.float64, generator=g) for _ in range(3))
    la = F.logsigmoid(torch.randn(B, T, H, dtype=torch.float64, generator=g) + 3)
    ref, ref_s = gated_linear_attention(q, k, v, la, mode="naive", normalize=False, feature_map="elu1")
    o1, s1 = gated_linear_attention(q[:, :split], k[:, :split], v[:, :split], la[:, :split], normalize=False,
                                    feature_map="elu1")  # fmt: skip
    o2, s2 = gated_linear_attention(q[:, split:], k[:, split:], v[:, split:], la[:, split:], s1, normalize=False,
                                    feature_map="elu1")  # fmt: skip
    assert _rel(torch.cat([o1, o2], 1), ref) < 1e-12 and _rel(s2.S, ref_s.S) < 1e-12
    ref, ref_s = linear_attention(q, k, v, mode="naive", decay=[0.9, 0.99, 0.999, 1.0], feature_map="elu1")
    o1, s1 = linear_attention(q[:, :split], k[:, :split], v[:, :split], decay=[0.9, 0.99, 0.999, 1.0],
                              feature_map="elu1")  # fmt: skip
    o2, s2 = linear_attention(q[:, split:], k[:, split:], v[:, split:], s1, decay=[0.9, 0.99, 0.999, 1.0],
                              feature_map="elu1")  # fmt: skip
    assert _rel(torch.cat([o1, o2], 1), ref) < 1e-12 and _rel(s2.S, ref_s.S) < 1e-12 and _rel(s2.z, ref_s.z) < 1e-12


def _dense_last_writer(owner, bucket, fp, time, valid):
    """The owner update as a dense scatter over the whole table (the definition)."""
    last = torch.full_like(owner, -1, dtype=torch.long)
    last = last.scatter_reduce(2, bucket, torch.where(valid, time, -1), "amax")
    return torch.where(last >= 0, fp.gather(2, last.clamp(min=0)), owner)


@pytest.mark.parametrize("n_buckets", [4, 64, 4096])
def test_sparse_owner_update_equals_the_dense_one(n_buckets):
    g = torch.Generator().manual_seed(n_buckets)
    B, J, n = 3, 2, 200
    owner = torch.randint(0, 1000, (B, J, n_buckets), dtype=torch.int32, generator=g)
    bucket = torch.randint(0, n_buckets, (B, J, n), generator=g)  # many repeats at 4 and 64 buckets
    fp = torch.randint(1, 2**31 - 1, (B, J, n), generator=g).to(torch.int32)
    valid = torch.rand(B, J, n, generator=g) < 0.7
    time = torch.arange(n).expand(B, J, n)
    want = _dense_last_writer(owner, bucket, fp, time, valid)
    before = owner.clone()
    assert torch.equal(_last_writer(owner, bucket, fp, time, valid), want)
    assert torch.equal(owner, before)  # not in place unless asked
    assert torch.equal(_last_writer(owner, bucket, fp, time, valid, inplace=True), want) and torch.equal(owner, want)


@pytest.mark.parametrize("mode", ["chunked", "naive"])
def test_a_donated_kmer_state_gives_the_same_results_and_an_undonated_one_is_left_alone(mode):
    spec = KmerSpec(orders=(3, 6), n_buckets=256, alphabet=(4, 5, 6, 7), decay=0.999, vocab_size=16)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(4, 8, (2, 300), generator=g)
    x[:, 120:160] = x[:, 20:60]  # a repeat for the memory to find
    _, st = kmer_memory(x[:, :100], spec, mode=mode)
    snapshot = [t.clone() for t in st]
    read, new = kmer_memory(x[:, 100:], spec, st, mode=mode)
    assert all(torch.equal(a, b) for a, b in zip(st, snapshot, strict=True))  # the value was not changed
    read_d, new_d = kmer_memory(x[:, 100:], spec, st, mode=mode, donate=True)
    assert all(torch.equal(a, b) for a, b in zip(read_d, read, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(new_d, new, strict=True))
    assert new_d.S.data_ptr() == st.S.data_ptr()  # written in place: no copy of the tables
    assert float(read.counts[:, 30:60].sum()) > 0  # the repeat was read


def test_reset_without_a_reset_row_shares_the_tables_and_with_one_copies():
    cfg = ModelConfig(vocab_size=16, d_model=16, n_layers=1, n_heads=2, kmer_orders=[4], kmer_buckets=64)
    model = LinearTransformerLM(cfg)
    _, st = model(torch.randint(4, 8, (2, 50)))
    same = reset_state(st, torch.tensor([False, False]))
    assert isinstance(same, LMState) and same.memory.S.data_ptr() == st.memory.S.data_ptr()
    fresh = reset_state(st, torch.tensor([True, False]))
    assert fresh.memory.S.data_ptr() != st.memory.S.data_ptr()
    assert float(fresh.memory.S[0].abs().sum()) == 0 and torch.equal(fresh.memory.S[1], st.memory.S[1])


def test_the_model_with_a_donated_state_equals_the_model_without():
    cfg = ModelConfig(vocab_size=16, d_model=16, n_layers=2, n_heads=2, kmer_orders=[4, 8], kmer_buckets=128)
    model = LinearTransformerLM(cfg).double()
    x = torch.randint(4, 8, (3, 200))
    _, st = model(x[:, :80])
    logits, new = model(x[:, 80:], st)
    logits_d, new_d = model(x[:, 80:], st, donate=True)
    assert torch.equal(logits_d, logits) and torch.equal(new_d.memory.S, new.memory.S)


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("T", [1, 5, 30, 40, 100])
def test_short_conv_forms_agree(monkeypatch, fast, T):
    """The conv1d, the few-token and the shifted-multiply forms: the same outputs and gradients, and the same
    carried buffer."""
    conv = layers_mod.ShortConv(12, 4).double()
    x = torch.randn(2, T, 12, dtype=torch.float64, requires_grad=True)
    cache = torch.randn(2, 3, 12, dtype=torch.float64)
    monkeypatch.setattr(layers_mod, "_CONV1D_FAST", fast)
    wrt = (x, conv.conv.weight, conv.conv.bias)  # the input's gradient, and the weights' (training)
    y, buf = conv(x, cache)
    grads = torch.autograd.grad((y * y.sin()).sum(), wrt)
    xe = torch.cat([cache, x.detach()], 1)
    want = conv.conv.bias + sum(xe[:, j : j + T] * conv.conv.weight[:, 0, j] for j in range(4))
    assert _rel(y, want) < 1e-12 and torch.equal(buf, xe[:, -3:])
    monkeypatch.setattr(layers_mod, "_CONV1D_FAST", not fast)
    y2, _ = conv(x, cache)
    grads2 = torch.autograd.grad((y2 * y2.sin()).sum(), wrt)
    assert _rel(y2, y) < 1e-12 and all(_rel(a, b) < 1e-12 for a, b in zip(grads2, grads, strict=True))
    ref = torch.autograd.grad((want * want.sin()).sum(), wrt[1:])  # the plain shifted sum's weight gradients
    assert all(_rel(a, b) < 1e-12 for a, b in zip(grads[1:], ref, strict=True))


@pytest.mark.parametrize("onednn", [True, False])
@pytest.mark.parametrize("T", [1, 31, 32, 100])
def test_short_conv_without_gradients_agrees_with_conv1d(monkeypatch, T, onednn):
    """Inference on CPU (with oneDNN off: the in-place multiply-adds from 32 tokens on) gives conv1d's outputs and
    buffer."""
    monkeypatch.setattr(torch.backends.mkldnn, "enabled", onednn)
    conv = layers_mod.ShortConv(12, 4).double()
    x, cache = torch.randn(3, T, 12, dtype=torch.float64), torch.randn(3, 3, 12, dtype=torch.float64)
    xe = torch.cat([cache, x], 1)
    want = F.conv1d(xe.transpose(1, 2), conv.conv.weight, conv.conv.bias, groups=12).transpose(1, 2)
    with torch.no_grad():
        y, buf = conv(x, cache)
        y0, _ = conv(x, None)  # no buffer: causal zero padding
    z = torch.cat([torch.zeros(3, 3, 12, dtype=torch.float64), x], 1)
    want0 = F.conv1d(z.transpose(1, 2), conv.conv.weight, conv.conv.bias, groups=12).transpose(1, 2)
    assert _rel(y, want) < 1e-12 and _rel(y0, want0) < 1e-12 and torch.equal(buf, xe[:, -3:])

"""Attention variants and positions keep the exact-state contract, at the op level and in the LM.

Ops (models/ops/gated.py, models/ops/delta.py): naive == recurrent == chunked for outputs, final state and
gradients (inputs, gates, initial state), float64 and float32, odd T, T < C, and any split of a sequence.
LM: every variant's step == parallel == splits, save/load, forked states, bf16 autocast, positions.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from strandline.models import (
    AttnState,
    ConfigError,
    LinearTransformerLM,
    ModelConfig,
    delta_rule_attention,
    gated_linear_attention,
    load,
    load_state,
    save_state,
)
from strandline.models.layers import _rope, apply_rope, gate_bias, rope_cos_sin, sinusoidal_encoding

REPO = Path(__file__).resolve().parents[1]
TOL = {torch.float64: 1e-10, torch.float32: 1e-4}


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref.double()).abs().max() / ref.double().abs().max().clamp(min=1e-30)).item()


def assert_rel(name: str, out, ref, dtype) -> None:
    err = rel_err(out, ref)
    assert err < TOL[dtype], f"{name}: relative error {err:.2e} >= {TOL[dtype]:.0e}"


# ---------------------------------------------------------------- the ops


def op_inputs(kind: str, T: int, dtype, seed: int = 0, B: int = 2, H: int = 2, K: int = 5, V: int = 4):
    """Leaf tensors for one op call: q, k, v, gate logits, (β logits), S0 (, z0)."""
    g = torch.Generator().manual_seed(seed)
    sd = torch.float64 if dtype == torch.float64 else torch.float32
    leaves = {
        "q": torch.randn(B, T, H, K, generator=g, dtype=dtype),
        "k": torch.randn(B, T, H, K, generator=g, dtype=dtype),
        "v": torch.randn(B, T, H, V, generator=g, dtype=dtype),
        "gate": torch.randn(B, T, H, generator=g, dtype=dtype) * 2,
        "S0": torch.rand(B, H, K, V, generator=g, dtype=sd),
    }
    if kind == "delta":
        leaves["beta"] = torch.randn(B, T, H, generator=g, dtype=dtype)
    if kind == "gated-z":
        leaves["z0"] = torch.rand(B, H, K, generator=g, dtype=sd)
    return {n: t.requires_grad_() for n, t in leaves.items()}


def call_op(kind: str, x: dict, mode: str, C: int, sl=slice(None), state: AttnState | None = None):
    """One op call on x[:, sl]; ``state`` None means the leaves' initial state."""
    q, k, v, gate = (x[n][:, sl] for n in ("q", "k", "v", "gate"))
    log_a = F.logsigmoid(gate) / 2
    if state is None:
        state = AttnState(x["S0"], x.get("z0"))
    if kind == "delta":
        beta = torch.sigmoid(x["beta"][:, sl])
        return delta_rule_attention(F.normalize(q, dim=-1), F.normalize(k, dim=-1), v, beta, log_a, state, mode, C)
    q, k = F.elu(q) + 1, F.elu(k) + 1
    return gated_linear_attention(q, k, v, log_a, state, mode, C, normalize=kind == "gated-z")


def outputs_and_grads(kind: str, x: dict, mode: str, C: int, cuts=()):
    """Run the op over the whole sequence in calls split at ``cuts``; return outputs, state and every gradient."""
    T = x["q"].shape[1]
    state, outs = None, []
    for a, b in zip([0, *cuts], [*cuts, T], strict=True):
        o, state = call_op(kind, x, mode, C, slice(a, b), state)
        outs.append(o)
    out = torch.cat(outs, 1)
    loss = (out * torch.cos(out)).sum() + 0.3 * (state.S**2).sum()
    if state.z is not None:
        loss = loss + 0.1 * state.z.square().sum()
    grads = torch.autograd.grad(loss, list(x.values()))
    res = {"out": out, "S": state.S, **{f"d{n}": gr for n, gr in zip(x, grads, strict=True)}}
    if state.z is not None:
        res["z"] = state.z
    return res


KINDS = ["gated-z", "gated-raw", "delta"]
SHAPES = [pytest.param(37, 8, id="T37-C8"), pytest.param(5, 8, id="T5<C8"), pytest.param(64, 16, id="T64-C16")]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("T,C", SHAPES)
@pytest.mark.parametrize("kind", KINDS)
def test_op_modes_agree(kind, T, C, dtype):
    x = op_inputs(kind, T, dtype)
    ref = outputs_and_grads(kind, x, "naive", C)
    for mode in ("recurrent", "chunked"):
        got = outputs_and_grads(kind, x, mode, C)
        assert got.keys() == ref.keys()
        for name in ref:
            assert_rel(f"{mode} {name}", got[name], ref[name], dtype)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("kind", KINDS)
def test_op_any_split_is_exact(kind, dtype):
    """f(x) == f(x[:a]) then f(x[a:], state), gradients included, for cuts on and off chunk boundaries."""
    C, T = 8, 45
    x = op_inputs(kind, T, dtype, seed=1)
    ref = outputs_and_grads(kind, x, "chunked", C)
    for cuts in ([1], [13], [C], [2 * C], [3, 4, 29], list(range(5, T, 7))):
        got = outputs_and_grads(kind, x, "chunked", C, cuts)
        for name in ref:
            assert_rel(f"cuts {cuts} {name}", got[name], ref[name], dtype)
    steps = outputs_and_grads(kind, x, "recurrent", C, list(range(1, T)))  # one token per call
    for name in ref:
        assert_rel(f"token by token {name}", steps[name], ref[name], dtype)


@pytest.mark.parametrize("kind", KINDS)
def test_op_state_is_a_value_and_dtype_is_kept(kind):
    """float32 compute with a float64 state: the state stays float64, is never mutated, and is accurate."""
    x = op_inputs(kind, 20, torch.float32)
    state = AttnState(x["S0"].detach().double(), None if "z0" not in x else x["z0"].detach().double())
    snapshot = [t.clone() for t in state if t is not None]
    x64 = {n: t.detach().double() for n, t in x.items()}
    with torch.no_grad():
        ref, ref_state = call_op(kind, x64, "naive", 8)
        for mode in ("chunked", "recurrent", "naive"):
            out, new = call_op(kind, x, mode, 8, state=state)
            assert new.S.dtype == torch.float64  # float64-capable: the passed state's dtype wins
            assert rel_err(out, ref) < 1e-5 and rel_err(new.S, ref_state.S) < 1e-5
    for t, c in zip([t for t in state if t is not None], snapshot, strict=True):
        assert torch.equal(t, c)


def test_gated_op_strong_gates_do_not_overflow():
    """log α = -60 per token: the chunked form only exponentiates differences G_t - G_s <= 0."""
    x = op_inputs("gated-z", 50, torch.float32)
    with torch.no_grad():
        q, k, v = F.elu(x["q"]) + 1, F.elu(x["k"]) + 1, x["v"]
        log_a = torch.full(q.shape[:3], -60.0)
        a, sa = gated_linear_attention(q, k, v, log_a, mode="chunked", chunk_size=16)
        b, sb = gated_linear_attention(q, k, v, log_a, mode="recurrent")
    assert torch.isfinite(a).all() and torch.isfinite(sa.S).all()
    assert rel_err(a, b) < 1e-5 and rel_err(sa.S, sb.S) < 1e-5
    # with α ~ 0 every token sees only itself: out_t = v_t (q·k cancels in the normalized ratio)
    assert rel_err(a, v * ((q * k).sum(-1, keepdim=True) / ((q * k).sum(-1, keepdim=True) + 1e-6))) < 1e-5


def test_delta_rule_overwrites_an_association():
    """β = 1: writing (k, v1) then (k, v2) leaves Sᵀk = v2 exactly; the additive rule keeps v1 + v2."""
    k = F.normalize(torch.randn(1, 1, 1, 6, dtype=torch.float64), dim=-1).expand(1, 2, 1, 6)
    v = torch.randn(1, 2, 1, 3, dtype=torch.float64)
    ones = torch.ones(1, 2, 1, dtype=torch.float64)
    for mode in ("chunked", "recurrent", "naive"):
        out, _ = delta_rule_attention(k, k, v, ones, mode=mode)
        torch.testing.assert_close(out[0, 1], v[0, 1], rtol=1e-12, atol=1e-12)
    add, _ = gated_linear_attention(k, k, v, None, normalize=False)
    torch.testing.assert_close(add[0, 1], v[0, 0] + v[0, 1], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
def test_chunked_backward_is_memory_lean(kind):
    """What autograd keeps for the chunked op: no T×T matrix and no per-token K×V state."""
    T, C, K, V = 256, 16, 8, 8
    x = op_inputs(kind, T, torch.float32, K=K, V=V)
    sizes = []

    def pack(t):
        sizes.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        call_op(kind, x, "chunked", C)
    B, H = x["q"].shape[0], x["q"].shape[2]
    assert sizes and max(sizes) <= B * T * H * (V + 1)  # the size of one input or output
    assert max(sizes) < B * H * T * T and max(sizes) < B * T * H * K * V


def test_ops_under_bf16_autocast_keep_float32_state():
    for kind in KINDS:
        x = op_inputs(kind, 40, torch.float32)
        with torch.no_grad():
            ref, ref_state = call_op(kind, x, "chunked", 16)
            for mode in ("chunked", "recurrent"):
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    xb = {n: (t.bfloat16() if n in ("q", "k", "v") else t) for n, t in x.items()}
                    out, state = call_op(kind, xb, mode, 16)
                assert state.S.dtype == torch.float32, (kind, mode)
                assert rel_err(out, ref) < 3e-2 and rel_err(state.S, ref_state.S) < 3e-2, (kind, mode)


# ---------------------------------------------------------------- the LM

LM_VARIANTS = [
    pytest.param({}, id="paper-elu1"),
    pytest.param({"position": "rope"}, id="rope"),
    pytest.param({"position": "sinusoidal", "conv_width": 0}, id="sinusoidal"),
    pytest.param({"gate": "scalar"}, id="gate-z"),
    pytest.param({"gate": "scalar", "normalizer": "rmsnorm", "position": "rope"}, id="gate-rmsnorm-rope"),
    pytest.param({"decay": "retnet", "normalizer": "none"}, id="retnet-unnormalized"),
    pytest.param({"update": "delta", "normalizer": "rmsnorm"}, id="delta"),
    pytest.param({"update": "delta", "gate": "scalar", "normalizer": "rmsnorm"}, id="gated-delta"),
    pytest.param({"feature_map": "taylor", "feature_dim": 4}, id="taylor-proj4"),
    pytest.param({"feature_map": "taylor", "feature_dim": 4, "gate": "scalar"}, id="taylor-gate"),
    pytest.param({"attention": "softmax", "position": "sinusoidal"}, id="softmax-sinusoidal"),
]


def tiny(**kw) -> LinearTransformerLM:
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=11, d_model=32, n_layers=2, n_heads=2, chunk_size=8, **kw)
    return LinearTransformerLM(cfg).double().eval()


def run_split(model, x, cuts):
    parts, st = [], None
    for a, b in zip([0, *cuts], [*cuts, x.shape[1]], strict=True):
        lp, st = model(x[:, a:b], st)
        parts.append(lp)
    return torch.cat(parts, 1), st


@pytest.mark.parametrize("kw", LM_VARIANTS)
def test_lm_step_equals_parallel_equals_splits(kw):
    model = tiny(**kw)
    x = torch.randint(0, 11, (2, 37))
    with torch.no_grad():
        full, _ = model(x)
        naive, _ = model(x, mode="naive")
        steps, st = [], None
        for t in range(x.shape[1]):
            lt, st = model.step(x[:, t], st)
            steps.append(lt)
        torch.testing.assert_close(naive, full, rtol=0, atol=1e-10)
        torch.testing.assert_close(torch.stack(steps, 1), full, rtol=0, atol=1e-10)
        for cuts in ([5, 21], [8, 16, 24], [1, 13, 36]):
            torch.testing.assert_close(run_split(model, x, cuts)[0], full, rtol=0, atol=1e-10)


@pytest.mark.parametrize("kw", [p for p in LM_VARIANTS if "softmax" not in p.id])
def test_lm_parameter_gradients_agree_across_modes(kw):
    x = torch.randint(0, 11, (2, 29))
    grads = {}
    for mode in ("chunked", "recurrent", "naive"):
        model = tiny(**kw)
        logits, _ = model(x, mode=mode)
        F.cross_entropy(logits.flatten(0, 1), x.flatten()).backward()
        grads[mode] = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    assert grads["chunked"].keys() == grads["naive"].keys()
    for mode in ("recurrent", "naive"):
        for n, g in grads["chunked"].items():
            torch.testing.assert_close(grads[mode][n], g, rtol=1e-9, atol=1e-12, msg=n)


@pytest.mark.parametrize("kw", LM_VARIANTS)
def test_lm_save_load_identical_logits_and_state_resume(kw, tmp_path):
    model = tiny(**kw).float()
    model.save(tmp_path / "m", tokenizer="dna")
    again = load(tmp_path / "m")
    x = torch.randint(0, 11, (2, 25))
    with torch.no_grad():
        ref, _ = model(x)
        torch.testing.assert_close(again(x)[0], ref, rtol=0, atol=0)
        _, st = model(x[:, :9])
        save_state(st, tmp_path / "s.safetensors")
        st2, _ = load_state(tmp_path / "s.safetensors")
        rest, _ = again(x[:, 9:], st2)
    torch.testing.assert_close(rest, ref[:, 9:], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kw", LM_VARIANTS)
def test_lm_state_never_mutated_and_forks(kw):
    model = tiny(**kw)
    x = torch.randint(0, 11, (1, 30))
    with torch.no_grad():
        _, st = model(x[:, :12])
        snapshot = [t.clone() for t in st.tensors()]
        a1, _ = model(x[:, 12:20], st)
        model(x[:, 20:], st)
        model.step(x[:, 20], st)
        a2, _ = model(x[:, 12:20], st)
    torch.testing.assert_close(a1, a2, rtol=0, atol=0)
    assert all(torch.equal(t, c) for t, c in zip(st.tensors(), snapshot, strict=True))


@pytest.mark.parametrize("kw", [p for p in LM_VARIANTS if "softmax" not in p.id])
def test_lm_bf16_autocast_keeps_float32_state(kw):
    model = tiny(**kw).float()
    x = torch.randint(0, 11, (2, 70))
    with torch.no_grad():
        ref, _ = model(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out, st = model(x)
            step, st1 = model.step(x[:, 0], None)
    assert all(
        s.S.dtype == torch.float32 and (s.z is None or s.z.dtype == torch.float32) for s in (*st.layers, *st1.layers)
    )
    assert rel_err(out.float(), ref) < 3e-2


@pytest.mark.parametrize("kw", [p for p in LM_VARIANTS if "softmax" not in p.id])
def test_lm_state_size_constant_in_position(kw):
    """Per-token cost stays flat: the state (counter included) has the same size at token 10 and 1000."""
    model = tiny(**kw)
    with torch.no_grad():
        _, s1 = model(torch.randint(0, 11, (1, 10)))
        _, s2 = model(torch.randint(0, 11, (1, 990)), s1)
    assert model.state_nbytes(s1) == model.state_nbytes(s2)
    if kw.get("position", "none") != "none":
        assert all(s.pos.tolist() == [1000] for s in s2.layers)


# ---------------------------------------------------------------- positions


def test_rope_in_linear_attention_is_the_softmax_baselines_rope():
    """The same angles, computed the same way: a converted softmax+RoPE model keeps its positions."""
    x = torch.randn(2, 3, 17, 16, dtype=torch.float64)  # [B, H, T, hd], as the softmax layer holds it
    pos = torch.tensor([5, 5])[:, None] + torch.arange(17)  # [B, T]
    cos, sin = rope_cos_sin(pos, 16, 10000.0, x.dtype)
    lin = apply_rope(x.transpose(1, 2), cos[:, :, None], sin[:, :, None]).transpose(1, 2)
    assert torch.equal(lin, _rope(x, 5, 10000.0))


def test_sinusoidal_is_the_papers_encoding():
    """idiap/linear-transformer-experiments causal-copy: pe[:, 0::2] = sin(p·div), pe[:, 1::2] = cos(p·div)."""
    d, n = 16, 50
    position = torch.arange(n, dtype=torch.float64)[:, None]
    div = torch.exp(torch.arange(0, d, 2, dtype=torch.float64) * (-math.log(10000.0) / d))
    pe = torch.zeros(n, d, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(position * div), torch.cos(position * div)
    torch.testing.assert_close(sinusoidal_encoding(torch.arange(n), d, torch.float64), pe, rtol=0, atol=1e-15)


def test_sinusoidal_is_added_at_the_embeddings_scale():
    """The encoding must not drown the tokens: the added signal has the embedding's scale, not amplitude 1."""
    model = tiny(position="sinusoidal", conv_width=0)
    x = torch.randint(0, 11, (1, 64))
    with torch.no_grad():
        emb = model.embed(x)
        added = model._add_positions(emb, None) - emb
    D = emb.shape[-1]
    assert torch.count_nonzero(added[..., : D - D // 2]) == 0  # the first half carries the token alone
    ratio = added[..., D - D // 2 :].std() / emb.std()
    assert 0.3 < ratio < 3, f"position/token scale ratio {ratio:.1f}"


@pytest.mark.parametrize("position", ["rope", "sinusoidal"])
def test_positions_reach_the_output(position):
    """The same tokens read at position 0 and at position 100 give different logits (and 'none' does not)."""
    x = torch.randint(0, 11, (1, 12))
    outs = {}
    for pos_kind in (position, "none"):
        model = tiny(position=pos_kind, conv_width=0)
        with torch.no_grad():
            st = model.init_state(1)
            shifted = st._replace(
                layers=tuple(s._replace(pos=None if s.pos is None else s.pos + 100) for s in st.layers)
            )
            outs[pos_kind] = (model(x, st)[0], model(x, shifted)[0])
    assert not torch.allclose(*outs[position], atol=1e-6)
    torch.testing.assert_close(*outs["none"], rtol=0, atol=0)


def test_state_without_counter_is_refused_by_a_position_model():
    model = tiny(position="rope")
    with torch.no_grad():
        _, st = model(torch.randint(0, 11, (1, 5)))
    bad = st._replace(layers=tuple(s._replace(pos=None) for s in st.layers))
    with pytest.raises(ValueError, match="token counter"):
        model(torch.randint(0, 11, (1, 3)), bad)


# ---------------------------------------------------------------- config


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"attention": "flash"}, "attention must be one of"),
        ({"feature_map": "cosine"}, "feature_map must be one of"),
        ({"position": "alibi"}, "position must be one of"),
        ({"gate": "vector"}, "gate must be one of"),
        ({"update": "oja"}, "update must be one of"),
        ({"normalizer": "layernorm"}, "normalizer must be one of"),
        ({"state_dtype": "bfloat16"}, "state_dtype must be one of"),
        ({"decay": "xpos"}, "decay must be"),
        ({"decay": [0.5, 1.5, 0.9, 0.9]}, r"decay values must lie in \(0, 1\]"),
        ({"decay": [0.0, 0.5, 0.9, 0.9]}, r"decay values must lie in \(0, 1\]"),
        ({"decay": [0.9]}, "decay has 1 values for 4 heads"),
        ({"update": "delta"}, "no normalizer z"),
        ({"gate_tau": 0.0}, "gate_tau"),
        ({"position": "rope", "d_model": 20, "n_heads": 4}, "even head dim"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_bad_config_values_fail_at_config_time(kw, match):
    with pytest.raises(ConfigError, match=match):
        ModelConfig(**kw)


def test_shipped_model_configs_still_load():
    """Every data/models/*/config.json loads; keys it predates take the paper's defaults."""
    dirs = sorted(p.parent for p in (REPO / "data" / "models").glob("*/config.json"))
    assert dirs, "no shipped models found"
    paper = {"position": "none", "gate": "none", "update": "additive", "normalizer": "z"}
    for d in dirs:
        raw = json.loads((d / "config.json").read_text())["model"]
        cfg = ModelConfig.from_dict(raw)
        for key, default in paper.items():
            assert getattr(cfg, key) == raw.get(key, default)
        model = load(d)
        with torch.no_grad():
            logits, st = model(torch.randint(0, 4, (1, 20)))
        assert torch.isfinite(logits).all()
        assert all((s.pos is None) == (cfg.position == "none") for s in st.layers) and len(st.layers) == cfg.n_layers
        assert (st.memory is not None) == bool(cfg.kmer_orders)  # the k-mer memory's state is its own field


@pytest.mark.parametrize("gamma", [0.5, 0.9, 0.995, 1 - 2.0**-9])
def test_gate_starts_at_the_configured_decay(gamma):
    b = torch.tensor(gate_bias(gamma, 16.0), dtype=torch.float64)
    assert abs(math.exp(F.logsigmoid(b).item() / 16.0) - gamma) < 1e-12
    model = tiny(gate="scalar", decay=[gamma, gamma])
    torch.testing.assert_close(model.blocks[0].mixer.gate.bias.double(), b.expand(2), rtol=1e-6, atol=0)

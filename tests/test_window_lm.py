"""``window: W`` in the LM: the sliding-window softmax and the window + linear hybrid keep the state contract.

step == parallel == naive == any split, parameter gradients across modes, save/load of model and state,
the KV buffer stays W tokens, the degenerate cases against the plain models with the same weights, bf16,
config errors, and scan / generate / models.load end to end on a tiny model directory.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import test_variants
import torch
import torch.nn.functional as F
from test_variants import rel_err, run_split, tiny  # the same tiny double model and split runner

from strandline.app.cli import main
from strandline.models import ConfigError, LinearTransformerLM, ModelConfig, load, load_state
from strandline.models.layers import LinearState

VARIANTS = [
    pytest.param({"window": 5}, id="hybrid-W5"),
    pytest.param({"window": 6, "position": "rope", "decay": "retnet"}, id="hybrid-rope-decay"),
    pytest.param({"window": 5, "feature_map": "hedgehog", "position": "rope", "conv_width": 0}, id="hybrid-hedgehog"),
    pytest.param(
        {"window": 4, "feature_map": "taylor", "feature_dim": 4, "position": "sinusoidal"}, id="hybrid-taylor"
    ),
    pytest.param({"attention": "softmax", "window": 5}, id="softmax-W5"),
    pytest.param({"attention": "softmax", "window": 7, "position": "sinusoidal"}, id="softmax-sinusoidal"),
]


@pytest.mark.parametrize("kw", VARIANTS)
def test_step_equals_parallel_equals_naive_and_splits(kw):
    test_variants.test_lm_step_equals_parallel_equals_splits(kw)  # logits: naive, steps, splits == parallel
    model = tiny(**kw)
    x = torch.randint(0, 11, (2, 37))
    with torch.no_grad():
        _, st_full = model(x)
        _, st = run_split(model, x, [1, 4, 36])
        for _ in range(2):  # and the final states, buffers included, agree with steps after them too
            st, st_full = model.step(x[:, 0], st)[1], model(x[:, :1], st_full)[1]
    for a, b in zip(st.layers, st_full.layers, strict=True):
        for ta, tb in zip(a, b, strict=True):
            assert (ta is None) == (tb is None)
            if ta is not None:
                torch.testing.assert_close(ta, tb, rtol=0, atol=1e-10)


@pytest.mark.parametrize("kw", VARIANTS[:3] + VARIANTS[4:5])
def test_parameter_gradients_agree_across_modes(kw):
    test_variants.test_lm_parameter_gradients_agree_across_modes(kw)  # the variants' check, on the window models


@pytest.mark.parametrize("kw", VARIANTS)
def test_save_load_model_and_state_resume(kw, tmp_path):
    test_variants.test_lm_save_load_identical_logits_and_state_resume(kw, tmp_path)
    assert load(tmp_path / "m").config.window == kw["window"]
    st, _ = load_state(tmp_path / "s.safetensors")
    ref = tiny(**kw).init_state(2)
    assert [type(s) for s in st.layers] == [type(s) for s in ref.layers] and st.memory is None
    for s, r in zip(st.layers, ref.layers, strict=True):  # every field of the state file, the window's buffers included
        assert [t is None for t in s] == [t is None for t in r] and s.pos.tolist() == [9, 9]


@pytest.mark.parametrize("kw", VARIANTS)
def test_state_is_w_tokens_after_10w_and_never_mutated(kw):
    model = tiny(**kw)
    W = kw["window"]
    with torch.no_grad():
        _, s1 = model(torch.randint(0, 11, (1, 3)))
        snapshot = [t.clone() for t in s1.tensors()]
        _, s2 = model(torch.randint(0, 11, (1, 10 * W)), s1)
        for _ in range(W):
            _, s2 = model.step(torch.randint(0, 11, (1,)), s2)
    assert model.state_nbytes(s1) == model.state_nbytes(s2)
    for s in s2.layers:
        buf = s.win_k if isinstance(s, LinearState) else s.k
        assert buf.shape[1] == W and s.pos.tolist() == [3 + 11 * W]
    assert all(torch.equal(t, c) for t, c in zip(s1.tensors(), snapshot, strict=True))


def test_softmax_window_covering_the_input_is_the_plain_softmax_model():
    plain = tiny(attention="softmax")
    win, short = plain.with_window(40), plain.with_window(6)
    assert plain.config.window == 0 and short.config.window == 6 and not short.training
    x = torch.randint(0, 11, (2, 37))
    with torch.no_grad():
        ref = plain(x)[0]
        torch.testing.assert_close(win(x)[0], ref, rtol=0, atol=1e-12)
        assert (short(x)[0] - ref).abs().max() > 1e-3  # the window really cuts
        built = tiny(attention="softmax", window=6)  # the same as building it with the key (same seed)
        torch.testing.assert_close(short(x)[0], built(x)[0], rtol=0, atol=0)


@pytest.mark.parametrize("eps,atol", [(0.0, 1e-12), (1e-6, 1e-5)], ids=["eps0", "eps-default"])
def test_hybrid_window_covering_the_input_is_softmax_with_the_same_weights(eps, atol):
    """All keys inside the window: no linear term, only eps·e^(-r) in the denominator."""
    softmax = tiny(attention="softmax")
    hybrid = tiny(window=40, position="rope", eps=eps)
    hybrid.load_state_dict(softmax.state_dict())  # elu1 has no weights: the same parameters
    x = torch.randint(0, 11, (2, 37))
    with torch.no_grad():
        torch.testing.assert_close(hybrid(x)[0], softmax(x)[0], rtol=0, atol=atol)


def test_window_zero_is_the_plain_linear_model():
    x = torch.randint(0, 11, (2, 30))
    plain, off = tiny(), tiny(window=0)
    with torch.no_grad():
        (a, _), (b, sb) = plain(x), off(x)
    assert torch.equal(a, b)
    assert all(s.win_k is None and s.win_v is None and s.pos is None for s in sb.layers)
    hybrid = tiny(window=3)  # and a window does change the model
    with torch.no_grad():
        assert (hybrid(x)[0] - a).abs().max() > 1e-4


def test_lanes_reset_at_different_times_stay_exact():
    """strandline.tasks.lm.reset_state zeroes one lane (pos 0: empty window); each lane equals that lane run alone."""
    from strandline.tasks.lm import pack_state, reset_state, unpack_state

    model = tiny(window=5, position="rope")
    x = torch.randint(0, 11, (2, 30))
    with torch.no_grad():
        _, st = model(x[:, :12])
        st = unpack_state(pack_state(reset_state(st, torch.tensor([True, False]))))
        assert [s.pos.tolist() for s in st.layers] == [[0, 12]] * 2
        both, _ = model(x[:, 12:], st)
        lane0, _ = model(x[:1, 12:])
        lane1, _ = model(x[1:, :])
    torch.testing.assert_close(both[:1], lane0, rtol=0, atol=1e-12)
    torch.testing.assert_close(both[1:], lane1[:, 12:], rtol=0, atol=1e-12)


@pytest.mark.parametrize("kw", [VARIANTS[1], VARIANTS[4]])
def test_bf16_autocast_keeps_float32_state(kw):
    """Compute in bf16, state (S, z and the window's buffers) in float32; outputs within bf16 rounding."""
    model = tiny(**kw).float()
    x = torch.randint(0, 11, (2, 70))
    with torch.no_grad():
        ref, ref_st = model(x[:, :60])
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out, st = model(x[:, :60])
            steps = [model.step(x[:, t], st)[0] for t in range(60, 70)]  # each from the same state: a fork
    for s in st.layers:  # (the conv buffer holds compute-dtype inputs, as in every variant)
        tensors = (s.S, s.z, s.win_k, s.win_v) if isinstance(s, LinearState) else (s.k, s.v)
        assert all(t.dtype == torch.float32 for t in tensors)
    assert rel_err(out.float(), ref) < 3e-2
    ref_steps = [model.step(x[:, t], ref_st)[0] for t in range(60, 70)]
    assert rel_err(torch.stack(steps).float(), torch.stack(ref_steps)) < 3e-2


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"window": -1}, "window must be an integer >= 0"),
        ({"window": 2.5}, "window must be an integer >= 0"),
        ({"window": 8, "gate": "scalar"}, "needs gate 'none'"),
        ({"window": 8, "update": "delta", "normalizer": "rmsnorm"}, "needs update 'additive'"),
        ({"window": 8, "normalizer": "rmsnorm"}, "needs normalizer 'z'"),
        ({"window": 8, "feature_map": "performer"}, "performer"),
    ],
)
def test_bad_window_configs_fail_in_one_line(kw, match):
    with pytest.raises(ConfigError, match=match) as e:
        ModelConfig(**kw)
    assert "\n" not in str(e.value)
    ModelConfig(attention="softmax", window=8, gate="scalar")  # the softmax window ignores linear-only keys


def test_an_old_config_json_loads_with_window_off(tmp_path):
    model = LinearTransformerLM(ModelConfig(vocab_size=16, d_model=16, n_layers=1, n_heads=2))
    model.save(tmp_path / "old", tokenizer="dna")
    cfg_path = tmp_path / "old" / "config.json"
    meta = json.loads(cfg_path.read_text())
    meta["model"].pop("window")  # a config.json written before the key existed
    cfg_path.write_text(json.dumps(meta))
    assert load(tmp_path / "old").config.window == 0


@pytest.mark.parametrize(
    "kw", [{"window": 6, "position": "rope"}, {"attention": "softmax", "window": 6}], ids=["hybrid", "softmax"]
)
def test_scan_generate_and_load_a_window_model(kw, tmp_path, capsys):
    from strandline.tasks.scan import load_for_scan, score_sequence

    torch.manual_seed(0)
    LinearTransformerLM(ModelConfig(d_model=32, n_layers=2, n_heads=2, chunk_size=16, **kw)).save(
        tmp_path / "m", tokenizer="dna"
    )
    rng = np.random.default_rng(0)
    seq = "".join(rng.choice(list("ACGT"), 300))
    (tmp_path / "g.fa").write_text(f">r1\n{seq[:170]}\n>r2\n{seq[170:]}\n")
    args = [str(tmp_path / "m"), str(tmp_path / "g.fa"), "-o", str(tmp_path / "o.bedGraph"), "--chunk", "37"]
    assert main(["scan", *args]) == 0  # the CLI, chunks of 37 bases (not a multiple of W or C)
    rows = [line.split("\t") for line in (tmp_path / "o.bedGraph").read_text().splitlines() if line[:1] != "t"]
    assert len(rows) == 300 and rows[0][:3] == ["r1", "0", "1"] and rows[170][:3] == ["r2", "0", "1"]
    model = load_for_scan(str(tmp_path / "m"))
    from strandline.data.tokenizers import DNATokenizer

    ids = DNATokenizer().encode(seq[:170])
    one_pass = score_sequence(model, np.asarray(ids, dtype=np.uint8), chunk=10_000)[:, 0]
    scanned = np.array([float(r[3]) for r in rows[:170]])
    np.testing.assert_allclose(scanned, one_pass, rtol=1e-4, atol=1e-4)
    assert main(["generate", str(tmp_path / "m"), "--prompt", "ACGT", "--max_new_tokens", "40", "--seed", "1"]) == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith("ACGT") and len(out) == 44


@pytest.mark.parametrize("kw", [VARIANTS[1], VARIANTS[4]])
def test_tbptt_carries_the_window_state_through_a_weights_only_checkpoint(kw):
    """Window 2 scored from window 1's state, saved and loaded as a Lightning checkpoint holds it (the
    KV cache of a windowed softmax is constant-size, so it is carried too), == one long pass."""
    import io

    from strandline.tasks.lm import LMTask, pack_state, unpack_state

    cfg = ModelConfig(vocab_size=16, d_model=32, n_layers=2, n_heads=2, chunk_size=16, **kw)
    task = LMTask(model=cfg, long_context="tbptt").double().eval()
    x = torch.randint(4, 9, (2, 81))
    inp, tgt = x[:, :-1], x[:, 1:]
    with torch.no_grad():
        full, _ = task.model(inp)
        ref = F.cross_entropy(full[:, 40:].reshape(-1, 16), tgt[:, 40:].reshape(-1))
        task._window_loss({"input": inp[:, :40], "target": tgt[:, :40], "reset": torch.tensor([True, True])}, "val")
        buf = io.BytesIO()
        torch.save({"carried": pack_state(task._carried["val"])}, buf)
        buf.seek(0)
        task._carried["val"] = unpack_state(torch.load(buf, weights_only=True)["carried"])
        b2 = {"input": inp[:, 40:], "target": tgt[:, 40:], "reset": torch.tensor([False, False])}
        loss, count = task._window_loss(b2, "val")
    assert count == 80 and torch.allclose(loss, ref, atol=1e-10)


def test_activation_checkpointing_gives_the_same_gradients_with_a_window():
    x = torch.randint(0, 11, (2, 40))
    grads = []
    for ckpt in (False, True):
        model = tiny(window=6, position="rope", checkpoint_activations=ckpt).train()
        logits, _ = model(x)
        F.cross_entropy(logits.flatten(0, 1), x.flatten()).backward()
        grads.append([p.grad for p in model.parameters()])
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_float64_state_keeps_adding_after_2_to_the_26_tokens():
    """A scan's float64 state (as load_for_scan sets it): after ~2^26 tokens of z, a float32 z would round
    every new key to a multiple of 8, the float64 one still adds it; the buffers stay float32."""
    torch.manual_seed(0)
    model = LinearTransformerLM(ModelConfig(vocab_size=11, d_model=32, n_layers=1, n_heads=2, window=4)).eval()
    model.config.state_dtype = "float64"
    x = torch.randint(0, 11, (1, 30))
    with torch.no_grad():
        _, st = model(x[:, :20])
        (s,) = st.layers
        assert s.S.dtype == s.z.dtype == torch.float64 and s.win_k.dtype == torch.float32
        big = s._replace(S=s.S + 2.0**26, z=s.z + 2.0**26)
        (ref,) = model(x[:, 20:], st)[1].layers
        (got,) = model(x[:, 20:], st._replace(layers=(big,)))[1].layers
    torch.testing.assert_close(got.z - big.z, ref.z - s.z, rtol=1e-7, atol=1e-7)
    torch.testing.assert_close(got.S - big.S, ref.S - s.S, rtol=1e-7, atol=1e-7)

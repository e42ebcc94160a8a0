"""The LM keeps the op's contract: parallel == token-by-token == any split; states are values; save/load."""

import json

import pytest
import torch

from strandline.models import LinearTransformerLM, ModelConfig, ModelLoadError, load, load_state, save_state

VARIANTS = [
    pytest.param({}, id="elu1-conv"),
    pytest.param({"conv_width": 0}, id="elu1-noconv"),
    pytest.param({"feature_map": "relu", "decay": "retnet"}, id="relu-retnet"),
    pytest.param({"feature_map": "performer", "feature_dim": 12}, id="performer"),
    pytest.param({"feature_map": "hedgehog"}, id="hedgehog"),
    pytest.param({"attention": "softmax"}, id="softmax-kvcache"),
]


def tiny(**kw) -> LinearTransformerLM:
    cfg = ModelConfig(vocab_size=11, d_model=32, n_layers=2, n_heads=2, chunk_size=8, **kw)
    return LinearTransformerLM(cfg).double().eval()


@pytest.mark.parametrize("kw", VARIANTS)
def test_parallel_equals_steps_equals_splits(kw):
    model = tiny(**kw)
    x = torch.randint(0, 11, (2, 37))
    with torch.no_grad():
        full, _ = model(x)
        steps, st = [], None
        for t in range(x.shape[1]):
            lt, st = model.step(x[:, t], st)
            steps.append(lt)
        torch.testing.assert_close(torch.stack(steps, 1), full, rtol=0, atol=1e-10)
        for cuts in ([5], [8, 16], [1, 2, 3, 20, 36]):
            parts, st = [], None
            for a, b in zip([0, *cuts], [*cuts, x.shape[1]], strict=True):
                lp, st = model(x[:, a:b], st)
                parts.append(lp)
            torch.testing.assert_close(torch.cat(parts, 1), full, rtol=0, atol=1e-10)


def test_float32_modes_agree_relative():
    model = tiny().float()
    x = torch.randint(0, 11, (1, 200))
    with torch.no_grad():
        a, _ = model(x, mode="chunked")
        b, _ = model(x, mode="recurrent")
    assert ((a - b).abs().max() / a.abs().max()).item() < 1e-4


def test_parameter_gradients_chunked_equal_recurrent():
    x = torch.randint(0, 11, (2, 29))
    grads = {}
    for mode in ("chunked", "recurrent", "naive"):
        torch.manual_seed(0)
        model = tiny(decay=[0.9, 0.99])
        logits, _ = model(x, mode=mode)
        torch.nn.functional.cross_entropy(logits.flatten(0, 1), x.flatten()).backward()
        grads[mode] = {n: p.grad.clone() for n, p in model.named_parameters()}
    for mode in ("recurrent", "naive"):
        for n in grads["chunked"]:
            torch.testing.assert_close(grads[mode][n], grads["chunked"][n], rtol=1e-9, atol=1e-12, msg=n)


@pytest.mark.parametrize(
    "kw",
    [{}, {"position": "rope", "gate": "scalar"}, {"update": "delta", "gate": "scalar", "normalizer": "rmsnorm"}],
    ids=["paper", "rope-gate", "gated-delta"],
)
def test_activation_checkpointing_same_gradients(kw):
    x = torch.randint(0, 11, (2, 40))
    grads = []
    for ckpt in (False, True):
        torch.manual_seed(0)
        model = tiny(checkpoint_activations=ckpt, **kw).train()
        logits, _ = model(x)
        logits.square().mean().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_forked_state_continues_two_ways_and_is_not_mutated():
    model = tiny()
    x = torch.randint(0, 11, (1, 30))
    with torch.no_grad():
        _, st = model(x[:, :12])
        snapshot = [t.clone() for t in st.tensors()]
        a1, _ = model(x[:, 12:20], st)
        b1, _ = model(x[:, 20:], st)  # a different continuation from the same fork point
        a2, _ = model(x[:, 12:20], st)  # the first continuation again
    torch.testing.assert_close(a1, a2, rtol=0, atol=0)
    assert not torch.allclose(a1[:, :3], b1[:, :3])
    assert all(torch.equal(t, c) for t, c in zip(st.tensors(), snapshot, strict=True))


def test_linear_state_size_is_constant_kv_cache_grows():
    lin, soft = tiny(), tiny(attention="softmax")
    with torch.no_grad():
        sizes = {}
        for name, m in (("lin", lin), ("soft", soft)):
            _, s1 = m(torch.randint(0, 11, (1, 10)))
            _, s2 = m(torch.randint(0, 11, (1, 100)), s1)
            sizes[name] = (m.state_nbytes(s1), m.state_nbytes(s2))
    assert sizes["lin"][0] == sizes["lin"][1]
    assert sizes["soft"][1] > 5 * sizes["soft"][0]  # 110 vs 10 cached tokens (plus a constant conv buffer)


def test_save_load_identical_logits(tmp_path):
    model = tiny(feature_map="performer").float()
    model.save(tmp_path / "m", tokenizer="dna", training={"steps": 3})
    again = load(tmp_path / "m")
    x = torch.randint(0, 11, (2, 25))
    with torch.no_grad():
        torch.testing.assert_close(again(x)[0], model(x)[0], rtol=0, atol=0)
    assert again.meta == {"tokenizer": "dna", "training": {"steps": 3}}
    assert json.loads((tmp_path / "m" / "config.json").read_text())["model"]["feature_map"] == "performer"
    assert again.head.weight.data_ptr() == again.embed.weight.data_ptr()  # still tied


def test_load_lightning_style_checkpoint(tmp_path):
    model = tiny().float()
    ckpt = {
        "state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
        "hyper_parameters": {"model": model.config.to_dict(), "tokenizer": "dna"},
        "global_step": 7,
    }
    torch.save(ckpt, tmp_path / "x.ckpt")
    again = load(tmp_path / "x.ckpt")
    x = torch.randint(0, 11, (1, 9))
    with torch.no_grad():
        torch.testing.assert_close(again(x)[0], model(x)[0])
    assert again.meta["tokenizer"] == "dna"


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda p: p.mkdir(), "not a model directory"),
        (lambda p: p.write_bytes(b"\x00\x01garbage"), "not a model directory or a readable"),
        (lambda p: torch.save({"state_dict": {}}, p), "not a Strandline checkpoint"),
        (lambda p: None, "no such"),
    ],
    ids=["empty-dir", "garbage-file", "foreign-ckpt", "missing"],
)
def test_wrong_model_paths_raise_clear_errors(tmp_path, make, match):
    p = tmp_path / "bad"
    make(p)
    with pytest.raises(ModelLoadError, match=match):
        load(p)


def test_mismatched_weights_rejected(tmp_path):
    tiny().float().save(tmp_path / "m")
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    cfg["model"]["d_model"] = 64
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelLoadError, match="cannot read weights|do not match"):
        load(tmp_path / "m")


def test_state_save_load_resumes_exactly(tmp_path):
    model = tiny(decay="retnet")
    x = torch.randint(0, 11, (1, 40))
    with torch.no_grad():
        full, _ = model(x)
        _, st = model(x[:, :17])
        save_state(st, tmp_path / "s.safetensors", {"offset": 17})
        st2, meta = load_state(tmp_path / "s.safetensors")
        rest, _ = model(x[:, 17:], st2)
    assert meta == {"offset": 17}
    torch.testing.assert_close(rest, full[:, 17:], rtol=0, atol=1e-12)


def test_bf16_autocast_keeps_float32_state():
    """The GPU recipe (bf16 compute, float32 state) on CPU autocast: state dtype and accuracy hold."""
    model = tiny().float()
    x = torch.randint(0, 11, (2, 150))
    with torch.no_grad():
        ref, _ = model(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out, st = model(x)
    assert out.dtype == torch.bfloat16
    assert all(s.S.dtype == torch.float32 and s.z.dtype == torch.float32 for s in st.layers)
    assert ((out.float() - ref).abs().max() / ref.abs().max()).item() < 3e-2

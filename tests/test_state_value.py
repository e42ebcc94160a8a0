"""The LM's state as a named value (``LMState``), the memory protocol, and the older saved forms that still load:
state files of format 1, packed checkpoint states of format 1, config keys and weight names of the k-mer memory
from before it had its own name."""

from __future__ import annotations

import json
import shutil
from typing import NamedTuple

import pytest
import torch
from safetensors.torch import load_file, save_file

from strandline.models import LinearTransformerLM, LMState, Memory, ModelConfig, load, load_state, save_state
from strandline.models.config import ConfigError
from strandline.models.layers import LinearState
from strandline.models.ops.kmer import KmerMemoryState, complete_kmer_state
from strandline.models.persist.state import StateFileError
from strandline.resources import shipped_path
from strandline.tasks.lm import pack_state, reset_state, unpack_state

KMER = {"kmer_orders": [2, 4], "kmer_buckets": 256, "kmer_decay": 0.99}
OLD = {"recall_orders": [2, 4], "recall_buckets": 256, "recall_decay": 0.99}


def kmer_lm() -> LinearTransformerLM:
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=32, n_layers=2, n_heads=2, chunk_size=8, state_dtype="float64", **KMER)
    model = LinearTransformerLM(cfg).double().eval()
    with torch.no_grad():
        model.memory.gate.bias.fill_(1.0)  # the memory visibly moves the logits
    return model


def tokens(T: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(4, 8, (2, T), generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------- the value


def test_state_is_named_and_every_kmer_field_is_a_tensor():
    model = kmer_lm()
    st = model.init_state(2)
    assert isinstance(st, LMState) and len(st.layers) == 2 and isinstance(st.memory, KmerMemoryState)
    assert KmerMemoryState._field_defaults == {}  # no field may be left out by position
    assert all(isinstance(t, torch.Tensor) and t.shape[0] == 2 for t in st.memory)
    assert model.state_nbytes(st) == sum(t.numel() * t.element_size() for t in st.tensors())
    plain = LinearTransformerLM(ModelConfig(d_model=32, n_layers=2, n_heads=2)).init_state(1)
    assert plain.memory is None and all(isinstance(s, LinearState) for s in plain.layers)


def test_a_call_returns_a_new_state_and_never_changes_the_one_passed():
    model = kmer_lm()
    with torch.no_grad():
        _, st = model(tokens(20))
        snapshot = [t.clone() for t in st.tensors()]
        a, _ = model(tokens(9, 1), st)
        model.step(tokens(1, 2)[:, 0], st)
        b, _ = model(tokens(9, 1), st)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert all(torch.equal(t, c) for t, c in zip(st.tensors(), snapshot, strict=True))


def test_map_resets_the_memory_lanes_with_the_layers():
    model = kmer_lm()
    with torch.no_grad():
        _, st = model(tokens(30))
        r = reset_state(st, torch.tensor([True, False]))
    assert isinstance(r, LMState) and type(r.memory) is KmerMemoryState
    assert all(not t[0].any() for t in r.tensors())  # lane 0: every tensor, tables included, back to zero
    assert all(torch.equal(t[1], u[1]) for t, u in zip(r.tensors(), st.tensors(), strict=True))


def test_need_state_false_gives_the_same_logits_and_a_state_that_cannot_continue():
    model = kmer_lm()
    x = tokens(40)
    with torch.no_grad():
        full, _ = model(x)
        cheap, st = model(x, need_state=False)
        torch.testing.assert_close(cheap, full, rtol=0, atol=0)
        assert st.memory is None and len(st.layers) == 2
        with pytest.raises(ValueError, match="has a memory"):
            model(x, st)


def test_a_state_of_another_structure_is_refused():
    model = kmer_lm()
    st = model.init_state(2)
    with pytest.raises(ValueError, match="2 layers"):
        model(tokens(3), st._replace(layers=st.layers[:1]))
    plain = LinearTransformerLM(ModelConfig(d_model=32, n_layers=2, n_heads=2))
    with pytest.raises(ValueError, match="has no memory"):
        plain(tokens(3), plain.init_state(2)._replace(memory=st.memory))


class CountState(NamedTuple):
    n: torch.Tensor  # [B] long: tokens read


class CountMemory(Memory):
    """A toy memory: it counts the tokens read and adds log(1 + n) to the logit of token 4."""

    def init_state(self, batch_size, dtype, device=None):
        return CountState(torch.zeros(batch_size, dtype=torch.long, device=device))

    def forward(self, tokens, state, mode, need_state=True):
        n0 = state.n if state is not None else torch.zeros(tokens.shape[0], dtype=torch.long)
        n = n0[:, None] + torch.arange(1, tokens.shape[1] + 1)
        return n, CountState(n[:, -1]) if need_state else None

    def mix(self, logits, hidden, read):
        return logits.index_add(-1, torch.tensor([4]), torch.log1p(read.to(logits.dtype))[..., None])


def test_the_lm_runs_any_memory_through_the_protocol_alone():
    """A memory the LM has never heard of: its state rides in LMState.memory, splits and steps stay exact."""
    torch.manual_seed(0)
    model = LinearTransformerLM(ModelConfig(d_model=32, n_layers=2, n_heads=2, chunk_size=8)).double().eval()
    plain = model.head(model.hidden(tokens(12))[0])
    model.memory = CountMemory()
    x = tokens(12)
    with torch.no_grad():
        full, st = model(x)
        assert isinstance(st.memory, CountState) and st.memory.n.tolist() == [12, 12]
        assert torch.equal(model.init_state(2).memory.n, torch.zeros(2, dtype=torch.long))
        torch.testing.assert_close(
            full[..., 4] - plain[..., 4], torch.log1p(torch.arange(1.0, 13).double()).expand(2, 12)
        )
        a, s = model(x[:, :5])
        b, s = model.step(x[:, 5], s)
        c, s = model(x[:, 6:], s)
    torch.testing.assert_close(torch.cat([a, b[:, None], c], 1), full, rtol=0, atol=1e-10)
    assert s.memory.n.tolist() == [12, 12]


# ---------------------------------------------------------------- state files and packed states


def test_state_file_records_its_structure_and_none_round_trips(tmp_path):
    model = kmer_lm()
    with torch.no_grad():
        _, st = model(tokens(20))
    save_state(st, tmp_path / "s.safetensors")
    names = set(load_file(tmp_path / "s.safetensors"))
    assert "layers.0.S" in names and "memory.S" in names and "memory.log_len" in names
    back, _ = load_state(tmp_path / "s.safetensors")
    assert all(torch.equal(a, b) for a, b in zip(st.tensors(), back.tensors(), strict=True))
    save_state(None, tmp_path / "none.safetensors", {"k": 2})
    assert load_state(tmp_path / "none.safetensors") == (None, {"k": 2})


def write_format_1(state: LMState, path, drop=()) -> None:
    """A state file as the code before ``LMState`` wrote it: kinds by position, the k-mer memory ('recall') last."""
    parts = [*state.layers, *([] if state.memory is None else [state.memory])]
    kinds = ["linear"] * len(state.layers) + (["recall"] if state.memory is not None else [])
    tensors = {f"{i}.{n}": t for i, p in enumerate(parts) for n, t in p._asdict().items() if t is not None}
    tensors = {k: v.contiguous() for k, v in tensors.items() if k.split(".", 1)[1] not in drop}
    save_file(tensors, str(path), metadata={"kinds": json.dumps(kinds), "user": json.dumps({"pos": [1, 2]})})


@pytest.mark.parametrize("drop", [(), ("guess", "run", "misses", "log_bucket", "log_symbol", "log_weight",
                                       "log_fp", "log_len")], ids=["full", "before-track-and-log"])  # fmt: skip
def test_state_files_of_format_1_still_load_and_continue_exactly(tmp_path, drop):
    model = kmer_lm()
    with torch.no_grad():
        _, st = model(tokens(20))  # chunked: the write log is empty, so a file without it is the same state
        write_format_1(st, tmp_path / "old.safetensors", drop)
        back, meta = load_state(tmp_path / "old.safetensors")
        assert meta == {"pos": [1, 2]} and isinstance(back, LMState) and isinstance(back.memory, KmerMemoryState)
        nxt = tokens(9, 3)
        torch.testing.assert_close(model(nxt, back)[0], model(nxt, st)[0], rtol=0, atol=0)
    save_file({}, str(tmp_path / "empty.safetensors"), metadata={"kinds": "[]", "user": "{}"})
    assert load_state(tmp_path / "empty.safetensors")[0] is None  # format 1 saved () for "nothing to carry"


def test_a_state_file_of_a_newer_format_is_one_line_naming_it(tmp_path):
    save_file({}, str(tmp_path / "new.safetensors"), metadata={"format": "3", "layers": "[]", "memory": "null"})
    with pytest.raises(StateFileError, match="format 3; this strandline reads formats 1 to 2") as e:
        load_state(tmp_path / "new.safetensors")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("module", ["strandline.models.ops.kmer", "models.ops_recall"])
def test_packed_states_of_format_1_unpack_into_the_same_state(module):
    """TBPTT checkpoints written before LMState hold a flat list, the k-mer memory's RecallState last."""
    model = kmer_lm()
    with torch.no_grad():
        _, st = model(tokens(20))
    old = [{"type": "strandline.models.layers.LinearState", "fields": s._asdict()} for s in st.layers]
    old.append({"type": f"{module}.RecallState", "fields": {**st.memory._asdict(), "log_len": None}})
    back = unpack_state(old)
    assert isinstance(back.memory, KmerMemoryState) and int(back.memory.log_len.sum()) == 0
    assert all(torch.equal(a, b) for a, b in zip(st.tensors(), back.tensors(), strict=True))
    assert unpack_state(pack_state(st)).memory._fields == st.memory._fields
    assert pack_state(st)["format"] == 2


def test_complete_kmer_state_names_a_missing_core_field():
    st = kmer_lm().init_state(1).memory
    with pytest.raises(KeyError, match="owner"):
        complete_kmer_state({**st._asdict(), "owner": None})


# ---------------------------------------------------------------- config keys and weight names from before the rename


def test_old_config_keys_load_to_the_same_model_and_only_new_keys_are_written():
    base = {"d_model": 32, "n_layers": 2, "n_heads": 2}
    old, new = ModelConfig.from_dict({**base, **OLD}), ModelConfig.from_dict({**base, **KMER})
    assert old == new and not any(k.startswith("recall_") for k in new.to_dict())
    with pytest.raises(ConfigError, match="both recall_orders and its new name kmer_orders"):
        ModelConfig.from_dict({**base, **OLD, "kmer_orders": [3]})


def test_a_model_directory_with_old_keys_and_weight_names_loads_to_the_same_model(tmp_path):
    model = kmer_lm()
    model.save(tmp_path / "m", tokenizer="dna")
    shutil.copytree(tmp_path / "m", tmp_path / "old")
    cfg = json.loads((tmp_path / "old" / "config.json").read_text())
    cfg["model"] = {{v: k for k, v in zip(OLD, KMER, strict=True)}.get(k, k): v for k, v in cfg["model"].items()}
    (tmp_path / "old" / "config.json").write_text(json.dumps(cfg))
    weights = load_file(tmp_path / "old" / "model.safetensors")
    assert any(k.startswith("memory.") for k in weights)
    save_file(
        {k.replace("memory.", "recall.", 1): v for k, v in weights.items()}, tmp_path / "old" / "model.safetensors"
    )
    back = load(tmp_path / "old").double()
    assert back.config == model.config
    x = tokens(30)
    with torch.no_grad():
        torch.testing.assert_close(back(x)[0], model(x)[0], rtol=0, atol=0)


def test_the_shipped_memory_model_loads_and_its_copy_under_the_old_names_is_the_same_model(tmp_path):
    """dna-corpus-tbptt is saved under the current names (``memory.*`` weights, ``kmer_*`` keys); the same files
    under the names from before the rename (``recall.*``, ``recall_*``, as the earlier shipped memory models were
    written) load to the same model with the same scan digest."""
    from strandline.models.config import OLD_KEYS
    from strandline.tasks.scan.workdir import model_digest

    d = shipped_path("models", "dna-corpus-tbptt")
    weights = load_file(d / "model.safetensors")
    assert any(k.startswith("memory.") for k in weights)
    cfg = json.loads((d / "config.json").read_text())
    assert "kmer_orders" in cfg["model"]
    model = load(d)
    assert model.memory is not None
    shutil.copytree(d, tmp_path / "old")
    cfg["model"] = {{v: k for k, v in OLD_KEYS.items()}.get(k, k): v for k, v in cfg["model"].items()}
    assert "recall_orders" in cfg["model"]
    (tmp_path / "old" / "config.json").write_text(json.dumps(cfg))
    save_file(
        {k.replace("memory.", "recall.", 1): v for k, v in weights.items()}, tmp_path / "old" / "model.safetensors"
    )
    back = load(tmp_path / "old")
    assert back.config == model.config and model_digest(back) == model_digest(model)
    assert all(torch.equal(a, b) for a, b in zip(back.state_dict().values(), model.state_dict().values(), strict=True))


def test_scan_work_folders_of_shipped_models_keep_their_model_digest():
    """A scan work folder stores the model's digest (hashed under the names from before the rename); the shipped
    model must keep giving the one pinned here."""
    from strandline.tasks.scan.workdir import model_digest

    want = {"dna-corpus-tbptt": "673ead97164280f4dfd802e59fcb250bcdae9d24f3d89ce1d917520f06950982"}
    for name, digest in want.items():
        assert model_digest(load(shipped_path("models", name))) == digest, name


def test_a_checkpoint_with_old_keys_and_weight_names_loads_to_the_same_model(tmp_path):
    """A Lightning .ckpt of a k-mer memory model written before the rename: hparams with recall_* keys and
    weights under model.recall.*."""
    model = kmer_lm()
    old_cfg = {{v: k for k, v in zip(OLD, KMER, strict=True)}.get(k, k): v for k, v in model.config.to_dict().items()}
    sd = {"model." + k.replace("memory.", "recall.", 1): v for k, v in model.state_dict().items()}
    torch.save({"hyper_parameters": {"model": old_cfg, "tokenizer": "dna"}, "state_dict": sd}, tmp_path / "old.ckpt")
    back = load(tmp_path / "old.ckpt").double()
    assert back.config == model.config
    x = tokens(30)
    with torch.no_grad():
        torch.testing.assert_close(back(x)[0], model(x)[0], rtol=0, atol=0)

"""Model directories and checkpoints: nothing is ever emptied, and every unusable model is one line."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import torch

import strandline.models.persist.modeldir as modeldir
from strandline.app.cli import main
from strandline.models import LinearTransformerLM, ModelConfig, ModelLoadError, load
from strandline.models.persist.checkpoint import HPARAM_MODEL, HPARAM_TOKENIZER, STATE_PREFIX, read_checkpoint
from strandline.models.persist.modeldir import ModelSaveError, is_model_dir, save_model

ROOT = Path(__file__).resolve().parents[1]


def tiny(n_layers: int = 1, **kw) -> LinearTransformerLM:
    return LinearTransformerLM(ModelConfig(vocab_size=16, d_model=32, n_layers=n_layers, n_heads=2, **kw))


def write_ckpt(path: Path, model: LinearTransformerLM) -> Path:
    """A checkpoint laid out as LMTask writes it (see models/persist/checkpoint.py)."""
    sd = {STATE_PREFIX + k: v for k, v in model.state_dict().items()}
    hp = {HPARAM_MODEL: model.config.to_dict(), HPARAM_TOKENIZER: "dna"}
    torch.save({"hyper_parameters": hp, "state_dict": sd, "global_step": 7}, path)
    return path


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


# ---- item 1: export never empties a directory -----------------------------------------------------------------
def test_export_refuses_a_directory_holding_user_files(tmp_path, capsys):
    ckpt = write_ckpt(tmp_path / "a.ckpt", tiny())
    target = tmp_path / "mine"
    target.mkdir()
    (target / "notes.txt").write_text("precious")
    assert main(["export", str(ckpt), str(target)]) == 2
    assert "not empty and not a Strandline model directory" in one_line_error(capsys)
    assert sorted(p.name for p in target.iterdir()) == ["notes.txt"]
    assert (target / "notes.txt").read_text() == "precious"


def test_export_to_the_current_directory_keeps_its_files(tmp_path, monkeypatch, capsys):
    ckpt = write_ckpt(tmp_path / "a.ckpt", tiny())
    work = tmp_path / "work"
    work.mkdir()
    (work / "data.fa").write_text(">r\nACGT\n")
    monkeypatch.chdir(work)
    assert main(["export", str(ckpt), "."]) == 2
    one_line_error(capsys)
    assert sorted(p.name for p in work.iterdir()) == ["data.fa"]


def test_export_into_its_own_run_folder_keeps_last_ckpt(tmp_path, capsys):
    run = tmp_path / "runs" / "checkpoints"
    run.mkdir(parents=True)
    ckpt = write_ckpt(run / "last.ckpt", tiny())
    before = ckpt.read_bytes()
    assert main(["export", str(ckpt), str(run)]) == 2
    one_line_error(capsys)
    assert sorted(p.name for p in run.iterdir()) == ["last.ckpt"] and ckpt.read_bytes() == before


def test_export_overwrite_replaces_a_model_directory_whole(tmp_path):
    old, new = tiny(), tiny()
    save_model(old, tmp_path / "m", tokenizer="dna")
    (tmp_path / "m" / "salience.json").write_text("{}")  # a summarizer's head: it belonged to the old LM
    ckpt = write_ckpt(tmp_path / "new.ckpt", new)
    assert main(["export", str(ckpt), str(tmp_path / "m"), "--overwrite"]) == 0
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["README.md", "config.json", "model.safetensors"]
    x = torch.randint(4, 8, (1, 12))
    torch.testing.assert_close(load(tmp_path / "m")(x)[0], new.eval()(x)[0], rtol=0, atol=0)


def test_save_into_an_empty_directory_and_refuse_a_file(tmp_path):
    (tmp_path / "empty").mkdir()
    save_model(tiny(), tmp_path / "empty", tokenizer="dna")
    assert is_model_dir(tmp_path / "empty")
    (tmp_path / "f").write_text("x")
    with pytest.raises(ModelSaveError, match="exists and is not a directory"):
        save_model(tiny(), tmp_path / "f")
    with pytest.raises(ModelSaveError, match="f is not a directory"):
        save_model(tiny(), tmp_path / "f" / "sub")


def test_a_failed_save_leaves_the_old_model_and_no_temporary_files(tmp_path, monkeypatch):
    save_model(tiny(), tmp_path / "m", tokenizer="dna")
    before = {p.name: p.read_bytes() for p in (tmp_path / "m").iterdir()}

    def disk_full(model, filename):
        Path(filename).write_bytes(b"partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(modeldir, "st_save_model", disk_full)
    with pytest.raises(ModelSaveError, match="No space left"):
        save_model(tiny(), tmp_path / "m", overwrite=True)
    assert {p.name: p.read_bytes() for p in (tmp_path / "m").iterdir()} == before
    with pytest.raises(ModelSaveError):
        save_model(tiny(), tmp_path / "fresh")
    assert not (tmp_path / "fresh").exists()  # the directory this call made is removed again


# ---- item 12: loading --------------------------------------------------------------------------------------------
def _edit_config(path: Path, **changes) -> None:
    cfg = json.loads((path / "config.json").read_text())
    cfg["model"].update(changes)
    (path / "config.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize(
    "changes,needle",
    [
        ({"n_layers": 3}, "the weights have 1 layers, n_layers is 3"),
        ({"d_model": "32"}, "model config d_model must be int, got '32'"),
        ({"decay": [0.5, 1.5]}, "decay values must lie in (0, 1]"),
        ({"d_model": 64, "n_heads": 2}, "weights do not match the model config"),
        ({"vocab_size": 32}, "embed.weight has shape [16, 32], the config needs [32, 32]"),
    ],
    ids=["n_layers", "d_model-string", "decay-range", "d_model", "vocab"],
)
def test_config_that_does_not_fit_the_weights_is_one_line(tmp_path, capsys, changes, needle):
    save_model(tiny(), tmp_path / "m", tokenizer="dna")
    _edit_config(tmp_path / "m", **changes)
    with pytest.raises(ModelLoadError) as e:
        load(tmp_path / "m")
    assert needle in str(e.value) and "\n" not in str(e.value)
    assert main(["generate", str(tmp_path / "m"), "--max_new_tokens", "2"]) == 2
    assert needle in one_line_error(capsys)


@pytest.mark.parametrize(
    "content,needle",
    [(b"", "not a model directory or a readable Lightning checkpoint"), (bytes(range(256)) * 8, "readable")],
    ids=["empty", "random"],
)
def test_random_or_empty_checkpoint_is_one_line(tmp_path, content, needle):
    (tmp_path / "x.ckpt").write_bytes(content)
    with pytest.raises(ModelLoadError, match=needle):
        load(tmp_path / "x.ckpt")


def test_checkpoint_layout_matches_the_training_task(tmp_path):
    """strandline.models.persist.checkpoint is the one description of LMTask's checkpoint; a real LMTask must match it."""
    from strandline.tasks.lm import LMTask

    task = LMTask(model=ModelConfig(vocab_size=16, d_model=32, n_layers=2, n_heads=2), tokenizer="dna")
    torch.save({"hyper_parameters": dict(task.hparams), "state_dict": task.state_dict()}, tmp_path / "t.ckpt")
    parts = read_checkpoint(tmp_path / "t.ckpt")
    assert parts.tokenizer == "dna" and parts.config == task.model.config.to_dict()
    assert set(parts.state_dict) == set(task.model.state_dict())
    x = torch.randint(4, 8, (1, 9))
    torch.testing.assert_close(load(tmp_path / "t.ckpt")(x)[0], task.model.eval()(x)[0], rtol=0, atol=0)


def _module_name(path: Path) -> str:
    """models/persist/io.py -> 'persist.io'; models/ops/linear/__init__.py -> 'ops.linear'."""
    parts = path.relative_to(ROOT / "models").with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, known: set[str]) -> set[str]:
    """Modules of strandline.models that ``path`` imports, at module level or inside functions."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("strandline.models."):
            mod = node.module.removeprefix("strandline.models.")
            for a in node.names:  # `from strandline.models.ops import window`: the module is ops.window
                out.add(f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod)
    return out


def test_models_has_no_import_cycle():
    """Every import inside models/ (lazy ones too) points one way: e.g. lm does not import persist.io back."""
    files = [p for p in (ROOT / "models").rglob("*.py") if p.name != "__init__.py" or p.parent != ROOT / "models"]
    known = {_module_name(p) for p in files}
    graph = {_module_name(p): _imports(p, known) for p in files}
    assert "lm" in graph["persist.io"] and "persist.modeldir" in graph["lm"]  # the graph is read, not empty
    assert "persist.io" not in graph["lm"]
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        if state.get(m) == 1:
            raise AssertionError(f"import cycle: {' -> '.join([*path, m])}")
        if state.get(m) == 2 or m not in graph:
            return
        state[m] = 1
        for dep in graph[m]:
            visit(dep, [*path, m])
        state[m] = 2

    for m in graph:
        visit(m, [])


def test_a_corrupt_state_file_is_one_line(tmp_path):
    from strandline.models.persist.state import StateFileError, load_state, save_state

    model = tiny()
    _, st = model(torch.randint(4, 8, (1, 10)))
    save_state(st, tmp_path / "s.safetensors", {"offset": 10})
    assert [p.name for p in tmp_path.iterdir()] == ["s.safetensors"]  # no temporary file left
    data = (tmp_path / "s.safetensors").read_bytes()
    (tmp_path / "s.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(StateFileError, match="not a readable saved state") as e:
        load_state(tmp_path / "s.safetensors")
    assert "\n" not in str(e.value)


def test_an_exported_model_directory_has_a_model_card(tmp_path):
    """docs/architecture.md §5: config.json, model.safetensors and a README.md model card."""
    model = LinearTransformerLM(ModelConfig(vocab_size=16, d_model=32, n_layers=2, n_heads=2))
    model.meta = {"tokenizer": "dna", "training": {"global_step": 7, "source": "runs/x/last.ckpt"}}
    save_model(model, tmp_path / "m")
    card = (tmp_path / "m" / "README.md").read_text()
    assert "| tokenizer | dna |" in card and "| global_step | 7 |" in card
    assert f"| parameters | {model.num_params():,} |" in card

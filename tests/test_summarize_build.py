"""``strandline build-summarizer``: fit, select and save a summarizer from a recipe, on a tiny synthetic data set."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from strandline.app.cli import COMMANDS, main
from strandline.models import LinearTransformerLM, ModelConfig
from strandline.tasks.summarize import load_summarizer
from strandline.tasks.summarize.features import FEATURES

TOPICS = ("rivers carry water", "engines burn fuel", "cells divide often", "stars emit light", "birds migrate south")


GRID = {"l2": [0.1, 1.0], "lead_bonus": [0.0], "redundancy": [1.0], "centrality": [0.0, 2.0]}  # the test recipe's


def _doc(i: int) -> dict:
    """A document of a few paragraphs whose reference repeats its key sentences (so the oracle has labels)."""
    key = f"The study shows that {TOPICS[i % 5]} in every season of the year."
    filler = [f"Another paragraph mentions {TOPICS[(i + k) % 5]} with some detail number {k}." for k in range(1, 6)]
    text = "Title of document {}\n\n{} {}\n\n{}\n\n{}".format(
        i, key, filler[0], " ".join(filler[1:3]), " ".join(filler[3:])
    )
    return {"id": f"doc{i}", "text": text, "summary": key}


@pytest.fixture
def recipe(tmp_path) -> Path:
    """A recipe over two synthetic domains (3 train, 2 val, 1 test documents each) and a tiny byte LM."""
    torch.manual_seed(0)
    LinearTransformerLM(ModelConfig(vocab_size=260, d_model=16, n_layers=1, n_heads=2)).save(
        tmp_path / "lm", tokenizer="bytes"
    )
    data = tmp_path / "data"
    data.mkdir()
    for d, domain in enumerate(("alpha", "beta")):
        rows = [{**_doc(10 * d + i), "domain": domain, "split": split}
                for i, split in enumerate(["train"] * 3 + ["val"] * 2 + ["test"])]  # fmt: skip
        (data / f"{domain}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = tmp_path / "recipe.json"
    grid = GRID
    path.write_text(json.dumps({"lm": str(tmp_path / "lm"), "domains": ["alpha", "beta"], "budget_min": 5,
                                "budget_max": 30, "selection": "val", "grid": grid}))  # fmt: skip
    return path


def _argv(recipe: Path, out: Path, *extra: str) -> list[str]:
    tmp = recipe.parent
    return ["build-summarizer", "--recipe", str(recipe), str(out), "--data", str(tmp / "data"),
            "--cache", str(tmp / "cache"), *extra]  # fmt: skip


def test_command_is_registered():
    assert COMMANDS["build-summarizer"].target == "strandline.app.build_summarizer:build_summarizer"


@pytest.mark.parametrize("selection", ["val", "train+val", "held-out"])
def test_build_writes_a_summarizer_selected_on_val(recipe, tmp_path, capsys, selection):
    spec = json.loads(recipe.read_text())
    recipe.write_text(json.dumps({**spec, "selection": selection}))
    out = tmp_path / "summ"
    assert main(_argv(recipe, out)) == 0
    assert f"wrote {out}" in capsys.readouterr().err
    meta = json.loads((out / "salience.json").read_text())
    facts = meta["salience_training"]
    assert facts["selection"] == selection and facts["domains"] == ["alpha", "beta"]
    assert (
        facts["selected"]["l2"] in spec["grid"]["l2"] and facts["selected"]["centrality"] in spec["grid"]["centrality"]
    )
    assert meta["centrality"] == facts["selected"]["centrality"]
    assert (
        set(facts["selection_rouge2"]) == {"alpha", "beta"} and "test_rouge2" not in facts
    )  # test splits are not read
    summ = load_summarizer(out)
    assert summ.model.meta["tokenizer"] == "bytes"
    assert list(summ.stream([_doc(3)["text"]], budget=20))  # the directory summarizes
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == sorted(
        p.name for p in (tmp_path / "cache").glob("lm-*-*.pt")
    )  # the LM outputs are cached per domain


def test_existing_out_dir_is_refused_without_overwrite(recipe, tmp_path, capsys):
    out = tmp_path / "summ"
    assert main(_argv(recipe, out)) == 0
    before = (out / "salience.json").read_bytes()
    capsys.readouterr()
    assert main(_argv(recipe, out)) == 2
    err = capsys.readouterr().err
    assert "already holds a model; pass --overwrite" in err and len(err.strip().splitlines()) == 1
    assert (out / "salience.json").read_bytes() == before
    assert main(_argv(recipe, out, "--overwrite")) == 0


def test_folder_of_other_files_is_never_written(recipe, tmp_path, capsys):
    out = tmp_path / "notes"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    assert main(_argv(recipe, out, "--overwrite")) == 2
    assert "not a Strandline model directory" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["mine.txt"] and not (tmp_path / "cache").exists()


@pytest.mark.parametrize(
    "change,needle",
    [
        ({"selection": "test"}, "selection must be one of val, train+val, held-out"),
        ({"grid": {"l2": [0.1]}}, "the grid needs values for lead_bonus"),
        ({"domains": ["alpha", "gamma"]}, "gamma.jsonl: missing; run `python -m strandline.data.fetch_summaries`"),
        ({"lm": "no/such/model"}, "no/such/model"),
        ({"objective": "pairs"}, "objective must be one of bce, listwise"),
        ({"labels": "gold"}, "labels must be one of oracle, graded"),
        ({"unused_features": ["surprisal", "nope"]}, "unused_features names no feature: nope"),
        ({"centrality_words": 0}, "centrality_words must be a positive number of words or null, got 0"),
        ({"centrality_kind": "graph"}, "centrality_kind must be one of candidates, document, got 'graph'"),
        ({"smoothing": "gaussian"}, "smoothing must be one of none, neighbours, got 'gaussian'"),
        ({"fill": "truncate"}, "fill must be one of skip, stop, got 'truncate'"),
        ({"grid": {**GRID, "floor": [None, "high"]}}, "grid floor must be a list of numbers or null, got 'high'"),
        ({"floor_slack": -5}, "floor_slack must be a number of words >= 0 or null, got -5"),
        ({"aggregate": "median"}, "aggregate must be one of mean, relative, got 'median'"),
        ({"grid": {**GRID, "centrality": 2.0}}, "grid centrality must be a list of numbers, got 2.0"),
        ({"grid": {**GRID, "mmr": [0.0, None]}}, "grid mmr must be a list of numbers, got None"),
    ],
    ids=[
        "selection",
        "grid",
        "data",
        "lm",
        "objective",
        "labels",
        "features",
        "centrality_words",
        "centrality_kind",
        "smoothing",
        "fill",
        "grid-floor",
        "floor-slack",
        "aggregate",
        "grid-not-a-list",
        "grid-null",
    ],  # fmt: skip
)
def test_bad_recipes_are_refused_before_any_work(recipe, tmp_path, capsys, change, needle):
    recipe.write_text(json.dumps({**json.loads(recipe.read_text()), **change}))
    assert main(_argv(recipe, tmp_path / "summ")) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "summ").exists() and not (tmp_path / "cache").exists()


def test_objective_labels_mmr_floor_and_centrality_are_recipe_settings_recorded_in_the_head(recipe, tmp_path, capsys):
    spec = json.loads(recipe.read_text())
    spec |= {"objective": "listwise", "labels": "graded", "unused_features": ["surprisal", "definition"]}
    spec |= {"centrality_words": 50, "centrality_kind": "candidates", "fill": "stop", "floor_slack": 10}
    spec["grid"] |= {"mmr": [0.0, 1.0], "floor": [None, 0.5]}
    recipe.write_text(json.dumps(spec))
    out = tmp_path / "summ"
    assert main(_argv(recipe, out)) == 0
    meta = json.loads((out / "salience.json").read_text())
    facts = meta["salience_training"]
    assert facts["objective"] == "listwise" and facts["labels"] == "graded"
    assert facts["aggregate"] == "mean"  # absent from the recipe: the plain mean of the domains' scores
    assert facts["selected"]["mmr"] in (0.0, 1.0) and meta["mmr"] == facts["selected"]["mmr"]
    summ = load_summarizer(out)
    assert summ.buffer(20).mmr == meta["mmr"]  # the saved setting is the one the summary uses
    assert meta["centrality_words"] == facts["selected"]["centrality_words"] == 50
    assert summ.buffer(20).centrality_weight() == meta["centrality"] * 20 / 50
    assert meta["centrality_kind"] == facts["selected"]["centrality_kind"] == summ.buffer(20).centrality_kind
    assert summ.buffer(20).centrality_kind == "candidates"
    assert meta["fill"] == facts["selected"]["fill"] == summ.buffer(20).fill == "stop"
    assert facts["selected"]["floor"] in (None, 0.5) and meta["floor"] == facts["selected"]["floor"]
    assert summ.buffer(20).floor == meta["floor"]
    assert meta["floor_slack"] == facts["selected"]["floor_slack"] == summ.buffer(20).floor_slack == 10
    assert facts["unused_features"] == ["surprisal", "definition"]
    weights = summ.head.net[0].weight[0]
    assert weights[FEATURES.index("surprisal")] == 0 and weights[FEATURES.index("definition")] == 0
    assert weights.abs().sum() > 0  # the other features are used


def test_recipe_that_is_not_json_is_one_line(tmp_path, capsys):
    bad = tmp_path / "r.json"
    bad.write_text("lm: x\n")
    assert main(["build-summarizer", "--recipe", str(bad), str(tmp_path / "o")]) == 2
    assert "not a readable JSON recipe" in capsys.readouterr().err

"""Build a summarizer directory from a recipe: fit the salience head on the recipe's data, select its setting on
the val splits by ROUGE-2, save the LM and the head as one directory.

    strandline build-summarizer --recipe configs/summarize/summarizer.json OUT_DIR

The recipe (JSON, ``configs/summarize/summarizer.json``) names the byte LM, the domains, the budget range and
the grid of settings (l2, lead_bonus, redundancy, centrality, mmr, floor), ``centrality_words`` (the centrality weight
grows with the summary's length, ``SummaryBuffer.centrality_weight``) and ``centrality_kind`` (what centrality is
measured against, ``SummaryBuffer.centralities``). The data are the (document, reference summary)
pairs that ``python -m strandline.data.fetch_summaries`` writes, one ``DOMAIN.jsonl`` per domain with ``train``,
``val`` and ``test`` rows. Each document's budget is its reference's length in words, clamped to the recipe's
range. The head is ``fit_head``'s convex optimum on the train splits (each domain weighted equally: no seed, no
epochs); the setting is chosen by the recipe's ``selection`` rule: ``"val"`` (the best mean val ROUGE-2 of
heads trained on every domain), ``"train+val"`` (the same, scored on each domain's train and val documents: the
settings are not fit by the head, so its own training documents can rank them, and three times the documents
rank them with less noise) or ``"held-out"`` (each domain's val split scored by a head trained without it);
with ``"smoothing": "neighbours"`` each grid point's mean is first averaged with its neighbours' (``smooth``).
Test splits are never read here: ``benchmarks/summarize.py`` scores them with the same functions.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from strandline.data.fetch_summaries import DEFAULT_OUT, load_pairs
from strandline.data.segment import count_words, split_sentences
from strandline.errors import UserInputError, one_of
from strandline.models import LinearTransformerLM, load
from strandline.resources import resolve
from strandline.tasks.summarize import (
    CENTRALITY_KINDS,
    FILLS,
    OBJECTIVES,
    SLACK,
    Summarizer,
    finite_number,
    fit_head,
    optional_number,
)
from strandline.tasks.summarize.features import BOW_DIM, FEATURES, FeatureState, LMReader
from strandline.tasks.summarize.oracle import _ngrams, oracle_labels, rouge_labels, rouge_tokens
from strandline.tasks.summarize.prose import comment_flags

SELECTION = ("val", "train+val", "held-out")
AGGREGATES = ("mean", "relative")  # how the domains' scores of a setting make one (``select``)
SMOOTHING = ("none", "neighbours")  # how a setting's mean score is read before the best is taken (``smooth``)
LABELS = ("oracle", "graded")
LABEL_KEY = {
    "oracle": "labels",
    "graded": "graded",
}  # the head's targets: the greedy oracle's picks, or each sentence's own ROUGE  # the recipe's rules for the shipped (all-domains) setting
GRID_KEYS = ("l2", "lead_bonus", "redundancy", "centrality", "mmr", "floor")  # a setting: one value of each, in order
# keys a recipe may leave out (recipes older than maximal marginal relevance, or than the floor: off)
GRID_DEFAULTS = {"mmr": (0.0,), "floor": (None,)}
HEAD = "fit_head (L-BFGS to the optimum, deterministic)"


@dataclass(frozen=True)
class Recipe:
    """What a summarizer is built from (the recipe file's fields)."""

    lm: str
    domains: list[str]
    budget: tuple[int, int]  # (min, max) words
    selection: str
    grid: dict[str, tuple]
    objective: str = "bce"  # fit_head's objective: "bce" or "listwise"
    labels: str = "oracle"  # the head's targets: "oracle" (the greedy oracle's 0/1) or "graded" (rouge_labels)
    unused: tuple[str, ...] = ()  # features the head leaves out: zeroed in training, so their weights are 0
    centrality_words: float | None = None  # the summary length at which the centrality weight is the grid's value
    centrality_kind: str = "document"  # what centrality is measured against: SummaryBuffer.centralities
    smoothing: str = "none"  # "neighbours": each setting scored with its grid neighbours (``smooth``)
    fill: str = "skip"  # when the next sentence in rank order does not fit: SummaryBuffer.sentences
    floor_slack: float | None = None  # words of the limit the floor may leave unused (None: any): SummaryBuffer
    aggregate: str = "mean"  # how a setting's domain scores make one: ``select``

    @property
    def selection_grid(self) -> dict[str, tuple] | None:
        """The grid ``select`` smooths the scores over (None: no smoothing)."""
        return self.grid if self.smoothing == "neighbours" else None

    @property
    def columns(self) -> list[int]:
        """The feature columns of ``unused``."""
        return [FEATURES.index(f) for f in self.unused]

    def budget_of(self, summary: str) -> int:
        """A document's budget: its reference's length in words, clamped to the recipe's range."""
        return min(self.budget[1], max(self.budget[0], count_words(summary)))


def read_recipe(path: str | Path) -> Recipe:
    """The recipe at ``path``; ``UserInputError`` (one line) for a file that is not one, before any work."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserInputError(f"{path}: not a readable JSON recipe ({str(e).splitlines()[0]})") from None
    missing = [
        k for k in ("lm", "domains", "budget_min", "budget_max", "grid") if not isinstance(raw, dict) or k not in raw
    ]
    if missing:
        raise UserInputError(f"{path}: not a summarizer recipe (missing {', '.join(missing)})")
    one_of("selection", raw.get("selection", "held-out"), SELECTION, UserInputError, f"{path}: ")  # before the grids
    unknown = [f for f in raw.get("unused_features", []) if f not in FEATURES]
    if unknown:
        raise UserInputError(f"{path}: unused_features names no feature: {', '.join(map(str, unknown))}")
    for key, default, allowed in (("labels", "oracle", LABELS), ("objective", "bce", OBJECTIVES)):
        one_of(key, raw.get(key, default), allowed, UserInputError, f"{path}: ")
    words = raw.get("centrality_words")
    if words is not None and (isinstance(words, bool) or not isinstance(words, int | float) or words <= 0):
        raise UserInputError(f"{path}: centrality_words must be a positive number of words or null, got {words!r}")
    slack = optional_number("floor_slack", raw.get("floor_slack"), SLACK, UserInputError, f"{path}: ", at_least=0)
    for key, default, allowed in (
        ("centrality_kind", "document", CENTRALITY_KINDS),
        ("fill", "skip", FILLS),
        ("smoothing", "none", SMOOTHING),
        ("aggregate", "mean", AGGREGATES),
    ):
        one_of(key, raw.get(key, default), allowed, UserInputError, f"{path}: ")
    raw["grid"] = {**GRID_DEFAULTS, **raw["grid"]} if isinstance(raw.get("grid"), dict) else {}
    absent = [k for k in GRID_KEYS if not raw["grid"].get(k)]
    if absent or not raw["domains"]:
        raise UserInputError(
            f"{path}: the grid needs values for {', '.join(absent)}" if absent else f"{path}: no domains"
        )
    for k in GRID_KEYS:  # every value a number (the floor may be null: off), before minutes of work
        values = raw["grid"][k]
        listed = isinstance(values, list | tuple)  # a tuple: GRID_DEFAULTS
        bad = [v for v in values if not _grid_value(k, v)] if listed else [values]
        if bad:
            kind = "numbers or null" if k == "floor" else "numbers"
            raise UserInputError(f"{path}: grid {k} must be a list of {kind}, got {bad[0]!r}")
    grid = {k: tuple(v) for k, v in raw["grid"].items()}
    return Recipe(
        raw["lm"],
        list(raw["domains"]),
        (raw["budget_min"], raw["budget_max"]),
        raw.get("selection", "held-out"),
        grid,
        raw.get("objective", "bce"),
        raw.get("labels", "oracle"),
        tuple(raw.get("unused_features", [])),
        words,
        raw.get("centrality_kind", "document"),
        raw.get("smoothing", "none"),
        raw.get("fill", "skip"),
        slack,
        raw.get("aggregate", "mean"),
    )


def _grid_value(key: str, v) -> bool:
    """Whether ``v`` is a valid value of the grid axis ``key``: a finite number (the floor may also be None: off)."""
    if v is None:
        return key == "floor"
    return finite_number(v)


def lm_key(path: str) -> str:
    """The LM cache's key of a model: a hash of its weights (a changed LM is never read from the cache)."""
    p = Path(path)
    return hashlib.sha1((p / "model.safetensors").read_bytes() if p.is_dir() else p.read_bytes()).hexdigest()[:10]


def doc_key(d: dict) -> str:
    """The LM cache's key of a document: its id, text and sentence spans (the LM's outputs are read per sentence),
    so a changed document, a re-ordered domain or a changed segmentation is never misread."""
    spans = ",".join(f"{s.start}:{s.end}" for s in d["sentences"])
    return hashlib.sha1(f"{d['id']}\0{d['text']}\0{spans}".encode()).hexdigest()[:16]


def prepare(domain: str, lm, cache: Path, key: str, recipe: Recipe, root: Path = DEFAULT_OUT) -> list[dict]:
    """Documents of a domain with sentences, LM outputs (cached per document), prose features and oracle labels."""
    docs = load_pairs(domain, root=root)
    path = cache / f"lm-{domain}-{key}.pt"
    stored = torch.load(path) if path.exists() else {}
    stored = stored if isinstance(stored, dict) else {}  # an older positional cache cannot be checked: rebuilt
    for d in docs:
        d["sentences"] = split_sentences(d["text"])
    keys = [doc_key(d) for d in docs]  # hashed once: a key covers a document's whole text and its sentence spans
    missing = sum(k not in stored for k in keys)
    reader = LMReader(lm)
    t0 = time.time()
    for i, (d, k) in enumerate(zip(docs, keys, strict=True)):
        d["budget"] = recipe.budget_of(d["summary"])
        if k not in stored:
            reader.reset()
            stored[k] = reader(d["sentences"])
            print(f"  LM {domain}: {i + 1}/{len(docs)} ({time.time() - t0:.0f} s)", end="\r", file=sys.stderr)
        d["hidden"], d["bits"] = stored[k]
        d["comments"] = comment_flags(d["text"], d["sentences"])
        rows = list(FeatureState(lm.config.d_model).read(d["sentences"], d["hidden"], d["bits"], d["comments"]))
        d["prose"] = [d["sentences"][j] for j, _, _ in rows]
        d["feats"] = torch.stack([f for _, f, _ in rows]) if rows else torch.zeros(0, len(FEATURES))
        d["bows"] = [b for _, _, b in rows]
        d["labels"] = oracle_labels([s.clean for s in d["prose"]], d["summary"], d["budget"])
        d["ref_tokens"] = rouge_tokens(d["summary"])
        d["tokens"] = [rouge_tokens(s.clean) for s in d["prose"]]
        d["graded"] = rouge_labels(d["tokens"], d["ref_tokens"])
    if missing:
        cache.mkdir(parents=True, exist_ok=True)
        torch.save({k: (d["hidden"], d["bits"]) for d, k in zip(docs, keys, strict=True)}, path)
        print(f"\n  LM {domain}: {missing} documents read in {time.time() - t0:.0f} s", file=sys.stderr)
    return docs


def load_data(recipe: Recipe, lm, cache: Path, key: str, root: Path = DEFAULT_OUT) -> dict[str, dict[str, list]]:
    """{domain: {split: prepared documents}} for every domain of the recipe."""
    data = {}
    for dom in recipe.domains:
        docs = prepare(dom, lm, cache, key, recipe, root)
        data[dom] = {s: [d for d in docs if d["split"] == s] for s in ("train", "val", "test")}
    return data


def ours(d: dict, summ: Summarizer, upto: int | None = None) -> list:
    """The streaming path's decision: each prose sentence offered to the bounded buffer in reading order."""
    buf = summ.buffer(d["budget"])
    n = len(d["prose"]) if upto is None else upto
    context = np.zeros(BOW_DIM)  # the running bag of words, as FeatureState has it when each sentence is offered
    if n:
        for s, score, bow in zip(d["prose"][:n], summ.scores(d["feats"][:n]), d["bows"][:n], strict=True):
            for b, v in bow.items():
                context[b] += v
            buf.offer(s, score, bow, context)
    return [c.sentence for c in buf.sentences()]


def fast_r2(d: dict, chosen: list) -> float:
    """ROUGE-2 F1 from cached tokens (selection only; the benchmark's tables use rouge-score itself)."""
    index = {s.index: k for k, s in enumerate(d["prose"])}
    cand = sum((_ngrams(d["tokens"][index[s.index]], 2) for s in chosen), _ngrams([], 2))
    ref = _ngrams(d["ref_tokens"], 2)
    overlap = sum((cand & ref).values())
    return 0.0 if not overlap else 2 * overlap / (sum(cand.values()) + sum(ref.values()))


def masked(d: dict, columns: list[int] | None) -> Tensor:
    """A document's features with ``columns`` zeroed (none: the features themselves)."""
    if not columns:
        return d["feats"]
    f = d["feats"].clone()
    f[:, columns] = 0.0
    return f


def train_heads(
    data: dict[str, dict],
    domains: list[str],
    l2s,
    columns: list[int] | None = None,
    objective: str = "bce",
    labels: str = "oracle",
):
    """Heads fit on the train splits of ``domains``, one per penalty in ``l2s``: (l2, head). Each domain weighs the
    same: its sentences' weights sum to one, so a domain of long documents (the manuals: about 500 prose sentences
    each, the READMEs about 40) does not outweigh the others. ``columns``: feature columns zeroed before fitting
    (the benchmark's ablation)."""
    train = [d for dom in domains for d in data[dom]["train"] if len(d["prose"])]
    rows = {dom: sum(len(d["prose"]) for d in data[dom]["train"]) for dom in domains}
    weights = [1.0 / rows[d["domain"]] for d in train]
    for l2 in l2s:
        yield (
            l2,
            fit_head(
                [masked(d, columns) for d in train], [d[LABEL_KEY[labels]] for d in train], l2, weights, objective
            ),
        )


def grid_scores(lm, data: dict, train_domains: list[str], val_domains: list[str], recipe: Recipe):
    """({setting: {domain: mean fast ROUGE-2 on its selection documents}}, {setting: Summarizer}) for heads
    trained on ``train_domains`` with the recipe's objective, labels and features; a setting is one point of the
    recipe's grid: (l2, lead_bonus, redundancy, centrality, mmr, floor). The selection documents of a domain: its val
    split, and its train split too under the rule ``"train+val"``."""
    table, heads = {}, {}
    grid = recipe.grid
    splits = ("train", "val") if recipe.selection == "train+val" else ("val",)
    for l2, head in train_heads(data, train_domains, grid["l2"], recipe.columns, recipe.objective, recipe.labels):
        for rest in itertools.product(*(grid[k] for k in GRID_KEYS[1:])):
            summ = Summarizer(lm, head, settings(recipe, rest))
            key = (l2, *rest)
            table[key] = {
                v: np.mean([fast_r2(d, ours(d, summ)) for s in splits for d in data[v][s]]) for v in val_domains
            }
            heads[key] = summ
    return table, heads


def settings(recipe: Recipe, rest: tuple) -> dict:
    """A summarizer's selection settings: one grid point without l2 (lead_bonus, redundancy, centrality, mmr, floor) and
    the recipe's ``centrality_words``, ``centrality_kind``, ``fill`` and ``floor_slack``."""
    fixed = {
        "centrality_words": recipe.centrality_words,
        "centrality_kind": recipe.centrality_kind,
        "fill": recipe.fill,
        "floor_slack": recipe.floor_slack,
    }
    return {**dict(zip(GRID_KEYS[1:], rest, strict=True)), **fixed}


def smooth(scores: dict[tuple, float], grid: dict[str, tuple] | None) -> dict[tuple, float]:
    """Each setting's score averaged with those of its grid neighbours: the settings at most one step away along
    every axis of ``grid`` (``GRID_KEYS``; diagonals included: a 3 x 3 block on a grid of two axes, fewer at an
    edge). The best smoothed score is a broad optimum, not one grid point ahead of its neighbours by a margin the
    selection documents cannot resolve. ``grid`` None: the scores as they are."""
    if grid is None:
        return scores
    axes = [tuple(grid[k]) for k in GRID_KEYS]
    place = {k: [axis.index(v) for axis, v in zip(axes, k, strict=True)] for k in scores}
    return {
        k: float(
            np.mean(
                [scores[j] for j in scores if max(abs(a - b) for a, b in zip(place[k], place[j], strict=True)) <= 1]
            )
        )
        for k in scores
    }


def select(table: dict, domains: list[str], grid: dict[str, tuple] | None = None, aggregate: str = "mean"):
    """The setting with the best score over ``domains``, smoothed over ``grid`` (``smooth``; None: not smoothed);
    ties: the better unsmoothed score, then the stronger penalty.

    A setting's score: ``aggregate`` ``"mean"``, the mean of its domains' val scores; ``"relative"``, the mean of
    each domain's val score divided by that domain's best over the table, so every domain weighs the same
    whatever its ROUGE scale (one-line references score three times long abstracts: under the plain mean a
    setting that suits them outweighs a larger relative loss elsewhere)."""
    one_of("aggregate", aggregate, AGGREGATES)
    best = {v: max(table[k][v] for k in table) or 1.0 for v in domains} if aggregate == "relative" else {}
    mean = {k: float(np.mean([table[k][v] / best.get(v, 1.0) for v in domains])) for k in table}
    score = smooth(mean, grid)
    return max(table, key=lambda k: (score[k], mean[k], k[0]))


def shipped_setting(rule: str, full_table: dict, lodo: dict[str, tuple], domains: list[str],
                    grid: dict[str, tuple] | None = None, aggregate: str = "mean"):  # fmt: skip
    """The shipped setting under the recipe's ``selection`` rule.

    ``"val"``: heads trained on every domain, the best mean over the domains' val splits (``select``): the rule
    the benchmark's leave-one-out rows measure (each of them is this rule run without the held-out domain).
    ``"train+val"``: the same over the domains' train and val documents (``grid_scores`` scores both).
    ``"held-out"`` (the older rule): the best mean over domains D of a head trained without D, scored on D's val.
    ``lodo[D][0]``: the grid table of heads trained without D (needed by ``"held-out"`` only). ``grid``: the
    recipe's grid when its scores are smoothed (``Recipe.selection_grid``); ``aggregate``: ``select``'s.
    """
    if rule in ("val", "train+val"):
        return select(full_table, domains, grid, aggregate)
    one_of("selection", rule, SELECTION, UserInputError, "recipe: ")
    held = {k: {dom: lodo[dom][0][k][dom] for dom in domains} for k in full_table}
    return select(held, domains, grid, aggregate)


def leave_one_out_settings(lodo: dict[str, tuple], recipe: Recipe) -> dict[str, tuple]:
    """{D: the setting the recipe's rule selects from ``leave_one_out``'s grid of heads trained without D, on the
    other domains' documents only}: what each leave-one-out row runs."""
    doms = recipe.domains
    return {d: select(lodo[d][0], [x for x in doms if x != d], recipe.selection_grid, recipe.aggregate) for d in doms}


def leave_one_out(lm, data: dict, recipe: Recipe) -> dict[str, tuple]:
    """{D: grid_scores of heads trained without D, scored on every domain's val split}."""
    doms = recipe.domains
    return {dom: grid_scores(lm, data, [x for x in doms if x != dom], doms, recipe) for dom in doms}


def choose(lm, data: dict, recipe: Recipe, lodo: dict[str, tuple] | None = None):
    """Fit the heads on every domain and pick the recipe's setting: (setting, its val table, {setting: Summarizer}).

    ``lodo``: ``leave_one_out``'s grids when the caller has them (the rule ``"held-out"`` needs them).
    """
    full_table, full_heads = grid_scores(lm, data, recipe.domains, recipe.domains, recipe)
    if lodo is None and recipe.selection == "held-out":
        lodo = leave_one_out(lm, data, recipe)
    setting = shipped_setting(
        recipe.selection, full_table, lodo or {}, recipe.domains, recipe.selection_grid, recipe.aggregate
    )
    return setting, full_table, full_heads


def save_summarizer(out: str | Path, recipe: Recipe, lm_path: str, setting: tuple, summ: Summarizer,
                    report: dict | None = None, overwrite: bool = False) -> dict:  # fmt: skip
    """Write ``summ`` (its LM and head) to ``out`` with the recipe's facts and ``report`` (e.g. scores); returns
    the facts written (``salience_training`` in salience.json)."""
    l2, *rest = setting
    chosen = settings(recipe, tuple(rest))
    training = {"selected": {"l2": l2, **chosen}, "selection": recipe.selection, "objective": recipe.objective,
                "labels": recipe.labels, "unused_features": list(recipe.unused), "smoothing": recipe.smoothing,
                "aggregate": recipe.aggregate,
                "head": HEAD, "lm": str(lm_path),
                "domains": recipe.domains, **(report or {})}  # fmt: skip
    Summarizer(load(lm_path), summ.head, chosen).save(
        out, training={"salience_training": training}, overwrite=overwrite
    )
    return training


def build_summarizer(recipe_path: str | Path, out_dir: str | Path, lm: str | None = None,
                     data_dir: str | Path = DEFAULT_OUT, cache: str | Path = "runs/summarize",
                     overwrite: bool = False) -> dict:  # fmt: skip
    """Build the summarizer of a recipe into ``out_dir`` (see the module docstring); returns the facts written
    (the selected setting, the rule, the domains, ``selection_rouge2``: the selected setting's mean ROUGE-2 x100 on
    each domain's selection documents: its val split, or its train and val splits).

    Refused before any work: a bad recipe, an ``out_dir`` that holds anything but a model directory, or a
    model directory without ``overwrite``; a missing data file of a domain or an LM that is not a byte model.
    """
    from strandline.models.persist.modeldir import check_model_dir_target

    recipe = read_recipe(recipe_path)
    check_model_dir_target(out_dir, overwrite)
    missing = [d for d in recipe.domains if not (Path(data_dir) / f"{d}.jsonl").is_file()]
    if missing:
        raise UserInputError(f"{Path(data_dir) / (missing[0] + '.jsonl')}: missing; run "
                             "`python -m strandline.data.fetch_summaries` first (or give --data)")  # fmt: skip
    lm_path = resolve(lm or recipe.lm)
    model: LinearTransformerLM = load(lm_path)
    if model.meta.get("tokenizer") != "bytes":
        raise UserInputError(f"{lm_path}: a {model.meta.get('tokenizer')!r} model; the summarizer needs a byte LM")
    data = load_data(recipe, model, Path(cache), lm_key(lm_path), Path(data_dir))
    setting, full_table, full_heads = choose(model, data, recipe)
    score = {dom: round(100 * float(full_table[setting][dom]), 3) for dom in recipe.domains}  # x100, as ROUGE tables
    return save_summarizer(
        out_dir, recipe, lm_path, setting, full_heads[setting], {"selection_rouge2": score}, overwrite
    )

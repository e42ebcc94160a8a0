"""Multi-domain benchmark of incremental extractive summarization, and the build of the shipped summarizer.

Domains (``python -m strandline.data.fetch_summaries`` builds them offline; see data/README.md): ACL papers -> abstracts,
CPython HOWTO / What's New pages -> their abstracts / highlights, CPython library pages -> the module synopsis,
PyPI READMEs -> the package summary. Each document's budget is its reference's length in words, clamped to
[25, 150], the same for every system; every system picks whole sentences from the same prose candidates
(``strandline.tasks.summarize.prose``).

Protocol: the salience head is trained on the train splits of all domains (each domain weighted equally);
it is a linear model fit to the optimum of a convex objective (``fit_head``: no seed, no epochs), and its L2
penalty, lead prior, redundancy threshold and centrality weight are selected on the domains' val splits (the
recipe's ``selection``: "val", the best mean val ROUGE-2; "held-out", the older rule: for each domain
D a head trained without D scored on D's val split). The leave-one-out row of D is the "val" rule run without D:
a head trained without D and selected on the other domains' val splits only, so D is seen neither in training
nor in selection. Test splits report ROUGE-1/2/Lsum F1 (rouge-score, Porter stemmer)
with bootstrap 95% intervals for Lead, TextRank, LexRank, the greedy oracle (upper bound) and Strandline. Then:
the running summary at 25/50/75/100% of each document, non-prose counts in chosen sentences, a 100k+-token
concatenated document, and peak RSS / time of ``strandline summarize`` against input size (fresh processes).

    python -m strandline.data.fetch_summaries
    python benchmarks/summarize.py --recipe configs/summarize/summarizer.json --save data/models/summarizer
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from rouge_score import rouge_scorer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.summarize_baselines import fill, lead, lexrank, textrank  # noqa: E402
from benchmarks.summarize_extra import (  # noqa: E402
    ablation,
    concatenated,
    held_out_dev,
    incremental,
    masked,
    nonprose_counts,
)
from benchmarks.summarize_memory import print_memory  # noqa: E402
from strandline.data.fetch_summaries import load_pairs  # noqa: E402
from strandline.data.segment import count_words, split_sentences  # noqa: E402
from strandline.errors import UserInputError  # noqa: E402
from strandline.models import load  # noqa: E402
from strandline.tasks.summarize import Summarizer, fit_head, load_summarizer  # noqa: E402
from strandline.tasks.summarize.features import BOW_DIM, FEATURES, FeatureState, LMReader  # noqa: E402
from strandline.tasks.summarize.oracle import _ngrams, greedy_oracle, oracle_labels, rouge_tokens  # noqa: E402
from strandline.tasks.summarize.prose import comment_flags  # noqa: E402

METRICS = ("rouge1", "rouge2", "rougeLsum")
RECIPE = Path(__file__).resolve().parents[1] / "configs" / "summarize" / "summarizer.json"
GRID: dict[str, tuple] = {}  # the settings tried (l2, lead_bonus, redundancy, centrality)
BUDGET = (25, 150)
SELECTION = ("val", "held-out")  # the recipe's rules for the shipped (all-domains) setting


def budget_of(summary: str) -> int:
    """A document's budget: its reference's length in words, clamped to the recipe's range."""
    return min(BUDGET[1], max(BUDGET[0], count_words(summary)))


def use_recipe(path: str | Path) -> dict:
    """Read the recipe (JSON): LM, domains, budget range and the selection grid."""
    global BUDGET
    recipe = json.loads(Path(path).read_text(encoding="utf-8"))
    GRID.clear()
    GRID.update({k: tuple(v) for k, v in recipe["grid"].items()})
    BUDGET = (recipe["budget_min"], recipe["budget_max"])
    if recipe.get("selection", "held-out") not in SELECTION:  # before minutes of grids, not after
        raise UserInputError(f"{path}: selection must be one of {', '.join(SELECTION)}, got {recipe['selection']!r}")
    return recipe


use_recipe(RECIPE)  # the shipped recipe's grid unless main() is given another


def doc_key(d: dict) -> str:
    """The LM cache's key of a document: its id and text, so a changed or re-ordered domain is never misread."""
    return hashlib.sha1(f"{d['id']}\0{d['text']}".encode()).hexdigest()[:16]


def prepare(domain: str, lm, cache: Path, key: str) -> list[dict]:
    """Documents of a domain with sentences, LM outputs (cached per document), prose features and oracle labels."""
    docs = load_pairs(domain)
    path = cache / f"lm-{domain}-{key}.pt"
    stored = torch.load(path) if path.exists() else {}
    stored = stored if isinstance(stored, dict) else {}  # an older positional cache cannot be checked: rebuilt
    missing = [d for d in docs if doc_key(d) not in stored]
    reader = LMReader(lm)
    t0 = time.time()
    for i, d in enumerate(docs):
        d["sentences"] = split_sentences(d["text"])
        d["budget"] = budget_of(d["summary"])
        if doc_key(d) not in stored:
            reader.reset()
            stored[doc_key(d)] = reader(d["sentences"])
            print(f"  LM {domain}: {i + 1}/{len(docs)} ({time.time() - t0:.0f} s)", end="\r", file=sys.stderr)
        d["hidden"], d["bits"] = stored[doc_key(d)]
        d["comments"] = comment_flags(d["text"], d["sentences"])
        rows = list(FeatureState(lm.config.d_model).read(d["sentences"], d["hidden"], d["bits"], d["comments"]))
        d["prose"] = [d["sentences"][j] for j, _, _ in rows]
        d["feats"] = torch.stack([f for _, f, _ in rows]) if rows else torch.zeros(0, len(FEATURES))
        d["bows"] = [b for _, _, b in rows]
        d["labels"] = oracle_labels([s.clean for s in d["prose"]], d["summary"], d["budget"])
        d["ref_tokens"] = rouge_tokens(d["summary"])
        d["tokens"] = [rouge_tokens(s.clean) for s in d["prose"]]
    if missing:
        cache.mkdir(parents=True, exist_ok=True)
        torch.save({doc_key(d): (d["hidden"], d["bits"]) for d in docs}, path)
        print(f"\n  LM {domain}: {len(missing)} documents read in {time.time() - t0:.0f} s", file=sys.stderr)
    return docs


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
    """ROUGE-2 F1 from cached tokens (selection only; the tables use rouge-score itself)."""
    index = {s.index: k for k, s in enumerate(d["prose"])}
    cand = sum((_ngrams(d["tokens"][index[s.index]], 2) for s in chosen), _ngrams([], 2))
    ref = _ngrams(d["ref_tokens"], 2)
    overlap = sum((cand & ref).values())
    return 0.0 if not overlap else 2 * overlap / (sum(cand.values()) + sum(ref.values()))


def scores(docs: list[dict], system, scorer) -> dict[str, np.ndarray]:
    """Per-document ROUGE F1 x100 of ``system(doc) -> list[Sentence]``."""
    out = {m: [] for m in METRICS}
    for d in docs:
        pred = "\n".join(s.clean for s in system(d))
        ref = "\n".join(s.clean for s in split_sentences(d["summary"]))
        for m, v in scorer.score(ref, pred).items():
            out[m].append(100 * v.fmeasure)
    return {m: np.array(v) for m, v in out.items()}


def bootstrap(values: np.ndarray, n: int = 1000, seed: int = 0) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), (n, len(values)))].mean(1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def train_heads(data: dict[str, dict], domains: list[str], columns: list[int] | None = None, l2s=None):
    """Heads fit on the train splits of ``domains`` (each domain weighted equally), one per penalty in ``l2s``
    (default: the grid's): (l2, head). ``columns``: feature columns zeroed before fitting (the ablation)."""
    train = [d for dom in domains for d in data[dom]["train"] if len(d["prose"])]
    weights = [1.0 / sum(1 for e in data[d["domain"]]["train"] if len(e["prose"])) for d in train]
    for l2 in l2s or GRID["l2"]:
        yield l2, fit_head([masked(d, columns) for d in train], [d["labels"] for d in train], l2, weights)


def grid_scores(lm, data: dict, train_domains: list[str], val_domains: list[str]) -> dict:
    """{setting: {domain: mean fast ROUGE-2 on its val split}} for heads trained on ``train_domains``."""
    table, heads = {}, {}
    for l2, head in train_heads(data, train_domains):
        for bonus, tau, cen in itertools.product(GRID["lead_bonus"], GRID["redundancy"], GRID["centrality"]):
            summ = Summarizer(lm, head, {"lead_bonus": bonus, "redundancy": tau, "centrality": cen})
            key = (l2, bonus, tau, cen)
            table[key] = {v: np.mean([fast_r2(d, ours(d, summ)) for d in data[v]["val"]]) for v in val_domains}
            heads[key] = summ
    return table, heads


def select(table: dict, domains: list[str]):
    """The setting with the best mean val score over ``domains`` (ties: the stronger penalty)."""
    return max(table, key=lambda k: (np.mean([table[k][v] for v in domains]), k[0]))


def shipped_setting(rule: str, full_table: dict, lodo: dict[str, tuple], domains: list[str]):
    """The shipped setting under the recipe's ``selection`` rule.

    ``"val"``: heads trained on every domain, the best mean over the domains' val splits (``select``): the rule
    the leave-one-out rows measure (each of them is this rule run without the held-out domain), so those rows
    estimate what ships. ``"held-out"`` (the older rule): the best mean over domains D of a head trained without D,
    scored on D's val; run without a domain (the nested row) it transferred worse (docs/summarizing.md).
    ``lodo[D][0]``: the grid table of heads trained without D.
    """
    if rule == "val":
        return select(full_table, domains)
    if rule != "held-out":
        raise UserInputError(f"recipe: selection must be one of {', '.join(SELECTION)}, got {rule!r}")
    return max(full_table, key=lambda k: (np.mean([lodo[dom][0][k][dom] for dom in domains]), k[0]))


def pair_tables(lm, data: dict, domains: list[str]) -> dict[frozenset, dict]:
    """For every pair {D, E} of domains, the grid of heads trained on the other domains, scored on D's and E's val.

    The inner folds of the leave-one-out row: trained without D and E, so E's score measures transfer to a domain
    the head never saw, and D (the outer held-out domain) is in neither the training nor the score used for it.
    """
    return {
        frozenset(pair): grid_scores(lm, data, [x for x in domains if x not in pair], list(pair))[0]
        for pair in itertools.combinations(domains, 2)
    }


def select_held_out(pairs: dict[frozenset, dict], held: str, domains: list[str]):
    """The leave-one-out setting for ``held``: the shipped selection's rule (best mean over domains E of a head
    trained without E, scored on E's val) run on the other domains alone, ``held`` left out of every fold."""
    others = [e for e in domains if e != held]
    table = pairs[frozenset((held, others[0]))]
    return max(table, key=lambda k: (np.mean([pairs[frozenset((held, e))][k][e] for e in others]), k[0]))


def print_table(title: str, rows: dict[str, dict[str, np.ndarray]]) -> None:
    print(f"\n{title}")
    print(f"{'system':<28} {'R-1':>6} {'R-2':>6} {'95% CI R-2':>14} {'R-Lsum':>7}")
    for name, r in rows.items():
        lo, hi = bootstrap(r["rouge2"])
        print(f"{name:<28} {r['rouge1'].mean():6.2f} {r['rouge2'].mean():6.2f} [{lo:5.2f}, {hi:5.2f}] "
              f"{r['rougeLsum'].mean():7.2f}")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--recipe", default=str(RECIPE), help="domains, budgets and the selection grid (JSON)")
    p.add_argument("--lm", default=None, help="byte-level LM: a model directory or .ckpt (default: the recipe's)")
    p.add_argument("--save", default=None, help="write the selected summarizer here (e.g. data/models/summarizer)")
    p.add_argument("--cache", default="runs/summarize", help="LM-output cache directory")
    p.add_argument("--memory-only", action="store_true", help="only the memory curve of the summarizer in --save")
    p.add_argument("--ablation", action="store_true", help="also the shipped setting without the LM features")
    p.add_argument(
        "--nested",
        action="store_true",
        help="also a leave-one-out row selected on inner folds without the held-out domain (6 more grids)",
    )
    p.add_argument("--memory-sizes", default="10,100,400,2000", help="input sizes in kB ('' to skip)")
    p.add_argument("--also", default=None, help="also score this summarizer directory (e.g. the shipped one)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)  # measured faster than 2 threads on the shared 2-core machine
    recipe = use_recipe(args.recipe)
    args.lm = args.lm or recipe["lm"]
    sizes = [int(s) for s in args.memory_sizes.split(",") if s]
    if args.memory_only:
        return print_memory(args.save, load_pairs("aclsum", "test"), sizes)
    lm = load(args.lm)
    key = hashlib.sha1(Path(args.lm, "model.safetensors").read_bytes() if Path(args.lm).is_dir()
                       else Path(args.lm).read_bytes()).hexdigest()[:10]  # fmt: skip
    data = {}
    domains = list(recipe["domains"])
    for dom in domains:
        docs = prepare(dom, lm, Path(args.cache), key)
        data[dom] = {s: [d for d in docs if d["split"] == s] for s in ("train", "val", "test")}
    t0 = time.time()
    lodo = {dom: grid_scores(lm, data, [x for x in domains if x != dom], domains) for dom in domains}
    pairs = pair_tables(lm, data, domains) if args.nested else None
    print(f"leave-one-domain-out grids: {time.time() - t0:.0f} s", file=sys.stderr)
    full_table, full_heads = grid_scores(lm, data, domains, domains)
    shipped_key = shipped_setting(recipe.get("selection", "held-out"), full_table, lodo, domains)
    shipped = full_heads[shipped_key]
    scorer = rouge_scorer.RougeScorer(list(METRICS), use_stemmer=True, split_summaries=False)
    results = {}
    loo_keys = {dom: select(lodo[dom][0], [x for x in domains if x != dom]) for dom in domains}
    loo = {dom: lodo[dom][1][loo_keys[dom]] for dom in domains}
    also = {f"Strandline ({Path(args.also).name})": load_summarizer(args.also)} if args.also else {}
    nested = {dom: lodo[dom][1][select_held_out(pairs, dom, domains)] for dom in domains} if pairs else None
    for dom in domains:
        held_out = loo[dom]
        test = data[dom]["test"]
        rows = {
            "Lead": scores(test, lambda d: lead(d["prose"], d["budget"]), scorer),
            "TextRank": scores(test, lambda d: textrank(d["prose"], d["budget"]), scorer),
            "LexRank": scores(test, lambda d: lexrank(d["prose"], d["budget"]), scorer),
            "Strandline (all domains)": scores(test, lambda d: ours(d, shipped), scorer),
            "Strandline (leave-one-out)": scores(test, lambda d, h=held_out: ours(d, h), scorer),
            **{name: scores(test, lambda d, h=h: ours(d, h), scorer) for name, h in also.items()},
            **({"Strandline (LOO, nested)": scores(test, lambda d, h=nested[dom]: ours(d, h), scorer)} if nested is not None else {}),
            "Oracle (upper bound)": scores(test, lambda d: fill(
                d["prose"], greedy_oracle([s.clean for s in d["prose"]], d["summary"], d["budget"]), d["budget"]),
                scorer),
        }  # fmt: skip
        results[dom] = rows
        print_table(f"{dom}: test {len(test)} documents, ROUGE F1 x100, bootstrap 95% CI", rows)
    print_mean(results, ("Strandline (all domains)", *also))  # what --save writes, and the leave-one-out rows
    held_out_dev(data, loo, domains, ours, fast_r2, nested)
    print_lm_bits(data, domains)
    print(f"shipped setting (l2, lead_bonus, redundancy, centrality): {shipped_key}")
    for dom in domains:
        print(f"  leave-one-out setting, {dom} held out: {loo_keys[dom]}")
    if args.save:
        l2, bonus, tau, cen = shipped_key
        chosen = {"lead_bonus": bonus, "redundancy": tau, "centrality": cen}
        training = {"selected": {"l2": l2, **chosen}, "selection": recipe.get("selection", "held-out"), "head": "fit_head (L-BFGS to the optimum, deterministic)",
                    "lm": str(args.lm), "domains": domains,
                    "test_rouge2": {dom: {n: round(float(r["rouge2"].mean()), 3) for n, r in rows.items()}
                                    for dom, rows in results.items()}}  # fmt: skip
        Summarizer(load(args.lm), shipped.head, chosen).save(
            args.save, training={"salience_training": training}, overwrite=True
        )
        print(f"saved the summarizer to {args.save}")
    if args.ablation:
        ablation(
            data,
            shipped,
            domains,
            ours,
            scorer,
            lambda cols: next(train_heads(data, domains, cols, shipped_key[:1]))[1],
        )

    incremental(data, shipped, domains, ours)
    nonprose_counts(data, shipped, domains, ours)
    concatenated(data, shipped, scorer, args.save)
    if args.save:
        print_memory(args.save, load_pairs("aclsum", "test"), sizes)


def print_lm_bits(data: dict, domains: list[str]) -> None:
    """The LM's surprisal on each domain's test split: bits per byte over all sentences, weighted by their bytes."""
    print("\nbyte LM on the test documents (never trained on): bits per byte of their sentences")
    for dom in domains:
        n = [
            torch.tensor([len(s.clean.encode()) for s in d["sentences"]], dtype=torch.float64)
            for d in data[dom]["test"]
        ]
        bits = sum(float((d["bits"].double() * w).sum()) for d, w in zip(data[dom]["test"], n, strict=True))
        print(f"  {dom:<16} {bits / sum(float(w.sum()) for w in n):.3f}")


def _domain_mean(per: list[np.ndarray]) -> tuple[float, float, float]:
    """The mean over domains of per-document values, with a bootstrap 95% CI over documents within domains."""
    rng = np.random.default_rng(0)
    boots = [np.mean([v[rng.integers(0, len(v), len(v))].mean() for v in per]) for _ in range(1000)]
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return float(np.mean([v.mean() for v in per])), float(lo), float(hi)


def print_mean(results: dict, systems: tuple[str, ...] = ()) -> None:
    """The mean over domains of each system's per-domain mean, with a bootstrap over documents within domains; the
    paired differences of the leave-one-out row and of ``systems`` against the baselines."""
    print("\nmean over domains (each domain weighted equally), ROUGE-2 with bootstrap 95% CI")
    for name in next(iter(results.values())):
        m, lo, hi = _domain_mean([results[dom][name]["rouge2"] for dom in results])
        print(f"{name:<28} {m:6.2f} [{lo:5.2f}, {hi:5.2f}]")
    for ours_name in ("Strandline (leave-one-out)", *systems):
        print(f"paired difference of {ours_name} minus each baseline (bootstrap over documents within domains)")
        for name in ("Lead", "TextRank", "LexRank"):
            m, lo, hi = _domain_mean(
                [results[dom][ours_name]["rouge2"] - results[dom][name]["rouge2"] for dom in results]
            )
            print(f"  - {name:<24} {m:+6.2f} [{lo:+5.2f}, {hi:+5.2f}]")


if __name__ == "__main__":
    main()

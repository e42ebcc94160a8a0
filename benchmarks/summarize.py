"""Multi-domain benchmark of incremental extractive summarization, around the build of the shipped summarizer.

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

Building the summarizer is ``strandline build-summarizer`` (``strandline.tasks.summarize.build``): this script
runs the same steps (``load_data``, ``choose``, ``save_summarizer``) and adds the test tables, which ``--save``
records beside the selection facts.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

import numpy as np
import torch
from rouge_score import rouge_scorer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.summarize_baselines import fill, lead, lexrank, textrank  # noqa: E402
from benchmarks.summarize_extra import ablation, concatenated, held_out_dev, incremental, nonprose_counts  # noqa: E402
from benchmarks.summarize_memory import print_memory  # noqa: E402
from strandline.data.fetch_summaries import load_pairs  # noqa: E402
from strandline.data.segment import split_sentences  # noqa: E402
from strandline.models import load  # noqa: E402
from strandline.tasks.summarize import load_summarizer  # noqa: E402
from strandline.tasks.summarize.build import (  # noqa: E402
    Recipe,
    choose,
    fast_r2,
    grid_scores,
    leave_one_out,
    lm_key,
    load_data,
    ours,
    read_recipe,
    save_summarizer,
    select,
    train_heads,
)
from strandline.tasks.summarize.oracle import greedy_oracle  # noqa: E402

METRICS = ("rouge1", "rouge2", "rougeLsum")
RECIPE = Path(__file__).resolve().parents[1] / "configs" / "summarize" / "summarizer.json"
recipe_now: Recipe = read_recipe(RECIPE)  # the shipped recipe unless main() is given another


def use_recipe(path: str | Path) -> Recipe:
    """Read the recipe (``strandline.tasks.summarize.build.read_recipe``) and make it the one this run uses."""
    global recipe_now
    recipe_now = read_recipe(path)
    return recipe_now


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


def pair_tables(lm, data: dict, domains: list[str]) -> dict[frozenset, dict]:
    """For every pair {D, E} of domains, the grid of heads trained on the other domains, scored on D's and E's val.

    The inner folds of the leave-one-out row: trained without D and E, so E's score measures transfer to a domain
    the head never saw, and D (the outer held-out domain) is in neither the training nor the score used for it.
    """
    return {
        frozenset(pair): grid_scores(lm, data, [x for x in domains if x not in pair], list(pair), recipe_now.grid)[0]
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
    args.lm = args.lm or recipe.lm
    sizes = [int(s) for s in args.memory_sizes.split(",") if s]
    if args.memory_only:
        return print_memory(args.save, load_pairs("aclsum", "test"), sizes)
    lm = load(args.lm)
    domains = recipe.domains
    data = load_data(recipe, lm, Path(args.cache), lm_key(args.lm))
    t0 = time.time()
    lodo = leave_one_out(lm, data, recipe)
    pairs = pair_tables(lm, data, domains) if args.nested else None
    print(f"leave-one-domain-out grids: {time.time() - t0:.0f} s", file=sys.stderr)
    shipped_key, _, full_heads = choose(lm, data, recipe, lodo)
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
    if args.save:  # the build's own save, with this run's test table beside the selection facts
        test = {dom: {n: round(float(r["rouge2"].mean()), 3) for n, r in rows.items()} for dom, rows in results.items()}
        save_summarizer(args.save, recipe, args.lm, shipped_key, shipped, {"test_rouge2": test}, overwrite=True)
        print(f"saved the summarizer to {args.save}")
    if args.ablation:
        ablation(
            data,
            shipped,
            domains,
            ours,
            scorer,
            lambda cols: next(train_heads(data, domains, shipped_key[:1], cols))[1],
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

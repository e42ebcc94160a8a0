"""Multi-domain benchmark of incremental extractive summarization, around the build of the shipped summarizer.

Domains (``python -m strandline.data.fetch_summaries`` builds them offline; see data/README.md): ACL papers -> abstracts,
CPython HOWTO / What's New pages -> their abstracts / highlights, CPython library pages -> the module synopsis,
PyPI READMEs -> the package summary, technical manuals -> their doc-base abstracts, R vignettes -> the package
description, and Debian packages' READMEs -> the package's description. A domain of the data that the recipe does not
train or select on (``--unseen``; by default every one it lacks: debian-readme for the shipped recipe) is scored by
the shipped head itself, which never saw it, in the rows where each other domain has its leave-one-out head. Each
document's budget is its reference's length in words, clamped to
[25, 150], the same for every system; every system picks whole sentences from the same prose candidates
(``strandline.tasks.summarize.prose``).

Protocol: the salience head is trained on the train splits of all domains (each domain weighted equally);
it is a linear model fit to the optimum of a convex objective (``fit_head``: no seed, no epochs), and its L2
penalty, lead prior, redundancy threshold, centrality weight and MMR are selected by the recipe's ``selection``:
"train+val", the best mean ROUGE-2 over the domains' train and val documents; "val", over their val splits only;
"held-out", the older rule: for each domain D a head trained without D scored on D's val split. The
leave-one-out row of D is the recipe's rule run without D: a head trained without D and selected on the other
domains' documents only, so D is seen neither in training nor in selection. Test splits report ROUGE-1/2/Lsum F1 (rouge-score, Porter stemmer)
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
import dataclasses
import itertools
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import torch
from rouge_score import rouge_scorer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.summarize_baselines import (  # noqa: E402
    both_fills,
    fill,
    lead_order,
    lexrank_order,
    ranked_fills,
    textrank_order,
)
from benchmarks.summarize_extra import (  # noqa: E402
    ablation,
    concatenated,
    held_out_dev,
    incremental,
    lsum_of,
    nonprose_counts,
    paired_dev,
    rouge,
)
from benchmarks.summarize_memory import per_mb, print_memory  # noqa: E402
from strandline.data.fetch_summaries import DEFAULT_OUT, DOMAINS, load_pairs  # noqa: E402
from strandline.errors import UserInputError  # noqa: E402
from strandline.models import load  # noqa: E402
from strandline.tasks.summarize import FILLS, load_summarizer  # noqa: E402
from strandline.tasks.summarize.build import (  # noqa: E402
    Recipe,
    choose,
    fast_r2,
    grid_scores,
    leave_one_out,
    leave_one_out_settings,
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
    """Per-document ROUGE F1 x100 of ``system(doc) -> list[Sentence]``, and ``"budget_use"``: the summary's words
    as a percentage of the document's budget (a summary may stop under it)."""
    out = {m: [] for m in (*METRICS, "budget_use")}
    for d in docs:
        chosen = system(d)
        for m, v in rouge(scorer, d["summary"], chosen).items():
            out[m].append(100 * v.fmeasure)
        out["budget_use"].append(100 * sum(s.n_words for s in chosen) / d["budget"])
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
        frozenset(pair): grid_scores(lm, data, [x for x in domains if x not in pair], list(pair), recipe_now)[0]
        for pair in itertools.combinations(domains, 2)
    }


def select_held_out(pairs: dict[frozenset, dict], held: str, domains: list[str], grid: dict | None = None,
                    aggregate: str = "mean"):  # fmt: skip
    """The leave-one-out setting for ``held``: the shipped selection's rule (best mean over domains E of a head
    trained without E, scored on E's val) run on the other domains alone, ``held`` left out of every fold."""
    others = [e for e in domains if e != held]
    table = pairs[frozenset((held, others[0]))]
    return select({k: {e: pairs[frozenset((held, e))][k][e] for e in others} for k in table}, others, grid, aggregate)


def print_table(title: str, rows: dict[str, dict[str, np.ndarray]]) -> None:
    print(f"\n{title}")
    print(f"{'system':<28} {'R-1':>6} {'R-2':>6} {'95% CI R-2':>14} {'R-Lsum':>7} {'budget used':>12}")
    for name, r in rows.items():
        lo, hi = bootstrap(r["rouge2"])
        print(f"{name:<28} {r['rouge1'].mean():6.2f} {r['rouge2'].mean():6.2f} [{lo:5.2f}, {hi:5.2f}] "
              f"{r['rougeLsum'].mean():7.2f} {r['budget_use'].mean():11.0f}%")  # fmt: skip


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
    p.add_argument(
        "--dev-only",
        action="store_true",
        help="only the selection tables: leave-one-out heads on each held-out domain's train+val (no test split read)",
    )
    p.add_argument(
        "--record",
        action="store_true",
        help="write the test, target, incremental and memory tables to benchmarks/results/ (with --memory-only: the "
        "memory table alone; then run benchmarks/results.py)",
    )
    p.add_argument(
        "--against",
        default=None,
        help="with --dev-only: also build a second recipe's leave-one-out heads (same LM and budgets; the first's "
        "domains, maybe more) and compare them per document with the first's, by ROUGE-2 and by ROUGE-Lsum (paired "
        "bootstrap intervals); on a domain only the second has, the first's head is the one trained on all of its own",
    )
    p.add_argument("--also", default=None, help="also score this summarizer directory (e.g. the shipped one)")
    p.add_argument(
        "--unseen",
        nargs="*",
        default=None,
        metavar="DOMAIN",
        help="domains of the data that the recipe does not train or select on, scored as held out by the shipped "
        "head itself, which never saw them (default: every domain of fetch_summaries the recipe lacks; the flag "
        "alone: none)",
    )
    args = p.parse_args(argv)
    if args.against and not args.dev_only:
        p.error("--against compares recipes on dev data: give it with --dev-only")
    torch.set_num_threads(1)  # measured faster than 2 threads on the shared 2-core machine
    try:  # a bad recipe file is one line, before minutes of work
        recipe = use_recipe(args.recipe)
        other = read_recipe(args.against) if args.against else None
    except UserInputError as e:
        p.error(str(e))
    unseen = [d for d in DOMAINS if d not in recipe.domains] if args.unseen is None else args.unseen
    if bad := [d for d in unseen if d not in DOMAINS or d in recipe.domains]:
        p.error(f"--unseen: {bad[0]!r} is not a domain the recipe lacks (the data's domains: {', '.join(DOMAINS)})")
    if other is not None and (
        (other.lm, other.budget) != (recipe.lm, recipe.budget) or not set(recipe.domains) <= set(other.domains)
    ):
        p.error("--against: the two recipes must share the LM and the budgets, and the second must have every domain of "
                "the first (the same documents; it may add domains)")  # fmt: skip
    args.lm = args.lm or recipe.lm
    sizes = [int(s) for s in args.memory_sizes.split(",") if s]
    if args.memory_only:
        memory = print_memory(args.save, load_pairs("aclsum", "test"), sizes)
        if args.record and memory:  # the curve alone, e.g. after a speed change that leaves the summaries as they are
            record_memory(
                "python benchmarks/summarize.py " + shlex.join(sys.argv[1:] if argv is None else argv), memory
            )
        return memory
    lm = load(args.lm)
    domains = [*recipe.domains, *unseen]  # the tables' domains: the recipe's, then those it never trains on
    read = list(dict.fromkeys([*domains, *(other.domains if other else [])]))  # --against: its domains may be more
    if missing := [d for d in read if not (DEFAULT_OUT / f"{d}.jsonl").exists()]:
        hint = " (or --unseen alone: leave out the domains the recipe lacks)" if set(missing) <= set(unseen) else ""
        p.error(
            f"{DEFAULT_OUT / missing[0]}.jsonl is missing: run `python -m strandline.data.fetch_summaries` first{hint}"
        )
    data = load_data(dataclasses.replace(recipe, domains=read), lm, Path(args.cache), lm_key(args.lm))
    t0 = time.time()
    lodo = leave_one_out(lm, data, recipe)
    pairs = pair_tables(lm, data, recipe.domains) if args.nested else None
    print(f"leave-one-domain-out grids: {time.time() - t0:.0f} s", file=sys.stderr)
    shipped_key, full_table, full_heads = choose(lm, data, recipe, lodo)
    shipped = full_heads[shipped_key]
    loo_keys = leave_one_out_settings(lodo, recipe)
    # a domain the recipe never trains on is held out from the shipped head itself
    loo = {dom: lodo[dom][1][loo_keys[dom]] if dom in loo_keys else shipped for dom in domains}
    if args.dev_only:
        held_out_dev(data, loo, domains, ours, fast_r2)
        print(f"shipped setting {shipped_key}: ROUGE-2 on {recipe.selection} " + " ".join(
            f"{dom} {100 * full_table[shipped_key][dom]:.2f}" for dom in recipe.domains))  # fmt: skip
        if other is not None:
            lodo_b = leave_one_out(lm, data, other)
            keys_b = leave_one_out_settings(lodo_b, other)
            # a domain the first recipe lacks is held out from its head as it is (trained on all of its domains)
            heads_a = {d: lodo[d][1][loo_keys[d]] if d in loo_keys else shipped for d in other.domains}
            paired_dev(data, heads_a, {d: lodo_b[d][1][k] for d, k in keys_b.items()}, other.domains, ours, fast_r2,
                       (Path(args.recipe).name, Path(args.against).name),
                       lsum=lsum_of(rouge_scorer.RougeScorer(["rougeLsum"], use_stemmer=True, split_summaries=False)))  # fmt: skip
        return
    scorer = rouge_scorer.RougeScorer(list(METRICS), use_stemmer=True, split_summaries=False)
    results = {}
    also = {f"Strandline ({Path(args.also).name})": load_summarizer(args.also)} if args.also else {}
    nested = (
        {
            dom: lodo[dom][1][select_held_out(pairs, dom, recipe.domains, recipe.selection_grid, recipe.aggregate)]
            if dom in recipe.domains
            else shipped
            for dom in domains
        }
        if pairs
        else None
    )
    baselines = {"Lead": lead_order, "TextRank": textrank_order, "LexRank": lexrank_order}
    fills = {}  # {domain: {baseline: the fill rule of its stronger row}}
    budgets = {}  # {domain: the mean budget of its test documents, words}
    for dom in domains:
        held_out = loo[dom]
        test = data[dom]["test"]
        fills[dom], base_rows = {}, {}
        for name, rank in baselines.items():  # each baseline: the stronger of its two fills on this domain
            chosen = {r: {id(d): c for d, c in zip(test, cs, strict=True)} for r, cs in both_fills(test, rank).items()}
            both = {r: scores(test, lambda d, c=c: c[id(d)], scorer) for r, c in chosen.items()}
            strong, other = ranked_fills({r: both[r]["rouge2"].mean() for r in FILLS})
            fills[dom][name] = strong
            base_rows |= {name: both[strong], f"{name}, other fill": both[other]}
        rows = {
            **base_rows,
            "Strandline (all domains)": scores(test, lambda d: ours(d, shipped), scorer),
            "Strandline (leave-one-out)": scores(test, lambda d, h=held_out: ours(d, h), scorer),
            **{name: scores(test, lambda d, h=h: ours(d, h), scorer) for name, h in also.items()},
            **({"Strandline (LOO, nested)": scores(test, lambda d, h=nested[dom]: ours(d, h), scorer)} if nested is not None else {}),
            "Oracle (upper bound)": scores(test, lambda d: fill(
                d["prose"], greedy_oracle([s.clean for s in d["prose"]], d["summary"], d["budget"]), d["budget"]),
                scorer),
        }  # fmt: skip
        results[dom] = rows
        budgets[dom] = float(np.mean([d["budget"] for d in test]))
        print_table(f"{dom}: test {len(test)} documents, ROUGE F1 x100, bootstrap 95% CI; each baseline the stronger "
                    "of its two fills: " + ", ".join(f"{b} {r}" for b, r in fills[dom].items()), rows)  # fmt: skip
    print_mean(results, ("Strandline (all domains)", *also))  # what --save writes, and the leave-one-out rows
    targets = print_targets(results, ("Strandline (leave-one-out)", "Strandline (all domains)"))
    held_out_dev(data, loo, domains, ours, fast_r2, nested)
    print_lm_bits(data, domains)
    print(f"shipped setting (l2, lead_bonus, redundancy, centrality, mmr, floor): {shipped_key}")
    for dom in domains:
        print(f"  leave-one-out setting, {dom} held out: {loo_keys.get(dom, 'the shipped head (never trained on it)')}")
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
            lambda cols: next(
                train_heads(data, recipe.domains, shipped_key[:1], cols, recipe.objective, recipe.labels)
            )[1],
            recipe.unused,
        )

    steps = incremental(data, shipped, domains, ours)
    nonprose_counts(data, shipped, domains, ours)
    concatenated(data, shipped, scorer, args.save)
    memory = print_memory(args.save, load_pairs("aclsum", "test"), sizes) if args.save else None
    if args.record:
        write_records(argv, results, targets, steps, memory, loo_keys, shipped_key, fills, budgets)


def paired_lines(results: dict) -> list[str]:
    """The paired differences against Lead, TextRank and LexRank (mean over domains, bootstrap within domains) of
    the leave-one-out and shipped rows, one line each."""
    out = []
    for name, label in (
        ("Strandline (leave-one-out)", "leave-one-out heads"),
        ("Strandline (all domains)", "shipped summarizer"),
    ):
        cells = []
        for base in ("Lead", "TextRank", "LexRank"):
            m, lo, hi = _domain_mean([results[d][name]["rouge2"] - results[d][base]["rouge2"] for d in results])
            cells.append(f"{m:+.2f} [{lo:+.2f}, {hi:+.2f}] over {base}")
        out.append(f"Paired differences of the {label}, mean over domains: " + ", ".join(cells) + ".")
    return out


def write_records(argv, results: dict, targets: dict, steps: dict, memory, loo_keys: dict, shipped_key,
                  fills: dict[str, dict[str, str]], budgets: dict[str, float]) -> None:  # fmt: skip
    """The run's tables as results records (``benchmarks/results.py`` renders docs/results.md from them)."""
    from benchmarks.results import record

    command = "python -m strandline.data.fetch_summaries\npython benchmarks/summarize.py " + shlex.join(
        sys.argv[1:] if argv is None else argv
    )  # quoted: an empty --memory-sizes '' stays a value
    machine = MACHINE

    def ci(r: dict) -> str:
        lo, hi = bootstrap(r["rouge2"])
        return f"{r['rouge2'].mean():.2f} [{lo:.2f}, {hi:.2f}]"

    names = ("Lead", "TextRank", "LexRank", "Strandline (all domains)", "Strandline (leave-one-out)")
    rows = [[f"{dom} ({len(r['Lead']['rouge2'])})", *(f"{ci(r[n])} {fills[dom][n]}" for n in names[:3]),
             *(ci(r[n]) for n in names[3:]),
             f"{r['Strandline (leave-one-out)']['rougeLsum'].mean():.2f} / {strongest_lead_lsum(r):.2f}",
             f"{r['Oracle (upper bound)']['rouge2'].mean():.2f}"] for dom, r in results.items()]  # fmt: skip
    record("summarizer-rouge", "Summarizer: ROUGE-2 against Lead, TextRank and LexRank", command,
           ["domain (test docs)", *names[:3], "`data/models/summarizer`", "leave-one-domain-out",
            "R-Lsum: leave-one-out / Lead", "Oracle"], rows, machine=machine + " ROUGE F1 x 100 on each domain's test "
           "split, bootstrap 95% intervals over documents.",
           caveats=[*paired_lines(results), f"shipped setting (l2, lead_bonus, redundancy, centrality, mmr, floor): "
                    f"{shipped_key}; leave-one-out settings: " + "; ".join(f"{d} {k}" for d, k in loo_keys.items()),
                    "Each baseline is the stronger (ROUGE-2) per domain of its two fills, named in its cell: skip (the "
                    "next sentence that fits the words left comes in) or stop (the summary ends at the first that does "
                    f"not fit; for Lead, a prefix of the document). The summarizer's fill: {recipe_now.fill}.",
                    "R-Lsum: Lead's is the better of its two fills on that metric.",
                    "Oracle: the greedy ROUGE oracle under the same budget (the headroom of extraction)."])  # fmt: skip
    record("summarizer-targets", "Summarizer: targets per domain (leave-one-domain-out heads)", command,
           ["domain (test docs)", f"R-2 / Lead (>= {TARGET_RATIO})", "R-Lsum / Lead (>)", "R-2 - TextRank (> 0)",
            "R-2 - LexRank (> 0)", "R-2 - Lead, paired 95% CI (above 0)", "met"],
           targets["Strandline (leave-one-out)"], machine=machine,
           caveats=["Each row's head never saw its domain: trained on the other domains' train splits and selected on "
                    f"their documents ({recipe_now.selection}).", "(missed): the target this cell does not meet."])  # fmt: skip
    use = ("Lead", "Strandline (all domains)", "Strandline (leave-one-out)", "Oracle (upper bound)")
    record("summarizer-length", "Summarizer: words used of the budget", command,
           ["domain (test docs)", "budget (mean words)", "Lead", "`data/models/summarizer`", "leave-one-domain-out",
            "Oracle"],
           [[f"{dom} ({len(r['Lead']['rouge2'])})", f"{budgets[dom]:.0f}",
             *(f"{r[n]['budget_use'].mean():.0f}%" for n in use)] for dom, r in results.items()],
           machine=machine, caveats=[
               "The mean over each domain's test documents of the summary's words as a share of its budget (the "
               "reference's length clamped to 25..150 words). The budget is a maximum: the summarizer's floor ends a "
               "summary when no sentence it rates at least the floor fits; Lead is at its stronger fill (ROUGE-2), "
               "a prefix of the document on four domains, which also stops under the budget."])  # fmt: skip
    if steps:
        record("summarizer-incremental", "Summarizer: running summaries while a document streams", command,
               ["domain", "R-2 at 25% ours / Lead", "at 50%", "at 75%", "at 100%", "survival t -> t+1",
                "new sentences per step", "final summary there at 50%"], steps, machine=machine,
               caveats=["ROUGE-2 of the summary of the first 25/50/75/100% of each test document's sentences against "
                        "the whole document's reference, Lead at its stronger fill on each prefix; survival: the share of the running summary at one 5% step "
                        "still in it at the next."])  # fmt: skip
    if memory:
        record_memory(command, memory)


def record_memory(command: str, memory: list[tuple[int, float, float]]) -> None:
    """The memory curve's results record (``print_memory``'s rows)."""
    from benchmarks.results import record

    record("summarizer-memory", "Summarizer: peak memory and time against document size", command,
           ["input", "peak RSS", "wall time", "seconds per MB beyond the smallest input"],
           [[f"{kb:,} kB", f"{rss:.1f} MiB", f"{secs:.1f} s", per_mb(memory, kb, secs)] for kb, rss, secs in memory],
           machine=MACHINE + " A fresh `strandline summarize DOC -o OUT.jsonl` process per size; documents made by "
           "repeating the ACLSum test papers.",
           caveats=[f"Peak at {memory[-1][0]:,} kB / peak at {memory[0][0]:,} kB = {memory[-1][1] / memory[0][1]:.3f}."
                    " Most of the memory is torch itself."])  # fmt: skip


MACHINE = "The project's build VM: 2 CPU cores shared with other jobs; one thread."
TARGET_RATIO = 1.15  # ROUGE-2 at least this multiple of Lead's


def strongest_lead_lsum(rows: dict) -> float:
    """Lead's ROUGE-Lsum for the targets: the better of its two fills on that metric (the ROUGE-2 rows may
    name the other: a prefix can win ROUGE-2 and lose ROUGE-Lsum on the same documents)."""
    return float(max(rows[n]["rougeLsum"].mean() for n in ("Lead", "Lead, other fill") if n in rows))


def print_targets(results: dict, systems: tuple[str, ...]) -> dict[str, list[list[str]]]:
    """Per domain, the quality targets of a system against the baselines on the test split: ROUGE-2 at least
    ``TARGET_RATIO`` x Lead, ROUGE-Lsum above Lead, ROUGE-2 above TextRank and LexRank, and a paired bootstrap 95%
    interval of (system - Lead) ROUGE-2 over the documents that excludes 0 (above it). Returns {system: rows}."""
    tables: dict[str, list[list[str]]] = {}
    for name in systems:
        tables[name] = []
        print(f"\ntargets of {name} on each test split (R-2 >= {TARGET_RATIO} x Lead, R-Lsum > Lead, R-2 > TextRank "
              "and LexRank, paired 95% CI of R-2 minus Lead above 0)")  # fmt: skip
        print(f"{'domain':<16} {'docs':>5} {'R-2/Lead':>9} {'R-Lsum - Lead':>14} {'- TextRank':>11} {'- LexRank':>10} "
              f"{'R-2 - Lead [95% CI]':>24} {'met':>5}")  # fmt: skip
        for dom, rows in results.items():
            ours, ld = rows[name], rows["Lead"]
            ratio = ours["rouge2"].mean() / max(ld["rouge2"].mean(), 1e-9)
            lead_lsum = strongest_lead_lsum(rows)
            lsum = ours["rougeLsum"].mean() - lead_lsum
            tr = ours["rouge2"].mean() - rows["TextRank"]["rouge2"].mean()
            lr = ours["rouge2"].mean() - rows["LexRank"]["rouge2"].mean()
            diff = ours["rouge2"] - ld["rouge2"]
            lo, hi = bootstrap(diff)
            met = [ratio >= TARGET_RATIO, lsum > 0, tr > 0, lr > 0, lo > 0]
            print(f"{dom:<16} {len(diff):>5} {ratio:9.2f} {lsum:+14.2f} {tr:+11.2f} {lr:+10.2f} "
                  f"{diff.mean():+8.2f} [{lo:+5.2f}, {hi:+5.2f}] {sum(met):>3}/5")  # fmt: skip
            tables[name].append([f"{dom} ({len(diff)})", f"{ours['rouge2'].mean():.2f} / {ld['rouge2'].mean():.2f} = "
                                 f"{ratio:.2f}" + ("" if met[0] else " (missed)"),
                                 f"{ours['rougeLsum'].mean():.2f} / {lead_lsum:.2f}"
                                 + ("" if met[1] else " (missed)"), f"{tr:+.2f}" + ("" if met[2] else " (missed)"),
                                 f"{lr:+.2f}" + ("" if met[3] else " (missed)"),
                                 f"{diff.mean():+.2f} [{lo:+.2f}, {hi:+.2f}]" + ("" if met[4] else " (missed)"),
                                 f"{sum(met)}/5"])  # fmt: skip
    return tables


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

"""The benchmark's other tables: incremental quality, non-prose in chosen sentences, a 100k+-token document."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from rouge_score import rouge_scorer

from benchmarks.summarize_baselines import lead, stronger_fill, stronger_lead, textrank, textrank_order
from strandline.data.segment import split_sentences
from strandline.tasks.summarize import FILLS
from strandline.tasks.summarize.build import masked
from strandline.tasks.summarize.prose import REASONS, comment_flags, non_prose

MARKERS = ("`", "{", "}", "\\", "::", ">>>", "<", "|", "==", "http", "**", "__")  # an independent, cruder check


def rouge(scorer, reference: str, chosen: list) -> dict:
    """rouge-score's scores of the chosen sentences against the reference text, one sentence a line on both sides
    (so ROUGE-Lsum sees the sentences): the one way every table of the benchmark scores a summary."""
    ref = "\n".join(s.clean for s in split_sentences(reference))
    return scorer.score(ref, "\n".join(s.clean for s in chosen))


def _r2(scorer, ref: str, chosen: list) -> float:
    return 100 * rouge(scorer, ref, chosen)["rouge2"].fmeasure


def paired_dev(data: dict, heads_a: dict, heads_b: dict, domains: list[str], ours, r2, names=("A", "B"),
               n: int = 2000, seed: int = 0, lsum=None) -> dict:  # fmt: skip
    """Two recipes' leave-one-out heads on each held-out domain's train+val documents, paired per document.

    Per domain: Lead (the stronger of its two fill rules on these documents: ``stronger_lead``), A and B (ROUGE-2 x100, ``r2``) and B - A with its bootstrap 95% interval over documents;
    then the mean over domains of each system's ratio to Lead, and the interval of B's minus A's, the documents
    resampled within each domain (each domain keeps its size, so python-guides' few documents do not count for
    more). With ``lsum`` (a second ``score(doc, chosen)``, ROUGE-Lsum x100: ``lsum_of``), the same summaries again
    under it, each against Lead at its stronger fill on that metric, and the mean over domains of each system's
    margin over Lead (the targets ask ROUGE-Lsum above Lead, not a ratio). Dev data only: how a recipe change is
    judged before any test split is read. Returns the numbers (``"lsum"``: the second table's, when given).
    """
    chosen = {
        dom: [(ours(d, heads_a[dom]), ours(d, heads_b[dom])) for d in data[dom]["train"] + data[dom]["val"]]
        for dom in domains
    }  # each summary made once, scored by each metric
    out = _paired_table(data, chosen, domains, r2, "ROUGE-2", names, n, seed, ratio=True)
    if lsum is not None:
        out["lsum"] = _paired_table(data, chosen, domains, lsum, "ROUGE-Lsum", names, n, seed, ratio=False)
    return out


def _paired_table(data: dict, chosen: dict, domains: list[str], score, metric: str, names, n: int, seed: int,
                  ratio: bool) -> dict:  # fmt: skip
    """One metric's table of ``paired_dev``: per domain and, over domains, each system's mean ratio to Lead
    (``ratio``) or margin over it, with the bootstrap interval of B's minus A's."""
    rng = np.random.default_rng(seed)
    print(f"\npaired on the held-out domain's train+val documents (never the test split), {metric}: "
          f"A = {names[0]}, B = {names[1]}")  # fmt: skip
    print(f"{'domain':<16} {'docs':>5} {'Lead':>7} {'A':>7} {'B':>7} {'B - A':>7} {'95% CI':>17}")
    per, rel_a, rel_b = {}, [], []
    for dom in domains:
        docs = data[dom]["train"] + data[dom]["val"]
        rule, lead_scores = stronger_lead(docs, score)
        cells = np.array([
            [100 * v for v in lead_scores],
            [100 * score(d, a) for d, (a, _) in zip(docs, chosen[dom], strict=True)],
            [100 * score(d, b) for d, (_, b) in zip(docs, chosen[dom], strict=True)]])  # fmt: skip
        idx = rng.integers(0, len(docs), (n, len(docs)))
        diff = cells[2] - cells[1]
        lo, hi = np.percentile(diff[idx].mean(1), [2.5, 97.5])
        boot = cells[:, idx].mean(2)  # (system, resample)
        rel_a.append(boot[1] / boot[0] if ratio else boot[1] - boot[0])
        rel_b.append(boot[2] / boot[0] if ratio else boot[2] - boot[0])
        per[dom] = {"lead": cells[0].mean(), "a": cells[1].mean(), "b": cells[2].mean(), "ci": (lo, hi)}
        print(f"{dom:<16} {len(docs):>5} {cells[0].mean():7.2f} {cells[1].mean():7.2f} {cells[2].mean():7.2f} "
              f"{diff.mean():+7.2f} [{lo:+6.2f}, {hi:+6.2f}] Lead: {rule}")  # fmt: skip
    of = (lambda p, k: p[k] / p["lead"]) if ratio else (lambda p, k: p[k] - p["lead"])
    ra = float(np.mean([of(p, "a") for p in per.values()]))
    rb = float(np.mean([of(p, "b") for p in per.values()]))
    d = np.mean(rel_b, 0) - np.mean(rel_a, 0)
    lo, hi = np.percentile(d, [2.5, 97.5])
    what = "ratio to Lead" if ratio else "margin over Lead"
    print(f"mean {what} over {len(domains)} domains: A {ra:.3f}, B {rb:.3f}, B - A {rb - ra:+.3f} "
          f"[{lo:+.3f}, {hi:+.3f}]")  # fmt: skip
    return {"domains": per, "ratio" if ratio else "margin": (ra, rb), "ci": (float(lo), float(hi))}


def lsum_of(scorer):
    """``score(doc, chosen)``: ROUGE-Lsum F1 (in [0, 1]) of the chosen sentences against the document's reference,
    one sentence a line on both sides, as the benchmark's test tables score it."""

    def score(d: dict, chosen: list) -> float:
        return rouge(scorer, d["summary"], chosen)["rougeLsum"].fmeasure

    return score


def incremental(data: dict, summ, domains: list[str], ours) -> list[list[str]]:
    """ROUGE-2 of the running summary after 25/50/75/100% of each test document's sentences, against the final
    reference, next to Lead over the same prefix at its stronger fill on that prefix (``stronger_fill``: the
    baseline is never weakened by a rule chosen elsewhere); then ``stability``. Returns one
    row per domain: the four cells and the three stability cells."""
    scorer = rouge_scorer.RougeScorer(["rouge2"], use_stemmer=True)
    print("\nincremental: ROUGE-2 of the running summary after a fraction of the document (vs the final reference)")
    print(f"{'domain':<16} " + " ".join(f"{f'{p}% ours/Lead':>16}" for p in (25, 50, 75, 100)))
    rows = []
    for dom in domains:
        cells, pairs, rules = [], [], []
        for frac in (0.25, 0.5, 0.75, 1.0):
            o, prefixes = [], []
            for d in data[dom]["test"]:
                cut = math.ceil(frac * len(d["sentences"]))
                upto = sum(s.index < cut for s in d["prose"])
                o.append(_r2(scorer, d["summary"], ours(d, summ, upto)))
                prefixes.append({**d, "prose": d["prose"][:upto]})
            rule, ld = stronger_fill(prefixes, lambda d, chosen: _r2(scorer, d["summary"], chosen))
            rules.append(rule)
            cells.append(f"{np.mean(o):7.2f}/{np.mean(ld):<7.2f}")
            pairs.append(f"{np.mean(o):.2f} / {np.mean(ld):.2f}")
        print(f"{dom:<16} " + " ".join(f"{c:>16}" for c in cells) + f"  Lead: {','.join(rules)}")
        rows.append([dom, *pairs])
    for row, st in zip(rows, stability(data, summ, domains, ours), strict=True):
        row += st
    return rows


def stability(data: dict, summ, domains: list[str], ours, steps: int = 20) -> list[list[str]]:
    """How the running summary changes as a document streams: read in ``steps`` equal steps of its sentences, the
    share of the summary at step t still in it at step t+1 (survival), the sentences that come in per step, and
    the share of the final summary already there at 25/50/75% (mean over test documents). Returns per domain
    [survival, new per step, final at 50%]."""
    out = []
    print(f"\nstability of the running summary ({steps} steps of 5% of each test document)")
    head = " ".join(f"{'final@' + str(p) + '%':>10}" for p in (25, 50, 75))
    print(f"{'domain':<16} {'survival t->t+1':>16} {'new per step':>13} {head}")
    for dom in domains:
        survival, new, final_at = [], [], {25: [], 50: [], 75: []}
        for d in data[dom]["test"]:
            runs = []
            for k in range(1, steps + 1):
                cut = math.ceil(k / steps * len(d["sentences"]))
                runs.append({s.index for s in ours(d, summ, sum(s.index < cut for s in d["prose"]))})
            for a, b in zip(runs, runs[1:], strict=False):
                if a:
                    survival.append(len(a & b) / len(a))
                    new.append(len(b - a))
            for p in final_at:
                if runs[-1]:
                    final_at[p].append(len(runs[p * steps // 100 - 1] & runs[-1]) / len(runs[-1]))
        cells = " ".join(f"{np.mean(v) if v else float('nan'):10.2f}" for v in final_at.values())
        print(f"{dom:<16} {np.mean(survival):16.2f} {np.mean(new):13.2f} {cells}")
        out.append([f"{np.mean(survival):.2f}", f"{np.mean(new):.2f}", f"{np.mean(final_at[50]):.2f}"])
    return out


def nonprose_counts(data: dict, summ, domains: list[str], ours) -> None:
    """Chosen sentences that the filter calls non-prose, or that carry code/markup characters (``MARKERS``), for
    Strandline, Lead over prose candidates, and Lead over all sentences (no filter; what it removes)."""
    systems = {
        "Strandline": lambda d: ours(d, summ),
        "Lead": lambda d: lead(d["prose"], d["budget"], summ.fill),
        "Lead, no filter": lambda d: lead(d["sentences"], d["budget"], summ.fill),
    }
    print("\nchosen sentences on the test sets: non-prose by the filter's reason, inside a reST comment, and with "
          "code/markup characters")  # fmt: skip
    print(f"{'system':<16} {'chosen':>7} " + " ".join(f"{r:>9}" for r in (*REASONS, "comment")) + f" {'markers':>8}")
    for name, fn in systems.items():
        picks = [(d, s) for dom in domains for d in data[dom]["test"] for s in fn(d)]
        chosen = [s for _, s in picks]
        reasons = [non_prose(s.text) for s in chosen] + ["comment"] * sum(d["comments"][s.index] for d, s in picks)
        marked = sum(any(m in s.text for m in MARKERS) for s in chosen)
        counts = " ".join(f"{reasons.count(r):>9}" for r in (*REASONS, "comment"))
        print(f"{name:<16} {len(chosen):>7} {counts} {marked:>8}")
        if name == "Strandline":
            shown = [s.clean[:150] for s in chosen if any(m in s.text for m in MARKERS)]
            print("".join(f"    marked: {t}\n" for t in shown), end="")


def concatenated(data: dict, summ, scorer, model_dir: str | None, min_chars: int = 400_000, budget: int = 150) -> None:
    """One 100k+-token document (test documents of every domain, round robin, each summary after its document in
    the reference) summarized in one streaming pass; then its peak RSS and time through the CLI."""
    docs, order = [], [data[dom]["test"] for dom in data]
    k = 0
    while sum(len(d["text"]) for d in docs) < min_chars and any(k < len(o) for o in order):
        docs += [o[k] for o in order if k < len(o)]
        k += 1
    text = "\n\n".join(d["text"] for d in docs)
    ref = " ".join(d["summary"] for d in docs)
    final = summ.summarize(text, budget)
    sents = split_sentences(text)
    prose = [s for s, c in zip(sents, comment_flags(text, sents), strict=True) if not c and non_prose(s.text) is None]
    print(f"\nconcatenated document: {len(docs)} test documents, {len(text.encode()):,} bytes (byte tokens), "
          f"budget {budget} words; ROUGE-2 vs the concatenated references")  # fmt: skip
    for name, chosen in (("Strandline", [c.sentence for c in final.summary]),
                         *((f"Lead, {rule}", lead(prose, budget, rule)) for rule in FILLS),
                         ("TextRank", textrank(prose, budget, summ.fill))):  # fmt: skip
        print(f"  {name:<12} {_r2(scorer, ref, chosen):6.2f}")
    if model_dir is None:
        return
    with tempfile.TemporaryDirectory() as tmp:
        doc = Path(tmp) / "concatenated.txt"
        doc.write_text(text, encoding="utf-8")
        code = (
            "import time; from strandline.app.cli import main; t = time.time(); "
            f"rc = main(['summarize', {model_dir!r}, {str(doc)!r}, "
            f"'--budget', '{budget}', '-o', {str(doc) + '.jsonl'!r}]); "
            "hwm = next(ln for ln in open('/proc/self/status') if ln.startswith('VmHWM')).split()[1]; "
            "print('RESULT', rc, hwm, time.time() - t)"
        )
        env = {**os.environ, "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1"}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
        line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT")), None)
        if line:
            _, rc, rss, secs = line.split()
            print(f"  CLI: exit {rc}, peak RSS {int(rss) / 1024:.1f} MiB, {float(secs):.1f} s (shared 2-core machine)")
        else:
            print(f"  CLI run failed: {out.stderr.strip().splitlines()[-1:]}")


LM_FEATURES = ("cos_lm_centroid", "cos_lm_lead", "surprisal", "surprisal_rel")


def ablation(data: dict, summ, domains: list[str], ours, scorer, fit_without, unused: tuple[str, ...] = ()) -> None:
    """The shipped setting refit with the LM's feature columns zeroed (``LM_FEATURES``): what the LM adds; and, when
    the recipe leaves features out (``unused``), refit with them in: what they would add.
    ``fit_without(columns)``: the shipped setting's head fit with those feature columns zeroed."""
    from strandline.tasks.summarize import Summarizer
    from strandline.tasks.summarize.features import FEATURES

    unused_cols = [FEATURES.index(f) for f in unused]
    cols = sorted({FEATURES.index(f) for f in LM_FEATURES} | set(unused_cols))
    variants = {"without LM": (Summarizer(summ.model, fit_without(cols), summ.meta), cols)}
    if unused:
        variants["with every feature"] = (Summarizer(summ.model, fit_without([]), summ.meta), [])
    print("\nablation: ROUGE-2 of the shipped setting refit without the LM features"
          + (f" and with the features the recipe leaves out ({', '.join(unused)})" if unused else "")
          + " (same training otherwise)")  # fmt: skip
    for dom in domains:
        cells = []
        for name, (h, c) in {"shipped": (summ, []), **variants}.items():
            got = []
            for d in data[dom]["test"]:
                ref = "\n".join(s.clean for s in split_sentences(d["summary"]))
                d = {**d, "feats": masked(d, c)} if c else d
                got.append(100 * scorer.score(ref, "\n".join(s.clean for s in ours(d, h)))["rouge2"].fmeasure)
            cells.append(f"{name} {np.mean(got):6.2f}")
        print(f"  {dom:<16} " + "   ".join(cells))


def held_out_dev(data: dict, held_out: dict, domains: list[str], ours, r2, nested: dict | None = None) -> None:
    """Each domain's leave-one-out head on that domain's train and val documents (selection-time ROUGE-2, ``r2``).

    The head of D saw none of D's documents in training or selection, so D's train and val splits are a larger
    sample than its test split (aclsum 150 vs 100, python-library 160 vs 74, pypi-readme 39 vs 26): protocols can be
    compared here without looking at the test split. ``nested``: the nested heads (the "held-out" selection rule run
    without D), the same way: the dev comparison of the two rules for the shipped setting (docs/summarizing.md).
    """
    print("\nleave-one-out heads on the held-out domain's train+val documents (never the test split), ROUGE-2")
    print(
        f"{'domain':<16} {'docs':>5} {'Lead':>7} {'TextRank':>9} {'leave-one-out':>14}" + (" nested" if nested else "")
    )
    for dom in domains:
        docs = data[dom]["train"] + data[dom]["val"]
        heads = (held_out, *([nested] if nested else []))
        strong, lead_r2 = stronger_lead(docs, r2)
        tr_rule, tr_r2 = stronger_fill(docs, r2, textrank_order)
        cells = [100 * np.mean(lead_r2), 100 * np.mean(tr_r2)]
        cells += [np.mean([100 * r2(d, ours(d, h[dom])) for d in docs]) for h in heads]
        print(
            f"{dom:<16} {len(docs):>5} {cells[0]:7.2f} {cells[1]:9.2f} {cells[2]:14.2f}"
            + "".join(f" {c:6.2f}" for c in cells[3:])
            + f"  Lead: {strong}, TextRank: {tr_rule}"
        )

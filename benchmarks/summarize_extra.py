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

from benchmarks.summarize_baselines import lead, textrank
from strandline.data.segment import split_sentences
from strandline.tasks.summarize.build import masked
from strandline.tasks.summarize.prose import REASONS, comment_flags, non_prose

MARKERS = ("`", "{", "}", "\\", "::", ">>>", "<", "|", "==", "http", "**", "__")  # an independent, cruder check


def _r2(scorer, ref: str, chosen: list) -> float:
    ref = "\n".join(s.clean for s in split_sentences(ref))
    return 100 * scorer.score(ref, "\n".join(s.clean for s in chosen))["rouge2"].fmeasure


def incremental(data: dict, summ, domains: list[str], ours) -> None:
    """ROUGE-2 of the running summary after 25/50/75/100% of each test document's sentences, against the final
    reference, next to Lead over the same prefix."""
    scorer = rouge_scorer.RougeScorer(["rouge2"], use_stemmer=True)
    print("\nincremental: ROUGE-2 of the running summary after a fraction of the document (vs the final reference)")
    print(f"{'domain':<16} " + " ".join(f"{f'{p}% ours/Lead':>16}" for p in (25, 50, 75, 100)))
    for dom in domains:
        cells = []
        for frac in (0.25, 0.5, 0.75, 1.0):
            o, ld = [], []
            for d in data[dom]["test"]:
                cut = math.ceil(frac * len(d["sentences"]))
                upto = sum(s.index < cut for s in d["prose"])
                o.append(_r2(scorer, d["summary"], ours(d, summ, upto)))
                ld.append(_r2(scorer, d["summary"], lead(d["prose"][:upto], d["budget"])))
            cells.append(f"{np.mean(o):7.2f}/{np.mean(ld):<7.2f}")
        print(f"{dom:<16} " + " ".join(f"{c:>16}" for c in cells))


def nonprose_counts(data: dict, summ, domains: list[str], ours) -> None:
    """Chosen sentences that the filter calls non-prose, or that carry code/markup characters (``MARKERS``), for
    Strandline, Lead over prose candidates, and Lead over all sentences (no filter; what it removes)."""
    systems = {
        "Strandline": lambda d: ours(d, summ),
        "Lead": lambda d: lead(d["prose"], d["budget"]),
        "Lead, no filter": lambda d: lead(d["sentences"], d["budget"]),
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
    for name, chosen in (("Strandline", [c.sentence for c in final.summary]), ("Lead", lead(prose, budget)),
                         ("TextRank", textrank(prose, budget))):  # fmt: skip
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


def ablation(data: dict, summ, domains: list[str], ours, scorer, fit_without) -> None:
    """The shipped setting refit with the LM's feature columns zeroed (``LM_FEATURES``): what the LM adds.
    ``fit_without(columns)``: the shipped setting's head fit with those columns zeroed."""
    from strandline.tasks.summarize import Summarizer
    from strandline.tasks.summarize.features import FEATURES

    cols = [FEATURES.index(f) for f in LM_FEATURES]
    head = fit_without(cols)
    no_lm = Summarizer(summ.model, head, summ.meta)
    print("\nablation: ROUGE-2 of the shipped setting without the LM features (same training, columns zeroed)")
    for dom in domains:
        full, cut = [], []
        for d in data[dom]["test"]:
            ref = "\n".join(s.clean for s in split_sentences(d["summary"]))
            full.append(100 * scorer.score(ref, "\n".join(s.clean for s in ours(d, summ)))["rouge2"].fmeasure)
            d = {**d, "feats": masked(d, cols)}
            cut.append(100 * scorer.score(ref, "\n".join(s.clean for s in ours(d, no_lm)))["rouge2"].fmeasure)
        print(f"  {dom:<16} with LM {np.mean(full):6.2f}   without LM {np.mean(cut):6.2f}")


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
        systems = [lambda d: lead(d["prose"], d["budget"]), lambda d: textrank(d["prose"], d["budget"])]
        systems += [lambda d, h=h[dom]: ours(d, h) for h in (held_out, *([nested] if nested else []))]
        cells = [np.mean([100 * r2(d, fn(d)) for d in docs]) for fn in systems]
        print(
            f"{dom:<16} {len(docs):>5} {cells[0]:7.2f} {cells[1]:9.2f} {cells[2]:14.2f}"
            + "".join(f" {c:6.2f}" for c in cells[3:])
        )

"""Extractive baselines under a word budget: Lead, TextRank, LexRank (all over the same candidate sentences)."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from strandline.tasks.summarize import FILLS
from strandline.tasks.summarize.oracle import rouge_tokens


def fill(sentences, order, budget: int, min_words: int = 4, rule: str = "skip") -> list:
    """Sentences taken in ``order`` while they fit the word budget, returned in document order. Sentences under
    ``min_words`` (headings, fragments) or over the whole budget are never taken, as in the summarizer's buffer.
    When the next one does not fit the words left, ``rule`` ``"skip"`` passes over it, ``"stop"`` ends there
    (``SummaryBuffer.sentences``' ``fill``), so a baseline and the summarizer can share one rule."""
    if rule not in FILLS:
        raise ValueError(f"rule must be one of {', '.join(FILLS)}, got {rule!r}")
    chosen, used = [], 0
    for i in order:
        n = sentences[i].n_words
        if not min_words <= n <= budget:
            continue
        if used + n > budget:
            if rule == "stop":
                break
            continue
        chosen.append(i)
        used += n
    return [sentences[i] for i in sorted(chosen)]


def lead(sentences, budget: int, rule: str = "skip") -> list:
    """The leading sentences that fit the budget: with ``rule`` ``"stop"`` a prefix of the document (its
    candidates), with ``"skip"`` a later sentence short enough to fit the words left comes in too."""
    return fill(sentences, range(len(sentences)), budget, rule=rule)


def stronger_lead(docs: list[dict], score) -> tuple[str, list[float]]:
    """The Lead the summarizer is measured against on ``docs``: of the two fill rules (``fill``), the one with
    the higher mean ``score(doc, chosen)``, and its per-document scores. Which Lead is stronger depends on the
    references' length (a prefix wins where they are one line), so both are tried and the stronger kept."""
    per = {rule: [score(d, lead(d["prose"], d["budget"], rule)) for d in docs] for rule in FILLS}
    rule = ranked_fills({r: float(np.mean(v)) if docs else 0.0 for r, v in per.items()})[0]
    return rule, per[rule]


def ranked_fills(means: dict[str, float]) -> tuple[str, str]:
    """The two fill rules, the one of the higher mean score first (a tie: ``"skip"``, the older rule)."""
    strong = max(FILLS, key=lambda r: (means[r], r == "skip"))
    return strong, next(r for r in FILLS if r != strong)


def _pagerank(W: np.ndarray, damping: float = 0.85, iters: int = 50) -> np.ndarray:
    n = len(W)
    W = W / np.maximum(W.sum(1, keepdims=True), 1e-12)
    r = np.full(n, 1.0 / max(1, n))
    for _ in range(iters):
        r = (1 - damping) / max(1, n) + damping * W.T @ r
    return r


def textrank(sentences, budget: int, rule: str = "skip") -> list:
    """TextRank (Mihalcea & Tarau 2004): PageRank over overlap / (log|Si| + log|Sj|) similarities."""
    if not sentences:
        return []
    sets = [set(rouge_tokens(s.clean)) for s in sentences]
    vocab = {w: k for k, w in enumerate(set().union(*sets))}
    X = np.zeros((len(sets), max(1, len(vocab))))
    for i, ws in enumerate(sets):
        X[i, [vocab[w] for w in ws]] = 1.0
    n = np.log(np.maximum(X.sum(1), 2))
    W = (X @ X.T) / (n[:, None] + n[None, :])
    np.fill_diagonal(W, 0.0)
    return fill(sentences, np.argsort(-_pagerank(W), kind="stable"), budget, rule=rule)


def lexrank(sentences, budget: int, threshold: float = 0.1, rule: str = "skip") -> list:
    """LexRank (Erkan & Radev 2004): PageRank over the graph of tf-idf cosines above ``threshold``; the idf comes
    from the document's own sentences (single-document summarization, no outside corpus)."""
    if not sentences:
        return []
    toks = [Counter(rouge_tokens(s.clean)) for s in sentences]
    df = Counter(w for t in toks for w in t)
    vocab = {w: k for k, w in enumerate(df)}
    X = np.zeros((len(toks), max(1, len(vocab))))
    for i, t in enumerate(toks):
        for w, c in t.items():
            X[i, vocab[w]] = c * math.log(len(toks) / df[w])
    X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12)
    W = ((X @ X.T) > threshold).astype(float)
    np.fill_diagonal(W, 0.0)
    return fill(sentences, np.argsort(-_pagerank(W), kind="stable"), budget, rule=rule)

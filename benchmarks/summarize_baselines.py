"""Extractive baselines under a word budget: Lead, TextRank, LexRank (all over the same candidate sentences)."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from strandline.tasks.summarize.oracle import rouge_tokens


def fill(sentences, order, budget: int, min_words: int = 4) -> list:
    """Sentences taken in ``order`` while they fit the word budget, returned in document order. Sentences under
    ``min_words`` (headings, fragments) are skipped, as the summarizer's buffer does, so every system is equal."""
    chosen, used = [], 0
    for i in order:
        if min_words <= sentences[i].n_words and used + sentences[i].n_words <= budget:
            chosen.append(i)
            used += sentences[i].n_words
    return [sentences[i] for i in sorted(chosen)]


def lead(sentences, budget: int) -> list:
    """The leading sentences that fit the budget."""
    return fill(sentences, range(len(sentences)), budget)


def _pagerank(W: np.ndarray, damping: float = 0.85, iters: int = 50) -> np.ndarray:
    n = len(W)
    W = W / np.maximum(W.sum(1, keepdims=True), 1e-12)
    r = np.full(n, 1.0 / max(1, n))
    for _ in range(iters):
        r = (1 - damping) / max(1, n) + damping * W.T @ r
    return r


def textrank(sentences, budget: int) -> list:
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
    return fill(sentences, np.argsort(-_pagerank(W), kind="stable"), budget)


def lexrank(sentences, budget: int, threshold: float = 0.1) -> list:
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
    return fill(sentences, np.argsort(-_pagerank(W), kind="stable"), budget)

"""Held-out bits per base: a k-mer Markov baseline vs a trained model, on the same split of the same FASTA.

The Markov model of order k predicts base i from bases i-k..i-1 with add-α smoothing over A,C,G,T; counts come
from the training spans only, k and α are chosen on the validation spans, and the table reports every split.
Positions with fewer than k bases of context inside their span use the highest order they have. Targets that
are N, and contexts containing N, are skipped by both models (the LM's loss ignores N targets).

The model reads each held-out span as ONE sequence in chunked mode with its state carried (the RNN view), so it
scores exactly the positions the Markov model scores: every base of a span but the first.

    python benchmarks/dna_quality.py --config configs/dna/tiny-cpu.yaml --model my-dna-model
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from strandline.data.dna_datamodule import DNADataModule  # noqa: E402
from strandline.data.tokenizers import A, N  # noqa: E402

MAX_K = 11  # 4^12 count bins (16M x 8 bytes) is the memory ceiling we accept here


def _codes(ids: np.ndarray) -> np.ndarray:
    """Bases as 0..3, N/other as -1."""
    c = ids.astype(np.int64) - A
    c[(c < 0) | (c > 3)] = -1
    return c


def _context_index(c: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """For positions i >= k: integer code of c[i-k:i] and a validity mask (no N in context or target)."""
    n = len(c) - k
    if n <= 0:
        return np.zeros(0, np.int64), np.zeros(0, bool)
    idx = np.zeros(n, np.int64)
    ok = c[k:] >= 0
    for j in range(k):
        part = c[j : j + n]
        ok &= part >= 0
        idx = idx * 4 + np.maximum(part, 0)
    return idx * 4 + np.maximum(c[k:], 0), ok


def _pieces(c: np.ndarray, k: int, piece: int):
    """(idx, run, start) per ``piece`` targets of codes ``c``: idx[i] the code of c[i-k..i] (N and bases before
    the start read as A), run[i] how many bases end at i with no N (capped at k+1), start the first target."""
    for a in range(0, len(c), piece):
        lo = max(a - k, 0)
        part = c[lo : a + piece]
        pad = k - (a - lo)  # positions before the sequence start
        x = np.concatenate([np.zeros(pad, np.int64), np.maximum(part, 0)])
        n = len(part) - (a - lo)
        idx = np.zeros(n, np.int64)
        for j in range(k + 1):
            idx = idx * 4 + x[j : j + n]
        bad = np.concatenate([np.ones(pad, bool), part < 0])
        pos = np.arange(len(bad))
        last_bad = np.maximum.accumulate(np.where(bad, pos, -1))
        run = np.minimum(pos - last_bad, k + 1)[k:]
        yield idx, run, a


class MarkovModel:
    """Counts of (k-mer context, next base) for every order 0..k."""

    def __init__(self, train_seqs: list[np.ndarray], k: int):
        self.k = k
        self.counts = []
        for order in range(k + 1):
            cnt = np.zeros(4 ** (order + 1), np.int64)
            for s in train_seqs:
                idx, ok = _context_index(_codes(s), order)
                cnt += np.bincount(idx[ok], minlength=cnt.size)
            self.counts.append(cnt)

    def nll_bits(self, seqs: list[np.ndarray], alpha: float) -> tuple[float, int]:
        """Summed bits and scored positions over ``seqs`` (each scored from its second base)."""
        total, n = 0.0, 0
        for s in seqs:
            c = _codes(s)
            full_idx, full_ok = _context_index(c, self.k)
            total += self._bits(self.k, full_idx[full_ok], alpha)
            n += int(full_ok.sum())
            for i in range(1, min(self.k, len(c))):  # the first k positions: highest order available
                sub = c[: i + 1]
                idx, ok = _context_index(sub, i)
                if ok.size and ok[-1]:
                    total += self._bits(i, idx[-1:], alpha)
                    n += 1
        return total, n

    @classmethod
    def fit(cls, train_seqs, k: int, piece: int = 1 << 24) -> MarkovModel:
        """The same counts as ``MarkovModel(train_seqs, k)`` in O(k) passes over each sequence, ``piece`` bases at
        a time (memory: the count tables plus a few arrays of ``piece``); ``train_seqs`` may be any iterable."""
        m = cls.__new__(cls)
        m.k = k
        m.counts = [np.zeros(4 ** (o + 1), np.int64) for o in range(k + 1)]
        for s in train_seqs:
            for idx, run, _ in _pieces(_codes(np.asarray(s)), k, piece):
                for o in range(k + 1):
                    sel = run > o  # c[i-o..i] all bases
                    m.counts[o] += np.bincount(idx[sel] % (4 ** (o + 1)), minlength=4 ** (o + 1))
        return m

    def position_bits(self, ids: np.ndarray, alpha: float, k: int | None = None) -> np.ndarray:
        """Bits of every position of one sequence [n] (float64; NaN where the target is not a base, and at
        position 0): order ``k`` (default self.k), backing off to the longest context with no N (so a context
        cut by an N, or the first bases, use a lower order). Every base but the first is scored."""
        k = self.k if k is None else k
        out = np.full(len(ids), np.nan)
        for idx, run, a in _pieces(_codes(np.asarray(ids)), self.k, 1 << 22):
            order = np.minimum(run - 1, k)
            for o in range(k + 1):
                sel = np.flatnonzero(order == o)
                if sel.size:
                    out[a + sel] = -np.log2(self._probs(o, idx[sel] % (4 ** (o + 1)), alpha))
        out[:1] = np.nan
        return out

    def grid_bits(self, seqs, alphas) -> dict[tuple[int, float], tuple[float, int]]:
        """{(k, alpha): (summed bits, positions)} over ``seqs`` for every k <= self.k at once (the scoring of
        :meth:`position_bits`), from one pass: a position whose longest N-free context is o < k scores at o."""
        exact = {a: np.zeros(self.k + 1) for a in alphas}  # bits at order o of positions whose longest order is o
        above = {a: np.zeros(self.k + 1) for a in alphas}  # bits at order o of positions with a longer one
        n_at = np.zeros(self.k + 2, np.int64)
        for s in seqs:
            for idx, run, a in _pieces(_codes(np.asarray(s)), self.k, 1 << 22):
                longest = np.minimum(run - 1, self.k)
                if a == 0:
                    longest[:1] = -1  # position 0 is not scored
                n_at += np.bincount(longest + 1, minlength=self.k + 2)
                for o in range(self.k + 1):
                    sel = longest >= o
                    sub = idx[sel] % (4 ** (o + 1))
                    at = longest[sel] == o
                    for al in alphas:
                        b = -np.log2(self._probs(o, sub, al))
                        exact[al][o] += b[at].sum()
                        above[al][o] += b[~at].sum()
        n = int(n_at[1:].sum())
        return {
            (k, al): (float(exact[al][:k].sum() + exact[al][k] + above[al][k]), n)
            for k in range(self.k + 1)
            for al in alphas
        }

    def _probs(self, order: int, idx: np.ndarray, alpha: float) -> np.ndarray:
        cnt = self.counts[order]
        if not hasattr(self, "_totals"):
            self._totals = {}
        if order not in self._totals:
            self._totals[order] = cnt.reshape(-1, 4).sum(1)
        return (cnt[idx] + alpha) / (self._totals[order][idx // 4] + 4 * alpha)

    def _bits(self, order: int, idx: np.ndarray, alpha: float) -> float:
        cnt = self.counts[order].reshape(-1, 4)
        ctx, nxt = idx // 4, idx % 4
        p = (cnt[ctx, nxt] + alpha) / (cnt[ctx].sum(1) + 4 * alpha)
        return float(-np.log2(p).sum())


@torch.no_grad()
def model_bits(model, seqs: list[np.ndarray], piece: int = 65536, reset_every: int | None = None) -> tuple[float, int]:
    """Summed bits and scored positions of an LM reading each sequence whole (state carried across pieces), or
    with ``reset_every`` W in windows of W bases each read from the zero state (its context cut to W)."""
    model.eval()
    total, n = 0.0, 0
    piece = reset_every or piece
    for s in seqs:
        ids = torch.as_tensor(s.astype(np.int64))[None]
        state = None
        for a in range(0, ids.shape[1] - 1, piece):
            y = ids[:, a + 1 : a + piece + 1]
            if reset_every:
                state = None
            logits, state = model(ids[:, a : a + y.shape[1]], state, donate=True)  # input a.., target a+1..
            lp = torch.log_softmax(logits.float(), -1)
            ok = (y != N) & (y >= A) & (y <= A + 3)
            total += float(-lp.gather(-1, y[..., None])[..., 0][ok].sum()) / math.log(2)
            n += int(ok.sum())
    return total, n


def load_split(config: str | None, fasta: list[str] | None) -> DNADataModule:
    """The data module of a training config (same FASTA, same split) or a default one over ``fasta``."""
    if config:
        cfg = yaml.safe_load(Path(config).read_text())
        args = dict(cfg["data"]["init_args"])
        if fasta:
            args["paths"] = fasta
    else:
        args = {"paths": fasta}
    dm = DNADataModule(**args)
    dm.setup("fit")
    return dm


def span_seqs(dm: DNADataModule, split: str) -> list[np.ndarray]:
    return [np.asarray(dm.genome.fetch(sp.record, sp.start, sp.end)) for sp in dm.spans[split]]


def choose_markov(train: list[np.ndarray], val: list[np.ndarray], ks, alphas) -> tuple[MarkovModel, float, list]:
    """Fit up to max(ks) once, pick (k, α) with the lowest validation bits/base."""
    rows = []
    best = None
    for k in ks:
        m = MarkovModel(train, k)
        for a in alphas:
            b, n = m.nll_bits(val, a)
            rows.append((k, a, b / max(n, 1)))
            if best is None or b / n < best[2]:
                best = (m, a, b / n)
    return best[0], best[1], rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="configs/dna/tiny-cpu.yaml", help="training YAML whose data split to use")
    ap.add_argument("--fasta", nargs="*", help="override the FASTA paths of the config")
    ap.add_argument("--model", nargs="*", default=[], help="model directories or .ckpt files to compare")
    ap.add_argument("--max-k", type=int, default=10)
    ap.add_argument("--markov-k", type=int, nargs="+", help="fit only these Markov orders (a chromosome: k=9 alone)")
    ap.add_argument(
        "--memory-off", action="store_true", help="also score each model with a k-mer memory with that memory off"
    )
    ap.add_argument("--reset-every", type=int, help="also score each model with its state reset every W bases")
    args = ap.parse_args(argv)
    from strandline.models import load

    dm = load_split(args.config, args.fasta)
    train, val, test = (span_seqs(dm, s) for s in ("train", "val", "test"))
    t0 = time.time()
    ks = args.markov_k or range(0, min(args.max_k, MAX_K) + 1)
    markov, alpha, grid = choose_markov(train, val, ks, [0.01, 0.1, 0.5, 1.0])
    fit_s = time.time() - t0
    print(
        f"# data: {dm.hparams.paths}  train {sum(map(len, train)):,} bases, val {sum(map(len, val)):,}, "
        f"test {sum(map(len, test)):,}"
    )
    print(
        "# Markov validation grid (k, alpha, bits/base): "
        + ", ".join(f"{k}/{a}:{b:.4f}" for k, a, b in grid if a == alpha)
    )
    print(f"{'model':<40} {'val bits/base':>14} {'test bits/base':>15} {'params':>10}")
    vb, vn = markov.nll_bits(val, alpha)
    tb, tn = markov.nll_bits(test, alpha)
    print(
        f"{f'Markov k={markov.k} alpha={alpha} (fit {fit_s:.0f}s)':<40} {vb / vn:>14.4f} {tb / tn:>15.4f} "
        f"{markov.counts[-1].size:>10,}"
    )
    print(f"{'uniform':<40} {2.0:>14.4f} {2.0:>15.4f} {0:>10}")
    for path in args.model:
        model = load(path)
        vb, vn = model_bits(model, val)
        tb, tn = model_bits(model, test)
        print(f"{Path(path).name:<40} {vb / vn:>14.4f} {tb / tn:>15.4f} {model.num_params():>10,}")
        if args.reset_every:
            vb, vn = model_bits(model, val, reset_every=args.reset_every)
            tb, tn = model_bits(model, test, reset_every=args.reset_every)
            print(
                f"{f'  same, state reset every {args.reset_every}':<40} {vb / vn:>14.4f} {tb / tn:>15.4f} {model.num_params():>10,}"
            )
        if args.memory_off and model.memory is not None:
            with torch.no_grad():
                model.memory.gate.bias.fill_(-1e4)  # softplus(-1e4) = 0: the memory adds nothing
            vb, vn = model_bits(model, val)
            tb, tn = model_bits(model, test)
            print(f"{'  same, k-mer memory off':<40} {vb / vn:>14.4f} {tb / tn:>15.4f} {model.num_params():>10,}")


if __name__ == "__main__":
    main()

"""Quick checks of the MQAR (associative recall) and context benchmarks' functions (the benchmarks themselves are long runs)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import context  # noqa: E402
import mqar  # noqa: E402

from strandline.data.tokenizers import A, N  # noqa: E402
from strandline.models import LinearTransformerLM, ModelConfig  # noqa: E402


def test_mqar_batch_queries_every_key_once_with_its_value():
    x, y = mqar.mqar_batch(np.random.default_rng(0), 3, 128, 8)
    assert x.shape == y.shape == (3, 128)
    for b in range(3):
        pairs = dict(zip(x[b, 0:16:2].tolist(), x[b, 1:16:2].tolist(), strict=True))
        assert len(pairs) == 8  # distinct keys
        q = (y[b] != mqar.IGNORE).nonzero()[:, 0]
        assert len(q) == 8 and int(q.min()) >= 16
        assert {int(x[b, i]): int(y[b, i]) for i in q} == pairs  # each key queried once, target = its value
        rest = torch.ones(128, dtype=torch.bool)
        rest[:16], rest[q] = False, False
        assert torch.all(x[b, rest] == mqar.FILLER)
    with pytest.raises(ValueError, match="pairs need"):
        mqar.mqar_batch(np.random.default_rng(0), 1, 20, 8)


def test_mqar_accuracy_counts_only_queries():
    x, y = mqar.mqar_batch(np.random.default_rng(1), 2, 64, 4)
    perfect = torch.full((2, 64, mqar.VOCAB), -10.0)
    ok = y != mqar.IGNORE
    perfect[ok, y[ok]] = 10.0
    assert mqar.mqar_accuracy(perfect, y) == (8, 8)
    assert mqar.mqar_accuracy(-perfect, y)[0] == 0


def test_hits_by_pair_places_each_query_at_its_pair():
    """Counts by the queried pair's index in the key-value block: every pair queried once per sequence."""
    x, y = mqar.mqar_batch(np.random.default_rng(2), 3, 64, 4)
    logits = torch.full((3, 64, mqar.VOCAB), -10.0)
    ok = y != mqar.IGNORE
    logits[ok, y[ok]] = 10.0  # every query right ...
    last_key = x[:, 6:7]  # ... then wrong wherever the last pair's key is queried
    wrong = (x == last_key) & ok
    logits[wrong] = -logits[wrong]
    hits = mqar.hits_by_pair(logits, x, y, 4)
    assert hits[1].tolist() == [3, 3, 3, 3] and hits[0].tolist() == [3, 3, 3, 0]


def test_train_eval_runs_for_softmax_and_linear():
    for over in ({"attention": "softmax"}, {}):
        r = mqar.train_eval(over, 32, 48, 4, steps=2, batch=2)
        assert 0.0 <= r["acc"] <= 1.0 and r["params"] > 0 and r["state_bytes"] > 0
    assert "softmax" in mqar.available_variants() and "linear (paper)" in mqar.available_variants()


def test_train_eval_stops_once_learned_and_reports_the_curve():
    """With eval_every, held-out accuracy is checked on the way and training stops at stop_at."""
    r = mqar.train_eval({}, 32, 48, 4, steps=6, batch=2, eval_every=2, stop_at=0.0)
    assert r["steps"] == 2 and len(r["curve"]) == 1 and r["acc"] == r["curve"][0]
    full = mqar.train_eval({}, 32, 48, 4, steps=6, batch=2, eval_every=2, stop_at=2.0, weight_decay=0.1)
    assert full["steps"] == 6 and len(full["curve"]) == 2  # never reached: all steps, checks at 2 and 4


def test_head_dim_trades_heads_for_a_larger_state_at_the_same_width():
    """--head-dim 64 at d_model 64 is one 64-dim head: twice the 2 x 32 state per layer, same width."""
    default = mqar.make_model({}, 64)
    wide = mqar.make_model({}, 64, head_dim=64)
    assert (default.config.n_heads, default.config.head_dim) == (2, 32)
    assert (wide.config.n_heads, wide.config.head_dim, wide.config.d_model) == (1, 64, 64)
    r2 = mqar.train_eval({}, 64, 48, 4, steps=1, batch=2)
    r1 = mqar.train_eval({}, 64, 48, 4, steps=1, batch=2, head_dim=64)
    assert (r2["heads"], r1["heads"]) == ("2x32", "1x64") and len(r1["by_quarter"]) == 4
    assert r1["state_bytes"] > r2["state_bytes"]  # 64 x 64 vs 2 x 32 x 32 per layer


def test_main_prints_the_heads_and_refuses_a_head_dim_that_does_not_divide_the_width(capsys):
    mqar.main(["--lengths", "48", "--steps", "1", "--batch", "2", "--eval-every", "0", "--head-dim", "64",
                 "--variants", "linear (paper)"])  # fmt: skip
    out = capsys.readouterr().out
    assert "head dim 64" in out and "heads" in out
    row = next(line for line in out.splitlines() if line.startswith("linear (paper)"))
    assert row.split()[2:4] == ["64", "1x64"]  # d_model, heads
    with pytest.raises(SystemExit) as e:
        mqar.main(["--head-dim", "48", "--widths", "64"])
    assert e.value.code == 2 and "does not divide d_model 64" in capsys.readouterr().err


def test_sliding_window_bits_equal_stream_bits_inside_the_window():
    """With a window longer than the sequence, the sliding read scores exactly what one pass scores."""
    model = LinearTransformerLM(ModelConfig(vocab_size=16, d_model=32, n_layers=1, n_heads=2, attention="softmax"))
    ids = np.random.default_rng(0).integers(A, A + 4, 40)
    full = context.token_bits(model, ids)
    assert full.shape == (39,)
    np.testing.assert_allclose(context.token_bits_sliding(model, ids, 200), full, rtol=1e-5)
    short = context.token_bits_sliding(model, ids, 8)
    assert short.shape == (39,) and np.allclose(short[:4], full[:4], rtol=1e-5) and not np.allclose(short, full)


class LagCopier:
    """A stand-in streaming model that bets on token t = token t - lag (logit +2 over the other bases)."""

    def __init__(self, lag: int):
        self.lag, self.config = lag, ModelConfig(vocab_size=16)

    def eval(self):
        return self

    def __call__(self, x, state=None, donate=False):  # the LM's signature (donate: nothing to give up here)
        seen = x if state is None else torch.cat([state, x], 1)
        logits = torch.full((*x.shape, 16), -30.0)
        logits[..., A : A + 4] = 0.0
        for j in range(x.shape[1]):
            t = seen.shape[1] - x.shape[1] + j + 1  # the position this output predicts
            if t - self.lag >= 0:
                logits[0, j, seen[0, t - self.lag]] = 2.0
        return logits, seen


def test_repeat_probe_measures_the_second_copy():
    """A model that copies from exactly seg + d tokens back: 2 bits on the first copy, ~0 on the second."""
    ids = np.random.default_rng(0).integers(A, A + 4, 5000).astype(np.uint8)
    ids[100:110] = N
    starts = context.clean_starts(ids, 50)
    assert not np.any((starts > 50) & (starts < 110)) and 0 in starts and 110 in starts
    r = context.repeat_probe(LagCopier(30 + 200), ids, seg=30, d=200, trials=2, softmax_window=64)
    hit = -math.log2(math.exp(2) / (math.exp(2) + 3))  # bits when the bet is right (every base of the 2nd copy)
    assert r["second"] == pytest.approx(hit) and r["first"] > 2.0 and r["gain"] > 1.5
    off = context.repeat_probe(LagCopier(31 + 200), ids, seg=30, d=200, trials=2, softmax_window=64)
    assert abs(off["gain"]) < 0.6  # one base off: no gain


def test_context_curve_bins():
    model = LinearTransformerLM(ModelConfig(vocab_size=16, d_model=32, n_layers=1, n_heads=2))
    model.meta["tokenizer"] = "dna"
    ids = np.random.default_rng(0).integers(A, A + 4, 5000).astype(np.uint8)
    rows = context.context_curve(model, [ids[200:5000]], window=64, max_windows=3)
    assert [(lo, hi) for lo, hi, _ in rows] == [(1, 1), (2, 3), (4, 7), (8, 15), (16, 31), (32, 63), (64, 64)]

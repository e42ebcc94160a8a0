"""benchmarks/context.py: how each kind of model reads the repeat probe's stream."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import context  # noqa: E402

from strandline.data.tokenizers import A  # noqa: E402
from strandline.models import LinearTransformerLM, ModelConfig  # noqa: E402

SMALL = dict(vocab_size=16, d_model=32, n_layers=1, n_heads=2)


def test_plain_softmax_is_read_with_the_sliding_window_and_windowed_models_stream():
    """A softmax model without a window of its own gets the sliding read; one with ``window`` streams whole."""
    ids = np.random.default_rng(0).integers(A, A + 4, 60)
    plain = LinearTransformerLM(ModelConfig(**SMALL, attention="softmax"))
    np.testing.assert_array_equal(context.bits_for(plain, ids, 8), context.token_bits_sliding(plain, ids, 8))
    assert not np.allclose(context.bits_for(plain, ids, 8), context.token_bits(plain, ids))
    windowed = LinearTransformerLM(ModelConfig(**SMALL, attention="softmax", window=8))
    np.testing.assert_array_equal(context.bits_for(windowed, ids, 8), context.token_bits(windowed, ids))
    assert not np.allclose(context.token_bits(windowed, ids), context.token_bits_sliding(windowed, ids, 8))
    rnn = LinearTransformerLM(ModelConfig(**SMALL))
    np.testing.assert_array_equal(context.bits_for(rnn, ids, 8), context.token_bits(rnn, ids))


def test_copied_and_rest_split_the_copy_after_its_first_bases():
    """bits[i] is about token i+1: a copy at dst..dst+L-1 scored from dst+skip is bits[dst+skip-1 : dst+L-1]."""
    bits = np.arange(20.0)
    c, r = context.copied_and_rest(bits, dst=10, length=6, skip=2)
    np.testing.assert_array_equal(c, [11, 12, 13, 14])
    assert len(c) + len(r) == 20 and not set(c) & set(r)


def test_window_copy_gain_scores_every_copied_base_once():
    """One repeat per window: the copied bases counted are (length - skip) per window, and the means are the
    model's bits (finite, the gain is rest - copied)."""
    rng = np.random.default_rng(0)
    seqs = [rng.integers(A, A + 4, 400).astype(np.uint8)]
    model = LinearTransformerLM(ModelConfig(**SMALL))
    r = context.window_copy_gain(model, seqs, window=128, n=3, min_len=20, max_len=40, mutation=0.0, skip=4)
    assert 3 * (20 - 4) <= r["bases"] <= 3 * (40 - 4)
    assert np.isfinite([r["copied"], r["rest"]]).all() and abs(r["gain"] - (r["rest"] - r["copied"])) < 1e-12

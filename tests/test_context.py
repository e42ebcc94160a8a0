"""benchmarks/context.py: how each kind of model reads the repeat probe's stream."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import context  # noqa: E402

from data.tokenizers import A  # noqa: E402
from models import LinearTransformerLM, ModelConfig  # noqa: E402

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

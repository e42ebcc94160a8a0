"""benchmarks/context.py: how each kind of model reads the repeat probe's stream."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

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


def test_implants_are_disjoint_clean_and_at_their_distance():
    """Every source and copy interval is disjoint from the others, sources avoid N, copies start d after."""
    rng = np.random.default_rng(1)
    ids = rng.integers(A, A + 4, 20_000).astype(np.uint8)
    ids[5_000:5_100] = 4 + 10  # an N run (any non-base id)
    places = context.place_implants(ids, 50, [100, 1_000, 10_000], 3, np.random.default_rng(0))
    assert sorted(d for d, _, _ in places) == [100] * 3 + [1_000] * 3 + [10_000] * 3
    used = np.zeros(len(ids), int)
    for d, s, c in places:
        assert c == s + 50 + d and c + 50 <= len(ids)
        assert ((ids[s : s + 50] >= A) & (ids[s : s + 50] <= A + 3)).all()
        used[s : s + 50] += 1
        used[c : c + 50] += 1
    assert used.max() == 1


def test_implant_probe_finds_the_copies_with_the_kmer_memory_and_not_without():
    """A k-mer memory that counts exact 12-mers predicts a copy 5,000 bases later; a model without it cannot
    (its random weights know nothing of either copy). The state's size does not depend on the stream."""
    ids = np.random.default_rng(2).integers(A, A + 4, 12_000).astype(np.uint8)
    memory = LinearTransformerLM(ModelConfig(**SMALL, kmer_orders=[12], kmer_buckets=1 << 16))
    with torch.no_grad():
        memory.memory.gate.bias.fill_(4.0)  # trust a match: softplus(4) ~ 4 nats towards what followed
    plain = LinearTransformerLM(ModelConfig(**SMALL))
    got = context.implant_probe(memory, ids, 200, [5_000], 2)[5_000]
    assert got["gain"] > 1.0
    assert abs(context.implant_probe(plain, ids, 200, [5_000], 2)[5_000]["gain"]) < 0.1
    J, N, V = 1, 1 << 16, 4
    assert context.state_bytes(memory) > J * N * V * 4 > context.state_bytes(plain) > 0

"""The long-document benchmark's reads: tiles from a fresh state, the stream with its state carried."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.context import token_bits  # noqa: E402
from benchmarks.text_long import main, windowed_bits, xz_bits  # noqa: E402
from strandline.models import LinearTransformerLM, ModelConfig  # noqa: E402


@pytest.fixture
def model():
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=260, d_model=32, n_layers=1, n_heads=4, decay="retnet", chunk_size=16)
    return LinearTransformerLM(cfg).eval()


def test_tiles_read_each_window_from_a_fresh_state(model):
    ids = np.random.default_rng(0).integers(4, 260, 301)
    stream = token_bits(model, ids)
    np.testing.assert_allclose(windowed_bits(model, ids, 512), stream, rtol=1e-9)  # one tile: the stream
    tiles = windowed_bits(model, ids, 64)
    for s in range(0, 300, 64):  # each tile alone, the short last one too
        np.testing.assert_allclose(tiles[s : s + 64], token_bits(model, ids[s : s + 65]), rtol=1e-9)
    assert not np.allclose(tiles[64:], stream[64:])  # the stream remembers what the tiles forget


def test_xz_bits_reward_repetition():
    rng = np.random.default_rng(0)
    noise = "".join(rng.choice(list("acgt"), 20000))
    assert xz_bits("the same sentence. " * 1000) < 0.2 < 1.9 < xz_bits(noise) < 2.6


def test_the_benchmark_reads_every_held_out_document(tmp_path, model, capsys):
    model.save(tmp_path / "m", tokenizer="bytes")
    docs = [{"id": "man", "source": "bash", "text": "Bash is a shell. " * 60},
            {"id": "p1", "source": "aclsum", "text": "We present a parser. " * 30}]  # fmt: skip
    for name in ("val", "train"):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    main(["--model", str(tmp_path / "m"), "--val", str(tmp_path / "val.jsonl"), "--train", str(tmp_path / "train.jsonl"),
          "--window", "64"])  # fmt: skip
    out = capsys.readouterr().out
    assert "manuals: 1 documents, 1,020 bytes" in out and "papers: 1 documents, 630 bytes" in out
    assert "0-512 | 512-4k" in out

"""A softmax model reads a stream with a sliding window of its training context: its state never grows."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_io import tiny, write_ckpt

from strandline.app.cli import main
from strandline.models.persist.checkpoint import read_checkpoint
from strandline.models.persist.modeldir import save_model
from strandline.models.streaming import UnboundedModelError, bound_memory

LAMBDA = Path(__file__).resolve().parents[1] / "data" / "genomes" / "lambda.fasta.gz"


def _state_numel(state) -> int:
    if isinstance(state, torch.Tensor):
        return state.numel()
    if isinstance(state, (tuple, list)):
        return sum(_state_numel(s) for s in state)
    return 0


def test_a_windowed_softmax_state_is_the_same_size_at_any_length():
    lm = tiny(attention="softmax").eval()
    lm.meta = {"training": {"context": 32}}
    assert "sliding window of 32 tokens" in bound_memory(lm, where="m")
    assert lm.config.window == 32 and bound_memory(lm) is None  # bounded now: nothing more to do
    x = torch.randint(4, 8, (1, 1000))
    with torch.no_grad():
        _, s100 = lm(x[:, :100])
        _, s1000 = lm(x[:, :1000])
        plain = tiny(attention="softmax").eval()
        _, grown = plain(x[:, :1000])
    assert _state_numel(s100) == _state_numel(s1000) < _state_numel(grown) / 10


def test_an_rnn_needs_nothing_and_an_unknown_context_is_refused():
    assert bound_memory(tiny()) is None
    lm = tiny(attention="softmax")
    lm.meta = {"training": {}}
    with pytest.raises(UnboundedModelError, match="strandline convert"):
        bound_memory(lm, where="teacher")
    assert "of 64 tokens" in bound_memory(lm, window=64)


def test_a_checkpoint_records_its_training_window(tmp_path):
    path = write_ckpt(tmp_path / "m.ckpt", tiny(attention="softmax"))
    ckpt = torch.load(path, weights_only=True)
    assert read_checkpoint(path).context is None
    ckpt["datamodule_hyper_parameters"] = {"window": 256, "batch_size": 16}
    torch.save(ckpt, path)
    assert read_checkpoint(path).context == 256
    from strandline.models import load

    assert load(path).meta["training"]["context"] == 256


def test_scan_with_a_softmax_model_says_so_and_with_no_context_refuses(tmp_path, capsys):
    lm = tiny(attention="softmax")
    save_model(lm, tmp_path / "teacher", tokenizer="dna", training={"context": 64})
    save_model(lm, tmp_path / "unknown", tokenizer="dna", training={})
    assert main(["scan", str(tmp_path / "teacher"), str(LAMBDA), "-o", str(tmp_path / "t.bedGraph")]) == 0
    assert "sliding window of 64 tokens" in capsys.readouterr().err
    assert main(["scan", str(tmp_path / "unknown"), str(LAMBDA), "-o", str(tmp_path / "u.bedGraph")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "strandline convert" in err and not (tmp_path / "u.bedGraph").exists()

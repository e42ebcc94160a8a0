"""Multi-genome training data: genomes held out whole by file (val_paths/test_paths) and windows balanced by file."""

from __future__ import annotations

import numpy as np
import pytest

from strandline.data.dna import DNADataError, Span, sample_window, span_weights
from strandline.data.dna_datamodule import DNADataModule


def _fa(path, records):
    path.write_text("".join(f">{name}\n{seq}\n" for name, seq in records))
    return str(path)


@pytest.fixture()
def corpus(tmp_path):
    rng = np.random.default_rng(0)

    def seq(n):
        return "".join(rng.choice(list("ACGT"), n))

    big = _fa(tmp_path / "big.fa", [("chr1", seq(40_000))])
    small = _fa(tmp_path / "small.fa", [("bact", seq(2_000))])
    val = _fa(tmp_path / "val.fa", [("v1", seq(3_000)), ("v2", seq(1_000))])
    test = _fa(tmp_path / "test.fa", [("t1", seq(2_500))])
    return big, small, val, test


def test_val_and_test_files_are_held_out_whole_and_train_reads_only_paths(corpus, tmp_path):
    big, small, val, test = corpus
    dm = DNADataModule(paths=[big, small], val_paths=[val], test_paths=test, window=100, batch_size=2,
                       cache_dir=str(tmp_path / "c"))  # fmt: skip
    dm.setup()
    got = {s: sorted((sp.record, sp.start, sp.end) for sp in dm.spans[s]) for s in ("train", "val", "test")}
    assert got["train"] == [("bact", 0, 2000), ("chr1", 0, 40000)]
    assert got["val"] == [("v1", 0, 3000), ("v2", 0, 1000)]
    assert got["test"] == [("t1", 0, 2500)]


def test_file_balance_evens_out_the_windows_of_long_and_short_files(corpus, tmp_path):
    big, small, *_ = corpus
    counts = {}
    for power in (1.0, 0.0):
        dm = DNADataModule(paths=[big, small], window=100, batch_size=1, samples_per_epoch=2000, val_fraction=0,
                           test_fraction=0, file_balance=power, cache_dir=str(tmp_path / "c"))  # fmt: skip
        dm.setup()
        ds = dm.train_dataloader().dataset  # the draw its items make: sample_window with its weights
        names = [sample_window(ds.spans, ds.window, np.random.default_rng([0, 0, i]), ds.weights)[0].record
                 for i in range(2000)]  # fmt: skip
        counts[power] = names.count("bact") / len(names)
    assert counts[1.0] < 0.1  # ~1,900 of 41,800 starts
    assert 0.4 < counts[0.0] < 0.6  # every file alike


def test_span_weights_give_each_file_its_share():
    spans = [Span("a1", 0, 900, "train"), Span("a2", 0, 100, "train"), Span("b", 0, 10, "train")]
    file_of = {"a1": "A", "a2": "A", "b": "B"}
    assert span_weights(spans, file_of, 1.0) is None
    w = span_weights(spans, file_of, 0.0)
    mass = {f: sum(len(sp) * wi for sp, wi in zip(spans, w, strict=True) if file_of[sp.record] == f) for f in "AB"}
    assert mass["A"] == pytest.approx(mass["B"])
    w = span_weights(spans, file_of, 0.5)
    mass = {f: sum(len(sp) * wi for sp, wi in zip(spans, w, strict=True) if file_of[sp.record] == f) for f in "AB"}
    assert mass["A"] / mass["B"] == pytest.approx((1000 / 10) ** 0.5)


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan")])
def test_file_balance_out_of_range_is_one_line(bad):
    with pytest.raises(DNADataError, match="file_balance"):
        DNADataModule(paths=["x.fa"], file_balance=bad)


def test_a_genome_of_n_only_is_refused_before_training(tmp_path):
    good = _fa(tmp_path / "good.fa", [("g", "ACGT" * 500)])
    only_n = _fa(tmp_path / "n.fa", [("n", "N" * 3000)])
    dm = DNADataModule(paths=[good, only_n], window=100, batch_size=1, cache_dir=str(tmp_path / "c"))
    with pytest.raises(DNADataError, match=r"n\.fa: no A/C/G/T bases"):
        dm.check_stage("fit")
    DNADataModule(paths=[good], window=100, batch_size=1, cache_dir=str(tmp_path / "c")).check_stage("fit")


def test_a_window_that_cannot_fit_in_memory_is_refused_in_one_line(tmp_path, monkeypatch):
    from strandline.errors import UserInputError
    from strandline.models import ModelConfig
    from strandline.tasks import preflight

    cfg = ModelConfig(vocab_size=16, d_model=64, n_layers=2, n_heads=4, checkpoint_activations=True)
    small = preflight.train_step_bytes(cfg, 1, 131072)
    assert small < preflight.train_step_bytes(cfg, 8, 131072) < preflight.train_step_bytes(cfg, 64, 131072)
    no_ckpt = ModelConfig(vocab_size=16, d_model=64, n_layers=8, n_heads=4, checkpoint_activations=False)
    assert preflight.train_step_bytes(no_ckpt, 1, 131072) > preflight.train_step_bytes(
        ModelConfig(vocab_size=16, d_model=64, n_layers=8, n_heads=4, checkpoint_activations=True), 1, 131072
    )
    monkeypatch.setattr(preflight, "available_bytes", lambda: small + 1)
    preflight.check_fits(cfg, 1, 131072)  # fits
    with pytest.raises(UserInputError, match=r"8 x 131,072 tokens needs about .* GiB.*lower data.window"):
        preflight.check_fits(cfg, 8, 131072)
    monkeypatch.setenv("STRANDLINE_SKIP_MEMORY_CHECK", "1")
    preflight.check_fits(cfg, 8, 131072)
    preflight.check_fits(cfg, 8, 131072, device="gpu")


def test_fit_refuses_a_window_too_big_for_memory_before_any_run_folder(tmp_path, capsys):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from test_io import one_line_error
    from test_train_e2e import fit_args

    from strandline.app.cli import main

    argv = fit_args(tmp_path, 2, "--data.init_args.window", "40000000", "--data.init_args.batch_size", "64")
    assert main(argv) == 2
    assert "needs about" in one_line_error(capsys) and not (tmp_path / "ckpt").exists()

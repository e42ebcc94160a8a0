"""The synthetic-repeat option of DNA training windows (``repeat_prob``): a copy of earlier bases, train only."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from strandline.data.dna import DNADataError, Genome, Span, insert_repeat, sample_window
from strandline.data.dna_datamodule import DNADataModule, LaneBatches, RandomWindows, Repeats
from strandline.data.tokenizers import A, N

RNG = np.random.default_rng(11)
SEQS = {"chr1": "".join(RNG.choice(list("ACGT"), 6000)), "chr2": "".join(RNG.choice(list("ACGTN"), 2500))}


@pytest.fixture
def fasta(tmp_path):
    path = tmp_path / "g.fa"
    path.write_text("".join(f">{n}\n{s}\n" for n, s in SEQS.items()))
    return path


def natural(ds: RandomWindows, k: int) -> np.ndarray:
    """The window item ``k`` reads from the genome before any repeat (rc_prob 0), T+1 ids."""
    epoch, i = divmod(k, ds.n)
    sp, start = sample_window(ds.spans, ds.window, np.random.default_rng([ds.seed, epoch, i]))
    return np.asarray(ds.genome.fetch(sp.record, start, start + ds.window + 1))


def window_ids(ex: dict) -> np.ndarray:
    return np.append(ex["input"].numpy(), ex["target"][-1].item())


def test_insert_repeat_copies_earlier_bases_and_keeps_the_length():
    ids = np.random.default_rng(0).integers(A, A + 4, 1001).astype(np.uint8)
    lengths = []
    for seed in range(200):
        out, (src, dst, n) = insert_repeat(ids, np.random.default_rng(seed), 20, 400)
        assert out.shape == ids.shape and out.dtype == ids.dtype
        assert 20 <= n <= 400 and src + n <= dst and dst + n <= len(ids)  # the source ends before the copy
        np.testing.assert_array_equal(out[dst : dst + n], ids[src : src + n])
        keep = np.ones(len(ids), bool)
        keep[dst : dst + n] = False
        np.testing.assert_array_equal(out[keep], ids[keep])  # nothing outside the copy changes
        lengths.append(n)
    assert min(lengths) < 40 and max(lengths) > 250  # log-uniform: short and long copies both occur
    again = insert_repeat(ids, np.random.default_rng(5), 20, 400)[0]
    np.testing.assert_array_equal(again, insert_repeat(ids, np.random.default_rng(5), 20, 400)[0])
    short, info = insert_repeat(ids[:30], np.random.default_rng(0), 20, 400)
    assert info is None and np.array_equal(short, ids[:30])  # shorter than two copies: unchanged


def test_insert_repeat_mutations_substitute_a_different_base_at_the_rate():
    ids = np.random.default_rng(1).integers(A, A + 4, 4001).astype(np.uint8)
    ids[::50] = N
    changed = total = 0
    for seed in range(50):
        out, (src, dst, n) = insert_repeat(ids, np.random.default_rng(seed), 500, 2000, mutation=0.1)
        seg, copy = ids[src : src + n], out[dst : dst + n]
        assert (copy[seg == N] == N).all() and ((copy >= A) & (copy <= N)).all()  # N stays N; only bases
        changed += int((seg != copy).sum())
        total += int((seg != N).sum())
    assert 0.08 < changed / total < 0.12


def test_random_windows_with_repeats_are_copies_deterministic_and_the_right_length(fasta):
    g = Genome([str(fasta)])
    spans = [Span("chr1", 0, 6000)]
    plain = RandomWindows(g, spans, 512, n=20, seed=4, rc_prob=0.0)
    rep = RandomWindows(g, spans, 512, n=20, seed=4, rc_prob=0.0, repeats=Repeats(1.0, 30, 200, 0.0))
    for k in range(40):
        ex = rep[k]
        assert ex["input"].shape == (512,) and ex["target"].shape == (512,)
        assert torch.equal(ex["input"], rep[k]["input"])  # fixed by (seed, epoch, i)
        got, nat = window_ids(ex), natural(rep, k)
        np.testing.assert_array_equal(window_ids(plain[k]), nat)
        diff = np.flatnonzero(got != nat)
        assert len(diff) > 0 and diff[-1] - diff[0] < 200  # one stretch of at most 200 bases was overwritten
        # the overwritten stretch equals bases read earlier in the same window
        lo, hi = diff[0], diff[-1] + 1
        earlier = [s for s in range(0, lo - (hi - lo) + 1) if np.array_equal(got[s : s + hi - lo], got[lo:hi])]
        assert earlier


def test_repeat_prob_zero_gives_the_windows_of_older_runs(fasta):
    g = Genome([str(fasta)])
    spans = [Span("chr1", 0, 6000), Span("chr2", 0, 2500)]
    old = RandomWindows(g, spans, 300, n=10, seed=2, rc_prob=0.5)
    off = RandomWindows(g, spans, 300, n=10, seed=2, rc_prob=0.5, repeats=Repeats(0.0, 50, 100, 0.0))
    half = RandomWindows(g, spans, 300, n=10, seed=2, rc_prob=0.5, repeats=Repeats(0.5, 50, 100, 0.0))
    same = [torch.equal(old[k]["input"], half[k]["input"]) for k in range(40)]
    assert all(torch.equal(old[k]["input"], off[k]["input"]) for k in range(40))
    assert 5 < sum(same) < 35  # about half the windows carry a repeat, the others are the old windows


def test_lane_batches_with_repeats_keep_order_resets_and_shape(fasta):
    g = Genome([str(fasta)])
    spans = [Span("chr1", 0, 6000)]
    plain = list(LaneBatches(g, spans, window=256, batch_size=2))
    rep = list(LaneBatches(g, spans, window=256, batch_size=2, repeats=Repeats(1.0, 20, 100, 0.0), seed=1))
    again = list(LaneBatches(g, spans, window=256, batch_size=2, repeats=Repeats(1.0, 20, 100, 0.0), seed=1))
    assert len(rep) == len(plain)
    for p, r, a in zip(plain, rep, again, strict=True):
        assert r["input"].shape == p["input"].shape and torch.equal(r["reset"], p["reset"])
        assert torch.equal(r["input"], a["input"])
        assert (r["input"] != p["input"]).any(dim=1).all()  # every window of every lane got its repeat


@pytest.mark.parametrize("sequential", [False, True], ids=["random", "tbptt"])
def test_val_and_test_windows_are_never_changed(fasta, sequential):
    kw = dict(paths=[str(fasta)], window=256, batch_size=2, samples_per_epoch=8, sequential=sequential)
    plain, rep = DNADataModule(**kw), DNADataModule(**kw, repeat_prob=1.0, repeat_min_len=20, repeat_max_len=100)
    for dm in (plain, rep):
        dm.setup("fit")
    for split in ("val", "test"):
        a = list(getattr(plain, f"{split}_dataloader")())
        b = list(getattr(rep, f"{split}_dataloader")())
        assert len(a) == len(b) > 0
        assert all(
            torch.equal(x["input"], y["input"]) and torch.equal(x["target"], y["target"])
            for x, y in zip(a, b, strict=True)
        )
    train_a, train_b = next(iter(plain.train_dataloader())), next(iter(rep.train_dataloader()))
    assert not torch.equal(train_a["input"], train_b["input"])  # while the training windows do change


@pytest.mark.parametrize(
    "kw,needle",
    [
        ({"repeat_prob": 1.5}, "data.repeat_prob and repeat_mutation must lie in [0, 1]"),
        ({"repeat_mutation": -0.1}, "data.repeat_prob and repeat_mutation must lie in [0, 1]"),
        ({"repeat_min_len": 0}, "data.repeat_min_len must be >= 1"),
        ({"repeat_min_len": 300, "repeat_max_len": 200}, "and <= repeat_max_len, got 300 and 200"),
    ],
)
def test_repeat_options_that_cannot_work_are_one_line(fasta, kw, needle):
    with pytest.raises(DNADataError, match=re.escape(needle)):
        DNADataModule(paths=[str(fasta)], **kw)


def test_tbptt_with_repeats_resumes_exactly(tmp_path):
    """A TBPTT run whose lanes carry synthetic repeats, killed mid-epoch, resumes to the uninterrupted run's weights."""
    from test_train_e2e import KillAt, Killed, fit_args, run  # the e2e helpers: in-process fit, kill, resume

    extra = ("--model.long_context", "tbptt", "--data.init_args.sequential", "true", "--trainer.limit_val_batches",
             "1", "--trainer.val_check_interval", "2", "--data.init_args.repeat_prob", "1.0",
             "--data.init_args.repeat_min_len", "8", "--data.init_args.repeat_max_len", "32")  # fmt: skip
    straight = run(fit_args(tmp_path / "a", 6, *extra))
    with pytest.raises(Killed):
        run(fit_args(tmp_path / "b", 6, *extra), callbacks=[KillAt(3)])
    resumed = run(fit_args(tmp_path / "b", 6, *extra), ckpt_path="last")
    assert resumed.trainer.global_step == 6
    for (n, p), q in zip(straight.model.named_parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(p, q), n
    plain = run(fit_args(tmp_path / "c", 6, *extra[:-6]))  # the same run without repeats trains differently
    assert any(
        not torch.equal(p, q) for p, q in zip(straight.model.parameters(), plain.model.parameters(), strict=True)
    )

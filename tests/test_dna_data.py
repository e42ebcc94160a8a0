"""DNA training data: tokenizer edge cases, the uint8 cache, splits, windows, RC augmentation, TBPTT lanes."""

from __future__ import annotations

import gzip
import os
import re

import numpy as np
import pytest
import torch

from strandline.data.dna import (
    DNADataError,
    Genome,
    GenomeCache,
    Span,
    expand_paths,
    lanes,
    make_example,
    read_bed_splits,
    sample_window,
    split_auto,
    split_by_records,
    tile_windows,
)
from strandline.data.dna_datamodule import DNADataModule, EpochSampler, LaneBatches, RandomWindows
from strandline.data.fasta import FastaError, iter_records, read_fasta
from strandline.data.tokenizers import COMPLEMENT, A, ByteTokenizer, C, DNATokenizer, G, N, T, reverse_complement

RNG = np.random.default_rng(7)
SEQS = {
    "chr1": "".join(RNG.choice(list("ACGT"), 3000)),
    "chr2": "".join(RNG.choice(list("ACGTacgtN"), 1700)),
    "plasmid": "".join(RNG.choice(list("ACGT"), 400)),
}


def write_fasta(path, seqs=SEQS, width=60, gz=False):
    text = "".join(f">{n} test record\n" + "\n".join(s[i : i + width] for i in range(0, len(s), width)) + "\n"
                   for n, s in seqs.items())  # fmt: skip
    if gz:
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


@pytest.fixture
def fasta(tmp_path):
    return write_fasta(tmp_path / "genome.fa.gz", gz=True)


# ---- tokenizer edge cases -----------------------------------------------------------------------
def test_dna_tokenizer_edge_cases():
    tok = DNATokenizer()
    assert tok.encode("ACGTN").tolist() == [A, C, G, T, N]
    assert tok.encode("acgtn").tolist() == tok.encode("ACGTN").tolist()  # soft-masked = same ids
    assert set(tok.encode("RYSWKMBDHV").tolist()) == {N}  # IUPAC ambiguity codes -> N
    assert tok.encode("ACGU").tolist() == tok.encode("acgt").tolist()  # RNA: U is read as T
    assert tok.encode("").size == 0
    for bad in ("ACGX", "AC GT", "AC-GT", "ACé"):
        with pytest.raises(ValueError, match="invalid DNA character"):
            tok.encode(bad)
    assert tok.decode(tok.encode("gattaca")) == "GATTACA"


def test_byte_tokenizer_round_trips_multibyte_text():
    tok = ByteTokenizer()
    text = "naïve 🧬 text\n"
    ids = tok.encode(text)
    assert ids.max() < 256 and len(ids) == len(text.encode("utf-8"))
    assert tok.decode(list(ids) + [tok.eos_id, tok.pad_id]) == text  # specials are dropped


def test_reverse_complement_flips_positions_and_complements_bases():
    ids = np.array([A, A, C, G, T, N, G], dtype=np.uint8)
    rc = reverse_complement(ids)
    assert rc.tolist() == [C, N, A, C, G, T, T]
    assert reverse_complement(rc).tolist() == ids.tolist()  # an involution
    for i in range(len(ids)):  # position i -> n-1-i, base -> complement
        assert rc[len(ids) - 1 - i] == COMPLEMENT[ids[i]]


# ---- cache --------------------------------------------------------------------------------------
def test_cache_matches_fasta_and_is_reused(fasta):
    cache = GenomeCache(fasta)
    ref = read_fasta(fasta)
    assert cache.names == list(SEQS)
    for name, ids in ref.items():
        assert cache.lengths[name] == len(SEQS[name])
        np.testing.assert_array_equal(cache.fetch(name, 0, len(ids)), ids)
    np.testing.assert_array_equal(cache.fetch("chr1", 100, 130), ref["chr1"][100:130])
    assert cache.fetch("chr1", 2990, 5000).size == 10  # clipped to the record
    mtime = cache.data_path.stat().st_mtime_ns
    again = GenomeCache(fasta)
    assert again.data_path.stat().st_mtime_ns == mtime  # not rebuilt


def test_cache_is_rebuilt_when_fasta_changes(tmp_path):
    fa = write_fasta(tmp_path / "g.fa")
    assert GenomeCache(fa).lengths["chr1"] == 3000
    write_fasta(fa, {"chr1": "ACGT" * 10, "new": "GGGG"})
    st = fa.stat()
    os.utime(fa, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    c = GenomeCache(fa)
    assert c.names == ["chr1", "new"] and c.lengths["chr1"] == 40
    assert c.fetch("new", 0, 4).tolist() == [G] * 4


def test_truncated_cache_is_detected_and_rebuilt(tmp_path):
    """A cache cut short (1,000 of 5,100 bytes) was reused and read as PAD."""
    fa = write_fasta(tmp_path / "g.fa")
    first = GenomeCache(fa)
    with open(first.data_path, "r+b") as f:
        f.truncate(1000)
    again = GenomeCache(fa)
    assert again.data_path.stat().st_size == sum(len(s) for s in SEQS.values())
    np.testing.assert_array_equal(again.fetch("plasmid", 0, 400), read_fasta(fa)["plasmid"])
    first.index_path.write_text('{"records": "stale"}')  # an index from another version is rebuilt too
    assert GenomeCache(fa).lengths == {n: len(s) for n, s in SEQS.items()}


def test_cache_dir_option_and_unknown_record(tmp_path, fasta):
    c = GenomeCache(fasta, cache_dir=tmp_path / "cache")
    assert c.data_path.parent == tmp_path / "cache"
    (tmp_path / "afile").write_text("x")
    with pytest.raises(DNADataError, match="cache_dir .*afile: cannot create"):
        GenomeCache(fasta, cache_dir=tmp_path / "afile")
    with pytest.raises(DNADataError, match="no record named"):
        c.fetch("chrX", 0, 10)


def test_expand_paths_dirs_globs_and_errors(tmp_path):
    (tmp_path / "d").mkdir()
    a = write_fasta(tmp_path / "d" / "a.fa", {"a": "ACGT"})
    b = write_fasta(tmp_path / "d" / "b.fasta.gz", {"b": "ACGT"}, gz=True)
    (tmp_path / "d" / "notes.txt").write_text("x")
    assert expand_paths(str(tmp_path / "d")) == [a, b]
    assert expand_paths([str(tmp_path / "d" / "*.fa")]) == [a]
    with pytest.raises(DNADataError, match="no such"):
        expand_paths([str(tmp_path / "missing.fa")])
    with pytest.raises(DNADataError, match="no FASTA files"):
        expand_paths([str(tmp_path / "*.none")])
    write_fasta(tmp_path / "d" / "c.fa", {"a": "ACGT"})
    with pytest.raises(DNADataError, match="appears in both"):
        Genome(str(tmp_path / "d"))


# ---- splits -------------------------------------------------------------------------------------
def test_auto_split_partitions_every_record():
    lengths = {"x": 1000, "y": 101, "z": 5}
    spans = split_auto(lengths, 0.1, 0.05)
    for name, L in lengths.items():
        mine = sorted((s for s in spans if s.record == name), key=lambda s: s.start)
        assert mine[0].start == 0 and mine[-1].end == L
        assert all(a.end == b.start for a, b in zip(mine, mine[1:], strict=False))  # contiguous, no overlap
    x = {s.split: len(s) for s in spans if s.record == "x"}
    assert x == {"train": 850, "val": 100, "test": 50}
    assert [s.split for s in spans if s.record == "z"] == ["train"]  # too short to hold anything out


def test_split_by_records_and_unknown_name():
    lengths = {"a": 10, "b": 20, "c": 30}
    spans = split_by_records(lengths, val=["b"], test=["c"])
    assert {(s.record, s.split) for s in spans} == {("a", "train"), ("b", "val"), ("c", "test")}
    with pytest.raises(DNADataError, match="'d'"):
        split_by_records(lengths, val=["d"], test=[])


def test_bed_splits_and_errors(tmp_path):
    lengths = {"chr1": 1000, "chr2": 500}
    bed = tmp_path / "splits.bed"
    bed.write_text("# comment\nchr1\t0\t800\ttrain\nchr1 800 1000 valid\nchr2\t0\t500\tTest\n")
    spans = read_bed_splits(bed, lengths)
    assert spans == [Span("chr1", 0, 800, "train"), Span("chr1", 800, 1000, "val"), Span("chr2", 0, 500, "test")]
    for line, msg in [
        ("chr3 0 10 train", "no record named"),
        ("chr1 0 2000 train", "bad interval"),
        ("chr1 0 10 dev", "split must be"),
        ("chr1 0 train", "expected"),
        ("chr1 a 10 train", "integers"),
    ]:
        bed.write_text(line + "\n")
        with pytest.raises(DNADataError, match=msg):
            read_bed_splits(bed, lengths)


def test_datamodule_bed_split_keeps_held_out_bases_out_of_training(tmp_path, fasta):
    bed = tmp_path / "s.bed"
    bed.write_text("chr1 0 2000 train\nchr1 2000 3000 val\nchr2 0 1700 train\nplasmid 0 400 test\n")
    dm = DNADataModule(paths=[str(fasta)], window=64, batch_size=4, splits_bed=str(bed), samples_per_epoch=64)
    dm.setup("fit")
    ds = RandomWindows(dm.genome, dm.spans["train"], 64, 500, seed=1, rc_prob=0.0)
    for i in range(500):
        sp, start = sample_window(dm.spans["train"], 64, np.random.default_rng([1, 0, i]))
        assert sp.split == "train" and sp.start <= start and start + 1 <= sp.end
        assert not (sp.record == "chr1" and start + 65 > 2000)  # never reads into the val span
    assert len(ds) == 500
    batch = next(iter(dm.val_dataloader()))
    assert batch["input"].shape == (4, 64) and batch["reset"].all()


# ---- windows ------------------------------------------------------------------------------------
def test_make_example_ignores_n_targets_and_padding():
    ids = np.array([A, C, N, G, T], dtype=np.uint8)
    inp, tgt = make_example(ids, 6)
    assert inp.tolist() == [A, C, N, G, 0, 0]
    assert tgt.tolist() == [C, -100, G, T, -100, -100]
    inp, tgt = make_example(ids, 2)
    assert inp.tolist() == [A, C] and tgt.tolist() == [C, -100]


def test_tile_windows_score_every_base_once():
    spans = [Span("a", 10, 100), Span("b", 0, 37)]
    for window in (1, 7, 16, 200):
        scored = {}
        for sp, s in tile_windows(spans, window):
            for p in range(s + 1, min(s + window + 1, sp.end)):
                scored[(sp.record, p)] = scored.get((sp.record, p), 0) + 1
        expected = {("a", p) for p in range(11, 100)} | {("b", p) for p in range(1, 37)}
        assert set(scored) == expected and set(scored.values()) == {1}


def test_sample_window_covers_spans_uniformly():
    spans = [Span("a", 0, 1000), Span("b", 500, 600)]
    rng = np.random.default_rng(0)
    draws = [sample_window(spans, 100, rng) for _ in range(4000)]
    starts_a = [s for sp, s in draws if sp.record == "a"]
    assert min(starts_a) < 20 and max(starts_a) > 880 and max(starts_a) <= 900
    frac_b = sum(sp.record == "b" for sp, _ in draws) / len(draws)
    assert frac_b < 0.01  # b allows one start (600-500-100 -> 1), a allows 900


def test_random_windows_are_deterministic_per_epoch_and_rc(fasta):
    g = Genome([str(fasta)])
    spans = [Span("chr1", 0, 3000)]
    ds = RandomWindows(g, spans, 50, n=10, seed=3, rc_prob=0.5)
    assert torch.equal(ds[4]["input"], ds[4]["input"])
    assert not torch.equal(ds[4]["input"], ds[14]["input"])  # epoch 1 draws new windows
    seq = read_fasta(fasta)["chr1"]
    text = DNATokenizer().decode(seq)
    rc_text = DNATokenizer().decode(reverse_complement(seq))
    n_rc = 0
    for k in range(40):
        ex = ds[k]
        w = DNATokenizer().decode(np.append(ex["input"].numpy(), ex["target"][-1].item()).astype(np.uint8))
        fwd, rev = w in text, w in rc_text
        assert fwd or rev  # every window is a substring of the record or of its reverse complement
        n_rc += rev and not fwd
    assert 5 < n_rc < 35


def test_epoch_sampler_offsets_indices():
    s = EpochSampler(5)
    assert list(s) == [0, 1, 2, 3, 4]
    s.set_epoch(2)
    assert list(s) == [10, 11, 12, 13, 14] and len(s) == 5


# ---- truncated BPTT lanes -----------------------------------------------------------------------
def test_lanes_split_evenly_in_order():
    spans = [Span("a", 0, 100), Span("b", 0, 50), Span("c", 10, 60)]
    ls = lanes(spans, 4)
    assert [sum(map(len, lane)) for lane in ls] == [50, 50, 50, 50]
    flat = [(s.record, p) for lane in ls for s in lane for p in range(s.start, s.end)]
    assert flat == [(s.record, p) for s in spans for p in range(s.start, s.end)]


def test_lane_batches_continue_each_row(fasta):
    g = Genome([str(fasta)])
    spans = [Span("chr1", 0, 3000), Span("plasmid", 0, 400)]
    batches = list(LaneBatches(g, spans, window=64, batch_size=3))
    assert all(b["input"].shape == (3, 64) for b in batches)
    assert batches[0]["reset"].all()
    for prev, nxt in zip(batches, batches[1:], strict=False):
        for r in range(3):
            if not nxt["reset"][r] and (nxt["target"][r] != -100).any():
                assert nxt["input"][r, 0] == prev["target"][r, -1]  # the stream continues across windows
    chr1 = read_fasta(fasta)["chr1"]
    row0 = torch.cat([b["input"][0] for b in batches[:3]]).numpy()
    np.testing.assert_array_equal(row0, chr1[:192])
    assert sum(int(b["reset"][2]) for b in batches) >= 2  # lane 2 crosses into the plasmid: reset again


# ---- the record reader (FASTA, GenBank, EMBL) -------------------------------------------------------
def test_cr_only_line_endings_are_line_breaks(tmp_path):
    """An old-Mac FASTA (CR only) was one header line and no bases."""
    body = ">r1 first\rACGT\racgt\r>r2\rGGNN\r"
    (tmp_path / "cr.fa").write_bytes(body.encode())
    (tmp_path / "crlf.fa").write_bytes(body.replace("\r", "\r\n").encode())
    (tmp_path / "lf.fa").write_bytes(body.replace("\r", "\n").encode())
    want = read_fasta(tmp_path / "lf.fa")
    assert list(want) == ["r1", "r2"] and want["r1"].size == 8
    for name in ("cr.fa", "crlf.fa"):
        got = read_fasta(tmp_path / name)
        assert list(got) == list(want) and all((got[k] == want[k]).all() for k in want)
    (tmp_path / "bad.fa").write_bytes(b">r1\rACGT\rAXGT\r")
    with pytest.raises(FastaError, match="line 3: invalid character 'X'"):
        read_fasta(tmp_path / "bad.fa")


def test_crlf_split_across_read_blocks(tmp_path, monkeypatch):
    import strandline.data.fasta as fasta_mod

    monkeypatch.setattr(fasta_mod, "BLOCK", 5)  # ">a\r\nAC" splits the CRLF between blocks
    (tmp_path / "x.fa").write_bytes(b">a\r\nACG\r\nTT\r\n>b\r\nG\r\n")
    got = read_fasta(tmp_path / "x.fa")
    assert DNATokenizer().decode(got["a"]) == "ACGTT" and DNATokenizer().decode(got["b"]) == "G"


def test_record_name_splits_on_any_whitespace(tmp_path):
    """A tab stayed in the name, and r1<TAB>A / r1<TAB>B passed the duplicate check."""
    (tmp_path / "t.fa").write_text(">r1\tsome description\nACGT\n>r2 \t other\nGG\n")
    chunks = list(iter_records(tmp_path / "t.fa"))
    assert [c.name for c in chunks] == ["r1", "r2"]
    assert [c.description for c in chunks] == ["some description", "other"]
    (tmp_path / "dup.fa").write_text(">r1\tA\nACGT\n>r1\tB\nGG\n")
    with pytest.raises(FastaError, match="line 3: duplicate record name 'r1'"):
        read_fasta(tmp_path / "dup.fa")


def test_rna_u_is_read_as_t_and_counted(tmp_path, caplog):
    """U was silently N; now it is T and counted (FastaChunk.n_uracil), and training says so."""
    (tmp_path / "rna.fa").write_text(">m1\nACGUuR\n>m2\nACGT\n")
    chunks = list(iter_records(tmp_path / "rna.fa"))
    assert DNATokenizer().decode(chunks[0].ids) == "ACGTTN"
    assert [(c.n_uracil, c.n_ambiguous) for c in chunks] == [(2, 1), (0, 0)]
    with caplog.at_level("WARNING", logger="strandline.data.dna"):
        assert GenomeCache(tmp_path / "rna.fa").n_uracil == {"m1": 2}
    assert "rna.fa: read 2 RNA U bases as T" in caplog.text
    caplog.clear()
    GenomeCache(write_fasta(tmp_path / "dna.fa"))
    assert "RNA U" not in caplog.text


def _annotated(tmp_path, fmt: str, name: str):
    from Bio import SeqIO
    from Bio.Seq import Seq
    from Bio.SeqRecord import SeqRecord

    recs = [SeqRecord(Seq(SEQS[n]), id=n, name=n, description=f"{n} test", annotations={"molecule_type": "DNA"})
            for n in ("chr2", "plasmid")]  # fmt: skip
    path = tmp_path / name
    with gzip.open(path, "wt") if name.endswith(".gz") else open(path, "w") as f:
        SeqIO.write(recs, f, fmt)
    return path


@pytest.mark.parametrize("fmt,name", [("genbank", "g.gbk"), ("embl", "g.embl.gz"), ("genbank", "g.txt")])
def test_genbank_and_embl_give_the_same_chunks_as_fasta(tmp_path, fmt, name):
    path = _annotated(tmp_path, fmt, name)  # g.txt: detected from the LOCUS line, not the name
    chunks = list(iter_records(path, chunk_size=500))
    assert [c.offset for c in chunks if c.name == "chr2"] == [0, 500, 1000, 1500]
    got = read_fasta(path)
    ref = read_fasta(write_fasta(tmp_path / "ref.fa", {n: SEQS[n] for n in ("chr2", "plasmid")}))
    assert list(got) == list(ref) and all((got[k] == ref[k]).all() for k in ref)
    assert sum(c.n_ambiguous for c in chunks) == 0 and not any(c.soft.any() for c in chunks)
    cache = Genome([str(path)])  # training reads them too
    assert cache.lengths == {"chr2": 1700, "plasmid": 400}


def test_annotated_errors_are_one_line(tmp_path):
    path = _annotated(tmp_path, "genbank", "g.gb")
    path.write_text(path.read_text()[:400])  # cut inside the sequence
    with pytest.raises(FastaError, match="g.gb: malformed genbank file") as e:
        read_fasta(path)
    assert "\n" not in str(e.value)
    (tmp_path / "e.embl").write_text(
        "ID   x; SV 1; linear; DNA; STD; UNC; 4 BP.\nXX\nSQ   Sequence 4 BP;\n     acgx\n//\n"
    )
    with pytest.raises(FastaError, match="e.embl"):
        read_fasta(tmp_path / "e.embl")


@pytest.mark.parametrize(
    "kw,needle",
    [
        ({"window": 0}, "data.window must be >= 1"),
        ({"batch_size": -2}, "data.batch_size must be >= 1"),
        ({"val_fraction": 0.6, "test_fraction": 0.5}, "val_fraction + test_fraction must lie in [0, 1)"),
        ({"rc_prob": 1.5}, "data.rc_prob must lie in [0, 1]"),
        ({"eval_window": 0}, "data.eval_window must be >= 1"),
    ],
)
def test_datamodule_options_that_cannot_work_are_one_line(fasta, kw, needle):
    with pytest.raises(DNADataError, match=re.escape(needle)):
        DNADataModule(paths=[str(fasta)], **kw)


def test_bed_splits_that_are_not_text_are_one_line(tmp_path):
    (tmp_path / "s.bed").write_bytes(b"chr1\t0\t10\ttrain\n\xff\xfe\n")
    with pytest.raises(DNADataError, match="not a text BED file"):
        read_bed_splits(tmp_path / "s.bed", {"chr1": 100})

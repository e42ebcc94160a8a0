"""The multi-genome corpus (data/fetch_corpus.py, data/corpus.json) and its panel benchmark (benchmarks/dna_panel.py).

Offline: packages are tiny synthetic .deb files made here and handed to the fetch through its downloader, and
the panel runs on tiny FASTAs with a tiny untrained model.
"""

from __future__ import annotations

import gzip
import io
import json
import lzma
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch

import strandline.data.fetch_corpus as fc
from strandline.data.fetch_genomes import deb_data_tar

ROOT = Path(__file__).resolve().parents[1]
MEMBER = "./usr/share/doc/toy-examples/genome.fa.gz"


# ---- the committed manifest --------------------------------------------------------------------------------------
def test_manifest_schema_and_splits():
    m = fc.load_manifest()
    fc.check_manifest(m, "data/corpus.json", complete=True)  # every computed field is filled in
    entries = m["genomes"]
    for e in entries:
        assert len(e["sha256"]) == 64 and e["bases"] >= 20_000 and 0 < e["gc"] < 100, e["name"]
        assert e["source"]["version"] and e["licence"], e["name"]
    split = {e["name"]: e["split"] for e in entries}
    assert split["h_pylori_G27"] == split["lambda"] == "train"  # the shipped genomes are old training data
    test = [e for e in entries if e["split"] == "test"]
    gcs = sorted(e["gc"] for e in test if e["kind"] == "bacterium")
    assert len(gcs) >= 2 and gcs[0] < 35 and gcs[-1] > 65
    assert any(e["kind"] in ("phage", "organelle") for e in test)
    assert {"train", "val", "test"} == set(split.values())
    # chr20 pieces: disjoint, 1 Mb apart, test = 50 Mb to the end
    pieces = sorted((e["region"]["start"], e["region"]["end"], e["split"]) for e in entries if e.get("region"))
    assert [p[2] for p in pieces] == ["train", "val", "test"]
    for a, b in zip(pieces, pieces[1:], strict=False):
        assert b[0] - a[1] >= 1_000_000
    assert pieces[-1][0] == 50_000_000 and pieces[-1][1] - pieces[-1][0] >= 10_000_000
    assert "data/cache/" in (ROOT / ".gitignore").read_text()


def _entry(name, split="train", **kw):
    e = {"name": name, "file": f"{name}.fa.gz", "organism": "x", "kind": "bacterium", "split": split}
    e["source"] = {"type": "deb", "package": "toy-examples", "version": "1.0-1", "member": MEMBER}
    e.update(kw)
    return e


def test_manifest_refuses_one_genome_in_two_entries_and_overlapping_pieces():
    with pytest.raises(fc.FetchError, match="one source file in several entries"):
        fc.check_manifest({"genomes": [_entry("a"), _entry("b", "test")]}, complete=False)
    r = lambda s, e: {"record": "chr", "start": s, "end": e}  # noqa: E731
    ok = [_entry("a", region=r(0, 100)), _entry("b", "test", region=r(200, 300))]
    fc.check_manifest({"genomes": ok}, complete=False)
    bad = [_entry("a", region=r(0, 250)), _entry("b", "test", region=r(200, 300))]
    with pytest.raises(fc.FetchError, match="overlap"):
        fc.check_manifest({"genomes": bad}, complete=False)
    with pytest.raises(fc.FetchError, match="split"):
        fc.check_manifest({"genomes": [_entry("a", split="holdout")]}, complete=False)


# ---- a synthetic .deb ------------------------------------------------------------------------------------------
def _tar_xz(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return lzma.compress(buf.getvalue())


def make_deb(path: Path, files: dict[str, bytes]) -> Path:
    """An ``ar`` archive laid out as a Debian package: debian-binary, control.tar.xz, data.tar.xz."""
    members = [
        ("debian-binary", b"2.0\n"),
        ("control.tar.xz", _tar_xz({"./control": b"Package: toy-examples\n"})),
        ("data.tar.xz", _tar_xz(files)),
    ]
    out = bytearray(b"!<arch>\n")
    for name, data in members:
        out += f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{len(data):<10}`\n".encode()
        out += data + (b"\n" if len(data) % 2 else b"")
    path.write_bytes(bytes(out))
    return path


COPYRIGHT = b"""Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: toy

Files: *
Copyright: someone
License: BSD-3-clause

Files: debian/*
License: GPL-2+
"""


def _genome(seed: int, n: int = 3000) -> bytes:
    rng = np.random.default_rng(seed)
    seq = np.frombuffer(b"ACGT", np.uint8)[rng.integers(0, 4, n)].tobytes()
    return b">chr toy genome\n" + seq[: n // 2] + b"\n" + seq[n // 2 :] + b"\n"


def toy_deb(tmp_path: Path, seed: int = 0) -> Path:
    files = {
        MEMBER: gzip.compress(_genome(seed)),
        "./usr/share/doc/toy-examples/copyright": COPYRIGHT,
    }
    return make_deb(tmp_path / f"toy-examples_1.0-1_all_{seed}.deb", files)


def test_deb_unpacking_and_licence(tmp_path):
    deb = toy_deb(tmp_path)
    with deb_data_tar(deb.read_bytes()) as tar:
        assert fc.member_bytes(tar, MEMBER, "toy")[:2] == b"\x1f\x8b"
        assert fc.package_licence(tar, {"type": "deb", "package": "toy-examples"}) == "BSD-3-clause"
        fasta = fc.build_fasta(tar, _entry("g", region={"record": "chr", "start": 10, "end": 100}))
    assert fasta.startswith(b">chr:11-100 x\n") and fc.fasta_stats(fasta)["bases"] == 90


# ---- fetch: idempotent, checksummed, one-line errors -----------------------------------------------------------
class FakeApt:
    def __init__(self, deb: Path):
        self.deb, self.calls = deb, 0

    def __call__(self, source: dict, tmp: Path) -> Path:
        self.calls += 1
        return Path(shutil.copy(self.deb, tmp / self.deb.name))


@pytest.fixture
def toy_corpus(tmp_path):
    manifest = tmp_path / "corpus.json"
    region = {"record": "chr", "start": 0, "end": 1000}
    entries = [_entry("toy.train", region=region), _entry("toy.test", "test", region={**region, "start": 2000})]
    entries[1]["region"]["end"] = 3000
    manifest.write_text(json.dumps({"description": "toy", "genomes": entries}))
    return manifest, tmp_path / "out", FakeApt(toy_deb(tmp_path))


def test_fetch_writes_checks_and_keeps(toy_corpus, capsys):
    manifest, out, apt = toy_corpus
    assert fc.main(["--manifest", str(manifest), "--out", str(out), "--update-manifest"], downloader=apt) == 0
    m = fc.load_manifest(manifest)
    fc.check_manifest(m, complete=True)
    assert [e["bases"] for e in m["genomes"]] == [1000, 1000] and m["genomes"][0]["licence"] == "BSD-3-clause"
    assert fc.sha256(gzip.decompress((out / "toy.test.fa.gz").read_bytes())) == m["genomes"][1]["sha256"]
    capsys.readouterr()
    before = (out / "toy.train.fa.gz").stat().st_mtime_ns
    assert fc.main(["--manifest", str(manifest), "--out", str(out)], downloader=apt) == 0
    assert "kept" in capsys.readouterr().out and apt.calls == 1  # the re-run downloads nothing
    assert (out / "toy.train.fa.gz").stat().st_mtime_ns == before
    (out / "toy.test.fa.gz").unlink()
    assert fc.main(["--manifest", str(manifest), "--out", str(out), "--only", "toy.test"], downloader=apt) == 0
    assert apt.calls == 2 and (out / "toy.test.fa.gz").is_file()


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_checksum_mismatch_is_a_one_line_error(toy_corpus, capsys):
    manifest, out, apt = toy_corpus
    assert fc.main(["--manifest", str(manifest), "--out", str(out), "--update-manifest"], downloader=apt) == 0
    (out / "toy.test.fa.gz").write_bytes(gzip.compress(b">chr\nACGT\n"))  # a damaged cache
    capsys.readouterr()
    assert fc.main(["--manifest", str(manifest), "--out", str(out)], downloader=apt) == 2
    err = _one_line(capsys)
    assert "toy.test.fa.gz" in err and "sha256" in err
    # a package whose FASTA changed: refused, nothing written
    (out / "toy.test.fa.gz").unlink()
    other = FakeApt(toy_deb(out.parent, seed=1))
    assert fc.main(["--manifest", str(manifest), "--out", str(out)], downloader=other) == 2
    err = _one_line(capsys)
    assert "toy.test.fa.gz" in err and "not written" in err and not (out / "toy.test.fa.gz").exists()
    assert fc.main(["--manifest", str(manifest), "--out", str(out), "--only", "nope"], downloader=apt) == 2
    assert "nope" in _one_line(capsys)


def test_kmer_jaccard_finds_near_identical_genomes():
    a = np.frombuffer(_genome(0, 20000).split(b"\n", 1)[1].replace(b"\n", b""), np.uint8)
    b = a.copy()
    b[::997] = ord("A")  # a strain: a few substitutions
    c = np.frombuffer(_genome(5, 20000).split(b"\n", 1)[1].replace(b"\n", b""), np.uint8)
    sk = {n: fc.kmer_sketch([x.tobytes()], keep=4) for n, x in (("a", a), ("b", b), ("c", c))}
    pairs = fc.duplicate_pairs(sk)
    assert [(p[1], p[2]) for p in pairs] == [("a", "b")] and pairs[0][0] > 0.7


# ---- the panel benchmark ---------------------------------------------------------------------------------------
def test_markov_fit_counts_as_the_original_and_scores_every_base():
    import benchmarks.dna_quality as dq

    rng = np.random.default_rng(0)
    seqs = [rng.integers(4, 9, 3000).astype(np.uint8), rng.integers(4, 8, 5).astype(np.uint8)]
    slow, fast = dq.MarkovModel(seqs, 4), dq.MarkovModel.fit(seqs, 4, piece=257)
    assert all((x == y).all() for x, y in zip(slow.counts, fast.counts, strict=True))
    val = rng.integers(4, 8, 800).astype(np.uint8)
    grid = fast.grid_bits([val], [0.5])
    b = fast.position_bits(val, 0.5)
    assert np.isnan(b[0]) and np.isfinite(b[1:]).all()
    assert grid[(4, 0.5)][0] == pytest.approx(b[1:].sum()) and grid[(4, 0.5)][1] == 799
    assert grid[(4, 0.5)][0] == pytest.approx(slow.nll_bits([val], 0.5)[0])  # no N: the original's bits


def test_repeat_mask_marks_positions_after_an_earlier_32mer():
    from benchmarks.dna_panel import repeat_mask

    rng = np.random.default_rng(3)
    seg = rng.integers(4, 8, 100).astype(np.uint8)
    near = rng.integers(4, 8, 100).astype(np.uint8)
    rec = np.concatenate([seg, rng.integers(4, 8, 600).astype(np.uint8), seg, near, near])
    m = repeat_mask([rec])
    assert m[700 + 32 : 800].all() and not m[: 700 + 32].any()  # the copy 700 bases later
    assert not m[900:1000].any()  # a copy 100 bases later is too near
    two = repeat_mask([rec[:700], rec[700:]])  # across records of one genome
    assert two[700 + 32 : 800].all()


def test_panel_quick_on_tiny_fastas(tmp_path, capsys):
    from test_io import tiny

    import benchmarks.dna_panel as panel
    from strandline.models.persist.modeldir import save_model

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    entries = []
    for seed, (name, split, kind) in enumerate([("trainer", "train", "bacterium"), ("panel", "test", "phage")]):
        fasta = _genome(seed, 6000)
        (corpus / f"{name}.fa.gz").write_bytes(gzip.compress(fasta))
        e = _entry(name, split, kind=kind, **fc.fasta_stats(fasta), sha256=fc.sha256(fasta), licence="MIT")
        e["source"]["member"] += name
        entries.append(e)
    manifest = tmp_path / "corpus.json"
    manifest.write_text(json.dumps({"genomes": entries}))
    save_model(tiny(), tmp_path / "m", tokenizer="dna")
    results = ROOT / "benchmarks" / "results" / "dna_panel.json"
    before = results.read_bytes() if results.is_file() else None
    argv = ["--manifest", str(manifest), "--corpus", str(corpus), "--model", str(tmp_path / "m")]
    assert panel.main([*argv, "--quick", "2000", "--max-k", "3"]) == 0
    out = capsys.readouterr().out
    assert "| panel | phage |" in out and "Markov k=" in out and "| uniform | m | best |" in out
    assert "chosen on train (no val genomes)" in out and "--quick 2000" in out
    assert ("| genome | kind | GC% | bases |") in out and "2,000" in out
    assert (results.read_bytes() if results.is_file() else None) == before  # written only with --save
    with pytest.raises(SystemExit, match="trainer: not a genome of this split"):
        panel.main([*argv, "--quick", "2000", "--max-k", "3", "--genomes", "trainer"])
    assert panel.main([*argv, "--quick", "2000", "--max-k", "3", "--genomes", "panel"]) == 0
    assert "| panel | phage |" in capsys.readouterr().out


def test_panel_reuses_a_scored_model_from_its_cache(tmp_path, capsys, monkeypatch):
    from test_io import tiny

    import benchmarks.dna_panel as panel
    from strandline.models.persist.modeldir import save_model

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    entries = []
    for seed, (name, split) in enumerate([("trainer", "train"), ("panel", "test")]):
        fasta = _genome(seed, 3000)
        (corpus / f"{name}.fa.gz").write_bytes(gzip.compress(fasta))
        e = _entry(name, split, kind="bacterium", **fc.fasta_stats(fasta), sha256=fc.sha256(fasta), licence="MIT")
        e["source"]["member"] += name
        entries.append(e)
    manifest = tmp_path / "corpus.json"
    manifest.write_text(json.dumps({"genomes": entries}))
    save_model(tiny(), tmp_path / "m", tokenizer="dna")
    argv = ["--manifest", str(manifest), "--corpus", str(corpus), "--model", str(tmp_path / "m"), "--max-k", "3",
            "--cache", str(tmp_path / "cache")]  # fmt: skip
    assert panel.main(argv) == 0
    first = capsys.readouterr().out.split("# total")[0]
    assert len(list((tmp_path / "cache").glob("*.npy"))) == 1

    def streamed(*a, **k):
        raise AssertionError("the model was streamed again")

    monkeypatch.setattr(panel, "model_position_bits", streamed)
    monkeypatch.setattr(panel.MarkovModel, "fit", streamed)  # the train counts come from the cache too
    assert len(list((tmp_path / "cache").glob("markov-*.npz"))) == 1
    assert panel.main(argv) == 0
    again = capsys.readouterr().out.split("# total")[0]
    strip = [line for line in again.splitlines() if not line.startswith("# panel")]  # its timing line differs
    assert strip == [line for line in first.splitlines() if not line.startswith("# panel")]
    torch.manual_seed(1)
    save_model(tiny(), tmp_path / "m", tokenizer="dna", overwrite=True)  # other weights: another key
    with pytest.raises(AssertionError, match="streamed again"):
        panel.main(argv)


def test_corpus_card_lists_every_training_file_and_the_panel_record(tmp_path):
    from test_io import tiny

    import benchmarks.corpus_card as card
    from strandline.models.persist.modeldir import save_model

    save_model(tiny(), tmp_path / "m", tokenizer="dna", training={"global_step": 10})
    manifest = json.loads((ROOT / "data" / "corpus.json").read_text())
    panel = {"columns": ["genome", "bits"], "rows": [["g1", "1.9"]], "command": "python x.py", "date": "2026-12-04",
             "commit": "abc1234", "caveats": ["one caveat"]}  # fmt: skip
    (tmp_path / "panel.json").write_text(json.dumps(panel))
    argv = [str(tmp_path / "m"), "--recipe", "configs/dna/corpus-131k-cpu.yaml", "--params", "1234", "--wall-min", "2",
            "--peak-rss-mb", "900", "--panel", str(tmp_path / "panel.json")]  # fmt: skip
    assert card.main(argv) == 0
    text = (tmp_path / "m" / "README.md").read_text()
    for e in manifest["genomes"]:
        assert (f"`{e['sha256']}`" in text) == (e["split"] in ("train", "val")), e["name"]
    assert "10 optimizer steps of 1 x 131,072 bases = 1.3M tokens" in text
    assert "| g1 | 1.9 |" in text and "at commit abc1234" in text and "- one caveat" in text


def test_online_markov_counts_only_what_came_before():
    """The sort-based online model equals a loop that counts as it reads, across two records and an N."""
    import benchmarks.dna_panel as panel

    rng = np.random.default_rng(0)
    recs = [rng.integers(4, 8, 300).astype(np.uint8), rng.integers(4, 8, 200).astype(np.uint8)]
    recs[0][50] = 8  # an N: no context through it, no target at it
    k, alpha = 3, 0.5
    got = panel.online_markov_bits(recs, k, alpha)
    counts: dict = {}
    want, off = np.full(500, np.nan), 0
    for r in recs:
        for i in range(1, len(r)):
            if not 4 <= r[i] <= 7:
                continue
            ctx = tuple(r[max(0, i - k) : i])
            if i < k or any(not 4 <= b <= 7 for b in ctx):
                want[off + i] = 2.0
                continue
            c = counts.setdefault(ctx, np.zeros(4))
            want[off + i] = -np.log2((c[r[i] - 4] + alpha) / (c.sum() + 4 * alpha))
            c[r[i] - 4] += 1
        off += len(r)
    assert np.allclose(got, want, equal_nan=True)
    twice = panel.online_markov_bits([np.concatenate([recs[1], recs[1]])], 10, 0.5)
    assert np.nanmean(twice[210:]) < 1.01 < 1.9 < np.nanmean(twice[:200])  # the second copy is predicted (p = 1.5 / 3)


def test_corpus_card_layers_recipes_as_the_cli_does(tmp_path):
    """A sweep point's recipe is the base recipe with a fragment over it: later keys win, nested maps merge."""
    import benchmarks.corpus_card as card

    base = {"trainer": {"max_steps": 10, "max_time": "x"}, "model": {"model": {"d_model": 64, "n_layers": 2}}}
    got = card.merge(base, {"trainer": {"max_steps": 99}, "model": {"model": {"d_model": 128, "kmer_orders": [4]}}})
    assert got == {"trainer": {"max_steps": 99, "max_time": "x"},
                   "model": {"model": {"d_model": 128, "n_layers": 2, "kmer_orders": [4]}}}  # fmt: skip


def test_corpus_card_describes_scan_tables_set_apart_from_the_recipe():
    """A shipped config whose k-mer tables differ from its recipe's gets a section saying both and the state's size;
    one that matches its recipe gets none."""
    import benchmarks.corpus_card as card

    trained = {"kmer_orders": [4, 12, 20], "kmer_buckets": 1 << 18, "kmer_decay": 0.99}
    assert card.memory_section(trained, dict(trained), "note") == []
    shipped = {**trained, "kmer_buckets": 1 << 24, "kmer_decay": [0.99, 0.99, 1.0]}
    text = "\n".join(card.memory_section(trained, shipped, "Chosen on val."))
    assert "## Memory at scan time" in text and "262,144 buckets" in text and "16,777,216 buckets" in text
    assert "1.81 GB in float64" in text and text.rstrip().endswith("Chosen on val.")


def test_sweep_scores_points_on_val_genomes_only(tmp_path, capsys):
    """dna_sweep: each point's size and tokens beside its bits on the val genomes; the test genome is not read."""
    from test_io import tiny

    import benchmarks.dna_sweep as sweep
    from strandline.models.persist.modeldir import save_model

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    entries = []
    for seed, (name, split) in enumerate([("trainer", "train"), ("chooser", "val"), ("panel", "test")]):
        fasta = _genome(seed, 3000)
        (corpus / f"{name}.fa.gz").write_bytes(gzip.compress(fasta))
        e = _entry(name, split, kind="bacterium", **fc.fasta_stats(fasta), sha256=fc.sha256(fasta), licence="MIT")
        e["source"]["member"] += name
        entries.append(e)
    (corpus / "panel.fa.gz").write_bytes(b"not read")  # a test genome read by mistake would fail
    manifest = tmp_path / "corpus.json"
    manifest.write_text(json.dumps({"genomes": entries}))
    model = tiny()
    save_model(model, tmp_path / "m", tokenizer="dna", training={"global_step": 10})
    argv = ["--manifest", str(manifest), "--corpus", str(corpus), "--point", str(tmp_path / "m"), "--max-k", "2",
            "--quick", "2000"]  # fmt: skip
    assert sweep.main(argv) == 0
    out = capsys.readouterr().out
    assert "| tokens | chooser | mean (by base) | bacteria mean |" in out and "| panel" not in out
    params = sum(p.numel() for p in model.parameters())
    assert f"(sweep) | {model.config.d_model} |" in out and f"| {params:,} |" in out
    assert "| 10 | 0.0 M |" in out  # 10 steps x 16 x 256 tokens of the base recipe

"""scan --calls: windows whose surprisal departs from the record's background, as merged BED6 regions."""

from __future__ import annotations

import numpy as np
import pytest

from strandline.data.calls import call_regions, robust_z, window_surprisal, write_calls


def _track(path, records: dict[str, np.ndarray]) -> str:
    lines = []
    for c, v in records.items():
        lines += [f"{c}\t{i}\t{i + 1}\t{x:.5f}\n" for i, x in enumerate(v) if not np.isnan(x)]
    path.write_text("".join(lines))
    return str(path)


def test_an_island_and_a_repeat_are_called_merged_with_their_sign(tmp_path):
    rng = np.random.default_rng(0)
    v = -2.0 + rng.normal(0, 0.3, 60_000)  # log2 P: background ~2 bits/base
    v[20_000:23_000] -= 1.0  # an island: 3 kb a bit more surprising
    v[40_000:41_000] += 1.5  # a repeat: 1 kb predicted well
    v[50_000:50_700] = np.nan  # an N run: the window has too few scored bases to be called
    track = _track(tmp_path / "t.bedGraph", {"chr": v, "tiny": v[:5_000]})
    lengths = {"chr": 60_000, "tiny": 5_000}
    out = tmp_path / "calls.bed"
    assert write_calls(out, track, lengths, window=1000, threshold=3.5) == 2
    rows = [line.split("\t") for line in out.read_text().splitlines()]
    assert [(r[0], int(r[1]), int(r[2]), r[3].split(":")[0], r[5]) for r in rows] == [
        ("chr", 20_000, 23_000, "high", "."),
        ("chr", 40_000, 41_000, "low", "."),
    ]
    assert all(0 < int(r[4]) <= 1000 and float(r[3].split(":")[1]) >= 3.5 for r in rows)  # "tiny": 5 windows only


def test_window_means_are_exact_across_blocks_runs_and_a_short_last_window(tmp_path):
    path = tmp_path / "t.bedGraph"
    path.write_text("r\t0\t1500\t-1\nr\t1500\t2500\t-3\nr\t2600\t2650\t-2\n")  # runs across window edges, a gap
    ((bases, x),) = window_surprisal(path, {"r": 2650}, 1000).values()
    assert bases.tolist() == [1000, 1000, 550]
    assert x.tolist() == pytest.approx([1.0, (500 * 1 + 500 * 3) / 1000, (500 * 3 + 50 * 2) / 550])


def test_robust_z_ignores_the_outliers_it_finds():
    x = np.r_[np.full(50, 2.0) + np.linspace(-0.01, 0.01, 50), [5.0, 9.0]]
    z = robust_z(x)
    assert z[-1] > z[-2] > 100 and abs(np.median(z)) < 1e-9
    assert not robust_z(np.full(20, 2.0)).any()  # a flat record: no z, no calls
    assert call_regions({"r": (np.full(20, 1000.0), np.full(20, 2.0))}, {"r": 20_000}, 1000, 3.5) == []


def test_scan_writes_calls_and_refuses_them_without_logprob(tmp_path, capsys):
    from pathlib import Path

    from strandline.app.cli import main

    genome = str(Path(__file__).resolve().parents[1] / "data" / "genomes" / "lambda.fasta.gz")
    out = tmp_path / "o.bedGraph"
    assert main(["scan", "dna-corpus-tbptt", genome, "-o", str(out), "--calls", str(tmp_path / "c.bed")]) == 0
    for line in (tmp_path / "c.bed").read_text().splitlines():
        c, s, e, name, score, strand = line.split("\t")
        assert c == "NC_001416.1" and int(s) % 1000 == 0 and int(e) > int(s) and strand == "."
    argv = ["scan", "dna-corpus-tbptt", genome, "-o", str(tmp_path / "e.bedGraph"), "--track", "entropy",
            "--calls", str(tmp_path / "d.bed")]  # fmt: skip
    assert main(argv) == 2 and "add logprob" in capsys.readouterr().err

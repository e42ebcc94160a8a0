"""The public API (``strandline.load / score / summarize / generate``) and the docs page that shows it."""

from __future__ import annotations

import gzip
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import strandline
from strandline.errors import UserInputError

ROOT = Path(__file__).resolve().parents[1]
LAMBDA = ROOT / "data/genomes/lambda.fasta.gz"


def test_import_is_cheap_and_lists_the_api():
    r = subprocess.run(
        [sys.executable, "-c", "import sys, strandline; print('torch' in sys.modules, sorted(strandline.__all__))"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("False")  # the API is imported on first use
    for name in ("load", "score", "summarize", "generate"):
        assert name in r.stdout


def test_load_gives_a_model_or_a_summarizer():
    from strandline.models.lm import LinearTransformerLM
    from strandline.tasks.summarize import Summarizer

    assert isinstance(strandline.load("dna-corpus-tbptt"), LinearTransformerLM)
    assert isinstance(strandline.load(ROOT / "data/models/summarizer"), Summarizer)
    with pytest.raises(UserInputError, match="no such model"):
        strandline.load("no-such-model")


def _two_records(tmp_path: Path) -> Path:
    from strandline.data.fasta import read_fasta
    from strandline.data.tokenizers import get_tokenizer

    seq = get_tokenizer("dna").decode(next(iter(read_fasta(LAMBDA).values())))
    path = tmp_path / "two.fa"
    path.write_text(f">one\n{seq[:9000]}\n>two with N\n{seq[20000:22000]}NNNN{seq[30000:31000]}\n")
    return path


def test_score_equals_the_scans_logprob_track(tmp_path):
    """The numbers of ``strandline scan``'s logprob track, to the track's printed precision (%.6g)."""
    from strandline.tasks.scan import ScanArgs, scan

    fasta = _two_records(tmp_path)
    scan(
        ScanArgs(str(ROOT / "data/models/dna-corpus-tbptt"), [str(fasta)], str(tmp_path / "t.bedGraph")), progress=False
    )
    rows = [line.split("\t") for line in (tmp_path / "t.bedGraph").read_text().splitlines()]
    # A scan turns oneDNN off (tasks/scan/job.py); its float32 kernels move this model's scores by up to ~7e-6
    # bits, more than the printed precision, so the scores are computed with the same kernels here.
    onednn = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = False
    try:
        tracks = strandline.score("dna-corpus-tbptt", fasta)
    finally:
        torch.backends.mkldnn.enabled = onednn
    assert list(tracks) == ["one", "two"] and [len(v) for v in tracks.values()] == [9000, 3004]
    printed = {(r[0], int(r[1])): float(r[3]) for r in rows}
    assert len(printed) == 9000 + 3000  # every base once, the 4 N bases carry no value
    for name, values in tracks.items():
        i = np.flatnonzero(np.isfinite(values))
        want = np.array([printed[name, j] for j in i])
        np.testing.assert_allclose(values[i], want, rtol=6e-6, atol=0)  # %.6g: half a unit in the 6th digit
    assert np.isnan(tracks["two"][2000:2004]).all()


def test_score_of_a_sequence_matches_the_file_and_gaps_n(tmp_path):
    from strandline.data.fasta import read_fasta
    from strandline.data.tokenizers import get_tokenizer

    lm = strandline.load("dna-corpus-tbptt")
    fasta = _two_records(tmp_path)
    seq = get_tokenizer("dna").decode(read_fasta(fasta)["one"][:3000])
    whole = strandline.score(lm, seq)
    from_file = strandline.score(lm, str(fasta))["one"][:3000]
    np.testing.assert_allclose(whole, from_file, rtol=1e-5, atol=1e-5)  # float32 products of other lengths
    # Any split gives the same numbers (chunks of at most 512 bases take the batched op, longer ones the chunked
    # op: both compute elu(x) + 1 as e^x for x <= 0); in float64 to rounding, in float32 to its precision.
    np.testing.assert_allclose(strandline.score(lm, seq, chunk=97), whole, rtol=1e-5, atol=1e-5)
    lm64 = strandline.load("dna-corpus-tbptt").double()
    split = strandline.score(lm64, seq, chunk=97)
    np.testing.assert_allclose(split, strandline.score(lm64, seq), rtol=0, atol=1e-12)
    np.testing.assert_allclose(whole, split, rtol=1e-5, atol=1e-5)  # float32 against float64
    gapped = strandline.score(lm, "ACGTNNNACGT".lower())
    assert np.isnan(gapped[4:7]).all() and np.isfinite(gapped[:4]).all()
    assert lm.config.state_dtype == "float32"  # score's float64 state is not left on the user's model
    with pytest.raises(UserInputError, match="invalid DNA character"):
        strandline.score(lm, "ACGT hello")


def test_score_refuses_a_text_model():
    from strandline.models import LinearTransformerLM, ModelConfig

    lm = LinearTransformerLM(ModelConfig(vocab_size=260, d_model=16, n_layers=1, n_heads=2))
    lm.meta = {"tokenizer": "bytes"}
    with pytest.raises(UserInputError, match="cannot score DNA"):
        strandline.score(lm, "ACGT")


def test_summarize_matches_the_command(capsys, tmp_path):
    from strandline.app.summarize import summarize as summarize_cmd

    doc = tmp_path / "doc.txt"
    doc.write_text((ROOT / "data/documents/2022.acl-long.286.txt").read_text()[:12000])
    got = strandline.summarize("summarizer", doc.read_text(), budget=50)
    assert summarize_cmd(str(ROOT / "data/models/summarizer"), str(doc), budget=50, progress=False) == 0
    printed = capsys.readouterr().out.splitlines()
    assert got.splitlines() == [line for line in printed if line and not line.startswith("===")]
    gz = tmp_path / "doc.md.gz"  # a Path is read as the command reads a file: here Markdown, gzip-compressed
    gz.write_bytes(gzip.compress(("# Notes\n\n**Bold** words. " + doc.read_text()).encode()))
    assert strandline.summarize("summarizer", gz, budget=50) == strandline.summarize(
        "summarizer", "Notes\n\nBold words. " + doc.read_text(), budget=50
    )
    with pytest.raises(UserInputError, match="needs a summarizer"):
        strandline.summarize("dna-corpus-tbptt", "Some text.")


def test_generate_matches_the_command(capsys):
    from strandline.app.generate import generate as generate_cmd

    text = strandline.generate("dna-corpus-tbptt", "ACGT", max_new_tokens=30, seed=3)
    generate_cmd(str(ROOT / "data/models/dna-corpus-tbptt"), "ACGT", max_new_tokens=30, seed=3)
    assert capsys.readouterr().out.strip() == text and len(text) == 34 and set(text) <= set("ACGT")


def _code_blocks(md: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", md.read_text(), flags=re.S)


def test_the_api_docs_run_as_written(tmp_path, monkeypatch):
    blocks = _code_blocks(ROOT / "docs/api.md")
    assert len(blocks) >= 5
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    for i, code in enumerate(blocks):
        try:
            exec(compile(code, f"docs/api.md block {i + 1}", "exec"), scope)
        except Exception as e:  # the block's number and text in the failure
            raise AssertionError(f"docs/api.md block {i + 1} failed: {e!r}\n{code}") from e

"""``strandline score-variants``: a forked score equals scoring the two whole sequences from scratch (SNV, insertion,
deletion, multi-allelic, at a contig's end, with a warm-up), with and without the k-mer memory; a fork leaves the
carried state bit for bit as it was; bad input is one line, exit 2, and nothing written."""

from __future__ import annotations

import gzip
import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
import torch

import strandline.tasks.scan.variants as variants
from strandline.app.cli import main
from strandline.data.tokenizers import BOS, DNA_LUT, A
from strandline.models import LinearTransformerLM, ModelConfig
from strandline.tasks.scan.variants import (
    Carry,
    VariantArgs,
    VariantError,
    VariantScorer,
    forked_logits,
    score_variants,
)

needs_vcf = pytest.mark.skipif(importlib.util.find_spec("cyvcf2") is None, reason="cyvcf2 (the variants extra)")
HEADER = "##fileformat=VCFv4.2\n#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\n"


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster


def tiny(kmer: bool) -> LinearTransformerLM:
    """A random float64 model (float64 state too); with the k-mer memory it trusts its matches, decays (so rebases
    happen) and has few buckets (so they collide)."""
    torch.manual_seed(0)
    kw = {"kmer_orders": [3, 8], "kmer_buckets": 64, "kmer_decay": [0.97, 1.0]} if kmer else {}
    cfg = ModelConfig(d_model=32, n_layers=2, n_heads=2, chunk_size=16, state_dtype="float64", **kw)
    model = LinearTransformerLM(cfg).double().eval()
    if kmer:
        with torch.no_grad():
            model.memory.gate.bias.fill_(2.0)
    model.meta = {"tokenizer": "dna"}
    return model


def ids(seq: str) -> np.ndarray:
    return DNA_LUT[np.frombuffer(seq.encode(), np.uint8)]


@torch.inference_mode()
def base_bits(model, seq: str) -> np.ndarray:
    """-log2 P of every base of ``seq`` read from scratch (BOS first), over A/C/G/T; 0 for N."""
    x = ids(seq)
    inp = torch.from_numpy(np.concatenate([[BOS], x[:-1]]).astype(np.int64))[None]
    lp = torch.log_softmax(model(inp)[0][0, :, A : A + 4].double(), -1) / math.log(2)
    tgt = torch.from_numpy(x.astype(np.int64)) - A
    ok = (tgt >= 0) & (tgt < 4)
    return np.where(ok.numpy(), -lp.gather(1, tgt.clamp(0, 3)[:, None])[:, 0].numpy(), 0.0)


def expected(model, seq: str, pos: int, ref: str, alt: str, window: int, start: int = 0) -> tuple[float, float]:
    """(REF bits, ALT bits) of the definition: the reference and the contig with the variant applied, each scored
    whole from ``start``, summed over the allele and the ``window`` bases after REF."""
    assert seq[pos : pos + len(ref)] == ref
    after = min(window, len(seq) - pos - len(ref))
    ref_seq, alt_seq = seq[start:], seq[start:pos] + alt + seq[pos + len(ref) :]
    p = pos - start
    return (float(base_bits(model, ref_seq)[p : p + len(ref) + after].sum()),
            float(base_bits(model, alt_seq)[p : p + len(alt) + after].sum()))  # fmt: skip


def random_seq(rng, n: int) -> str:
    return "".join(rng.choice(list("ACGT"), n))


@pytest.fixture(scope="module")
def genome(tmp_path_factory):
    """Two contigs (one with an N run, and a repeat for the k-mer memory to find), written as FASTA."""
    rng = np.random.default_rng(3)
    rep = random_seq(rng, 60)
    seqs = {
        "chrA": random_seq(rng, 300) + rep + random_seq(rng, 150) + "N" * 20 + random_seq(rng, 200) + rep
        + random_seq(rng, 400),
        "chrB": random_seq(rng, 700),
    }  # fmt: skip
    path = tmp_path_factory.mktemp("g") / "ref.fa"
    path.write_text("".join(f">{k}\n{v}\n" for k, v in seqs.items()))
    return path, seqs


def variant_rows(seqs: dict[str, str]) -> list[tuple[str, int, str, list[str]]]:
    """(contig, 0-based pos, REF, ALTs): an SNV, a deletion, an insertion, multi-allelic records, two at one
    position, variants in a repeat and after the N run, and at the contigs' ends (windows cut short)."""
    a, b = seqs["chrA"], seqs["chrB"]
    other = {"A": "G", "C": "T", "G": "A", "T": "C"}
    rows = [
        ("chrA", 0, a[0], [other[a[0]]]),  # the first base: read from BOS, nothing carried yet
        ("chrA", 40, a[40], [other[a[40]]]),  # SNV
        ("chrA", 120, a[120:124], [a[120]]),  # deletion of 3
        ("chrA", 120, a[120], [a[120] + "GATTACA"]),  # insertion of 7 at the same POS
        (
            "chrA",
            310,
            a[310:313],
            [a[310], other[a[310]] + a[311:313], a[310:313] + "TT"],
        ),  # multi-allelic in the repeat
        ("chrA", 600, a[600], [other[a[600]]]),  # after the N run
        ("chrA", len(a) - 30, a[-30:-28], ["A", "CC", "G"]),  # the window cut at the contig's end
        ("chrA", len(a) - 1, a[-1], [other[a[-1]]]),  # the last base: no window at all
        ("chrB", 5, b[5:7], [b[5]]),
        ("chrB", 333, b[333], [other[b[333]], b[333] + "AC"]),
    ]
    return rows


def write_vcf(path: Path, rows, header: str = HEADER) -> Path:
    lines = [f"{c}\t{p + 1}\t.\t{r}\t{','.join(alts)}\t.\t.\t.\n" for c, p, r, alts in rows]
    path.write_text(header + "".join(lines))
    return path


@pytest.mark.parametrize("kmer", [False, True], ids=["linear", "kmer-memory"])
@pytest.mark.parametrize("warmup", [None, 64], ids=["whole-contig", "warmup-64"])
def test_forked_scores_equal_the_two_sequences_scored_from_scratch(genome, kmer, warmup):
    path, seqs = genome
    model = tiny(kmer)
    window = 50
    scorer = VariantScorer(model, str(path), window, warmup, chunk=37, lengths={k: len(v) for k, v in seqs.items()})
    for chrom, pos, ref, alts in variant_rows(seqs):
        got = scorer.score(chrom, pos, len(ref), alts)
        start = scorer.context_start(pos)
        assert (start == 0) if warmup is None else (warmup <= pos - start < 2 * warmup or start == 0)
        for alt, alt_bits in zip(alts, got.alt_bits, strict=True):
            ref_bits, want = expected(model, seqs[chrom], pos, ref, alt, window, start)
            assert got.ref_bits == pytest.approx(ref_bits, abs=1e-9)
            assert alt_bits == pytest.approx(want, abs=1e-9), (chrom, pos, ref, alt)
        assert got.window == min(window, len(seqs[chrom]) - pos - len(ref))
    scorer.close()


def test_a_fork_leaves_the_carried_kmer_table_as_it_was(genome):
    """The donated call writes the table in place and puts the rows back: every tensor of the carried state is
    bit for bit what it was, and the logits are those of a plain call (which copies the table)."""
    path, seqs = genome
    model = tiny(True)
    carry = Carry(model, chunk=50)
    carry.advance(ids(seqs["chrA"][:399]))
    carry.advance(ids(seqs["chrA"][399:400]))  # one base: chunked too, so no write log waits to be folded (a copy)
    assert int(carry.state.memory.log_len.max()) == 0
    before = [t.clone() for t in carry.state.tensors()]
    rng = np.random.default_rng(0)
    for n in (1, 7, 80, 1000):  # 1000 > the rebase span of γ = 0.97 (910): the fork rebases a copy of the table
        tokens = torch.from_numpy(rng.integers(4, 9, n))[None]
        with torch.inference_mode():
            plain = model(tokens, carry.state)[0]
        forked = forked_logits(model, tokens, carry.state)
        torch.testing.assert_close(forked, plain, rtol=0, atol=1e-12)
    assert all(torch.equal(a, b) for a, b in zip(before, carry.state.tensors(), strict=True))


def test_warmup_restarts_clear_the_table_in_place_or_whole(genome, monkeypatch):
    """A restart reuses the k-mer table: the rows written since the last restart are cleared, or, past
    TOUCHED_MAX of them, the whole table; the scores are the same either way, and no new table is made."""
    path, seqs = genome
    model = tiny(True)
    lengths = {k: len(v) for k, v in seqs.items()}
    rows = [r for r in variant_rows(seqs) if r[0] == "chrA"][:6]
    want = None
    for cap in (1 << 20, 10):
        monkeypatch.setattr(variants, "TOUCHED_MAX", cap)
        scorer = VariantScorer(model, str(path), 20, warmup=50, chunk=16, lengths=lengths)
        got, tables = [], set()
        for chrom, pos, ref, alts in rows:
            got.append(scorer.score(chrom, pos, len(ref), alts).alt_bits)
            if scorer.carry.state is not None:
                tables.add(scorer.carry.state.memory.S.data_ptr())
        assert len(tables) == 1
        if want is None:
            want = got
        assert got == want


@needs_vcf
@pytest.mark.parametrize("kmer", [False, True], ids=["linear", "kmer-memory"])
def test_the_output_vcf_holds_the_scores(genome, tmp_path, kmer):
    import cyvcf2

    path, seqs = genome
    model = tiny(kmer)
    rows = variant_rows(seqs)
    rows[4] = (*rows[4][:3], [*rows[4][3], "<DEL>", "*", "N"])  # skipped ALTs of a scored record
    vcf = write_vcf(tmp_path / "in.vcf", rows)
    out = tmp_path / "out.vcf.gz"
    summary = score_variants(VariantArgs("m", str(path), str(vcf), str(out), window=30), progress=False, model=model)
    assert summary.records == len(rows) and summary.contigs == 2
    assert dict(summary.skipped) == {"symbolic": 2, "not ACGT": 1}
    with gzip.open(out) as f:  # bgzipped: gzip reads it
        assert f.read(16).startswith(b"##fileformat")
    recs = list(cyvcf2.VCF(str(out)))
    assert len(recs) == len(rows)
    for rec, (chrom, pos, ref, alts) in zip(recs, rows, strict=True):
        assert (rec.CHROM, rec.POS, rec.REF, rec.ALT) == (chrom, pos + 1, ref, alts)
        llr = rec.INFO.get("SL_LLR")
        llr = llr if isinstance(llr, tuple) else (llr,)
        alt_bits = rec.INFO.get("SL_ALT_BITS")
        alt_bits = alt_bits if isinstance(alt_bits, tuple) else (alt_bits,)
        for alt, value, bits in zip(alts, llr, alt_bits, strict=True):
            if alt in ("<DEL>", "*", "N"):
                assert value is None and bits is None
                continue
            ref_bits, want = expected(model, seqs[chrom], pos, ref, alt, 30)
            assert value == pytest.approx(ref_bits - want, abs=2e-4)
            assert bits == pytest.approx(want, abs=2e-4)
            assert rec.INFO.get("SL_REF_BITS") == pytest.approx(ref_bits, abs=2e-4)
        assert rec.INFO.get("SL_WINDOW") == min(30, len(seqs[chrom]) - pos - len(ref))


@needs_vcf
def test_contigs_in_another_order_than_the_fasta_and_header_tags_left_undefined(genome, tmp_path):
    """chrB's records before chrA's (the reference is read again from its start), undefined INFO/FORMAT/FILTER
    tags kept, a record with no ALT written as it was, earlier SL_ values replaced."""
    path, seqs = genome
    model = tiny(False)
    a, b = seqs["chrA"], seqs["chrB"]
    text = (
        "##fileformat=VCFv4.2\n"
        '##INFO=<ID=SL_LLR,Number=A,Type=Float,Description="from an earlier run">\n'
        "#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\tFORMAT\tS1\n"
        f"chrB\t10\trs1\t{b[9]}\tA,C\t30\tq10\tDP=4;SL_LLR=9,9\tGT:GQ\t0/1:20\n"
        f"chrB\t20\t.\t{b[19]}\t.\t.\tPASS\tSL_LLR=1\tGT\t0/0\n"
        f"chrA\t50\t.\t{a[49]}\tT\t.\t.\tFLAG\tGT\t1/1\n"
    )
    vcf = tmp_path / "in.vcf"
    vcf.write_text(text)
    out = tmp_path / "out.vcf"
    score_variants(VariantArgs("m", str(path), str(vcf), str(out), window=10), progress=False, model=model)
    lines = [x for x in out.read_text().splitlines() if not x.startswith("#")]
    first = lines[0].split("\t")
    assert first[:7] == ["chrB", "10", "rs1", b[9], "A,C", "30", "q10"] and first[8:] == ["GT:GQ", "0/1:20"]
    info = dict(kv.split("=") for kv in first[7].split(";"))
    ref_bits, alt_bits = expected(model, b, 9, b[9], "A", 10)
    assert info["DP"] == "4" and float(info["SL_LLR"].split(",")[0]) == pytest.approx(ref_bits - alt_bits, abs=1e-4)
    assert lines[1].split("\t")[7] == "." and "FLAG;SL_LLR=" in lines[2]


# ------------------------------------------------------------------------------------------------ the command line


@pytest.fixture(scope="module")
def saved(tmp_path_factory, genome):
    """A saved tiny model with the k-mer memory, the genome and a good VCF."""
    folder = tmp_path_factory.mktemp("cli")
    tiny(True).float().save(folder / "m", tokenizer="dna")
    path, seqs = genome
    return folder / "m", path, seqs


def run_cli(capfd, *argv) -> tuple[int, list[str]]:
    rc = main(["score-variants", *map(str, argv)])
    err = [x for x in capfd.readouterr().err.splitlines() if x.strip()]
    return rc, err


@needs_vcf
def test_the_command_writes_the_vcf_and_says_what_it_skipped(saved, tmp_path, capfd):
    model, path, seqs = saved
    rows = variant_rows(seqs)
    rows.append(("chrB", 600, seqs["chrB"][600], ["<INS>", "A" * 60]))
    vcf = write_vcf(tmp_path / "v.vcf", rows)
    rc, err = run_cli(capfd, model, path, vcf, "-o", tmp_path / "o.vcf", "--window", 20, "--max-allele", 51)
    assert rc == 0 and len(err) == 1, err
    assert err[0].startswith(f"strandline score-variants: wrote {tmp_path / 'o.vcf'}: {len(rows)} record(s)")
    assert "2 skipped (1 symbolic or breakend, 1 longer than --max_allele; written without scores)" in err[0]
    body = [x for x in (tmp_path / "o.vcf").read_text().splitlines() if not x.startswith("#")]
    assert len(body) == len(rows) and body[-1].split("\t")[7] == "."  # nothing scored: no SL_ fields


def _bad(seqs, kind: str, tmp_path: Path) -> tuple[list, str]:
    a = seqs["chrA"]
    wrong = {"A": "C", "C": "G", "G": "T", "T": "A"}[a[9]]
    rows = {
        "ref-mismatch": ([("chrA", 9, wrong, ["A"])], f"chrA:10: REF {wrong!r} does not match"),
        "unknown-contig": ([("chr9", 9, "A", ["C"])], "contig 'chr9' is not in"),
        "unsorted": ([("chrA", 20, a[20], ["A"]), ("chrA", 9, a[9], ["A"])], "must be sorted"),
        "contig-again": ([("chrA", 9, a[9], ["A"]), ("chrB", 9, seqs["chrB"][9], ["A"]), ("chrA", 30, a[30], ["A"])],
                         "come again after 'chrB'"),
        "beyond-end": ([("chrA", len(a) - 1, a[-1] + "A", ["A"])], "is outside contig"),
    }  # fmt: skip
    return rows[kind]


@needs_vcf
@pytest.mark.parametrize("kind", ["ref-mismatch", "unknown-contig", "unsorted", "contig-again", "beyond-end"])
def test_a_vcf_that_does_not_fit_the_reference_is_one_line_and_nothing_is_written(saved, tmp_path, capfd, kind):
    model, path, seqs = saved
    rows, words = _bad(seqs, kind, tmp_path)
    vcf = write_vcf(tmp_path / "v.vcf", rows)
    out = tmp_path / "o.vcf"
    rc, err = run_cli(capfd, model, path, vcf, "-o", out)
    assert rc == 2 and len(err) == 1 and err[0].startswith("strandline score-variants: error: "), err
    assert words in err[0] and str(vcf) in err[0]
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["v.vcf"]


@needs_vcf
@pytest.mark.parametrize(
    "text, words",
    [
        (HEADER + "chrA\tx\t.\tA\tG\t.\t.\t.\n", "malformed VCF record in the first record"),
        (HEADER + "chrA\t5\t.\t{a4}\tG\t.\t.\t.\nchrA\t6\t.\t{a5}\tG\t.\t.\t.\nchrA\t7x\t.\tA\tG\t.\t.\t.\n",
         "malformed VCF record after chrA:6"),
        (HEADER + "chrA\t5\t.\t{a4}<\tG\t.\t.\t.\n", "is not a sequence of bases"),
        ("hello\tworld\n", "not a VCF file"),
        ("", "not a VCF file"),
        ("##fileformat=VCFv4.2\n##INFO=<ID=SL_LLR,Number=1,Type=String,Description=\"x\">\n" + HEADER.split("\n")[1]
         + "\n", "defines INFO SL_LLR as Number=1,Type=String"),
    ],
    ids=["bad-pos", "bad-pos-later", "bad-ref", "not-vcf", "empty", "sl-field-of-another-type"],
)  # fmt: skip
def test_a_malformed_vcf_is_one_line(saved, tmp_path, capfd, text, words):
    model, path, seqs = saved
    vcf = tmp_path / "v.vcf"
    a = seqs["chrA"]
    vcf.write_text(text.replace("{a4}", a[4]).replace("{a5}", a[5]))
    rc, err = run_cli(capfd, model, path, vcf, "-o", tmp_path / "o.vcf")
    assert rc == 2 and len(err) == 1 and words in err[0], err
    assert not (tmp_path / "o.vcf").exists()


@needs_vcf
def test_missing_files_bad_options_and_outputs_are_one_line(saved, tmp_path, capfd):
    model, path, seqs = saved
    vcf = write_vcf(tmp_path / "v.vcf", [("chrA", 9, seqs["chrA"][9], ["A"])])
    cases = [
        ((model, path, tmp_path / "none.vcf", "-o", tmp_path / "o.vcf"), "none.vcf: no such file"),
        ((model, tmp_path / "none.fa", vcf, "-o", tmp_path / "o.vcf"), "none.fa: no such file"),
        ((tmp_path / "nomodel", path, vcf, "-o", tmp_path / "o.vcf"), "no such model"),
        ((model, path, vcf, "-o", vcf), "is also an input"),
        ((model, path, vcf, "-o", tmp_path / "o.bcf"), "BCF output is not written"),
        ((model, path, vcf, "-o", tmp_path / "o.vcf", "--window=-1"), "--window must be >= 0"),
        ((model, path, vcf, "-o", tmp_path / "o.vcf", "--warmup", 0), "--warmup must be >= 1"),
    ]
    for argv, words in cases:
        rc, err = run_cli(capfd, *argv)
        assert rc == 2 and len(err) == 1 and words in err[0], (argv, err)
    assert not (tmp_path / "o.vcf").exists()


def test_without_the_vcf_library_the_command_says_how_to_install_it(monkeypatch, saved, tmp_path, capfd):
    import sys

    model, path, _ = saved
    monkeypatch.setitem(sys.modules, "cyvcf2", None)  # import cyvcf2 -> ImportError
    with pytest.raises(VariantError, match=r"pip install 'strandline\[variants\]'"):
        variants.vcf_library()
    rc, err = run_cli(capfd, model, path, tmp_path / "v.vcf", "-o", tmp_path / "o.vcf")
    assert rc == 2 and len(err) == 1 and "strandline[variants]" in err[0]


@needs_vcf
def test_bcf_input_is_refused_with_the_conversion(saved, tmp_path, capfd):
    import cyvcf2

    model, path, seqs = saved
    vcf = write_vcf(
        tmp_path / "v.vcf",
        [("chrA", 9, seqs["chrA"][9], ["A"])],
        HEADER.replace("#CHROM", "##contig=<ID=chrA>\n#CHROM"),
    )
    reader = cyvcf2.VCF(str(vcf))
    writer = cyvcf2.Writer(str(tmp_path / "v.bcf"), reader, mode="wb")
    for rec in reader:
        writer.write_record(rec)
    writer.close()
    rc, err = run_cli(capfd, model, path, tmp_path / "v.bcf", "-o", tmp_path / "o.vcf")
    assert rc == 2 and len(err) == 1 and "a BCF file; give it as VCF (bcftools view -Oz" in err[0], err


def test_every_option_is_a_field_of_variant_args_with_its_default_and_help(capsys):
    import dataclasses

    from docstring_parser import parse_from_object

    from strandline.app.cli import COMMANDS, build_parser, options_class

    parser, func = build_parser("score-variants", COMMANDS["score-variants"])
    assert options_class(func) is VariantArgs
    actions = {a.dest: a for a in parser._actions}
    helps = {p.arg_name: p.description for p in parse_from_object(VariantArgs).params}
    for f in dataclasses.fields(VariantArgs):
        assert f.name in actions and helps[f.name], f.name
        assert " ".join(helps[f.name].split()) in " ".join(actions[f.name].help.split())
        if f.default is not dataclasses.MISSING:
            assert parser.get_defaults()[f.name] == f.default, f.name
    assert main(["score-variants", "--help"]) == 0 and "-o OUTPUT" in capsys.readouterr().out

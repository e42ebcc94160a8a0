"""``strandline generate``: only printable tokens are sampled, and bad options are one line."""

from __future__ import annotations

import pytest

from strandline.app.cli import main
from strandline.data.tokenizers import ByteTokenizer, DNATokenizer
from strandline.models import LinearTransformerLM, ModelConfig


@pytest.fixture
def dna_model(tmp_path):
    model = LinearTransformerLM(ModelConfig(vocab_size=16, d_model=32, n_layers=1, n_heads=2))
    model.save(tmp_path / "dna", tokenizer="dna")
    return str(tmp_path / "dna")


def test_empty_prompt_on_a_dna_model_prints_bases_only(dna_model, capsys):
    """A random DNA model put 12 of its 16 ids on specials and printed '?>????>?<<'."""
    for seed in range(3):
        assert main(["generate", dna_model, "--max_new_tokens", "300", "--seed", str(seed)]) == 0
        out = capsys.readouterr().out.strip()
        assert len(out) == 300 and set(out) <= set("ACGT"), out


def test_top_k_1_is_greedy_and_zero_tokens_prints_the_prompt(dna_model, capsys):
    runs = []
    for seed in (1, 2):
        assert (
            main(
                [
                    "generate",
                    dna_model,
                    "--prompt",
                    "acgu",
                    "--max-new-tokens",
                    "20",
                    "--top-k",
                    "1",
                    "--seed",
                    str(seed),
                ]
            )
            == 0
        )
        runs.append(capsys.readouterr().out.strip())
    assert runs[0] == runs[1] and runs[0].startswith("acgu") and len(runs[0]) == 24
    assert main(["generate", dna_model, "--prompt", "ACGT", "--max_new_tokens", "0"]) == 0
    assert capsys.readouterr().out == "ACGT\n"


@pytest.mark.parametrize(
    "opts,needle",
    [
        (["--max_new_tokens", "-5"], "--max_new_tokens must be >= 0, got -5"),
        (["--top_k", "0"], "--top_k must be >= 1"),
        (["--temperature", "0"], "--temperature must be > 0"),
        (["--temperature", "nan"], "--temperature"),
        (["--max_new_tokens", "ten"], "--max_new_tokens: invalid value 'ten' (expected int)"),
        (["--top-k", "1.5"], "--top_k: invalid value '1.5'"),
    ],
    ids=["negative-tokens", "top-k-0", "temperature-0", "temperature-nan", "tokens-not-int", "top-k-float"],
)
def test_bad_options_are_refused_with_one_line(dna_model, capsys, opts, needle):
    assert main(["generate", dna_model, *opts]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_every_tokenizer_samples_only_what_it_can_print():
    dna, text = DNATokenizer(), ByteTokenizer()
    assert set(dna.decode(list(dna.sample_ids))) == set("ACGT")
    assert {dna.pad_id, dna.bos_id, dna.eos_id, dna.mask_id}.isdisjoint(dna.sample_ids)
    assert max(text.sample_ids) == 255 and {text.pad_id, text.bos_id, text.eos_id, text.sep_id}.isdisjoint(
        text.sample_ids
    )

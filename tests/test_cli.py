"""The `strandline` entry point: usage, exit codes, one-line errors, generate, export."""

import subprocess
import sys

import pytest
import torch

from app.cli import main
from models import LinearTransformerLM, ModelConfig


@pytest.fixture
def dna_model(tmp_path):
    model = LinearTransformerLM(ModelConfig(vocab_size=16, d_model=32, n_layers=1, n_heads=2))
    model.save(tmp_path / "m", tokenizer="dna")
    return tmp_path / "m"


def test_usage_and_unknown_command(capsys):
    assert main(["--help"]) == 0
    assert "scan" in capsys.readouterr().out
    assert main([]) == 2
    assert main(["frobnicate"]) == 2
    assert "unknown command 'frobnicate'" in capsys.readouterr().err


def test_generate_is_reproducible_and_dna_only(dna_model, capsys):
    assert main(["generate", str(dna_model), "--prompt", "ACGT", "--max_new_tokens", "30", "--seed", "3"]) == 0
    first = capsys.readouterr().out.strip()
    assert main(["generate", str(dna_model), "--prompt", "ACGT", "--max-new-tokens", "30", "--seed=3"]) == 0
    assert capsys.readouterr().out.strip() == first
    assert first.startswith("ACGT") and len(first) == 34 and set(first) <= set("ACGTN<>$?")


@pytest.mark.parametrize(
    "args,needle",
    [
        (["generate", "{tmp}/nothing"], "no such model directory"),
        (["generate", "{model}", "--prompt", "ACXG"], "invalid DNA character 'X'"),
        (["generate", "{model}", "--temperature", "0"], "--temperature must be > 0"),
        (["export", "{tmp}/nothing.ckpt", "{tmp}/out"], "no such model directory"),
    ],
    ids=["missing-model", "bad-prompt", "bad-temperature", "export-missing"],
)
def test_user_errors_are_one_line_exit_2(tmp_path, dna_model, capsys, args, needle):
    args = [a.format(tmp=tmp_path, model=dna_model) for a in args]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_export_model_directory_roundtrip(dna_model, tmp_path):
    assert main(["export", str(dna_model), str(tmp_path / "copy")]) == 0
    from models import load

    a, b = load(dna_model), load(tmp_path / "copy")
    x = torch.randint(4, 8, (1, 20))
    torch.testing.assert_close(a(x)[0], b(x)[0], rtol=0, atol=0)


@pytest.mark.slow
def test_console_script_subprocess(dna_model, tmp_path):
    exe = [sys.executable, "-m", "app.cli"]
    ok = subprocess.run([*exe, "generate", str(dna_model), "--max_new_tokens", "5"], capture_output=True, text=True)
    assert ok.returncode == 0 and len(ok.stdout.strip()) == 5
    bad = subprocess.run([*exe, "generate", str(tmp_path / "none")], capture_output=True, text=True)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1

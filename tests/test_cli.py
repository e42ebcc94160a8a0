"""The `strandline` entry point: usage, exit codes, one-line errors, generate, export."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import strandline.app.train  # noqa: F401 - import Lightning now: its log handlers bind to the session's stderr, not a test's capsys
from strandline.app.cli import main
from strandline.models import LinearTransformerLM, ModelConfig


@pytest.fixture
def dna_model(tmp_path):
    model = LinearTransformerLM(ModelConfig(vocab_size=16, d_model=32, n_layers=1, n_heads=2))
    model.save(tmp_path / "m", tokenizer="dna")
    return str(tmp_path / "m")


def test_usage_and_unknown_command(capsys):
    assert main(["--help"]) == 0
    assert "scan" in capsys.readouterr().out
    assert main([]) == 2
    assert main(["frobnicate"]) == 2
    assert "unknown command 'frobnicate'" in capsys.readouterr().err


def test_version_and_did_you_mean(capsys):
    from importlib.metadata import version

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"strandline {version('strandline')}"
    for typo, meant in (("sacn", "scan"), ("sumarize", "summarize"), ("fitt", "fit"), ("exprot", "export")):
        assert main([typo, "x"]) == 2
        err = capsys.readouterr().err.strip()
        assert f"did you mean {meant!r}?" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize(
    "args,needle",
    [
        (["generate"], "the following arguments are required: model"),
        (["generate", "{model}", "--no-such-option", "1"], "unrecognized arguments: --no-such-option 1"),
        (["generate", "{model}", "--max-new-tokns", "1"], "; did you mean --max_new_tokens?"),
        (["export", "{model}"], "the following arguments are required: out_dir"),
        (["summarize", "{model}", "doc.txt", "--budget", "many"], "--budget: invalid value 'many' (expected int)"),
        (["fit", "--trainer.no_such_key", "1"], "unrecognized arguments"),
        (["fit", "--model.model.d_model", "abc"], "--model.model.d_model: invalid value 'abc' (expected int)"),
        (["fit", "--config", "{tmp}/none.yaml"], "none.yaml"),
    ],
    ids=[
        "missing-positional",
        "unknown-option",
        "option-typo",
        "export-missing-out",
        "bad-type",
        "fit-unknown",
        "fit-nested-type",
        "fit-no-config",
    ],  # fmt: skip
)
def test_usage_errors_are_one_line_exit_2(tmp_path, dna_model, capsys, args, needle):
    args = [a.format(tmp=tmp_path, model=dna_model) for a in args]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1 and "Traceback" not in err, err


def test_help_of_every_command_exits_0_without_the_lightning_args_warning(monkeypatch, capsys, recwarn):
    """LightningCLI warned about its `args` parameter on every fit/validate/test/predict call, even --help."""
    from strandline.app.cli import COMMANDS, LIGHTNING_COMMANDS

    for cmd in (*LIGHTNING_COMMANDS, *COMMANDS):
        monkeypatch.setattr(sys, "argv", ["strandline", cmd, "--help"])  # what the console script sees
        assert main([cmd, "--help"]) == 0, cmd
        assert "usage:" in capsys.readouterr().out
    assert not [w for w in recwarn if "args parameter" in str(w.message)]


def test_options_take_dashes_or_underscores(dna_model, capsys):
    outs = []
    for flag in ("--max_new_tokens", "--max-new-tokens"):
        assert main(["generate", dna_model, flag, "7", "--top-k", "2"]) == 0
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1] and len(outs[0].strip()) == 7


FIT = ["fit", "--config", "configs/dna/tiny-cpu.yaml", "--trainer.max_steps", "1", "--trainer.logger", "false"]


@pytest.mark.parametrize(
    "extra,needle",
    [
        (
            ["--ckpt_path", "{tmp}/missing.ckpt"],
            "--ckpt_path {tmp}/missing.ckpt: no such model directory or checkpoint",
        ),
        (["--ckpt_path", "{tmp}/random.ckpt"], "not a model directory or a readable Lightning checkpoint"),
        (
            ["--checkpoint.dirpath", "{tmp}/random.ckpt"],
            "--checkpoint.dirpath {tmp}/random.ckpt: exists and is not a directory",
        ),
        (
            ["--data.init_args.paths", "[{tmp}/short.fa]"],
            "short.fa: the val split is empty: 1 record(s) of at most 12 bases are too short for val_fraction = 0.02",
        ),
        (["--data.init_args.paths", "[{tmp}/empty.fa]"], "empty.fa: every record is empty"),
        (["--model.model.decay", "[0.5, 1.5, 1, 1]"], "decay values must lie in (0, 1]"),
        (["--model.model.d_model", "30"], "d_model=30 is not divisible by n_heads=4"),
    ],
    ids=["ckpt-missing", "ckpt-random", "dirpath-file", "records-too-short", "records-empty", "decay", "d_model"],
)
def test_fit_refuses_bad_paths_before_training(tmp_path, monkeypatch, capsys, extra, needle):
    (tmp_path / "random.ckpt").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "short.fa").write_text(">r1\nACGTACGTACGT\n")
    (tmp_path / "empty.fa").write_text(">r1\n>r2\n")
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    extra = [a.format(tmp=tmp_path) for a in extra]
    root = ["--trainer.default_root_dir", str(tmp_path / "runs"), "--checkpoint.dirpath", str(tmp_path / "ck")]
    assert main([*FIT, *root, *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert needle.format(tmp=tmp_path) in err and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert not (tmp_path / "ck").exists() and not (tmp_path / "runs").exists()  # nothing was started


def test_generate_is_reproducible_and_dna_only(dna_model, capsys):
    assert main(["generate", str(dna_model), "--prompt", "ACGT", "--max_new_tokens", "30", "--seed", "3"]) == 0
    first = capsys.readouterr().out.strip()
    assert main(["generate", str(dna_model), "--prompt", "ACGT", "--max-new-tokens", "30", "--seed=3"]) == 0
    assert capsys.readouterr().out.strip() == first
    assert first.startswith("ACGT") and len(first) == 34 and set(first) <= set("ACGT")


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
    from strandline.models import load

    a, b = load(dna_model), load(tmp_path / "copy")
    x = torch.randint(4, 8, (1, 20))
    torch.testing.assert_close(a(x)[0], b(x)[0], rtol=0, atol=0)


@pytest.mark.slow
def test_console_script_subprocess(dna_model, tmp_path):
    exe = [sys.executable, "-m", "strandline.app.cli"]
    ok = subprocess.run([*exe, "generate", str(dna_model), "--max_new_tokens", "5"], capture_output=True, text=True)
    assert ok.returncode == 0 and len(ok.stdout.strip()) == 5
    bad = subprocess.run([*exe, "generate", str(tmp_path / "none")], capture_output=True, text=True)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_help_and_version_do_not_import_torch():
    code = "import sys; from strandline.app.cli import main; main(['--help']); main(['--version']); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parents[1])
    assert out.returncode == 0 and out.stdout.strip().splitlines()[-1] == "False", out.stderr


def _raise_document_error() -> None:
    """A command that fails as summarize does on a bad document."""
    from strandline.data.documents import DocumentError

    raise DocumentError("doc.txt: invalid UTF-8 at byte 3")


def test_every_user_error_reaches_the_cli_without_a_registry(monkeypatch, capsys):
    """The old handler bound its error tuple before strandline.app.summarize registered DocumentError: a traceback."""
    from strandline.app.cli import COMMANDS, Command

    monkeypatch.setitem(COMMANDS, "boom", Command("tests.test_cli:_raise_document_error", "fails like summarize"))
    assert main(["boom"]) == 2
    assert capsys.readouterr().err.strip() == "strandline boom: error: doc.txt: invalid UTF-8 at byte 3"

"""The bad-input matrix: every kind of broken input × every command, in-process through ``app.cli.main``.

Each cell must end with exit code 2, exactly one line on stderr naming the bad file, no traceback, and no
output left behind (every output of a cell is named ``out*`` in its own folder, so "nothing left" is
checked by name). The input is the command's main input: the FASTA of scan and fit, the document of
summarize, the checkpoint or model of export, generate and convert, the track of plot.
"""

from __future__ import annotations

import builtins
import errno
import gzip
import io
import os
from pathlib import Path

import pytest

import app.train  # noqa: F401 - import Lightning now: its log handlers bind to the session's stderr, not a test's capsys
from app.cli import COMMANDS, main
from models import LinearTransformerLM, ModelConfig

ROOT = Path(__file__).resolve().parents[1]
FASTA = b">r1 a record\nACGTACGTAC\nGGTTAACC\n>r2\nTTTTGGGG\n"


def _truncated_gzip() -> bytes:
    data = gzip.compress(FASTA * 50)
    return data[: len(data) // 2]


INPUTS = {
    "empty": lambda p: p.write_bytes(b""),
    "binary": lambda p: p.write_bytes(bytes(range(256)) * 16),
    "truncated-gzip": lambda p: p.write_bytes(_truncated_gzip()),
    "invalid-utf8": lambda p: p.write_bytes(b">r1 caf\xe9 \xff\xfe\nACGT\nSome text \xff\xfe here.\n"),
    "malformed-fasta": lambda p: p.write_bytes(b">r1\nACGT\nAC#GT\n>r1\nACGT\n"),
    "directory": lambda p: p.mkdir(),
    "unreadable": lambda p: p.write_bytes(FASTA),
    "missing": lambda p: None,
}


@pytest.fixture(scope="module")
def dna_model(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("model") / "dna"
    LinearTransformerLM(ModelConfig(vocab_size=16, d_model=32, n_layers=1, n_heads=2)).save(path, tokenizer="dna")
    return str(path)


def _fit(bad: str, tmp: Path, model: str) -> list[str]:
    return [
        "fit", "--config", str(ROOT / "configs/dna/tiny-cpu.yaml"), "--data.init_args.paths", f"[{bad}]",
        "--trainer.max_steps", "1", "--trainer.logger", "false", "--trainer.enable_progress_bar", "false",
        "--trainer.default_root_dir", str(tmp / "out_runs"), "--checkpoint.dirpath", str(tmp / "out_ck"),
    ]  # fmt: skip


def _summarize(bad: str, tmp: Path, model: str) -> list[str]:
    return ["summarize", str(ROOT / "data/models/summarizer"), bad, "-o", str(tmp / "out.jsonl"), "--no_progress"]


def _convert(bad: str, tmp: Path, model: str) -> list[str]:
    config = str(ROOT / "configs/convert/dna-tiny.yaml")
    return ["convert", bad, str(tmp / "out_model"), "--config", config, "--run_dir", str(tmp / "out_run")]


# command -> argv for a bad main input; every output is named out* under tmp
COMMAND_ARGS = {
    "scan": lambda bad, tmp, model: ["scan", model, bad, "-o", str(tmp / "out.bedGraph")],
    "summarize": _summarize,
    "fit": _fit,
    "export": lambda bad, tmp, model: ["export", bad, str(tmp / "out_model")],
    "generate": lambda bad, tmp, model: ["generate", bad, "--max_new_tokens", "3"],
    "plot": lambda bad, tmp, model: ["plot", bad, "r1:0-10", str(tmp / "out.png")],
    "convert": _convert,
}
# Inputs that are valid for a command: any text is a document, so a "malformed FASTA" is fine to summarize
# (the summarizer may find no prose sentence in it and say so: exit 1, one line, no output).
VALID = {("summarize", "malformed-fasta")}
CELLS = [
    pytest.param(cmd, kind, id=f"{cmd}-{kind}")
    for cmd in COMMAND_ARGS
    if cmd in ("fit", *COMMANDS)  # convert joins the matrix once it is a command
    for kind in INPUTS
]


@pytest.fixture
def unreadable(monkeypatch):
    """Make one path unreadable for real (chmod 000) and for root too (open raises EACCES, as for a user)."""
    targets: set[str] = set()
    real_open = builtins.open

    def guarded(file, *args, **kwargs):
        if isinstance(file, (str, bytes, os.PathLike)) and os.path.abspath(os.fsdecode(file)) in targets:
            raise PermissionError(errno.EACCES, "Permission denied", os.fsdecode(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", guarded)
    monkeypatch.setattr(io, "open", guarded)

    def make(path: Path) -> None:
        targets.add(os.path.abspath(path))
        path.chmod(0)

    yield make
    for t in targets:
        if os.path.exists(t):
            os.chmod(t, 0o644)


@pytest.mark.parametrize("cmd,kind", CELLS)
def test_bad_input_is_one_line_exit_2_and_leaves_nothing(cmd, kind, tmp_path, dna_model, capsys, unreadable):
    name = "input.fa.gz" if kind == "truncated-gzip" else "input.fa"
    bad = tmp_path / name
    INPUTS[kind](bad)
    if kind == "unreadable":
        unreadable(bad)
    argv = COMMAND_ARGS[cmd](str(bad), tmp_path, dna_model)
    capsys.readouterr()
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err, err
    if (cmd, kind) in VALID:  # a real run: it succeeds, or says in one line why it has nothing (summarize: exit 1)
        assert rc in (0, 1) and (rc == 0 or len(err.splitlines()) == 1), f"exit {rc}: {err}"
        if rc == 0:
            return
    else:
        assert rc == 2, f"exit {rc}: {err}"
        assert len(err.splitlines()) == 1 and err.startswith(f"strandline {cmd}: error: "), err
        assert name in err, f"the error does not name the bad input: {err}"
    left = sorted(p.name for p in tmp_path.iterdir() if "out" in p.name)
    assert not left, f"left behind: {left}"
    assert not list(tmp_path.glob("*.strandline.u8")), "a training cache of a bad input was kept"

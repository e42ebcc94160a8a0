"""The bad-input matrix: every kind of broken input × every command, in-process through ``strandline.app.cli.main``.

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
import torch

import strandline.app.train  # noqa: F401 - import Lightning now: its log handlers bind to the session's stderr, not a test's capsys
from strandline.app.cli import COMMANDS, main
from strandline.models import LinearTransformerLM, ModelConfig

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


# --- inputs the matrix above did not reach ---------------------------------------------------------------


def _one_line_exit_2(argv: list[str], capsys, needle: str) -> str:
    capsys.readouterr()
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "Traceback" not in err, f"exit {rc}: {err}"
    assert len(err.splitlines()) == 1 and needle in err, err
    return err


def _edited_model(dna_model: str, tmp: Path, edit) -> str:
    """A copy of the module's model directory with its config.json edited by ``edit(cfg)``."""
    import json
    import shutil

    out = tmp / "edited"
    shutil.copytree(dna_model, out)
    cfg = json.loads((out / "config.json").read_text())
    edit(cfg)
    (out / "config.json").write_text(json.dumps(cfg))
    return str(out)


@pytest.mark.parametrize(
    "key,value,needle",
    [
        ("n_heads", 0, "n_heads must be an integer >= 1, got 0"),  # was ZeroDivisionError (d_model % n_heads)
        ("d_model", 0, "d_model must be an integer >= 1, got 0"),  # was torch's 3-line "groups must be..."
        ("chunk_size", 0, "chunk_size must be an integer >= 1, got 0"),  # was ZeroDivisionError mid-scan
        ("eps", float("nan"), "eps must be a finite number >= 0, got nan"),  # was an empty track, exit 0
    ],
    ids=["n_heads-0", "d_model-0", "chunk_size-0", "eps-nan"],
)
def test_model_config_values_that_cannot_work_are_one_line(key, value, needle, tmp_path, dna_model, capsys):
    model = _edited_model(dna_model, tmp_path, lambda c: c["model"].__setitem__(key, value))
    (tmp_path / "in.fa").write_bytes(FASTA)
    out = tmp_path / "out.bedGraph"
    _one_line_exit_2(["scan", model, str(tmp_path / "in.fa"), "-o", str(out)], capsys, needle)
    assert not out.exists() and not list(tmp_path.glob(".out*")), "a scan of a bad model left files"
    _one_line_exit_2(["generate", model, "--max_new_tokens", "2"], capsys, needle)


def test_nan_weights_are_refused_not_scanned_into_an_empty_track(tmp_path, capsys):
    model = LinearTransformerLM(ModelConfig(vocab_size=16, d_model=32, n_layers=1, n_heads=2))
    with torch.no_grad():
        model.blocks[0].norm1.weight.fill_(float("nan"))  # as a diverged run leaves them
    model.save(tmp_path / "nan", tokenizer="dna")
    (tmp_path / "in.fa").write_bytes(FASTA)
    out = tmp_path / "out.bedGraph"
    _one_line_exit_2(["scan", str(tmp_path / "nan"), str(tmp_path / "in.fa"), "-o", str(out)], capsys, "NaN or inf")
    assert not out.exists()
    _one_line_exit_2(["generate", str(tmp_path / "nan")], capsys, "NaN or infinite")  # was torch's RuntimeError


@pytest.mark.parametrize(
    "key,value,needle",
    [
        ("version", 99, "model format version 99; this Strandline reads up to 1"),  # was read as version 1
        ("training", [1], "'training' must be an object or null"),  # export: was a TypeError traceback
        ("tokenizer", 5, "'tokenizer' must be a string or null"),
    ],
    ids=["newer-version", "training-list", "tokenizer-number"],
)
def test_model_directory_metadata_of_the_wrong_kind_is_refused(key, value, needle, tmp_path, dna_model, capsys):
    model = _edited_model(dna_model, tmp_path, lambda c: c.__setitem__(key, value))
    _one_line_exit_2(["export", model, str(tmp_path / "out_model")], capsys, needle)
    assert not (tmp_path / "out_model").exists()


@pytest.mark.parametrize(
    "content,needle",
    [
        (bytes(range(128, 256)) * 8, "not UTF-8 text"),  # was a UnicodeDecodeError traceback from jsonargparse
        (b"trainer:\n  max_steps: 1 # caf\xe9\n", "not UTF-8 text"),
        (b"", "empty; expected YAML"),  # was "Unexpected config:"
        (b"trainer: {}\n\x00\x00", "binary (NUL byte)"),
    ],
    ids=["binary", "latin1", "empty", "nul"],
)
@pytest.mark.parametrize("cmd", ["fit", "convert", "scan"])
def test_config_file_that_is_not_yaml_text_is_one_line(cmd, content, needle, tmp_path, dna_model, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_bytes(content)
    argv = {"fit": ["fit"], "convert": ["convert", dna_model, str(tmp_path / "out")], "scan": ["scan", dna_model]}[cmd]
    err = _one_line_exit_2([*argv, "--config", str(cfg)], capsys, needle)
    assert "c.yaml" in err


def test_generate_seed_outside_torchs_range_is_one_line(dna_model, capsys):
    _one_line_exit_2(["generate", dna_model, "--seed", str(2**70)], capsys, "--seed must lie in")  # was ValueError


def test_literal_option_errors_list_the_choices(tmp_path, dna_model, capsys):
    argv = ["convert", dna_model, str(tmp_path / "out"), "--method", "zzz"]
    _one_line_exit_2(argv, capsys, "--method: invalid value 'zzz' (expected one of t2r, hedgehog, lolcats)")


def test_memory_error_is_one_line(monkeypatch, capsys):
    """An option far too large for the machine (--data.init_args.window 99999999999: numpy's MemoryError)."""
    from strandline.app.cli import Command

    monkeypatch.setitem(COMMANDS, "boom", Command("tests.test_bad_inputs:_raise_memory_error", "runs out of memory"))
    _one_line_exit_2(["boom"], capsys, "out of memory (Unable to allocate 745. GiB")


def _raise_memory_error() -> None:
    raise MemoryError("Unable to allocate 745. GiB for an array with shape (99999999999,) and data type int64")


FIT_TINY = [
    "fit", "--config", str(ROOT / "configs/dna/tiny-cpu.yaml"), "--trainer.max_steps", "1", "--trainer.logger", "false",
]  # fmt: skip


@pytest.mark.parametrize(
    "extra,needle",
    [
        (["--trainer.max_steps", "-5"], "`max_steps` must be a non-negative integer"),  # was MisconfigurationException
        (["--data.init_args.paths", "[]"], "data.paths is empty"),  # was ": every record is empty"
        (["--model.model.n_heads", "0"], "n_heads must be an integer >= 1"),  # was jsonargparse's Union error
    ],
    ids=["max-steps", "no-paths", "n-heads-0"],
)
def test_fit_options_that_cannot_work_are_one_line(extra, needle, tmp_path, capsys):
    root = ["--trainer.default_root_dir", str(tmp_path / "out_runs"), "--checkpoint.dirpath", str(tmp_path / "out_ck")]
    _one_line_exit_2([*FIT_TINY, *root, *extra], capsys, needle)
    assert not list(tmp_path.glob("out*"))


@pytest.mark.parametrize(
    "name,content,needle",
    [
        ("bin.txt", bytes(range(128, 256)) * 4, "bin.txt: invalid UTF-8 at byte 0"),  # was datasets' 3 lines
        ("nul.txt", b"Hello\x00there.\n", "nul.txt: binary input (NUL byte)"),
        ("empty.txt", b"", "empty.txt: empty document"),
    ],
    ids=["binary", "nul", "empty"],
)
def test_text_fit_checks_document_files_before_training(name, content, needle, tmp_path, capsys):
    (tmp_path / name).write_bytes(content)
    (tmp_path / "good.txt").write_text("A short document. It has two sentences.\n")
    argv = [
        "fit", "--config", str(ROOT / "configs/text/tiny-cpu.yaml"), "--trainer.max_steps", "1",
        "--trainer.logger", "false", "--data.init_args.train", f"[{tmp_path / name}]",
        "--data.init_args.val", f"[{tmp_path / 'good.txt'}]", "--data.init_args.cache_dir", str(tmp_path / "hf"),
        "--trainer.default_root_dir", str(tmp_path / "out_runs"), "--checkpoint.dirpath", str(tmp_path / "out_ck"),
    ]  # fmt: skip
    _one_line_exit_2(argv, capsys, needle)
    assert not list(tmp_path.glob("out*"))  # refused before the Trainer, the logger or a checkpoint folder


def test_document_rows_that_are_not_text_are_one_line():
    from strandline.data.documents import DocumentError, iter_documents

    with pytest.raises(DocumentError, match="row 1: field 'text' is int, expected text"):
        list(iter_documents([{"text": "fine"}, {"text": 5}]))  # was TypeError: 'int' is not iterable


def test_json_documents_name_the_parse_error(tmp_path):
    from strandline.data.documents import DocumentError, load_documents

    (tmp_path / "bad.jsonl").write_text('{"text": "ok"}\n{"text": broken\n')
    with pytest.raises(DocumentError, match="bad.jsonl: JSON parse error") as e:
        load_documents(str(tmp_path / "bad.jsonl"), cache_dir=str(tmp_path / "hf"))
    assert "An error occurred while generating" not in str(e.value)


@pytest.mark.parametrize(
    "extra,needle",
    [
        (["--steps", "0"], "--steps must be >= 1, got 0"),  # trained 0 steps, then no checkpoint to export
        (["--steps", "-1"], "--steps must be >= 1, got -1"),  # Lightning's max_steps -1: trained forever
        (["--budget", "0"], "--budget must be >= 1"),  # found after training
        (["--summarizer", "{model}"], "has no salience head"),  # found after training
        (["--document", "{tmp}/bad.txt"], "bad.txt: invalid UTF-8"),  # found after training
    ],
    ids=["steps-0", "steps-forever", "budget", "not-a-summarizer", "bad-document"],
)
def test_demo_refuses_bad_options_before_training(extra, needle, tmp_path, dna_model, capsys):
    (tmp_path / "bad.txt").write_bytes(b"caf\xe9\n")
    extra = [a.format(tmp=tmp_path, model=dna_model) for a in extra]
    _one_line_exit_2(["demo", "--workdir", str(tmp_path / "out_demo"), *extra], capsys, needle)
    assert not (tmp_path / "out_demo").exists()


def test_resuming_a_dna_checkpoint_on_text_data_is_one_line(tmp_path, capsys):
    """LightningCLI loads the checkpoint's model over the config's: text bytes fed to a 16-token DNA model ended in
    an IndexError traceback inside the embedding, after the Trainer had started."""
    model = LinearTransformerLM(ModelConfig(vocab_size=16, d_model=32, n_layers=1, n_heads=2))
    ckpt = tmp_path / "dna.ckpt"
    hparams = {"model": model.config.to_dict(), "tokenizer": "dna"}
    torch.save(
        {"hyper_parameters": hparams, "state_dict": {f"model.{k}": v for k, v in model.state_dict().items()}}, ckpt
    )
    (tmp_path / "doc.txt").write_text("A short document. It has two sentences.\n")
    argv = [
        "fit", "--config", str(ROOT / "configs/text/tiny-cpu.yaml"), "--trainer.max_steps", "1",
        "--trainer.logger", "false", "--data.init_args.train", f"[{tmp_path / 'doc.txt'}]",
        "--data.init_args.val", f"[{tmp_path / 'doc.txt'}]", "--ckpt_path", str(ckpt),
        "--trainer.default_root_dir", str(tmp_path / "out_runs"), "--checkpoint.dirpath", str(tmp_path / "out_ck"),
    ]  # fmt: skip
    _one_line_exit_2(argv, capsys, "the checkpoint's model reads 'dna' tokens but the data gives 'bytes'")
    assert not list(tmp_path.glob("out*"))


def test_scan_negative_checkpoint_interval_is_one_line(tmp_path, dna_model, capsys):
    (tmp_path / "in.fa").write_bytes(FASTA)
    out = tmp_path / "out.bedGraph"
    argv = ["scan", dna_model, str(tmp_path / "in.fa"), "-o", str(out), "--checkpoint_every", "-1"]
    _one_line_exit_2(argv, capsys, "--checkpoint_every must be >= 0 seconds")  # was taken silently
    assert not out.exists()


@pytest.mark.parametrize(
    "data,needle",
    [
        (gzip.compress(b"A sentence of prose here. Another one.\n")[:-12], "doc.txt: truncated or corrupt gzip data"),
        ("A sentence of prose here. Another one.\n".encode("utf-16"), "UTF-16 text (byte-order mark)"),
        (gzip.compress("A sentence of prose.\n".encode("utf-16")), "(decompressed): UTF-16 text (byte-order mark)"),
    ],
    ids=["truncated-gzip", "utf16", "gzip-utf16"],
)
def test_summarize_names_damaged_or_utf16_documents(data, needle, tmp_path, capsys):
    (tmp_path / "doc.txt").write_bytes(data)  # was "invalid UTF-8 at byte 1": true, but not what is wrong
    argv = ["summarize", str(ROOT / "data/models/summarizer"), str(tmp_path / "doc.txt"), "--no_progress"]
    _one_line_exit_2(argv, capsys, needle)


def test_compressed_documents_read_as_their_text(tmp_path):
    """gzip, xz and bzip2 documents (as /usr/share/doc ships them) give the same pieces as the plain file."""
    import bz2
    import lzma

    from strandline.data.documents import compression_of, iter_text

    text = "".join(f"Sentence {i} of a long manual, with words é and 漢字.\n" for i in range(4000))
    plain = tmp_path / "doc.txt"
    plain.write_text(text)
    want = "".join(iter_text(plain, piece_bytes=1000))
    for kind, pack in (("gzip", gzip.compress), ("xz", lzma.compress), ("bzip2", bz2.compress)):
        packed = tmp_path / f"doc.{kind}"
        packed.write_bytes(pack(text.encode()))
        assert compression_of(packed) == kind
        assert "".join(iter_text(packed, piece_bytes=1000)) == want == text
    assert compression_of(plain) is None and compression_of("-") is None

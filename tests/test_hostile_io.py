"""Hostile input and output for the CLI shell and the text commands: full disks, closed pipes, odd text and
odd arguments. Every failure is one line on stderr with exit 2 (or the documented 0/1), no traceback, and no
output that looks complete."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import strandline.app.train  # noqa: F401 - import Lightning now: its log handlers bind to the session's stderr, not a test's capsys
from strandline.app.cli import COMMANDS, Command, main
from strandline.data.documents import iter_text
from strandline.models import LinearTransformerLM, ModelConfig

ROOT = Path(__file__).resolve().parents[1]
SUMMARIZER = ROOT / "data" / "models" / "summarizer"
DOC = (
    "A Study of Streaming Models\n\n"
    "We present a new method for reading long documents only once.\n"
    "The method keeps a small state in memory at all times.\n"
    "Results show that the summary stays good on long inputs.\n"
)


@pytest.fixture(scope="module")
def dna_model(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("model") / "dna"
    LinearTransformerLM(ModelConfig(vocab_size=16, d_model=32, n_layers=1, n_heads=2)).save(path, tokenizer="dna")
    return str(path)


@pytest.fixture(scope="module")
def byte_model(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("model") / "bytes"
    LinearTransformerLM(ModelConfig(vocab_size=260, d_model=16, n_layers=1, n_heads=2)).save(path, tokenizer="bytes")
    return str(path)


@pytest.fixture(scope="module")
def track(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("track") / "t.bedGraph"
    path.write_text("".join(f"r1\t{i}\t{i + 1}\t{i % 7}\n" for i in range(50)))
    return str(path)


@pytest.fixture
def doc(tmp_path) -> str:
    path = tmp_path / "doc.txt"
    path.write_text(DOC)
    return str(path)


def _one_line(capsys, rc: int, needle: str, code: int = 2) -> str:
    err = capsys.readouterr().err.strip()
    assert rc == code and "Traceback" not in err, f"exit {rc}: {err}"
    assert len(err.splitlines()) == 1 and needle in err, err
    return err


# --- a full disk or a failing device: one line naming the output, nothing half-written -----------------------


@pytest.fixture
def full_stdout(monkeypatch):
    """Call to put standard output on /dev/full (in the test: capsys resets sys.stdout after fixtures)."""
    f = open("/dev/full", "w")  # noqa: SIM115 - closed below

    def use() -> None:
        monkeypatch.setattr(sys, "stdout", f)

    yield use
    monkeypatch.undo()
    with contextlib.suppress(OSError):  # its unwritten rest
        f.close()


@pytest.mark.parametrize(
    "argv",
    [
        ["generate", "{bytes}", "--prompt", "hello", "--max_new_tokens", "5"],
        ["summarize", str(SUMMARIZER), "{doc}", "--no_progress"],
        ["summarize", str(SUMMARIZER), "{doc}", "-o", "-", "--no_progress"],
    ],
    ids=["generate", "summarize-text", "summarize-jsonl"],
)
def test_stdout_on_a_full_disk_is_one_line(argv, byte_model, doc, capsys, full_stdout):
    argv = [a.format(bytes=byte_model, doc=doc) for a in argv]
    full_stdout()
    rc = main(argv)
    sys.stdout = sys.__stdout__  # the capture is back at the next readouterr
    _one_line(capsys, rc, "<stdout>: cannot write: No space left on device")


def test_generate_with_stdout_closed_is_one_line(dna_model, monkeypatch, capsys):
    """``strandline generate ... >&-``: Python starts with sys.stdout None; writing it was an AttributeError."""
    monkeypatch.setattr(sys, "stdout", None)
    rc = main(["generate", dna_model, "--max_new_tokens", "3"])
    monkeypatch.undo()
    _one_line(capsys, rc, "<stdout>: cannot write: standard output is closed")


def _enospc_on_rename(monkeypatch) -> None:
    """The file system fills up as the finished output is put in place (a write error names no file)."""
    import strandline.files

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(strandline.files.os, "replace", full)


@pytest.mark.parametrize("cmd", ["summarize", "plot"])
def test_file_output_on_a_full_disk_names_it_and_leaves_nothing(cmd, doc, track, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out" / ("s.jsonl" if cmd == "summarize" else "p.png")
    argv = {
        "summarize": ["summarize", str(SUMMARIZER), doc, "-o", str(out), "--no_progress"],
        "plot": ["plot", track, "r1:0-50", str(out)],
    }[cmd]
    _enospc_on_rename(monkeypatch)
    _one_line(capsys, main(argv), f"{out}: cannot write: No space left on device")
    assert not out.parent.exists() or not list(out.parent.iterdir()), "a partial output or temp file was left"


def test_summarize_to_dev_full_is_one_line(doc, capsys):
    _one_line(capsys, main(["summarize", str(SUMMARIZER), doc, "-o", "/dev/full", "--no_progress"]), "/dev/full")


def _raise_eio() -> None:
    """A command whose write fails on a bad device: an OSError with no file name."""
    raise OSError(errno.EIO, os.strerror(errno.EIO))


def test_os_error_without_a_file_name_is_one_line(monkeypatch, capsys):
    """The generic path: scan's and export's own writes end here too, not in a traceback."""
    monkeypatch.setitem(COMMANDS, "boom", Command("tests.test_hostile_io:_raise_eio", "fails like a bad disk"))
    err = _one_line(capsys, main(["boom"]), "Input/output error [EIO]")
    assert err.startswith("strandline boom: error: ")


@pytest.fixture
def tiny_fs(tmp_path):
    """A 64 KiB tmpfs, filled up: a real ENOSPC (skipped only where mounting is refused)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("mounting a tmpfs is refused here")
    try:
        with open(mnt / "filler", "wb") as f:
            f.write(b"x" * (1 << 20))
    except OSError:
        pass
    yield mnt
    subprocess.run(["umount", str(mnt)], check=False)


def test_a_real_full_file_system_is_one_line_and_leaves_nothing(tiny_fs, doc, track, capsys):
    before = {p.name for p in tiny_fs.iterdir()}
    argv = ["summarize", str(SUMMARIZER), doc, "-o", str(tiny_fs / "s.jsonl"), "--no_progress"]
    _one_line(capsys, main(argv), "No space left on device")
    _one_line(capsys, main(["plot", track, "r1:0-50", str(tiny_fs / "p.png")]), "No space left on device")
    assert {p.name for p in tiny_fs.iterdir()} == before


# --- generate streams: a closed pipe stops it at once, quietly ------------------------------------------------


class ClosedPipe:
    """A stdout whose reader has gone after ``keep`` characters (``| head -c``)."""

    def __init__(self, keep: int):
        self.keep, self.text = keep, ""

    def write(self, s: str) -> int:
        if len(self.text) >= self.keep:
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")
        self.text += s
        return len(s)

    def flush(self) -> None:
        pass


def test_generate_streams_and_stops_on_a_closed_pipe(dna_model, monkeypatch, capsys):
    steps = []
    real_step = LinearTransformerLM.step
    monkeypatch.setattr(LinearTransformerLM, "step", lambda self, *a: steps.append(1) or real_step(self, *a))
    pipe = ClosedPipe(keep=20)
    monkeypatch.setattr(sys, "stdout", pipe)
    rc = main(["generate", dna_model, "--max_new_tokens", "3000"])
    monkeypatch.undo()
    assert rc == 0 and capsys.readouterr().err == ""
    assert len(pipe.text) == 20 and set(pipe.text) <= set("ACGT")
    assert len(steps) < 30, f"{len(steps)} tokens made after the reader had gone"


@pytest.mark.slow
def test_generate_into_head_ends_quietly(dna_model):
    cmd = f"{sys.executable} -m strandline.app.cli generate {dna_model} --max-new-tokens 1000000000000000 | head -c 100"
    run = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert len(run.stdout) == 100 and run.stderr == "", run.stderr


@pytest.mark.slow
@pytest.mark.parametrize("where", ["/dev/full", "pipe"])
def test_a_failed_stdout_leaves_no_exception_ignored_noise(dna_model, where):
    sink = "> /dev/full" if where == "/dev/full" else "| head -c 1"
    cmd = f"{sys.executable} -m strandline.app.cli generate {dna_model} --max-new-tokens 20000 {sink}; echo rc=${{PIPESTATUS[0]}}"
    run = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert "Exception ignored" not in run.stderr and "Traceback" not in run.stderr, run.stderr
    assert f"rc={2 if where == '/dev/full' else 0}" in run.stdout, run.stdout + run.stderr


# --- generate prints UTF-8: characters whole, never '?' -----------------------------------------------------


def test_dna_prompt_error_names_the_real_character(dna_model, capsys):
    _one_line(capsys, main(["generate", dna_model, "--prompt", "ACGTé"]), "invalid DNA character 'é' at position 4")


def test_a_character_split_across_tokens_is_printed_whole(byte_model, monkeypatch):
    """The sampler makes the two bytes of 'é' and then an invalid byte: 'é' once whole, the bad one as U+FFFD."""
    made = iter([0xC3, 0xA9, 0xFF, ord("!")])
    monkeypatch.setattr(torch, "multinomial", lambda p, n, generator=None: torch.tensor([[next(made)]]))
    writes: list[str] = []
    pipe = ClosedPipe(keep=10**6)
    pipe.write = lambda s: writes.append(s) or len(s)
    monkeypatch.setattr(sys, "stdout", pipe)
    rc = main(["generate", byte_model, "--prompt", "naïve ", "--max_new_tokens", "4"])
    monkeypatch.undo()
    assert rc == 0 and "".join(writes) == "naïve é\ufffd!\n"
    assert "é" in writes, f"not streamed character by character: {writes}"


def test_a_prompt_of_invalid_utf8_from_the_shell_is_fed_as_its_bytes(byte_model, monkeypatch, capsys):
    prompt = b"caf\xe9".decode("utf-8", "surrogateescape")  # how Python passes such an argument on
    assert main(["generate", byte_model, "--prompt", prompt, "--max_new_tokens", "0"]) == 0
    assert capsys.readouterr().out == "caf\ufffd\n"


# --- documents: old Mac (CR) and Windows (CRLF) line ends ----------------------------------------------------


@pytest.mark.parametrize("piece", [1, 7, 1 << 16])
def test_cr_and_crlf_line_ends_are_read_as_newlines(tmp_path, piece):
    p = tmp_path / "mac.txt"
    p.write_bytes(b"Title\r\rFirst line.\r\nSecond line.\rEnd.\r")
    assert "".join(iter_text(p, piece_bytes=piece)) == "Title\n\nFirst line.\nSecond line.\nEnd.\n"


def test_summary_of_a_cr_only_document_keeps_the_title_out(tmp_path, capsys):
    p = tmp_path / "mac.txt"
    p.write_bytes(DOC.replace("\n", "\r").encode())
    assert main(["summarize", str(SUMMARIZER), str(p), "-o", "-", "--no_progress"]) == 0
    out = capsys.readouterr().out
    assert out and "A Study of Streaming Models" not in out, out


# --- messages: no Python internals, and what to type instead --------------------------------------------------


@pytest.mark.parametrize(
    "args,needle",
    [
        (["generate", "{dna}", "--prompt.x", "3"], "--prompt.x: --prompt takes a value, not sub-options"),
        (["generate", "{dna}", "--seed.a.b", "3"], "--seed.a.b: --seed takes a value, not sub-options"),
        (["generate", "{dna}", "--config", "{yaml}"], "--prompt.x: --prompt takes a value, not sub-options"),
        (["generate", "{dna}", "--config", "[1, 2]"], "--config: expected a YAML file or mapping of options"),
        (["generate", "--model={dna}"], "MODEL is positional: give it without --model"),
        (["generate", "{dna}", "--prompt", "-ACGT"], "a value that starts with a dash is given as --prompt=VALUE"),
        (["fit", "--trainer", "foo"], "--trainer: 'foo' is neither a config file nor a YAML mapping of its options"),
        (["fit", "--trainer.max_steps.x", "3"], "--trainer.max_steps takes a value, not sub-options"),
    ],
    ids=[
        "dotted-str",
        "dotted-int",
        "dotted-in-yaml",
        "config-list",
        "positional-as-option",
        "dash-value",
        "section-word",
        "fit-dotted",
    ],  # fmt: skip
)
def test_parse_errors_speak_to_users(args, needle, dna_model, tmp_path, capsys):
    yaml = tmp_path / "c.yaml"
    yaml.write_text("prompt.x: 1\n")
    args = [a.format(dna=dna_model, yaml=yaml) for a in args]
    err = _one_line(capsys, main(args), needle)
    assert "NestedArg" not in err and "Namespace(" not in err and "Parser key" not in err, err


def test_negative_flags_take_dashes_too(doc, capsys):
    assert main(["summarize", str(SUMMARIZER), doc, "-o", "-", "--no-progress"]) == 0
    assert capsys.readouterr().out.count("\n") >= 1


# --- end of options: `--` ------------------------------------------------------------------------------------


def test_double_dash_reads_dash_names_as_inputs(dna_model, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    Path("-weird.fa").write_text(">r1\nACGTACGTACGT\n")
    Path("-doc.txt").write_text(DOC)
    assert main(["scan", dna_model, "-o", "out.bedGraph", "--", "-weird.fa"]) == 0
    assert Path("out.bedGraph").read_text().strip()
    assert main(["summarize", str(SUMMARIZER), "-o", "s.jsonl", "--no_progress", "--", "-doc.txt"]) == 0
    assert Path("s.jsonl").read_text().strip()
    capsys.readouterr()
    rc = main(["scan", dna_model, "--", "-weird.fa", "-o", "x.bedGraph"])  # POSIX: -o here is an input
    _one_line(capsys, rc, "every argument after -- is an input: put the options before --")
    assert not Path("x.bedGraph").exists()


# --- demo: a step that made nothing is not "done" ------------------------------------------------------------


@pytest.fixture
def demo_steps(monkeypatch, tmp_path):
    """The demo's five steps, stubbed to write their outputs instantly; ``made`` says which ones they skip."""
    import strandline.app.demo
    import strandline.app.export
    import strandline.app.scan
    import strandline.app.summarize

    skip: set[str] = set()

    def scan(args):
        made = [Path(args.output).with_name(f"scan.{t}.bedGraph") for t in args.tracks]
        for p in [*made, Path(args.summary), Path(args.plot)]:
            p.write_text("" if p.name in skip else "x\n")
        return []

    def report(genome, tracks, output, **kw):
        Path(output).write_text("" if Path(output).name in skip else "<html>")

    def export(ckpt, out, overwrite=False):
        Path(out).mkdir(parents=True, exist_ok=True)
        for name in ("config.json", "model.safetensors"):
            if name not in skip:
                (Path(out) / name).write_text("x")
        return out

    trained = SimpleNamespace(trainer=SimpleNamespace(checkpoint_callback=SimpleNamespace(last_model_path="last.ckpt")))
    monkeypatch.setattr(strandline.app.train, "build_cli", lambda argv: trained)
    monkeypatch.setattr(strandline.app.demo, "_check_inputs", lambda *a: None)
    monkeypatch.setattr(strandline.app.export, "export", export)
    monkeypatch.setattr(strandline.app.scan, "scan", scan)
    monkeypatch.setattr(strandline.app.scan, "report", report)
    monkeypatch.setattr(strandline.app.summarize, "summarize", lambda *a, **k: 1 if "summary" in skip else 0)
    return skip


@pytest.mark.parametrize(
    "missing,code,needle",
    [
        ("model.safetensors", 2, "step 2/5 export"),
        ("report.html", 2, "step 5/5 report"),
        ("scan.entropy.bedGraph", 2, "scan.entropy.bedGraph is empty"),
        ("summary", 1, None),
    ],
)
def test_demo_is_not_done_when_a_step_made_nothing(missing, code, needle, demo_steps, tmp_path, capsys):
    demo_steps.add(missing)
    rc = main(["demo", "--workdir", str(tmp_path / "w"), "--steps", "1"])
    captured = capsys.readouterr()
    assert rc == code and "done" not in captured.out and "Traceback" not in captured.err
    if needle:
        assert len(captured.err.strip().splitlines()) == 1 and needle in captured.err, captured.err


def test_demo_done_when_every_step_made_its_output(demo_steps, tmp_path, capsys):
    assert main(["demo", "--workdir", str(tmp_path / "w"), "--steps", "1"]) == 0
    out = capsys.readouterr().out
    assert (
        "=== strandline demo: done" in out and f"open the report in a browser: {tmp_path / 'w' / 'report.html'}" in out
    )

"""Progress on stderr: plain log lines when it is not a terminal, with counts, rate and time left."""

from __future__ import annotations

import io

from strandline.progress import LogLines, progress


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_log_lines_every_interval_with_rate_and_time_left():
    out, clock = io.StringIO(), Clock()
    bar = LogLines("scan", 1000, "bases", every=10, stream=out, clock=clock)
    clock.t = 5
    bar.update(100)
    assert out.getvalue() == ""  # not yet 10 seconds
    clock.t = 10
    bar.update(100)
    assert out.getvalue() == "strandline scan: 200 of 1,000 bases (20%), 20 bases/s, about 40s left\n"
    clock.t = 15
    bar.update(500)
    assert out.getvalue().count("\n") == 1
    bar.total = None  # stdin: no total, no time left
    clock.t = 20
    bar.update(200)
    assert out.getvalue().splitlines()[-1] == "strandline scan: 900 bases, 45 bases/s"


def test_a_terminal_gets_a_labelled_bar_and_anything_else_log_lines():
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty = Tty()
    bar = progress("scan", 2_000_000, "bases", stream=tty)
    bar.update(1_000_000)
    bar.close()
    assert "scan:" in tty.getvalue() and "bases/s" in tty.getvalue() and "kb/s" not in tty.getvalue()
    assert isinstance(progress("summarize", 10, "bytes", stream=io.StringIO()), LogLines)
    quiet = io.StringIO()
    with progress("scan", 10, "bases", enabled=False, stream=quiet) as bar:
        bar.update(10)
    assert quiet.getvalue() == ""


def test_scan_says_what_it_wrote_on_stderr(tmp_path, capsys):
    from pathlib import Path

    from strandline.app.cli import main

    genome = Path(__file__).resolve().parents[1] / "data" / "genomes" / "lambda.fasta.gz"
    assert main(["scan", "dna-corpus-tbptt", str(genome), "-o", str(tmp_path / "l.bedGraph")]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"strandline scan: wrote {tmp_path / 'l.bedGraph'}: 1 record(s), 48,502 bases scored")

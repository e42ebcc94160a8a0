"""The variant benchmark's tables: what it prints is what ``--save`` records, cell for cell."""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import benchmarks.results  # noqa: E402
from benchmarks.score_variants import Table, save_tables  # noqa: E402


def test_a_table_prints_markdown_and_saves_the_same_cells(capsys, monkeypatch):
    t = Table("Fork cost", "m, state 1 GB", ["call", "ms"], "lr", [["fork | keep", "6.0"], ["plain", "925.5"]],
              ["a note"])  # fmt: skip
    assert t.show() is t
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0] == "### Fork cost: m, state 1 GB" and out[2:4] == ["| call | ms |", "|---|---:|"]
    assert out[4] == "| fork | keep | 6.0 |" and out[-1] == "a note"  # no parsing back: a pipe in a cell is fine
    saved = []
    monkeypatch.setattr(benchmarks.results, "record", lambda *a, **k: saved.append((a, k)))
    save_tables([t], "python benchmarks/score_variants.py --skip-zero-shot")
    ((args, kw),) = saved
    assert args[0] == "variant-fork" and args[3] == ["call", "ms"] and args[4] == t.rows
    assert kw["caveats"] == ["a note"] and "m, state 1 GB" in kw["machine"]

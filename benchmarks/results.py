"""docs/results.md, rendered from the records in benchmarks/results/*.json (one record per table).

A record is a JSON object: ``title``, ``command`` (what regenerates the numbers), ``date`` (YYYY-MM-DD),
``commit`` (short hash of the code measured), ``machine`` (machine and load), ``columns``, ``rows`` (lists of
cells, one per column) and optionally ``caveats`` (lines printed under the table) and ``order`` (position
on the page; then the file name). A benchmark writes its record with :func:`record`.

    python benchmarks/results.py            # rewrite docs/results.md
    python benchmarks/results.py --check    # exit 1 if docs/results.md is not what the records render
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "benchmarks" / "results"
PAGE = ROOT / "docs" / "results.md"
REQUIRED = {"title": str, "command": str, "date": str, "commit": str, "machine": str, "columns": list, "rows": list}
OPTIONAL = {"caveats": list, "order": int}

HEADER = """# Results

The current measured numbers, one table per measurement. Each table says the command that regenerates it,
the date and the commit of the code measured, and the machine. Older measurements are in git history.

This page is generated: edit the records in `benchmarks/results/*.json` and run
`python benchmarks/results.py` (`--check` fails when the page is out of date).
"""


class RecordError(ValueError):
    """A record that cannot be rendered; the message names the file and the field."""


def _atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder, renamed when complete."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _short_head() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def record(
    name: str,
    title: str,
    command: str,
    columns: list[str],
    rows: list[list],
    machine: str = "",
    caveats: list[str] | None = None,
    directory: Path = RECORDS,
) -> Path:
    """Write ``directory/name.json`` with today's date and ``git rev-parse --short HEAD``; returns its path.

    Args:
        name: file stem of the record (one per table; an existing record of that name is replaced).
        title: the table's heading on the results page.
        command: the command that regenerates the numbers.
        columns: column names.
        rows: one list of cells per row, as many as ``columns``.
        machine: the machine and its load during the run.
        caveats: lines printed under the table.

    A record that already exists keeps its ``order`` (its place on the page).
    """
    rec = {
        "title": title,
        "command": command,
        "date": datetime.date.today().isoformat(),
        "commit": _short_head(),
        "machine": machine,
        "columns": list(columns),
        "rows": [list(r) for r in rows],
        "caveats": list(caveats or []),
    }
    path = Path(directory) / f"{name}.json"
    try:  # a record written again keeps its place on the page
        old = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(old, dict) and isinstance(old.get("order"), int):
            rec["order"] = old["order"]
    except (OSError, ValueError):
        pass
    check_record(rec, name)
    _atomic_write(path, json.dumps(rec, indent=2, ensure_ascii=False) + "\n")
    return path


def check_record(rec: object, where: str) -> None:
    """Raise RecordError unless ``rec`` has every required field of the right type and full rows."""
    if not isinstance(rec, dict):
        raise RecordError(f"{where}: a record must be a JSON object")
    for key, kind in REQUIRED.items():
        if not isinstance(rec.get(key), kind):
            raise RecordError(f"{where}: '{key}' must be a {kind.__name__}")
    for key, kind in OPTIONAL.items():
        if key in rec and not isinstance(rec[key], kind):
            raise RecordError(f"{where}: '{key}' must be a {kind.__name__}")
    unknown = set(rec) - set(REQUIRED) - set(OPTIONAL)
    if unknown:
        raise RecordError(f"{where}: unknown fields {sorted(unknown)}")
    n = len(rec["columns"])
    for i, row in enumerate(rec["rows"]):
        if not isinstance(row, list) or len(row) != n:
            raise RecordError(f"{where}: row {i + 1} must be a list of {n} cells")


def load_records(directory: Path = RECORDS) -> list[dict]:
    """Every ``*.json`` record of ``directory``, checked, in page order (``order``, then file name)."""
    recs = []
    for path in sorted(Path(directory).glob("*.json")):
        try:
            rec = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise RecordError(f"{path.name}: not a readable JSON record ({e})") from None
        check_record(rec, path.name)
        recs.append((rec.get("order", 1000), path.name, rec))
    return [rec for _, _, rec in sorted(recs, key=lambda t: (t[0], t[1]))]


def _cell(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text.replace("|", "\\|").replace("\n", " ")


def render_record(rec: dict) -> str:
    lines = [f"## {rec['title']}", ""]
    lines.append(f"Measured {rec['date']} at commit `{rec['commit']}`. {rec['machine']}".rstrip())
    lines += ["", "```bash", rec["command"], "```", ""]
    lines.append("| " + " | ".join(_cell(c) for c in rec["columns"]) + " |")
    lines.append("| " + " | ".join("---" for _ in rec["columns"]) + " |")
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rec["rows"]]
    if rec.get("caveats"):
        lines.append("")
        lines += [f"- {c}" for c in rec["caveats"]]
    return "\n".join(lines) + "\n"


def render(records: list[dict]) -> str:
    """The whole results page."""
    toc = [f"- [{r['title']}](#{anchor(r['title'])})" for r in records]
    parts = [HEADER, "\n".join(toc) + "\n", *[render_record(r) for r in records]]
    return "\n".join(parts)


def anchor(title: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to dashes."""
    kept = "".join(ch for ch in title.lower() if ch.isalnum() or ch in " -_")
    return kept.replace(" ", "-")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the page is not what the records render")
    ap.add_argument("--records", type=Path, default=RECORDS, help="folder of the JSON records")
    ap.add_argument("--out", type=Path, default=PAGE, help="the page to write or check")
    args = ap.parse_args(argv)
    try:
        text = render(load_records(args.records))
    except RecordError as e:
        print(f"results.py: error: {e}", file=sys.stderr)
        return 2
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.is_file() else None
        if current != text:
            print(f"results.py: {args.out} is out of date; run python benchmarks/results.py", file=sys.stderr)
            return 1
        return 0
    _atomic_write(args.out, text)
    print(f"wrote {args.out} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

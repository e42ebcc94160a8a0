"""The words and links of the docs: the project names itself by topic, every link resolves, results are current."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS_SCRIPT = ROOT / "benchmarks" / "results.py"


def tracked_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [ROOT / p for p in out.decode().split("\0") if p and (ROOT / p).is_file()]


def read_text(path: Path) -> str | None:
    """The file as UTF-8 text, or None for a binary file (a NUL byte, or not UTF-8)."""
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


# --- how the project speaks of itself: topics, versions, dates, commits -------------------------------------

# "h<n>" is matched in lowercase only: an uppercase H<n> is a head count (test ids such as B2-T77-H2-C16,
# benchmark notes such as "d512 L8 H8"), never a name.
BANNED = [
    ("session <n>", re.compile(r"\bsessions?[\s_-]+\d", re.IGNORECASE)),
    ("issue <n>", re.compile(r"\bissues?[\s_-]+\d", re.IGNORECASE)),
    ("h<n> as a name", re.compile(r"\bh[0-9]\b")),
    ("brief", re.compile(r"\bbrief\b", re.IGNORECASE)),
    ("a local run path like runs/s6", re.compile(r"\bruns/[a-z]\d+/")),
]


def banned_hits(text: str) -> list[str]:
    hits = []
    for lineno, line in enumerate(text.splitlines(), 1):
        for what, pattern in BANNED:
            m = pattern.search(line)
            if m:
                hits.append(f"{lineno}: {what}: {m.group(0)!r}")
    return hits


# The banned words, spelled in pieces so that this file does not say them itself
SESSION, ISSUE, PERSON, BRIEF = "sess" + "ion", "iss" + "ue", "h" + "6", "bri" + "ef"


@pytest.mark.parametrize(
    "line, banned",
    [
        pytest.param(f"measured in {SESSION} 6", True, id="session-n"),
        pytest.param(f"### {SESSION.title()} 6: the memory", True, id="heading"),
        pytest.param(f"(long-context.md#{SESSION}-6-the-memory)", True, id="anchor"),
        pytest.param(f"{SESSION}s 2-5", True, id="sessions"),
        pytest.param(f"{ISSUE.title()} 8 item 7: a cache cut short", True, id="issue-n"),
        pytest.param(f"({PERSON} and the lead)", True, id="person"),
        pytest.param(f"idea 3 of the {BRIEF}", True, id="brief"),
        pytest.param("runs/s6/tbptt/ck/last.ckpt", True, id="run-path"),
        pytest.param("briefly, the session's stderr", False, id="english"),
        pytest.param('id="B2-T77-H2-C16"', False, id="head-count"),
        pytest.param('"h11==0.16.0"', False, id="package-pin"),
        pytest.param("an H200 GPU", False, id="gpu-name"),
    ],
)
def test_banned_words_pattern(line, banned):
    assert bool(banned_hits(line)) == banned


VENDORED = ROOT / "data" / "vendor"  # third-party files kept verbatim (checked by their sha256): not ours to word


def test_no_tracked_file_names_sessions_issues_people_or_briefs():
    bad = []
    for path in tracked_files():
        if VENDORED in path.parents:
            continue
        text = None if path == Path(__file__).resolve() else read_text(path)  # this file spells the words out
        if text is None:
            continue
        bad += [f"{path.relative_to(ROOT)}:{hit}" for hit in banned_hits(text)]
    assert not bad, "\n".join(bad)


# --- links: every relative link of the docs resolves, anchors included ---------------------------------------

# The API page is written together with the public API it documents; the guides link to it already.
WRITTEN_WITH_THE_API = {ROOT / "docs" / "api.md"}
LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def doc_pages() -> list[Path]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    pages += [ROOT / "data" / "README.md", ROOT / "data" / "documents" / "README.md"]
    pages += sorted((ROOT / "data" / "models").glob("*/README.md"))
    return [p for p in pages if p.is_file()]


def github_anchor(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lowercase, punctuation dropped, spaces to dashes."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").lower()
    text = "".join(ch for ch in text if ch.isalnum() or ch in " -_")
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        m = None if fenced else HEADING.match(line)
        if m:
            a = github_anchor(m.group(2))
            n = seen.get(a, 0)
            seen[a] = n + 1
            seen.setdefault(f"{a}-{n}" if n else a, 1)
    return set(seen)


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    bad = []
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if dest in WRITTEN_WITH_THE_API:
            continue
        if not dest.exists():
            bad.append(f"{page.relative_to(root)}: {target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{page.relative_to(root)}: {target}: no such heading")
    return bad


def test_anchor_rule_matches_github():
    assert github_anchor("Sliding windows: `window: W` (`models/ops/window.py`)") == (
        "sliding-windows-window-w-modelsopswindowpy"
    )
    assert github_anchor("Results, 2026 (CPU)") == "results-2026-cpu"


def test_every_relative_link_in_the_docs_resolves():
    bad = [b for page in doc_pages() for b in broken_links(page)]
    assert not bad, "\n".join(bad)


def test_broken_link_and_anchor_are_found(tmp_path):
    page = tmp_path / "a.md"
    (tmp_path / "b.md").write_text("# Here\n")
    page.write_text("[ok](b.md#here) [gone](c.md) [anchor](b.md#there) [web](https://x.org/y)\n")
    assert [b.split(": ", 1)[1] for b in broken_links(page, root=tmp_path)] == [
        "c.md: no such file",
        "b.md#there: no such heading",
    ]


def test_every_docs_page_named_in_the_tree_exists():
    named = re.compile(r"\bdocs/([A-Za-z0-9_-]+\.md)")
    bad = []
    for path in tracked_files():
        text = read_text(path)
        if text is None:
            continue
        for m in named.finditer(text):
            page = ROOT / "docs" / m.group(1)
            if page not in WRITTEN_WITH_THE_API and not page.is_file():
                bad.append(f"{path.relative_to(ROOT)}: docs/{m.group(1)}")
    assert not bad, "\n".join(bad)


# --- the results page: generated from its records ------------------------------------------------------------


@pytest.fixture(scope="module")
def results():
    spec = importlib.util.spec_from_file_location("bench_results", RESULTS_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_results_page_is_what_the_records_render(results, capsys):
    assert results.main(["--check"]) == 0, capsys.readouterr().err


def test_every_result_has_a_command_date_and_commit(results):
    recs = results.load_records()
    assert len(recs) >= 10
    for rec in recs:
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", rec["date"]), rec["title"]
        assert re.fullmatch(r"[0-9a-f]{7,40}", rec["commit"]), rec["title"]
        assert rec["command"].strip() and rec["rows"], rec["title"]


def test_record_then_render_then_check(results, tmp_path, capsys):
    folder, page = tmp_path / "records", tmp_path / "results.md"
    path = results.record(
        "op", "Op speed", "python benchmarks/x.py", ["T", "s"], [[1024, "0.1 | 0.2"]], directory=folder
    )
    rec = json.loads(path.read_text())
    assert rec["date"] and re.fullmatch(r"[0-9a-f]{4,40}|unknown", rec["commit"])
    assert results.main(["--check", "--records", str(folder), "--out", str(page)]) == 1  # no page yet
    assert results.main(["--records", str(folder), "--out", str(page)]) == 0
    text = page.read_text()
    assert "## Op speed" in text and "| 1024 | 0.1 \\| 0.2 |" in text and "python benchmarks/x.py" in text
    assert results.main(["--check", "--records", str(folder), "--out", str(page)]) == 0
    page.write_text(text + "edited by hand\n")
    assert results.main(["--check", "--records", str(folder), "--out", str(page)]) == 1
    assert "out of date" in capsys.readouterr().err
    path.write_text(json.dumps({**rec, "order": 7}))  # placed on the page by hand, then measured again
    again = results.record("op", "Op speed", "python benchmarks/x.py", ["T", "s"], [[2048, "0.2"]], directory=folder)
    assert json.loads(again.read_text())["order"] == 7 and json.loads(again.read_text())["rows"] == [[2048, "0.2"]]


def test_a_bad_record_is_one_line_and_exit_2(results, tmp_path, capsys):
    (tmp_path / "r.json").write_text(json.dumps({"title": "t", "columns": ["a"], "rows": [[1, 2]]}))
    assert results.main(["--records", str(tmp_path), "--out", str(tmp_path / "out.md")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "r.json" in err
    assert not (tmp_path / "out.md").exists()


# --- model cards beside the weights ------------------------------------------------------------------------


MODEL_DIRS = sorted(p for p in (ROOT / "data" / "models").iterdir() if (p / "config.json").is_file())


@pytest.mark.parametrize("model_dir", MODEL_DIRS, ids=[p.name for p in MODEL_DIRS])
def test_every_shipped_model_has_a_card(model_dir):
    card = model_dir / "README.md"
    assert card.is_file(), f"{model_dir.name} has no model card"
    text = card.read_text(encoding="utf-8")
    for section in ("## Training data", "## Recipe", "## Held-out metrics", "## Intended use", "## Limits"):
        assert section in text, f"{model_dir.name}: no {section!r}"
    assert "icence" in text, f"{model_dir.name}: the card names no licence"


@pytest.mark.parametrize("model_dir", MODEL_DIRS, ids=[p.name for p in MODEL_DIRS])
def test_shipped_configs_carry_no_local_run_path(model_dir):
    training = json.loads((model_dir / "config.json").read_text())["training"]
    for key in ("checkpoint", "source"):
        value = training.get(key, "")
        assert not re.match(r"runs/", value), f"{model_dir.name}: training.{key} = {value!r}"


def test_repo_has_a_licence_and_a_citation():
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    cff = (ROOT / "CITATION.cff").read_text()
    assert "cff-version:" in cff and "2006.16236" in cff and "Katharopoulos" in cff

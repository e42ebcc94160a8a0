"""The install: one ``strandline.*`` namespace, a wheel that is a complete install, and no top-level ``models``.

The repo keeps its top-level folders (app/ data/ models/ tasks/ configs/), mapped into the namespace by
``[tool.setuptools.package-dir]``; these tests check the mapping, the wheel's contents, and that the wheel alone
(installed with ``--target`` away from the checkout) scans and summarizes with what it ships.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"strandline": "strandline", "app": "strandline.app", "configs": "strandline.configs",
           "data": "strandline.data", "models": "strandline.models", "tasks": "strandline.tasks"}  # fmt: skip


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_package_folder_is_listed_under_the_namespace():
    tool = _pyproject()["tool"]["setuptools"]
    found = set()
    for folder, name in FOLDERS.items():
        assert tool["package-dir"][name] == folder
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join([name, *rel]))
    assert found == set(tool["packages"]), "pyproject's packages list and the folders with __init__.py differ"
    assert all(p == "strandline" or p.startswith("strandline.") for p in tool["packages"])
    assert _pyproject()["project"]["scripts"]["strandline"] == "strandline.app.cli:main"


def test_no_module_imports_the_old_top_level_names():
    """Nothing says ``import models`` / ``from data.x import``: they would find a user's own folder."""
    import re

    bad = re.compile(r"^\s*(from|import)\s+(app|data|models|tasks)(\.|\s|$)", re.M)
    offenders = []
    for folder in ("strandline", "app", "data", "models", "tasks", "tests", "benchmarks"):
        for py in (ROOT / folder).rglob("*.py"):
            if bad.search(py.read_text(encoding="utf-8")):
                offenders.append(str(py.relative_to(ROOT)))
    assert not offenders


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel of the files git knows (a copy: the checkout's ignored files and build/ folder stay out)."""
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("wheel")
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")  # fmt: skip
    for rel in filter(None, listed):
        if (ROOT / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, src / rel)
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(src)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    (whl,) = out.glob("strandline-*.whl")
    return whl


def test_the_wheel_holds_only_the_namespace_and_what_the_commands_need(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"strandline"}  # no top-level app/data/models/tasks
    for shipped in ("strandline/data/models/dna-corpus-tbptt/model.safetensors",
                    "strandline/data/models/summarizer/salience.json", "strandline/data/genomes/lambda.fasta.gz",
                    "strandline/data/documents/2022.acl-long.286.txt", "strandline/configs/dna/recall-cpu.yaml",
                    "strandline/app/cli.py", "strandline/api.py"):  # fmt: skip
        assert shipped in names, shipped
    assert not [n for n in names if ".strandline." in n or "/cache/" in n]  # training caches are not shipped


def _run(args: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_a_wheel_install_alone_scans_and_summarizes_from_any_folder(wheel, tmp_path):
    """``pip install --no-deps --target T`` and PYTHONPATH=T, run from a folder that holds its own models/, data/
    and app/ (which must not shadow anything)."""
    target, work = tmp_path / "site", tmp_path / "work"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    for d in ("models", "data", "app", "tasks"):
        (work / d).mkdir(parents=True)
        (work / d / "__init__.py").write_text("raise ImportError('the user folder was imported')\n")
    env = {**os.environ, "PYTHONPATH": str(target)}
    py = [sys.executable, "-m", "strandline"]
    where = _run([sys.executable, "-c", "import strandline, strandline.models as m; print(m.__file__); "
                  "print(strandline.shipped_path('genomes', 'lambda.fasta.gz'))"], work, env)  # fmt: skip
    assert where.returncode == 0, where.stderr
    models_file, genome = where.stdout.split()
    assert Path(models_file).is_relative_to(target)
    scan = _run([*py, "scan", "dna-corpus-tbptt", genome, "-o", "lambda.bedGraph"], work, env)
    assert scan.returncode == 0, scan.stderr
    lines = (work / "lambda.bedGraph").read_text().splitlines()
    assert len(lines) == 48502 and lines[0].startswith("NC_001416.1\t0\t1\t")
    doc = _run([sys.executable, "-c", "import strandline; print(strandline.shipped_path('documents', "
                "'2022.acl-long.286.txt'))"], work, env).stdout.strip()  # fmt: skip
    summ = _run([*py, "summarize", "summarizer", doc, "--budget", "40"], work, env)
    assert summ.returncode == 0, summ.stderr
    assert "=== summary" in summ.stdout and len(summ.stdout.splitlines()) >= 2


def test_the_dev_install_ignores_look_alike_folders_in_the_working_directory(tmp_path):
    for d in ("models", "data", "app"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "__init__.py").write_text("raise ImportError('the user folder was imported')\n")
    r = _run([sys.executable, "-c", "import strandline; m = strandline.load('dna-corpus-tbptt'); "
              "print(type(m).__name__)"], tmp_path, dict(os.environ))  # fmt: skip
    assert r.returncode == 0 and r.stdout.strip() == "LinearTransformerLM", r.stderr
    r = _run([sys.executable, "-m", "strandline", "scan", "--help"], tmp_path, dict(os.environ))
    assert r.returncode == 0 and "scan" in r.stdout, r.stderr


BLOCK_TRAINING_DEPS = """
import sys
class _Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("datasets", "wandb", "pyarrow", "pandas", "rouge_score"):
            raise ImportError(f"{name} is not installed (a scan/summarize-only install)")
sys.meta_path.insert(0, _Blocked())
from strandline.app.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_scan_and_summarize_need_no_training_extra(tmp_path):
    """``pip install .`` without ``[train]``: no datasets (pyarrow, pandas), wandb or rouge-score."""
    deps = " ".join(_pyproject()["project"]["dependencies"])
    assert not [d for d in ("datasets", "wandb", "rouge-score", "pyarrow", "pandas") if d in deps]
    assert {"datasets", "wandb"} <= {d.split(">")[0] for d in _pyproject()["project"]["optional-dependencies"]["train"]}
    doc = tmp_path / "doc.txt"
    doc.write_text((ROOT / "data/documents/2022.acl-long.286.txt").read_text()[:6000])
    py = [sys.executable, "-c", BLOCK_TRAINING_DEPS]
    scan = _run([*py, "scan", "dna-corpus-tbptt", str(ROOT / "data/genomes/lambda.fasta.gz"), "-o", "t.bedGraph"],
                tmp_path, dict(os.environ))  # fmt: skip
    assert scan.returncode == 0, scan.stderr
    summ = _run([*py, "summarize", "summarizer", str(doc), "--budget", "30"], tmp_path, dict(os.environ))
    assert summ.returncode == 0 and "=== summary" in summ.stdout, summ.stderr

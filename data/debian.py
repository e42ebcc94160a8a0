"""Debian packages as a data source: ``apt-get download`` (no root) and ``dpkg-deb -x``, with one-line errors.

The summarization domains built from Debian (the CPython docs, the manuals, the R vignettes) and the long-text
corpus read documentation packages this way. A machine without ``apt-get`` or ``dpkg-deb`` (not Debian or Ubuntu)
gets a one-line error that names the tool, as does a damaged ``.deb``; every builder also takes a folder of
``.deb`` files downloaded elsewhere.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from strandline.errors import UserInputError


def need(tool: str) -> None:
    """``UserInputError`` (one line) where ``tool`` is not installed."""
    if shutil.which(tool) is None:
        raise UserInputError(
            f"{tool} not found: the Debian documents need a Debian or Ubuntu system (or a folder of their .deb files)"
        )


def download(packages: tuple[str, ...], into: Path) -> Path:
    """``apt-get download`` of ``packages`` into ``into`` (those already there are kept), 50 a call; a package the
    archive no longer has is named on stderr."""
    into.mkdir(parents=True, exist_ok=True)
    have = {p.name.split("_")[0] for p in into.glob("*.deb")}
    todo = [p for p in packages if p not in have]
    if todo:
        need("apt-get")
    for i in range(0, len(todo), 50):
        batch = todo[i : i + 50]
        r = subprocess.run(["apt-get", "download", *batch], cwd=into, capture_output=True, text=True)
        if r.returncode:  # one unknown name fails the batch: fetch one by one, and name what is missing
            for p in batch:
                if subprocess.run(["apt-get", "download", p], cwd=into, capture_output=True).returncode:
                    print(f"apt-get download: {p} is not in the archive, skipped", file=sys.stderr)
    return into


def extract(deb: str | Path, dest: Path) -> Path:
    """``dpkg-deb -x``: the package's files under ``dest``; ``UserInputError`` for a damaged package."""
    need("dpkg-deb")
    dest.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["dpkg-deb", "-x", str(deb), str(dest)], capture_output=True, text=True)
    if r.returncode:
        why = (r.stderr.strip().splitlines() or [f"dpkg-deb exit status {r.returncode}"])[0]
        raise UserInputError(f"{deb}: not a readable .deb ({why})")
    return dest


def listed_debs(packages: tuple[str, ...], debs: Path | None, tmp: Path) -> Path:
    """A folder of the listed packages' .deb files: ``apt-get download`` of them into ``tmp`` (``debs`` None), or
    links to those in ``debs`` (a folder that may hold other packages too)."""
    if debs is None:
        return download(packages, tmp / "debs")
    folder, keep = tmp / "listed", set(packages)
    folder.mkdir(parents=True)
    for deb in debs.glob("*.deb"):
        if deb.name.split("_")[0] in keep:
            (folder / deb.name).symlink_to(deb.resolve())
    return folder


def listed_rows(
    packages: tuple[str, ...], debs: Path | None, rows: Callable[[Path, Path], Iterator[dict]]
) -> list[dict]:
    """A Debian domain's rows: ``rows(folder of .deb files, scratch folder)`` over the listed packages, from ``debs``
    (a folder that may hold others too) or from ``apt-get download`` of the list, in a temporary folder."""
    with tempfile.TemporaryDirectory() as tmp:
        return list(rows(listed_debs(packages, debs, Path(tmp)), Path(tmp) / "x"))

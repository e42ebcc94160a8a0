"""Which Debian packages give rows to a summarization domain: the discovery runs behind the fixed package lists.

The manuals and R-vignettes domains read fixed lists of packages (``MANUAL_PACKAGES``, ``VIGNETTE_PACKAGES``), so a
build is the same on every machine. The lists came from running each domain's rules over every package of the
release that ships the files the domain reads. This module redoes that:

    python -m strandline.data.fetch_manuals --discover runs/manuals-found.jsonl --max-mb 10
    python -m strandline.data.fetch_vignettes --discover runs/vignettes-found.jsonl --max-mb 5
    python -m strandline.data.fetch_readmes --discover runs/readmes-found.jsonl --max-mb 0.5 --sample 1200

1. the archive's Contents indexes (``dists/<suite>/main/Contents-all.gz`` and ``Contents-amd64.gz``, about 45 MB,
   downloaded once into ``--index-cache``) name every package that ships a file matching the domain's path
   (``usr/share/doc-base/...``; ``usr/lib/R/site-library/<package>/doc/<name>.Rmd``);
2. the candidates' sizes and sections come from ``apt-cache dumpavail`` (``--max-mb``: leave out larger ones;
   ``--section``: only one section, e.g. ``doc``; ``--sample N``: only the first N by a hash of their names);
3. each candidate is downloaded (``apt-get download``, 20 a call, into a temporary folder deleted after each
   batch), its rows built by the domain's own function (the rules a build applies), and one line written to the
   log: ``{"package": ..., "rows": n}`` (or ``"error"``). The log makes a run resumable: packages already in it
   are not read again.

The command prints the packages with at least one row, as the Python tuple the domain's list is, and their count.
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from strandline.data.debian import download, need
from strandline.errors import UserInputError, first_line
from strandline.files import atomic_write_bytes

MIRROR = "http://deb.debian.org/debian"
SUITE = "bookworm"
ARCHES = ("all", "amd64")
BATCH = 20


def contents_index(arch: str, cache: Path, mirror: str = MIRROR, suite: str = SUITE) -> Path:
    """The archive's Contents index of ``arch`` (main), downloaded once into ``cache``."""
    path = cache / f"Contents-{suite}-{arch}.gz"
    if not path.exists():
        url = f"{mirror}/dists/{suite}/main/Contents-{arch}.gz"
        print(f"downloading {url}", file=sys.stderr)
        try:
            with urllib.request.urlopen(url, timeout=60) as r:
                data = r.read()
        except OSError as e:
            raise UserInputError(f"{url}: not downloaded ({e})") from None
        atomic_write_bytes(path, data)
    return path


def packages_with(pattern: re.Pattern, indexes: Iterable[Path]) -> set[str]:
    """The packages that ship a file whose path matches ``pattern`` (a Contents line: the path, spaces, then
    ``section/package`` names joined by commas)."""
    found: set[str] = set()
    for index in indexes:
        try:
            with gzip.open(index, "rt", encoding="utf-8", errors="replace") as f:
                for line in f:
                    path, _, owners = line.rstrip("\n").rpartition(" ")
                    if path and pattern.search(path.rstrip()):
                        found.update(o.rsplit("/", 1)[-1] for o in owners.split(",") if o)
        except (OSError, EOFError) as e:
            raise UserInputError(f"{index}: not a readable Contents index ({first_line(e)})") from None
    return found


def parse_dumpavail(text: str) -> dict[str, tuple[int, str]]:
    """{package: (size of its .deb in bytes, section)} from ``apt-cache dumpavail``'s stanzas (the largest
    size where a package has several versions)."""
    out: dict[str, tuple[int, str]] = {}
    for stanza in text.split("\n\n"):
        fields = dict(m.groups() for m in re.finditer(r"^([\w-]+):[ \t]*(.*)$", stanza, re.M))
        if "Package" in fields and fields.get("Size", "").isdigit():
            size = int(fields["Size"])
            old = out.get(fields["Package"], (0, ""))
            out[fields["Package"]] = max((size, fields.get("Section", "").rsplit("/", 1)[-1]), old)
    return out


def available() -> dict[str, tuple[int, str]]:
    """``parse_dumpavail`` of this machine's package lists."""
    need("apt-cache")
    r = subprocess.run(["apt-cache", "dumpavail"], capture_output=True, text=True, errors="replace")
    if r.returncode:
        raise UserInputError(f"apt-cache dumpavail failed ({first_line(r.stderr) or r.returncode})")
    return parse_dumpavail(r.stdout)


def candidates(found: set[str], sizes: dict[str, tuple[int, str]], max_mb: float | None, section: str | None):
    """The found packages this machine's archive has, under ``max_mb`` and in ``section`` (None: any), sorted."""
    keep = [
        p
        for p in found
        if p in sizes
        and (max_mb is None or sizes[p][0] <= max_mb * 1e6)
        and (section is None or sizes[p][1] == section)
    ]
    return sorted(keep)


def sample(packages: list[str], n: int | None) -> list[str]:
    """The first ``n`` of ``packages`` by a hash of their names (None: all, in name order): a fixed, unbiased
    subset where a domain has many more candidates than it needs (every machine draws the same). The hash is not
    ``fetch_summaries.split_of``'s (SHA-1 of the name): with that one the sample would be the names it puts in
    the train split."""
    if n is None:
        return packages
    if n < 1:
        raise UserInputError(f"--sample must be at least 1, got {n}")
    return sorted(packages, key=lambda p: hashlib.sha256(f"sample {p}".encode()).hexdigest())[:n]


def read_log(log: Path) -> dict[str, dict]:
    """{package: its log line} of a discovery log (a missing log: empty; a torn line, from a run stopped
    mid-write, is ignored). ``UserInputError`` for a file that is not a discovery log: it is never appended to."""
    if not log.exists():
        return {}
    try:
        data = log.read_bytes()
    except OSError as e:
        raise UserInputError(f"{log}: not a discovery log ({first_line(e)}); give a new file") from None
    return parse_log(data, log)


def parse_log(data: bytes, log: Path) -> dict[str, dict]:
    """``read_log`` of a log's bytes (``log`` names it in errors)."""
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise UserInputError(f"{log}: not a discovery log ({first_line(e)}); give a new file") from None
    out = {}
    for n, line in enumerate(lines, 1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            row = None
        if isinstance(row, dict) and isinstance(row.get("package"), str):
            out[row["package"]] = row
        elif not line.startswith('{"package": '):  # a torn line (a run stopped mid-write) is let pass
            raise UserInputError(f"{log}: not a discovery log (line {n}); give a new file")
    return out


def discover(
    packages: list[str],
    rows_of: Callable[[Path, Path], Iterator[dict]],
    log: Path,
    fetch: Callable[[tuple[str, ...], Path], Path] | None = None,
) -> list[str]:
    """Run ``rows_of`` (a domain's function of one .deb and a scratch folder) over ``packages`` not yet in
    ``log``, appending one line per package; returns every logged package with at least one row, sorted.
    ``fetch``: how a batch is downloaded into a folder (``debian.download``). The log is read once, under its
    lock (what a run that held the lock before wrote is not read twice); a file that is not a log is refused
    before anything is written to it."""
    fetch = fetch or download
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        out = log.open("a+b")
    except OSError as e:
        raise UserInputError(f"{log}: not a discovery log ({first_line(e)}); give a new file") from None
    with out:
        _lock(out, log)
        out.seek(0)
        data = out.read()
        done = parse_log(data, log)
        todo = [p for p in packages if p not in done]
        if data and not data.endswith(b"\n"):
            out.write(b"\n")  # after a torn line, the next starts on a line of its own
        for i in range(0, len(todo), BATCH):
            batch = tuple(todo[i : i + BATCH])
            with tempfile.TemporaryDirectory() as tmp:
                debs = fetch(batch, Path(tmp) / "debs")
                for p in batch:
                    row: dict = {"package": p}
                    deb = next(iter(sorted(debs.glob(f"{p}_*.deb"))), None)
                    if deb is None:
                        row["error"] = "not downloaded"
                    else:
                        try:
                            row["rows"] = sum(1 for _ in rows_of(deb, Path(tmp) / "x"))
                        except UserInputError as e:
                            row["error"] = first_line(e)
                        shutil.rmtree(Path(tmp) / "x", ignore_errors=True)
                    out.write((json.dumps(row) + "\n").encode())
                    out.flush()
                    done[p] = row
            print(f"discover: {min(i + BATCH, len(todo))}/{len(todo)} packages read", file=sys.stderr)
    return sorted(p for p, row in done.items() if row.get("rows"))


def _lock(out, log: Path) -> None:
    """Hold the log's exclusive lock while appending: a second run on the same log is refused in one line (two
    would read some packages twice and interleave their lines)."""
    try:
        fcntl.flock(out.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise UserInputError(
            f"{log}: another discovery run is appending to it; wait for it or give a new file"
        ) from None
    except OSError as e:  # ENOLCK, EOPNOTSUPP: a file system without locks; one run at a time is then on the user
        print(f"discover: {log}: not locked ({e.strerror}); run one discovery on it at a time", file=sys.stderr)


def run(args, pattern: re.Pattern, rows_of: Callable[[Path, Path], Iterator[dict]]) -> list[str]:
    """The ``--discover`` command of a domain: ``args`` has discover (the log), max_mb, section, index_cache."""
    read_log(Path(args.discover))  # a wrong LOG is refused before the indexes are downloaded
    cache = Path(args.index_cache)
    found = packages_with(pattern, [contents_index(a, cache) for a in ARCHES])
    todo = sample(candidates(found, available(), args.max_mb, args.section), getattr(args, "sample", None))
    print(f"discover: {len(found)} packages ship {pattern.pattern}; {len(todo)} to read", file=sys.stderr)
    passed = discover(todo, rows_of, Path(args.discover))
    print("(" + "".join(f'\n    "{p}",' for p in passed) + "\n)")
    print(f"# packages with rows: {len(passed)} (log: {args.discover})")
    return passed

"""Build the multi-domain document / human-summary pairs behind the summarization benchmark (offline).

    python -m strandline.data.fetch_summaries [--out data/cache/summaries] [--deb path/to/python3.11-doc_*.deb]

Writes one JSONL per domain, each row ``{"id", "domain", "split", "title", "text", "summary"}``:

- ``aclsum``: ACL papers (S2ORC body) -> their abstracts, from the installed ``aclsum`` package; its official
  split 100/50/100.
- ``python-guides``: the CPython 3.11 HOWTOs -> their ``.. topic:: Abstract`` (or ``Overview``), and the What's
  New pages -> their "Summary -- Release highlights" section, from Debian's ``python3.11-doc`` (reST sources
  under ``/usr/share/doc/python3.11/html/_sources``), fetched with ``apt-get download``.
- ``python-library``: the CPython library reference pages -> the module's ``:synopsis:`` line (same package).
- ``manuals``: long technical manuals from Debian (text, Info or HTML, up to 300 kB of text) -> the abstract of
  their doc-base entry; a fixed list of packages fetched with ``apt-get download``
  (``strandline.data.fetch_manuals``, which says how they were chosen); split by the manual's source name.
- ``pypi-readme``: the long descriptions (READMEs) of fixed lists of Python distributions -> their one-line
  ``Summary`` (core metadata): ``PYPI_PINS``, the 65 that ``make install`` put in ``.venv`` (name and version),
  read offline from the installed distributions, and ``PYPI_WHEEL_PINS``, 109 more read from their wheels
  (``pip download --no-deps``). A pin of ``PYPI_PINS`` that is not installed at its version (a later
  ``make install`` resolves newer releases) is read from its wheel too, so every environment builds the same domain;
  a pin no wheel is found for is skipped and named on stderr (a visibly smaller domain, never a different one).
- ``r-vignettes``: the R Markdown vignettes of R packages in Debian (CRAN and Bioconductor) -> their package's
  ``Description`` (``strandline.data.fetch_vignettes``: a fixed list fetched with ``apt-get download``, one vignette
  per package); split by the package name.
- ``debian-readme``: the upstream READMEs (Markdown or reST) that Debian packages ship -> the package's extended
  ``Description`` (``strandline.data.fetch_readmes``: a fixed list fetched with ``apt-get download``, one README per
  source package, no Python or R package); split by the source package's name.

The summary is always removed from the document. Each document is the text ``strandline summarize`` reads from
its file (``strandline.data.markup``): the reST sources and the reST READMEs rendered as reST, the Markdown
READMEs and the R Markdown vignettes as Markdown (a README's ``Description-Content-Type`` says which; PyPI reads
one without it as reST), the manuals' HTML as HTML; so markup, code blocks, directives and tables are gone, and
headings are paragraphs of their own. The Python documentation's summaries are reST, read as those documents'
text is (``markup.rst_inline``: ``:mod:`json``` -> ``json``, a link to its title); a README's ``Summary`` is plain text
and kept as PyPI shows it. Which documents a domain holds is decided on the sources (their length before
rendering), so rendering never changes the set. Splits outside ACLSum are fixed by a hash of the id: 50% train,
20% val, 30% test.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from strandline.data.debian import download, extract
from strandline.data.markup import render_text, rst_inline
from strandline.errors import UserInputError, script
from strandline.files import atomic_write_text

DEFAULT_OUT = Path(__file__).resolve().parent / "cache" / "summaries"
DOMAINS = ("aclsum", "python-guides", "python-library", "pypi-readme", "manuals", "r-vignettes", "debian-readme")
DOC_ROOT = "usr/share/doc/python3.11/html/_sources"
MIN_CHARS = 2000  # shorter pages are stubs: nothing to summarize
# The pypi-readme domain: distributions (name==version) whose READMEs are documents. Fixed, so that the domain does
# not follow whatever else is installed (the gpu extra, `make bench-deps` and other work had added einops, fla-core
# and pytorch-fast-transformers, which moved the results): the 65 of a clean `make install` (extras dev, bigwig,
# bench; torch's CPU build) as reported when the domain was built, 2026-12-01.
PYPI_PINS = (
    "absl-py==2.5.1",
    "aclsum==0.1.2",
    "aiohappyeyeballs==2.7.1",
    "aiohttp==3.14.5",
    "aiosignal==1.4.0",
    "annotated-types==0.8.0",
    "anyio==4.16.0",
    "biopython==1.88",
    "charset-normalizer==3.5.3",
    "cloudpickle==3.1.3",
    "cwevals==0.0.1b1",
    "datasets==5.2.0",
    "defusedxml==0.7.1",
    "dill==0.4.1",
    "distro==1.9.0",
    "fonttools==4.68.0",
    "frozenlist==1.8.0",
    "googleapis-common-protos==1.76.0",
    "h11==0.16.0",
    "hf-xet==1.8.0",
    "httpcore==1.0.9",
    "httpcore2==2.16.2",
    "httpx==0.28.1",
    "httpx2==2.16.2",
    "huggingface_hub==2.4.0",
    "idna==3.20",
    "joblib==1.6.0",
    "jsonargparse==4.53.0",
    "lightning==2.6.6",
    "lightning-utilities==0.15.3",
    "mpmath==1.3.0",
    "multiprocess==0.70.19",
    "networkx==3.6.1",
    "numpy==2.4.6",
    "packaging==26.4",
    "pandas==3.1.1",
    "pillow==13.0.0",
    "pip==23.2.1",
    "platformdirs==4.14.9",
    "pluggy==1.7.0",
    "psutil==7.2.2",
    "pyarrow==26.0.1",
    "pyBigWig==0.3.29",
    "pydantic==2.14.4",
    "pydantic_core==2.50.5",
    "pyfaidx==0.9.2.2",
    "pyparsing==3.3.3",
    "pytest==9.2.0",
    "python-dateutil==4.0.0",
    "pytorch-lightning==2.6.6",
    "regex==2026.11.19",
    "requests==2.34.2",
    "rouge_score==0.1.2",
    "ruff==0.17.6",
    "setuptools==84.2.1",
    "sniffio==1.3.1",
    "sympy==1.14.0",
    "torch==2.13.0+cpu",
    "tqdm==4.70.1",
    "truststore==0.10.5",
    "typeshed_client==2.15.0",
    "urllib3==2.8.0",
    "wandb==0.31.0",
    "xxhash==4.1.0",
    "yarl==1.25.1",
)

# More READMEs: popular pure-Python distributions that `make install` does not install, read from their wheels
# (``pip download --no-deps``, 76 MB). Chosen on 2026-12-05 from a hand-made list of 180 well-known
# distributions by the rule every pin meets (a README of at least MIN_CHARS characters, a Summary of 4 or more
# words), the installed ones left out.
PYPI_WHEEL_PINS = (
    "alembic==1.20.1", "alive-progress==3.3.0", "APScheduler==3.11.3", "arrow==1.4.0", "asciimatics==1.15.0",
    "astroid==4.4.0", "backoff==2.2.1", "black==26.10.1", "bleach==6.4.0", "blessed==1.53.0", "boltons==26.2.0",
    "boto3==1.44.18", "botocore==1.44.18", "build==1.6.1", "cachetools==8.0.2", "Cerberus==1.3.8", "cfgv==3.5.0",
    "chardet==7.7.0", "colorama==0.4.6", "coverage-badge==1.1.2", "Django==5.2.19", "docutils==0.23.1",
    "dynaconf==3.3.5", "environs==15.2.0", "factory_boy==3.3.3", "Faker==40.63.0", "falcon==4.4.0",
    "fastapi==0.165.0", "flake8==7.5.0", "flit==4.2.0", "fpdf2==2.8.9", "freezegun==1.5.5", "gunicorn==27.0.1",
    "halo==0.0.30", "hatchling==1.33.0", "html5lib==1.1", "identify==2.6.20", "inflect==7.6.0", "inquirer==3.4.1",
    "isort==9.0.2", "jsonschema==4.26.0", "kombu==5.7.0", "loguru==0.7.3", "Markdown==3.11.3", "marshmallow==4.4.0",
    "mkdocs-material==9.8.2", "mkdocs==1.6.1", "mkdocstrings==1.0.8", "more-itertools==11.2.1", "nodeenv==1.12.0",
    "oauthlib==4.0.1", "parsel==1.12.1", "pdm==2.29.4", "pdoc==16.0.0", "phonenumbers==9.0.43", "plumbum==2.0.2",
    "poetry-core==2.5.0", "prettytable==3.19.0", "prompt_toolkit==3.0.53", "pyasn1==0.6.5", "pycodestyle==2.15.0",
    "pyflakes==4.1.0", "PyJWT==2.15.1", "pylint==4.1.5", "pypdf==7.1.1", "pytest-cov==7.1.0", "pytest-mock==3.17.0",
    "python-dotenv==1.2.4", "python-slugify==9.2.0", "qrcode==8.2", "questionary==2.1.1", "redis==8.2.0",
    "requests-mock==1.12.1", "requests-oauthlib==2.0.0", "responses==0.26.3", "rich==15.0.0", "sanic==25.12.1",
    "schedule==1.2.2", "selenium==4.53.0", "sentry-sdk==2.76.0", "setuptools-scm==10.3.4", "shortuuid==1.0.13",
    "sortedcontainers==2.4.0", "soupsieve==2.10", "sqlmodel==0.0.50", "sqlparse==0.6.1", "starlette==1.10.0",
    "structlog==26.1.0", "termcolor==3.3.0", "textblob==0.20.1", "tinydb==4.9.0", "toml==0.10.2", "tomli==2.5.0",
    "tomlkit==0.15.3", "toolz==1.2.0", "traitlets==5.16.1", "trio==0.35.0", "typer==0.29.2", "Unidecode==1.4.0",
    "urwid==5.1.0", "uvicorn==0.55.0", "validators==0.36.0", "vcrpy==9.4.2", "voluptuous==0.16.0", "wcwidth==0.9.4",
    "websockets==17.4", "Werkzeug==3.1.9", "xlrd==2.0.2", "yaspin==3.5.1",
)  # fmt: skip


def split_of(doc_id: str) -> str:
    """The fixed split of a non-ACLSum document: 50% train, 20% val, 30% test by a hash of its id."""
    h = int(hashlib.sha1(doc_id.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return "train" if h < 0.5 else "val" if h < 0.7 else "test"


def readme_markup(md) -> str:
    """The markup of a README from its ``Description-Content-Type``; PyPI renders one without it as reST."""
    kind = (md.get("Description-Content-Type") or "text/x-rst").split(";")[0].strip().lower()
    return {"text/markdown": "markdown", "text/plain": "text"}.get(kind, "rst")


def _block(lines: list[str], start: int) -> tuple[str, int]:
    """The indented block after line ``start`` (a directive) as one paragraph; returns (text, next line)."""
    body, i = [], start + 1
    while i < len(lines) and (not lines[i].strip() or lines[i].startswith((" ", "\t"))):
        body.append(lines[i].strip())
        i += 1
    return " ".join(x for x in body if x), i


def howto_pair(text: str) -> tuple[str, str] | None:
    """(document, abstract) of a HOWTO page with a ``.. topic:: Abstract`` or ``Overview`` block."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if re.match(r"\.\. topic:: (Abstract|Overview)\s*$", line):
            summary, end = _block(lines, i)
            return "\n".join(lines[:i] + lines[end:]), summary
    return None


def whatsnew_pair(text: str) -> tuple[str, str] | None:
    """(document, highlights) of a What's New page with a "Summary -- Release highlights" section."""
    lines = text.splitlines()
    for i, line in enumerate(lines[:-1]):
        # "Release highlights" in most pages, "Release Highlights" in 3.4 and 3.7
        if line.lower().startswith("summary -- release highlights") and set(lines[i + 1].strip()) == {"="}:
            end = next(
                (j for j in range(i + 2, len(lines) - 1) if lines[j].strip() and set(lines[j + 1].strip()) == {"="}),
                len(lines),
            )
            body = [ln.strip() for ln in lines[i + 2 : end] if not ln.lstrip().startswith(".. ")]
            body = [ln for ln in body if ln and not ln.startswith(("Brevity", "Please"))]
            return "\n".join(lines[:i] + lines[end:]), " ".join(body)
    return None


def library_pair(text: str) -> tuple[str, str] | None:
    """(document, synopsis) of a library page: the first ``:synopsis:`` of its ``.. module::`` directive."""
    m = re.search(r"^\.\. module:: .*\n(?:[ \t]+:[\w-]+:.*\n)*?[ \t]+:synopsis:[ \t]*(.+)\n", text, re.MULTILINE)
    if not m:
        return None
    line = m.group(0).splitlines()[-1]
    return text.replace(line + "\n", "", 1), m.group(1).strip()


def _deb_sources(deb: str | None, tmp: Path) -> Path:
    """The reST sources of python3.11-doc: from ``deb`` or from ``apt-get download`` into ``tmp``."""
    if deb is None:
        found = sorted(download(("python3.11-doc",), tmp).glob("python3.11-doc_*.deb"))
        if not found:
            raise UserInputError("python3.11-doc: not in the apt archive (apt-get download); give --deb")
        deb = str(found[-1])
    return extract(deb, tmp / "x") / DOC_ROOT


def python_docs(root: Path) -> Iterator[dict]:
    """Rows of the python-guides and python-library domains."""
    kinds = [("howto", "python-guides", howto_pair), ("whatsnew", "python-guides", whatsnew_pair)]
    kinds.append(("library", "python-library", library_pair))
    for folder, domain, pair in kinds:
        for path in sorted((root / folder).glob("*.rst.txt")):
            found = pair(path.read_text(encoding="utf-8"))
            if not found or len(found[0]) < MIN_CHARS or len(found[1].split()) < 3:
                continue
            doc_id = f"{folder}/{path.name.removesuffix('.rst.txt')}"
            text, summary = render_text(found[0], "rst"), rst_inline(found[1])
            yield {"id": doc_id, "domain": domain, "split": split_of(doc_id), "title": doc_id, "text": text,
                   "summary": summary}  # fmt: skip


def installed_metadata(pin: str):
    """The core metadata of a ``name==version`` pin installed at exactly that version, else None."""
    name, version = pin.split("==")
    try:
        md = importlib.metadata.distribution(name).metadata
    except importlib.metadata.PackageNotFoundError:
        return None
    return md if md["Version"] == version else None


def pypi_readmes(pins: tuple[str, ...] = PYPI_PINS, found: dict | None = None) -> Iterator[dict]:
    """Rows of the pypi-readme domain from installed distributions: the pinned ones' long descriptions -> their
    Summary.

    A pin that is not installed at exactly its version is skipped (its README would be another text) and the
    skipped pins are named on stderr (``readme_rows`` reads them from their wheels instead). ``found``: each
    pin's ``installed_metadata`` when the caller has read it already.
    """
    skipped = []
    for pin in sorted(pins, key=str.lower):
        if (md := installed_metadata(pin) if found is None else found[pin]) is None:
            skipped.append(pin)
        elif row := readme_row(md):
            yield row
    if skipped:
        print(f"pypi-readme: {len(skipped)} pinned distributions not installed at their version, skipped: "
              + " ".join(skipped), file=sys.stderr)  # fmt: skip


def readme_row(md) -> dict | None:
    """A pypi-readme row from a distribution's core metadata (an ``email.message.Message``), or None when its
    README is shorter than ``MIN_CHARS`` or its Summary has fewer than 4 words."""
    summary = (md.get("Summary") or "").strip()
    body = md.get_payload() or md.get("Description") or ""
    if len(body) < MIN_CHARS or len(summary.split()) < 4:
        return None
    doc_id = f"{md['Name']}-{md['Version']}"
    return {"id": doc_id, "domain": "pypi-readme", "split": split_of(doc_id), "title": md["Name"],
            "text": render_text(body, readme_markup(md)), "summary": summary}  # fmt: skip


def _wheels_of(folder: Path, name: str, version: str) -> list[Path]:
    """The wheels of ``name``==``version`` in ``folder`` (file names normalized as PEP 427/503 say, any case)."""
    prefix = f"{re.sub(r'[-_.]+', '_', name)}-{version}-".lower()
    return sorted(p for p in folder.glob("*.whl") if p.name.lower().startswith(prefix))


def wheel_readmes(pins: tuple[str, ...] = PYPI_WHEEL_PINS, wheels: Path | None = None) -> Iterator[dict]:
    """Rows of the pypi-readme domain from wheels: ``wheels/<name>-<version>-*.whl`` when given and there, else
    ``pip download --no-deps`` of the pin; the core metadata (``*.dist-info/METADATA``) is read from the wheel
    without installing it. A pin no wheel is found for is named on stderr and skipped."""
    import email.parser
    import zipfile

    missing = []
    with tempfile.TemporaryDirectory() as tmp:
        for pin in sorted(pins, key=str.lower):
            name, version = pin.split("==")
            found = _wheels_of(wheels, name, version) if wheels is not None else []
            if not found:
                cmd = [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "--only-binary=:all:",
                    "-q",
                    "-d",
                    tmp,
                    pin,
                ]
                subprocess.run(cmd, capture_output=True)
                found = _wheels_of(Path(tmp), name, version)
            if not found:
                missing.append(pin)
                continue
            with zipfile.ZipFile(found[0]) as z:
                meta = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
                text = z.read(meta[0]).decode("utf-8", errors="replace") if meta else ""
            if text and (row := readme_row(email.parser.Parser().parsestr(text))):
                yield row
    if missing:
        print(f"pypi-readme: no wheel for {len(missing)} pins, skipped: " + " ".join(missing), file=sys.stderr)


def readme_rows(
    pins: tuple[str, ...] = PYPI_PINS, wheel_pins: tuple[str, ...] = PYPI_WHEEL_PINS, wheels: Path | None = None
) -> list[dict]:
    """The pypi-readme domain: ``pins`` read from the installed distributions where installed at their version,
    from their wheels otherwise, and ``wheel_pins`` from their wheels."""
    found = {p: installed_metadata(p) for p in pins}  # each distribution's metadata read once
    installed = tuple(p for p in pins if found[p] is not None)
    others = tuple(p for p in pins if found[p] is None)
    return [*pypi_readmes(installed, found), *wheel_readmes((*others, *wheel_pins), wheels)]


def aclsum_rows() -> Iterator[dict]:
    from strandline.data.documents import load_aclsum

    for split in ("train", "val", "test"):
        for d in load_aclsum(split):
            yield {"id": d["id"], "domain": "aclsum", "split": split, "title": d["title"], "text": d["text"],
                   "summary": d["abstract"]}  # fmt: skip


def build(
    out: Path,
    deb: str | None = None,
    manual_debs: str | None = None,
    wheels: str | None = None,
    vignette_debs: str | None = None,
    readme_debs: str | None = None,
) -> dict[str, int]:
    """Write ``out/<domain>.jsonl`` for every domain; returns the number of documents per domain."""
    from strandline.data import fetch_manuals, fetch_readmes, fetch_vignettes

    rows: dict[str, list[dict]] = {d: [] for d in DOMAINS}
    debian = fetch_manuals.build_rows(Path(manual_debs) if manual_debs else None)
    debian += fetch_vignettes.build_rows(Path(vignette_debs) if vignette_debs else None)
    debian += fetch_readmes.build_rows(Path(readme_debs) if readme_debs else None)
    with tempfile.TemporaryDirectory() as tmp:
        readmes = readme_rows(wheels=Path(wheels) if wheels else None)
        for row in [*aclsum_rows(), *python_docs(_deb_sources(deb, Path(tmp))), *readmes, *debian]:
            rows[row["domain"]].append(row)
    for domain, items in rows.items():
        atomic_write_text(out / f"{domain}.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in items))
    return {d: len(v) for d, v in rows.items()}


def load_pairs(domain: str, split: str | None = None, root: Path = DEFAULT_OUT) -> list[dict]:
    """The rows of one domain (optionally one split) written by ``build``."""
    path = root / f"{domain}.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `python -m strandline.data.fetch_summaries` first")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return [r for r in rows if split is None or r["split"] == split]


def domain_main(argv: list[str] | None, description: str, domain: str, build_rows, discover=None) -> None:
    """The command line of a module that builds one domain from .deb files (its ``main`` is decorated with
    ``strandline.errors.script``, which turns errors into one line and exit status 2): ``--debs DIR`` (default: ``apt-get
    download``) and ``--out DIR``; writes ``DIR/<domain>.jsonl`` and prints its counts. ``discover``: (the path
    pattern of the files the domain reads, its rows function of one .deb) for ``--discover LOG``, which finds the
    packages that give rows instead (``strandline.data.discover``)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--debs", default=None, help="a folder of .deb files already downloaded (default: apt-get download)")
    p.add_argument("--out", default=str(DEFAULT_OUT), help="output folder (git-ignored)")
    if discover is not None:
        p.add_argument("--discover", metavar="LOG", default=None,
                       help="find the release's packages that give rows (resumable JSONL log); prints the list")  # fmt: skip
        p.add_argument("--max-mb", type=float, default=None, help="--discover: leave out .deb files over this size")
        p.add_argument("--section", default=None, help="--discover: only packages of this section (e.g. doc)")
        p.add_argument("--sample", type=int, default=None,
                       help="--discover: read only this many candidates, the first by a hash of their names")  # fmt: skip
        p.add_argument("--index-cache", default=str(DEFAULT_OUT.parent / "debian"),
                       help="--discover: where the archive's Contents indexes are kept")  # fmt: skip
    args = p.parse_args(argv)
    if getattr(args, "discover", None):
        from strandline.data import discover as disc

        disc.run(args, *discover)
        return
    rows = build_rows(Path(args.debs) if args.debs else None)
    if not rows:  # an empty domain file would fail later, far from its cause
        where = f"{args.debs} holds none of the listed packages" if args.debs else "none of the packages was fetched"
        raise UserInputError(f"no documents ({where}); nothing written")
    atomic_write_text(
        Path(args.out) / f"{domain}.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    )
    splits = [r["split"] for r in rows]
    print(
        f"{domain} {len(rows):>4} documents  " + "  ".join(f"{s} {splits.count(s)}" for s in ("train", "val", "test"))
    )


@script("fetch_summaries")
def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(DEFAULT_OUT), help="output folder (git-ignored)")
    p.add_argument("--deb", default=None, help="a python3.11-doc .deb already downloaded (default: apt-get download)")
    p.add_argument(
        "--manual-debs", default=None, help="a folder of the manuals' .deb files (default: apt-get download)"
    )
    p.add_argument("--wheels", default=None, help="a folder of the READMEs' wheels (default: pip download)")
    p.add_argument(
        "--vignette-debs", default=None, help="a folder of the vignettes' .deb files (default: apt-get download)"
    )
    p.add_argument(
        "--readme-debs", default=None, help="a folder of the READMEs' .deb files (default: apt-get download)"
    )
    args = p.parse_args(argv)
    counts = build(Path(args.out), args.deb, args.manual_debs, args.wheels, args.vignette_debs, args.readme_debs)
    for domain, n in counts.items():
        splits = [r["split"] for r in load_pairs(domain, root=Path(args.out))]
        print(
            f"{domain:<15} {n:>4} documents  " + "  ".join(f"{s} {splits.count(s)}" for s in ("train", "val", "test"))
        )
    sys.stdout.flush()


if __name__ == "__main__":
    raise SystemExit(main())

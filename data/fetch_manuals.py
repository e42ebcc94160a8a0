"""The ``manuals`` summarization domain: long technical manuals from Debian, each paired with its abstract.

Every Debian package that ships documentation registers each document with ``doc-base``
(``/usr/share/doc-base/<id>``): a title, an ``Abstract:`` written for the catalogue (by the document's authors or its
packager) and the files of each format. A row of this domain is one such document read as a reader sees it
(plain text as is; an Info manual through ``fetch_longtext.info_text``, the reader of the long-text corpus:
its nodes without header lines, menus, indexes or licences; an HTML manual converted with
``strandline.data.markup``, its index page first and then the pages in the order the index links to them), with
the abstract as the reference summary. A format whose files give no text (an "Info" entry that names the
Texinfo source) passes to the next.

    python -m strandline.data.fetch_summaries            # builds every domain, this one included
    python -m strandline.data.fetch_manuals --debs DIR   # this domain alone, from .deb files already downloaded

The packages are the fixed list ``MANUAL_PACKAGES`` (``apt-get download`` fetches each at the release's current
version). They were chosen by running ``entries`` with the rules below over every Debian bookworm package that
registers a doc-base document (``usr/share/doc-base/`` in the archive's Contents indexes) and keeping the packages
where a document passed: on 2026-12-05 those of Section ``doc`` under 1 MB (135), on 2026-12-06 the other 1,851
under 10 MB, of any section (192 more; the 146 ``doc`` packages over 10 MB, 5.4 GB, were not read). The rules,
applied again at every build (``--discover LOG --max-mb 10`` redoes the search, ``strandline.data.discover``):

- an English abstract of 20 to 200 words that does not describe generated API documentation (``API``, Doxygen,
  Javadoc) and is not a translation (title, abstract or package name);
- a document of at least ``MIN_CHARS`` characters of text, most of it English words (``ENGLISH``); a longer
  one is cut at a paragraph boundary after ``MAX_CHARS`` (the LM time of the benchmark stays bounded);
- the abstract is removed from the document: an ``Abstract`` heading and every paragraph whose word pairs are
  mostly the abstract's (``in_abstract``), so no system can copy it;
- one document per abstract and per title (translations and versions of one manual share them).

Splits: 50% train, 20% val, 30% test by a hash of the package's source name (language suffix removed), so two
documents of one manual never fall on both sides.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urldefrag

from strandline.data.debian import extract, listed_rows
from strandline.data.fetch_longtext import info_text
from strandline.data.fetch_summaries import split_of
from strandline.data.markup import render_text
from strandline.data.segment import FUNCTION_WORDS  # the summarizer's own list
from strandline.errors import script

DISCOVER = re.compile(r"^usr/share/doc-base/[^/]+$")  # the files --discover looks for: doc-base registrations
MIN_CHARS = 20_000
MAX_CHARS = 300_000
ENGLISH = 0.25  # share of English function words a document's words must reach
ABSTRACT_WORDS = (20, 200)
_LANG = r"(?:ar|bg|ca|cs|da|de|el|es|eu|fi|fr|gl|hu|id|it|ja|ko|nl|pl|pt|pt-br|ro|ru|sk|sv|tr|uk|vi|zh|zh-cn|zh-tw)"
_TRANSLATION = re.compile(
    r"translat|\((?:Arabic|Catalan|Chinese|Czech|Danish|Dutch|Finnish|French|German|Greek|Hungarian|Indonesian|"
    r"Italian|Japanese|Korean|Polish|Portuguese|Romanian|Russian|Slovak|Spanish|Swedish|Turkish|Ukrainian|"
    r"Vietnamese)",
    re.I,
)
_API = re.compile(r"\bAPI\b|doxygen|javadoc|generated (?:from|by|with)", re.I)

MANUAL_PACKAGES: tuple[str, ...] = (  # the discovery runs of 2026-12-05 and 2026-12-06 (see the module docstring)
    "abs-guide", "adcli", "appstream-doc", "apt-cacher-ng", "apt-doc", "aspectj-doc", "auctex", "autoconf-doc",
    "autoconf2.13", "autogen-doc", "automake", "automake1.11", "avrdude-doc", "awesfx", "backup-manager-doc",
    "bash-doc", "bc", "blends-doc", "bowtie", "bowtie2", "bzip2-doc", "camlidl-doc", "cdist-doc", "cflow-doc",
    "chezscheme-doc", "cl-alexandria", "cl-cffi", "cl-drakma", "cl-flexi-streams", "cl-uffi", "codonw", "copyq-doc",
    "cpl-plugin-naco-doc", "csh", "cssc", "cvs", "cvs-fast-export", "cxxtest", "darkradiant", "ddd", "debian-policy",
    "debmake-doc", "dejagnu", "denemo-doc", "developers-reference", "dh-ocaml", "diffutils-doc", "displaycal",
    "doc-debian", "docbook-xsl-doc-text", "docbook2x", "docbook5-xml", "dpuser-doc", "drbd-doc", "edbrowse",
    "elpa-embark", "elpa-yasnippet", "enblend", "enfuse", "enigma-doc", "espeak", "espeak-ng", "evolver-doc",
    "fastdnaml", "fcode-utils", "fdutils", "fim", "findutils", "flex", "flex-doc", "fontconfig", "fpga-icestorm",
    "gap-aclib", "gap-autodoc", "gap-congruence", "gap-cryst", "gap-crystcat", "gap-factint", "gap-gapdoc", "gap-grape",
    "gap-hapcryst", "gap-sonata", "gdspy-doc", "geomview", "getdp", "git-buildpackage", "git-doc", "gitmagic", "glam2",
    "glue-sprite", "gm2-12-doc", "gnu-standards", "gnubg-data", "gnumed-doc", "gnustep-gui-doc", "gprbuild-doc",
    "gprolog", "gpscorrelate", "grace", "graphviz-doc", "grub-legacy-doc", "gtypist", "halibut", "hamradio-maintguide",
    "happy", "harden-doc", "haskell98-report", "hplip-doc", "hugs", "idzebra-2.0-doc", "imagemagick-6-doc",
    "indent-doc", "ivar-doc", "jigdo-file", "jimsh", "jove", "kid3-qt", "king", "kraken", "latex-mk", "lava-server-doc",
    "libadacgi6-dev", "libafterimage-dev", "libapache-asp-perl", "libapache2-mod-python-doc", "libapt-pkg-doc",
    "libaunit-doc", "libblitz-doc", "libcairo2-doc", "libcfitsio-doc", "libcunit1-doc", "libdbi-doc", "libdbuskit-dev",
    "libdsk4-dev", "libfcgi-dev", "libfftw3-doc", "libfrobby-doc", "libftp-dev", "libglade2-dev", "libglib2.0-doc",
    "libgoocanvas-2.0-common", "libgrilo-0.3-doc", "libgtk-3-doc", "libgtk-4-doc", "libgtk2.0-doc", "libgtkada-doc",
    "libgtksourceview-3.0-doc", "libhowardhinnant-date-dev", "libhsqldb-java-doc", "libitpp-doc", "liblog4cxx-doc",
    "liblognorm-doc", "libmikmod-dev", "liboop-doc", "libopencsg1", "libopendkim-dev", "libpam-doc", "libpango1.0-doc",
    "libparlatype-doc", "libplib-doc", "libpng16-16", "libppl-doc", "libqcustomplot-doc", "libqwt-doc", "libsc-doc",
    "libst-dev", "libstarlink-ast-doc", "libstdc++-11-doc", "libsvgpp-doc", "libtasn1-doc", "libtemplates-parser-doc",
    "libtest-lectrotest-perl", "libuu-dev", "libwebkit2gtk-4.0-doc", "libwmf-doc", "libwnck-doc",
    "libwpewebkit-1.0-doc", "libxpa-dev", "linklint", "linpac", "linuxdoc-tools", "lmod-doc", "luckybackup-data",
    "m4-doc", "mailfromd-doc", "maint-guide", "mcl-doc", "menu", "midish", "minpack-dev", "mit-scheme-doc", "mksh",
    "mma", "mplayer-doc", "muscle3", "ncbi-tools-x11", "nco", "ne-doc", "nethack-spoilers", "netrik", "nettle-dev",
    "newlisp", "ninja-build", "noweb", "ntpsec-doc", "nut-doc", "octave-doc", "octave-parallel", "octave-queueing",
    "openafs-doc", "openjade", "openni-doc", "openscap-doc", "opensp", "parallel", "php-twig-doc", "ponyprog",
    "postgresql-doc-15", "primecount-doc", "privoxy", "psgml", "pspp", "publican", "py3c-dev", "pyqt-builder-doc",
    "python-betamax-doc", "python-bleach-doc", "python-django-debug-toolbar-doc", "python-django-pipeline-doc",
    "python-django-registration-doc", "python-kitchen-doc", "python-libevdev-doc", "python-milter-doc",
    "python-natsort-doc", "python-nbsphinx-doc", "python-paste-doc", "python-pexpect-doc", "python-pmw-doc",
    "python-psutil-doc", "python-py-stringmatching-doc", "python-pybedtools-doc", "python-pygtrie-doc",
    "python-pylatexenc-doc", "python-pytest-dependency-doc", "python-pythran-doc", "python-requests-doc",
    "python-tablib-doc", "python-tap-doc", "python-testtools-doc", "python-vcr-doc", "python3", "python3-dialog",
    "python3-django-axes-doc", "python3-gnuplot", "python3-pcbasic-doc", "python3-svn", "pywps-doc", "qbs-doc-html",
    "quilt", "r-doc-html", "raster3d-doc", "realmd", "recode-doc", "rmagic", "rrdcached", "rrdtool", "rsnapshot",
    "rubber", "runit", "salmon", "samhain", "sbmltoolbox", "scheme9", "sctk-doc", "secilc-doc", "seqan3-doc",
    "sharutils-doc", "shorewall-doc", "shunit2", "slang-pvm", "slurm-wlm-doc", "smbldap-tools", "smstools", "socklog",
    "spades", "srst2", "stilts-doc", "stk-doc", "stumpwm", "surf-alggeo-doc", "swi-prolog-doc", "swish-e", "systraq",
    "tachyon-doc", "tcllib", "texmaker-data", "tig", "time", "tk707", "tkabber", "tkdesk", "tklib", "topcat-doc",
    "toulbar2-doc", "tox", "treeview", "tweak", "ubuntu-packaging-guide-html", "unifont-bin", "varnish-doc",
    "verilator", "wcslib-doc", "webissues", "why3-doc-html", "xboard", "xdemorse", "xmakemol", "xmlformat-doc",
    "xnee-doc", "xournal", "xterm", "xxdiff", "xxdiff-scripts", "yabasic", "zoem", "zsh-common", "zsh-doc",
)  # fmt: skip


@dataclass
class Entry:
    """One doc-base document of a package: its fields and its formats (format name -> {"files", "index"})."""

    package: str
    doc_id: str
    title: str
    abstract: str
    formats: dict[str, dict[str, str]] = field(default_factory=dict)


def parse_doc_base(text: str, package: str) -> list[Entry]:
    """The documents of doc-base control files (one or more, blank-line separated paragraphs)."""
    entries: list[Entry] = []
    for block in re.split(r"(?m)^(?=Document:)", text):
        fields: dict[str, str] = {}
        formats: list[dict[str, str]] = []
        key = None
        for line in block.splitlines():
            m = re.match(r"^([A-Za-z-]+):\s?(.*)$", line)
            if m:
                key, value = m.group(1).lower(), m.group(2).strip()
                if key == "format":
                    formats.append({"format": value.lower()})
                elif key in ("files", "index") and formats:
                    formats[-1][key] = value
                else:
                    fields[key] = value
            elif line.startswith((" ", "\t")) and key:
                value = "" if line.strip() == "." else line.strip()
                if key in ("files", "index") and formats:
                    formats[-1][key] = f"{formats[-1].get(key, '')} {value}".strip()
                else:
                    fields[key] = f"{fields.get(key, '')} {value}".strip()
        if "document" in fields:
            forms = {f["format"]: f for f in formats}
            entries.append(
                Entry(package, fields["document"], fields.get("title", ""), fields.get("abstract", ""), forms)
            )
    return entries


def _english(text: str) -> float:
    words = re.findall(r"[a-z]+", text.lower())
    return sum(w in FUNCTION_WORDS for w in words) / max(1, len(words))


def english_summary(text: str) -> bool:
    """A reference summary of ``ABSTRACT_WORDS`` words, English by its share of function words."""
    return ABSTRACT_WORDS[0] <= len(text.split()) <= ABSTRACT_WORDS[1] and _english(text) >= 0.2


def good_abstract(e: Entry) -> bool:
    """The abstract rules of the module docstring."""
    if not english_summary(e.abstract) or _API.search(e.abstract) or _API.search(e.title):
        return False
    if _TRANSLATION.search(e.title) or _TRANSLATION.search(e.abstract):
        return False
    return not re.search(rf"-{_LANG}$", e.package)


def _files(root: Path, pattern: str) -> list[Path]:
    out: list[Path] = []
    for p in pattern.split():
        out += sorted(root.glob(p.lstrip("/")))
    return [p for p in out if p.is_file()]


def _read(path: Path) -> str:
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    return data.decode("utf-8", errors="replace")


def _html_order(root: Path, index: Path, files: list[Path]) -> list[Path]:
    """The index page, then the pages it links to (among ``files``) in the order of their first link."""
    allowed = {p.resolve() for p in files}
    order, seen = [index], {index.resolve()}
    for href in re.findall(r'href="([^"#?:]+\.html?)(?:#[^"]*)?"', _read(index), re.I):
        target = (index.parent / unquote(urldefrag(href)[0])).resolve()
        if target in allowed and target not in seen:
            order.append(target)
            seen.add(target)
    return order


def document_text(root: Path, e: Entry) -> str | None:
    """The text of an entry's document from its best format (text, then Info, then HTML), or None. A format
    whose files give no text (an "Info" entry that names the Texinfo source) passes to the next."""
    text = ""
    if "text" in e.formats and (paths := _files(root, e.formats["text"].get("files", ""))):
        text = "\n\n".join(_read(p) for p in paths)
    if not text.strip() and "info" in e.formats and (paths := _files(root, e.formats["info"].get("files", ""))):
        paths = sorted(paths, key=lambda p: [int(x) if x.isdigit() else x for x in re.split(r"(\d+)", p.name)])
        text = "\n\n".join(info_text(_read(p)) for p in paths)
    html = e.formats.get("html")
    if not text.strip() and html and (paths := _files(root, html.get("files", ""))):
        index = root / html["index"].lstrip("/") if html.get("index") else paths[0]
        pages = _html_order(root, index, paths) if index.is_file() else paths[:1]
        text = "\n\n".join(render_text(_read(p), "html") for p in pages)
    return text if text.strip() else None


def _pairs(words: list[str]) -> set[tuple[str, str]]:
    return set(zip(words, words[1:], strict=False))


def in_abstract(paragraph: str, abstract_pairs: set) -> bool:
    """A paragraph that repeats the abstract: most of its word pairs (at least 8 words) are the abstract's."""
    pairs = _pairs(re.findall(r"\w+", paragraph.lower()))
    return len(pairs) >= 7 and len(pairs & abstract_pairs) >= 0.5 * len(pairs)


def clean_document(text: str, abstract: str) -> str:
    """The document without its abstract (see ``in_abstract``), blank runs squeezed, cut after ``MAX_CHARS``."""
    text = text.replace("\r\n", "\n").replace("\x0c", "\n")
    paragraphs = [p.strip("\n") for p in re.split(r"\n\s*\n", text) if p.strip()]
    apairs = _pairs(re.findall(r"\w+", abstract.lower()))
    kept, size = [], 0
    for p in paragraphs:
        if re.fullmatch(r"\s*abstract\s*:?\s*", p, re.I) or in_abstract(p, apairs):
            continue
        kept.append(p)
        size += len(p) + 2
        if size >= MAX_CHARS:
            break
    return "\n\n".join(kept)


def source_name(package: str) -> str:
    """The manual a package belongs to: its name without a version, a ``-doc`` or a language suffix."""
    name = re.sub(rf"-{_LANG}$", "", package)
    return re.sub(r"-(?:doc|docs|html|manual)$", "", name)


def entries(deb: Path, tmp: Path) -> Iterator[dict]:
    """The rows of one downloaded package: its doc-base documents that pass the rules."""
    package = deb.name.split("_")[0]
    root = extract(deb, tmp / package)
    controls = [f for f in sorted((root / "usr/share/doc-base").glob("*")) if f.is_file()]
    docs = [e for f in controls for e in parse_doc_base(_read(f), package)]
    for e in docs:
        if not good_abstract(e):
            continue
        text = document_text(root, e)
        if text is None:
            continue
        abstract = " ".join(e.abstract.split())
        text = clean_document(text, abstract)
        if len(text) < MIN_CHARS or _english(text[:50_000]) < ENGLISH:
            continue
        name = source_name(package)
        yield {"id": f"{package}/{e.doc_id}", "domain": "manuals", "split": split_of(name), "title": e.title,
               "text": text, "summary": abstract, "package": package}  # fmt: skip


def manual_rows(debs: Path, tmp: Path) -> Iterator[dict]:
    """Rows of every package in ``debs`` (``*.deb``), one per abstract and per title."""
    seen: set[str] = set()
    for deb in sorted(debs.glob("*.deb")):
        for row in entries(deb, tmp):
            keys = {" ".join(re.findall(r"\w+", row["summary"].lower())), row["title"].lower().strip()}
            if keys & seen:
                continue
            seen |= keys
            yield row


def build_rows(debs: Path | None = None) -> list[dict]:
    """The domain's rows, from ``debs`` (a folder of .deb files) or from ``apt-get download`` of the list."""
    return listed_rows(MANUAL_PACKAGES, debs, manual_rows)


@script("fetch_manuals")
def main(argv: list[str] | None = None) -> None:
    from strandline.data.fetch_summaries import domain_main

    domain_main(argv, __doc__.splitlines()[0], "manuals", build_rows, (DISCOVER, entries))


if __name__ == "__main__":
    raise SystemExit(main())

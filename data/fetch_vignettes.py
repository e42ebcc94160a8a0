"""The ``r-vignettes`` summarization domain: R package vignettes from Debian, each paired with its package's
description.

A vignette is the long-form guide of an R package (CRAN or Bioconductor), written in R Markdown: prose, headings,
R code chunks and their output. Its package's ``DESCRIPTION`` file has a ``Description:`` field, a paragraph the
authors wrote for the package index, which is the reference summary. A row is one vignette per package, as the
``.Rmd`` source reads (Markdown, code chunks fenced), with its YAML front matter (title, authors, output options, an
abstract when it has one) replaced by the title as a heading, so that no system can copy an abstract, then
rendered as ``strandline summarize x.Rmd`` reads it (Markdown to text: code chunks left out, a package link
```r Biocpkg("limma")``` read as the package's name).

    python -m strandline.data.fetch_summaries               # builds every domain, this one included
    python -m strandline.data.fetch_vignettes --debs DIR    # this domain alone, from .deb files already downloaded

The packages are the fixed list ``VIGNETTE_PACKAGES`` (``apt-get download`` fetches each at the release's current
version). They were chosen from every Debian bookworm package (``all`` and ``amd64``) that ships an ``.Rmd``
vignette (``usr/lib/R/site-library/<package>/doc/*.Rmd`` in the archive's Contents indexes), 393 packages, keeping
the 301 whose row passes the rules below: the 382 under 5 MB on 2026-12-05 (293 kept), the 11 larger ones on
2026-12-06 (8 kept). The rules, applied again at every build (``--discover LOG`` redoes the search,
``strandline.data.discover``):

- the vignette: the one named after the package, else one whose name says it introduces the package
  (``_INTRO``: intro, overview, getting started, quick start, tutorial), else the longest;
- a description of 20 to 200 words, English (``fetch_manuals.english_summary``, as the manuals' abstracts);
- a vignette source of at least ``MIN_CHARS`` characters without its front matter; its rendered text is cut at a
  paragraph boundary after ``fetch_manuals.MAX_CHARS``; the paragraphs that repeat the description
  (``fetch_manuals.in_abstract``) are removed.

Splits: 50% train, 20% val, 30% test by a hash of the package name (``fetch_summaries.split_of``).
"""

from __future__ import annotations

import email.parser
import re
from collections.abc import Iterator
from pathlib import Path

from strandline.data.debian import extract, listed_rows
from strandline.data.fetch_manuals import clean_document, english_summary
from strandline.data.fetch_summaries import MIN_CHARS, split_of
from strandline.data.markup import render_text
from strandline.errors import script

DOMAIN = "r-vignettes"
DISCOVER = re.compile(r"^usr/lib/R/site-library/[^/]+/doc/[^/]+\.Rmd$")  # the files --discover looks for
_INTRO = re.compile(r"intro|overview|getting|quick|tutorial|start", re.I)
_FRONT = re.compile(r"\A\s*---[ \t]*\n(.*?)\n(?:---|\.\.\.)[ \t]*\n", re.S)
_TITLE = re.compile(r"^title:\s*(.+)$", re.M)

VIGNETTE_PACKAGES: tuple[str, ...] = (  # the discovery runs of 2026-12-05 and 2026-12-06 (see the module docstring)
    "r-bioc-annotationfilter", "r-bioc-annotationhub", "r-bioc-ballgown", "r-bioc-basilisk", "r-bioc-beachmat",
    "r-bioc-biocbaseutils", "r-bioc-bioccheck", "r-bioc-biocfilecache", "r-bioc-biocio", "r-bioc-biocneighbors",
    "r-bioc-biocsingular", "r-bioc-biocviews", "r-bioc-biomart", "r-bioc-biomformat", "r-bioc-bluster",
    "r-bioc-chemminer", "r-bioc-complexheatmap", "r-bioc-dada2", "r-bioc-decoupler", "r-bioc-degreport",
    "r-bioc-delayedarray", "r-bioc-delayedmatrixstats", "r-bioc-deseq2", "r-bioc-dexseq", "r-bioc-dir.expiry",
    "r-bioc-dropletutils", "r-bioc-dss", "r-bioc-eir", "r-bioc-ensembldb", "r-bioc-experimenthub", "r-bioc-fishpond",
    "r-bioc-fmcsr", "r-bioc-genomicfeatures", "r-bioc-genomicranges", "r-bioc-geoquery", "r-bioc-glmgampoi",
    "r-bioc-gsva", "r-bioc-gviz", "r-bioc-htsfilter", "r-bioc-ihw", "r-bioc-ioniser", "r-bioc-isoformswitchanalyzer",
    "r-bioc-keggrest", "r-bioc-megadepth", "r-bioc-metapod", "r-bioc-multiassayexperiment", "r-bioc-mutationalpatterns",
    "r-bioc-netsam", "r-bioc-phyloseq", "r-bioc-progeny", "r-bioc-qtlizer", "r-bioc-residualmatrix", "r-bioc-rhdf5",
    "r-bioc-rhdf5filters", "r-bioc-rhtslib", "r-bioc-rwikipathways", "r-bioc-scaledmatrix", "r-bioc-scater",
    "r-bioc-scran", "r-bioc-scuttle", "r-bioc-seqlogo", "r-bioc-singlecellexperiment", "r-bioc-singler",
    "r-bioc-sparsematrixstats", "r-bioc-structuralvariantannotation", "r-bioc-summarizedexperiment",
    "r-bioc-tcgabiolinks", "r-bioc-tfbstools", "r-bioc-tximeta", "r-bioc-tximport", "r-bioc-tximportdata",
    "r-cran-adegraphics", "r-cran-afex", "r-cran-airr", "r-cran-amelia", "r-cran-argparse", "r-cran-arsenal",
    "r-cran-aweek", "r-cran-base64url", "r-cran-batchtools", "r-cran-bayesfactor", "r-cran-bayesm", "r-cran-bayesplot",
    "r-cran-bdgraph", "r-cran-benchmarkme", "r-cran-bio3d", "r-cran-bit", "r-cran-brms", "r-cran-broom",
    "r-cran-checkmate", "r-cran-clock", "r-cran-clubsandwich", "r-cran-cmstatr", "r-cran-coarsedatatools",
    "r-cran-collapse", "r-cran-colorspace", "r-cran-corrplot", "r-cran-covr", "r-cran-cowplot", "r-cran-cpp11",
    "r-cran-credentials", "r-cran-crul", "r-cran-ctmcd", "r-cran-cubature", "r-cran-curl", "r-cran-cutpointr",
    "r-cran-data.table", "r-cran-datawizard", "r-cran-dbi", "r-cran-dbplyr", "r-cran-dbscan", "r-cran-dendextend",
    "r-cran-dendsort", "r-cran-dosefinding", "r-cran-dqrng", "r-cran-dtplyr", "r-cran-ecodist", "r-cran-ecosolver",
    "r-cran-effectsize", "r-cran-egg", "r-cran-emmeans", "r-cran-enrichwith", "r-cran-epiestim", "r-cran-epir",
    "r-cran-fauxpas", "r-cran-fitbitscraper", "r-cran-fitdistrplus", "r-cran-forcats", "r-cran-foreach",
    "r-cran-formatr", "r-cran-formattable", "r-cran-gargle", "r-cran-gclus", "r-cran-geoknife", "r-cran-gert",
    "r-cran-ggalluvial", "r-cran-gganimate", "r-cran-ggdendro", "r-cran-ggeffects", "r-cran-ggfortify",
    "r-cran-ggplot2", "r-cran-ggraph", "r-cran-ggrastr", "r-cran-ggrepel", "r-cran-ggridges", "r-cran-ggsci",
    "r-cran-ggsignif", "r-cran-ggtext", "r-cran-gitcreds", "r-cran-glmnet", "r-cran-globaloptions", "r-cran-googlevis",
    "r-cran-goplot", "r-cran-gprofiler2", "r-cran-gridextra", "r-cran-gtable", "r-cran-guerry", "r-cran-hardhat",
    "r-cran-hdf5r", "r-cran-heatmaply", "r-cran-here", "r-cran-htmltable", "r-cran-htmlwidgets", "r-cran-httr",
    "r-cran-httr2", "r-cran-hunspell", "r-cran-incidence", "r-cran-insight", "r-cran-isoband", "r-cran-jinjar",
    "r-cran-jsonlite", "r-cran-later", "r-cran-lava", "r-cran-lazyeval", "r-cran-lbfgsb3c", "r-cran-leiden",
    "r-cran-leidenbase", "r-cran-lintr", "r-cran-lme4", "r-cran-logger", "r-cran-loo", "r-cran-lubridate",
    "r-cran-magick", "r-cran-magrittr", "r-cran-manipulatewidgets", "r-cran-markovchain", "r-cran-matchit",
    "r-cran-mediana", "r-cran-mertools", "r-cran-mi", "r-cran-mitml", "r-cran-mixsqp", "r-cran-mockery", "r-cran-mockr",
    "r-cran-mvnfast", "r-cran-nloptr", "r-cran-openssl", "r-cran-openxlsx", "r-cran-optimx", "r-cran-pander",
    "r-cran-parsetools", "r-cran-patchwork", "r-cran-permute", "r-cran-phangorn", "r-cran-pillar", "r-cran-pkgdown",
    "r-cran-plm", "r-cran-poissonbinomial", "r-cran-polycub", "r-cran-popepi", "r-cran-posterior", "r-cran-projpred",
    "r-cran-promises", "r-cran-qlcmatrix", "r-cran-qqconf", "r-cran-rcdk", "r-cran-rcppdist", "r-cran-rdflib",
    "r-cran-readr", "r-cran-recipes", "r-cran-redland", "r-cran-regsem", "r-cran-remotes", "r-cran-rentrez",
    "r-cran-reprex", "r-cran-reticulate", "r-cran-rgdal", "r-cran-rgl", "r-cran-rhandsontable", "r-cran-rnexml",
    "r-cran-rocr", "r-cran-rotl", "r-cran-roxygen2", "r-cran-rpact", "r-cran-rpf", "r-cran-rprojroot", "r-cran-rsdmx",
    "r-cran-rslurm", "r-cran-rspectra", "r-cran-rsqlite", "r-cran-rstan", "r-cran-rstanarm", "r-cran-rstantools",
    "r-cran-rsvg", "r-cran-rtweet", "r-cran-sass", "r-cran-satellite", "r-cran-sendmailr", "r-cran-seroincidence",
    "r-cran-sf", "r-cran-sftime", "r-cran-shinyjs", "r-cran-shinystan", "r-cran-sitmo", "r-cran-sjlabelled",
    "r-cran-sjmisc", "r-cran-sjplot", "r-cran-skimr", "r-cran-slider", "r-cran-smcfcs", "r-cran-snakecase",
    "r-cran-solrium", "r-cran-sp", "r-cran-spacetime", "r-cran-spam", "r-cran-spatialreg", "r-cran-spdep",
    "r-cran-splines2", "r-cran-stanheaders", "r-cran-stars", "r-cran-stringr", "r-cran-survminer", "r-cran-susier",
    "r-cran-svmisc", "r-cran-systemfonts", "r-cran-tcr", "r-cran-testthat", "r-cran-textshaping", "r-cran-tidyr",
    "r-cran-tidyselect", "r-cran-tidytext", "r-cran-tidyverse", "r-cran-tigger", "r-cran-tokenizers",
    "r-cran-treescape", "r-cran-triebeard", "r-cran-unitizer", "r-cran-units", "r-cran-urltools", "r-cran-v8",
    "r-cran-vcdextra", "r-cran-vctrs", "r-cran-vim", "r-cran-vioplot", "r-cran-viridis", "r-cran-vroom", "r-cran-warp",
    "r-cran-wikitaxa", "r-cran-withr", "r-cran-worrms", "r-cran-zeallot",
)  # fmt: skip


def description_of(path: Path) -> tuple[str, str]:
    """(package name, Description) of an R ``DESCRIPTION`` file (Debian control syntax: folded fields)."""
    fields = email.parser.Parser().parsestr(path.read_text(encoding="utf-8", errors="replace"), headersonly=True)
    return (fields.get("Package") or path.parent.name).strip(), " ".join((fields.get("Description") or "").split())


def choose_vignette(package: str, vignettes: list[Path]) -> Path | None:
    """The vignette that stands for the package (see the module docstring's first rule)."""
    if not vignettes:
        return None
    named = [v for v in vignettes if v.stem.lower() == package.lower()]
    intro = [v for v in vignettes if _INTRO.search(v.stem)]
    return (named or intro or [max(vignettes, key=lambda v: (v.stat().st_size, v.name))])[0]


def vignette_text(source: str) -> str:
    """An R Markdown source without its YAML front matter, the title (if the front matter has one) as a heading."""
    m = _FRONT.match(source)
    if not m:
        return source
    title = _TITLE.search(m.group(1))
    head = f"# {title.group(1).strip().strip(chr(34)).strip(chr(39))}\n\n" if title else ""
    return head + source[m.end() :]


def rows_of(deb: Path, tmp: Path) -> Iterator[dict]:
    """The rows of one downloaded package (one per R package it installs that passes the rules)."""
    deb_package = deb.name.split("_")[0]
    root = extract(deb, tmp / deb_package)
    for desc in sorted((root / "usr/lib/R/site-library").glob("*/DESCRIPTION")):
        package, summary = description_of(desc)
        if not english_summary(summary):
            continue
        vignette = choose_vignette(package, sorted((desc.parent / "doc").glob("*.Rmd")))
        if vignette is None:
            continue
        source = vignette_text(vignette.read_text(encoding="utf-8", errors="replace"))
        if len(clean_document(source, summary)) < MIN_CHARS:
            continue
        text = clean_document(render_text(source, "markdown"), summary)  # as `strandline summarize x.Rmd` reads it
        yield {"id": f"{package}/{vignette.stem}", "domain": DOMAIN, "split": split_of(package),
               "title": package, "text": text, "summary": summary, "package": deb_package}  # fmt: skip


def vignette_rows(debs: Path, tmp: Path) -> Iterator[dict]:
    """Rows of every package in ``debs`` (``*.deb``)."""
    for deb in sorted(debs.glob("*.deb")):
        yield from rows_of(deb, tmp)


def build_rows(debs: Path | None = None, packages: tuple[str, ...] = VIGNETTE_PACKAGES) -> list[dict]:
    """The domain's rows, from ``debs`` (a folder of .deb files; only the listed packages are read) or from
    ``apt-get download`` of the list."""
    return listed_rows(packages, debs, vignette_rows)


@script("fetch_vignettes")
def main(argv: list[str] | None = None) -> None:
    from strandline.data.fetch_summaries import domain_main

    domain_main(argv, __doc__.splitlines()[0], DOMAIN, build_rows, (DISCOVER, rows_of))


if __name__ == "__main__":
    raise SystemExit(main())

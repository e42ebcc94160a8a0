"""``strandline report``: one self-contained HTML page per scan, drawn by igv.js, that opens with no network.

The page holds the genome's sequence, the scan's tracks, the annotation's features and the anomalous regions
(``scan --calls``, or called here from the first log-probability track with the same rule, ``data/calls.py``),
with a table of the top regions: a click on a row moves the browser there. igv.js itself (the vendored
``igv.min.js``, MIT) and every data set are inlined, so the file works offline and can be mailed.

Size: the sequence is embedded gzipped (about 0.27 bytes per base after base64), each track binned to at most
``MAX_BINS`` bins (the mean of each bin; per-base values stay in the track files, which IGV desktop reads), the
features as BED. A 5 Mb genome with two tracks and its annotation makes a page of about 6 MB.

The page reports on itself for tests and scripts: ``<div id="status">`` gets ``data-ready="1"`` once the browser
has drawn, ``data-painted`` (how many canvases have pixels), ``data-locus`` (where the browser is) and
``data-errors`` (a JSON list of console errors and uncaught exceptions). Opened as ``report.html#click=N``, the
page clicks row N of the table first.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import html
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from strandline.data.annotations import annotation_sources, read_annotation
from strandline.data.calls import call_regions, window_surprisal
from strandline.data.tracks import TrackError, bed_rows
from strandline.errors import UserInputError
from strandline.files import atomic_write_text, check_output
from strandline.resources import shipped_path

IGV_VERSION = "3.8.10"
IGV_SHA256 = "87b991ae2a720978172e269dd5127c495e56df5af31144dff19c83124e2f5744"
MAX_BINS = 250_000  # per track, over the whole genome
MAX_BASES = 50_000_000  # the page embeds the sequence: a larger genome belongs in IGV desktop with the track files
TRACK_COLOURS = ("#1f4e79", "#b35806", "#1b7837", "#762a83", "#555555")
FEATURE_RGB = {"gene": "31,119,180", "CDS": "31,119,180", "mRNA": "31,119,180", "rRNA": "214,39,40",
               "tRNA": "255,127,14", "ncRNA": "255,127,14", "tmRNA": "255,127,14", "repeat_region": "127,127,127",
               "mobile_element": "148,103,189", "mobile_genetic_element": "148,103,189"}  # fmt: skip


class ReportError(UserInputError):
    """A report that cannot be written from these inputs; one line for users."""


@dataclass(frozen=True)
class Region:
    """One anomalous region of the table."""

    record: str
    start: int
    end: int
    name: str  # high:Z / low:Z
    score: float  # |z|

    @property
    def locus(self) -> str:
        return f"{self.record}:{self.start + 1}-{self.end}"  # igv.js: 1-based closed


def igv_js() -> str:
    """The vendored igv.min.js, checked against its recorded sha256 (a damaged copy would fail in the browser)."""
    path = shipped_path("vendor", "igv/igv.min.js")
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != IGV_SHA256:
        raise ReportError(f"{path}: not igv.js {IGV_VERSION} as shipped (sha256 differs); reinstall strandline")
    return data.decode("utf-8")


def read_genome(path: str, rename=None) -> dict[str, str]:
    """record (renamed) -> its bases as letters (IUPAC codes other than ACGT as N)."""
    from strandline.data.fasta import iter_records
    from strandline.data.tokenizers import DNATokenizer

    tok, parts, total = DNATokenizer(), {}, 0
    for chunk in iter_records(path):
        name = rename(chunk.name) if rename else chunk.name
        parts.setdefault(name, []).append(tok.decode(chunk.ids))
        total += len(chunk.ids)
        if total > MAX_BASES:
            raise ReportError(f"{path}: over {MAX_BASES:,} bases; the report embeds the sequence, so it is for "
                              "genomes up to that size (open the track files in IGV desktop instead)")  # fmt: skip
    return {name: "".join(p) for name, p in parts.items()}


def data_uri(text: str) -> str:
    """igv.js reads a gzipped data URI like a file."""
    return "data:application/gzip;base64," + base64.b64encode(gzip.compress(text.encode(), 9, mtime=0)).decode()


def fasta_text(genome: dict[str, str], width: int = 80) -> str:
    return "".join(
        f">{name}\n" + "".join(seq[i : i + width] + "\n" for i in range(0, len(seq), width))
        for name, seq in genome.items()
    )


def bin_size(lengths: dict[str, int], max_bins: int = MAX_BINS) -> int:
    """Bases per bin so that the whole genome has at most ``max_bins`` bins (1: per base, a small genome)."""
    return max(1, math.ceil(sum(lengths.values()) / max_bins))


def binned_bedgraph(track: str, lengths: dict[str, int], size: int) -> str:
    """The track as a bedGraph of ``size``-base bins (each the mean of its scored bases; unscored bins left out).

    Raises:
        TrackError: a malformed track, or one written for another genome (a record or values it lacks).
    """
    rows = []
    for chrom, (scored, mean) in window_surprisal(track, lengths, size, logprob=False, strict=True).items():
        for k in np.flatnonzero(scored > 0):
            rows.append(f"{chrom}\t{k * size}\t{min((k + 1) * size, lengths[chrom])}\t{mean[k]:.4g}\n")
    if not rows:
        raise ReportError(f"{track}: no values on the genome's records")
    return "".join(rows)


def read_calls(path: str, lengths: dict[str, int]) -> list[Region]:
    """The regions of a ``scan --calls`` BED6 file (score/100 is the region's |z|)."""
    out = []
    for n, f in bed_rows(path, ReportError):
        try:
            chrom, start, end, name = f[0], int(f[1]), int(f[2]), f[3] if len(f) > 3 else "call"
            score = float(name.partition(":")[2]) if ":" in name else (float(f[4]) / 100 if len(f) > 4 else 0.0)
        except (IndexError, ValueError):
            raise ReportError(f"{path}:{n}: not a BED line (chrom, start, end, name, score)") from None
        if chrom not in lengths or not 0 <= start < end <= lengths[chrom]:
            raise ReportError(f"{path}:{n}: {chrom}:{start}-{end} is not on the genome")
        out.append(Region(chrom, start, end, name, abs(score)))
    return out


def feature_rows(sources: list[str], lengths: dict[str, int], rename=None) -> tuple[str, list[tuple]]:
    """(BED9 text of the features on the genome's records, coloured by type; the feature list
    (record, start, end, name, type))."""
    feats: list[tuple] = []

    def add(chrom, ftype, start, end, strand, name):
        if chrom in lengths:
            feats.append((chrom, start, end, strand, name or ftype, ftype))

    for path in sources:
        read_annotation(path, add, rename)
    feats.sort()
    text = "".join(
        f"{c}\t{s}\t{e}\t{n.replace(' ', '_')}\t0\t{'+' if st > 0 else '-' if st < 0 else '.'}\t{s}\t{e}\t"
        f"{FEATURE_RGB.get(t, '150,150,150')}\n"
        for c, s, e, st, n, t in feats
    )
    return text, [(c, s, e, n, t) for c, s, e, _, n, t in feats]


def overlapping(region: Region, feats: list[tuple], limit: int = 4) -> str:
    names = []
    for c, s, e, n, t in feats:
        if c == region.record and s < region.end and e > region.start and n not in names:
            names.append(n if n != t else t)
    more = f" +{len(names) - limit}" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def build_report(
    tracks: list[str],
    genome: str,
    output: str,
    annotation: str | None = None,
    calls: str | None = None,
    top: int = 25,
    window: int = 5000,
    threshold: float = 4.0,
    rename=None,
    title: str | None = None,
) -> dict:
    """Write the HTML report; returns what it holds ({"records", "bases", "bin", "regions", "features", "bytes"})."""
    if not tracks:
        raise ReportError("give at least one track (a scan's bedGraph, WIG or bigWig)")
    out = check_output(output, [*tracks, genome, *(p for p in (annotation, calls) if p)], "report")
    if out.suffix.lower() not in (".html", ".htm"):
        raise ReportError(f"{output}: a report is an HTML file (.html)")
    for t in tracks:
        if not Path(t).is_file():
            raise ReportError(f"{t}: no such track file")
    seqs = read_genome(genome, rename)
    lengths = {name: len(s) for name, s in seqs.items()}
    size = bin_size(lengths)
    track_cfg = []
    for i, t in enumerate(tracks):
        try:
            text = binned_bedgraph(t, lengths, size)
        except TrackError as e:
            raise ReportError(str(e)) from None
        track_cfg.append({"name": Path(t).name, "type": "wig", "format": "bedgraph", "url": data_uri(text),
                          "color": TRACK_COLOURS[i % len(TRACK_COLOURS)], "autoscale": True, "height": 90})  # fmt: skip
    if calls:
        regions = read_calls(calls, lengths)
        called_by = f"{Path(calls).name}"
    else:
        logprob = next(
            (t for t in tracks if ".logprob." in Path(t).name or Path(t).stem.endswith("logprob")), tracks[0]
        )
        rows = call_regions(window_surprisal(logprob, lengths, window, True), lengths, window, threshold)
        regions = [Region(c, s, e, n, float(n.partition(":")[2])) for c, s, e, n, _ in rows]
        called_by = f"{Path(logprob).name}: {window:,}-base windows, robust |z| >= {threshold}"
    sources = annotation_sources(annotation, [genome])
    feats: list[tuple] = []
    if sources:
        bed, feats = feature_rows(sources, lengths, rename)
        if bed:
            track_cfg.append({"name": "features", "type": "annotation", "format": "bed", "url": data_uri(bed),
                              "displayMode": "EXPANDED", "height": 110})  # fmt: skip
    if regions:
        bed = "".join(
            f"{r.record}\t{r.start}\t{r.end}\t{r.name}\t{min(1000, round(100 * r.score))}\t.\n" for r in regions
        )
        track_cfg.append({"name": "anomalous regions", "type": "annotation", "format": "bed", "url": data_uri(bed),
                          "color": "#c51b7d", "height": 40})  # fmt: skip
    best = sorted(regions, key=lambda r: -r.score)[:top]
    first = next(iter(lengths))
    locus = best[0].locus if best else f"{first}:1-{min(lengths[first], 20000)}"
    browser = {
        "reference": {"id": "genome", "name": Path(genome).name, "fastaURL": data_uri(fasta_text(seqs)),
                      "indexed": False},
        "locus": locus,
        "tracks": track_cfg,
        "loadDefaultGenomes": False,  # igv.js would fetch its list of hosted genomes
        "showGenomeDropdown": False,
    }  # fmt: skip
    page = render(
        browser, best, feats, title or f"strandline report: {', '.join(Path(t).name for t in tracks)}", called_by,
        lengths, size, len(regions),
    )  # fmt: skip
    atomic_write_text(out, page)
    return {"records": len(lengths), "bases": sum(lengths.values()), "bin": size, "regions": len(regions),
            "features": len(feats), "bytes": out.stat().st_size}  # fmt: skip


def _json_script(obj) -> str:
    return json.dumps(obj, separators=(",", ":")).replace("</", "<\\/")


PAGE = r"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 1em 2em; color: #222; }}
.title {{ font-size: 1.3em; font-weight: bold; margin: 0 0 .2em; }} .meta {{ color: #555; margin-bottom: .8em; }}
#igv {{ border: 1px solid #ddd; margin-bottom: 1em; }}
table {{ border-collapse: collapse; }} th, td {{ padding: .2em .7em; border-bottom: 1px solid #eee; text-align: left; }}
td.n {{ text-align: right; font-variant-numeric: tabular-nums; }} tbody tr {{ cursor: pointer; }}
tbody tr:hover {{ background: #f0f5fb; }} tr.high td:nth-child(5) {{ color: #b2182b; }}
tr.low td:nth-child(5) {{ color: #2166ac; }}
</style></head><body>
<div class="title" role="heading" aria-level="1">{title}</div>
<div class="meta">{meta}</div>
<div id="igv"></div>
<div class="title" role="heading" aria-level="2" style="font-size:1.1em">Top anomalous regions</div>
<div class="meta">{called}</div>
<table><thead><tr><th>#</th><th>region</th><th class="n">length</th><th>features</th><th>call</th></tr></thead>
<tbody>{rows}</tbody></table>
<div id="status" hidden></div>
<script>
window.strandlineErrors = [];
window.addEventListener("error", function (e) {{ window.strandlineErrors.push(String(e.message || e)); }});
window.addEventListener("unhandledrejection", function (e) {{ window.strandlineErrors.push(String(e.reason)); }});
(function () {{ var err = console.error; console.error = function () {{
  window.strandlineErrors.push(Array.prototype.join.call(arguments, " ")); err.apply(console, arguments); }}; }})();
</script>
<script>{igv}</script>
<script id="config" type="application/json">{config}</script>
<script>
(function () {{
  var status = document.getElementById("status");
  function painted() {{
    var n = 0;
    var canvases = [];
    (function walk(root) {{  // igv.js draws inside a shadow root (of the container)
      root.querySelectorAll("*").forEach(function (el) {{
        if (el.tagName === "CANVAS") canvases.push(el);
        if (el.shadowRoot) walk(el.shadowRoot);
      }});
    }})(document.getElementById("igv").shadowRoot || document.getElementById("igv"));
    canvases.forEach(function (c) {{
      if (!c.width || !c.height) return;
      try {{
        var d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
        for (var i = 3; i < d.length; i += 4) {{ if (d[i]) {{ n++; return; }} }}
      }} catch (e) {{ window.strandlineErrors.push("canvas: " + e); }}
    }});
    return n;
  }}
  var cfg = JSON.parse(document.getElementById("config").textContent);
  igv.createBrowser(document.getElementById("igv"), cfg).then(function (browser) {{
    window.igvBrowser = browser;
    document.querySelectorAll("tbody tr[data-locus]").forEach(function (tr) {{
      tr.addEventListener("click", function () {{ browser.search(tr.dataset.locus); }});
    }});
    setTimeout(function () {{
      status.dataset.painted = painted();
      var click = /^#click=(\d+)$/.exec(location.hash);  // a script's check that a row moves the browser
      if (click) {{
        document.querySelectorAll("tbody tr[data-locus]")[+click[1] - 1].click();
      }}
      setTimeout(function () {{
        try {{
          var loci = browser.currentLoci();  // a string for one locus, a list for several
          status.dataset.locus = Array.isArray(loci) ? loci.join(" ") : String(loci);
        }} catch (e) {{
          window.strandlineErrors.push("locus: " + e);
        }}
        status.dataset.errors = JSON.stringify(window.strandlineErrors);
        status.dataset.ready = "1";
      }}, click ? 1000 : 0);
    }}, 1500);
  }}).catch(function (e) {{
    window.strandlineErrors.push(String(e));
    status.dataset.errors = JSON.stringify(window.strandlineErrors);
    status.dataset.ready = "1";
  }});
}})();
</script>
</body></html>
"""


def render(browser: dict, regions: list[Region], feats: list[tuple], title: str, called_by: str,
           lengths: dict[str, int], size: int, n_regions: int) -> str:  # fmt: skip
    rows = (
        "".join(
            f'<tr class="{html.escape(r.name.partition(":")[0])}" data-locus="{html.escape(r.locus)}"><td class="n">{i}</td>'
            f'<td>{html.escape(r.record)}:{r.start + 1:,}-{r.end:,}</td><td class="n">{r.end - r.start:,}</td>'
            f"<td>{html.escape(overlapping(r, feats))}</td><td>{html.escape(r.name)}</td></tr>"
            for i, r in enumerate(regions, 1)
        )
        or '<tr><td colspan="5">no region departs from its record\'s background</td></tr>'
    )
    bases = sum(lengths.values())
    meta = (f"{len(lengths)} record(s), {bases:,} bases; tracks shown as the mean of "
            + ("each base" if size == 1 else f"{size:,}-base bins (per-base values: the track files)")
            + (f"; {n_regions} anomalous region(s), the top {len(regions)} listed (click a row to go there). "
               if regions else "; no anomalous region. ")
            + f"igv.js {IGV_VERSION}, inlined: this page needs no network.")  # fmt: skip
    return PAGE.format(title=html.escape(title), meta=html.escape(meta), called=html.escape(called_by), rows=rows,
                       igv=igv_js(), config=_json_script(browser))  # fmt: skip

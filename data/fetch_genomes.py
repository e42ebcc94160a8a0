"""Fetch real sequence too large to ship: human GRCh37 chromosome 20 from Debian's ``vt-examples`` package.

    python -m strandline.data.fetch_genomes                # -> data/cache/genomes/GRCh37-chr20.fa.gz (63 Mb, BGZF, 18 MB)
    python -m strandline.data.fetch_genomes --out DIR

``apt-get download`` needs no root and no sources beyond a Debian/Ubuntu system's own; the ``.deb`` is unpacked
in Python (``ar`` + ``tar.xz``), so only the FASTA is kept. The output folder is git-ignored and nothing in the
tests needs it. The chromosome has long-range structure the shipped bacteria lack (repeats, segmental
duplications, isochores): the long-context DNA experiments of ``docs/training.md`` use it.
"""

from __future__ import annotations

import argparse
import io
import lzma
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from strandline.errors import UserInputError, script
from strandline.files import atomic_write_bytes

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "data" / "cache" / "genomes"
PACKAGE = "vt-examples"
MEMBER = "./usr/share/doc/vt/examples/ref/20.fa.gz"  # GRCh37 chr20 as BGZF, with its .fai beside it
NAME = "GRCh37-chr20.fa.gz"


class FetchError(UserInputError):
    """The package could not be downloaded or did not hold the expected file."""


def deb_data_tar(deb: bytes) -> tarfile.TarFile:
    """The ``data.tar.*`` member of a ``.deb`` (an ``ar`` archive) as an open tarfile."""
    if not deb.startswith(b"!<arch>\n"):
        raise FetchError("not a Debian package (no ar header)")
    pos = 8
    while pos + 60 <= len(deb):
        header = deb[pos : pos + 60]
        name, size = header[:16].decode().strip().rstrip("/"), int(header[48:58].decode().strip())
        body = deb[pos + 60 : pos + 60 + size]
        if name.startswith("data.tar"):
            raw = lzma.decompress(body) if name.endswith(".xz") else body
            return tarfile.open(fileobj=io.BytesIO(raw), mode="r:*")
        pos += 60 + size + (size & 1)  # ar members are 2-byte aligned
    raise FetchError("the package has no data.tar member")


def fetch_chr20(out_dir: Path = DEFAULT_OUT) -> Path:
    """Download ``vt-examples`` with apt-get and write its chr20 FASTA to ``out_dir``; returns the path."""
    out = out_dir / NAME
    if out.is_file():
        return out
    if shutil.which("apt-get") is None:
        raise FetchError("apt-get not found: this script needs a Debian or Ubuntu system")
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(["apt-get", "download", PACKAGE], cwd=tmp, capture_output=True, text=True)
        debs = list(Path(tmp).glob(f"{PACKAGE}_*.deb"))
        if done.returncode or not debs:
            raise FetchError(f"apt-get download {PACKAGE} failed: {done.stderr.strip().splitlines()[-1:]}")
        with deb_data_tar(debs[0].read_bytes()) as tar:
            try:
                data = tar.extractfile(MEMBER).read()
            except KeyError as e:
                raise FetchError(f"{debs[0].name} has no {MEMBER}") from e
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out, data)
    return out


@script("fetch_genomes")
def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder for the FASTA (default: data/cache/genomes)")
    args = ap.parse_args(argv)
    print(fetch_chr20(args.out))


if __name__ == "__main__":
    raise SystemExit(main())

"""Refresh the vendored igv.js (``data/vendor/igv``) from the npm registry.

    python -m strandline.data.fetch_igv [--version 3.8.10]

Runs ``npm pack igv@VERSION`` in a temporary folder, checks the tarball, and copies ``dist/igv.min.js`` and the
licence into ``data/vendor/igv``; prints the new file's sha256 (``IGV_SHA256`` in ``tasks/report.py``).
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import tarfile
import tempfile
from pathlib import Path

from strandline.errors import script
from strandline.files import atomic_write_bytes

VENDOR = Path(__file__).resolve().parent / "vendor" / "igv"


def fetch(version: str, dest: Path = VENDOR) -> str:
    """Copy igv.min.js and LICENSE of ``igv@version`` into ``dest``; returns the sha256 of igv.min.js."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["npm", "pack", f"igv@{version}"], cwd=tmp, check=True, capture_output=True)
        (tarball,) = Path(tmp).glob("igv-*.tgz")
        with tarfile.open(tarball) as tar:
            files = {m: tar.extractfile(f"package/{m}").read() for m in ("dist/igv.min.js", "LICENSE")}
    dest.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(dest / "igv.min.js", files["dist/igv.min.js"])
    atomic_write_bytes(dest / "LICENSE", files["LICENSE"])
    return hashlib.sha256(files["dist/igv.min.js"]).hexdigest()


@script("fetch_igv")
def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--version", default="3.8.10")
    args = p.parse_args(argv)
    print(f"igv.min.js {args.version}: sha256 {fetch(args.version)}")


if __name__ == "__main__":
    raise SystemExit(main())

"""Peak RSS and wall time of ``strandline summarize`` against input size, one fresh process per size (Linux)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path


def memory_curve(model_dir: str, docs: list[dict], sizes_kb: list[int]) -> list[tuple[int, float, float]]:
    """(size kB, peak RSS MiB, seconds) for documents made by repeating the concatenated ``docs`` texts."""
    corpus = "\n\n".join(d["text"] for d in docs)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for kb in sizes_kb:
            doc = Path(tmp) / f"doc{kb}.txt"
            with open(doc, "w", encoding="utf-8") as f:  # written in pieces: a 20 MB text is never held twice
                left = kb * 1000
                while left > 0:
                    f.write(corpus[:left])
                    left -= len(corpus[:left])
            # VmHWM (peak RSS of this process image): unlike ru_maxrss it does not inherit the parent's peak
            code = (
                "import time; from strandline.app.cli import main; t = time.time(); "
                f"rc = main(['summarize', {model_dir!r}, {str(doc)!r}, '-o', {str(doc) + '.jsonl'!r}]); "
                "hwm = next(ln for ln in open('/proc/self/status') if ln.startswith('VmHWM')).split()[1]; "
                "print('RESULT', rc, hwm, time.time() - t)"
            )
            env = {**os.environ, "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1"}
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
            _, rc, rss, secs = next(ln for ln in out.stdout.splitlines() if ln.startswith("RESULT")).split()
            rows.append((kb, int(rss) / 1024, float(secs)))
            print(f"  {kb:>5} kB: peak RSS {int(rss) / 1024:.1f} MiB, {float(secs):.1f} s", file=sys.stderr)
    return rows


def per_mb(rows: list[tuple[int, float, float]], kb: int, secs: float) -> str:
    """Seconds per MB beyond the smallest input (start-up and model loading left out); '-' for the smallest."""
    kb0, _, secs0 = rows[0]
    return f"{(secs - secs0) / ((kb - kb0) / 1000):.1f}" if kb > kb0 else "-"


def print_memory(model_dir: str, docs: list[dict], sizes: list[int]) -> list[tuple[int, float, float]] | None:
    """Print the memory curve (``memory_curve``) and return its rows (None without sizes)."""
    if not sizes:
        return None
    print("\npeak memory of `strandline summarize` vs input size (fresh process each, one thread)")
    rows = memory_curve(model_dir, docs, sizes)
    print(f"{'input kB':>9} {'peak RSS MiB':>13} {'seconds':>8} {'s per MB':>9}")
    for kb, rss, secs in rows:
        print(f"{kb:>9} {rss:>13.1f} {secs:>8.1f} {per_mb(rows, kb, secs):>9}")
    print(f"peak RSS at {rows[-1][0]} kB / at {rows[0][0]} kB: {rows[-1][1] / rows[0][1]:.3f}")
    return rows

"""Progress of long work on stderr: a labelled bar on a terminal, plain log lines anywhere else.

A bar drawn into a log file or a CI log is noise, but nothing at all leaves a user of a batch job blind for
hours. So on a terminal ``progress`` is a tqdm bar with a label and a unit (``scan: 45% 2.1M/4.6M bases
[38.4k bases/s]``); when stderr is not a terminal it is one plain line every ``every`` seconds
(``strandline scan: 2,097,152 of 4,641,652 bases (45%), 38,402 bases/s, about 1m06s left``).
"""

from __future__ import annotations

import sys
import time


def _duration(seconds: float) -> str:
    s = int(seconds + 0.5)
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


class LogLines:
    """The bar's interface (``update``, ``clear``, ``close``) writing a plain line every ``every`` seconds."""

    def __init__(self, label: str, total: int | None, unit: str, every: float, stream=None, clock=time.monotonic):
        self.label, self.total, self.unit, self.every = label, total, unit, every
        self.stream, self.clock = stream or sys.stderr, clock
        self.n, self.t0 = 0, clock()
        self.last = self.t0

    def update(self, n: int = 1) -> None:
        self.n += n
        now = self.clock()
        if now - self.last >= self.every:
            self.last = now
            self.stream.write(self.line(now) + "\n")
            self.stream.flush()

    def line(self, now: float) -> str:
        rate = self.n / max(now - self.t0, 1e-9)
        done = f"{self.n:,} {self.unit}"
        if self.total:
            done = f"{self.n:,} of {self.total:,} {self.unit} ({100 * self.n / self.total:.0f}%)"
        left = ""
        if self.total and rate > 0 and self.n < self.total:
            left = f", about {_duration((self.total - self.n) / rate)} left"
        return f"strandline {self.label}: {done}, {rate:,.0f} {self.unit}/s{left}"

    def clear(self) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def progress(label: str, total: int | None, unit: str, enabled: bool = True, every: float = 30.0, stream=None):
    """A progress reporter for ``label`` (``scan``, ``summarize``) counting ``unit`` (``bases``, ``bytes``).

    Args:
        label: the command, shown first.
        total: the expected count, or None (stdin): then no percentage or time left.
        unit: what is counted, plural.
        enabled: False shows nothing.
        every: seconds between log lines when stderr is not a terminal.
    """
    from tqdm import tqdm

    stream = stream or sys.stderr
    if not enabled:
        return tqdm(total=total, disable=True)
    if stream.isatty():
        return tqdm(total=total, desc=label, unit=f" {unit}", unit_scale=True, file=stream)
    return LogLines(label, total, unit, every, stream)

"""OpenMP defaults for the process, set before torch loads its OpenMP runtime.

torch's CPU ops split work over OpenMP threads and wait for all of them at the end of every parallel
region. By default a waiting thread spins first (GNU OpenMP: ~300k rounds), and on a machine whose cores
are busy with other work the spinning thread takes the core from the one it waits for. Measured on the
2-core machine with one other busy process (``benchmarks/train_speed.py --threads 2``, tiny-cpu model,
three alternating rounds, load 2.1-2.8): LMTask training at 1,024-token windows ran 550-881 tokens/s
spinning against 22,029-25,335 with ``OMP_WAIT_POLICY=PASSIVE`` (waiters sleep at once), and 6,145-6,837
against 29,657-34,046 at 16,384. The price is on an idle machine, where sleeping and waking costs more
than a short spin: 15,445-17,078 against 17,685-29,783 tokens/s at 1,024 (five samples each), 32,902
against 39,338 at 16,384 (one each); docs/results.md has the table. A collapse of 10-40x on any busy machine
weighs more than a quarter on an idle one.

A value the user set is kept: ``OMP_WAIT_POLICY=ACTIVE`` on a machine with nothing else to run.
"""

from __future__ import annotations

import os
import sys

OPENMP_DEFAULTS = {"OMP_WAIT_POLICY": "PASSIVE"}


def set_openmp_defaults() -> bool:
    """Set ``OPENMP_DEFAULTS`` where the environment has no value; False when torch is already imported
    (its OpenMP runtime read the environment when it loaded, so a change now would do nothing)."""
    if "torch" in sys.modules:
        return False
    for key, value in OPENMP_DEFAULTS.items():
        os.environ.setdefault(key, value)
    return True

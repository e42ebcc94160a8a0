"""The OpenMP defaults the CLI sets before torch loads (``app/threads.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROBE = """
import os, sys
from strandline.app import cli
try:
    cli.main(["generate", "--help"])  # a command whose module imports torch
except SystemExit:
    pass
print(os.environ.get("OMP_WAIT_POLICY"), "torch" in sys.modules)
"""


def _probe(**env: str) -> str:
    base = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    r = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env={**base, **env}, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize(
    "env, expected",
    [
        pytest.param({}, "PASSIVE True", id="unset-becomes-passive"),
        pytest.param({"OMP_WAIT_POLICY": "ACTIVE"}, "ACTIVE True", id="the-users-value-is-kept"),
    ],
)
def test_cli_sets_the_wait_policy_before_torch_loads(env, expected):
    assert _probe(**env) == expected


def test_too_late_once_torch_is_imported(monkeypatch):
    import torch  # noqa: F401  (the test process has torch already)

    from strandline.app.threads import set_openmp_defaults

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert set_openmp_defaults() is False
    assert "OMP_WAIT_POLICY" not in os.environ  # nothing changed that could not take effect

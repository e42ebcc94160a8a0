"""benchmarks/short_conv.py: its multiply-adds are the convolution, and its smoke run restores the model code."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from strandline.models import layers

pytestmark = pytest.mark.usefixtures("one_thread")  # the script sets its thread count
SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "short_conv.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_short_conv", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_timed_forms_compute_the_same_convolution():
    bench = _bench()
    x, w, b = torch.randn(2, 40 + 7, 6, dtype=torch.float64), torch.randn(6, 1, 8, dtype=torch.float64), torch.randn(6)
    want = F.conv1d(x.transpose(1, 2), w, b.double(), groups=6).transpose(1, 2)
    assert torch.allclose(bench.multiply_adds(x, w, b.double(), 40), want, rtol=0, atol=1e-12)


def test_the_smoke_run_prints_both_tables_and_restores_the_layer(capsys):
    _bench().main(["--quick"])
    out = capsys.readouterr().out
    assert "| [1, 256, 96], 4 |" in out and "| summarize 5 kB |" in out and "| scan forward 0.02 Mb |" in out
    assert layers.ShortConv.forward.__name__ == "forward" and torch.backends.mkldnn.enabled

"""benchmarks/attention.py's timing rule and its child (the full benchmark is a ~6 min run)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "attention.py"


@pytest.fixture(scope="module")
def bench():
    saved = list(sys.path)  # the script points sys.path[0] at the repo when imported
    try:
        spec = importlib.util.spec_from_file_location("bench_attention", SCRIPT)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = saved
    return module


def fake_run(times: list[float]):
    """A timed call returning the next of ``times``; .calls counts the calls."""
    it = iter(times)

    def run() -> float:
        run.calls += 1
        return next(it)

    run.calls = 0
    return run


@pytest.mark.parametrize(
    "times, reps, budget, best, calls",
    [
        pytest.param([10.0, 3.0, 2.0, 4.0], 3, 100.0, 2.0, 4, id="warm-up-never-counts"),
        pytest.param([3.0, 5.0, 1.0, 0.5], 3, 8.0, 1.0, 3, id="budget-fits-two"),
        pytest.param([10.0, 7.0, 0.1], 3, 8.0, 7.0, 2, id="slow-row-one-after-warm-up"),
    ],
)
def test_best_time_warms_up_then_takes_what_fits(bench, times, reps, budget, best, calls):
    # a first call over 2 s used to be the measurement: the process's first backward, with torch's
    # one-time import in it, timed as the chunked op's T=262,144 backward
    run = fake_run(times)
    assert bench.best_time(run, reps, budget) == best
    assert run.calls == calls


def test_child_times_every_column(bench):
    result = bench.run_one("chunked", 64, True, 1, "time")
    assert set(result) == {*bench.TIMINGS, "pairs"}
    assert all(result[t] > 0 for t in bench.TIMINGS)
    assert len(result["pairs"]) >= 1 and all(f > 0 and fb > 0 for f, fb in result["pairs"])
    peer = bench.run_one("sdpa", 64, True, 1, "time")  # only the chunked op's ratio is reported
    assert set(peer) == set(bench.TIMINGS)


@pytest.mark.parametrize(
    "times, reps, budget, pairs",
    [
        pytest.param([1.0, 3.0] * 9, 3, 100.0, 9, id="at-most-nine"),
        pytest.param([1.0, 3.0] * 9, 3, 8.0, 3, id="at-least-reps-when-over-budget"),
        pytest.param([0.1, 0.3] * 9, 2, 1.3, 3, id="more-while-they-fit"),
    ],
)
def test_paired_times_alternate_and_fit_the_budget(bench, times, reps, budget, pairs):
    order = []
    fwd, fwdbwd = fake_run(times[::2]), fake_run(times[1::2])
    got = bench.paired_times(
        lambda: order.append("f") or fwd(), lambda: order.append("b") or fwdbwd(), reps, budget, warm=False
    )
    assert len(got) == pairs
    assert order == (["f", "b", "b", "f"] * 5)[: 2 * pairs]  # back to back, the order alternating
    assert got[0] == [times[0], times[1]] and got[1] == [times[2], times[3]]  # [a, b] whatever ran first


def test_paired_times_warm_up_never_counts(bench):
    a, b = fake_run([50.0, 1.0, 1.0, 1.0]), fake_run([50.0, 2.0, 2.0, 2.0])
    assert bench.paired_times(a, b, 3, 100.0, most=3) == [[1.0, 2.0]] * 3
    assert a.calls == b.calls == 4


def test_child_times_the_chunked_op_against_a_peer_in_one_process(bench):
    got = bench.run_one("recurrent", 32, True, 2, "versus")["versus"]  # any linear peer; fast-transformers is optional
    assert len(got) >= 2 and all(ours > 0 and peer > 0 for ours, peer in got)
    med, lo, hi = bench.speedup([[1.0, 3.0], [2.0, 3.0], [1.0, 2.0]])
    assert (med, lo, hi) == (pytest.approx(2.0), pytest.approx(1.5), pytest.approx(3.0))


def test_backward_ratio_is_the_median_of_the_pairs(bench):
    # the best-of columns would say (4.0 - 1.0) / 1.0 = 3.0: a quiet forward and a busy backward, minutes apart
    pairs = [[1.0, 3.0], [2.0, 6.6], [1.5, 4.5], [3.0, 9.0], [1.2, 7.2]]
    med, lo, hi = bench.backward_ratio(pairs)
    assert med == pytest.approx(2.0) and lo == pytest.approx(2.0) and hi == pytest.approx(5.0)
    assert bench.backward_ratio([[1.0, 3.0], [1.0, 4.0]])[0] == pytest.approx(2.5)

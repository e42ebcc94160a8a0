"""The calls benchmark's statistic: overlap with a feature class against calls shuffled within their contigs."""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.calls_validation import CLASSES, overlap_stats  # noqa: E402


def test_calls_on_a_class_are_enriched_and_random_calls_are_not():
    rng = np.random.default_rng(0)
    lengths = {"c1": 200_000, "c2": 100_000}
    masks = {c: {k: np.zeros(n, bool) for k, n in lengths.items()} for c in CLASSES}
    for s in range(5_000, 200_000, 20_000):  # ten 1 kb "mobile" features on c1: 5% of it
        masks["mobile"]["c1"][s : s + 1000] = True
    on = [("c1", s, s + 1000, "low") for s in range(5_000, 200_000, 20_000)]
    off = [("c2", int(a), int(a) + 1000, "high") for a in rng.integers(0, 99_000, 10)]
    stats = overlap_stats(on + off, lengths, masks, shuffles=300)
    obs, exp, p, hits, n, bases = stats[("low", "mobile")]
    assert obs == 10_000 and hits == n == 10 and obs / exp > 10 and p < 0.01
    obs, exp, p, hits, n, _ = stats[("high", "mobile")]
    assert obs == 0 and exp == 0 and p == 1.0  # c2 has no mobile feature: nothing to find, nothing expected
    all_obs, all_exp, _, _, all_n, all_bases = stats[("all", "mobile")]
    assert all_n == 20 and all_bases == 20_000 and 350 < all_exp < 650  # 5% of c1's calls' bases on average

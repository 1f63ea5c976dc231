"""``benchmarks/warning_calibration.py``: its counting against independent computations.

The script judges whether the Gaussian approximation's stated chances of a miss are honest; a
wrong tail probability or a wrong split of errors into shared bias and scatter would misjudge
them, so each piece is checked here against brute force or a closed form.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "warning_calibration.py"
spec = importlib.util.spec_from_file_location("warning_calibration", SCRIPT)
wc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(wc)


def test_poisson_binomial_tail_against_enumeration():
    """``P(X >= k)`` against the sum over all 2^8 outcomes of 8 unequal Bernoulli variables."""
    p = [0.01, 0.05, 0.5, 0.9, 0.2, 0.33, 0.07, 0.6]
    for k in range(len(p) + 2):
        brute = sum(math.prod(pi if x else 1.0 - pi for pi, x in zip(p, xs))
                    for xs in itertools.product((0, 1), repeat=len(p)) if sum(xs) >= k)
        assert wc.poisson_binomial_tail(p, k) == pytest.approx(brute, abs=1e-12)


def test_poisson_binomial_tail_equal_chances_is_binomial():
    """Equal chances: the binomial survival function (300 runs at 3 %)."""
    for k in (0, 5, 9, 15, 30):
        assert wc.poisson_binomial_tail([0.03] * 300, k) == pytest.approx(
            stats.binom.sf(k - 1, 300, 0.03), rel=1e-9, abs=1e-15)


def _run(worst, p, adapt=False, dispersed=False, errors=None, noise=None, seed=0, data_seed=0):
    return {"model": "m", "n": 1000, "epsilon": 16.0, "data_seed": data_seed, "seed": seed,
            "worst": worst, "p_miss": p, "adapt_warned": adapt, "over_dispersed": dispersed,
            "clipping_bias": 0.1, "errors": errors, "noise_sds": noise}


def test_silent_counts_only_runs_that_said_nothing(tmp_path):
    """A run that warned in any of the three ways is not a silent miss; the expected count is the
    quiet runs' summed chances."""
    runs = [_run(0.7, 0.05), _run(0.3, 0.02), _run(0.9, 0.5), _run(0.8, 0.01, adapt=True),
            _run(0.6, 0.03, dispersed=True), _run(0.55, 0.1)]   # 0.1 is not above the threshold
    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in runs) + "\n")
    s = wc.silent(wc.load([path]))
    assert (s["runs"], s["quiet"], s["observed"]) == (6, 3, 2)
    assert s["expected"] == pytest.approx(0.05 + 0.02 + 0.1)
    assert s["tail"] == pytest.approx(wc.poisson_binomial_tail([0.05, 0.02, 0.1], 2))


def test_reliability_bins_hold_every_run_once():
    rng = np.random.default_rng(3)
    p = rng.uniform(size=500)
    p[:3] = [0.0, 1.0, 0.3]   # the edges: 0 in the first bin, 1 in the last, 0.3 in [0.3, 0.6)
    runs = [_run(float(w), float(q)) for w, q in zip(rng.uniform(0, 1, 500), p)]
    rows = wc.reliability(runs)
    assert sum(r[2] for r in rows) == 500
    for lo, hi, k, stated, seen in rows:
        inside = [r for r in runs if lo <= r["p_miss"] < hi or (hi == 1.0 and r["p_miss"] == 1.0)]
        assert k == len(inside)
        assert stated == pytest.approx(np.mean([r["p_miss"] for r in inside]))
        assert seen == pytest.approx(np.mean([r["worst"] > 0.5 for r in inside]))


def test_noise_and_bias_recovers_simulated_scatter_and_shared_bias():
    """Errors drawn as a shared bias plus noise 1.3 times the stated sd: the split finds both
    (480 runs x 3 coordinates: the ratio's standard error is about 1.3 / sqrt(2 * 1434) = 0.024)."""
    rng = np.random.default_rng(7)
    stated = np.array([0.1, 0.2, 0.15])
    bias = {0: np.array([0.0, 0.4, -0.1]), 1: np.array([0.05, 0.0, 0.2])}
    runs = []
    for data_seed, b in bias.items():
        for seed in range(240):
            e = b + 1.3 * stated * rng.standard_normal(3)
            runs.append(_run(float(np.abs(e).max()), 0.0, errors=e.tolist(), noise=stated.tolist(),
                             seed=seed, data_seed=data_seed))
    nb = wc.noise_and_bias(runs)
    assert nb["scatter_over_noise"] == pytest.approx(1.3, abs=4 * 0.024)
    assert nb["shared_bias"] == pytest.approx(0.4, abs=4 * 1.3 * 0.2 / math.sqrt(240))
    assert nb["shared_bias_se"] == pytest.approx(1.3 * 0.2 / math.sqrt(240), rel=0.25)
    # runs without per-coordinate fields (older files) give nothing to split
    assert wc.noise_and_bias([_run(0.2, 0.0)]) is None

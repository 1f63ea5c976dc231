"""``benchmarks/published_models.py``'s yardstick ``worst_error`` against a direct computation.

A Cholesky factor's fixed entries (``L[1, 1] = 1``, ``L[1, 2] = 0``) are constant in every draw of
the reference; they must count as 0 where the private draws hold the same value and as infinitely
off where they do not, and every other component as ``|mean difference| / reference sd``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import arviz as az
import numpy as np
import pytest

# loaded by path, not put on sys.path: benchmarks/distributed.py would shadow Dask's package in
# the worker processes the distributed tests spawn
BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
spec = importlib.util.spec_from_file_location("published_models", BENCHMARKS / "published_models.py")
pm = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pm)


def _fit(mu: np.ndarray, l21: np.ndarray, l11: float = 1.0) -> az.InferenceData:
    draws = mu.shape[0]
    chol = np.zeros((1, draws, 2, 2))
    chol[0, :, 0, 0] = l11
    chol[0, :, 1, 0] = l21
    chol[0, :, 1, 1] = np.sqrt(1.0 - l21**2)
    return az.from_dict(posterior={"mu": mu[None], "L": chol})


def test_constant_components_count_zero_where_held_and_the_rest_by_the_reference_sd():
    rng = np.random.default_rng(0)
    ref = _fit(rng.normal(0.0, 1.0, (4000, 2)), rng.uniform(0.4, 0.8, 4000))
    r_mu = ref.posterior["mu"].values.reshape(-1, 2)
    r_l = ref.posterior["L"].values.reshape(-1, 2, 2)
    private = _fit(rng.normal(0.3, 1.0, (1000, 2)), rng.uniform(0.45, 0.85, 1000))
    p_mu = private.posterior["mu"].values.reshape(-1, 2)
    p_l = private.posterior["L"].values.reshape(-1, 2, 2)
    direct = max(np.max(np.abs(p_mu.mean(0) - r_mu.mean(0)) / r_mu.std(0)),
                 *(abs(p_l[:, i, j].mean() - r_l[:, i, j].mean()) / r_l[:, i, j].std()
                   for i, j in ((1, 0), (1, 1))))
    worst, _ = pm.worst_error(private, ref)
    assert np.isfinite(worst) and worst == pytest.approx(direct, rel=1e-12)
    moved = _fit(rng.normal(0.3, 1.0, (1000, 2)), rng.uniform(0.45, 0.85, 1000), l11=0.9)
    worst, which = pm.worst_error(moved, ref)
    assert worst == np.inf and which == "L"

"""The saddle check: the final pool's released curvature says whether the search stopped at a mode.

Against closed forms (the least eigenvalue of a matrix built from known eigenvalues, Weyl's bound
for the noise) and end to end on a Stan mixture whose default search stops where its components
merge (a saddle, many posterior sds from the data's truth), where a data-independent init near the
modes it should find removes both the saddle and the warning.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import stan_dp
from conftest import stan_test_model
from stan_dp.adaptation import AdaptationSettings
from stan_dp.adaptation.pooling import _least_curvature
from stan_dp.adaptation.result import SADDLE_LIMIT, AdaptationResult
from stan_dp.adaptation.releases import Ledger


def _rotation(d: int, seed: int) -> np.ndarray:
    q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(d, d)))
    return q


def test_least_curvature_is_the_signed_least_eigenvalue_over_the_noise():
    """``data + prior`` with eigenvalues (-2, 1, 3) in a random basis, ``tau`` = 0.5: -4 and the
    eigenvector of -2 (up to sign); the prior's part counts (a data part with eigenvalues (-2.5, 0.5,
    2.5) plus a prior of 0.5 I gives the same), and a non-finite entry gives NaN."""
    q = _rotation(3, 0)
    total = (q * np.array([-2.0, 1.0, 3.0])) @ q.T
    value, vector = _least_curvature(total, np.zeros((3, 3)), 0.5)
    assert value == pytest.approx(-4.0)
    assert abs(vector @ q[:, 0]) == pytest.approx(1.0)
    data = (q * np.array([-2.5, 0.5, 2.5])) @ q.T
    assert _least_curvature(data, 0.5 * np.eye(3), 0.5)[0] == pytest.approx(-4.0)
    positive = (q * np.array([0.2, 1.0, 3.0])) @ q.T
    assert _least_curvature(positive, np.zeros((3, 3)), 0.1)[0] == pytest.approx(2.0)
    bad = total.copy()
    bad[0, 1] = np.nan
    assert np.isnan(_least_curvature(bad, np.zeros((3, 3)), 0.5)[0])


def test_noise_within_its_spectral_bound_rarely_reads_as_a_saddle():
    """At a mode whose curvature the release cannot resolve along one direction (eigenvalue 0
    there, 1 elsewhere: the hardest case for a false alarm) and the pool's noise (diagonal sd
    ``s``, off-diagonal ``s / sqrt(2)``, ``tau = 1.5 s sqrt(2 d)``, ``s`` = 0.1), the check reads
    below ``-SADDLE_LIMIT`` in at most 0.1 % of 20,000 draws at ``d`` = 3 and never at ``d`` = 11
    (measured 0.015 % and 0: only the noise along that direction moves the least eigenvalue below
    0, and ``tau`` bounds the whole matrix's spectral norm with a margin); a saddle of eigenvalue
    ``-3 tau`` reads below it in at least 99.9 %."""
    rng = np.random.default_rng(2)
    for d, allowed in ((3, 0.001), (11, 0.0)):
        s = 0.1
        tau = 1.5 * s * np.sqrt(2 * d)
        q = _rotation(d, d)
        flat = (q * np.r_[0.0, np.ones(d - 1)]) @ q.T
        saddle = (q * np.r_[-3.0 * tau, np.ones(d - 1)]) @ q.T
        reads, saddle_reads = [], []
        for _ in range(20000):
            e = rng.normal(0.0, s / np.sqrt(2), (d, d))
            noise = np.triu(e, 1) + np.triu(e, 1).T + np.diag(rng.normal(0.0, s, d))
            reads.append(_least_curvature(flat + noise, np.zeros((d, d)), tau)[0])
            saddle_reads.append(_least_curvature(saddle + noise, np.zeros((d, d)), tau)[0])
        assert np.mean(np.array(reads) < -SADDLE_LIMIT) <= allowed
        assert np.mean(np.array(saddle_reads) < -SADDLE_LIMIT) >= 0.999


def test_saddle_is_the_least_curvature_below_the_limit():
    d = 2
    base = AdaptationResult(np.zeros(d), np.eye(d), np.eye(d), np.eye(d), 1.0, Ledger("replace_one"), 2,
                            True, np.zeros((1, d)), 0.0, 0.0, 1.0)
    assert not base.saddle   # not computed: NaN
    assert base._replace(least_curvature=-SADDLE_LIMIT - 0.01).saddle
    assert not base._replace(least_curvature=-SADDLE_LIMIT + 0.01).saddle
    assert not base._replace(least_curvature=5.0).saddle


def _mixture_data(n: int, seed: int) -> dict:
    """40 % of rows from N(40, 5), 60 % from N(70, 8)."""
    rng = np.random.default_rng(seed)
    first = rng.uniform(size=n) < 0.4
    return {"N": n, "y": np.where(first, rng.normal(40, 5, n), rng.normal(70, 8, n))}


def test_the_cli_says_why_a_gaussian_shows_no_intervals():
    """Each reason ``attrs["mixed"]`` is false for the Gaussian approximation is named, not only an
    unsettled search (a settled search at a saddle had been told "did not settle")."""
    from stan_dp.cli import _not_mixed_reason

    settled = {"sampler": "gaussian", "search_settled": 1, "saddle": 0, "gaussian_shape_ok": 1}
    assert _not_mixed_reason({**settled, "saddle": 1}) == "it stopped at a saddle point"
    assert _not_mixed_reason({**settled, "gaussian_shape_ok": 0}) == (
        "the posterior is not Gaussian around the private mode")
    assert _not_mixed_reason({**settled, "search_settled": 0, "saddle": 1}) == (
        "the private mode search did not settle; it stopped at a saddle point")
    assert _not_mixed_reason({"sampler": "hmc"}) == "the chains did not mix"


def test_a_mixture_whose_search_stops_where_its_components_merge_warns_of_a_saddle(compiled, capsys):
    """3,000 rows, epsilon = 16.  From the default start (zeros unconstrained: both means near 0)
    the search ends with the components on one blob (means around 55-58, one weight near 0 or
    the scales near 16), 46-118 posterior sds from NUTS, and the released curvature there has an
    eigenvalue of about -1 in the posterior's frame against a noise of 0.09 (-10 to -12 noise
    norms): the run warns of a saddle and names the means.  From an init spread over the outcome's
    range (public: no row read) the search finds the two components, within a unit of the
    truth (posterior sds about 0.16 and 0.2), with a positive least curvature and no such
    warning.  (Noise seed 11: since the Newton rounds cap a log coordinate's move,
    ``newton.LOG_STEP_MAX``, seeds 1 and 2 end on the same blob without settling, so with the
    warning that the search did not settle, which names ``init=`` too; since a component's mean
    that few rows depend on is framed by its own rows, ``initial_frame.SPARSE_FRACTION``, seeds 1-10
    do, seed 3 among them, and 11 stops at the saddle.  Since the curvature tail rule,
    ``AdaptationSettings.raise_curvature_tail``, raises the curvature bound on this blob, up to
    8-fold, and the noise with it, no seed of 1-12 settles (session 70: seed 8 read the saddle at
    -1.4 noise norms; since session 71, where the raise is affordable too, none does): those runs
    say that the search did not settle and name ``init=``.  The saddle's own warning is checked
    with the rule off, at seed 11: least curvature -8.1 noise norms, settled.)"""
    model = stan_dp.RowModel(compiled(stan_test_model("normal_mixture")), _mixture_data(3000, 0))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        default = stan_dp.sample(model, epsilon=16.0, delta=1e-5, seed=8, progress=False)
    said = [str(w.message) for w in caught if issubclass(w.category, stan_dp.UtilityWarning)]
    assert any("did not settle" in w and "init=" in w for w in said), said
    assert not default.attrs["mixed"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = stan_dp.sample(model, epsilon=16.0, delta=1e-5, seed=11, progress=False,
                             settings=AdaptationSettings(raise_curvature_tail=False))
    said = [str(w.message) for w in caught if issubclass(w.category, stan_dp.UtilityWarning)]
    assert any("saddle point" in w and "mu[" in w for w in said), said
    saddle = next(w for w in said if "saddle point" in w)   # the program's log_mix: no funnel named
    assert "a mixture whose components merged" in saddle and "funnel" not in saddle
    assert fit.attrs["saddle"] and fit.attrs["least_curvature"] < -SADDLE_LIMIT
    assert not fit.attrs["mixed"]   # no credible intervals from it
    from stan_dp.cli import _print_fit

    _print_fit(fit)
    printed = capsys.readouterr().out
    assert "intervals not shown: " in printed and "it stopped at a saddle point" in printed
    assert "hdi" not in printed
    assert "saddle point" in fit.attrs["warnings"]   # recorded as well as raised
    mu = fit.posterior["mu"].values.reshape(-1, 2).mean(0)
    assert abs(mu[0] - 40.0) > 5.0   # the miss the warning is for
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        spread = stan_dp.sample(model, epsilon=16.0, delta=1e-5, seed=1, progress=False,
                                init={"mu": [30.0, 80.0], "sigma": [10.0, 10.0], "lambda": 0.5})
    assert not any("saddle" in str(w.message) for w in caught)
    assert not spread.attrs["saddle"] and spread.attrs["least_curvature"] > SADDLE_LIMIT
    assert spread.attrs["mixed"]
    mu = spread.posterior["mu"].values.reshape(-1, 2).mean(0)
    assert mu == pytest.approx([40.0, 70.0], abs=1.0)

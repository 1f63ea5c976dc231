"""The search's start: the prior's mode along the coordinates where the prior has one, and the rows'
choice on the way to it (locations, then scales).

The mode is checked against modes derived by hand (in the unconstrained coordinate ``u``, Jacobian
included): a ``normal(m, s)`` location at ``m``; a half-Cauchy ``(0, c)`` scale, ``log p = -log(1 +
e^{2u}/c^2) + u``, at ``u = log c``; a ``gamma(a, b)`` scale, ``(a - 1) u - b e^u + u``, at
``e^u = a / b``.
A coordinate with no mode keeps the default start: a flat prior (zero gradient), the Jacobian alone
(``log p = u``, rising without end), ``uniform(0, 100)`` on a ``<lower=0>`` scale (peaks at the
support's edge, where the gradient is 1), and a centred hierarchy's ``log sigma`` (the funnel's
neck, ``log p -> +inf`` as ``sigma -> 0`` with the elements at their location).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from densities import NormalMean, Untouchable
from stan_dp.adaptation.prior_start import (PRIOR_START_REACH, START_FRACTIONS, choose_start,
                                            line_choice, prior_mode_start)
from stan_dp.adaptation.releases import Ledger
from stan_dp.aggregates import queries


class Prior:
    """A density that has a prior only (its gradient by the package's central differences,
    :func:`stan_dp.density.prior_gradient`); its rows raise (the start must never read one)."""

    def __init__(self, log_prior, dim: int) -> None:
        self._lp, self.dim, self.n_rows = log_prior, dim, 10

    def log_prior(self, theta):
        return float(self._lp(np.asarray(theta, dtype=float)))

    def row_log_lik(self, theta, rows=None):
        raise AssertionError("a row was read")

    row_log_lik_grad = row_log_lik


def _mixed(theta: np.ndarray) -> float:
    """normal(170, 20) location; half-Cauchy(0, 5) log scale; flat; Jacobian alone; uniform(0, 100)
    on a lower-bounded scale; gamma(2, 0.1) log scale."""
    loc, cauchy, flat, jac, uni, gam = theta
    if np.exp(uni) > 100.0:
        return -np.inf
    return (-0.5 * ((loc - 170.0) / 20.0) ** 2
            - np.log1p(np.exp(2 * cauchy) / 25.0) + cauchy
            + 0.0 * flat
            + jac
            + uni
            + (2 - 1) * gam - 0.1 * np.exp(gam) + gam)


def test_the_start_takes_each_coordinates_prior_mode_where_it_has_one():
    point, moved = prior_mode_start(Prior(_mixed, 6), np.zeros(6))
    np.testing.assert_allclose(point[0], 170.0, atol=1e-3)
    np.testing.assert_allclose(np.exp(point[1]), 5.0, rtol=1e-4)
    np.testing.assert_allclose(np.exp(point[5]), 2.0 / 0.1, rtol=1e-4)
    # flat, Jacobian alone (would run to the reach), uniform's edge (gradient 1 there): held
    assert point[2] == 0.0 and point[3] == 0.0 and point[4] == 0.0
    assert moved.tolist() == [True, True, False, False, False, True]


def test_a_funnel_keeps_the_default_start():
    """``a_j ~ normal(mu, sigma)``, ``mu ~ normal(0, 10)``, ``sigma`` with no prior (Jacobian ``v``):
    the log density rises without end as ``v -> -inf`` with ``a = mu``.  ``v`` is held at 0 and the
    rest maximised again with it held: the elements and ``mu`` at 0."""
    def funnel(theta):
        a, mu, v = theta[:4], theta[4], theta[5]
        return (-4 * v - 0.5 * np.sum((a - mu) ** 2) / np.exp(2 * v) + v
                - 0.5 * (mu / 10.0) ** 2)

    point, moved = prior_mode_start(Prior(funnel, 6), np.zeros(6))
    assert not moved.any()
    np.testing.assert_array_equal(point, np.zeros(6))
    # with a proper prior on sigma the funnel's neck still wins: the log density still rises
    # without end (-3 v for J = 4 elements less the Jacobian), so v is held all the same
    point, moved = prior_mode_start(
        Prior(lambda t: funnel(t) - np.log1p(np.exp(2 * t[5]) / 6.25), 6), np.zeros(6))
    assert not moved[5]


def test_a_mode_beyond_the_reach_is_held():
    point, moved = prior_mode_start(
        Prior(lambda t: -0.5 * (t[0] - 2 * PRIOR_START_REACH) ** 2, 1), np.zeros(1))
    assert point[0] == 0.0 and not moved[0]


def test_the_start_is_measured_from_a_given_default():
    """The reach and the held coordinates are relative to the default start passed in."""
    point, moved = prior_mode_start(
        Prior(lambda t: -0.5 * (t[0] - 4.0) ** 2 + t[1], 2), np.array([1.0, -2.0]))
    np.testing.assert_allclose(point, [4.0, -2.0], atol=1e-6)
    assert moved.tolist() == [True, False]


# ---- the rows' choice on the way from the default start to the prior's mode ----


def _heights(n: int = 200, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(170.0, 10.0, n)


@pytest.mark.parametrize("prior_mean, fraction", [(178.0, 1.0), (-500.0, 0.0)])
def test_the_rows_choose_the_point_more_of_them_prefer(prior_mean, fraction):
    """Heights in cm, ``sigma`` = 10 known.  On the way from ``mu`` = 0 to 178 every row prefers
    178 (its heights are nearest): the end is chosen.  On the way to -500 every row prefers 0 by
    far more than a nat at every point, so each released sum is about ``-n`` against a noise sd of
    ``4 z`` = 20: the start is kept.  The prior's own difference (1,250 nats for ``normal(-500,
    10)``) does not override the rows."""
    model = NormalMean(_heights(), sigma=10.0, m0=prior_mean, s0=10.0)
    ledger = Ledger("replace_one")
    point, chosen, scores = line_choice(queries(model), np.zeros(1), np.array([prior_mean]), 5.0,
                                        np.random.default_rng(1), ledger, "start choice")
    assert chosen == fraction
    np.testing.assert_allclose(point, [fraction * prior_mean])
    if fraction == 0.0:
        assert np.all(scores < -200.0 + 5 * 20.0)
    entry = ledger.entries[-1]
    assert entry.what == "start choice" and entry.noise_multiplier == 5.0
    assert entry.noise_sd == pytest.approx(2.0 * 2.0 * 5.0)   # replace-one: 2 x the sqrt(4) bound x z
    assert len(ledger.entries) == 1


def test_the_released_scores_sum_the_rows_clipped_votes_over_the_steps():
    """Near each other the points' per-row changes ``((y - p_{k-1})^2 - (y - p_k)^2) / 200`` fall
    inside and outside ``[-1, 1]``: the release (noise multiplier 1e-9) is the sum of each step's
    clipped votes, and a point's score their sum over the steps to it, computed here directly."""
    y = _heights(300, seed=2) * 1.0
    y[:20] += 300.0   # rows whose every step exceeds a nat
    model = NormalMean(y, sigma=10.0)
    _, fraction, scores = line_choice(queries(model), np.array([170.0]), np.array([174.0]), 1e-9,
                                      np.random.default_rng(0), Ledger("replace_one"), "start choice")
    ends = 170.0 + 4.0 * np.array((0.0, *START_FRACTIONS))
    change = ((y[:, None] - ends[:-1]) ** 2 - (y[:, None] - ends[1:]) ** 2) / 200.0
    assert np.any(np.abs(change) > 1.0) and np.any(np.abs(change) < 1.0)
    expected = np.cumsum(np.sum(np.clip(change, -1.0, 1.0), axis=0))
    np.testing.assert_allclose(scores, expected, atol=1e-6)
    best = int(np.argmax(expected))
    assert fraction == (START_FRACTIONS[best] if expected[best] > 0 else 0.0)


@pytest.mark.parametrize("mu_prior, scale_used", [(178.0, True), (-500.0, False)])
def test_the_scales_are_chosen_only_where_the_locations_moved(mu_prior, scale_used):
    """Two releases either way (the plan counts them).  Heights around 170 with sd 10: from
    ``(0, log 1)`` towards ``(178, log 20)`` the rows take ``mu`` = 178 and then, there, a
    ``sigma`` of 9.5 or 20 (their residuals' scale).  Towards ``(-500, log 20)`` they keep
    ``mu`` = 0, where every larger ``sigma`` looks better to residuals of 170: that second
    choice is not used."""
    model = Heights(_heights(200))
    ledger = Ledger("replace_one")
    out = choose_start(queries(model), np.zeros(2), np.array([mu_prior, np.log(20.0)]),
                       np.array([False, True]), 5.0, np.random.default_rng(3), ledger)
    assert [e.what for e in ledger.entries] == ["start choice", "start choice"]
    assert out.scores.shape == (2, len(START_FRACTIONS))
    if scale_used:
        assert out.fraction == 1.0 and out.point[0] == 178.0
        assert out.scale_fraction in (0.75, 1.0)
        assert np.exp(out.point[1]) == pytest.approx(20.0 ** out.scale_fraction)
    else:
        assert out.fraction == 0.0 and out.scale_fraction == 0.0
        np.testing.assert_array_equal(out.point, [0.0, 0.0])
        assert out.scores[1, -1] > 100.0   # the votes it ignores: sigma = 20 "fits" residuals of 170


def test_the_prior_mode_is_found_without_reading_a_row():
    model = Untouchable(NormalMean(_heights(), sigma=10.0, m0=178.0, s0=20.0))
    point, moved = prior_mode_start(model, np.zeros(1))
    np.testing.assert_allclose(point, [178.0], atol=1e-3)
    assert moved.all()


class Heights:
    """``y ~ normal(mu, sigma)``, ``mu ~ normal(178, 20)``, ``sigma ~ normal(0, 20)`` on
    ``<lower=0>`` (unconstrained ``(mu, log sigma)``, Jacobian included): the prior's mode is
    ``(178, log 20)``."""

    log_coordinates = np.array([False, True])   # as RowModel reads ``real<lower=0> sigma``

    def __init__(self, y: np.ndarray) -> None:
        self.y = np.asarray(y, dtype=float)
        self.n_rows, self.dim, self.param_names = self.y.size, 2, ["mu", "sigma"]

    def log_prior(self, theta):
        mu, ls = theta
        return float(-0.5 * ((mu - 178.0) / 20.0) ** 2 - 0.5 * (np.exp(ls) / 20.0) ** 2 + ls)

    def row_log_lik_grad(self, theta, rows=None):
        y = self.y if rows is None else self.y[np.asarray(rows)]
        mu, ls = theta
        r = (y - mu) / np.exp(ls)
        return -0.5 * r**2 - ls - 0.5 * np.log(2 * np.pi), np.column_stack([r / np.exp(ls), r**2 - 1.0])

    def row_log_lik(self, theta, rows=None):
        return self.row_log_lik_grad(theta, rows)[0]

    def constrain(self, theta):
        return {"mu": np.asarray(theta[0]), "sigma": np.asarray(np.exp(theta[1]))}


def _exact_mode_and_sd(model: Heights) -> tuple[np.ndarray, np.ndarray]:
    """The posterior's mode and Laplace sds in ``(mu, log sigma)``, by optimisation and finite
    differences of the exact log posterior (an oracle apart from the package)."""
    from scipy import optimize

    def neg(t):
        return -(float(np.sum(model.row_log_lik(t))) + model.log_prior(t))

    mode = optimize.minimize(neg, np.array([170.0, np.log(10.0)]), method="Nelder-Mead",
                             options={"xatol": 1e-9, "fatol": 1e-12, "maxiter": 20000}).x
    h = 1e-4
    hess = np.empty((2, 2))
    for a in range(2):
        for b in range(2):
            e_a, e_b = np.eye(2)[a] * h, np.eye(2)[b] * h
            hess[a, b] = (neg(mode + e_a + e_b) - neg(mode + e_a - e_b) - neg(mode - e_a + e_b)
                          + neg(mode - e_a - e_b)) / (4 * h * h)
    return mode, np.sqrt(np.diag(np.linalg.inv(hess)))


def _assert_budget_composes(attrs: dict, epsilon: float, delta: float) -> None:
    """The start choice's two releases are in the run's release list at ``z = 1 / sqrt(START_SHARE
    m)`` (``m`` the budget's PLD mean), and the listed releases compose to the whole budget:
    ``sum count / (2 z^2) = m`` (the Gaussian spends it all on the adaptation)."""
    import re

    from stan_dp.adaptation import pld_mean_budget
    from stan_dp.adaptation.prior_start import START_SHARE

    m = pld_mean_budget(epsilon, delta)
    lines = dict((what.strip(), (int(count), float(z))) for what, count, z in
                 re.findall(r"([a-z ]+): (\d+) x z=([0-9.e+-]+)", attrs["release_summary"]))
    count, z = lines["start choice"]
    assert count == 2 and z == pytest.approx(1.0 / np.sqrt(START_SHARE * m), rel=1e-5)
    composed = sum(c / (2.0 * zz**2) for c, zz in lines.values())
    assert composed == pytest.approx(m, rel=1e-4)


def test_forty_heights_start_at_the_priors_mode_and_arrive():
    """The canonical first model at 40 rows, epsilon = 16, with the priors a user writes for
    heights in cm.  From the default start (zeros: ``mu`` = 0, ``sigma`` = 1) the search cannot
    arrive at this size (docs/adaptation.md §7, "Small n across the battery": 108-123 sds off); the
    rows choose the prior's mode and the run ends within a few sds of the exact posterior mode.
    ``start_share=0`` (no choice) is the counterfactual."""
    model = Heights(_heights(40, seed=3))
    errors, fits = _errors_with_and_without_the_choice(model, Heights(model.y))
    assert fits[None].attrs["start_towards_prior_mode"] == 1.0
    _assert_budget_composes(fits[None].attrs, 16.0, 1e-5)
    assert errors[None] < 3.0 < 20.0 < errors[0.0]


def _errors_with_and_without_the_choice(model, twin: "Heights") -> tuple[dict, dict]:
    """Worst error (exact posterior sds, ``(mu, log sigma)``) of ``model``'s fit at 40 rows'
    epsilon = 16, seed 5, with the start's choice (``start_share`` None) and without (0), against
    ``twin``'s exact mode and sds; and the fits."""
    from stan_dp.adaptation import AdaptationSettings
    import stan_dp

    mode, sd = _exact_mode_and_sd(twin)
    errors, fits = {}, {}
    for share in (None, 0.0):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", stan_dp.UtilityWarning)   # small n: said before the data
            fits[share] = stan_dp.sample(model, epsilon=16.0, delta=1e-5, seed=5, progress=False,
                                         settings=AdaptationSettings(start_share=share))
        posterior = fits[share].posterior
        centre = np.array([float(posterior["mu"].mean()), float(np.log(posterior["sigma"]).mean())])
        errors[share] = float(np.max(np.abs(centre - mode) / sd))
    return errors, fits


def test_a_stan_program_with_priors_for_its_data_starts_there(compiled):
    """``tests/stan/heights_priors.stan`` on the same 40 heights as :class:`Heights` (the same log
    density up to a constant: its exact mode and sds are the oracle).  The program's readings say
    ``sigma`` is a scale (``log_coordinates``), so the locations are offered first: the rows take
    ``mu`` = 178, then ``sigma`` towards 20, and the run at epsilon = 16 ends within 3 sds where
    the default start (``start_share=0``) is over 20 off."""
    from conftest import stan_test_model
    import stan_dp

    y = _heights(40, seed=3)
    model = stan_dp.RowModel(compiled(stan_test_model("heights_priors")), {"N": y.size, "y": y})
    np.testing.assert_array_equal(model.log_coordinates, [False, True])
    errors, fits = _errors_with_and_without_the_choice(model, Heights(y))
    assert fits[None].attrs["start_towards_prior_mode"] == 1.0
    assert fits[None].attrs["start_scales_towards_prior_mode"] > 0.0
    assert fits[0.0].attrs["start_towards_prior_mode"] == ""
    assert errors[None] < 3.0 < 20.0 < errors[0.0], errors


def test_a_prior_mode_that_moves_no_scale_costs_one_release():
    """``mu ~ normal(178, 20)`` with ``sigma``'s prior mode at the default (1): the way along the
    scales is empty, so only the locations' release is made (the plan counts one), and the scales'
    fraction is 0 whatever the noise."""
    from stan_dp.adaptation.prior_start import moves_scales

    model = Heights(_heights(200))
    ledger = Ledger("replace_one")
    prior_mode, scales = np.array([178.0, 0.0]), np.array([False, True])
    assert not moves_scales(np.zeros(2), prior_mode, scales)
    assert not moves_scales(np.zeros(2), np.array([178.0, 3.0]), None)   # no log coordinates
    assert moves_scales(np.zeros(2), np.array([178.0, 3.0]), scales)
    out = choose_start(queries(model), np.zeros(2), prior_mode, scales, 5.0,
                       np.random.default_rng(3), ledger)
    assert [e.what for e in ledger.entries] == ["start choice"]
    assert out.fraction == 1.0 and out.scale_fraction == 0.0 and np.all(np.isnan(out.scores[1]))
    np.testing.assert_array_equal(out.point, [178.0, 0.0])

"""The far phase's steps of a log-transformed coordinate stop at 10 e-folds.

A Student-t regression of spending on income, both in dollars (``tests/stan/student_dollars.stan``:
residual scale about 3,000, ``sigma`` started at 1).  There each row's gradient in ``log sigma`` is
at most ``nu`` (the t likelihood saturates: ``(nu + 1) r^2 / (nu sigma^2 + r^2) - 1``) while its
curvature vanishes like ``sigma^2 / r^2``, so the far phase's first step, the diagonal Newton step of
its vote at the start's curvature scale, put ``log sigma`` at 7.6e6: every row's log-likelihood
was then flat in it, the rounds could not come back, and every draw of the Gaussian overflowed.
:data:`stan_dp.adaptation.far.LOG_STEP_MAX` holds such a step at 10 e-folds.  The oracle is exact:
the posterior mode and Laplace sds of the same density written out in NumPy (the Stan priors, the t
likelihood and the log transforms' Jacobians), found by scipy, not by the package
(docs/adaptation.md §3, "Far phase", step 4).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, special

import stan_dp
import stan_dp.adaptation.far as far
from conftest import stan_test_model, traced_adaptation


def _data(n: int = 1500) -> dict:
    rng = np.random.default_rng(303)
    income = rng.lognormal(math.log(50000.0), 0.5, n)
    spend = 2000.0 + 0.3 * income + 3000.0 * rng.standard_t(4, n)
    return {"N": n, "income": income, "spend": spend}


def _log_posterior(theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    """The program's log density in its unconstrained coordinates ``(alpha, beta, log sigma,
    log(nu - 1))``, Jacobians included, up to a constant."""
    alpha, beta, u, w = theta
    sigma, nu = math.exp(u), 1.0 + math.exp(w)
    z = (y - alpha - beta * x) / sigma
    rows = (special.gammaln((nu + 1) / 2) - special.gammaln(nu / 2) - 0.5 * math.log(nu * math.pi)
            - u - (nu + 1) / 2 * np.log1p(z * z / nu))
    prior = (-0.5 * (alpha / 1e4) ** 2 - 0.5 * beta**2 - 1e-4 * sigma + u
             + math.log(nu) - 0.1 * nu + w)
    return float(rows.sum() + prior)


def _exact_mode_and_sd(data: dict) -> tuple[np.ndarray, np.ndarray]:
    x, y = np.asarray(data["income"]), np.asarray(data["spend"])
    z = np.column_stack([np.ones_like(x), x])
    coef = np.linalg.lstsq(z, y, rcond=None)[0]
    start = np.array([coef[0], coef[1], math.log(np.std(y - z @ coef)), 1.0])
    scale = np.array([100.0, 0.002, 0.03, 0.1])   # optimise in roughly posterior units
    res = optimize.minimize(lambda v: -_log_posterior(start + scale * v, x, y), np.zeros(4),
                            method="Nelder-Mead", options={"xatol": 1e-8, "fatol": 1e-10, "maxiter": 20000})
    mode = start + scale * res.x
    h = 1e-3 * scale
    hess = np.empty((4, 4))
    for i in range(4):
        for j in range(4):
            ei, ej = np.eye(4)[i] * h[i], np.eye(4)[j] * h[j]
            hess[i, j] = (_log_posterior(mode + ei + ej, x, y) - _log_posterior(mode + ei - ej, x, y)
                          - _log_posterior(mode - ei + ej, x, y)
                          + _log_posterior(mode - ei - ej, x, y)) / (4 * h[i] * h[j])
    return mode, np.sqrt(np.diag(np.linalg.inv(-hess)))


def test_a_scale_far_below_its_mode_moves_ten_e_folds_a_round_at_most(compiled, monkeypatch):
    """1,500 rows, epsilon = 16: no far round moves ``log sigma`` or ``log(nu - 1)`` by more than 10,
    the phase ends within 2 e-folds of the exact mode's ``log sigma`` (8.05; it starts at 0), and
    the search settles within 3 posterior sds of the exact mode in every coordinate.  Without the
    cap the first far round put ``log sigma`` beyond 10^6."""
    data = _data()
    model = stan_dp.RowModel(compiled(stan_test_model("student_dollars")), data)
    assert model.log_coordinates.tolist() == [False, False, True, True]
    mode, sd = _exact_mode_and_sd(data)
    assert abs(math.exp(mode[2]) - 3000.0) < 300.0   # the oracle found the residual scale

    trace, adapted = traced_adaptation(model, 16.0, 1)
    points = np.array([np.zeros(4)] + [t["theta"] for t in trace if t.get("far")])
    moves = np.abs(np.diff(points, axis=0))
    assert moves[:, 2:].max() <= far.LOG_STEP_MAX + 1e-12
    assert moves[:, 2].max() == far.LOG_STEP_MAX   # the cap was reached: the test exercises it
    assert abs(points[-1, 2] - mode[2]) < 2.0
    assert adapted.result.settled
    assert np.all(np.abs(adapted.result.mode - mode) < 3.0 * sd), (adapted.result.mode - mode) / sd

    monkeypatch.setattr(far, "LOG_STEP_MAX", math.inf)   # the phase as it was
    trace, _ = traced_adaptation(model, 16.0, 1)
    assert [t for t in trace if t.get("far")][0]["theta"][2] > 1e6

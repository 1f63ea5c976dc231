"""An unsettled search's group location and scale at the expected prior's mode (one EM step).

No row depends on a centred group's location and scale (``mu`` and ``log tau`` in
``a ~ normal(mu, tau)``), so where the Newton rounds end unsettled they sit about where the far
phase left them.  :func:`stan_dp.adaptation.groups.hyperparameters_at_expected_mode` moves them to
the maximum of the exact log prior averaged over the elements' Gaussian approximation
``q = N(a_hat, C)``: ``E_q log N(a_j | mu, tau) = log N(a_hat_j | mu, tau) - C_jj / (2 tau^2)``
(:class:`~stan_dp.adaptation.groups.ExpectedGroupPrior`).  Checked against a Monte Carlo average
of the exact prior, against the closed-form maximiser of the varying intercept's expected prior
(scipy), the privacy noise it carries against finite differences of that maximiser, and that
nothing moves without a declaration or where rows depend on the coordinate.
"""

from __future__ import annotations

import numpy as np
from scipy import optimize

from stan_dp.adaptation import groups
from stan_dp.adaptation.pooling import _Pooled
from densities import VaryingIntercept

J = 6
MU, LOG_TAU, LOG_SIGMA = 0, 1, J + 2
MEMBERS = list(range(2, 2 + J))


def _density() -> VaryingIntercept:
    rng = np.random.default_rng(0)
    g = rng.integers(0, J, 60)
    density = VaryingIntercept(rng.normal(size=60), g, J)
    density.hierarchical_hyperparameters = ((tuple(MEMBERS), (MU,), (LOG_TAU,)),)
    return density


def _theta(elements: np.ndarray) -> np.ndarray:
    return np.concatenate([[0.2, np.log(2.0)], elements, [np.log(0.8)]])


def _pool(theta: np.ndarray, element_variance: float, noise_variance: float) -> _Pooled:
    """An unresolved pool at ``theta``: the rows' curvature on the elements and ``log sigma``
    only, so that ``C = curvature^-1 + noise_cov`` has ``element_variance + noise_variance`` on
    every element (the prior's part is left out of ``curvature``: this fixes ``C``)."""
    d = theta.size
    data = np.zeros(d)
    data[MEMBERS] = 1.0 / element_variance
    data[LOG_SIGMA] = 50.0
    curvature = np.diag(np.where(data > 0.0, data, 1.0))
    noise_cov = np.diag(np.full(d, noise_variance))
    return _Pooled(mode=theta.copy(), noise_cov=noise_cov, curvature=curvature, frame=np.eye(d),
                   resolved=False, data_curvature=np.diag(data), tau=1.0,
                   data_curvature_diag_sd=np.ones(d))


def _closed_form(elements: np.ndarray, spread: float) -> np.ndarray:
    """The maximiser over ``(mu, u = log tau)`` of the varying intercept's expected log prior:
    ``mu ~ N(0, 100)``, ``tau ~ N+(0, 10)`` with its log Jacobian ``u``, and ``J`` elements."""

    def negative(x: np.ndarray) -> float:
        mu, u = x
        s = np.sum((elements - mu) ** 2) + spread
        return -(-0.5 * (mu / 100.0) ** 2 - 0.5 * np.exp(2 * u) / 100.0 + u - J * u - 0.5 * s * np.exp(-2 * u))

    out = optimize.minimize(negative, x0=np.array([elements.mean(), 0.0]), method="Nelder-Mead",
                            options={"xatol": 1e-10, "fatol": 1e-14, "maxiter": 20000})
    return out.x


def test_the_expected_prior_is_the_monte_carlo_mean_of_the_exact_prior():
    density = _density()
    rng = np.random.default_rng(1)
    theta = _theta(1.0 + 0.5 * rng.normal(size=J))
    variances = rng.uniform(0.05, 0.4, J)
    expected = groups.ExpectedGroupPrior(density, [(LOG_TAU, float(variances.sum()))])
    draws = 40000
    values = np.empty(draws)
    for k in range(draws):
        point = theta.copy()
        point[MEMBERS] += np.sqrt(variances) * rng.normal(size=J)
        values[k] = density.log_prior(point)
    se = values.std() / np.sqrt(draws)
    assert abs(values.mean() - expected.log_prior(theta)) < 4.0 * se
    # its gradient is the derivative of its value (central differences)
    _, grad = expected.log_prior_grad(theta)
    for j in range(theta.size):
        e = np.zeros(theta.size)
        e[j] = 1e-6
        numeric = (expected.log_prior(theta + e) - expected.log_prior(theta - e)) / 2e-6
        np.testing.assert_allclose(grad[j], numeric, rtol=1e-5, atol=1e-6)


def test_an_unsettled_pool_moves_mu_and_log_tau_to_the_closed_form_maximiser():
    density = _density()
    elements = np.array([1.1, 1.6, 0.7, 1.3, 1.9, 1.2])
    theta = _theta(elements)
    element_variance, noise_variance = 0.04, 0.01
    mode, noise_cov, curvature = groups.hyperparameters_at_expected_mode(
        density, _pool(theta, element_variance, noise_variance), np.eye(theta.size), 1e-5,
        data_coordinates=np.isin(np.arange(theta.size), MEMBERS + [LOG_SIGMA]))
    spread = J * (element_variance + noise_variance)
    np.testing.assert_allclose(mode[[MU, LOG_TAU]], _closed_form(elements, spread), atol=1e-5)
    # the coordinates the rows depend on stay where the pool put them
    np.testing.assert_array_equal(np.delete(mode, [MU, LOG_TAU]), np.delete(theta, [MU, LOG_TAU]))
    # averaging over the elements' uncertainty widens tau against the plug-in conditional mode
    # (the elements' point estimates are less spread than the elements: the funnel's neck)
    plug_in = _closed_form(elements, 0.0)
    assert mode[LOG_TAU] > plug_in[1] + 0.05
    assert np.all(np.isfinite(curvature)) and np.all(np.linalg.eigvalsh(curvature) > 0)


def test_with_every_element_at_one_level_tau_stays_finite():
    """Elements not yet separated (``S = 0``): the plug-in conditional mode of ``log tau`` is at
    minus infinity, the expected prior's at ``tau^2 ~ V / (J - 1)``."""
    density = _density()
    elements = np.full(J, 1.4)
    theta = _theta(elements)
    mode, _, _ = groups.hyperparameters_at_expected_mode(
        density, _pool(theta, 0.02, 0.0), np.eye(theta.size), 1e-5,
        data_coordinates=np.isin(np.arange(theta.size), MEMBERS + [LOG_SIGMA]))
    np.testing.assert_allclose(mode[[MU, LOG_TAU]], _closed_form(elements, J * 0.02), atol=1e-5)
    assert abs(mode[LOG_TAU] - 0.5 * np.log(J * 0.02 / (J - 1))) < 0.01


def test_the_noise_reaches_mu_and_log_tau_through_the_elements():
    """The moved coordinates' noise covariance is ``L Sigma L'`` with ``L`` the derivative of the
    maximiser in the elements: checked against central differences of the closed form."""
    density = _density()
    elements = np.array([1.1, 1.6, 0.7, 1.3, 1.9, 1.2])
    theta = _theta(elements)
    pool = _pool(theta, 0.04, 0.01)
    _, noise_cov, _ = groups.hyperparameters_at_expected_mode(
        density, pool, np.eye(theta.size), 1e-5,
        data_coordinates=np.isin(np.arange(theta.size), MEMBERS + [LOG_SIGMA]))
    spread = J * 0.05
    link = np.empty((2, J))
    for j in range(J):
        e = np.zeros(J)
        e[j] = 1e-4
        link[:, j] = (_closed_form(elements + e, spread) - _closed_form(elements - e, spread)) / 2e-4
    sigma = pool.noise_cov[np.ix_(MEMBERS, MEMBERS)]
    # (the off-diagonal entry is ~1e-7 against diagonals of ~1e-3: held to 1e-6, the differences'
    # resolution)
    np.testing.assert_allclose(noise_cov[np.ix_([MU, LOG_TAU], [MU, LOG_TAU])], link @ sigma @ link.T,
                               rtol=2e-3, atol=1e-6)


def test_nothing_moves_without_a_declaration_or_where_rows_depend_on_it():
    density = _density()
    theta = _theta(np.array([1.1, 1.6, 0.7, 1.3, 1.9, 1.2]))
    pool = _pool(theta, 0.04, 0.01)
    rows = np.isin(np.arange(theta.size), MEMBERS + [LOG_SIGMA])
    everything = np.ones(theta.size, dtype=bool)
    out = groups.hyperparameters_at_expected_mode(density, pool, np.eye(theta.size), 1e-5, everything)
    assert out[0] is pool.mode and out[1] is pool.noise_cov and out[2] is pool.curvature
    del density.hierarchical_hyperparameters
    out = groups.hyperparameters_at_expected_mode(density, pool, np.eye(theta.size), 1e-5, rows)
    assert out[0] is pool.mode and out[1] is pool.noise_cov and out[2] is pool.curvature

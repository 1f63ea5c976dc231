"""A hierarchical location or scale that no row depends on is scaled by the exact prior.

The Newton rounds' initial frame holds a coordinate with no scale found (its released count of
depending rows within noise of 0) to the widest measured scale: rows may depend on it unseen.
A centred group's location and scale (``mu_a`` and ``sigma_a`` in ``a ~ normal(mu_a, sigma_a)``)
are read from the program; no row depends on them and their curvature is the prior's, exact and
public, so their initial scale is the prior's conditional sd
(:func:`stan_dp.adaptation.groups.hyperparameter_scale`).  Checked: the program reading, the
compiled model's mask, the scale against the closed form of a varying-intercept prior, and that
nothing else changes.
"""

from __future__ import annotations

import warnings

import numpy as np

import stan_dp
from stan_dp.adaptation import groups, newton
from stan_dp.adaptation.curvature import prior_neg_hessian
from stan_dp.adaptation.plan import AdaptationSettings
from stan_dp.stan_source import hierarchical_scales, hierarchical_statements
from densities import VaryingIntercept
from conftest import stan_test_model


def test_the_program_reading_gives_the_scale_after_the_location():
    program = """
    parameters { real mu; real<lower=0> tau; real nu; vector[4] a; vector[4] c; vector[4] e;
                 vector[4] f; real<lower=0> s; }
    model { a ~ normal(mu, tau); c ~ student_t(3, nu, s); e ~ normal(mu, 2.5); f ~ cauchy(nu, 2 * s); }
    """
    assert hierarchical_statements(program) == {"a": ("mu", "tau"), "c": ("nu", "s"), "e": ("mu", ""),
                                                "f": ("nu", "")}
    # a literal or an expression is no scale parameter
    assert hierarchical_scales(program) == {"a": "tau", "c": "s"}


def test_a_compiled_model_marks_its_group_s_location_and_scale(compiled):
    path = stan_test_model("hierarchical_intercept")
    rng = np.random.default_rng(0)
    data = {"N": 50, "J": 4, "g": rng.integers(1, 5, size=50), "y": rng.normal(size=50)}
    model = stan_dp.RowModel(compiled(path), data)
    names = model.param_names   # mu, tau, a.1 .. a.4, sigma
    members = tuple(j for j, n in enumerate(names) if n.startswith("a."))
    assert model.hierarchical_hyperparameters == ((members, (names.index("mu"), names.index("tau"))),)


def _varying(seed: int, n: int = 300) -> VaryingIntercept:
    rng = np.random.default_rng(seed)
    g = rng.integers(0, 6, n)
    density = VaryingIntercept(1.5 + 0.3 * rng.normal(size=6)[g] + rng.normal(size=n), g, 6)
    # the group a_1 .. a_6 and its location mu and scale's log, log tau
    density.hierarchical_hyperparameters = ((tuple(range(2, 8)), (0, 1)),)
    return density


def test_the_scale_is_the_prior_s_conditional_sd_from_the_closed_form():
    density = _varying(0)
    theta = np.array([0.4, np.log(0.7), 1.2, 1.9, 1.1, 1.6, 1.3, 2.0, 0.1])
    tau, s = 0.7, np.sum((theta[2:-1] - 0.4) ** 2)
    placeholder = np.full(density.dim, 0.05)
    at_floor = np.array([True, True, False, False, False, False, False, False, True])
    out = groups.hyperparameter_scale(density, theta, placeholder, at_floor, 1e-4)
    # log prior: -mu^2 / 2e4 - tau^2 / 200 + (1 - J) log tau - S exp(-2 log tau) / 2 - ...
    p_mu = 6 / tau**2 + 1e-4
    p_log_tau = 2 * tau**2 / 100 + 2 * s / tau**2
    np.testing.assert_allclose(out[:2], [1 / np.sqrt(p_mu), min(1.0, 1 / np.sqrt(p_log_tau))], rtol=1e-5)
    # every other coordinate keeps its scale, at the floor (log sigma here) or not
    np.testing.assert_array_equal(out[2:], placeholder[2:])
    # and so do the hyperparameters where some element of the group is at the floor (its rows
    # too few to scale it): the elements then stay at one level for many rounds, where the
    # prior's scale of log tau is a funnel's neck
    some = at_floor.copy()
    some[4] = True
    np.testing.assert_array_equal(groups.hyperparameter_scale(density, theta, placeholder, some, 1e-4),
                                  placeholder)
    # at most the floor's unit scale: at a point where every a_j equals mu (S = 0) the prior
    # barely curves in log tau
    flat = theta.copy()
    flat[2:-1] = flat[0]
    assert groups.hyperparameter_scale(density, flat, placeholder, at_floor, 1e-4)[1] == 1.0


def test_nothing_changes_without_declared_hyperparameters_or_off_the_floor():
    density = _varying(1)
    theta = np.zeros(density.dim)
    theta[2:-1] = 1.0
    scale = np.linspace(0.1, 0.9, density.dim)
    assert groups.hyperparameter_scale(density, theta, scale, np.zeros(density.dim, bool), 1e-4) is scale
    del density.hierarchical_hyperparameters
    assert groups.hyperparameter_scale(density, theta, scale, np.ones(density.dim, bool), 1e-4) is scale


def test_the_newton_rounds_start_with_it(monkeypatch):
    """The frame the rounds start in (``newton.private_mode``'s initial scale) holds the prior's sd
    for ``mu`` and ``log tau``: the same run without the declaration holds them to the widest
    measured scale, narrower, and every other column is the same (3,000 rows in 6 groups: every
    group effect has a scale of its own)."""
    density = _varying(2, 3000)
    frames = []
    real = newton._oriented_frame

    def spy(holder, theta, frame, *args, **kwargs):
        frames.append((theta.copy(), frame.copy()))
        return real(holder, theta, frame, *args, **kwargs)

    monkeypatch.setattr(newton, "_oriented_frame", spy)
    settings = AdaptationSettings(orient=True, rounds=2, far_rounds=0)
    for declared in (True, False):
        if not declared:
            del density.hierarchical_hyperparameters
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            stan_dp.sample(density, epsilon=16.0, delta=1e-5, seed=3, progress=False, chains=1, draws=20,
                           settings=settings)
    (theta, with_prior), (_, without) = frames
    p = np.diag(prior_neg_hessian(density, theta, np.eye(density.dim), 1e-4))
    np.testing.assert_allclose(np.diag(with_prior)[:2], np.minimum(1.0, 1 / np.sqrt(p[:2])), rtol=1e-3)
    assert np.all(np.diag(without)[:2] < np.diag(with_prior)[:2])
    np.testing.assert_array_equal(with_prior[:, 2:], without[:, 2:])

"""A centred group's location and scale, which no row depends on, start at the prior's scale.

The Newton rounds' initial frame holds a coordinate with no scale found (its released count of
depending rows within noise of 0) to the widest measured scale: rows may depend on it unseen.
A centred group's location and scale (``mu_a`` and ``log sigma_a`` in ``a ~ normal(mu_a,
sigma_a)``) are read from the program; no row depends on them, so where every element of the
group has a scale of its own they start at the prior's: the location at its conditional sd
``1 / sqrt(P_ll)``, ``log sigma_a`` at ``1 / sqrt(2 J)``, the Fisher information of ``log sigma``
in ``J`` normal draws (:func:`stan_dp.adaptation.groups.hyperparameter_scale`).  Checked: the
program reading, the compiled model's coordinates, both scales against closed forms and the
Fisher information against a Monte Carlo mean of the exact prior's curvature, that nothing else
changes, and that the rounds start with them.
"""

from __future__ import annotations

import warnings

import numpy as np

import stan_dp
from stan_dp.adaptation import groups, newton
from stan_dp.adaptation.curvature import prior_neg_hessian
from stan_dp.adaptation.plan import AdaptationSettings
from stan_dp.stan_source import HierarchicalStatement, hierarchical_locations, hierarchical_statements
from densities import BoundedVaryingIntercept, VaryingIntercept, ZeroMeanIntercept, radon_like_rows
from conftest import ROOT, stan_test_model, traced_adaptation

J = 6


def test_the_program_reading_gives_a_scale_on_the_log_or_a_bounded_logit_transform():
    program = """
    parameters { real mu; real<lower=0> tau; real nu; vector[4] a; vector[4] c; vector[4] e;
                 vector[4] f; vector[4] h; vector[4] k; real<lower=0> s; real<lower=1> w;
                 real<lower=0, upper=5> u; vector[4] m; real<lower=0, upper=2 * w> q; }
    model { a ~ normal(mu, tau); c ~ student_t(3, nu, s); e ~ normal(mu, 2.5); f ~ cauchy(nu, 2 * s);
            h ~ normal(nu, w); k ~ normal(mu, u); m ~ normal(nu, q); }
    """
    assert hierarchical_statements(program) == {
        "a": HierarchicalStatement("mu", "tau", "normal"),
        "c": HierarchicalStatement("nu", "s", "student_t"),
        # a literal, an expression, a shifted lower bound, an upper bound not a number: no scale
        "e": HierarchicalStatement("mu", "", "normal"),
        "f": HierarchicalStatement("nu", "", "cauchy"),
        "h": HierarchicalStatement("nu", "", "normal"),
        "m": HierarchicalStatement("nu", "", "normal"),
        # the BUGS idiom: on logit(u / 5)
        "k": HierarchicalStatement("mu", "u", "normal", 5.0),
    }
    assert hierarchical_locations(program) == {"a": "mu", "c": "nu", "e": "mu", "f": "nu", "h": "nu",
                                               "k": "mu", "m": "nu"}


def test_the_program_reading_gives_a_zero_mean_group_s_scale():
    """``hierarchical_statements(program, literal=True)``: the statements whose location is a
    number and whose scale is a parameter on the log or a bounded logit transform (rstanarm's
    ``u ~ normal(0, sigma_u)``), without a location; not a centred one, not a literal scale."""
    program = """
    parameters { real mu; real<lower=0> s; real<lower=0, upper=100> t; vector[4] a; vector[4] b;
                 vector[4] c; vector[4] e; real x; }
    model { a ~ normal(0, s); b ~ normal(-1.5, t); c ~ normal(mu, s); e ~ normal(0, 2); x ~ normal(0, s); }
    """
    assert hierarchical_statements(program, literal=True) == {
        "a": HierarchicalStatement("", "s", "normal"),
        "b": HierarchicalStatement("", "t", "normal", 100.0),
    }
    assert set(hierarchical_statements(program)) == {"c"}   # a number is no location parameter


def test_a_compiled_model_gives_its_group_s_location_and_log_scale(compiled):
    path = stan_test_model("hierarchical_intercept")
    rng = np.random.default_rng(0)
    data = {"N": 50, "J": 4, "g": rng.integers(1, 5, size=50), "y": rng.normal(size=50)}
    model = stan_dp.RowModel(compiled(path), data)
    names = model.param_names   # mu, tau, a.1 .. a.4, sigma
    members = tuple(j for j, n in enumerate(names) if n.startswith("a."))
    assert model.hierarchical_hyperparameters == ((members, (names.index("mu"),), (names.index("tau"),)),)
    assert model.hierarchical_scale_uppers == {}
    bounded = stan_dp.RowModel(compiled(stan_test_model("hierarchical_bounded")), data)
    assert bounded.hierarchical_hyperparameters == model.hierarchical_hyperparameters   # same layout
    assert bounded.hierarchical_scale_uppers == {names.index("tau"): 100.0}
    assert model.zero_mean_hyperparameters == bounded.zero_mean_hyperparameters == ()
    zero = stan_dp.RowModel(compiled(stan_test_model("zero_mean_groups")), data)   # the same layout too
    assert zero.hierarchical_hyperparameters == () and zero.hierarchical_coordinates == ()
    assert zero.zero_mean_hyperparameters == ((members, (), (names.index("tau"),)),)
    assert zero.hierarchical_scale_uppers == {names.index("tau"): 100.0}


def _varying(seed: int, n: int = 300) -> VaryingIntercept:
    rng = np.random.default_rng(seed)
    g = rng.integers(0, J, n)
    density = VaryingIntercept(1.5 + 0.3 * rng.normal(size=J)[g] + rng.normal(size=n), g, J)
    # the group a_1 .. a_J, its location mu and its scale's log, log tau
    density.hierarchical_hyperparameters = ((tuple(range(2, 2 + J)), (0,), (1,)),)
    return density


def test_the_scales_against_their_closed_forms():
    density = _varying(0)
    theta = np.array([0.4, np.log(0.7), 1.2, 1.9, 1.1, 1.6, 1.3, 2.0, 0.1])
    tau = 0.7
    placeholder = np.full(density.dim, 0.05)
    at_floor = np.array([True, True, False, False, False, False, False, False, True])
    out = groups.hyperparameter_scale(density, theta, placeholder, at_floor, 1e-4)
    # mu: the prior's conditional sd, J / tau^2 from the group and 1e-4 from mu ~ normal(0, 100);
    # log tau: the Fisher information 2 J, whatever the elements' spread
    np.testing.assert_allclose(out[:2], [1 / np.sqrt(J / tau**2 + 1e-4), 1 / np.sqrt(2 * J)], rtol=1e-5)
    # every other coordinate keeps its scale, at the floor (log sigma here) or not
    np.testing.assert_array_equal(out[2:], placeholder[2:])
    # where the elements have not separated (S = 0) log tau's scale is the same: the observed
    # curvature 2 S / tau^2 would vanish there (the funnel's neck)
    flat = theta.copy()
    flat[2:-1] = flat[0]
    assert groups.hyperparameter_scale(density, flat, placeholder, at_floor, 1e-4)[1] == 1 / np.sqrt(2 * J)
    # at most the floor's unit scale: a wide tau makes mu's prior sd wide
    wide = theta.copy()
    wide[1] = np.log(50.0)
    assert groups.hyperparameter_scale(density, wide, placeholder, at_floor, 1e-4)[0] == 1.0
    # nothing where some element of the group is at the floor (its rows too few to scale it):
    # the elements then stay at one level for many rounds
    some = at_floor.copy()
    some[4] = True
    np.testing.assert_array_equal(groups.hyperparameter_scale(density, theta, placeholder, some, 1e-4),
                                  placeholder)


def test_the_fisher_information_of_log_tau_is_2j_by_monte_carlo():
    """The exact prior's curvature in ``log tau`` less the half-normal prior's own part, averaged
    over 4,000 draws ``a_j ~ normal(mu, tau)``: its mean is ``2 J`` within 4 Monte Carlo sds (per
    draw it is ``2 S / tau^2``, ``2 chi2_J``, sd ``2 sqrt(2 J)``)."""
    density = _varying(4)
    rng = np.random.default_rng(5)
    mu, tau, draws = 0.3, 1.7, 4000
    curvature = np.empty(draws)
    for k in range(draws):
        theta = np.concatenate([[mu, np.log(tau)], mu + tau * rng.normal(size=J), [0.0]])
        p = prior_neg_hessian(density, theta, np.eye(density.dim), 1e-4)[1, 1]
        curvature[k] = p - 2.0 * (tau / 10.0) ** 2   # tau ~ normal+(0, 10) in log tau
    se = 2.0 * np.sqrt(2.0 * J) / np.sqrt(draws)
    assert abs(curvature.mean() - 2.0 * J) < 4.0 * se


def test_nothing_changes_without_declared_hyperparameters_or_off_the_floor():
    density = _varying(1)
    theta = np.zeros(density.dim)
    theta[2:-1] = 1.0
    scale = np.linspace(0.1, 0.9, density.dim)
    assert groups.hyperparameter_scale(density, theta, scale, np.zeros(density.dim, bool), 1e-4) is scale
    del density.hierarchical_hyperparameters
    assert groups.hyperparameter_scale(density, theta, scale, np.ones(density.dim, bool), 1e-4) is scale


def test_the_newton_rounds_start_with_it(monkeypatch):
    """The frame the rounds start in (``newton.private_mode``'s initial scale) holds the prior's
    scales for ``mu`` and ``log tau``: the same run without the declaration holds them to the
    widest measured scale, narrower, and every other column is the same (3,000 rows in 6 groups:
    every group effect has a scale of its own)."""
    density = _varying(2, 3000)
    frames = []
    real = newton._oriented_frame

    def spy(holder, theta, frame, *args, **kwargs):
        frames.append((theta.copy(), frame.copy()))
        return real(holder, theta, frame, *args, **kwargs)

    monkeypatch.setattr(newton, "_oriented_frame", spy)
    settings = AdaptationSettings(orient=True, rounds=2, far_rounds=0)
    fits = []
    for declared in (True, False):
        if not declared:
            del density.hierarchical_hyperparameters
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fits.append(stan_dp.sample(density, epsilon=16.0, delta=1e-5, seed=3, progress=False, chains=1,
                                       draws=20, settings=settings))
    # no release added: the same releases at the same noise, the same budget spent
    assert fits[0].attrs["release_summary"] == fits[1].attrs["release_summary"]
    assert fits[0].attrs["epsilon_spent"] == fits[1].attrs["epsilon_spent"]
    (theta, with_prior), (_, without) = frames
    p = prior_neg_hessian(density, theta, np.eye(density.dim), 1e-4)[0, 0]
    np.testing.assert_allclose(np.diag(with_prior)[:2], [min(1.0, 1 / np.sqrt(p)), 1 / np.sqrt(2 * J)],
                               rtol=1e-3)
    assert np.all(np.diag(without)[:2] < np.diag(with_prior)[:2])
    np.testing.assert_array_equal(with_prior[:, 2:], without[:, 2:])


def _bounded(seed: int = 0) -> BoundedVaryingIntercept:
    """1,000 rows in 20 groups (means 1.5 +- 0.3, sigma 0.75), both scales on ``(0, 100)``."""
    return BoundedVaryingIntercept(*radon_like_rows(seed), 20)


def test_a_bounded_scale_s_coordinate_and_expected_prior_against_finite_differences():
    """``log tau`` and its slope on ``u = logit(tau / 100)`` (``groups.scale_coordinate``) against
    the closed form and a central difference; the expected prior's ``- V / (2 tau^2)`` and its
    gradient against the exact prior plus that term, by central differences."""
    density = _bounded()
    for u in (-6.0, 0.0, 3.0):
        log_tau, slope = groups.scale_coordinate(density, 1, u)
        log_at = lambda x: np.log(100.0 / (1.0 + np.exp(-x)))
        assert np.isclose(log_tau, log_at(u), rtol=0, atol=1e-12)
        assert np.isclose(slope, (log_at(u + 1e-6) - log_at(u - 1e-6)) / 2e-6, rtol=1e-6)
    assert groups.scale_coordinate(density, 0, 0.3) == (0.3, 1.0)   # not a bounded scale: log sigma
    v = 0.37
    prior = groups.ExpectedGroupPrior(density, [(1, v)])
    theta = np.r_[1.4, -4.0, np.linspace(1.0, 2.0, 20), -5.0]

    def expected(t: np.ndarray) -> float:
        return density.log_prior(t) - v / (2.0 * (100.0 / (1.0 + np.exp(-t[1]))) ** 2)

    value, grad = prior.log_prior_grad(theta)
    assert np.isclose(value, expected(theta))
    fd = [(expected(theta + h) - expected(theta - h)) / 2e-6 for h in 1e-6 * np.eye(theta.size)]
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-6)


def test_a_bounded_scale_moves_to_the_maximum_of_its_expected_prior():
    """From its start ``tau = 50`` (``u = 0``, where the prior is convex along ``u``), the bounded
    search of ``groups._bounded_scale_mode`` lands on the maximum of the expected log prior over a
    fine grid of ``u`` (the other coordinates fixed)."""
    density = _bounded()
    theta = np.r_[1.5, 0.0, 1.5 + 0.3 * np.random.default_rng(1).normal(size=20), -4.9]
    prior = groups.ExpectedGroupPrior(density, [(1, 0.05)])
    found = groups._bounded_scale_mode(prior, theta, 1)
    grid = np.linspace(-12.0, 5.0, 170_001)
    values = [prior.log_prior(np.r_[theta[:1], x, theta[2:]]) for x in grid]
    assert abs(found - grid[int(np.argmax(values))]) < 2e-4
    assert -7.0 < found < -4.0   # tau near the elements' spread (0.3), not 50


def test_a_bounded_group_scale_comes_down_from_its_start():
    """Gelman and Hill's radon model as its BUGS code writes it (``BoundedVaryingIntercept``: both
    scales uniform on (0, 100), 1,000 rows in 20 groups), the private mode against the exact joint
    mode in its Laplace sds, noise seeds 1-3.  With the bounded scale read as the group's scale the
    worst coordinate is 1.4-2.2 sds off at epsilon = 16 (2.7-3.7 at epsilon = 4; measured over
    seeds 1-6); without (the program reading before session 80: the scale not the group's) ``tau``
    stays near its start, 50, about 31 sds off in every run."""
    density = _bounded()
    mode, cov = density.exact()
    sd = np.sqrt(np.diag(cov))

    def worst() -> list[float]:
        return [float(np.max(np.abs((traced_adaptation(density, 16.0, seed)[1].result.mode - mode) / sd)))
                for seed in (1, 2, 3)]

    assert max(worst()) < 4.0
    density.hierarchical_hyperparameters = ((density.hierarchical_hyperparameters[0][0], (0,), ()),)
    density.hierarchical_scale_uppers = {}
    assert min(worst()) > 25.0


def test_a_search_without_a_pool_moves_a_bounded_scale_only_with_a_finite_estimate():
    """``groups.unpooled_bounded_scales`` (the last round's estimate where fewer than two rounds
    pooled): the bounded group scale goes to the expected prior's maximum with that round's
    variance (the same as ``bounded_scales_at_expected_mode``), every other coordinate stays;
    with the infinite noise of a search whose every round stepped back nothing moves; a log scale
    (the same group without the declared upper bound) stays."""
    density = _bounded()
    d = density.dim
    mode = np.r_[1.5, 0.0, 1.5 + 0.3 * np.random.default_rng(2).normal(size=20), -4.9]
    curvature, noise = np.eye(d) * 400.0, np.eye(d) * 1e-3
    rows = np.zeros(d, dtype=bool)
    rows[2:] = True   # the elements and sigma: rows depend on them
    moved = groups.unpooled_bounded_scales(density, mode, curvature, noise, rows)
    v = 20 * (1.0 / 400.0 + 1e-3)
    expected = groups._bounded_scale_mode(groups.ExpectedGroupPrior(density, [(1, v)]), mode, 1)
    assert np.isclose(moved[1], expected) and moved[1] < -4.0
    np.testing.assert_array_equal(np.delete(moved, 1), np.delete(mode, 1))
    stuck = groups.unpooled_bounded_scales(density, mode, curvature, np.diag(np.full(d, np.inf)), rows)
    np.testing.assert_array_equal(stuck, mode)
    density.hierarchical_scale_uppers = {}
    np.testing.assert_array_equal(groups.unpooled_bounded_scales(density, mode, curvature, noise, rows), mode)


def test_a_zero_mean_group_s_scale_comes_down_where_the_search_is_unsettled():
    """Random intercepts written ``a ~ normal(0, tau)`` with ``mu`` in the likelihood
    (``ZeroMeanIntercept``, the same 1,000 rows; every run here ends unsettled), noise seeds 2-4,
    epsilon = 16, against the exact joint mode in its Laplace sds.  Declared
    (``zero_mean_hyperparameters``), the pooled rounds and the unsettled search's expected-prior
    step move ``tau``: with ``tau`` on ``(0, 100)`` the worst coordinate is 1.2-1.5 off (0.97-1.5
    over seeds 1-6, 2.6-9.0 at epsilon = 4), with ``real<lower=0> tau`` 1.4-1.5 (1.2-1.9;
    1.7-2.6); undeclared, ``tau`` stays near where it started: about 31 on (0, 100) (near 50),
    6.1-6.4 on the log transform.  (Before the replica declared its vector an index group, as a
    compiled model reads ``a[g]``, the declared runs were 1.4-4.2 off.)"""
    y, g = radon_like_rows(0)
    for bounded, before in ((True, 25.0), (False, 5.0)):
        density = ZeroMeanIntercept(y, g, 20, bounded=bounded)
        mode, cov = density.exact()
        sd = np.sqrt(np.diag(cov))

        def worst() -> list[float]:
            return [float(np.max(np.abs((traced_adaptation(density, 16.0, seed)[1].result.mode - mode) / sd)))
                    for seed in (2, 3, 4)]

        assert max(worst()) < 2.5, bounded
        density.zero_mean_hyperparameters = ()
        assert min(worst()) > before, bounded


def test_a_glmm_as_a_user_wrote_it_settles_with_an_expected_prior_step_each_pooled_round():
    """``benchmarks/user_programs/glmmre`` (a user's program and data, read as files: 2,000
    pass/fail rows, ``b ~ normal(0, sigma_b)`` over 20 schools, ``sigma_b`` uniform on (0, 10),
    ``pass ~ bernoulli_logit(alpha + beta * hours + b[school])``), epsilon = 16, noise seeds 1-4,
    against NUTS (``reference_fit``).  No row depends on ``sigma_b``, which starts at 5, 13
    posterior sds above; the pooled rounds' one-step estimates divide by the noise floor and move
    it 0.3-1 sds a round.  With the expected prior's mode taken for it in every pooled round every
    search settles and the fits' worst means are 0.51-0.95 sds off; with the step at the end only,
    1 of the 4 settled and they were 0.86-2.16 off (``sigma_b`` above the posterior, unsettled)."""
    import json

    program = ROOT / "benchmarks" / "user_programs"
    path, data = program / "glmmre.stan", json.loads((program / "glmmre.json").read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = stan_dp.reference_fit(path, data, seed=1)
    model = stan_dp.RowModel(path, data)
    worst, settled = [], []
    for seed in (1, 2, 3, 4):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = stan_dp.sample(model, epsilon=16.0, delta=1e-5, seed=seed, progress=False)
        worst.append(stan_dp.compare(fit, reference).headline()["worst_std_mean_error"])
        settled.append(bool(fit.attrs["search_settled"]))
    assert all(settled), settled
    assert max(worst) < 1.2, worst

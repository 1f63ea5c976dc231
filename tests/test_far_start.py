"""A search that starts far from the posterior says which parameters it was still walking along.

The default start is zeros unconstrained: a positive parameter at 1.  For a
normal model of data on the scale of 100 ± 18 that is a scale parameter 18
times too small.  The far phase (:mod:`stan_dp.adaptation.far`) gets there;
without it (``far_rounds=0``), at small budgets, the Newton rounds run out
before the search does (σ stays near 1).  A run that ends like that warns,
names the parameters it was still moving along (from the released path:
post-processing), and says that a data-independent ``init=`` on the expected
scale helps; a partial ``init`` dict sets just that parameter.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import stan_dp
from stan_dp.adaptation import AdaptationSettings
from stan_dp.honesty import MOVING_SDS, MOVING_WINDOW, PULL_SDS, moving_coordinates, pulled_coordinates
from stan_dp.inference import resolve_init
from conftest import bundled
import densities
from densities import NormalMeanScale


def test_moving_coordinates_flags_one_way_walks_beyond_the_spread_only():
    sd = np.array([1.0, 1.0, 1.0, 1.0])
    steps = np.array([
        [0.0, 0.0, 0.0, 0.0],
        [5.0, 2.0, 0.5, 1.2],    # 0: far, one way; 1: one way then back; 2: one way, short;
        [9.0, 4.0, 1.0, 2.4],    # 3: one way, just beyond MOVING_SDS in all
        [14.0, 1.0, 1.5, 3.0],
        [20.0, 5.0, 2.0, MOVING_SDS + 1.2 + 0.01],
    ])
    flags = moving_coordinates(steps, sd)
    assert flags.tolist() == [True, False, False, True]
    # the reported spread sets the scale: the same walk with a wide spread is not flagged
    assert not moving_coordinates(steps, sd * 100).any()
    # a downhill walk counts the same; a standing coordinate never does
    assert moving_coordinates(-steps, sd).tolist() == [True, False, False, True]
    assert not moving_coordinates(np.zeros((5, 2)), np.ones(2)).any()
    # too short a path to judge
    assert not moving_coordinates(steps[:3], sd).any()


def test_pulled_coordinates_flags_a_gradient_beyond_its_noise_the_same_way_in_the_last_rounds():
    z = np.array([
        [9.0, 9.0, 9.0, 0.0, 9.0],
        [4.0, 4.0, -4.0, 4.0, PULL_SDS + 0.01],   # 0: up in all; 1: up, then one round within
        [5.0, PULL_SDS - 0.01, -5.0, 5.0, 4.0],   # 2: down in all three; 3: up in all three
        [6.0, 6.0, -6.0, 6.0, -4.0],              # 4: up, up, then down
    ])
    assert pulled_coordinates(z).tolist() == [True, False, True, True, False]
    assert MOVING_WINDOW == 3   # the window the rows above are written for
    assert not pulled_coordinates(z[:2]).any() and pulled_coordinates(z[:2]).shape == (5,)   # too short
    assert pulled_coordinates(None).shape == (0,)
    # at the mode the released gradient is noise: 100,000 coordinates of 3 standard-normal rounds
    noise = np.random.default_rng(0).normal(size=(3, 100_000))
    assert not pulled_coordinates(noise).any()   # chance ~ 2 Phi(-3)^3 = 5e-9 each


def test_a_stalled_search_names_what_its_gradient_still_pulls():
    """Without the far phase, with the Newton rounds' gain cap, the search stalls near sigma = 1
    (its steps short and stepped back, no three-round walk one way for ``still_moving``), but its
    released gradient still points up along sigma, 5 noise sds and more in every round: the run
    names it (``attrs["still_pulled"]``, and the warning), while the settled default names none."""
    model = _far()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        default = stan_dp.sample(model, epsilon=4.0, delta=1e-5, seed=1, progress=False, draws=200)
    assert default.attrs["search_settled"] and default.attrs["still_pulled"] == ""
    for seed in (1, 3):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fit = stan_dp.sample(model, epsilon=4.0, delta=1e-5, seed=seed, progress=False, draws=200,
                                 settings=AdaptationSettings(far_rounds=0))
        assert not fit.attrs["search_settled"] and fit.attrs["still_moving"] == ""
        assert "sigma (up)" in fit.attrs["still_pulled"].split("; ")
        assert np.log(fit.posterior["sigma"].values.mean()) < 0.5   # stalled: log(18) = 2.9 is far
        text = " ".join(str(w.message) for w in caught if issubclass(w.category, stan_dp.UtilityWarning))
        assert "still pulled it one way along" in text and "sigma (up)" in text


def _far(n: int = 500) -> NormalMeanScale:
    return NormalMeanScale(np.random.default_rng(0).normal(100.0, 18.0, n))


def test_a_scale_started_far_below_is_reached_and_named_when_the_far_phase_is_off():
    model = _far()
    ref = model.reference()
    # the default (with the far phase, stan_dp.adaptation.far) gets there from sigma = 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        default = stan_dp.sample(model, epsilon=4.0, delta=1e-5, seed=1, progress=False, draws=2000)
    assert default.attrs["search_settled"] and default.attrs["still_moving"] == ""
    tau = np.log(default.posterior["sigma"].values.ravel())
    assert abs(tau.mean() - ref["tau"][0]) < 5.0 * ref["tau"][1]
    # the Newton rounds alone (far_rounds=0) do not: the run says so and names sigma.  Without
    # their gain cap (step_gain, tests/test_step_gain.py) they walk sigma up a little every round;
    # capped, they stall near 1 without a three-round walk one way (warned as unsettled only)
    alone = AdaptationSettings(far_rounds=0, step_gain=math.inf)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = stan_dp.sample(model, epsilon=4.0, delta=1e-5, seed=1, progress=False, draws=200,
                             settings=alone)
    assert not fit.attrs["search_settled"] and not fit.attrs["mixed"]
    moving = fit.attrs["still_moving"]
    assert moving.startswith("sigma "), moving
    values = [float(v) for v in moving.split(" ", 1)[1].split(" -> ")]
    assert len(values) == 4 and all(b > a for a, b in zip(values, values[1:])) and values[-1] < 2.0
    text = " ".join(str(w.message) for w in caught if issubclass(w.category, stan_dp.UtilityWarning))
    assert "still walking one way" in text and "sigma" in text and "init=" in text
    tau_far = np.log(fit.posterior["sigma"].values.ravel())
    assert abs(tau_far.mean() - ref["tau"][0]) > 50.0 * ref["tau"][1]
    # the hint works there too: sigma started at 20 (public, not from the data) settles.  What is
    # left on log sigma is its clipping bias at n = 500 (the r^2 - 1 gradients are skewed): 0.55,
    # 2.1 and 3.6 posterior sds in seeds 1-3, against 91, 95 and 69 from the default start
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        good = stan_dp.sample(model, epsilon=4.0, delta=1e-5, seed=1, progress=False, draws=2000,
                              init=np.array([0.0, np.log(20.0)]), settings=alone)
    assert good.attrs["search_settled"] and good.attrs["still_moving"] == ""
    tau = np.log(good.posterior["sigma"].values.ravel())
    assert abs(tau.mean() - ref["tau"][0]) < 5.0 * ref["tau"][1]


class _Named:
    """A two-parameter model with constrained names: ``mu`` (real) and ``sigma`` (positive)."""

    dim = 2
    param_shapes = {"mu": (), "sigma": ()}

    def log_prior(self, theta):
        return float(-0.5 * np.sum(np.asarray(theta) ** 2))

    def constrain(self, theta):
        return {"mu": np.asarray(theta[0]), "sigma": np.asarray(np.exp(theta[1]))}

    def unconstrain(self, values):
        missing = [k for k in self.param_shapes if k not in values]
        if missing:
            raise ValueError(f"missing parameters: {missing}")
        return np.array([float(values["mu"]), float(np.log(values["sigma"]))])


def test_a_partial_init_dict_fills_the_rest_with_the_default_start_and_refuses_unknown_names():
    model = _Named()
    start = resolve_init(model, {"sigma": 20.0}, 2)
    np.testing.assert_allclose(start, [[0.0, np.log(20.0)], [0.0, np.log(20.0)]])
    np.testing.assert_allclose(resolve_init(model, {"mu": 3.0, "sigma": 1.0}, 1), [[3.0, 0.0]])
    with pytest.raises(ValueError, match="sgima"):
        resolve_init(model, {"sgima": 20.0}, 1)


class _StanNamed:
    """BridgeStan-style flattened names (``beta.1``) for ``vector[2] beta; real<lower=0> sigma``."""

    dim = 3
    param_names = ["beta.1", "beta.2", "sigma"]

    def constrain(self, theta):
        return {"beta": np.asarray(theta[:2]), "sigma": np.asarray(np.exp(theta[2]))}


def test_moving_parameters_are_named_as_stan_writes_them_with_constrained_values():
    from stan_dp.auto import _moving_parameters

    path = np.array([[0.0, 0.0, 0.0], [1.0, 0.1, 0.5], [2.0, -0.1, 1.0], [3.0, 0.1, 1.5], [4.0, 0.0, 2.0]])
    flags = moving_coordinates(path, np.array([0.1, 0.1, 0.1]))
    out = _moving_parameters(_StanNamed(), path, flags)
    assert out == ["beta[1] 1 -> 2 -> 3 -> 4",
                   "sigma " + " -> ".join(f"{v:.4g}" for v in np.exp([0.5, 1.0, 1.5, 2.0]))]
    # without names that line up with the coordinates, the unconstrained values are given
    unnamed = type("U", (), {"dim": 3, "param_names": ["beta.1"], "constrain": _StanNamed.constrain})()
    assert _moving_parameters(unnamed, path, flags)[1] == \
        "unconstrained coordinate 3 0.5 -> 1 -> 1.5 -> 2"


def _rare_events(n: int = 3000, prior_scale: float | None = 2.5) -> dict:
    """The bundled logistic regression's data with 5 % events (intercept -3); without
    ``prior_scale`` for ``tests/stan/logistic_flat.stan`` (flat priors)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 3))
    y = rng.binomial(1, 1 / (1 + np.exp(-(-3.0 + x @ np.array([0.5, -0.3, 0.2])))))
    data = {"N": n, "D": 3, "X": x, "y": y.astype(int)}
    return data if prior_scale is None else data | {"prior_scale": prior_scale}


def _map_and_sd(data: dict) -> tuple[np.ndarray, np.ndarray]:
    """Exact MAP of the logistic regression (Newton on the log posterior; normal(0, prior_scale)
    priors, flat where ``data`` has no ``prior_scale``: the maximum likelihood) and the sds of the
    Laplace approximation there: an independent oracle for the intercept."""
    x = np.column_stack([np.ones(data["N"]), data["X"]])
    y, precision = np.asarray(data["y"], float), data.get("prior_scale", math.inf) ** -2.0
    theta = np.zeros(x.shape[1])
    for _ in range(50):
        p = 1 / (1 + np.exp(-(x @ theta)))
        hess = x.T @ (x * (p * (1 - p))[:, None]) + np.eye(x.shape[1]) * precision
        theta = theta + np.linalg.solve(hess, x.T @ (y - p) - theta * precision)
    return theta, np.sqrt(np.diag(np.linalg.inv(hess)))


def test_a_rare_outcome_no_longer_sends_the_far_phase_past_the_mode(compiled, monkeypatch):
    """5 % events, 3,000 rows, epsilon = 16.  The far phase's vote counts directions (each row's
    gradient clipped at the median of |g|): the many non-events all say "lower the intercept" at
    the start, at the mode and past it.  Its doubled second move took the intercept from about -3.4
    to -10 (the mode is -3.07, sd 0.09), where the rows' curvature vanishes and the Newton rounds do
    not get back; the median of |g| fell 800-fold on that move while the rows still agreed, and the
    phase now takes such a move back (``far.COLLAPSE_OCTAVES``): the same seed settles within 3 sds
    of the exact MAP.  Without the rule the run ended unsettled, alpha about +8 (some 120 sds off),
    pulled up along alpha, and its warning names the far phase's move and --far-phase off — the
    hint that stays for what the rule does not catch (docs/adaptation.md §7, "Imbalanced binary
    outcomes").  Since the Newton rounds keep the raised clip bound out of the pool
    (``newton._median_bound_factor``) the run without the rule comes back too (1.2 sds, settled),
    so the counterfactual lifts both.  The counterfactuals keep the curvature tail rule to its
    upward gate (``raise_curvature_tail=False`` here, where it did not fire): since session 71 it
    also raises where affordable, and the run without the collapse rule then raised the curvature
    bound 8-fold, did not settle and ended 3.2 sds off (warned), which is not what these parts
    measure."""
    data = _rare_events()
    model = stan_dp.RowModel(compiled(bundled("logistic_regression")), data)
    mode, sd = _map_and_sd(data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = stan_dp.sample(model, epsilon=16.0, delta=1e-5, seed=1, progress=False, draws=200)
    assert fit.attrs["search_settled"] and abs(fit.posterior["alpha"].values.mean() - mode[0]) < 3 * sd[0]

    import stan_dp.adaptation.far as far
    import stan_dp.adaptation.newton as newton
    monkeypatch.setattr(far, "COLLAPSE_OCTAVES", math.inf)   # the phase without the rule
    upward_only = AdaptationSettings(raise_curvature_tail=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = stan_dp.sample(model, epsilon=16.0, delta=1e-5, seed=1, progress=False, draws=200,
                             settings=upward_only)
    assert fit.attrs["search_settled"] and abs(fit.posterior["alpha"].values.mean() - mode[0]) < 3 * sd[0]
    # and the rounds as they were: back at the public bound whenever they leave the pool
    monkeypatch.setattr(newton, "_median_bound_factor", lambda median, raised, kappa: max(1.0, kappa * median))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = stan_dp.sample(model, epsilon=16.0, delta=1e-5, seed=1, progress=False, draws=200,
                             settings=upward_only)
    text = " ".join(str(w.message) for w in caught if issubclass(w.category, stan_dp.UtilityWarning))
    assert "the far phase had first moved alpha the other way" in text and "--far-phase off" in text
    assert "alpha (up)" in fit.attrs["still_pulled"] and not fit.attrs["search_settled"]
    assert abs(fit.posterior["alpha"].values.mean() - mode[0]) > 10 * sd[0]   # the miss it is for
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        off = stan_dp.sample(model, epsilon=16.0, delta=1e-5, seed=1, progress=False, draws=200,
                             settings=AdaptationSettings(far_rounds=0))
    assert off.attrs["search_settled"] and "far vote" not in off.attrs["release_summary"]
    assert abs(off.posterior["alpha"].values.mean() - mode[0]) < 3 * sd[0]


def test_a_size_where_the_search_cannot_travel_says_so_before_the_data():
    """Where the plan has no far phase and cannot raise the Newton rounds' bounds
    (``plan.far_start_blind``: public, ``n``, ``dim``, epsilon), the run warns from public facts that
    only a start near the posterior is refined: 40 rows of 12 +- 0.5 at epsilon = 16 (the battery
    there: none of 216 searches settled, median 5 sds off).  From the default start (``sigma`` at 1)
    this model ends 9.7-10.2 posterior sds off in ``log sigma`` (seeds 1-3; ``mu`` 1.3-72), from the
    exact posterior mode within 1.03.  At 500 rows the far phase runs and nothing of the kind is
    said.  Oracles: the exact posterior of the NumPy density (grid), and a stand-in for the rows
    that raises when they are read."""
    from stan_dp.adaptation.plan import far_start_blind
    from stan_dp.auto import _adaptation_plan

    for eps, n, blind in ((16.0, 40, True), (4.0, 100, True), (1.0, 434, True), (16.0, 100, False),
                          (4.0, 500, False), (1.0, 1000, False)):
        plan, pld_mean, _ = _adaptation_plan(eps, 1e-5, 1.0, AdaptationSettings(), n, 2)
        assert far_start_blind(plan, n, pld_mean) is blind, (eps, n)

    model = NormalMeanScale(np.random.default_rng(0).normal(12.0, 0.5, 40))
    ref = model.reference()

    def fit(init=None):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = stan_dp.sample(model, epsilon=16.0, delta=1e-5, seed=1, progress=False, draws=500,
                                 init=init)
        return out, [str(w.message) for w in caught if issubclass(w.category, stan_dp.UtilityWarning)]

    default, texts = fit()
    blind_text = [t for t in texts if "can only refine a start already near the posterior" in t]
    assert len(blind_text) == 1 and "init=" in blind_text[0]
    assert blind_text[0] in default.attrs["warnings"]
    tau = np.log(default.posterior["sigma"].values.ravel())
    assert abs(tau.mean() - ref["tau"][0]) > 5.0 * ref["tau"][1]   # the default start is not reached
    # the warning is made from public facts: before any row is read (a stand-in that raises
    # DataTouched on any row access would have raised that instead)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.filterwarnings("error", message="at this size", category=stan_dp.UtilityWarning)
        with pytest.raises(stan_dp.UtilityWarning, match="can only refine"):
            stan_dp.sample(densities.Untouchable(model), epsilon=16.0, delta=1e-5, seed=1,
                           progress=False, draws=20)
    with warnings.catch_warnings(), pytest.raises(densities.DataTouched):   # it reads them after
        warnings.simplefilter("ignore")
        stan_dp.sample(densities.Untouchable(model), epsilon=16.0, delta=1e-5, seed=1, progress=False,
                       draws=20)
    near, _ = fit(init=np.array([ref["mu"][0], ref["tau"][0]]))
    for name, values in (("mu", near.posterior["mu"].values), ("tau", np.log(near.posterior["sigma"].values))):
        assert abs(values.mean() - ref[name][0]) < 3.0 * ref[name][1], name
    wide = NormalMeanScale(np.random.default_rng(0).normal(12.0, 0.5, 500))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stan_dp.sample(wide, epsilon=16.0, delta=1e-5, seed=1, progress=False, draws=20)
    assert not [w for w in caught if "can only refine" in str(w.message)]

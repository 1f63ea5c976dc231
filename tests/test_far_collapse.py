"""The far phase takes back a move after which most rows' gradients collapsed while they still agree.

Where most rows sit at one value (a binary outcome far from 50 %), the far
phase's median-clipped vote counts them and not the few rows that pull back
hard, so it says "further" at the mode and beyond; its doubled steps then
walk into the region where the many rows' gradients vanish.  Such a move
shrinks the released median of ``|g|`` many-fold while the rows' vote still
passes the gate the same way: the phase takes it back and holds the
coordinate (:data:`stan_dp.adaptation.far.COLLAPSE_OCTAVES`).  A scale
parameter rising from far below its mode shrinks its median the same way, so
log-transformed and logit-transformed coordinates (read from the program) are exempt, and so is every coordinate
of a density that does not say which are (a NumPy density).  Each test
sets the rule against the same run without it (docs/adaptation.md §7,
"Imbalanced binary outcomes").
"""

from __future__ import annotations

import math

import numpy as np

import stan_dp
import stan_dp.adaptation.far as far
from conftest import bundled, stan_test_model, traced_adaptation
from test_far_start import _map_and_sd, _rare_events


def _far_rounds(model, epsilon: float, seed: int):
    """The far phase's rounds and the adaptation's result, as ``sample`` runs them."""
    trace, adapted = traced_adaptation(model, epsilon, seed)
    return [t for t in trace if t.get("far")], adapted


def test_a_doubled_move_into_saturated_rows_is_taken_back(compiled, monkeypatch):
    """Flat priors, 5 % events, 1,000 rows, epsilon = 16.  The first move takes the intercept from 0
    to about -2.6 (the MLE is -3.12, sd 0.17); the doubled second move to -7.8, where the median of
    ``|y - p|`` is 180 times smaller and the non-events still outvote the events: taken back, and
    alpha held at -2.6 for the rest of the phase; the search then settles within 3 sds.  Without the
    rule the phase walked on to -49, where every row's curvature is 0 (the run then stopped with a
    NumPy error in the frame's orientation, now guarded: it runs and warns)."""
    data = _rare_events(1000, prior_scale=None)
    model = stan_dp.RowModel(compiled(stan_test_model("logistic_flat")), data)
    mle, sd = _map_and_sd(data)
    rounds, adapted = _far_rounds(model, 16.0, 1)
    held = np.array([t["held"] for t in rounds])
    assert held[:, 0].any() and not held[:, 1:].any()   # alpha, and only alpha
    end = rounds[-1]["theta"]
    assert -3.12 - 6 * 0.17 < end[0] < -3.12 + 4 * 0.17   # where the first move put it
    assert np.all(np.abs(adapted.result.mode - mle) < 3 * sd)

    monkeypatch.setattr(far, "COLLAPSE_OCTAVES", math.inf)   # the phase as it was
    rounds, adapted = _far_rounds(model, 16.0, 1)
    assert rounds[-1]["theta"][0] < -20.0 and not any(t["held"].any() for t in rounds)
    assert adapted.attrs["warnings"]   # far out, every coordinate flat: it runs, and says so


def test_a_scale_rising_from_far_below_is_not_held(compiled, monkeypatch):
    """Earnings in dollars (sd 15,000) under a flat normal regression: sigma starts at 1 and its
    doubled moves shrink the median of ``r^2 / sigma^2 - 1`` 100-fold while every row still says
    "larger".  ``sigma`` is declared ``<lower=0>``: the rule leaves it alone and the run ends within
    5 posterior sds of the exact log sigma; treated like an unconstrained coordinate it was held
    hundreds of sds short (the reason for the exemption)."""
    rng = np.random.default_rng(0)
    n = 1000
    male = rng.binomial(1, 0.4, n)
    height = np.round(64 + 5 * male + rng.normal(0, 3, n))
    earn = -60000 + 1200 * height + 5000 * male + rng.normal(0, 15000, n)
    model = stan_dp.RowModel(compiled(stan_test_model("scale_flat")), {"N": n, "x": height, "y": earn})
    assert model.log_coordinates.tolist() == [False, False, True]
    z = np.column_stack([np.ones(n), height])
    resid = earn - z @ np.linalg.lstsq(z, earn, rcond=None)[0]
    log_sigma, sd = 0.5 * math.log(resid @ resid / n), 1 / math.sqrt(2 * n)   # exact MLE, Laplace sd
    _, adapted = _far_rounds(model, 16.0, 1)
    assert abs(adapted.result.mode[2] - log_sigma) < 5 * sd

    monkeypatch.setattr(far, "holdable_coordinates", lambda density, d: np.ones(d, dtype=bool))
    rounds, adapted = _far_rounds(model, 16.0, 1)
    assert any(t["held"][2] for t in rounds)
    assert log_sigma - adapted.result.mode[2] > 100 * sd


def _dose_and_weight(n: int = 3000) -> dict:
    """Rare events (about 1 %) on a dose in mg (0-200) and a body weight in kg (75 +- 12), both
    unstandardised and positive, for the bundled logistic regression (``normal(0, 10)`` priors)."""
    rng = np.random.default_rng(0)
    dose, weight = rng.uniform(0, 200, n), rng.normal(75, 12, n)
    y = rng.binomial(1, 1 / (1 + np.exp(-(-6.5 + 0.012 * dose + 0.005 * weight))))
    return {"N": n, "D": 2, "X": np.column_stack([dose, weight]), "y": y.astype(int), "prior_scale": 10.0}


def test_a_joint_move_into_saturated_bernoulli_rows_is_taken_back(compiled, monkeypatch):
    """Every row's gradient sign is its outcome's (``far.FIXED_SIGN_FAMILIES``), and with
    predictors that keep one sign the intercept and both slopes vote ``n_1 - n_0`` together: the
    first joint move takes the mean linear predictor from 0 to about -2.75 (the MAP's is -4.75),
    the doubled second to about -8.2, where the medians of ``|g|`` are 100-300 times smaller along
    all three.  Moved together, the old rule (one coordinate alone) never took it back: the phase
    walked on and the search ended 134 posterior sds off (unsettled, warned).  Now the joint move
    is taken back and the search settles within 0.35 sds of the exact MAP (epsilon = 16, noise seed
    2; seeds 1 and 3: 0.57 and 400 sds before, 0.27 and 0.33 now)."""
    data = _dose_and_weight()
    model = stan_dp.RowModel(compiled(bundled("logistic_regression")), data)
    assert far.fixed_sign_rows(model)
    mode, sd = _map_and_sd(data)
    rounds, adapted = _far_rounds(model, 16.0, 2)
    assert any(t["held"][:3].all() for t in rounds)   # all three taken back together
    assert adapted.result.settled and np.all(np.abs(adapted.result.mode - mode) < 1.5 * sd)

    monkeypatch.setattr(far, "fixed_sign_rows", lambda density: False)   # the rule as it was
    rounds, adapted = _far_rounds(model, 16.0, 2)
    assert not any(t["held"].any() for t in rounds)
    assert np.max(np.abs(adapted.result.mode - mode) / sd) > 20.0


def test_rows_have_fixed_gradient_signs_only_where_every_outcome_family_says_so():
    class Families:
        def __init__(self, *families: str) -> None:
            self.outcome_families = families

    assert far.fixed_sign_rows(Families("bernoulli_logit_glm"))
    assert far.fixed_sign_rows(Families("bernoulli", "categorical_logit"))
    # a binomial with several trials (y - N p) and a Poisson (y - lambda) change sign with theta
    assert not far.fixed_sign_rows(Families("bernoulli_logit", "poisson_log"))
    assert not far.fixed_sign_rows(Families("binomial_logit"))
    assert not far.fixed_sign_rows(Families()) and not far.fixed_sign_rows(object())   # does not say


class _Declared:
    dim = 4
    log_coordinates = np.array([False, True, False, False])
    bounded_coordinates = np.array([False, False, True, False])


def test_only_coordinates_the_program_puts_on_no_scale_transform_are_held():
    # a log-transformed and a logit-transformed (bounds other than (0, 1)) coordinate are scales'
    assert far.holdable_coordinates(_Declared(), 4).tolist() == [True, False, False, True]
    assert not far.holdable_coordinates(_Declared(), 5).any()   # a mask of the wrong length: none
    # a density that does not say (a NumPy density): none, the phase as before
    assert not far.holdable_coordinates(object(), 2).any() and far.holdable_coordinates(object(), 2).shape == (2,)


def test_a_move_is_taken_back_only_when_every_condition_holds():
    """``collapsed_moves`` against its specification, one condition broken at a time."""
    n, gate = 1000, 350.0
    base = dict(moved=np.array([0.0, -3.5, 0.0]), repeated=np.array([True, True, False]),
                holdable=np.array([True, True, True]), left_median=np.array([-2.0, -3.7, 0.0]),
                median=np.array([-2.0, -3.7 - (far.COLLAPSE_OCTAVES + 0.5), 0.0]),
                rows_vote=np.array([0.0, -0.9 * n, 0.0]), gate=gate)
    assert far.collapsed_moves(**base).tolist() == [False, True, False]
    broken = {
        "a shallower drop": dict(median=np.array([-2.0, -3.7 - (far.COLLAPSE_OCTAVES - 0.5), 0.0])),
        "a first move": dict(repeated=np.array([True, False, False])),
        "a scale's coordinate": dict(holdable=np.array([True, False, True])),
        "another coordinate moved too": dict(moved=np.array([0.0, -3.5, 0.2])),
        "the rows now vote the other way": dict(rows_vote=np.array([0.0, 0.9 * n, 0.0])),
        "the rows' vote within the gate": dict(rows_vote=np.array([0.0, -0.3 * n, 0.0])),
        "a rise of the median": dict(median=np.array([-2.0, -3.7 + far.COLLAPSE_OCTAVES + 0.5, 0.0])),
    }
    for what, change in broken.items():
        assert not far.collapsed_moves(**(base | change)).any(), what

    # rows with fixed gradient signs: a joint move counts, unless a scale's coordinate moved with it
    joint = base | dict(moved=np.array([-1.0, -3.5, 0.0]), left_median=np.array([-2.0, -3.7, 0.0]),
                        median=np.array([-2.0 - (far.COLLAPSE_OCTAVES + 0.5), -3.7 - (far.COLLAPSE_OCTAVES + 0.5),
                                         0.0]),
                        rows_vote=np.array([-0.9 * n, -0.9 * n, 0.0]))
    assert not far.collapsed_moves(**joint).any()   # the rule for other densities
    assert far.collapsed_moves(**joint, jointly=True).tolist() == [True, True, False]
    scale_moved = joint | dict(moved=np.array([-1.0, -3.5, 0.4]), holdable=np.array([True, True, False]))
    assert not far.collapsed_moves(**scale_moved, jointly=True).any()
    for what, change in broken.items():   # each condition still holds for the coordinate itself
        if what != "another coordinate moved too":
            assert not far.collapsed_moves(**(base | change), jointly=True).any(), what

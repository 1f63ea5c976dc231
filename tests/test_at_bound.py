"""A bounded parameter whose posterior piles up against its bound, and a search that ends where
the constraint's transform is flat.

``real<lower=0.3, upper=0.9> p`` with 1,200 Bernoulli rows at a rate of 0.2775 (below the
bound): the posterior of ``p`` is 0.3055 +- 0.0049, ``u = logit((p - L) / (U - L))`` about
-5.2 +- 1.2.  Out at ``u`` below -10 every row's gradient and curvature vanish like ``e^u``, and
private searches that ended there returned draws all equal to 0.3 to 8-16 digits, with the
warnings of an unsettled search but an HDI of zero width in ArviZ (17 of 160 noise seeds at
epsilon = 2; seed 150 even "settled").  Two repairs: a round's one-step estimate that the next
round took back (overshoot or collapse) is not reported by an unsettled search
(``newton.private_mode``); and draws squashed onto a bound are named, warned and not called
mixed (``auto.squashed_coordinates``)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import stan_dp
from conftest import stan_test_model
from stan_dp.adaptation import newton
from stan_dp.adaptation.plan import AdaptationSettings
from stan_dp.auto import SQUASHED_RTOL, _adapt, squashed_coordinates


class _Bounded:
    """A model-like object with one bounded and one unbounded coordinate (public transforms)."""

    param_names = ["p", "mu"]

    def constrain(self, u):
        return {"p": np.array(0.3 + 0.6 / (1.0 + math.exp(-u[0]))), "mu": np.array(u[1])}


def test_squashed_coordinates_against_the_logistic_transform():
    model = _Bounded()
    # at u = -31 the +-3 sd ends map to 0.3 + 0.6 e^-28 and 0.3 + 0.6 e^-34: equal to 1e-12
    assert squashed_coordinates(model, np.array([-31.0, 0.0]), np.array([1.0, 1.0])) == ["p (at 0.3)"]
    # at u = -5 (the posterior's own place) the ends differ by 0.6 (sigma(-2) - sigma(-8)) ~ 0.07
    assert squashed_coordinates(model, np.array([-5.0, 0.0]), np.array([1.0, 1.0])) == []
    # the threshold is SQUASHED_RTOL of the value: 0.6 (sigma(u + 3) - sigma(u - 3)) ~ 0.6 e^(u + 3)
    u = math.log(SQUASHED_RTOL * 0.3 / 0.6) - 3.0
    assert [f.split(" ")[0] for f in squashed_coordinates(model, np.array([u - 0.5, 0.0]),
                                                           np.array([1.0, 1.0]))] == ["p"]
    assert squashed_coordinates(model, np.array([u + 0.5, 0.0]), np.array([1.0, 1.0])) == []
    # an unbounded coordinate far out is not squashed; a coordinate narrower than 0.01 is not judged
    assert squashed_coordinates(model, np.array([0.0, 1e4]), np.array([1.0, 1.0])) == []
    assert squashed_coordinates(model, np.array([-31.0, 0.0]), np.array([1e-3, 1.0])) == []


def test_values_that_do_not_line_up_with_the_coordinates_are_not_judged():
    class _Cholesky:
        param_names = ["L.1.1", "L.2.1", "L.1.2", "L.2.2"]

        def constrain(self, u):   # 1 coordinate, 4 values (two of them structural constants)
            c = math.tanh(u[0])
            return {"L": np.array([[1.0, 0.0], [c, math.sqrt(1.0 - c * c)]])}

    assert squashed_coordinates(_Cholesky(), np.array([0.0]), np.array([1.0])) == []


@pytest.fixture(scope="module")
def rate_model(compiled):
    rng = np.random.default_rng(5)
    y = (rng.random(1200) < 0.2775).astype(int)
    return stan_dp.RowModel(compiled(stan_test_model("bounded_rate")),
                            {"N": 1200, "L": 0.3, "U": 0.9, "y": y.tolist()})


SEEDS = range(0, 48)


@pytest.mark.parametrize("steps", ["current", "session 77"])
def test_draws_at_a_bound_are_named_and_not_called_mixed(rate_model, monkeypatch, steps):
    """Every fit whose draws of p all sit within 1e-4 of a bound (0.3 or 0.9) says so:
    attrs["at_bound"] names p and that bound, mixed is false (the CLI then prints no intervals), and
    a warning says why.  Since the
    Newton rounds cap a logit coordinate's step (``newton.BOUNDED_STEP_MAX``, session 78) no
    search of these seeds ends on the bound; with the steps of before, 4 do, and they are named."""
    if steps != "current":
        monkeypatch.setattr(newton, "BOUNDED_STEP_MAX", math.inf)
    collapsed = 0
    for seed in SEEDS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = stan_dp.sample(rate_model, epsilon=2.0, delta=1e-5, seed=seed, progress=False)
        p = fit.posterior["p"].values.ravel()
        # a generated quantity of the parameter alone comes with the draws
        assert fit.attrs["transformed_in_output"] == "odds" and not fit.attrs["not_in_output"]
        np.testing.assert_allclose(fit.posterior["odds"].values.ravel(), p / (1 - p), rtol=1e-12)
        # one parameter has no intercept-slope ridge: an unsettled search does not advise centring
        assert "centred predictors" not in fit.attrs["warnings"], seed
        named = {"p (at 0.3)": 0.3, "p (at 0.9)": 0.9}.get(fit.attrs["at_bound"])
        assert named is not None or not fit.attrs["at_bound"], (seed, fit.attrs["at_bound"])
        if float(np.ptp(p)) <= 1e-4 * 0.3:
            collapsed += 1
            assert named is not None and abs(float(np.median(p)) - named) <= 1e-4, seed
            assert not fit.attrs["mixed"] and "flat" in fit.attrs["warnings"], seed
        elif named is not None:
            # named only where the Gaussian's +-3 sd ends are that close to the bound it names:
            # its draws then all are, but for a 3-sd tail
            tail = np.quantile(p, 0.99) - named if named == 0.3 else named - np.quantile(p, 0.01)
            assert float(tail) <= 2e-4, seed
    if steps == "current":
        assert collapsed == 0
    else:
        assert collapsed >= 1   # the seeds hold at least one such search (4 of these 48)


def test_an_estimate_the_next_round_took_back_is_not_reported(rate_model):
    """Where the last round took back the previous round's move and nothing was pooled, the
    search reported that previous round's one-step estimate, the very point just judged too far
    (seed 76 of 160: u = -15.2, p = 0.3 to 7 digits, where the rows' curvature had collapsed).
    It reports where the search stands after the step back."""
    checked = 0
    for seed in range(60, 100):
        trace: list = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = _adapt(rate_model, epsilon=2.0, delta=1e-5, share=1.0, seed=seed,
                            relation="replace_one", public_n=None, start=np.zeros(1),
                            settings=AdaptationSettings(), trace=trace).result
        rounds = [t for t in trace if "frame" in t]
        last = rounds[-1]
        if result.settled or not (last["overshoot"] or last["collapse"]) or result.checked >= 0:
            continue
        checked += 1
        taken_back = result.path[-2]   # the point the move that was taken back had reached
        assert not np.allclose(result.mode, taken_back), seed
        np.testing.assert_array_equal(result.mode, result.path[-1])
    assert checked >= 1

"""The unsettled search's advice to centre predictors goes only where the program has one.

An intercept-slope ridge needs a predictor: a program whose rows hold one variable (a normal mean
and scale, a mixture of ``y`` alone) used to be told to centre its predictors whenever its search
did not settle.  The rule (:func:`stan_dp.auto._centring_hint`) reads the program's row layout,
which is public; each check below would fail with the old rule (two coordinates were enough).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import stan_dp
from conftest import stan_test_model
from stan_dp.auto import _centring_hint


class _Model:
    def __init__(self, dim, row_vars=None):
        self.dim = dim
        if row_vars is not None:
            self.row_vars = row_vars


def test_the_rule():
    assert _centring_hint(_Model(1, ("x", "y"))) == ""             # one coordinate: no ridge
    assert _centring_hint(_Model(2, ("y",))) == ""                 # no predictor among the rows
    assert "centred predictors" in _centring_hint(_Model(2, ("x", "y")))
    assert "centred predictors" in _centring_hint(_Model(3))        # a density that does not say


def _heights(rng, n):
    return {"N": n, "y": 170 + 9 * rng.normal(size=n)}


def _metres(rng, n):
    x = 5000 + 1000 * rng.normal(size=n)   # a distance in metres around 5 km
    return {"N": n, "x": x, "y": 3 + 0.001 * x + rng.normal(size=n)}


@pytest.mark.parametrize("program, data, advised", [("normal_scale", _heights, False),
                                                    ("scale_flat", _metres, True)])
def test_an_unsettled_run_advises_centring_only_with_a_predictor(compiled, program, data, advised):
    """200 rows, epsilon = 0.5: neither search settles (the warning says so); only the regression
    on a distance in metres is told to centre it."""
    rng = np.random.default_rng(3)
    model = stan_dp.RowModel(compiled(stan_test_model(program)), data(rng, 200))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = stan_dp.sample(model, epsilon=0.5, delta=1e-5, seed=0, progress=False)
    assert "did not settle" in fit.attrs["warnings"]
    assert ("centred predictors" in fit.attrs["warnings"]) is advised

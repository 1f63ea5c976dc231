"""The far phase keeps a coordinate inside the bracket its votes set once it has overshot.

A Poisson regression of counts around 180 on unstandardised positive predictors (hospital beds
50-400, staff 120 +- 30), started at 0: every row's rate is 1, far below its count, and the first
move, a diagonal Newton step read from the start's curvature (the rate's: 1), overshoots an
exponential by decades (the linear predictor to about 250).  The votes flip and the released
median of ``|g|`` explodes, and Rprop's halving then went back and forth between the start and
the overshoot (after a flip it moves back by the halved step, then by the same step again), so
the ten rounds ended at a linear predictor near 31, where every row's curvature is ``e^31`` and
the Newton rounds do not move: 1,040-1,420 posterior sds off (noise seed 1; unsettled, warned).
With the bracket the phase ends near 4.9 (the mode's mean is 5.2) and the search settles 0.26-0.43
sds off with sds within 3 % of the exact ones.  Since
such a flip (a median up more than :data:`stan_dp.adaptation.far.OVERSHOOT_OCTAVES`) brackets
the coordinate between where its votes last disagreed, its moves go at most halfway to the
bracket's far end (a bisection), and the search ends at the mode (docs/adaptation.md §3, "Far
phase", step 4).
"""

from __future__ import annotations

import numpy as np

import stan_dp.adaptation.far as far
from conftest import traced_adaptation
from test_auto import PoissonGLM


def _admissions(n: int = 1500) -> PoissonGLM:
    rng = np.random.default_rng(12)
    beds, staff = rng.uniform(50, 400, n).round(), rng.normal(120, 30, n).round()
    rate = np.exp(4.0 + 0.003 * beds + 0.004 * staff)
    return PoissonGLM(np.column_stack([beds, staff]), rng.poisson(rate).astype(float))   # adds the intercept


def test_an_overshot_coordinate_is_bisected_back_to_the_mode(monkeypatch):
    model = _admissions()
    mode, cov = model.exact()
    sd = np.sqrt(np.diag(cov))
    trace, adapted = traced_adaptation(model, 16.0, 1)
    far_rounds = [t for t in trace if t.get("far")]
    assert far_rounds[0]["theta"][0] > 50.0   # the first move's overshoot
    assert adapted.result.settled and np.all(np.abs(adapted.result.mode - mode) < 1.0 * sd)
    reported = np.sqrt(np.diag(adapted.result.covariance))
    assert np.all(np.abs(reported / sd - 1.0) < 0.25)

    monkeypatch.setattr(far, "OVERSHOOT_OCTAVES", np.inf)   # Rprop's halving alone, as before
    trace, adapted = traced_adaptation(model, 16.0, 1)
    end = [t for t in trace if t.get("far")][-1]["theta"]
    assert end[0] > 10.0 and np.max(np.abs(adapted.result.mode - mode) / sd) > 100.0

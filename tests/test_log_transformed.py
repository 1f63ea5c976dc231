"""The clip bound's default where the forecast warns: raised near the mode for programs that
declare a log-transformed parameter (``stan_dp.stan_source.log_transformed_parameters``).

A parameter declared with a lower bound only (``real<lower=0> sigma``) is sampled on the log
scale, and its per-row gradients there are skewed like ``r^2 - 1``: the rows that clipping
cuts all push one way.  Where the forecast warns, ``stan_dp.sample`` keeps the rms-optimal
bound for other models (GLMs with roughly normal predictors lose from the raise) and raises it
for these (docs/adaptation.md §3, "A scale or shape parameter raises the bound by default").  The decision reads the program,
never the data.
"""

from __future__ import annotations

import warnings

import numpy as np

import stan_dp
from conftest import bundled, logistic_data, stan_test_model
from stan_dp.adaptation import AdaptationSettings
from stan_dp.auto import _kept_bound_note
from stan_dp.model import ZeroRowPart
from stan_dp.stan_source import log_transformed_parameters

PROGRAM = """data {
  int<lower=0> N;
  vector[N] y;
}
parameters {
  real a;
  vector<lower=0>[3] s;
  real<lower=-1, upper=1> r;
  real<lower=1> nu;
  array[2] real<lower=0> t;
  real<offset=1, multiplier=2> m;
  ordered[3] c;
  real<upper=0> u;
}
model {
  y ~ normal(a, s[1]);
}
"""


def test_lower_bounds_only_are_log_transformed():
    # lower only: a log transform; lower and upper: a logit; offset/multiplier: affine; upper
    # only (also a log, of the distance to the bound) is not how users write a scale or shape
    # parameter and is left out
    assert log_transformed_parameters(PROGRAM) == ("s", "nu", "t")
    assert log_transformed_parameters("data {\n  int N;\n}\n") == ()
    assert log_transformed_parameters("parameters {\n  real<lower = 0> sigma;\n}\n") == ("sigma",)


def _decision(model, **options) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = stan_dp.sample(model, epsilon=1.0, delta=1e-5, seed=3, draws=50, progress=False, **options)
    attrs = fit.posterior.attrs
    assert "forecast from public facts" in attrs["warnings"]   # the forecast warns
    # the run records whether the rule chose, or the user did
    assert bool(attrs["adaptive_clip_by_default"]) == ("settings" not in options)
    return bool(attrs["adaptive_clip"])


def test_where_the_forecast_warns_a_scale_parameter_raises_the_bound_and_a_glm_keeps_it(compiled):
    rng = np.random.default_rng(0)
    n = 400
    x = 5000 + 1000 * rng.normal(size=n)
    y = 20 + 0.004 * x + 3 * rng.normal(size=n)
    scale = stan_dp.RowModel(compiled(stan_test_model("scale_flat")), {"N": n, "x": x, "y": y})
    assert scale.log_transformed_parameters == ("sigma",)
    assert _decision(scale)
    # the user's explicit choice stands
    assert not _decision(scale, settings=AdaptationSettings(adaptive_clip=False))

    glm = stan_dp.RowModel(compiled(bundled("logistic_regression")), logistic_data(n=400))
    assert glm.log_transformed_parameters == ()
    assert not _decision(glm)
    bounded_data = logistic_data(n=400)
    bounded_data.pop("prior_scale")
    bounded = stan_dp.RowModel(compiled(stan_test_model("uniform_bounded")), bounded_data)
    assert bounded.log_transformed_parameters == ()   # lower and upper: a logit, not a scale
    assert not _decision(bounded)


def test_the_clipping_warning_names_who_kept_the_bound():
    # the rule's reason where the default chose, the user's setting where the user did; both
    # say how to raise the bound, from Python and from the CLI
    default, chosen = _kept_bound_note(True), _kept_bound_note(False)
    assert "the default where the forecast warns" in default and "was set" not in default
    assert "adaptive_clip=False was set" in chosen and "the default where" not in chosen
    for note in (default, chosen):
        assert "adaptive_clip=True" in note and "--adaptive-clip on" in note


def test_every_model_with_a_program_reads_it_the_same_way():
    # the property lives in the part shared by RowModel and the Dask ShardedModel (whose rows are
    # on workers): it needs the program's path only, never a row
    class Part(ZeroRowPart):
        pass

    part = Part()
    part.stan_file = stan_test_model("scale_flat")
    assert part.log_transformed_parameters == ("sigma",)
    assert Part().log_transformed_parameters == ()   # no program: the forecast rule stands
    broken = Part()
    broken.stan_file = stan_test_model("syntax_error")
    assert broken.log_transformed_parameters == ()   # unreadable: the same

"""The heavy-tail warning's advice fits the program's outcome likelihood.

The warning used to tell every model to try "a robust likelihood", a Student-t regression of
spending on income in dollars included (docs/adaptation.md §7): its likelihood already bounds an
outlying outcome's pull on the location and scale, so its large per-row gradients come from the
predictors or from outliers moving its degrees of freedom.  The advice now
reads the families of the program's sampling statements on row variables (public: the program and
the row layout, never the data): a heavy-tailed or few-valued outcome is told about its predictors
only, a light-tailed one which likelihood to try, anything else keeps the general advice.
"""

from __future__ import annotations

import numpy as np
import pytest

import stan_dp
from conftest import stan_test_model
from stan_dp.auto import _tail_advice
from stan_dp.stan_source import likelihood_weights, sampled_variates, writes_mixture
from test_auto import PoissonGLM, _quiet_sample

PROGRAM = """
data { int<lower=0> N; vector[N] x; array[N] int y; vector[N] z; }
parameters { real a; real b; real<lower=0> s; vector[2] w; }
model {
  a ~ normal(0, 10);
  target += student_t_lpdf(b | 3, 0, 1);
  for (n in 1:N) {
    y[n] ~ poisson_log(a + b * x[n]);
  }
  target += normal_lupdf(z | a, s);
  target += log_mix(0.5, normal_lpdf(w[1] | 0, 1), normal_lpdf(w[1] | 3, 1));
}
"""


def test_sampled_variates_reads_every_shape_of_sampling_statement():
    # priors too (the caller keeps those on row variables); a log_mix is not a sampling statement
    assert sampled_variates(PROGRAM) == (("a", "normal"), ("b", "student_t"), ("y", "poisson_log"),
                                         ("z", "normal"))
    assert sampled_variates("data { int N; } parameters { real m; }") == ()   # no model block


class _Model:
    def __init__(self, families=None):
        if families is not None:
            self.outcome_families = families


GENERAL = "a robust likelihood"


@pytest.mark.parametrize("family", ["cauchy", "bernoulli_logit", "ordered_logistic"])
def test_bounded_pull_is_told_about_its_predictors_only(family):
    advice = _tail_advice(_Model((family,)))
    assert GENERAL not in advice and "likelihood (" + family + ")" in advice
    assert "heavy-tailed predictors" in advice and "degrees of freedom" not in advice
    # a few-valued outcome's rare class pulls hard too (rare events on a dose and a weight)
    assert ("rare outcome" in advice) is (family != "cauchy")


def test_a_student_t_is_told_about_its_predictors_and_its_degrees_of_freedom():
    """Along ``nu`` a Student-t row's score grows like ``-log |r|`` (checked here by differences
    of scipy's density), so its outliers can still be the tail."""
    from scipy import stats

    score = [(stats.t.logpdf(r, 4 + 1e-5) - stats.t.logpdf(r, 4 - 1e-5)) / 2e-5 for r in (1e2, 1e3, 1e4)]
    assert np.allclose(np.diff(score), -np.log(10.0), atol=0.01)
    advice = _tail_advice(_Model(("student_t",)))
    assert GENERAL not in advice and "heavy-tailed predictors" in advice
    assert "outliers moving the degrees of freedom" in advice


@pytest.mark.parametrize("family, alternative", [("normal", "student_t in place of normal"),
                                                 ("poisson_log", "neg_binomial_2_log in place"),
                                                 ("lognormal", "Student-t on the log outcome")])
def test_light_tailed_outcomes_are_told_which_likelihood_to_try(family, alternative):
    advice = _tail_advice(_Model((family,)))
    assert alternative in advice and GENERAL not in advice


@pytest.mark.parametrize("families", [None, (), ("gamma",), ("normal", "student_t")])
def test_anything_else_keeps_the_general_advice(families):
    assert GENERAL in _tail_advice(_Model(families))


def _dollars(n: int) -> dict:
    """Data for ``tests/stan/student_dollars.stan``: spending on income, both in dollars."""
    rng = np.random.default_rng(1)
    income = rng.lognormal(10.8, 0.5, n)
    return {"N": n, "income": income, "spend": 2000 + 0.3 * income + 3000 * rng.standard_t(4, n)}


def test_a_compiled_program_names_its_outcome_family_not_its_priors(compiled):
    """``student_dollars``: ``alpha ~ normal`` is a prior, ``spend ~ student_t`` the likelihood."""
    model = stan_dp.RowModel(compiled(stan_test_model("student_dollars")), _dollars(50))
    assert model.outcome_families == ("student_t",)
    assert "likelihood (student_t) bounds an outlying outcome's pull" in _tail_advice(model)


def test_the_heavy_tail_warning_carries_the_fitted_advice():
    """The Poisson GLM with log-normal predictors of ``test_auto`` (10,000 rows, epsilon = 4),
    which warns of a heavy tail, declared as a ``poisson_log`` program."""
    rng = np.random.default_rng(0)
    z = (rng.lognormal(0.0, 1.0, size=(10_000, 5)) - np.exp(0.5)) / np.sqrt((np.e - 1) * np.e)
    y = rng.poisson(np.exp(1.0 + 0.3 * (z @ np.linspace(-0.8, 0.8, 5))))
    model = PoissonGLM(z, y)
    model.outcome_families = ("poisson_log",)
    fit, caught = _quiet_sample(model, epsilon=4.0, delta=1e-5, seed=3, draws=200)
    heavy = [str(w.message) for w in caught if "heavy tail" in str(w.message)]
    assert heavy and "neg_binomial_2_log in place of poisson_log" in heavy[0]
    assert GENERAL not in heavy[0] and heavy[0] in fit.attrs["warnings"]


@pytest.mark.parametrize("families, expected", [
    (("neg_binomial_2_log",), "its phi heading to infinity, where the rows look like a Poisson"),
    (("beta_binomial",), "its alpha + beta heading to infinity, where the rows look like a binomial"),
    (("bernoulli_logit",), ""), (None, "")])
def test_the_prior_share_warning_names_a_dispersion_limit_where_the_program_has_one(families, expected):
    """An audit's negative binomial (70 % zeros) was told only of a hierarchical funnel's neck
    while its ``phi`` ran towards the Poisson limit; a program without a dispersion is not told."""
    from stan_dp.auto import _dispersion_limit

    advice = _dispersion_limit(_Model(families))
    assert (expected in advice) if expected else advice == ""


@pytest.mark.parametrize("families, named", [(("neg_binomial_2",), True), (("normal",), False)])
def test_the_saddle_warning_names_a_dispersion_limit_where_the_program_has_one(families, named):
    from types import SimpleNamespace

    from stan_dp.auto import _saddle_warning

    model = _Model(families)
    model.dim, model.param_names = 2, ["b", "phi"]
    result = SimpleNamespace(mode=np.zeros(2), posterior_sd=np.ones(2), upward=np.array([0.0, 1.0]),
                             least_curvature=-3.0)
    text = _saddle_warning(model, result)
    assert "mostly phi" in text and "a mixture whose components merged" in text
    assert ("phi towards infinity, where the log density flattens" in text) is named


def _saddle_text(**program) -> str:
    from types import SimpleNamespace

    from stan_dp.auto import _saddle_warning

    model = _Model(program.pop("families", None))
    model.dim, model.param_names = 2, ["b", "phi"]
    for name, value in program.items():
        setattr(model, name, value)
    result = SimpleNamespace(mode=np.zeros(2), posterior_sd=np.ones(2), upward=np.array([0.0, 1.0]),
                             least_curvature=-3.0)
    return _saddle_warning(model, result)


MERGED, FUNNEL, DISPERSION = "a mixture whose components merged", "hierarchical funnel", "phi towards infinity"
SHORT = "no mixture, centred hierarchical statement or dispersion"
SHAPE = "its likelihood's profile in the shape, the last argument, is stationary at 0"


@pytest.mark.parametrize("program, named", [
    ({}, {MERGED, FUNNEL}),                                       # not known: both general examples
    ({"families": ("neg_binomial_2",)}, {MERGED, FUNNEL, DISPERSION}),
    ({"writes_mixture": True}, {MERGED}),
    ({"writes_mixture": False, "hierarchical_locations": {"a": "mu_a"}}, {FUNNEL}),
    ({"writes_mixture": False, "families": ("neg_binomial_2_log",)}, {DISPERSION}),
    ({"writes_mixture": False, "families": ("bernoulli_logit",)}, {SHORT}),   # the multinomial logit's kind
    ({"writes_mixture": False, "families": ("skew_normal",)}, {SHAPE}),   # session 77's incomes
])
def test_the_saddle_warning_names_only_the_causes_the_program_can_have(program, named):
    """Session 66's multinomial logit and session 68's negative binomial were told of merged
    mixtures and funnel necks they did not have.  Each cause, and its advice, is named exactly
    where the program has it; a program with none is told of a non-centred funnel or a point short
    of the mode."""
    text = _saddle_text(**program)
    for phrase in (MERGED, FUNNEL, DISPERSION, SHORT, SHAPE):
        assert (phrase in text) is (phrase in named), (phrase, text)
    assert ("init= of its shape with the sign you expect" in text) is (SHAPE in named)
    assert ("init= near the mode you expect" in text) is (MERGED in named)
    assert ("more rows per group" in text) is bool({FUNNEL, SHORT} & named)   # SHORT: a non-centred one
    assert ("a prior on its scale or the simpler family" in text) is (DISPERSION in named)


def test_the_program_says_whether_it_writes_a_mixture(compiled):
    mixture = """data {
  int N;
  vector[N] y;
}
parameters {
  ordered[2] mu;
  real<lower=0, upper=1> lambda;
}
model {
  for (n in 1:N)
    target += log_mix(lambda, normal_lpdf(y[n] | mu[1], 1), normal_lpdf(y[n] | mu[2], 1));
}
"""
    assert writes_mixture(mixture)
    assert writes_mixture(mixture.replace("log_mix(lambda,", "log_sum_exp(log(lambda) +").replace(
        "mu[1], 1), normal", "mu[1], 1), log1m(lambda) + normal"))
    assert not writes_mixture(mixture.replace("target += log_mix(lambda, normal_lpdf(y[n] | mu[1], 1), "
                                              "normal_lpdf(y[n] | mu[2], 1));", "y[n] ~ normal(mu[1], 1);"))
    helper = "functions {\n  real f(real x) { return log_sum_exp(x, x); }\n}\n"   # a user function's mixture
    plain = "parameters {\n  real m;\n}\nmodel {\n  m ~ normal(0, 1);\n}\n"
    assert writes_mixture(helper + plain) and not writes_mixture(plain)
    kept = plain.replace("model {", "transformed parameters {\n  real lp = log_sum_exp(m, -m);\n}\nmodel {")
    assert writes_mixture(kept)
    predictive = plain + "generated quantities {\n  real z = log_sum_exp(m, 0);\n}\n"
    assert not writes_mixture(predictive)
    model = stan_dp.RowModel(compiled(stan_test_model("normal_mixture")), {"N": 3, "y": [40.0, 55.0, 70.0]})
    assert model.writes_mixture is True
    model = stan_dp.RowModel(compiled(stan_test_model("student_dollars")), _dollars(50))
    assert model.writes_mixture is False


@pytest.mark.parametrize("statement, weights", [
    ("for (n in 1:N) target += w[n] * normal_lpdf(y[n] | a + b * x[n], sigma);", ("w",)),
    ("target += dot_product(w, log(y));", ()),                                  # no density call
    ("target += normal_lpdf(y | a + b * x, sigma);", ()),                       # every row read inside
    ("for (n in 1:N) target += wt[g[n]] * poisson_log_lpmf(y[n] | a);", ()),    # g an index
])
def test_likelihood_weights_are_row_variables_read_outside_a_density_call(statement, weights):
    program = "data { int N; }\nparameters { real a; }\nmodel { " + statement + " }"
    assert likelihood_weights(program, ("x", "y", "w", "g")) == weights


def test_weighted_rows_are_named_before_the_likelihood():
    """A survey-weighted normal regression (``target += w[n] * normal_lpdf(...)``), whose clipped
    rows are its heavily weighted ones: the advice names the weights, not only "a robust
    likelihood" or the predictors."""
    model = _Model(("normal",))
    model.likelihood_weights = ("w",)
    advice = _tail_advice(model)
    assert "weights each row's log density by w" in advice and "capping w" in advice
    assert "capping" not in _tail_advice(_Model(("normal",)))


def test_a_skew_normal_profile_likelihood_is_stationary_at_shape_zero_whatever_the_data():
    """The fact the skew-normal saddle advice rests on (``STATIONARY_SHAPE_FAMILIES``): on
    right-skewed data, whose maximum-likelihood shape is far from 0, the profile log-likelihood in
    the shape (maximised over location and scale by scipy, an independent implementation) still has
    a zero derivative at 0, while its derivative at the shape 1 is not small."""
    from scipy import optimize, stats

    y = 40.0 + 15.0 * np.abs(np.random.default_rng(5).normal(size=400))

    def profile(alpha: float) -> float:
        def neg(p):
            return -stats.skewnorm.logpdf(y, alpha, loc=p[0], scale=np.exp(p[1])).sum()
        start = [y.mean() - alpha / np.sqrt(1 + alpha**2) * np.sqrt(2 / np.pi) * y.std(), np.log(y.std())]
        return -optimize.minimize(neg, start, method="Nelder-Mead",
                                  options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 20000}).fun

    h = 1e-3
    at_zero = (profile(h) - profile(-h)) / (2 * h)
    at_one = (profile(1 + h) - profile(1 - h)) / (2 * h)
    assert abs(at_zero) < 0.05 * abs(at_one)
    assert abs(at_one) > 1.0


@pytest.mark.parametrize("families, named", [(("skew_normal",), True), (("normal",), False), (None, False)])
def test_an_unsettled_skew_normal_is_told_to_start_its_shape_off_zero(families, named):
    """From the default start (shape 0, the profile likelihood's stationary point) the skew-normal
    incomes at epsilon = 4 ended unsettled without always reading a saddle; the unsettled-search
    warning then carries the same advice as the saddle warning, and only for that family."""
    from stan_dp.auto import _shape_hint

    hint = _shape_hint(_Model(families))
    assert ("init= of its shape with the sign you expect" in hint) is named
    assert (hint == "") is (not named)

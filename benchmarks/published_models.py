"""Private fits of published-style Stan models against NUTS: an audit for silent and absurd misses.

The utility table (``benchmarks/utility.py``) holds two GLMs fixed; this script
runs Stan programs as Gelman and Hill or the rstanarm vignettes write them,
with data simulated on their own scales (no standardising), through
``stan_dp.sample`` with no knobs, and against ``stan_dp.reference_fit``:

* ``wells``: logistic regression on a distance in metres and an arsenic
  level, no priors;
* ``earnings``: log earnings on height in inches and ``male`` (40 %), flat
  priors, ``sigma`` unknown;
* ``roaches``: negative binomial with an exposure offset, a skewed
  pre-treatment count, ``treatment`` (60 %) and ``senior`` (30 %);
* ``student``: Student-t regression with unknown ``nu`` and ``sigma``;
* ``radon``: a varying intercept over 20 counties, half-Cauchy scales;
* ``radon-slopes``: varying intercepts and slopes over 10 counties, both centred;
* ``binomial``: aggregated binomial rows (trials 1 to ~500, log-normal) on
  age in years;
* ``ordered``: ordered logistic (5 levels, an ``ordered`` cut-point
  vector) on years of service and a binary predictor;
* ``gamma``: gamma GLM with a log link for costs in dollars (~1,000), age,
  a 25 % binary predictor and an unknown shape;
* ``weibull``: Weibull survival regression with right censoring, days in
  the thousands, age 40-80, a treatment;
* ``beta``: beta regression of a share on income in thousands, unknown
  precision;
* ``hetero``: normal regression whose log sd is linear in ``x``;
* ``wells-bounded``: ``wells`` with ``real<lower=0, upper=10> b_arsenic`` (a uniform-bounded
  coefficient near its lower bound, on Stan's logit transform);
* ``earnings-uniform``: ``earnings`` with ``real<lower=0, upper=100> sigma`` and
  ``sigma ~ uniform(0, 100)`` (the BUGS idiom of many published Stan programs).
* ``zip``: a zero-inflated Poisson regression on income in thousands (a probability
  ``theta`` on Stan's logit transform, a mixture per row);
* ``lognormal``: house prices on square feet (~1,500), unknown ``sigma``;
* ``mvn``: three measurements on their own scales (cm, kg, thousands) as a multivariate
  normal with an LKJ prior on a ``cholesky_factor_corr``;
* ``categorical``: a ``simplex[4]`` with a rare (3 %) category;
* ``wells-interaction``: ``wells`` with the ``dist * arsenic`` interaction (unscaled);
* ``exponential``: censored exponential survival in months on age in years;
* ``hierarchical``: a logistic regression with a varying intercept over 8 groups in the
  non-centred parametrisation (``mu + tau * z[g]``, ``z ~ std_normal()``, ``tau ~ normal(0, 2)``)
  and a predictor around 30: its posterior is far from Gaussian in ``tau`` (the skew check,
  docs/adaptation.md §5).
* ``hierarchical-centred``: the same rows over 20 groups, centred (``a ~ normal(mu, tau)``,
  ``y ~ bernoulli_logit(a[g] + b * x)``).

For every run it prints the worst |mean error| in reference sds (and which
parameter), the information floor and target of issue 13
(``max(3 floor, 0.5)``), and ``ok`` (met), ``warned`` (missed, with a
``stan_dp.UtilityWarning``) or ``SILENT`` (missed without one: a defect).
The floor reads the raw rows: a yardstick only, never private.  It also
prints what the run claimed: the released noise sd of the worst coordinate's
mode in posterior sds (``noise``, the largest over coordinates), the
clipping bias from the released count of clipped rows (``bias``), and the
error over their sum (``err/claim``): about 2 or less where the claim holds
(the worst of several coordinates' noise), above that the run understated
its error (the Student-t regression at 5,000 rows: 1.5-3.3, e.g. 3.58
against 0.28 + 0.96 at epsilon = 4).

Usage: ``python benchmarks/published_models.py [--models wells earnings ...]
[--n 1059 ...] [--epsilons 1 4] [--seeds 0 1]`` (``--n`` overrides every
model's own row count).  Measured figures: docs/adaptation.md §7, "Rare
binary predictors".
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from pathlib import Path

import arviz as az
import numpy as np

import stan_dp
from stan_dp.information_floor import information_floor

WELLS = """
data { int<lower=0> N; vector[N] dist; vector[N] arsenic; array[N] int<lower=0, upper=1> switched; }
parameters { real alpha; real b_dist; real b_arsenic; }
model { switched ~ bernoulli_logit(alpha + b_dist * dist + b_arsenic * arsenic); }
"""

EARNINGS = """
data { int<lower=0> N; vector[N] height; vector[N] male; vector[N] log_earn; }
parameters { real a; real b_height; real b_male; real<lower=0> sigma; }
model { log_earn ~ normal(a + b_height * height + b_male * male, sigma); }
"""

ROACHES = """
data { int<lower=0> N; vector[N] exposure2; vector[N] roach1; vector[N] treatment; vector[N] senior;
       array[N] int<lower=0> y; }
transformed data { vector[N] log_expo = log(exposure2); }
parameters { real alpha; real b_roach; real b_treat; real b_senior; real<lower=0> phi; }
model {
  alpha ~ normal(0, 2.5); b_roach ~ normal(0, 2.5); b_treat ~ normal(0, 2.5); b_senior ~ normal(0, 2.5);
  phi ~ exponential(1);
  y ~ neg_binomial_2_log(log_expo + alpha + b_roach * roach1 + b_treat * treatment + b_senior * senior, phi);
}
"""

STUDENT = """
data { int<lower=0> N; vector[N] x; vector[N] y; }
parameters { real alpha; real beta; real<lower=0> sigma; real<lower=1> nu; }
model { nu ~ gamma(2, 0.1); sigma ~ normal(0, 100); y ~ student_t(nu, alpha + beta * x, sigma); }
"""

RADON = """
data { int<lower=0> N; int<lower=1> J; array[N] int<lower=1, upper=J> county; vector[N] x; vector[N] y; }
parameters { vector[J] a; real b; real mu_a; real<lower=0> sigma_a; real<lower=0> sigma_y; }
model {
  mu_a ~ normal(0, 10); sigma_a ~ cauchy(0, 2.5); sigma_y ~ cauchy(0, 2.5);
  a ~ normal(mu_a, sigma_a);
  y ~ normal(a[county] + b * x, sigma_y);
}
"""


def wells(n: int, rng: np.random.Generator) -> dict:
    dist = rng.gamma(1.5, 33.0, n)            # metres: mean ~50, a long right tail
    arsenic = 0.5 + rng.gamma(1.2, 1.1, n)
    p = 1.0 / (1.0 + np.exp(-(-0.009 * dist + 0.46 * arsenic)))
    return {"N": n, "dist": dist, "arsenic": arsenic, "switched": rng.binomial(1, p).astype(int)}


WELLS_BOUNDED = WELLS.replace("real b_arsenic;", "real<lower=0, upper=10> b_arsenic;")

EARNINGS_UNIFORM = EARNINGS.replace("real<lower=0> sigma;", "real<lower=0, upper=100> sigma;").replace(
    "model { ", "model { sigma ~ uniform(0, 100); ")


def earnings(n: int, rng: np.random.Generator) -> dict:
    male = rng.binomial(1, 0.4, n).astype(float)
    height = np.round(64 + 5 * male + rng.normal(0, 3, n))
    log_earn = 5.8 + 0.06 * height + 0.42 * male + rng.normal(0, 0.88, n)
    return {"N": n, "height": height, "male": male, "log_earn": log_earn}


def roaches(n: int, rng: np.random.Generator) -> dict:
    roach1 = np.where(rng.random(n) < 0.35, 0.0, rng.lognormal(3.0, 1.3, n)).round(2)
    roach1 = np.minimum(roach1, 450.0) / 100.0   # scaled by 100, as in the rstanarm vignette
    treatment = rng.binomial(1, 0.6, n).astype(float)
    senior = rng.binomial(1, 0.3, n).astype(float)
    exposure = np.where(rng.random(n) < 0.7, 1.0, rng.uniform(0.2, 1.5, n))
    mu = np.exp(np.log(exposure) + 2.8 + 1.3 * roach1 - 0.8 * treatment - 0.4 * senior)
    phi = 0.27
    y = rng.negative_binomial(phi, phi / (phi + mu))
    return {"N": n, "exposure2": exposure, "roach1": roach1, "treatment": treatment, "senior": senior,
            "y": y.astype(int)}


def student(n: int, rng: np.random.Generator) -> dict:
    x = rng.uniform(0, 50, n)
    return {"N": n, "x": x, "y": 3.0 + 0.4 * x + 2.0 * rng.standard_t(4, n)}


def radon(n: int, rng: np.random.Generator, groups: int = 20) -> dict:
    county = rng.integers(1, groups + 1, n)
    a = 1.5 + 0.3 * rng.normal(size=groups)
    x = rng.binomial(1, 0.8, n).astype(float)
    y = a[county - 1] - 0.7 * x + 0.75 * rng.normal(size=n)
    return {"N": n, "J": groups, "county": county.astype(int), "x": x, "y": y}


RADON_SLOPES = """
data { int<lower=0> N; int<lower=1> J; array[N] int<lower=1, upper=J> county; vector[N] x; vector[N] y; }
parameters { vector[J] a; vector[J] b; real mu_a; real mu_b; real<lower=0> sigma_a;
             real<lower=0> sigma_b; real<lower=0> sigma_y; }
model {
  mu_a ~ normal(0, 10); mu_b ~ normal(0, 10);
  sigma_a ~ cauchy(0, 2.5); sigma_b ~ cauchy(0, 2.5); sigma_y ~ cauchy(0, 2.5);
  a ~ normal(mu_a, sigma_a); b ~ normal(mu_b, sigma_b);
  y ~ normal(a[county] + b[county] .* x, sigma_y);
}
"""


def radon_slopes(n: int, rng: np.random.Generator, groups: int = 10) -> dict:
    county = rng.integers(1, groups + 1, n)
    a = 1.5 + 0.3 * rng.normal(size=groups)
    b = -0.7 + 0.2 * rng.normal(size=groups)
    x = rng.binomial(1, 0.8, n).astype(float)
    y = a[county - 1] + b[county - 1] * x + 0.75 * rng.normal(size=n)
    return {"N": n, "J": groups, "county": county.astype(int), "x": x, "y": y}


BINOMIAL = """
data { int<lower=0> N; array[N] int<lower=0> trials; vector[N] age; array[N] int<lower=0> y; }
parameters { real alpha; real beta; }
model { alpha ~ normal(0, 5); beta ~ normal(0, 1); y ~ binomial_logit(trials, alpha + beta * age); }
"""


def binomial(n: int, rng: np.random.Generator) -> dict:
    trials = np.maximum(1, np.round(rng.lognormal(2.5, 1.2, n))).astype(int)
    age = rng.uniform(20, 80, n)
    p = 1 / (1 + np.exp(-(-2.0 + 0.03 * age)))
    return {"N": n, "trials": trials, "age": age, "y": rng.binomial(trials, p).astype(int)}


ORDERED = """
data { int<lower=0> N; int<lower=2> K; vector[N] years; vector[N] female; array[N] int<lower=1, upper=K> y; }
parameters { real b_years; real b_female; ordered[K - 1] c; }
model { y ~ ordered_logistic(b_years * years + b_female * female, c); }
"""


def ordered(n: int, rng: np.random.Generator) -> dict:
    years = rng.uniform(0, 30, n)
    female = rng.binomial(1, 0.5, n).astype(float)
    eta = 0.08 * years + 0.5 * female
    cut = np.array([0.5, 1.5, 2.5, 3.5])
    u = rng.logistic(size=n) + eta
    y = 1 + np.sum(u[:, None] > cut[None, :], axis=1)
    return {"N": n, "K": 5, "years": years, "female": female, "y": y.astype(int)}


GAMMA = """
data { int<lower=0> N; vector[N] age; vector[N] chronic; vector<lower=0>[N] cost; }
parameters { real b0; real b_age; real b_chronic; real<lower=0> shape; }
model { cost ~ gamma(shape, shape ./ exp(b0 + b_age * age + b_chronic * chronic)); }
"""


def gamma(n: int, rng: np.random.Generator) -> dict:
    age = rng.uniform(18, 90, n)
    chronic = rng.binomial(1, 0.25, n).astype(float)
    mu = np.exp(6.5 + 0.015 * age + 0.8 * chronic)
    return {"N": n, "age": age, "chronic": chronic, "cost": rng.gamma(1.5, mu / 1.5)}


WEIBULL = """
data { int<lower=0> N; vector[N] days; array[N] int<lower=0, upper=1> censored; vector[N] age; vector[N] trt; }
parameters { real<lower=0> alpha; real b0; real b_age; real b_trt; }
model {
  alpha ~ gamma(2, 1);
  for (i in 1:N) {
    real sc = exp(b0 + b_age * age[i] + b_trt * trt[i]);
    if (censored[i] == 1) target += weibull_lccdf(days[i] | alpha, sc);
    else target += weibull_lpdf(days[i] | alpha, sc);
  }
}
"""


def weibull(n: int, rng: np.random.Generator) -> dict:
    age = rng.uniform(40, 80, n)
    trt = rng.binomial(1, 0.5, n).astype(float)
    sc = np.exp(7.5 - 0.02 * age + 0.4 * trt)
    t = sc * rng.weibull(1.3, n)
    c = rng.uniform(200, 2000, n)
    return {"N": n, "days": np.minimum(t, c), "censored": (t > c).astype(int), "age": age, "trt": trt}


BETA = """
data { int<lower=0> N; vector[N] income; vector<lower=0, upper=1>[N] share; }
parameters { real a; real b; real<lower=0> phi; }
model { vector[N] mu = inv_logit(a + b * income); share ~ beta(mu * phi, (1 - mu) * phi); }
"""


def beta(n: int, rng: np.random.Generator) -> dict:
    income = rng.lognormal(3.8, 0.5, n)   # thousands of dollars
    mu = 1 / (1 + np.exp(-(0.5 - 0.015 * income)))
    phi = 12.0
    return {"N": n, "income": income, "share": np.clip(rng.beta(mu * phi, (1 - mu) * phi), 1e-6, 1 - 1e-6)}


HETERO = """
data { int<lower=0> N; vector[N] x; vector[N] y; }
parameters { real a; real b; real c; real d; }
model { y ~ normal(a + b * x, exp(c + d * x)); }
"""


def hetero(n: int, rng: np.random.Generator) -> dict:
    x = rng.uniform(0, 10, n)
    return {"N": n, "x": x, "y": 20 + 3 * x + np.exp(0.2 + 0.15 * x) * rng.normal(size=n)}


HIERARCHICAL = """
data { int<lower=0> N; int<lower=1> J; array[N] int<lower=1, upper=J> g; vector[N] x;
       array[N] int<lower=0, upper=1> y; }
parameters { real mu; real<lower=0> tau; vector[J] z; real b; }
model {
  mu ~ normal(0, 5); tau ~ normal(0, 2); z ~ std_normal(); b ~ normal(0, 5);
  y ~ bernoulli_logit(mu + tau * z[g] + b * x);
}
"""


def hierarchical(n: int, rng: np.random.Generator, groups: int = 8) -> dict:
    g = rng.integers(1, groups + 1, n)
    a = -0.5 + 0.6 * rng.normal(size=groups)
    x = rng.normal(30, 8, n)
    p = 1 / (1 + np.exp(-(a[g - 1] + 0.04 * (x - 30))))
    return {"N": n, "J": groups, "g": g.astype(int), "x": x, "y": rng.binomial(1, p).astype(int)}


HIERARCHICAL_CENTRED = """
data { int<lower=0> N; int<lower=1> J; array[N] int<lower=1, upper=J> g; vector[N] x;
       array[N] int<lower=0, upper=1> y; }
parameters { real mu; real<lower=0> tau; vector[J] a; real b; }
model {
  mu ~ normal(0, 5); tau ~ normal(0, 2); a ~ normal(mu, tau); b ~ normal(0, 5);
  y ~ bernoulli_logit(a[g] + b * x);
}
"""


def hierarchical_centred(n: int, rng: np.random.Generator) -> dict:
    return hierarchical(n, rng, groups=20)


ZIP = """
data { int<lower=0> N; vector[N] income; array[N] int<lower=0> y; }
parameters { real<lower=0, upper=1> theta; real a; real b; }
model {
  for (i in 1:N) {
    if (y[i] == 0)
      target += log_sum_exp(log(theta), log1m(theta) + poisson_log_lpmf(0 | a + b * income[i]));
    else
      target += log1m(theta) + poisson_log_lpmf(y[i] | a + b * income[i]);
  }
}
"""


def zip_poisson(n: int, rng: np.random.Generator) -> dict:
    income = rng.gamma(2.0, 25.0, n)   # thousands of dollars, a long right tail
    y = np.where(rng.random(n) < 0.3, 0, rng.poisson(np.exp(0.3 + 0.012 * income)))
    return {"N": n, "income": income, "y": y.astype(int)}


LOGNORMAL = """
data { int<lower=0> N; vector[N] sqft; vector[N] price; }
parameters { real a; real b; real<lower=0> sigma; }
model { price ~ lognormal(a + b * sqft, sigma); }
"""


def lognormal(n: int, rng: np.random.Generator) -> dict:
    sqft = rng.lognormal(7.3, 0.35, n)   # square feet, around 1,500
    return {"N": n, "sqft": sqft, "price": np.exp(11.0 + 0.0004 * sqft + rng.normal(0, 0.3, n))}


MVN = """
data { int<lower=0> N; array[N] vector[3] y; }
parameters { vector[3] mu; vector<lower=0>[3] tau; cholesky_factor_corr[3] L; }
model {
  tau ~ cauchy(0, 5); L ~ lkj_corr_cholesky(2);
  y ~ multi_normal_cholesky(mu, diag_pre_multiply(tau, L));
}
"""


def mvn(n: int, rng: np.random.Generator) -> dict:
    sd = np.array([9.0, 14.0, 30.0])   # height in cm, weight in kg, an income in thousands
    corr = np.array([[1.0, 0.6, 0.3], [0.6, 1.0, 0.4], [0.3, 0.4, 1.0]])
    return {"N": n, "y": rng.multivariate_normal([170.0, 70.0, 55.0], corr * np.outer(sd, sd), n)}


CATEGORICAL = """
data { int<lower=0> N; array[N] int<lower=1, upper=4> y; }
parameters { simplex[4] theta; }
model { y ~ categorical(theta); }
"""


def categorical(n: int, rng: np.random.Generator) -> dict:
    return {"N": n, "y": (rng.choice(4, n, p=[0.55, 0.3, 0.12, 0.03]) + 1).astype(int)}


WELLS_INTERACTION = """
data { int<lower=0> N; vector[N] dist; vector[N] arsenic; array[N] int<lower=0, upper=1> switched; }
parameters { real alpha; real b_dist; real b_arsenic; real b_inter; }
model { switched ~ bernoulli_logit(alpha + b_dist * dist + b_arsenic * arsenic + b_inter * dist .* arsenic); }
"""


def wells_interaction(n: int, rng: np.random.Generator) -> dict:
    dist = rng.gamma(1.5, 33.0, n)
    arsenic = 0.5 + rng.gamma(1.2, 1.1, n)
    p = 1.0 / (1.0 + np.exp(-(-0.15 - 0.006 * dist + 0.56 * arsenic - 0.002 * dist * arsenic)))
    return {"N": n, "dist": dist, "arsenic": arsenic, "switched": rng.binomial(1, p).astype(int)}


EXPONENTIAL = """
data { int<lower=0> N; vector[N] age; vector[N] t; array[N] int<lower=0, upper=1> cens; }
parameters { real a; real b_age; }
model {
  for (i in 1:N) {
    if (cens[i] == 0) t[i] ~ exponential(exp(-(a + b_age * age[i])));
    else target += exponential_lccdf(t[i] | exp(-(a + b_age * age[i])));
  }
}
"""


def exponential(n: int, rng: np.random.Generator) -> dict:
    age = rng.uniform(30, 80, n)
    t = rng.exponential(np.exp(5.0 - 0.03 * age))   # months
    c = rng.uniform(0, 60, n)
    return {"N": n, "age": age, "t": np.minimum(t, c), "cens": (c < t).astype(int)}


MODELS = {   # name: (Stan program, data generator, the published data set's row count)
    "wells": (WELLS, wells, 3020),
    "earnings": (EARNINGS, earnings, 1059),
    "roaches": (ROACHES, roaches, 262),
    "student": (STUDENT, student, 500),
    "radon": (RADON, radon, 919),
    # varying intercepts and slopes over 10 counties (two centred groups)
    "radon-slopes": (RADON_SLOPES, radon_slopes, 919),
    # more kinds of likelihood, rows as the studies that use them have (~1,000)
    "binomial": (BINOMIAL, binomial, 1000),
    "ordered": (ORDERED, ordered, 1000),
    "gamma": (GAMMA, gamma, 1000),
    "weibull": (WEIBULL, weibull, 1000),
    "beta": (BETA, beta, 1000),
    "hetero": (HETERO, hetero, 1000),
    # the same rows with bounds as published programs often declare them (on Stan's logit transform)
    "wells-bounded": (WELLS_BOUNDED, wells, 3020),
    "earnings-uniform": (EARNINGS_UNIFORM, earnings, 1059),
    # a varying intercept in the non-centred parametrisation (posterior far from Gaussian)
    "hierarchical": (HIERARCHICAL, hierarchical, 3000),
    # the centred parametrisation over 20 groups (a ~ normal(mu, tau)): each group's effect
    # depends on its own rows, about 5 % of them (as radon's counties)
    "hierarchical-centred": (HIERARCHICAL_CENTRED, hierarchical_centred, 3000),
    # other parameter types and likelihoods: a probability in a mixture, a Cholesky factor of a
    # correlation matrix, a simplex, an interaction of two unscaled predictors, censoring
    "zip": (ZIP, zip_poisson, 1000),
    "lognormal": (LOGNORMAL, lognormal, 1000),
    "mvn": (MVN, mvn, 1000),
    "categorical": (CATEGORICAL, categorical, 1000),
    "wells-interaction": (WELLS_INTERACTION, wells_interaction, 3020),
    "exponential": (EXPONENTIAL, exponential, 1000),
}

REFERENCE_OPTIONS = {   # name: reference_fit options the model's NUTS reference needs
    # Stan's random inits put b in (-2, 2) against incomes up to ~300 (a rate of e^600): one of
    # four chains never moved (R-hat 1.6) at 1,000 and 3,000 rows; all zeros start it well
    "zip": {"init_radius": 0},
}


def reference_rhat(ref) -> float:
    """The largest rank-normalised split R-hat over the reference's posterior components (NaN
    components, such as a constant, left out; NaN where none is left)."""
    values = [np.asarray(v, dtype=float).ravel() for v in az.rhat(ref).data_vars.values()]
    finite = np.concatenate(values) if values else np.array([])
    finite = finite[np.isfinite(finite)]
    return float(finite.max()) if finite.size else float("nan")


def worst_error(fit, ref) -> tuple[float, str]:
    """Worst |private mean - reference mean| / reference sd over every scalar parameter.

    A component constant in the reference (a Cholesky factor's fixed entries, ``L[1, 1] = 1``)
    counts 0 where the private draws hold the same value (to rounding) and infinity otherwise.
    """
    worst, which = -1.0, ""
    for name in ref.posterior.data_vars:
        if name not in fit.posterior:
            continue
        p = fit.posterior[name].values.reshape(-1, *fit.posterior[name].shape[2:])
        r = ref.posterior[name].values.reshape(-1, *ref.posterior[name].shape[2:])
        gap = np.atleast_1d(np.abs(p.mean(0) - r.mean(0))).ravel()
        sd = np.atleast_1d(r.std(0)).ravel()
        constant = sd <= 1e-12 * (1.0 + np.abs(np.atleast_1d(r.mean(0)).ravel()))
        same = gap <= 1e-9 * (1.0 + np.abs(np.atleast_1d(r.mean(0)).ravel()))
        with np.errstate(all="ignore"):
            err = np.where(constant, np.where(same, 0.0, np.inf), gap / np.where(constant, 1.0, sd))
        err = np.where(np.isnan(err), np.inf, err)
        if err.max() > worst:
            worst, which = float(err.max()), name
    return worst, which


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--n", nargs="+", type=int, default=None,
                    help="row counts (default: each model's published size)")
    ap.add_argument("--epsilons", nargs="+", type=float, default=[1.0, 4.0])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    ap.add_argument("--delta", type=float, default=1e-5)
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp())
    print("model     n      eps seed  worst      (parameter)  floor  target verdict mixed "
          "noise  bias  err/claim time_s ref_rhat")
    for name in args.models:
        code, make, published_n = MODELS[name]
        path = tmp / f"{name}.stan"
        path.write_text(code)
        for n in args.n or [published_n]:
            for seed in args.seeds:
                data = make(n, np.random.default_rng(seed))
                model = stan_dp.RowModel(path, data)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    ref = stan_dp.reference_fit(path, data, seed=seed + 1,
                                                **REFERENCE_OPTIONS.get(name, {}))
                    ref_rhat = reference_rhat(ref)
                for eps in args.epsilons:
                    t0 = time.perf_counter()
                    with warnings.catch_warnings(record=True) as caught:
                        warnings.simplefilter("always")
                        fit = stan_dp.sample(model, epsilon=eps, delta=args.delta, seed=1000 + seed,
                                             progress=False)
                    elapsed = time.perf_counter() - t0
                    worst, which = worst_error(fit, ref)
                    floor = information_floor(model, ref, eps, args.delta)
                    target = max(3.0 * floor, 0.5)
                    warned = any(issubclass(w.category, stan_dp.UtilityWarning) for w in caught)
                    verdict = "ok" if worst <= target else ("warned" if warned else "SILENT")
                    noise = float(fit.attrs.get("max_noise_sd_in_posterior_sds", np.nan))
                    bias = float(fit.attrs.get("clipping_bias_bound", 0.0))
                    print(f"{name:9s} {n:<6d} {eps:<3g} {seed:<4d}  {worst:9.3g}  ({which:10s}) "
                          f"{floor:6.3f} {target:6.2f} {verdict:7s} {fit.attrs.get('mixed')!s:5s} "
                          f"{noise:5.2g} {bias:5.2g} {np.divide(worst, noise + bias):9.2g} "
                          f"{elapsed:6.1f} {ref_rhat:8.3f}", flush=True)


if __name__ == "__main__":
    main()

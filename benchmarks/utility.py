"""Private fits through ``stan_dp.sample`` against the non-private NUTS fit (issue 13's yardstick).

For each model (logistic regression D = 10, Poisson GLM D = 5), predictor
scaling (standardised, or one column in metres around 5 km and one in
thousands), n, epsilon and seed: fit privately with no knobs, fit the same
model and data with Stan's NUTS (``stan_dp.reference_fit``), and print

* worst and median |mean error| in reference sds;
* the information floor ``2 C_w / mu`` with ``C_w`` the 90th percentile of
  the whitened per-row gradient norms ``||Sigma^{1/2} g_i||`` at the
  reference mean (``Sigma`` the reference covariance in unconstrained space:
  computed here from the raw data, NOT private — a yardstick only);
* the target ``max(3 floor, 0.5)`` and whether it is met;
* the largest sd ratio, whether the run warned, its time;
* the reference's largest R-hat (NUTS itself can struggle on unstandardised
  predictors: a yardstick that did not converge is no yardstick).  For the
  unstandardised data the reference is, by default, the standardised data's
  NUTS fit mapped by the exact affine change of variables
  (:func:`mapped_reference`).

Usage: ``python benchmarks/utility.py [--models logistic poisson] [--n 1000 10000 100000]
[--epsilons 1 4] [--seeds 0 1 2] [--scalings std unstd]``.
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

POISSON = """
// Poisson regression with a log link, as users write it (wide normal priors).
data {
  int<lower=0> N;
  int<lower=1> D;
  matrix[N, D] X;
  array[N] int<lower=0> y;
}
parameters {
  real alpha;
  vector[D] beta;
}
model {
  alpha ~ normal(0, 10);
  beta ~ normal(0, 10);
  y ~ poisson_log_glm(X, alpha, beta);
}
"""


def simulate(model: str, n: int, seed: int, unstandardised: bool) -> dict:
    """Data of ``model`` with n rows; unstandardised: column 0 in metres, column 1 in thousands."""
    rng = np.random.default_rng(seed)
    d = 10 if model == "logistic" else 5
    z = rng.normal(size=(n, d))
    beta = np.linspace(-0.8, 0.8, d)
    if model == "logistic":
        y = rng.binomial(1, 1 / (1 + np.exp(-(0.3 + z @ beta))))
    else:
        y = rng.poisson(np.exp(1.0 + 0.3 * (z @ beta)))
    x = z.copy()
    if unstandardised:
        x[:, 0] = 5000.0 + 1000.0 * z[:, 0]
        x[:, 1] = 1000.0 * z[:, 1]
    data = {"N": n, "D": d, "X": x, "y": y.astype(int)}
    if model == "logistic":
        data["prior_scale"] = 10.0
    return data


def mapped_reference(reference):
    """The unstandardised model's posterior from the standardised one's, by the affine map.

    With ``x_0 = 5000 + 1000 z_0`` and ``x_1 = 1000 z_1`` the linear predictor
    ``alpha_z + beta_z . z`` equals ``alpha + beta . x`` for ``alpha = alpha_z - 5 beta_z[0]``,
    ``beta[0] = beta_z[0] / 1000``, ``beta[1] = beta_z[1] / 1000``.  The priors (normal,
    sd 10) differ between the two parametrisations by a relative precision of ~1e-5 of the
    likelihood's at n >= 1e3, so the mapped draws are the unstandardised posterior to well
    within their Monte Carlo error — without running NUTS on predictors in metres, which
    takes tens of minutes at n = 1e4 (tree depth 10).
    """
    post = reference.posterior
    alpha = post["alpha"].values - 5.0 * post["beta"].values[..., 0]
    beta = post["beta"].values.copy()
    beta[..., 0] /= 1000.0
    beta[..., 1] /= 1000.0
    out = reference.copy()
    out.posterior["alpha"] = (post["alpha"].dims, alpha)
    out.posterior["beta"] = (post["beta"].dims, beta)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["logistic", "poisson"])
    ap.add_argument("--n", nargs="+", type=int, default=[1000, 10000, 100000])
    ap.add_argument("--epsilons", nargs="+", type=float, default=[1.0, 4.0])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--scalings", nargs="+", default=["std", "unstd"])
    ap.add_argument("--delta", type=float, default=1e-5)
    ap.add_argument("--nuts-on-unstandardised", action="store_true",
                    help="run NUTS on the unstandardised data instead of mapping the "
                         "standardised reference (slow: tens of minutes at n = 1e4)")
    args = ap.parse_args(argv)
    root = Path(__file__).resolve().parents[1]
    tmp = Path(tempfile.mkdtemp())
    (tmp / "poisson_regression.stan").write_text(POISSON)
    files = {"logistic": root / "stan_models" / "logistic_regression.stan",
             "poisson": tmp / "poisson_regression.stan"}
    std_refs: dict = {}   # the standardised data's NUTS fits, reused (mapped) for the unstandardised

    def standardised_reference(name: str, n: int, seed: int):
        if (name, n, seed) not in std_refs:
            std_refs[name, n, seed] = stan_dp.reference_fit(
                files[name], simulate(name, n, seed, False), seed=seed + 1)
        return std_refs[name, n, seed]

    print("model     scaling n       eps seed  worst  median floor  target met  sd_ratio warned time_s "
          "ref_rhat")
    for name in args.models:
        for scaling in args.scalings:
            for n in args.n:
                for seed in args.seeds:
                    data = simulate(name, n, seed, scaling == "unstd")
                    model = stan_dp.RowModel(files[name], data)
                    if scaling == "unstd" and not args.nuts_on_unstandardised:
                        ref = mapped_reference(standardised_reference(name, n, seed))
                    else:
                        ref = stan_dp.reference_fit(files[name], data, seed=seed + 1)
                        if scaling == "std":
                            std_refs[name, n, seed] = ref
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        ref_rhat = float(max(float(v.max()) for v in az.rhat(ref).data_vars.values()))
                    for eps in args.epsilons:
                        t0 = time.perf_counter()
                        with warnings.catch_warnings(record=True) as caught:
                            warnings.simplefilter("always")
                            fit = stan_dp.sample(model, epsilon=eps, delta=args.delta,
                                                 seed=1000 + seed, progress=False)
                        elapsed = time.perf_counter() - t0
                        errs, ratios = [], []
                        for v in ("alpha", "beta"):
                            p = fit.posterior[v].values.reshape(-1, *fit.posterior[v].shape[2:])
                            r = ref.posterior[v].values.reshape(-1, *ref.posterior[v].shape[2:])
                            errs.append(np.atleast_1d(np.abs(p.mean(0) - r.mean(0)) / r.std(0)))
                            ratios.append(np.atleast_1d(p.std(0) / r.std(0)))
                        errs = np.concatenate(errs)
                        fl = information_floor(model, ref, eps, args.delta)
                        target = max(3 * fl, 0.5)
                        warned = any(issubclass(w.category, stan_dp.UtilityWarning) for w in caught)
                        print(f"{name:9s} {scaling:7s} {n:<7d} {eps:<3g} {seed:<4d} {errs.max():6.2f} "
                              f"{np.median(errs):6.2f} {fl:6.3f} {target:6.2f} "
                              f"{'yes' if errs.max() <= target else 'NO':4s} "
                              f"{np.concatenate(ratios).max():8.2f} {str(warned):6s} {elapsed:6.1f} "
                              f"{ref_rhat:8.3f}",
                              flush=True)


if __name__ == "__main__":
    main()

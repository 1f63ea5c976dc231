"""DP HMC vs the penalty sampler at the same budget (issue 6 benchmark).

Model: bundled logistic regression, n = 10,000 rows, D = 10 (dim 11), data as
tests/conftest.py ``logistic_data``.  Reference: a Laplace approximation of
the non-private posterior (mode by BFGS on the full-data BridgeStan log
density, covariance from a central-difference Hessian of its gradient); for
n = 10^4 this posterior is very close to Gaussian.  4,000 reference draws.

For each epsilon in {1, 2, 5} (delta = 1e-5), 4 chains, uniform(-2, 2)
inits, fixed seed, the whole budget spent by each sampler:
- ``stan_dp.hmc(model, epsilon, delta)`` with all defaults (200-release mode
  search, 50 warm-up + 100 draws, L = 3);
- ``stan_dp.penalty`` with the guided proposal, clip sqrt(dim) (HMC's former
  default ratio clip), step size 0.1 / sqrt(n) per coordinate
  (data-independent), 100 warm-up + 100 draws.
Printed: MMD (stan_dp.diagnostics.mmd, standardised by the reference),
worst and root-mean-square |standardised mean error| over the 11
coordinates, the median ratio of pooled sd to reference sd, and wall time.

Run:  python benchmarks/hmc.py [--eps 1 2 5] [--seed 1] [--n 10000] [--d 10]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from conftest import bundled, logistic_data  # noqa: E402

import stan_dp  # noqa: E402
from stan_dp.diagnostics import mmd  # noqa: E402

CHAINS, WARMUP, ITERATIONS, DELTA = 4, 100, 100, 1e-5


def laplace_reference(model, draws: int = 4000, seed: int = 0):
    """Mode, covariance and draws of the Laplace approximation (non-private oracle)."""
    from scipy import optimize

    f = lambda th: -model.bridge.log_density(th, propto=False)  # noqa: E731
    g = lambda th: -model.bridge.log_density_gradient(th, propto=False)[1]  # noqa: E731
    mode = optimize.minimize(f, np.zeros(model.dim), jac=g, method="BFGS", options={"gtol": 1e-8}).x
    h = 1e-5
    hess = np.array([(g(mode + h * e) - g(mode - h * e)) / (2 * h) for e in np.eye(model.dim)])
    cov = np.linalg.inv(0.5 * (hess + hess.T))
    return mode, cov, np.random.default_rng(seed).multivariate_normal(mode, cov, size=draws)


def flat(fit) -> np.ndarray:
    """(draws, dim) in the order (alpha, beta[1..D]) of the unconstrained vector."""
    post = np.concatenate([fit.posterior["alpha"].values[..., None], fit.posterior["beta"].values], axis=2)
    return post.reshape(-1, post.shape[-1])


def score(x: np.ndarray, mode: np.ndarray, cov: np.ndarray,
          ref: np.ndarray) -> tuple[float, float, float, float]:
    """MMD, worst and rms standardised mean error, median sd ratio."""
    sd = np.sqrt(np.diag(cov))
    err = (x.mean(0) - mode) / sd
    return (mmd(x, ref), float(np.max(np.abs(err))), float(np.sqrt(np.mean(err**2))),
            float(np.median(x.std(0) / sd)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--eps", type=float, nargs="+", default=[1.0, 2.0, 5.0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--n", type=int, default=10_000, help="rows (default 10,000)")
    ap.add_argument("--d", type=int, default=10, help="predictors (default 10)")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    data = logistic_data(n=args.n, d=args.d, seed=1)
    print(f"logistic regression, n = {args.n:,}, D = {args.d}")
    model = stan_dp.RowModel(bundled("logistic_regression"), data)
    mode, cov, ref = laplace_reference(model)
    base = mmd(np.random.default_rng(99).multivariate_normal(mode, cov, size=800), ref)
    print(f"reference: Laplace approximation; MMD of 800 exact draws vs reference: {base:.3f}")
    step = 0.1 / np.sqrt(model.n_rows)
    print(f"{'eps':>4} | {'HMC MMD':>8} {'worst':>6} {'rms':>5} {'sd':>5} {'time':>6} | "
          f"{'penalty MMD':>11} {'worst':>6} {'rms':>5} {'sd':>5} {'time':>6} | HMC >= penalty")
    for eps in args.eps:
        t = time.perf_counter()
        fit_h = stan_dp.hmc(model, epsilon=eps, delta=DELTA, seed=args.seed, progress=False)
        t_h = time.perf_counter() - t
        t = time.perf_counter()
        fit_p = stan_dp.penalty(model, epsilon=eps, delta=DELTA, iterations=ITERATIONS, warmup=WARMUP,
                                clip=float(np.sqrt(model.dim)), step_size=step, proposal="guided",
                                chains=CHAINS, seed=args.seed, progress=False)
        t_p = time.perf_counter() - t
        m_h, e_h, r_h, s_h = score(flat(fit_h), mode, cov, ref)
        m_p, e_p, r_p, s_p = score(flat(fit_p), mode, cov, ref)
        better = "yes" if m_h <= m_p else "no"
        print(f"{eps:>4g} | {m_h:>8.3f} {e_h:>6.2f} {r_h:>5.2f} {s_h:>5.2f} {t_h:>5.0f}s | "
              f"{m_p:>11.3f} {e_p:>6.2f} {r_p:>5.2f} {s_p:>5.2f} {t_p:>5.0f}s | {better}", flush=True)


if __name__ == "__main__":
    main()

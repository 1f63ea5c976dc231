"""Minibatch samplers: per-iteration cost vs n, and privacy vs the full-data penalty (issue 5).

Part 1 — per-iteration time at ``b = 500`` for n small vs n large, for the
kernels of ``stan_dp.subsampled_penalty`` and ``stan_dp.barker`` (the loop the
driver runs: Gaussian random walk, tempering ``n0 = 100``), best of 7
interleaved repeats of 1000 iterations (the machine is shared).

* Stan: the bundled ``linear_regression`` (D = 1) through ``RowModel`` at
  n = 2e4 and n = 2e6 (``--stan-large``); building the 2e6 row instances
  takes about half a minute and ~2 GB.
* NumPy: the same linear regression as a NumPy ``RowDensity``, at n = 2e4
  and n = 2e6 — the sampler's own per-iteration cost without the bridge.

Part 2 — epsilon after 10^4 iterations (one chain, delta = 1e-5): the
subsampled penalty (``Release(z, batch_size=500, n=n)``, RDP + WBK
amplification) against the full-data penalty at the same noise multiplier
``z`` (exact Gaussian PLD), and DP Barker (Theorem 8, no noise knob).

Run:  python benchmarks/minibatch.py [--stan-large 2000000] [--numpy-large 2000000]
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

import stan_dp  # noqa: E402
from stan_dp.aggregates import queries  # noqa: E402
from stan_dp.accounting import Budget, Release, barker_step_rdp, curve_epsilon  # noqa: E402
from stan_dp.samplers import barker, minibatch, subsampled  # noqa: E402
from stan_dp.samplers.barker_correction import (  # noqa: E402
    DEFAULT_CORRECTION_VARIANCE,
    correction_distribution,
)
from stan_dp.samplers.proposals import make_proposal  # noqa: E402

BATCH = 500
N0 = 100.0
DELTA = 1e-5
LOG_2PI = float(np.log(2 * np.pi))


def linear_data(n: int, seed: int = 1) -> dict:
    """Linear regression data for the bundled model with D = 1."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 1))
    y = 0.5 + 1.0 * x[:, 0] + rng.normal(scale=1.5, size=n)
    return {"N": n, "D": 1, "X": x, "y": y, "sigma": 1.5, "prior_scale": 5.0}


class NumpyLinear:
    """``y_i ~ N(alpha + beta x_i, sigma^2)``, normal priors: a NumPy RowDensity."""

    def __init__(self, data: dict) -> None:
        self.x, self.y = data["X"][:, 0].copy(), data["y"].copy()
        self.sigma, self.s0 = data["sigma"], data["prior_scale"]
        self.n_rows, self.dim, self.param_names = self.y.size, 2, ["alpha", "beta[1]"]

    def log_prior(self, theta):
        return float(-0.5 * theta @ theta / self.s0**2)

    def row_log_lik(self, theta, rows=None):
        idx = slice(None) if rows is None else rows
        resid = (self.y[idx] - theta[0] - theta[1] * self.x[idx]) / self.sigma
        return -0.5 * resid * resid - np.log(self.sigma) - 0.5 * LOG_2PI

    def row_log_lik_grad(self, theta, rows=None):  # pragma: no cover - unused
        raise NotImplementedError

    def constrain(self, theta):
        return {"alpha": np.asarray(theta[0]), "beta": np.asarray(theta[1:])}


def make_kernel(sampler: str, model):
    """The sampler's kernel at the settings of the benchmark (n0 = 100, b = 500)."""
    prop = make_proposal("gaussian", 0.02, 2)
    temperature = N0 / model.n_rows
    if sampler == "subsampled_penalty":
        return subsampled.build_kernel(model, prop, batch_size=BATCH, clip=5.0, noise_multiplier=1.0,
                                       temperature=temperature)
    return barker.build_kernel(model, prop, batch_size=BATCH, temperature=temperature,
                               correction=correction_distribution(DEFAULT_CORRECTION_VARIANCE))


def time_kernel(kernel, model, iterations: int) -> float:
    """Seconds per iteration of ``iterations`` kernel steps from a fixed state and seed."""
    rng_prop, rng_noise = np.random.default_rng(1), np.random.default_rng(2)
    state = minibatch.init(model, np.array([0.5, 1.0]))
    t0 = time.perf_counter()
    for _ in range(iterations):
        state, _ = kernel(rng_prop, rng_noise, state)
    return (time.perf_counter() - t0) / iterations


def time_batch_access(model, iterations: int) -> float:
    """Seconds per iteration of the data access alone: draw a batch, its clipped ratio sums."""
    rng = np.random.default_rng(2)
    a, b = np.array([0.5, 1.0]), np.array([0.51, 1.0])
    q = queries(model)
    t0 = time.perf_counter()
    for _ in range(iterations):
        q.clipped_ratio_sums(b, a, 1.0, rows=minibatch.draw_batch(rng, model.n_rows, BATCH))
    return (time.perf_counter() - t0) / iterations


def timing_table(label: str, small, large, iterations: int = 1000, repeats: int = 7) -> None:
    """Best of ``repeats`` interleaved timings (small, large, small, ...) so load drift cancels."""
    print(f"\n{label}: per-iteration time, b = {BATCH} (kernel loop, best of {repeats} x {iterations})")
    n_s, n_l = f"n={small.n_rows:,}", f"n={large.n_rows:,}"
    print(f"{'sampler':20s} {n_s:>14s} {n_l:>16s} {'ratio':>7s}")
    for sampler in ("subsampled_penalty", "barker", "data access only"):
        if sampler == "data access only":  # the floor: random rows of a large array miss the cache
            def fs():
                return time_batch_access(small, iterations)

            def fl():
                return time_batch_access(large, iterations)
        else:
            ks, kl = make_kernel(sampler, small), make_kernel(sampler, large)

            def fs():
                return time_kernel(ks, small, iterations)

            def fl():
                return time_kernel(kl, large, iterations)
        ts, tl = [], []
        for _ in range(repeats):
            ts.append(fs())
            tl.append(fl())
        a, b = min(ts), min(tl)
        print(f"{sampler:20s} {a * 1e3:11.3f} ms {b * 1e3:13.3f} ms {b / a:7.2f}")


def epsilon_table(ns: list[int], zs: list[float], iterations: int = 10_000) -> None:
    budget = Budget(1.0, DELTA)
    print(f"\nepsilon after {iterations:,} iterations (one chain, delta = {DELTA:g}, b = {BATCH})")
    print(f"{'n':>10s} {'z':>5s} {'full-data penalty':>18s} {'subsampled penalty':>19s} {'DP Barker':>10s}")
    for n in ns:
        barker_eps = curve_epsilon(barker_step_rdp(BATCH, n, DEFAULT_CORRECTION_VARIANCE), iterations, DELTA)
        for z in zs:
            full = budget.epsilon_spent([Release(z)], iterations)
            sub = budget.epsilon_spent([Release(z, batch_size=BATCH, n=n)], iterations)
            print(f"{n:>10,} {z:5g} {full:18.4g} {sub:19.4g} {barker_eps:10.4g}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stan-small", type=int, default=20_000)
    parser.add_argument("--stan-large", type=int, default=2_000_000)
    parser.add_argument("--numpy-small", type=int, default=20_000)
    parser.add_argument("--numpy-large", type=int, default=2_000_000)
    parser.add_argument("--skip-stan", action="store_true")
    args = parser.parse_args()
    warnings.simplefilter("ignore")

    epsilon_table([20_000, 2_000_000], [1.0, 2.0, 5.0])

    timing_table("NumPy linear regression", NumpyLinear(linear_data(args.numpy_small)),
                 NumpyLinear(linear_data(args.numpy_large)))
    if args.skip_stan:
        return
    from stan_dp import RowModel, compile_model

    lib = compile_model(ROOT / "stan_models" / "linear_regression.stan")
    models = {}
    for n in (args.stan_small, args.stan_large):
        t0 = time.perf_counter()
        models[n] = RowModel(lib, linear_data(n))
        print(f"RowModel construction, n = {n:,}: {time.perf_counter() - t0:.1f} s")
    timing_table("Stan linear_regression (RowModel)", models[args.stan_small], models[args.stan_large])


if __name__ == "__main__":
    main()

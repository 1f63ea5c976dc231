"""Private HMC on the bundled logistic regression with every knob at its default.

Run:  python examples/hmc_logistic.py [--n 10000] [--epsilon 2]
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import numpy as np

import stan_dp

ROOT = Path(__file__).resolve().parent.parent


def simulate(n: int, d: int = 10, seed: int = 1) -> dict:
    """Data as tests/conftest.py logistic_data: x ~ N(0, I), beta = linspace(-1, 1, d), alpha = 0.3."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    p = 1.0 / (1.0 + np.exp(-(0.3 + x @ np.linspace(-1.0, 1.0, d))))
    return {"N": n, "D": d, "X": x, "y": (rng.random(n) < p).astype(int), "prior_scale": 2.5}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--epsilon", type=float, default=2.0)
    args = ap.parse_args()
    model = stan_dp.RowModel(ROOT / "stan_models" / "logistic_regression.stan", simulate(args.n))
    fit = stan_dp.hmc(model, epsilon=args.epsilon, delta=1e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import arviz as az
        print(az.summary(fit, kind="stats"))
    a = fit.posterior.attrs
    print({k: a[k] for k in ("epsilon", "delta", "epsilon_spent", "noise_multiplier",
                             "grad_noise_multiplier", "n_leapfrog", "clip", "grad_clip",
                             "chains", "warmup", "iterations", "accountant")})


if __name__ == "__main__":
    main()

"""Linear regression from a privatised release: the S-5 example of Ju, Awan, Gong, Rao (2022).

Setting (seed 004, supplement S-5): n = 100 records (x_i, y_i), p = 2
predictors x_i ~ N(m, I) with m = (0.9, -1.17), y_i = β0 + β1 x_i1 + β2 x_i2 + e_i,
e_i ~ N(0, σ² = 2) with σ known, prior β ~ N(0, 2² I), true β = (-1.79, -2.89, -0.66)
(Table 1).  The curator clamps each record (x truncated to [-4, 4], y to
[-15, 10], then mapped linearly onto [-1, 1]) and releases, with Laplace noise,
X̃ᵀỹ, ỹᵀỹ and the upper triangle of X̃ᵀX̃ (without its constant n entry),
X̃ = [1, x̃]: 9 numbers whose l1 sensitivity (one record replaced) is 15, so the
Laplace scale is 15/ε.  The analyst samples p(β | s_dp) by data augmentation,
with the exact conjugate update p(β | x, y) for the θ-step (as in the seed).

For each ε, R replicates draw a fresh confidential data set and release, run one
chain of K sweeps (the first half discarded, as in S-5), and check whether the
90% equal-tailed credible interval of each coefficient covers the truth.

    python examples/private_linear_regression.py                     # quick: ~40 s
    python examples/private_linear_regression.py --replicates 100 --iterations 10000 \\
        --epsilon 0.1 0.3 1 3 10                                     # Table 1 of the seed
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np

import stan_dp

MODEL = Path(__file__).resolve().parent.parent / "stan_models" / "linear_regression_records.stan"
N, P = 100, 2
M = np.array([0.9, -1.17])
SIGMA2, TAU = 2.0, 2.0
BETA = np.array([-1.79, -2.89, -0.66])
X_RANGE, Y_RANGE = (-4.0, 4.0), (-15.0, 10.0)
SENSITIVITY = 15.0     # l1: 6 entries of range 2, 3 squares of range 1
#: Coverage in Table 1 of the seed (100 replicates, 10,000 iterations).
TABLE1 = {0.1: (0.99, 0.60, 0.99), 0.3: (1.0, 0.66, 0.94), 1.0: (1.0, 0.84, 0.80),
          3.0: (1.0, 0.84, 0.75), 10.0: (0.93, 0.87, 0.85)}


def regression_statistic(records):
    """Per record (clamped): ỹ, x̃1 ỹ, x̃2 ỹ, ỹ², x̃1, x̃2, x̃1², x̃1 x̃2, x̃2²."""
    x, y = records["X"], records["y"]
    return np.column_stack([y, x[:, 0] * y, x[:, 1] * y, y * y,
                            x[:, 0], x[:, 1], x[:, 0] ** 2, x[:, 0] * x[:, 1], x[:, 1] ** 2])


def conjugate_beta(records, rng):
    """Exact draw from p(β | x, y) (S-5): N(Σn Xᵀy / σ², Σn), Σn = (XᵀX / σ² + I / τ²)⁻¹."""
    x = np.column_stack([np.ones(len(records["y"])), records["X"]])
    prec = x.T @ x / SIGMA2 + np.eye(P + 1) / TAU ** 2
    chol = np.linalg.cholesky(prec)
    mean = np.linalg.solve(prec, x.T @ records["y"] / SIGMA2)
    return {"beta": mean + np.linalg.solve(chol.T, rng.standard_normal(P + 1))}


def simulate(rng):
    """One confidential data set (the curator's side)."""
    x = M + rng.standard_normal((N, P))
    y = BETA[0] + x @ BETA[1:] + math.sqrt(SIGMA2) * rng.standard_normal(N)
    return {"X": x, "y": y}


def run(epsilon: float, replicates: int, iterations: int, seed: int) -> dict:
    model = stan_dp.StanRecordModel(MODEL, {"N": N, "D": P, "X": np.zeros((N, P)), "y": np.zeros(N),
                                            "m": M, "sigma": math.sqrt(SIGMA2), "tau": TAU})
    privacy = stan_dp.new_privacy(
        regression_statistic, stan_dp.Laplace(epsilon=epsilon, sensitivity=SENSITIVITY),
        clamp={"X": X_RANGE, "y": Y_RANGE},
    )
    rng = np.random.default_rng([seed, int(round(epsilon * 1000))])
    covered = np.zeros(P + 1)
    acc, acc_min = [], []
    for _ in range(replicates):
        s_dp = privacy.release(simulate(rng), rng)
        fit = stan_dp.augmented_sample(
            model, privacy, s_dp, iterations=iterations - iterations // 2, warmup=iterations // 2,
            chains=1, theta_update=conjugate_beta, init={"beta": np.zeros(P + 1)},
            seed=int(rng.integers(2**31)),
        )
        beta = fit.posterior["beta"].values.reshape(-1, P + 1)
        lo, hi = np.quantile(beta, [0.05, 0.95], axis=0)
        covered += (lo <= BETA) & (BETA <= hi)
        acc.append(float(fit.sample_stats.record_acceptance.mean()))
        acc_min.append(float(fit.sample_stats.min_record_acceptance.min()))
    return {"coverage": covered / replicates, "acceptance": float(np.mean(acc)),
            "min_acceptance": float(np.min(acc_min))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=20, help="data sets per epsilon (R)")
    parser.add_argument("--iterations", type=int, default=5000, help="sweeps per chain (K), half discarded")
    parser.add_argument("--epsilon", type=float, nargs="+", default=[1.0], help="one or more epsilons")
    parser.add_argument("--seed", type=int, default=2022)
    args = parser.parse_args()
    for eps in args.epsilon:
        if not eps > 0:
            parser.error(f"--epsilon must be positive, got {eps}")
    if args.replicates < 1 or args.iterations < 2:
        parser.error("--replicates must be >= 1 and --iterations >= 2")
    for eps in args.epsilon:
        t0 = time.perf_counter()
        res = run(eps, args.replicates, args.iterations, args.seed)
        seed_row = TABLE1.get(eps)
        for j in range(P + 1):
            ref = f" (seed Table 1: {seed_row[j]:.2f})" if seed_row else ""
            print(f"epsilon {eps:g}: beta[{j}] = {BETA[j]:+.2f}: coverage {res['coverage'][j]:.2f} "
                  f"of the 90% credible interval over {args.replicates} replicates{ref}")
        print(f"epsilon {eps:g}: mean record acceptance {res['acceptance']:.3f} (minimum "
              f"{res['min_acceptance']:.3f}; Proposition 3.1 bound exp(-eps) = {math.exp(-eps):.3f}); "
              f"{time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()

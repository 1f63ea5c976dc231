"""Log-linear (Dirichlet-multinomial) model from noisy tables: the S-4 example of
Ju, Awan, Gong, Rao (2022), with the acceptance rates of Figure S1.

Records (a_i, b_i1..b_iK), a ~ Categorical(p), b_k | a ~ Categorical(q[a, k]),
p ~ Dirichlet(1), q[i, k] ~ Dirichlet(1) (S3-S6).  The curator releases the K
two-way tables (a × b_k), every cell with Laplace(2K/ε) noise (S7-S9: one
record moves one cell per table by ±1, l1 sensitivity 2K): a pure ε-DP
release, so every record acceptance probability is at least exp(-ε)
(Proposition 3.1).  The analyst samples p(p, q | s_dp) by data augmentation
with the exact conjugate Dirichlet update, and this script records the mean
and the minimum record acceptance of every chain against ε, and plots them
with the bound (Figure S1).

    python examples/private_loglinear.py                        # quick: ~15 s
    python examples/private_loglinear.py --chains 10 --iterations 4000 --plot acceptance.png
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np

import stan_dp

MODEL = Path(__file__).resolve().parent.parent / "stan_models" / "loglinear_records.stan"
N, I, J, K = 100, 3, 3, 2
EPSILONS = (0.1, 0.3, 1.0, 3.0, 10.0)


def tables(records):
    """One-hot cell of the record in each of the K tables (a × b_k): shape (n, K·I·J)."""
    a = records["a"] - 1
    b = records["b"] - 1
    cells = (np.arange(K) * I * J)[None, :] + a[:, None] * J + b
    out = np.zeros((len(a), K * I * J))
    np.put_along_axis(out, cells, 1.0, axis=1)
    return out


def conjugate_draw(records, rng):
    """Exact draw from p(p, q | records): Dirichlet(1 + counts) (S3-S6 are conjugate)."""
    a = records["a"] - 1
    p = rng.dirichlet(1.0 + np.bincount(a, minlength=I))
    q = np.empty((I, K, J))
    for k in range(K):
        counts = np.zeros((I, J))
        np.add.at(counts, (a, records["b"][:, k] - 1), 1)
        for i in range(I):
            q[i, k] = rng.dirichlet(1.0 + counts[i])
    return {"p": p, "q": q}


def simulate(rng):
    """Parameters from the prior and one confidential data set (the curator's side)."""
    p = rng.dirichlet(np.ones(I))
    q = rng.dirichlet(np.ones(J), size=(I, K))
    a = rng.choice(I, size=N, p=p)
    b = np.stack([[rng.choice(J, p=q[ai, k]) for k in range(K)] for ai in a])
    return {"a": a + 1, "b": b + 1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, default=4, help="data sets (one chain each) per epsilon")
    parser.add_argument("--iterations", type=int, default=1000, help="sweeps per chain, half discarded")
    parser.add_argument("--epsilon", type=float, nargs="+", default=list(EPSILONS))
    parser.add_argument("--seed", type=int, default=2022)
    parser.add_argument("--plot", type=Path, default=None, help="write Figure S1 as this PNG")
    args = parser.parse_args()
    if any(not e > 0 for e in args.epsilon) or args.chains < 1 or args.iterations < 2:
        parser.error("--epsilon must be positive, --chains >= 1, --iterations >= 2")
    model = stan_dp.StanRecordModel(MODEL, {
        "N": N, "I": I, "J": J, "K": K, "a": np.ones(N, dtype=int), "b": np.ones((N, K), dtype=int),
        "alpha": np.ones(I), "alpha_cond": np.ones(J)})
    rng = np.random.default_rng(args.seed)
    rows = []
    for eps in args.epsilon:
        t0 = time.perf_counter()
        privacy = stan_dp.new_privacy(tables, stan_dp.Laplace(epsilon=eps, sensitivity=2 * K))
        means, mins = [], []
        for _ in range(args.chains):
            s_dp = privacy.release(simulate(rng), rng)
            fit = stan_dp.augmented_sample(
                model, privacy, s_dp, iterations=args.iterations - args.iterations // 2,
                warmup=args.iterations // 2, chains=1, theta_update=conjugate_draw,
                seed=int(rng.integers(2**31)))
            means.append(float(fit.sample_stats.record_acceptance.mean()))
            mins.append(float(fit.sample_stats.min_record_acceptance.min()))
        rows.append((eps, means, mins))
        print(f"epsilon {eps:g}: mean record acceptance {np.mean(means):.3f} (chains "
              f"{min(means):.3f}-{max(means):.3f}), minimum acceptance {min(mins):.3f} >= "
              f"exp(-eps) = {math.exp(-eps):.3f}: {min(mins) >= math.exp(-eps) * (1 - 1e-12)}; "
              f"{time.perf_counter() - t0:.1f} s")
    if args.plot is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(5.5, 3.8))
        for eps, means, mins in rows:
            ax.scatter([eps] * len(means), means, color="tab:blue", s=14,
                       label="mean acceptance" if eps == rows[0][0] else None)
            ax.scatter([eps] * len(mins), mins, color="tab:orange", s=14,
                       label="minimum acceptance" if eps == rows[0][0] else None)
        grid = np.geomspace(min(args.epsilon), max(args.epsilon), 200)
        ax.plot(grid, np.exp(-grid), color="black", label="exp(-ε) (Prop. 3.1)")
        ax.set_xscale("log")
        ax.set_xlabel("ε")
        ax.set_ylabel("record acceptance rate")
        ax.set_title(f"Log-linear model, n = {N}, {K} tables {I}×{J}")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"plot written to {args.plot}")


if __name__ == "__main__":
    main()

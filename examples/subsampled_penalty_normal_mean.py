"""Subsampled DP penalty (seed 003, Section 4.1) on 200 000 rows, tempered to n0 = 1000.

Model: y_i ~ N(mu, 1), mu ~ N(0, 10^2), rows clamped to [-3, 3] so that for
|mu| <= 3 each ratio satisfies |r_j| <= 6 |dmu| and clip = 6 never binds.
Each iteration reads a batch of b = 1000 rows (without replacement); the
tempered likelihood (T = n0/n) keeps the noise independent of n.  The
oracle is the exact tempered posterior.

Run:  python examples/subsampled_penalty_normal_mean.py      (~15 s)
"""

from __future__ import annotations

import numpy as np

import stan_dp


class NormalMean:
    """Satisfies stan_dp.density.RowDensity."""

    def __init__(self, y: np.ndarray) -> None:
        self.y = np.asarray(y, float)
        self.n_rows, self.dim, self.param_names = self.y.size, 1, ["mu"]

    def log_prior(self, theta):
        return float(-0.5 * (theta[0] / 10.0) ** 2)

    def row_log_lik(self, theta, rows=None):
        y = self.y if rows is None else self.y[rows]
        return -0.5 * (y - theta[0]) ** 2

    def row_log_lik_grad(self, theta, rows=None):
        y = self.y if rows is None else self.y[rows]
        return -0.5 * (y - theta[0]) ** 2, (y - theta[0])[:, None]

    def constrain(self, theta):
        return {"mu": np.asarray(theta[0])}


def main() -> None:
    rng = np.random.default_rng(2024)
    model = NormalMean(np.clip(rng.normal(0.4, 1.0, 200_000), -3, 3))
    n0 = 1000
    temperature = n0 / model.n_rows
    prec = temperature * model.n_rows + 1 / 100
    exact_mean, exact_sd = temperature * model.y.sum() / prec, prec**-0.5

    idata = stan_dp.subsampled_penalty(
        model, epsilon=1.0, delta=1e-6, batch_size=1000, iterations=2000, warmup=300, chains=2,
        clip=6.0, step_size=0.05, n0=n0, init=[0.0], progress=False)
    mu = idata.posterior["mu"].values
    a = idata.attrs
    print(f"n = {a['n_rows']:,}, batch {a['batch_size']}, T = {a['temperature']:g} (n0 = {a['n0']:g})")
    print(f"noise multiplier z = {a['noise_multiplier']:.3f}, epsilon spent = {a['epsilon_spent']:.4f} "
          f"(delta = {a['delta']:g}, {a['accountant']})")
    print(f"median noise sd = {float(np.median(idata.sample_stats['noise_sd'])):.2f}, "
          f"acceptance = {float(idata.sample_stats['is_accepted'].mean()):.2f}")
    print(f"private posterior:          mean {mu.mean():.4f}, sd {mu.std():.4f}")
    print(f"exact tempered posterior:   mean {exact_mean:.4f}, sd {exact_sd:.4f}")


if __name__ == "__main__":
    main()

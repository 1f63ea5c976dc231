"""DP penalty MCMC on a NumPy density (the RowDensity protocol), compared with the exact posterior.

Model: y_i ~ N(mu, 1), mu ~ N(0, 10^2), n = 20 000 rows clamped to [-3, 3].
For |mu| <= 3 each row's log-likelihood ratio satisfies
|r_j| = |dmu| |y_j - (mu + mu')/2| <= 6 |dmu|, so clip = 6 never binds and the
chain targets the exact posterior; the privacy noise only slows mixing.

Run:  python examples/penalty_normal_mean.py
"""

from __future__ import annotations

import numpy as np

from stan_dp.samplers.penalty import penalty


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
    model = NormalMean(np.clip(rng.normal(0.4, 1.0, 20_000), -3, 3))
    prec = model.n_rows + 1 / 100
    exact_mean, exact_sd = model.y.sum() / prec, prec**-0.5

    idata = penalty(model, epsilon=8.0, delta=1e-6, iterations=1500, warmup=300, chains=4,
                    clip=6.0, step_size=0.004, proposal="gaussian", init=[0.0])
    mu = idata.posterior["mu"].values
    a = idata.attrs
    print(f"noise multiplier z = {a['noise_multiplier']:.3f}, epsilon spent = {a['epsilon_spent']:.4f} "
          f"(delta = {a['delta']:g}, {a['accountant']})")
    print(f"median noise sd of the log ratio = {float(np.median(idata.sample_stats['noise_sd'])):.2f}, "
          f"acceptance = {float(idata.sample_stats['is_accepted'].mean()):.2f}")
    print(f"private posterior: mean {mu.mean():.4f}, sd {mu.std():.4f}")
    print(f"exact posterior:   mean {exact_mean:.4f}, sd {exact_sd:.4f}")


if __name__ == "__main__":
    main()

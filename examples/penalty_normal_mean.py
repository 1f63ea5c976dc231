"""DP penalty MCMC on a NumPy density (the RowDensity protocol), compared with the exact posterior.

Model: y_i ~ N(mu, 1), mu ~ N(0, 10^2), n = 20 000 rows clamped to [-3, 3].
For |mu| <= 3 each row's log-likelihood ratio satisfies
|r_j| = |dmu| |y_j - (mu + mu')/2| <= 6 |dmu|, so clip = 6 never binds and the
chain targets the exact posterior; the privacy noise only slows mixing.

Run:  python examples/penalty_normal_mean.py
"""

from __future__ import annotations

import numpy as np
from normal_mean import NormalMean, exact_posterior

from stan_dp.samplers.penalty import penalty


def main() -> None:
    rng = np.random.default_rng(2024)
    model = NormalMean(np.clip(rng.normal(0.4, 1.0, 20_000), -3, 3))
    exact_mean, exact_sd = exact_posterior(model)

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

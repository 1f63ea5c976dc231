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
from normal_mean import NormalMean, exact_posterior

import stan_dp


def main() -> None:
    rng = np.random.default_rng(2024)
    model = NormalMean(np.clip(rng.normal(0.4, 1.0, 200_000), -3, 3))
    n0 = 1000
    temperature = n0 / model.n_rows
    exact_mean, exact_sd = exact_posterior(model, temperature)

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

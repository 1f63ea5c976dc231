"""DP Barker (seed 003, Algorithm 2, Theorem 8) on 2 000 000 rows, tempered to n0 = 20.

Model: y_i ~ N(mu, 1), mu ~ N(0, 10^2).  Each iteration reads a batch of
b = 500 rows; Theorem 8 clips each ratio to |T r_j| <= sqrt(b)/n, i.e.
|r_j| <= sqrt(b)/n0 = 1.1 here, which rarely binds for steps of the tempered
posterior's scale.  There is no noise knob: the budget and b fix how many
iterations are allowed; this run uses a few thousand of them.  The oracle
is the exact tempered posterior.

Run:  python examples/barker_normal_mean.py      (~10 s)
"""

from __future__ import annotations

import numpy as np
from normal_mean import NormalMean, exact_posterior

import stan_dp
from stan_dp.accounting import barker_step_rdp, curve_max_steps
from stan_dp.samplers.barker_correction import DEFAULT_CORRECTION_VARIANCE


def main() -> None:
    rng = np.random.default_rng(7)
    model = NormalMean(rng.normal(0.4, 1.0, 2_000_000))
    n0, batch, epsilon, delta = 20, 500, 1.0, 1e-6
    temperature = n0 / model.n_rows
    exact_mean, exact_sd = exact_posterior(model, temperature)
    allowed = curve_max_steps(barker_step_rdp(batch, model.n_rows, DEFAULT_CORRECTION_VARIANCE), epsilon, delta)

    idata = stan_dp.barker(model, epsilon=epsilon, delta=delta, batch_size=batch, iterations=2500,
                           warmup=300, chains=2, step_size=0.4, n0=n0, init=[0.0], progress=False)
    mu = idata.posterior["mu"].values
    a = idata.attrs
    print(f"n = {a['n_rows']:,}, batch {a['batch_size']}, T = {a['temperature']:g}, "
          f"clip |r_j| <= {a['clip_bound_untempered']:.3f}, C = {a['correction_variance']:g}")
    print(f"the budget allows {allowed:,} iterations in all; this run: "
          f"{a['chains']} x ({a['warmup']} + {a['iterations']}), epsilon spent = {a['epsilon_spent']:.4f} "
          f"(delta = {a['delta']:g}, {a['accountant']})")
    print(f"acceptance = {float(idata.sample_stats['is_accepted'].mean()):.2f}")
    print(f"private posterior:          mean {mu.mean():.4f}, sd {mu.std():.4f}")
    print(f"exact tempered posterior:   mean {exact_mean:.4f}, sd {exact_sd:.4f}")


if __name__ == "__main__":
    main()

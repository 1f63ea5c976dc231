"""Exponential-family penalty MCMC on a Stan model written in terms of S (Yıldırım, Alg. 3).

Model (stan_models/normal_suffstats.stan): y_i ~ N(mu, sigma), mu ~ N(0, 10),
sigma ~ half-N(0, 5), written with the summed statistic S = (Σ y_i, Σ y_i²).
The rows y never reach Stan: `statistic` clamps each row to [-C, C] and returns
s(y_i) = (y_i, y_i²), whose l2 norm is at most B = C √(1 + C²); B is the
sampler's `clip`.  Every iteration releases a fresh S + N(0, (2 z B)² I) and
costs K + 2 = 4 Stan evaluations, whatever n.

The chain starts from a private estimate: one extra release of S with the same
noise multiplier z (post-processing of a private value, accounted below), since
a data-independent start would be hopelessly far from a posterior of width
~1/√n.  The exact posterior given the clamped rows (what the chain targets) is
computed by quadrature on a grid.

Run:  python examples/expfamily_normal.py       (a few seconds after the model is compiled)
"""

from __future__ import annotations

import time
from pathlib import Path

import arviz as az
import numpy as np
from scipy import stats

from stan_dp.accounting.gaussian import calibrate_gaussian_noise, gaussian_epsilon
from stan_dp.expfamily_model import StanExpFamilyModel
from stan_dp.mechanisms import clamp_rows_l2, gaussian_release
from stan_dp.samplers.expfamily import penalty_expfamily

MODEL = Path(__file__).resolve().parent.parent / "stan_models" / "normal_suffstats.stan"
C = 3.0                        # rows clamped to [-C, C]
B = C * np.sqrt(1 + C**2)      # l2 bound of s(y) = (y, y^2)
PRIOR = {"mu_loc": 0.0, "mu_scale": 10.0, "sigma_scale": 5.0}


def statistic(rows: dict[str, np.ndarray]) -> np.ndarray:
    """Vectorised per-row statistic: (n,) rows -> (n, 2), each row of norm <= B."""
    y = np.clip(rows["y"], -C, C)
    return np.column_stack([y, y**2])


def exact_posterior(s: np.ndarray, n: int, grid: int = 801) -> dict[str, tuple[float, float]]:
    """Mean and sd of mu and sigma given S = s, by quadrature over (mu, log sigma)."""
    m_hat = s[0] / n
    v_hat = s[1] / n - m_hat**2
    mu = m_hat + np.sqrt(v_hat / n) * np.linspace(-9, 9, grid)
    tau = 0.5 * np.log(v_hat) + np.sqrt(0.5 / n) * np.linspace(-9, 9, grid)
    M, T = np.meshgrid(mu, tau, indexing="ij")
    sig = np.exp(T)
    logp = (-n * T - 0.5 * n * np.log(2 * np.pi) - (s[1] - 2 * M * s[0] + n * M**2) / (2 * sig**2)
            + stats.norm.logpdf(M, PRIOR["mu_loc"], PRIOR["mu_scale"])
            + stats.norm.logpdf(sig, 0, PRIOR["sigma_scale"]) + T)       # + log Jacobian
    w = np.exp(logp - logp.max())
    w /= w.sum()
    out = {}
    for name, x in (("mu", M), ("sigma", sig)):
        mean = float((w * x).sum())
        out[name] = (mean, float(np.sqrt((w * (x - mean) ** 2).sum())))
    return out


def main() -> None:
    epsilon, delta = 5.0, 1e-6
    chains, warmup, iterations = 4, 100, 500
    n = 500_000
    rng = np.random.default_rng(7)
    y = rng.normal(0.5, 1.0, n)          # the confidential rows
    data = {"N": n, "y": y, **PRIOR}

    t0 = time.perf_counter()
    model = StanExpFamilyModel(MODEL, data, statistic=statistic, vectorized=True)
    print(f"{model!r}  (set-up {time.perf_counter() - t0:.1f} s, incl. compile/cache lookup)")

    # One noise multiplier for everything: chains x (warmup + iterations) sampler
    # releases plus one release for the initial point.
    releases = chains * (warmup + iterations)
    z = calibrate_gaussian_noise(releases + 1, epsilon, delta)

    # Private initial point: one release of S (replace-one sensitivity 2B).
    s0, _ = clamp_rows_l2(model.row_stats(), B)
    s_init = gaussian_release(np.random.default_rng(), s0.sum(axis=0), z * 2 * B)
    mu0 = s_init[0] / n
    sigma0 = float(np.sqrt(max(s_init[1] / n - mu0**2, 1e-2)))
    init = model.unconstrain({"mu": np.array(mu0), "sigma": np.array(sigma0)})
    # Step sizes ~ posterior sds, from public n and the private sigma0 (post-processing).
    steps = [1.0 * sigma0 / np.sqrt(n), 1.0 / np.sqrt(2 * n)]

    t0 = time.perf_counter()
    evals0 = model.n_evaluations
    idata = penalty_expfamily(model, epsilon=epsilon, delta=delta, iterations=iterations,
                              noise=z, warmup=warmup, chains=chains, clip=B, step_size=steps,
                              proposal="component", init=init, progress=False)
    elapsed = time.perf_counter() - t0
    a = idata.attrs
    total_eps = gaussian_epsilon(z, releases + 1, delta)
    per_iter = (model.n_evaluations - evals0) / releases
    print(f"n = {n}, clip B = {B:.2f}, noise multiplier z = {z:.2f}, noise sd of S = {2 * z * B:.0f}")
    print(f"epsilon: sampler {a['epsilon_spent']:.3f}, with the init release {total_eps:.3f} "
          f"(delta = {delta:g}, {a['accountant']})")
    print(f"{elapsed:.1f} s for {releases} iterations, {per_iter:.2f} Stan evaluations per iteration; "
          f"acceptance {float(idata.sample_stats['is_accepted'].mean()):.2f}, "
          f"median noise sd of the log ratio {float(np.median(idata.sample_stats['noise_sd'])):.2f}")

    exact = exact_posterior(s0.sum(axis=0), n)   # non-private reference (not for publication)
    print(f"{'':8s} {'private mean':>13s} {'MCSE':>8s} {'exact mean':>11s} {'private sd':>11s} {'exact sd':>9s}")
    for name in ("mu", "sigma"):
        x = idata.posterior[name].values
        mcse = x.std() / np.sqrt(float(az.ess(x)))
        print(f"{name:8s} {x.mean():13.5f} {mcse:8.5f} {exact[name][0]:11.5f} "
              f"{x.std():11.5f} {exact[name][1]:9.5f}")


if __name__ == "__main__":
    main()

"""Smoke run of an installed stan_dp on one Python version (issue 15, item 10).

Run with the interpreter of a venv that has stan_dp installed (``.ci/run``
does this for each supported Python other than the one the full suite runs
on): import the package, compile and load a bundled model, a short private
fit with ``stan_dp.sample``, and a short non-private ``reference_fit``.
Prints the Python, ArviZ and toolchain versions and the time of each step;
exits non-zero on any failure.  A few minutes on two cores with a warm
precompiled header (the model and the NUTS service compile once per
environment: the cache key includes the TBB library directory).
"""

from __future__ import annotations

import sys
import time
import warnings

import numpy as np


def main() -> int:
    start = time.perf_counter()
    import arviz
    import httpstan

    import stan_dp
    from stan_dp.honesty import UtilityWarning

    print(f"python {sys.version.split()[0]}, stan_dp {stan_dp.__version__}, "
          f"arviz {arviz.__version__}, httpstan {httpstan.__version__}")
    rng = np.random.default_rng(0)
    n, d = 500, 2
    x = rng.normal(size=(n, d))
    y = 0.5 + x @ np.array([1.0, -1.0]) + rng.normal(size=n)
    data = {"N": n, "D": d, "X": x, "y": y, "sigma": 1.0, "prior_scale": 5.0}
    stan_file = stan_dp.bundled_model("linear_regression")

    t = time.perf_counter()
    model = stan_dp.RowModel(stan_file, data)
    assert np.all(np.isfinite(model.row_log_lik(np.zeros(model.dim))))
    print(f"compiled and loaded {model} in {time.perf_counter() - t:.0f} s")

    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UtilityWarning)  # a short run may say it is short
        fit = stan_dp.sample(model, epsilon=4, delta=1e-5, seed=1, progress=False)
    beta = fit.posterior["beta"].values.reshape(-1, d).mean(axis=0)
    assert np.all(np.isfinite(beta)), beta
    print(f"private fit in {time.perf_counter() - t:.0f} s: beta mean {np.round(beta, 2)}, "
          f"epsilon spent {fit.posterior.attrs['epsilon_spent']:.3g}, "
          f"returned {type(fit).__module__}.{type(fit).__name__}")

    t = time.perf_counter()
    ref = stan_dp.reference_fit(stan_file, data, chains=2, draws=200, warmup=200, seed=1,
                                backend="offline")
    ref_beta = ref.posterior["beta"].values.reshape(-1, d).mean(axis=0)
    assert np.allclose(ref_beta, [1.0, -1.0], atol=0.3), ref_beta
    print(f"reference fit in {time.perf_counter() - t:.0f} s: beta mean {np.round(ref_beta, 2)}, "
          f"Stan {ref.attrs['stan_version']}")
    print(f"smoke run passed in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

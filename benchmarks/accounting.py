"""Wall-clock cost of the privacy-accounting setup calls.

Samplers call these before a run (and some inside adaptive loops), so they
should stay well under 0.1 s for plain Gaussian plans.  The tests check
correctness only; this script prints the timings (cold = first call with
fresh caches, warm = repeated call).

Run:  python benchmarks/accounting.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from stan_dp.accounting import (  # noqa: E402
    Budget,
    Release,
    calibrate_gaussian_noise,
    calibrate_subsampled_gaussian_noise,
    gaussian_epsilon,
    gaussian_max_count,
    subsampled_gaussian_epsilon,
    subsampled_gaussian_max_count,
)
from stan_dp.accounting import gaussian  # noqa: E402


def _time(label: str, fn, clear=None) -> None:
    if clear is not None:
        clear()
    t0 = time.perf_counter()
    fn()
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    fn()
    warm = time.perf_counter() - t0
    print(f"{label:<58s} cold {cold * 1e3:8.2f} ms   warm {warm * 1e3:8.2f} ms")


def main() -> None:
    clear = gaussian._epsilon_for_mu.cache_clear
    b = Budget(1.0, 1e-5)
    plan = [Release(3000.0), Release(5000.0, count=10)]
    _time("gaussian_epsilon([30, 50], [1e6, 1e7])", lambda: gaussian_epsilon([30.0, 50.0], [10**6, 10**7], 1e-5), clear)
    _time("gaussian_max_count(5000, 1, 1e-5)", lambda: gaussian_max_count(5000.0, 1.0, 1e-5), clear)
    _time("calibrate_gaussian_noise(1e6, 1, 1e-5)", lambda: calibrate_gaussian_noise(10**6, 1.0, 1e-5), clear)
    _time("calibrate_gaussian_noise(1, 1e-4, 1e-12)  (tiny M)", lambda: calibrate_gaussian_noise(1, 1e-4, 1e-12), clear)
    _time("Budget.max_iterations(HMC-like plan, 4 chains)", lambda: b.max_iterations(plan, chains=4, once=[Release(5000.0)]), clear)
    _time("Budget.calibrate(HMC-like plan, 1e6 it, 4 chains)", lambda: b.calibrate(plan, 10**6, chains=4), clear)
    _time("Budget.epsilon_spent(HMC-like plan, 1e6 it, 4 chains)", lambda: b.epsilon_spent(plan, 10**6, chains=4), clear)
    sub = dict(batch_size=100, n=100_000)
    _time("subsampled_gaussian_epsilon(1.1, 1e6)", lambda: subsampled_gaussian_epsilon(1.1, 10**6, 1e-5, **sub))
    _time("subsampled_gaussian_max_count(1.1, eps=5)", lambda: subsampled_gaussian_max_count(1.1, 5.0, 1e-5, **sub))
    _time("calibrate_subsampled_gaussian_noise(1e6)", lambda: calibrate_subsampled_gaussian_noise(10**6, 1.0, 1e-5, **sub))
    mixed = [Release(0.9, batch_size=64, n=50_000), Release(30.0)]
    _time("Budget.calibrate(mixed subsampled plan, 1e6 it)", lambda: b.calibrate(mixed, 10**6))


if __name__ == "__main__":
    main()

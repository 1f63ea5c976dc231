"""Data-augmentation MCMC: time per sweep against the number of records (issue 8 benchmark).

Model: the S-5 linear regression (stan_models/linear_regression_records.stan,
p = 2, records (x_i, y_i)), the S-5 release (9 clamped record statistics,
Laplace noise, ε = 1), n = 10², 10³, 10⁴ records, one chain.  For each n:

- ms per sweep of ``stan_dp.augmented_sample`` with the HMC θ-update
  (10 leapfrog steps on the Stan log density of the imputed records) and
  with the exact conjugate θ-update of the example, and the split of a sweep
  into phases (``profile=``): ``construct`` (the model on the imputed records,
  in memory), ``theta`` (HMC), ``generate`` (n proposals from generated
  quantities), ``sweep`` (record statistics and the n accept/reject decisions);
- the baseline it replaces, measured in the same run: building the model on
  the same records through JSON (``stanio`` + ``bridgestan.StanModel``).

The seed (S-6) reports ~330 s per 10⁴-iteration chain at n = 100, i.e. ~33 ms
per sweep, on a 2 × 64-core server; printed as a sanity figure.

Run:  python benchmarks/augmentation.py [--sweeps 300]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from rows import best_time  # noqa: E402
from private_linear_regression import (  # noqa: E402
    M, P, SENSITIVITY, SIGMA2, TAU, X_RANGE, Y_RANGE, conjugate_beta, regression_statistic,
)

import stan_dp  # noqa: E402

SEED_MS_PER_SWEEP = 330.0 / 10_000 * 1e3


def main() -> None:
    import bridgestan
    import stanio

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=300)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10_000])
    args = parser.parse_args()
    lib = stan_dp.compile_model(ROOT / "stan_models" / "linear_regression_records.stan")
    privacy = stan_dp.new_privacy(regression_statistic, stan_dp.Laplace(epsilon=1.0, sensitivity=SENSITIVITY),
                                  clamp={"X": X_RANGE, "y": Y_RANGE})
    print(f"{'n':>6} {'update':>9} {'ms/sweep':>9} {'us/record':>9}   phases (ms per sweep)")
    rows = []
    for n in args.sizes:
        shared = {"N": n, "D": P, "m": M, "sigma": math.sqrt(SIGMA2), "tau": TAU}
        model = stan_dp.StanRecordModel(lib, {**shared, "X": np.zeros((n, P)), "y": np.zeros(n)})
        rng = np.random.default_rng(n)
        records = model.generate(np.zeros(model.dim), model.new_rng(1))
        s_dp = privacy.release(records, rng)
        for name, update in (("hmc", "hmc"), ("conjugate", conjugate_beta)):
            profile: dict[str, float] = {}
            t0 = time.perf_counter()
            stan_dp.augmented_sample(model, privacy, s_dp, iterations=args.sweeps, warmup=50, chains=1,
                                     theta_update=update, seed=1, profile=profile)
            total = args.sweeps + 50
            ms = sum(profile.values()) / total * 1e3
            phases = "  ".join(f"{k} {v / total * 1e3:.3f}" for k, v in profile.items())
            print(f"{n:>6} {name:>9} {ms:>9.3f} {ms * 1e3 / n:>9.2f}   {phases}"
                  f"   (end to end {(time.perf_counter() - t0) / total * 1e3:.3f})")
            rows.append((n, name, ms))
        data_json = {**shared, **records}

        def via_json() -> None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                bridgestan.StanModel(str(lib), stanio.dump_stan_json(data_json), warn=False)

        t_json = best_time(via_json, repeat=3)
        t_mem = best_time(lambda: model.density(records), repeat=5)
        print(f"{n:>6} construct: in memory {t_mem * 1e3:.3f} ms, via JSON {t_json * 1e3:.3f} ms "
              f"({t_json / t_mem:.0f}x)")
    for name in ("hmc", "conjugate"):
        by_n = {n: ms for n, nm, ms in rows if nm == name}
        if 100 in by_n and 10_000 in by_n:
            print(f"{name}: 10^4 / 10^2 records: {by_n[10_000] / by_n[100]:.1f}x the time per sweep "
                  f"(100x the records)")
    if any(n == 100 for n, _, _ in rows):
        ms100 = min(ms for n, _, ms in rows if n == 100)
        print(f"seed S-6: ~{SEED_MS_PER_SWEEP:.0f} ms per sweep at n = 100 (330 s per 10^4 sweeps); "
              f"here {ms100:.2f} ms ({SEED_MS_PER_SWEEP / ms100:.0f}x faster)")


if __name__ == "__main__":
    main()

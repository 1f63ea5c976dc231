"""Print the README's accounting tables (markdown), computed by stan_dp.accounting.

Run:  python examples/accounting_table.py
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    import stan_dp  # noqa: F401
except ModuleNotFoundError:  # running from a source checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stan_dp.accounting import Budget, PrivacyBudgetError, Release, calibrate_gaussian_noise, gaussian_max_count
from stan_dp.accounting.bounds import advanced_composition_gaussian_max_count, zcdp_max_count

DELTA = 1e-5
EPSILONS = (0.5, 1.0, 2.0, 5.0)
MULTIPLIERS = (10.0, 30.0, 100.0, 300.0)


def iterations_table() -> str:
    head = "| noise multiplier z | " + " | ".join(f"ε = {e:g}" for e in EPSILONS) + " |"
    rule = "|---|" + "---|" * len(EPSILONS)
    rows = [head, rule]
    for z in MULTIPLIERS:
        cells = []
        for e in EPSILONS:
            exact = gaussian_max_count(z, e, DELTA)
            zc = zcdp_max_count(z, e, DELTA)
            adv = advanced_composition_gaussian_max_count(z, e, DELTA)
            cells.append(f"{exact:,} / {zc:,} / {adv:,}")
        rows.append(f"| {z:g} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def noise_table(iterations: tuple[int, ...] = (100, 1_000, 10_000)) -> str:
    head = "| iterations | " + " | ".join(f"ε = {e:g}" for e in EPSILONS) + " |"
    rule = "|---|" + "---|" * len(EPSILONS)
    rows = [head, rule]
    for k in iterations:
        rows.append(
            f"| {k:,} | " + " | ".join(f"{calibrate_gaussian_noise(k, e, DELTA):.1f}" for e in EPSILONS) + " |"
        )
    return "\n".join(rows)


def _max_iterations_or_zero(budget: Budget, plan: list[Release]) -> int:
    try:
        return budget.max_iterations(plan)
    except PrivacyBudgetError:
        return 0


def subsampled_table(n: int = 100_000, batch_sizes: tuple[int, ...] = (100, 1_000, 10_000), z: float = 2.0) -> str:
    head = "| batch b (of n = 100,000) | " + " | ".join(f"ε = {e:g}" for e in EPSILONS) + " |"
    rule = "|---|" + "---|" * len(EPSILONS)
    rows = [head, rule]
    for b in batch_sizes:
        cells = [f"{_max_iterations_or_zero(Budget(e, DELTA), [Release(z, batch_size=b, n=n)]):,}" for e in EPSILONS]
        rows.append(f"| {b:,} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main() -> None:
    print(f"Iterations of a one-release-per-iteration sampler (penalty MCMC) at δ = {DELTA:g}:")
    print("exact (PLD) / zCDP rule (Räisä Thm 6) / Yıldırım Thm 1 machinery (Thms 2+3)\n")
    print(iterations_table())
    print(f"\nNoise multiplier needed for a given number of iterations (exact, δ = {DELTA:g}):\n")
    print(noise_table())
    print(f"\nIterations with subsampling (z = 2, one release per iteration, RDP + WBK, δ = {DELTA:g}):\n")
    print(subsampled_table())


if __name__ == "__main__":
    main()

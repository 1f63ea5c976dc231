"""Shared machinery of the banana experiments (Räisä 2021, seed 003, Section 7).

Used by ``banana_clipping.py`` (Fig. 7.1) and ``banana_privacy_utility.py``
(Fig. 7.2).  The banana posterior of Theorem 5 has an exact sampler
(:mod:`stan_dp.banana`), so every run is scored by its MMD to an exact sample
of its target, next to the baseline MMD between independent exact samples.
"""

from __future__ import annotations

import csv
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

import stan_dp
from stan_dp.banana import banana_data, banana_posterior

ROOT = Path(__file__).resolve().parent.parent
BANANA = ROOT / "stan_models" / "banana.stan"

REFERENCE_DRAWS = 2000
"""Exact draws the runs are compared with (Section 7.2: 2000)."""
BASELINE_REPEATS = 10
"""Independent exact samples compared with the reference for the baseline band (Fig. 7.1)."""


@dataclass
class Problem:
    """One banana posterior: data, compiled model, exact reference and MMD baseline."""

    n: int
    d: int
    temperature: float
    data: dict
    model: Any
    reference: Any
    baseline: np.ndarray

    @property
    def posterior_sd(self) -> np.ndarray:
        """Data-independent scale of the target: sd of ``z = g^-1(theta)`` per coordinate.

        ``1 / sqrt(T n tau_k + tau_0)`` depends only on n, T and the model's
        public hyperparameters, so step sizes built from it leak nothing.
        """
        tau = 1.0 / np.asarray(self.data["sigma"]) ** 2
        return 1.0 / np.sqrt(self.temperature * self.n * tau + 1.0 / self.data["sigma0"] ** 2)


def make_problem(n: int, d: int, temperature: float = 1.0, seed: int = 2021) -> Problem:
    """Simulate data with the Section 7.2 settings and prepare the exact reference."""
    data = banana_data(n, d, seed=seed)
    model = stan_dp.RowModel(BANANA, data)
    reference = banana_posterior(data, draws=REFERENCE_DRAWS, temperature=temperature, seed=seed + 1)
    baseline = np.array([
        stan_dp.mmd(banana_posterior(data, draws=REFERENCE_DRAWS, temperature=temperature,
                                     seed=seed + 100 + r), reference)
        for r in range(BASELINE_REPEATS)
    ])
    return Problem(n, d, temperature, data, model, reference, baseline)


def second_half(fit: Any) -> Any:
    """The latter half of each chain's draws (Section 7.2 discards the first half)."""
    if isinstance(fit, dict):
        return {k: v[:, v.shape[1] // 2:] for k, v in fit.items()}
    draws = fit.posterior.sizes["draw"]
    return fit.posterior.isel(draw=slice(draws // 2, None))


def score(problem: Problem, fit: Any) -> dict[str, float]:
    """MMD of a fit's latter half to the exact sample of its target."""
    return {"mmd": stan_dp.mmd(second_half(fit), problem.reference)}


def write_csv(path: Path, rows: Iterable[dict]) -> Path:
    """Write dict rows to CSV (columns of the first row)."""
    rows = list(rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """``(fn(), seconds)``."""
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def theta_scale(problem: Problem) -> np.ndarray:
    """Data-independent scale of each theta coordinate under the target.

    ``theta_2 = z_2 - a (z_1 - m)^2 - b`` adds about ``sqrt(2) a var(z_1)`` to
    the sd of ``theta_2`` (the banana's bend, taking the centre ``m`` at the
    prior's centre); the others are the sds of ``z``.
    """
    sd = problem.posterior_sd.copy()
    sd[1] = np.sqrt(sd[1] ** 2 + 2.0 * (problem.data["a"] * sd[0] ** 2) ** 2)
    return sd


def run_kernel(kernel: Callable, state: Any, iterations: int, seed: int) -> tuple[np.ndarray, list]:
    """Run a (non-private) kernel; returns positions ``(iterations, dim)`` and infos."""
    streams = np.random.SeedSequence(seed).spawn(2)
    rng_prop, rng_noise = (np.random.default_rng(s) for s in streams)
    positions, infos = [], []
    for _ in range(iterations):
        state, info = kernel(rng_prop, rng_noise, state)
        positions.append(np.array(state.position))
        infos.append(info)
    return np.array(positions), infos


def as_fit(positions: np.ndarray) -> dict:
    """A one-chain posterior mapping (theta has no constraints: unconstrained = constrained)."""
    return {"theta": positions[None, :, :]}


def figure_grid(rows: int, cols: int, height: float):
    """A matplotlib figure with a ``rows x cols`` grid of axes (headless backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(rows, cols, figsize=(5 * cols, height * rows), squeeze=False)


def save_figure(fig: Any, path: Path) -> Path:
    """Save a figure as PNG and close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


__all__ = ["figure_grid", "save_figure", "Problem", "make_problem", "second_half", "score", "write_csv", "timed",
           "theta_scale", "run_kernel", "as_fit"]

"""The privacy–utility experiment of Räisä (2021, seed 003, Section 7.4, Fig. 7.2).

MMD between each private sampler's posterior and the exact banana posterior
(Theorem 5) as a function of ε, for the 2-D and 10-D bananas, with and
without tempering (``T = n0 / n``; a tempered run is scored against the exact
*tempered* posterior, which is what it targets, and also against the
untempered one).  δ = 0.1 / n as in the thesis.

Every tuning value (step sizes, clip bounds, batch sizes) is computed from n,
d, T and the model's public hyperparameters only — never from the data — so
the runs are genuinely private.

Usage::

    python examples/banana_privacy_utility.py --quick     # a few minutes
    python examples/banana_privacy_utility.py             # the seed's sizes (n = 10^5)

Writes ``banana_privacy_utility.csv`` and ``banana_privacy_utility.png`` to ``--out``.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np

import stan_dp
from banana_experiments import figure_grid, save_figure, Problem, make_problem, score, second_half, theta_scale, timed, write_csv

FULL = {"n": 100_000, "dims": (2, 10), "epsilons": (1.0, 2.0, 3.0, 4.0, 5.0, 6.0),
        "n0": 1000, "iterations": 3000, "hmc_iterations": 500, "batch_size": 1000}
QUICK = {"n": 5_000, "dims": (2, 10), "epsilons": (1.0, 3.0, 6.0),
         "n0": 500, "iterations": 1000, "hmc_iterations": 150, "batch_size": 250}


def clip_bound(problem: Problem) -> float:
    """Data-independent clip bound ``L``: 3 × the norm of a typical row's score.

    A row's log-likelihood has gradient ``(x_k − z_k) / σ_k²`` in ``z``,
    typically ``1 / σ_k`` in size, so ``L = 3 ||1/σ||`` clips only unusual rows.
    """
    return float(3.0 * np.linalg.norm(1.0 / np.asarray(problem.data["sigma"])))


def penalty_step(problem: Problem, eps: float, iterations: int) -> np.ndarray:
    """Random-walk step: the usual ``2.38/sqrt(d)`` scaling, shrunk until the penalty noise is small.

    The released ratio has noise sd ``z · 2 · T · L · ||θ′ − θ||``; with the
    noise multiplier ``z`` that (ε, δ) and the iteration count imply (public),
    steps of norm about ``1 / (2 z T L)`` keep that sd near 1 so the penalty
    ``exp(−σ²/2)`` does not freeze the chain.
    """
    from stan_dp.accounting import Budget, Release

    z = Budget(eps, 0.1 / problem.n).calibrate([Release(1.0)], iterations, chains=1)
    scale = theta_scale(problem)
    usual = 2.38 / np.sqrt(problem.d) * scale
    limit = 1.0 / (2.0 * z * problem.temperature * clip_bound(problem))
    return usual * min(1.0, limit / np.linalg.norm(usual))


def run_penalty(problem: Problem, eps: float, cfg: dict, seed: int) -> Any:
    return stan_dp.penalty(
        problem.model, epsilon=eps, delta=0.1 / problem.n, iterations=cfg["iterations"],
        clip=clip_bound(problem), step_size=penalty_step(problem, eps, cfg["iterations"]),
        proposal="gaussian", temperature=problem.temperature, chains=1,
        init=np.zeros(problem.d), seed=seed, progress=False)


def subsampled_step(problem: Problem, eps: float, cfg: dict) -> np.ndarray:
    """Like :func:`penalty_step`, for the subsampled penalty's noise sd ``z (a1 h + a2 h²)``.

    ``z`` comes from the RDP accountant for ``iterations`` subsampled releases
    and ``(a1, a2)`` from Lemma 1 / Theorem 9: both public.  The step norm
    ``h`` solves ``z (a1 h + a2 h²) = 1``.
    """
    from stan_dp.accounting import Budget, Release
    from stan_dp.samplers.subsampled import sensitivity_coefficients

    b = cfg["batch_size"]
    z = Budget(eps, 0.1 / problem.n).calibrate(
        [Release(1.0, batch_size=b, n=problem.n)], cfg["iterations"], chains=1)
    a1, a2 = sensitivity_coefficients(problem.n, b, problem.temperature, clip_bound(problem))
    h = (-a1 + np.sqrt(a1 * a1 + 4 * a2 / z)) / (2 * a2) if a2 > 0 else 1.0 / (z * a1)
    usual = 2.38 / np.sqrt(problem.d) * theta_scale(problem)
    return usual * min(1.0, h / np.linalg.norm(usual))


def run_subsampled(problem: Problem, eps: float, cfg: dict, seed: int) -> Any:
    return stan_dp.subsampled_penalty(
        problem.model, epsilon=eps, delta=0.1 / problem.n, batch_size=cfg["batch_size"],
        iterations=cfg["iterations"], clip=clip_bound(problem),
        step_size=subsampled_step(problem, eps, cfg),
        temperature=problem.temperature, chains=1, init=np.zeros(problem.d), seed=seed,
        progress=False)


def run_barker(problem: Problem, eps: float, cfg: dict, seed: int) -> Any:
    return stan_dp.barker(
        problem.model, epsilon=eps, delta=0.1 / problem.n, batch_size=cfg["batch_size"],
        step_size=2.38 / np.sqrt(problem.d) * theta_scale(problem),
        temperature=problem.temperature, chains=1, init=np.zeros(problem.d), seed=seed,
        progress=False)


def run_hmc(problem: Problem, eps: float, cfg: dict, seed: int) -> Any:
    return stan_dp.hmc(
        problem.model, epsilon=eps, delta=0.1 / problem.n, iterations=cfg["hmc_iterations"],
        temperature=problem.temperature, chains=1, init=np.zeros(problem.d), seed=seed,
        progress=False)


SAMPLERS: dict[str, tuple[str, Callable]] = {
    "penalty": ("penalty", run_penalty),
    "subsampled": ("subsampled_penalty", run_subsampled),
    "barker": ("barker", run_barker),
    "hmc": ("hmc", run_hmc),
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a few minutes")
    parser.add_argument("--out", default=".", help="output folder")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--samplers", nargs="+", default=list(SAMPLERS), choices=list(SAMPLERS))
    parser.add_argument("--n", type=int, default=None, help="override the number of rows")
    parser.add_argument("--dims", type=int, nargs="+", default=None, help="override the dimensions")
    parser.add_argument("--epsilons", type=float, nargs="+", default=None, help="override the epsilons")
    args = parser.parse_args(argv)
    cfg = dict(QUICK if args.quick else FULL)
    for key in ("n", "dims", "epsilons"):
        if getattr(args, key) is not None:
            cfg[key] = getattr(args, key)
    out = Path(args.out)
    rows = []
    for d in cfg["dims"]:
        for tempered in (False, True):
            temperature = cfg["n0"] / cfg["n"] if tempered else 1.0
            problem = make_problem(cfg["n"], d, temperature)
            untempered = problem if not tempered else make_problem(cfg["n"], d, 1.0)
            print(f"d = {d}, n = {cfg['n']}, T = {temperature:g}: baseline MMD {problem.baseline.mean():.4f}")
            for name in args.samplers:
                attr, run = SAMPLERS[name]
                if not hasattr(stan_dp, attr):
                    print(f"  {name}: not available in this version, skipped")
                    continue
                for eps in cfg["epsilons"]:
                    try:
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore")
                            fit, seconds = timed(lambda: run(problem, eps, cfg, args.seed))
                    except (ValueError, stan_dp.PrivacyBudgetError) as exc:
                        print(f"  {name:10s} eps = {eps:<4g} refused: {str(exc).splitlines()[0]}")
                        continue
                    row = {"d": d, "n": cfg["n"], "temperature": temperature, "sampler": name,
                           "epsilon": eps, **score(problem, fit),
                           "mmd_untempered": stan_dp.mmd(second_half(fit), untempered.reference),
                           "baseline_mmd": float(problem.baseline.mean()),
                           "draws": int(fit.posterior.sizes["draw"]),
                           "acceptance": float(fit.sample_stats["acceptance_rate"].mean()),
                           "seconds": round(seconds, 2)}
                    rows.append(row)
                    print(f"  {name:10s} eps = {eps:<4g} MMD {row['mmd']:.4f} "
                          f"(vs untempered {row['mmd_untempered']:.4f})  acceptance "
                          f"{row['acceptance']:.2f}  ({seconds:.1f} s)")
    csv_path = write_csv(out / "banana_privacy_utility.csv", rows)
    png_path = plot(rows, out / "banana_privacy_utility.png")
    print(f"written: {csv_path}, {png_path}")
    return 0


def plot(rows: list[dict], path: Path) -> Path:
    """Fig. 7.2's layout: MMD vs ε per sampler; columns d, rows tempering."""
    dims = sorted({r["d"] for r in rows})
    temps = sorted({r["temperature"] < 1 for r in rows})
    fig, axes = figure_grid(len(temps), len(dims), height=3.6)
    for i, tempered in enumerate(temps):
        for j, d in enumerate(dims):
            ax = axes[i, j]
            sel = [r for r in rows if r["d"] == d and (r["temperature"] < 1) == tempered]
            for name in sorted({r["sampler"] for r in sel}):
                pts = [r for r in sel if r["sampler"] == name]
                ax.plot([r["epsilon"] for r in pts], [r["mmd"] for r in pts], "o-", label=name)
            if sel:
                ax.axhline(sel[0]["baseline_mmd"], color="k", lw=1, label="exact vs exact")
            ax.set_yscale("log")
            ax.set_xlabel("epsilon")
            ax.set_ylabel("MMD to exact posterior")
            ax.set_title(f"{d}-D banana, " + ("tempered" if tempered else "not tempered"))
            ax.legend(fontsize=8)
    return save_figure(fig, path)


if __name__ == "__main__":
    raise SystemExit(main())

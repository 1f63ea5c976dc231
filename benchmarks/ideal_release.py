"""What one ideal release could reach: is issue 13's target within reach of any clipped-score estimate?

The target of issue 13 is ``max(3 floor, 0.5)`` on the *worst* coordinate, with
``floor = k C_w / mu`` the noise sd per coordinate of one release of the
score sum clipped at ``C_w`` (the 90th percentile of the whitened per-row
score norms) with the whole budget, in the posterior's own frame
(``stan_dp.information_floor``).  That floor leaves out two costs every
clipped-score estimate pays even with a perfect frame, a perfect start and
the whole budget: the clipping bias (a bound at ``C_w`` clips a tenth of
the rows) and the largest of ``d`` coordinates' errors.  This script
computes both for the *ideal release* (NOT private: it reads the raw rows and
the reference fit, a yardstick only):

at the reference mean ``m``, in the frame ``R = Sigma^{1/2}`` (``Sigma`` the
reference covariance, unconstrained), the one-step estimate of one release
clipped at ``kappa C_w`` with the whole budget,

    u = sum_i clip_{kappa C_w}(R g_i) + R grad log prior(m) + N(0, (k kappa C_w / mu)^2 I),

whose error in posterior sds is ``R u / sd`` per coordinate (the curvature is
the identity in that frame).  Without noise ``u`` is the clipping bias plus
the distance from the mean to the mode (a skewed posterior's: any mode-based
estimate pays it).  Per model and data set it prints the floor, the target,
the mode's offset, and for each ``kappa`` the noiseless worst error, the
median worst error over ``--draws`` noise draws and the fraction of them that
meet the target.  Where even the best ``kappa`` meets the target in few
draws, no search built on clipped-score releases can meet it there: what
remains is warning, which every run there does.

Models: those of ``benchmarks/adaptation_trace.py`` (the published-style
models and the utility table's GLMs); the references are NUTS fits
(``--cache DIR`` keeps their draws, shared with ``adaptation_trace.py``).

Usage: ``python benchmarks/ideal_release.py [--models gamma weibull ...] [--n 1000]
[--epsilon 1] [--data-seeds 0 1] [--kappas 1 1.5 2 3] [--draws 4000] [--cache DIR]``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

import adaptation_trace  # noqa: E402  (a sibling script: the models and their references)
from stan_dp.accounting import sensitivity_factor  # noqa: E402
from stan_dp.adaptation.forecast import gdp_mu  # noqa: E402
from stan_dp.density import prior_gradient  # noqa: E402
from stan_dp.information_floor import whitened_scores  # noqa: E402


def ideal_errors(model: Any, draws: np.ndarray, epsilon: float, delta: float, kappas: list[float],
                 n_draws: int, seed: int, relation: str = "replace_one") -> dict[str, Any]:
    """Floor, target, the mode's offset and, per ``kappa``, the ideal release's worst errors.

    Parameters
    ----------
    model : RowModel
        The model with its data (its raw rows are read: NOT private).
    draws : ndarray, shape (draws, dim)
        The reference fit's unconstrained draws.
    epsilon, delta : float
        The budget the release spends whole.
    kappas : list of float
        Clip bounds as multiples of the actual ``C_w`` (the 90th percentile of the whitened
        per-row score norms at the reference mean).
    n_draws : int
        Noise draws per ``kappa`` (the same draws for every ``kappa``).
    seed : int
        Seed of the noise draws.
    relation : str
        Neighbouring relation (its sensitivity factor ``k``).

    Returns
    -------
    dict
        ``floor`` (``k C_w / mu``), ``target`` (``max(3 floor, 0.5)``), ``offset`` (the worst
        coordinate's distance from the mean to the exact one-step mode, posterior sds) and
        ``kappas``: per ``kappa`` its noiseless worst error (``bias``), the median worst error
        over the noise draws, the fraction of them within the target (``met``) and the fraction
        of rows clipped.
    """
    mean, root, whitened = whitened_scores(model, draws)
    sd = np.sqrt(np.diag(root @ root))   # root @ root is the draws' covariance
    norms = np.linalg.norm(whitened, axis=1)
    c_w = float(np.quantile(norms, 0.9))
    k = sensitivity_factor(relation)
    mu = gdp_mu(epsilon, delta)
    floor = k * c_w / mu
    target = max(3.0 * floor, 0.5)
    _, pg = prior_gradient(model, mean)
    prior = root @ np.where(np.isfinite(pg), pg, 0.0)
    exact = whitened.sum(axis=0) + prior
    offset = float(np.max(np.abs(root @ exact) / sd))
    noise = np.random.default_rng(seed).standard_normal((n_draws, mean.size))
    per_kappa = []
    for kappa in kappas:
        bound = kappa * c_w
        with np.errstate(all="ignore"):
            scale = np.minimum(1.0, bound / np.where(norms > 0.0, norms, 1.0))
        u = (whitened * scale[:, None]).sum(axis=0) + prior
        noiseless = np.abs(root @ u) / sd
        errors = np.abs((u + noise * (k * bound / mu)) @ root.T) / sd
        worst = errors.max(axis=1)
        per_kappa.append({"kappa": kappa, "bias": float(noiseless.max()), "median": float(np.median(worst)),
                          "met": float(np.mean(worst <= target)), "clipped": float(np.mean(norms > bound))})
    return {"floor": floor, "target": target, "offset": offset, "kappas": per_kappa}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["gamma", "weibull", "hetero", "roaches", "earnings",
                                                    "ordered", "beta", "wells", "binomial"],
                    choices=[*adaptation_trace.published_models.MODELS, *adaptation_trace.GLMS])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--delta", type=float, default=1e-5)
    ap.add_argument("--data-seeds", nargs="+", type=int, default=[0, 1])
    ap.add_argument("--kappas", nargs="+", type=float, default=[1.0, 1.25, 1.5, 2.0, 3.0, 4.0])
    ap.add_argument("--draws", type=int, default=4000)
    ap.add_argument("--cache", help="directory keeping the references' unconstrained draws")
    args = ap.parse_args(argv)
    if any(not kappa > 0.0 for kappa in args.kappas):
        raise SystemExit("--kappas must be positive")
    if args.draws < 100:
        raise SystemExit("--draws must be at least 100")
    workdir = Path(tempfile.mkdtemp())
    cache = None if args.cache is None else Path(args.cache)
    print(f"n = {args.n}, epsilon = {args.epsilon}, delta = {args.delta}; per kappa: noiseless worst error "
          "(clipping bias + mode offset) / median worst error / fraction meeting the target, in posterior sds")
    print(f"{'model':15s} {'data':4s} {'dim':>3s} {'floor':>6s} {'target':>6s} {'offset':>6s}  "
          + "  ".join(f"{'k=' + format(k, 'g'):>17s}" for k in args.kappas) + "  best")
    for name in args.models:
        for data_seed in args.data_seeds:
            model, draws = adaptation_trace.model_and_reference(name, args.n, data_seed, workdir, cache)
            r = ideal_errors(model, draws, args.epsilon, args.delta, args.kappas, args.draws, data_seed)
            best = max(r["kappas"], key=lambda c: (c["met"], -c["median"]))
            cells = "  ".join(f"{c['bias']:5.2f}/{c['median']:5.2f}/{c['met']:4.2f}" for c in r["kappas"])
            print(f"{name:15s} {data_seed:<4d} {draws.shape[1]:3d} {r['floor']:6.3f} {r['target']:6.2f} "
                  f"{r['offset']:6.2f}  {cells}  {best['kappa']:g}: met {best['met']:.2f}", flush=True)


if __name__ == "__main__":
    main()

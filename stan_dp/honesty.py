"""Honest output: diagnostics of released draws and the warnings stan_dp raises.

Everything here is post-processing of what a private run released (the
draws, the released acceptance probabilities) or a forecast from public facts,
so it may be published with the fit.  A run that did not mix, whose chains
disagree, or whose budget cannot buy an accurate answer says so with a
:class:`UtilityWarning` and in ``attrs["warnings"]``.
"""

from __future__ import annotations

import warnings
from typing import Any, Mapping

import numpy as np
from scipy import stats

__all__ = [
    "UtilityWarning",
    "RHAT_LIMIT",
    "MIN_BULK_ESS",
    "chain_diagnostics",
    "mixing_warnings",
    "moving_coordinates",
    "over_dispersed",
    "pulled_coordinates",
    "emit",
]

RHAT_LIMIT = 1.05
"""Largest acceptable rank-normalised split R-hat (Vehtari et al. 2021 recommend 1.01 for
final results; a private chain is judged more leniently, but above this it did not mix)."""
MIN_BULK_ESS = 20.0
"""Smallest acceptable bulk ESS per chain."""


class UtilityWarning(UserWarning):
    """A private result is less accurate than it looks (did not mix, budget too small, ...)."""


def chain_diagnostics(draws: Mapping[str, np.ndarray], acceptance: np.ndarray | None = None) -> dict[str, Any]:
    """R-hat, bulk ESS, acceptance per chain, and whether any chain stood still.

    Parameters
    ----------
    draws : mapping of str to ndarray
        Constrained draws, each ``(chain, draw, ...)``.
    acceptance : ndarray, optional
        Released acceptance probabilities ``(chain, draw)``.

    Returns
    -------
    dict
        ``max_rhat``, ``min_ess_bulk`` (over all components), ``acceptance``
        (per-chain mean, list), ``stuck_chains`` (chains whose draws never
        change).
    """
    import arviz as az

    arrays = {k: np.asarray(v, dtype=float) for k, v in draws.items()}
    flat = [a.reshape(a.shape[0], a.shape[1], -1) for a in arrays.values()]
    x = np.concatenate(flat, axis=2) if flat else np.empty((1, 1, 0))
    chains, n_draws, k = x.shape
    stuck = [int(c) for c in range(chains) if n_draws > 1 and np.all(x[c] == x[c, :1])]
    rhat = ess = float("nan")
    if k and n_draws >= 4:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rhats, esss = [], []
            for j in range(k):
                comp = x[:, :, j]
                if np.all(comp == comp.flat[0]):
                    rhats.append(np.inf)
                    esss.append(0.0)
                    continue
                rhats.append(float(az.rhat(comp)) if chains > 1 else np.nan)
                esss.append(float(az.ess(comp, method="bulk")))
            rhat = float("nan") if np.all(np.isnan(rhats)) else float(np.nanmax(rhats))
            ess = float(np.nanmin(esss))
    acc = [] if acceptance is None else [float(a) for a in np.nanmean(np.asarray(acceptance, dtype=float), axis=1)]
    return {"max_rhat": rhat, "min_ess_bulk": ess, "acceptance": acc, "stuck_chains": stuck,
            "chains": chains, "draws": n_draws}


def mixing_warnings(diag: Mapping[str, Any]) -> list[str]:
    """Plain-language warnings for :func:`chain_diagnostics` output (empty if the chains look fine)."""
    out = []
    stuck = diag.get("stuck_chains", [])
    if stuck:
        out.append(
            f"{len(stuck)} of {diag['chains']} chain(s) never moved: their draws are the starting "
            "point, not a posterior. The privacy noise is too large for this sampler at this budget; "
            "use stan_dp.sample(..., method='gaussian') or a larger epsilon, n or fewer iterations.")
    acc = diag.get("acceptance") or []
    if acc and max(acc) < 0.01 and not stuck:
        out.append(f"acceptance below 1% in every chain (max {max(acc):.3g}): the chains barely moved.")
    rhat = diag.get("max_rhat", float("nan"))
    if rhat > RHAT_LIMIT:   # inf (a constant component) included, nan (one chain) not
        out.append(f"the chains disagree (max R-hat {rhat:.3g} > {RHAT_LIMIT}): the draws are not a "
                   "sample from one posterior; their intervals are not credible intervals.")
    ess = diag.get("min_ess_bulk", float("nan"))
    if ess < MIN_BULK_ESS * max(1, diag.get("chains", 1)) and not stuck:   # nan: not judged
        out.append(f"bulk ESS is only {ess:.3g}: too few effective draws for means or intervals.")
    return out


DISPERSION_LIMIT = 1.5
""":func:`over_dispersed` flags a settled search whose pooled rounds' one-step estimates disagree by
more than this (``Q / dof``, :attr:`stan_dp.adaptation.result.AdaptationResult.dispersion`)."""
DISPERSION_LEVEL = 0.99
""":func:`over_dispersed` also asks ``Q`` beyond this quantile of its chi-squared law under the
privacy noise alone, so few pooled rounds in few dimensions are not flagged by noise."""


def over_dispersed(dispersion: float, dim: int, rounds: int) -> bool:
    """Whether a search's pooled rounds disagree far beyond their noise (post-processing).

    ``dispersion`` is ``Q / dof`` of the pool's one-step estimates
    (:func:`stan_dp.adaptation.pooling._pooled_estimate`): with ``rounds``
    rounds in ``dim`` dimensions, ``Q`` is chi-squared with ``dof = dim
    (rounds - 1)`` degrees of freedom where they differ by their noise
    alone.  The random-effects pooling widens the reported noise to cover
    that disagreement, but not a shift the rounds share, so a pool this
    dispersed may sit far from the mode.  Flagged where ``Q / dof`` exceeds
    :data:`DISPERSION_LIMIT` and ``Q`` its :data:`DISPERSION_LEVEL` quantile
    (at most 1 % of pools whose rounds differ by noise alone).  A sign, not a
    measure of distance (Stan against NUTS, docs/adaptation.md §5): a
    20-county varying intercept at epsilon = 64 that settled 22 posterior sds
    off had 2.10 at 240 degrees of freedom; over 300 settled runs of the
    41-cell battery it flags 1 of the 112 within 1 sd, 3 of the 172 within
    1-3 and 2 of the 16 beyond 3 (a Student-t regression 8.3 and 6.0 sds
    off: 1.71 and 1.56); the GLMs at 10^4-10^5 rows stay at 0.82-1.23.
    """
    if rounds < 2 or dim < 1 or not np.isfinite(dispersion):
        return False
    dof = dim * (rounds - 1)
    return bool(dispersion > DISPERSION_LIMIT and dispersion * dof > stats.chi2.ppf(DISPERSION_LEVEL, dof))


MOVING_WINDOW = 3
""":func:`moving_coordinates` looks at this many last steps of a search."""
MOVING_SDS = 3.0
""":func:`moving_coordinates` flags a coordinate that moved by more than this many reported sds."""


def moving_coordinates(path: np.ndarray, sd: np.ndarray, window: int = MOVING_WINDOW,
                       threshold: float = MOVING_SDS) -> np.ndarray:
    """Coordinates a search was still walking along when its rounds ran out (post-processing).

    A coordinate is flagged when each of the last ``window`` steps of
    ``path`` (points, one per round) moved it the same way and together by
    more than ``threshold`` times ``sd`` (the reported posterior sd): the
    search did not reach the mode along it, and the reported spread does not
    cover the distance left.  Noise-driven wandering near a mode changes
    direction and is not flagged.

    Parameters
    ----------
    path : ndarray, shape (rounds + 1, dim)
        The search's points (released values only).
    sd : ndarray, shape (dim,)
        Reported posterior sd per coordinate (same space as ``path``).

    Returns
    -------
    ndarray of bool, shape (dim,)
    """
    path = np.asarray(path, dtype=float)
    sd = np.asarray(sd, dtype=float)
    if path.ndim != 2 or path.shape[0] <= window or sd.shape != path.shape[1:]:
        return np.zeros(path.shape[-1] if path.ndim == 2 else 0, dtype=bool)
    steps = np.diff(path[-(window + 1):], axis=0)
    one_way = np.all(steps > 0, axis=0) | np.all(steps < 0, axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        far = np.abs(path[-1] - path[-(window + 1)]) > threshold * sd
    return one_way & far & np.all(np.isfinite(steps), axis=0)


PULL_SDS = 3.0
""":func:`pulled_coordinates` flags a coordinate whose released gradient was beyond this many noise
sds, the same way, in each of a search's last :data:`MOVING_WINDOW` rounds."""


def pulled_coordinates(pull: np.ndarray | None, window: int = MOVING_WINDOW,
                       threshold: float = PULL_SDS) -> np.ndarray:
    """Coordinates along which a search's released gradient still pulled one way when its rounds
    ran out (post-processing).

    ``pull`` holds, per round, the released log-density gradient per coordinate in noise sds of
    its release (:attr:`stan_dp.adaptation.AdaptationResult.pull`).  A coordinate is flagged when
    in each of the last ``window`` rounds it was beyond ``threshold`` the same way.  At the mode
    the released gradient is noise alone: a round passes with probability ``2 Phi(-3)`` = 0.0027,
    three in a row the same way about 5e-9.  A search that stalls far from the mode along a
    coordinate (steps shortened, stepped back, the frame too narrow there, so that
    :func:`moving_coordinates` sees no walk) is still pulled along it: a scale parameter started
    at 1 under an outcome around 100 +- 18 released gradients 5 noise sds up in every round.

    Returns
    -------
    ndarray of bool, shape (dim,)
    """
    if pull is None:
        return np.zeros(0, dtype=bool)
    z = np.asarray(pull, dtype=float)
    if z.ndim != 2 or z.shape[0] < window:
        return np.zeros(z.shape[-1] if z.ndim == 2 else 0, dtype=bool)
    last = z[-window:]
    return np.all(last > threshold, axis=0) | np.all(last < -threshold, axis=0)


def emit(messages: list[str], attrs: dict[str, Any], *, stacklevel: int = 3) -> None:
    """Raise each message as a :class:`UtilityWarning` and append it to ``attrs["warnings"]``."""
    existing = attrs.get("warnings", "")
    listed = [m for m in str(existing).split("\n") if m] if existing else []
    for message in messages:
        warnings.warn(message, UtilityWarning, stacklevel=stacklevel)
        listed.append(message)
    attrs["warnings"] = "\n".join(listed)

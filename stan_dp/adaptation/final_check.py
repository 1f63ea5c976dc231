"""The final check: one release that lets an unsettled search fall back on a point it evaluated.

Where the Newton rounds are blind (one round's curvature noise hides the
posterior's unit curvature: :func:`~stan_dp.adaptation.plan.check_planned`),
a search that did not settle reports its last one-step estimate, and nothing
checks that step: a blind round's step is its released gradient, and one of
them can carry the search from a few tens of posterior sds to hundreds, where
the rows are flat (a scale parameter grown until every row's log-likelihood is
the same).  The fixed plan had no release to tell.

The check is one Gaussian release of the vector

    v_k = sum_i clip_B(l_i(theta_k) - l_i(theta_hat))_k,   k = 0 .. K-1,

the per-row log-likelihood differences between the ``K`` points the rounds
evaluated (``theta_k``) and the reported estimate ``theta_hat``, each row's
``K``-vector projected on the l2 ball of radius ``B = CHECK_NATS sqrt(K)``
(so ``CHECK_NATS`` nats per entry where a row's differences are alike).  Under
replace-one one row changes ``v`` by at most ``2 B`` in l2 norm, so with noise
``N(0, (2 B z)^2 I)`` it is a Gaussian mechanism with multiplier ``z``, planned
and accounted like every other release.  The exact log-prior difference is
public and added.  Where the search did not settle and some point beats the
estimate by more than :data:`CHECK_SDS` noise sds, the best such point is
reported instead (post-processing); otherwise the estimate stands.

Why this scale works: where the estimate jumped into a region the rows reject,
most rows prefer an earlier point by more than ``CHECK_NATS`` each, so
``v_k ~ n CHECK_NATS`` against a noise sd of ``2 CHECK_NATS sqrt(K) z``: the
signal-to-noise ratio ``n / (2 sqrt(K) z)`` does not depend on the bound
(5.8 at 1,000 rows, epsilon = 1, K = 8 and the planned share 0.03; 4.1 at 500 rows).  Near the mode
the points differ by a few nats in all, far below the noise, and the check
keeps the estimate.  A false switch needs the largest of ``K`` noise draws
beyond 3.5 sds: ``K Q(3.5)``, 0.19 % per unsettled run at ``K = 8``.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from stan_dp.adaptation.releases import Ledger, clipped_vector_sum
from stan_dp.aggregates import RowColumns

__all__ = ["CHECK_NATS", "CHECK_SDS", "check_bound", "difference_rows", "final_check"]


CHECK_NATS = 1.0
"""Per-candidate scale of a row's clipped log-likelihood difference (nats): the l2 bound of a row's
``K``-vector is ``CHECK_NATS sqrt(K)``.  The check looks for gross failures, where most rows differ
by more than this, so its signal-to-noise ratio does not depend on it: at 3 nats the choices in the
five cells tried were the same but for two runs (docs/adaptation.md §3, "A final check of an
unsettled search")."""
CHECK_SDS = 3.5
"""A point replaces the estimate only when its released score beats the estimate's by more than this
many noise sds (a false switch among ``K`` = 8 points: 0.19 %; at 3 sds, 1.1 %, and one well-placed
run of a beta regression moved from 0.31 to 10.6 posterior sds on noise alone)."""

_IMPOSSIBLE = 1e300
"""Stands for an infinite log-likelihood difference (a row impossible at one point): the l2
projection turns it into a full ``-B`` (or ``+B``) for that candidate without overflow."""


def check_bound(candidates: int) -> float:
    """The l2 bound ``B`` of one row's vector of log-likelihood differences (public)."""
    return CHECK_NATS * float(np.sqrt(max(int(candidates), 1)))


def difference_rows(density: Any, candidates: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Per row, ``l_i(candidate_k) - l_i(reference)`` for every candidate, shape ``(n, K)``.

    A row impossible at a candidate (``-inf`` or NaN) differs by ``-_IMPOSSIBLE`` there; a row
    impossible at the reference and possible at the candidate by ``+_IMPOSSIBLE``; impossible at
    both, by 0.  Computed where the rows live; only the clipped sum leaves.
    """
    with np.errstate(all="ignore"):
        ref = np.asarray(density.row_log_lik(reference), dtype=float)
        ok_ref = np.isfinite(ref)
        cols = []
        for c in candidates:
            at = np.asarray(density.row_log_lik(c), dtype=float)
            ok_at = np.isfinite(at)
            diff = np.where(ok_at & ok_ref, at - ref, 0.0)
            diff = np.where(~ok_at & ok_ref, -_IMPOSSIBLE, diff)
            diff = np.where(ok_at & ~ok_ref, _IMPOSSIBLE, diff)
            cols.append(np.clip(diff, -_IMPOSSIBLE, _IMPOSSIBLE))
    return np.column_stack(cols) if cols else np.zeros((ref.size, 0))


def final_check(holder: Any, density: Any, candidates: Sequence[np.ndarray], estimate: np.ndarray,
                noise_multiplier: float, rng_noise: np.random.Generator, ledger: Ledger,
                use: bool) -> tuple[np.ndarray, int]:
    """Release the check and return the point to report and which candidate it is (-1: the estimate).

    Parameters
    ----------
    holder : AggregateDensity
        Where the rows are (:func:`stan_dp.aggregates.queries`).
    density : RowDensity
        For the exact log prior (public).
    candidates : sequence of ndarray
        The points the rounds evaluated (unconstrained), ``K`` of them (the planned number).
    estimate : ndarray
        The search's estimate.
    noise_multiplier : float
        The release's planned ``z``.
    rng_noise : numpy.random.Generator
        Privacy noise stream.
    ledger : Ledger
        Receives the release ("final check").
    use : bool
        Whether the release may replace the estimate (the search did not settle).  The release is
        made either way: the plan accounts for it.
    """
    cands = np.array([np.asarray(c, dtype=float) for c in candidates])
    k = cands.shape[0]
    bound = check_bound(k)
    stat = holder.row_statistic(difference_rows, cands, np.asarray(estimate, dtype=float))
    released, _ = clipped_vector_sum(rng_noise, RowColumns(holder, stat, 0, k), bound, noise_multiplier,
                                     ledger, "final check")
    del stat
    sd = ledger.entries[-1].noise_sd
    if not use or k == 0:   # the release is made either way (planned); only its use is skipped
        return np.asarray(estimate, dtype=float), -1
    # ---- post-processing of the release and the public prior ----
    with np.errstate(all="ignore"):
        at_ref = float(density.log_prior(estimate))
        at = np.array([float(density.log_prior(c)) for c in cands])
        prior = np.where(np.isfinite(at) & np.isfinite(at_ref), at - at_ref,
                         np.where(np.isfinite(at), np.inf, np.where(np.isfinite(at_ref), -np.inf, 0.0)))
        score = released + prior
    best = int(np.argmax(np.where(np.isnan(score), -np.inf, score)))
    if score[best] > CHECK_SDS * sd:
        return cands[best].copy(), best
    return np.asarray(estimate, dtype=float), -1

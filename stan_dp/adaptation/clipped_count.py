"""The clipped-row count behind the final estimate, where its rounds were released at several bounds.

``adaptive_clip`` raises the gradient bound near the mode (by ``KAPPA_STEP`` a time) when too many
rows lie beyond it, and starts its count of clipped rows afresh at the new bound.  The pool of
near rounds keeps the rounds made before the raise: dropping them cost more in noise than their
bias (docs/adaptation.md §3, "Tried, not landed: pooling only the rounds at the final bound").  So
the final estimate carries the clipping bias of every bound its rounds were released at, and those
at the lower bounds weigh the most, their noise being the smallest.  The count the run states
(:attr:`~stan_dp.adaptation.result.AdaptationResult.clipped_rows`) is therefore that of the pool,
expressed at the final bound.

Derivation.  A round released at bound ``B_L`` (level ``L``: ``B_L = C s^L``, ``s`` the raise
factor) estimates the root of a score whose ``N_L`` clipped rows move it by about ``rho N_L B_L``
(``rho`` the bias per clipped row in units of the bound,
:attr:`~stan_dp.adaptation.result.AdaptationResult.bias_per_row`).  The pooled estimate is a
precision-weighted mean of the rounds' one-step estimates; a round's precision is proportional to
``1 / sd_k^2``, ``sd_k`` the noise sd of its gradient release (the rounds' frames and curvatures
being alike near the mode).  With ``W_L`` the pooled weight of the rounds at level ``L`` (summing
to 1), its bias is about ``sum_L W_L rho N_L B_L = rho B_F N_eff`` with

    N_eff = sum_L W_L (B_L / B_F) N_L,

``B_F`` the final bound.  Each ``N_L`` is the mean of the released counts made at level ``L``, of
noise sd ``s_L = z_c / sqrt(repeats m_L)`` (``m_L`` rounds counted there, each the mean of
``repeats`` releases); the levels' counts are independent, so ``N_eff`` has noise sd
``sqrt(sum_L (W_L B_L / B_F)^2 s_L^2)``.  Where every pooled round is at the final bound this is
the final bound's mean count and its sd, as before.  Post-processing of released counts and of the
releases' noise sds (public).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

__all__ = ["pooled_clipped_rows"]


def pooled_clipped_rows(levels: Sequence[int], grad_sds: Sequence[float],
                        counts: Mapping[int, Sequence[float]], final_level: int, step: float,
                        count_sd: float) -> tuple[float, float]:
    """The pool's clipped rows at the final bound, and the noise sd of that figure (module docs).

    Parameters
    ----------
    levels
        Per pooled round, the level of the bound its gradient was released at (raises before it).
    grad_sds
        Per pooled round, the noise sd of its gradient release (the weight is ``1 / sd^2``).
    counts
        Per level, the released clipped-row counts made at that level's bound (each the mean of a
        round's repeated releases).
    final_level
        The level of the final bound.
    step
        The factor between consecutive levels' bounds (``KAPPA_STEP``).
    count_sd
        Noise sd of one round's count (``z_c / sqrt(repeats)``).

    Returns
    -------
    tuple of float
        ``(N_eff, sd)``; ``(nan, nan)`` when no pooled round's level was counted.  A pooled round
        whose level has no count (a round that opened the pool, at a bound set by the medians) is
        left out of the weights.
    """
    if len(levels) != len(grad_sds):
        raise ValueError("levels and grad_sds must have one entry per pooled round")
    weight: dict[int, float] = {}
    for level, sd in zip(levels, grad_sds):
        if counts.get(level) and sd > 0.0 and math.isfinite(sd):
            weight[level] = weight.get(level, 0.0) + 1.0 / sd**2
    total = sum(weight.values())
    if not total > 0.0:
        return math.nan, math.nan
    n_eff, var = 0.0, 0.0
    for level, w in weight.items():
        scale = (w / total) * step ** (level - final_level)
        n_eff += scale * float(np.mean(counts[level]))
        var += (scale * count_sd) ** 2 / len(counts[level])
    return float(n_eff), float(math.sqrt(var))

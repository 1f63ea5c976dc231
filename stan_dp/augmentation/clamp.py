"""Clamping of records, as part of a privacy mechanism (Ju et al. 2022, S-5).

Clamping truncates each record variable into a fixed range ``[lo, hi]`` and
maps it by the data-independent location-scale transform
``x ↦ 2 (x - lo) / (hi - lo) - 1`` onto ``[-1, 1]``.  Both steps are known
to the analyst, so they belong to the mechanism: the record statistic is
computed on clamped records, while the records imputed by data augmentation
are the unclamped ones, drawn from the model ``f(· | θ)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["Clamp"]


class Clamp:
    """Truncate record variables to ranges and rescale them to ``[-1, 1]``.

    Parameters
    ----------
    bounds : mapping
        ``{variable: (lo, hi)}``; ``lo`` and ``hi`` are scalars or arrays
        broadcasting against one record of the variable (e.g. one pair per
        column of a predictor matrix).  Variables not named pass unchanged.

    Raises
    ------
    ValueError
        If a bound is not finite or ``lo >= hi`` somewhere.
    """

    def __init__(self, bounds: Mapping[str, tuple[Any, Any]]) -> None:
        if not isinstance(bounds, Mapping) or not bounds:
            raise ValueError("clamp bounds must be a non-empty mapping {variable: (lo, hi)}")
        self.bounds: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for name, pair in bounds.items():
            try:
                lo, hi = pair
            except (TypeError, ValueError):
                raise ValueError(f"clamp bounds of {name!r} must be a pair (lo, hi), got {pair!r}") from None
            lo = np.asarray(lo, dtype=float)
            hi = np.asarray(hi, dtype=float)
            if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)) and np.all(lo < hi)):
                raise ValueError(f"clamp bounds of {name!r} must be finite with lo < hi, got ({lo}, {hi})")
            self.bounds[name] = (lo, hi)

    def __call__(self, records: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Clamped and rescaled records (other variables unchanged)."""
        missing = [v for v in self.bounds if v not in records]
        if missing:
            raise ValueError(f"clamped variables not among the records: {', '.join(missing)}")
        out = dict(records)
        for name, (lo, hi) in self.bounds.items():
            x = np.clip(np.asarray(records[name], dtype=float), lo, hi)
            out[name] = 2.0 * (x - lo) / (hi - lo) - 1.0
        return out

    def attrs(self) -> dict[str, Any]:
        """Bounds as flat lists, for ``InferenceData.attrs``."""
        return {f"clamp_{k}": np.concatenate([np.ravel(lo), np.ravel(hi)]).tolist()
                for k, (lo, hi) in self.bounds.items()}

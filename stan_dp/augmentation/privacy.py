"""The privacy side of a release: record statistic, clamping and noise.

:func:`new_privacy` (named after ``dapper::new_privacy``) bundles what the
analyst knows about how ``s_dp`` was produced from the confidential records
``x_1..x_n``:

    s_dp = Σ_i t(clamp(x_i)) + noise,       noise ~ η (a NoiseMechanism)

The statistic is record-additive by construction: ``t`` maps every record
to a row of an ``(n, k)`` array and the mechanism sees the column sums
(Ju, Awan, Gong, Rao 2022, Assumption 2).  :meth:`RecordPrivacy.check_statistic`
verifies on random records that the callable really acts record by record.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from stan_dp.augmentation.clamp import Clamp
from stan_dp.augmentation.noise import NoiseMechanism

__all__ = ["RecordPrivacy", "new_privacy", "take_records"]

Records = Mapping[str, np.ndarray]

#: Relative tolerance of the record-by-record check of a statistic.
ADDITIVITY_RTOL = 1e-9


def take_records(records: Records, idx: np.ndarray) -> dict[str, np.ndarray]:
    """The records at positions ``idx`` (every variable indexed on its first axis)."""
    return {k: np.asarray(v)[idx] for k, v in records.items()}


class RecordPrivacy:
    """A record-additive release mechanism: ``s_dp = Σ_i t(clamp(x_i)) + noise``.

    Parameters
    ----------
    statistic : callable
        ``t(records) -> array (n, k)``: ``records`` maps each record variable
        to an array whose first axis runs over the n records (clamped first
        when ``clamp`` is given); row i must depend on record i only.
    mechanism : NoiseMechanism
        The noise added to the summed statistic (``Laplace``, ``Gaussian``,
        ``DiscreteLaplace``, ``DiscreteGaussian``).
    clamp : Clamp or mapping, optional
        Clamping applied to the records before ``statistic`` (a mapping is
        passed to :class:`Clamp`).
    """

    def __init__(self, statistic: Callable[[Records], Any], mechanism: NoiseMechanism,
                 clamp: Clamp | Mapping[str, Any] | None = None) -> None:
        if not callable(statistic):
            raise ValueError("statistic must be a callable records -> array of shape (n, k)")
        if not isinstance(mechanism, NoiseMechanism):
            raise ValueError(
                "mechanism must be a stan_dp noise mechanism (Laplace, Gaussian, "
                f"DiscreteLaplace, DiscreteGaussian), got {type(mechanism).__name__}"
            )
        if clamp is not None and not isinstance(clamp, Clamp):
            clamp = Clamp(clamp)
        self.statistic = statistic
        self.mechanism = mechanism
        self.clamp = clamp

    def record_stats(self, records: Records) -> np.ndarray:
        """``t(clamp(x_i))`` for every record, shape ``(n, k)``."""
        n = len(next(iter(records.values())))
        x = self.clamp(records) if self.clamp is not None else records
        stats = np.asarray(self.statistic(x), dtype=float)
        if stats.ndim == 1 and n != 1:
            stats = stats[:, None]
        if stats.ndim != 2 or stats.shape[0] != n:
            raise ValueError(
                f"the statistic must return one row per record, shape ({n}, k); got shape {stats.shape}"
            )
        return stats

    def check_statistic(self, records: Records, rng: np.random.Generator, trials: int = 4) -> int:
        """Check on (random) records that the statistic is record-additive.

        The statistic of any subset of records, in any order, must be the
        matching rows of the statistic of all records; values must be finite
        (integers for a discrete mechanism).  Warns when two records differ by
        more than the mechanism's stated sensitivity (then the release is not
        private as stated and Proposition 3.1's bound need not hold).

        Returns
        -------
        int
            The dimension k of the statistic.

        Raises
        ------
        ValueError
            If the statistic is not record-additive.
        """
        stats = self.record_stats(records)
        n, k = stats.shape
        if not np.all(np.isfinite(stats)):
            raise ValueError("the statistic returned non-finite values on records drawn from the model")
        if self.mechanism.integer and not np.all(stats == np.round(stats)):
            raise ValueError(
                f"the {self.mechanism.name} mechanism needs an integer-valued statistic (counts)"
            )
        subsets = [rng.permutation(n)] + [rng.choice(n, size=size, replace=False)
                                          for size in [1] * trials + [max(1, n // 2)]]
        for idx in subsets:
            part = self.record_stats(take_records(records, idx))
            scale = max(1.0, float(np.max(np.abs(stats))))
            if part.shape != (idx.size, k) or not np.allclose(
                part, stats[idx], rtol=ADDITIVITY_RTOL, atol=ADDITIVITY_RTOL * scale
            ):
                raise ValueError(
                    "the statistic is not record-additive: evaluated on a subset of the "
                    "records it does not give the matching rows of its value on all records "
                    "(row i must depend on record i only; no centring, sorting or totals)"
                )
        sens = getattr(self.mechanism, "sensitivity", None)
        if sens is not None and n >= 2:
            norm = 1 if self.mechanism.kind == "l1" else 2
            diffs = np.linalg.norm(stats[1:] - stats[0], ord=norm, axis=1)
            if np.max(diffs) > sens * (1 + 1e-9):
                warnings.warn(
                    f"two records' statistics differ by {np.max(diffs):.4g} (l{norm}), more "
                    f"than the mechanism's sensitivity {sens:.4g}: the release is not private "
                    "as stated (clamp the records?)", UserWarning, stacklevel=3,
                )
        return k

    def release(self, records: Records, rng: np.random.Generator) -> np.ndarray:
        """Simulate a release from confidential records (the curator's side)."""
        return self.mechanism.release(self.record_stats(records).sum(axis=0), rng)

    def attrs(self) -> dict[str, Any]:
        """Facts for ``InferenceData.attrs``."""
        out = self.mechanism.attrs()
        out["statistic"] = getattr(self.statistic, "__name__", type(self.statistic).__name__)
        if self.clamp is not None:
            out.update(self.clamp.attrs())
        return out


def new_privacy(statistic: Callable[[Records], Any], mechanism: NoiseMechanism, *,
                clamp: Clamp | Mapping[str, Any] | None = None) -> RecordPrivacy:
    """Describe a record-additive release (the counterpart of ``dapper::new_privacy``).

    See :class:`RecordPrivacy` for the parameters.
    """
    return RecordPrivacy(statistic, mechanism, clamp)

"""The adaptation's mechanisms and its ledger of releases.

Every data access of the private adaptation goes through one of three
Gaussian mechanisms here, and each call is written to a :class:`Ledger`:

* :func:`noisy_counts` — a vector of per-coordinate counts
  ``#{i : |a_ij| > t_j}``; a row moves each count by at most 1 under either
  relation, so the L2 sensitivity is ``sqrt(k)`` for ``k`` counts;
* :func:`clipped_vector_sum` — ``sum_i clip_C(v_i)`` (each row projected on
  the L2 ball of radius ``C``): sensitivity ``f C`` with ``f = 2``
  (replace-one) or ``1`` (add/remove);
* :func:`clipped_matrix_sum` — ``sum_i clip_C(S_i)`` for symmetric per-row
  matrices clipped in Frobenius norm: sensitivity ``f C`` in the Frobenius
  norm.  It is exactly the Gaussian mechanism with sd ``s`` on the vector
  ``(diag S, sqrt(2) upper(S))``, whose L2 norm is the Frobenius norm: the
  diagonal is released with noise sd ``s`` and each upper entry with
  ``s / sqrt(2)``, then mirrored (the same law as ``S + (E + E') / 2`` with
  ``E`` i.i.d. ``N(0, s^2)``).

The ledger's :meth:`Ledger.releases` is what the budget composes; every
release is a plain Gaussian, so the composition is exact (PLD mean
``sum 1 / (2 z^2)``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from stan_dp.accounting import Release, sensitivity_factor
from stan_dp.aggregates import RowColumns, columns
from stan_dp.mechanisms import gaussian_release

__all__ = ["LedgerEntry", "Ledger", "noisy_counts", "clipped_vector_sum", "clipped_matrix_sum"]


@dataclass(frozen=True)
class LedgerEntry:
    """One release of the adaptation."""

    what: str
    """What was released (e.g. ``"gradient sum, round 3"``)."""
    noise_multiplier: float
    """``z = noise sd / sensitivity``."""
    sensitivity: float
    """L2 sensitivity under the run's relation."""

    @property
    def noise_sd(self) -> float:
        """Noise standard deviation of the release."""
        return self.noise_multiplier * self.sensitivity


@dataclass
class Ledger:
    """Every release the adaptation made, in order."""

    relation: str
    entries: list[LedgerEntry] = field(default_factory=list)

    def add(self, what: str, noise_multiplier: float, sensitivity: float) -> float:
        """Record a release; return its noise sd."""
        entry = LedgerEntry(what, float(noise_multiplier), float(sensitivity))
        self.entries.append(entry)
        return entry.noise_sd

    def releases(self) -> list[Release]:
        """The entries as accounting :class:`~stan_dp.accounting.Release` lines."""
        return [Release(e.noise_multiplier) for e in self.entries]

    def pld_mean(self) -> float:
        """``sum 1 / (2 z^2)`` over the entries (exact composition of Gaussians)."""
        return float(sum(0.5 / e.noise_multiplier**2 for e in self.entries))

    def summary(self) -> str:
        """One line per kind of release: count and noise multiplier range."""
        kinds: dict[str, list[float]] = {}
        for e in self.entries:
            kinds.setdefault(e.what.split(",")[0], []).append(e.noise_multiplier)
        return "; ".join(f"{k}: {len(z)} x z={min(z):.6g}" + (f"..{max(z):.6g}" if max(z) > min(z) else "")
                         for k, z in kinds.items())


def noisy_counts(rng_noise: np.random.Generator, values: np.ndarray | RowColumns, thresholds: np.ndarray,
                 noise_multiplier: float, ledger: Ledger, what: str, repeats: int | None = None) -> np.ndarray:
    """Release ``#{i : values[i, j] > thresholds[j]}`` for every column ``j``, with noise.

    ``values`` is a per-row array or a :class:`~stan_dp.aggregates.RowColumns`
    view of rows held elsewhere (the counts are computed where the rows are).
    Non-finite values count as above any threshold (``+inf``) or never
    (``NaN``): either way a row changes each count by at most one.  With
    ``repeats=k`` the same counts are computed once and released ``k`` times
    (``k`` ledger entries, ``what`` suffixed ``.0 .. .k-1``), shape ``(k, d)``.
    """
    v = columns(values)
    counts = v.count_above(np.asarray(thresholds, dtype=float))
    if repeats is None:
        sd = ledger.add(what, noise_multiplier, float(np.sqrt(v.width)))
        return np.asarray(gaussian_release(rng_noise, counts, sd), dtype=float)
    out = []
    for r in range(int(repeats)):
        sd = ledger.add(f"{what}.{r}", noise_multiplier, float(np.sqrt(v.width)))
        out.append(np.asarray(gaussian_release(rng_noise, counts, sd), dtype=float))
    return np.array(out).reshape(int(repeats), v.width)


def clipped_vector_sum(rng_noise: np.random.Generator, rows: np.ndarray | RowColumns, bound: float,
                       noise_multiplier: float, ledger: Ledger, what: str) -> tuple[np.ndarray, int]:
    """Release ``sum_i clip_bound(rows[i]) + N(0, (z f bound)^2 I)``.

    ``rows`` is a per-row array or a :class:`~stan_dp.aggregates.RowColumns`
    view.  Returns the release and the number of clipped rows (NOT private:
    for internal diagnostics in tests only; it never leaves the adaptation).
    """
    total, n_clipped = columns(rows).clipped_sum(bound)
    sd = ledger.add(what, noise_multiplier, sensitivity_factor(ledger.relation) * bound)
    return np.asarray(gaussian_release(rng_noise, total, sd), dtype=float), n_clipped


def clipped_matrix_sum(rng_noise: np.random.Generator, mats: np.ndarray | RowColumns, bound: float,
                       noise_multiplier: float, ledger: Ledger, what: str) -> tuple[np.ndarray, float]:
    """Release the sum of symmetric per-row matrices clipped in Frobenius norm.

    Parameters
    ----------
    mats : ndarray, shape (n, d, d), or RowColumns of d * d columns
        Symmetric per-row matrices (flattened row-major in a view).
    bound : float
        Frobenius clip bound ``C``.

    Returns
    -------
    released : ndarray, shape (d, d)
        ``sum_i clip(S_i) + (E + E') / 2``, symmetric.
    noise_sd : float
        ``s``: the diagonal noise sd (off-diagonal ``s / sqrt(2)``).
    """
    view = columns(mats)
    d = int(round(math.sqrt(view.width)))
    if d * d != view.width:
        raise ValueError("the per-row matrices must be square")
    total = view.clipped_sum(bound)[0].reshape(d, d)
    total = 0.5 * (total + total.T)
    sd = ledger.add(what, noise_multiplier, sensitivity_factor(ledger.relation) * bound)
    # One Gaussian release of (diag S, sqrt(2) upper(S)) with sd s, i.e. the
    # diagonal with sd s and each upper entry with sd s / sqrt(2), mirrored.
    # The data value goes through gaussian_release itself, so that the secure
    # (grid-rounded, discrete) noise path applies to it (docs/noise.md).
    iu = np.triu_indices(d)
    sds = np.where(iu[0] == iu[1], sd, sd / np.sqrt(2.0))
    released = np.empty(len(sds))
    for sd_k in np.unique(sds):
        pick = sds == sd_k
        released[pick] = np.asarray(gaussian_release(rng_noise, total[iu][pick], float(sd_k)), dtype=float)
    out = np.zeros((d, d))
    out[iu] = released
    out = out + np.triu(out, 1).T
    return out, sd

"""Aggregate queries: clipped sums computed where the rows live.

The samplers need sums of clipped per-row quantities, never the per-row
arrays themselves.  A density that can compute such a sum next to its rows
(in the C++ bridge, :class:`stan_dp.RowModel`; on the Dask workers that hold
the shards, :class:`stan_dp.distributed.ShardedModel`) implements
:class:`AggregateDensity`; every other :class:`~stan_dp.density.RowDensity`
gets the same queries from its per-row methods through :class:`PerRowQueries`.
Samplers call :func:`queries` once and then only these methods, so one code
path serves NumPy test densities, compiled models and sharded models.

The queries (x_j is one row's clipped contribution):

* :meth:`AggregateDensity.clipped_ratio_sums` —
  ``x_j = post * clip(pre * (l_j(θ') − l_j(θ)), ±bound)``, NaN → ``−bound``
  (a failed row counts against the move, :func:`stan_dp.mechanisms.clip_log_ratios`);
  returns the sum per group (owners), the row count and the centred sum of
  squares ``m2`` (the minibatch variance), merged across row blocks by the
  parallel-variance formula (:meth:`RatioSums.merge`).
* :meth:`AggregateDensity.clipped_grad_sum` — per-row gradients ``g_j`` (in a
  frame ``A``: ``Aᵀ g_j``) with non-finite entries zeroed, projected on the
  l2 ball of radius ``bound`` (:func:`stan_dp.mechanisms.clamp_rows_l2`), summed.
* :meth:`AggregateDensity.row_statistic` and :meth:`AggregateDensity.reduce`
  — the general form, for the private adaptation: a per-row array computed
  and kept where the rows are (a :class:`RowStatistic` handle), and additive
  reductions of it (counts above thresholds, clipped sums).  The functions
  passed must be module-level (picklable) and pure.

Values are cached per evaluated point (the last ratio query's two points and
the latest evaluation: :class:`PointCache`), so that the penalty chain costs
one evaluation of the rows per iteration, as with the per-row state it used
to keep, and DP HMC's ratio test reuses the values of its last gradient.

Nothing here adds noise: the sampler releases the sums through
:func:`stan_dp.mechanisms.gaussian_release`.  A density whose owners add
their own noise (``owner_noise = True``, the multi-owner sharded model of
seed 000's Algorithm 2) refuses these queries and offers only
``release_owner_ratio_sums(rng_noise, theta_new, theta_old, bound, sd, *,
temperature)``, the owners' noised sums: un-noised sums never leave an owner.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Protocol, runtime_checkable

import numpy as np

from stan_dp.mechanisms import clamp_rows_l2, clip_log_ratios
from stan_dp.row_ratios import log_ratios

__all__ = [
    "AggregateDensity",
    "GradSum",
    "PerRowQueries",
    "PointCache",
    "RatioSums",
    "RowColumns",
    "RowStatistic",
    "columns",
    "count_above",
    "clipped_column_sum",
    "queries",
    "ratio_sums_from_values",
    "grad_sum_from_rows",
]


class RatioSums(NamedTuple):
    """Clipped log-likelihood-ratio sums of one query."""

    totals: np.ndarray
    """Sum of the clipped contributions per group, shape ``(n_groups,)``."""
    count: int
    """Rows in the query."""
    m2: float
    """``Σ (x_j − x̄)²`` over all rows of the query (the minibatch variance)."""
    n_clipped: int
    """Rows changed by clipping or non-finite (NOT private: diagnostics only)."""

    @staticmethod
    def merge(parts: list["RatioSums"]) -> "RatioSums":
        """Combine the sums of disjoint row blocks (Chan et al.'s parallel variance).

        ``m2 = Σ_k m2_k + Σ_k c_k (x̄_k − x̄)²`` with block means ``x̄_k`` and
        counts ``c_k``; exact in real arithmetic whatever the blocks.
        """
        parts = [p for p in parts if p.count > 0] or parts[:1]
        if len(parts) == 1:
            return parts[0]
        totals = np.sum([p.totals for p in parts], axis=0)
        count = int(sum(p.count for p in parts))
        grand = float(np.sum(totals)) / count
        with np.errstate(all="ignore"):
            m2 = float(sum(p.m2 + p.count * (float(np.sum(p.totals)) / p.count - grand) ** 2
                           for p in parts))
        return RatioSums(totals, count, m2, int(sum(p.n_clipped for p in parts)))


class GradSum(NamedTuple):
    """Sum of clamped per-row gradients."""

    total: np.ndarray
    """Shape ``(dim,)`` (in the frame's coordinates when a frame is given)."""
    n_clipped: int
    """Rows projected or with non-finite entries (NOT private)."""

    @staticmethod
    def merge(parts: list["GradSum"]) -> "GradSum":
        """Sum over disjoint row blocks."""
        return GradSum(np.sum([p.total for p in parts], axis=0),
                       int(sum(p.n_clipped for p in parts)))


class RowStatistic:
    """Handle of a per-row array kept where the rows live (never its values).

    In process it holds the array; a sharded model's handle names the pieces
    each worker keeps.  Only :meth:`AggregateDensity.reduce` reads it.
    """

    def __init__(self, key: Any, columns: int | None = None) -> None:
        self.key = key
        self.columns = columns

    def __repr__(self) -> str:
        return f"RowStatistic({self.columns} columns)"


@runtime_checkable
class AggregateDensity(Protocol):
    """A density that computes clipped sums next to its rows.

    Besides ``n_rows``, ``dim``, ``param_names``, ``log_prior`` and
    ``constrain`` (as :class:`~stan_dp.density.RowDensity`), it answers the
    queries below.  ``rows`` are row indices (a minibatch) or ``None`` for
    all rows; ``groups`` gives each data row's group (owner) index in
    ``range(n_groups)`` (one entry per row of the data, whatever ``rows``),
    or ``None`` for one group.
    """

    n_rows: int
    dim: int
    param_names: list[str]

    def log_prior(self, theta: np.ndarray) -> float: ...

    def constrain(self, theta: np.ndarray) -> dict[str, np.ndarray]: ...

    def clipped_ratio_sums(self, theta_new: np.ndarray, theta_old: np.ndarray, bound: float, *,
                           pre_scale: float = 1.0, post_scale: float = 1.0,
                           rows: np.ndarray | None = None, groups: np.ndarray | None = None,
                           n_groups: int = 1) -> RatioSums:
        """Sums of ``post * clip(pre * (l_j(θ') − l_j(θ)), ±bound)``."""
        ...

    def clipped_grad_sum(self, theta: np.ndarray, bound: float, *, rows: np.ndarray | None = None,
                         frame: np.ndarray | None = None) -> GradSum:
        """Sum of per-row gradients (``frameᵀ g_j``) projected on the l2 ball of radius ``bound``."""
        ...

    def row_statistic(self, fn: Callable[..., np.ndarray], *args: Any) -> RowStatistic:
        """Compute ``fn(density, *args)`` (shape ``(rows, k)``) where the rows live and keep it there."""
        ...

    def reduce(self, stat: RowStatistic, fn: Callable[..., np.ndarray], *args: Any) -> np.ndarray:
        """``Σ over row blocks of fn(block, *args)``: ``fn`` must be additive over rows."""
        ...


def _key(theta: np.ndarray) -> bytes:
    return np.ascontiguousarray(theta, dtype=float).tobytes()


class PointCache:
    """Per-row log-likelihoods at a few points, for the ratio queries.

    Keeps the two points of the last ratio query (the chain's current point
    is one of them next time) and the latest other evaluation (DP HMC's last
    leapfrog point).  Keys are the exact bytes of θ, so a hit returns what a
    new evaluation would.  The values are private and never leave the density.
    """

    def __init__(self) -> None:
        self._values: dict[bytes, np.ndarray] = {}
        self._pair: tuple[bytes, ...] = ()
        self._latest: bytes | None = None

    def get(self, theta: np.ndarray) -> np.ndarray | None:
        return self._values.get(_key(theta))

    def put(self, theta: np.ndarray, values: np.ndarray) -> None:
        key = _key(theta)
        self._values[key] = values
        if key not in self._pair:
            self._latest = key
        self._trim()

    def pin(self, theta_new: np.ndarray, theta_old: np.ndarray) -> None:
        """Keep these two points (the last ratio query's)."""
        self._pair = (_key(theta_new), _key(theta_old))
        self._trim()

    def _trim(self) -> None:
        keep = set(self._pair) | ({self._latest} if self._latest is not None else set())
        for key in [k for k in self._values if k not in keep]:
            del self._values[key]


def ratio_sums_from_values(new: np.ndarray, old: np.ndarray, bound: float, *, pre_scale: float = 1.0,
                           post_scale: float = 1.0, groups: np.ndarray | None = None,
                           n_groups: int = 1) -> RatioSums:
    """:class:`RatioSums` from per-row values at the two points (the reference computation).

    The arithmetic is the samplers' former one, so seeded runs on NumPy
    densities draw exactly what they drew before the queries existed.
    """
    with np.errstate(all="ignore"):
        r = log_ratios(new, old)
        if pre_scale != 1.0:
            r = pre_scale * r
    clipped, n_clipped = clip_log_ratios(r, bound)
    with np.errstate(all="ignore"):
        x = post_scale * clipped if post_scale != 1.0 else clipped
        count = int(x.size)
        if groups is None:
            totals = np.array([x.sum()])
        else:
            totals = np.bincount(np.asarray(groups), weights=x, minlength=int(n_groups)).astype(float)
        if count:
            centred = x - x.mean()
            m2 = float(centred @ centred)
        else:
            m2 = 0.0
    return RatioSums(totals, count, m2, n_clipped)


def grad_sum_from_rows(grads: np.ndarray, bound: float, frame: np.ndarray | None = None) -> GradSum:
    """:class:`GradSum` from per-row gradients (the reference computation)."""
    g = np.asarray(grads, dtype=float)
    g = g.reshape(g.shape[0], -1)
    if frame is not None:
        with np.errstate(all="ignore"):
            g = g @ np.asarray(frame, dtype=float)
    clipped, n_clipped = clamp_rows_l2(g, bound)
    return GradSum(clipped.sum(axis=0), n_clipped)


class PerRowQueries:
    """The aggregate queries of a density that only has per-row methods.

    Parameters
    ----------
    density : RowDensity
        Needs ``row_log_lik`` (and ``row_log_lik_grad`` for the gradient query).

    Every attribute not defined here (``n_rows``, ``dim``, ``log_prior``,
    ``log_prior_grad``, ``constrain``, ...) is the wrapped density's.
    """

    def __init__(self, density: Any) -> None:
        self.density = density
        self._cache = PointCache()

    def __getattr__(self, name: str) -> Any:
        if name == "density":  # not yet set (unpickling)
            raise AttributeError(name)
        return getattr(self.density, name)

    def _values(self, theta: np.ndarray, rows: np.ndarray | None) -> tuple[np.ndarray, bool]:
        """Per-row values at ``theta`` (the query's rows) and whether they were evaluated now."""
        cached = self._cache.get(theta)
        if cached is not None:
            return (cached if rows is None else cached[rows]), False
        values = np.asarray(self.density.row_log_lik(theta, rows=rows) if rows is not None
                            else self.density.row_log_lik(theta), dtype=float)
        return values, True

    def clipped_ratio_sums(self, theta_new: np.ndarray, theta_old: np.ndarray, bound: float, *,
                           pre_scale: float = 1.0, post_scale: float = 1.0,
                           rows: np.ndarray | None = None, groups: np.ndarray | None = None,
                           n_groups: int = 1) -> RatioSums:
        new, new_fresh = self._values(theta_new, rows)
        old, old_fresh = self._values(theta_old, rows)
        if rows is None:
            self._cache.pin(theta_new, theta_old)
            if new_fresh:
                self._cache.put(theta_new, new)
            if old_fresh:
                self._cache.put(theta_old, old)
        if groups is not None:
            groups = np.asarray(groups)
            groups = groups if rows is None else groups[rows]
        return ratio_sums_from_values(new, old, bound, pre_scale=pre_scale, post_scale=post_scale,
                                      groups=groups, n_groups=n_groups)

    def clipped_grad_sum(self, theta: np.ndarray, bound: float, *, rows: np.ndarray | None = None,
                         frame: np.ndarray | None = None) -> GradSum:
        if rows is None:
            values, grads = self.density.row_log_lik_grad(theta)
            self._cache.put(theta, np.asarray(values, dtype=float))
        else:
            _, grads = self.density.row_log_lik_grad(theta, rows=rows)
        return grad_sum_from_rows(grads, bound, frame)

    def row_statistic(self, fn: Callable[..., np.ndarray], *args: Any) -> RowStatistic:
        return local_statistic(self.density, fn, *args)

    def reduce(self, stat: RowStatistic, fn: Callable[..., np.ndarray], *args: Any) -> np.ndarray:
        return local_reduce(stat, fn, *args)


def local_statistic(density: Any, fn: Callable[..., np.ndarray], *args: Any) -> RowStatistic:
    """:meth:`AggregateDensity.row_statistic` for a density whose rows are in this process."""
    values = np.asarray(fn(density, *args), dtype=float)
    if values.ndim == 1:
        values = values[:, None]
    return RowStatistic(values, values.shape[1])


def local_reduce(stat: RowStatistic, fn: Callable[..., np.ndarray], *args: Any) -> np.ndarray:
    """:meth:`AggregateDensity.reduce` for a statistic held in this process."""
    if not isinstance(stat.key, np.ndarray):
        raise TypeError("this RowStatistic does not belong to an in-process density")
    return np.asarray(fn(stat.key, *args), dtype=float)


def queries(density: Any) -> Any:
    """The density itself if it answers the aggregate queries, else :class:`PerRowQueries`."""
    if all(callable(getattr(density, m, None)) for m in
           ("clipped_ratio_sums", "clipped_grad_sum", "row_statistic", "reduce")):
        return density
    return PerRowQueries(density)


# ------------------------------------------------ columns of a statistic --
def count_above(values: np.ndarray, lo: int, hi: int, thresholds: np.ndarray) -> np.ndarray:
    """``#{i : values[i, lo + j] > thresholds[j]}`` per column (a reducer: additive over rows).

    Non-finite values count as above any threshold (``+inf``) or never (NaN).
    """
    with np.errstate(invalid="ignore"):
        return np.sum(values[:, lo:hi] > np.asarray(thresholds, dtype=float)[None, :], axis=0).astype(float)


def clipped_column_sum(values: np.ndarray, lo: int, hi: int, bound: float) -> np.ndarray:
    """Sum of the rows ``values[:, lo:hi]`` projected on the l2 ball of radius ``bound``.

    Returns the sum followed by the number of rows changed (a reducer:
    additive over rows; the count is NOT private).
    """
    clipped, n_clipped = clamp_rows_l2(values[:, lo:hi], bound)
    return np.append(clipped.sum(axis=0), float(n_clipped))


class RowColumns:
    """Columns ``[lo, hi)`` of a per-row statistic, wherever its rows live.

    The adaptation's mechanisms (:mod:`stan_dp.adaptation.releases`) read
    per-row values only through :meth:`count_above` and :meth:`clipped_sum`,
    so the same code runs on an in-process array and on a sharded model.

    Parameters
    ----------
    q : AggregateDensity
        Holder of the statistic.
    stat : RowStatistic
        From ``q.row_statistic``.
    lo, hi : int
        The columns.
    """

    def __init__(self, q: Any, stat: RowStatistic, lo: int, hi: int) -> None:
        self.q, self.stat, self.lo, self.hi = q, stat, int(lo), int(hi)

    @classmethod
    def of_array(cls, values: np.ndarray) -> "RowColumns":
        """An in-process array (rows, columns) as a column view."""
        v = np.asarray(values, dtype=float)
        v = v.reshape(v.shape[0], -1)
        return cls(_LOCAL, RowStatistic(v, v.shape[1]), 0, v.shape[1])

    @property
    def width(self) -> int:
        """Number of columns."""
        return self.hi - self.lo

    def count_above(self, thresholds: np.ndarray) -> np.ndarray:
        """Rows above each column's threshold (exact counts; release them with noise)."""
        return np.asarray(self.q.reduce(self.stat, count_above, self.lo, self.hi,
                                        np.asarray(thresholds, dtype=float)), dtype=float)

    def clipped_sum(self, bound: float) -> tuple[np.ndarray, int]:
        """Sum of the rows clamped to l2 norm ``bound``, and how many were changed (NOT private)."""
        out = np.asarray(self.q.reduce(self.stat, clipped_column_sum, self.lo, self.hi, float(bound)),
                         dtype=float)
        return out[:-1], int(out[-1])


class _Local:
    """``reduce`` for statistics held in this process."""

    @staticmethod
    def reduce(stat: RowStatistic, fn: Callable[..., np.ndarray], *args: Any) -> np.ndarray:
        return local_reduce(stat, fn, *args)


_LOCAL = _Local()


def columns(values: "np.ndarray | RowColumns") -> RowColumns:
    """``values`` as a :class:`RowColumns` (an array is wrapped as in-process rows)."""
    return values if isinstance(values, RowColumns) else RowColumns.of_array(values)

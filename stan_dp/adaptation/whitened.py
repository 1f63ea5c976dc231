"""A density seen in the frame the private adaptation found: ``theta = center + A u``.

The samplers are unchanged: they see a :class:`~stan_dp.density.RowDensity`
whose posterior is roughly standard normal around 0 (``center`` the private
mode, ``A`` a square root of the private covariance), so their step sizes and
clip bounds can be set in posterior units from public facts.  Both ``center``
and ``A`` are post-processing of released values.  The map is linear, so its
Jacobian is a constant and the log densities differ from the model's by a
constant only (it cancels in every ratio).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from stan_dp.aggregates import GradSum, RatioSums, RowStatistic, queries
from stan_dp.density import prior_gradient

__all__ = ["WhitenedDensity"]


class WhitenedDensity:
    """``u -> inner(center + frame @ u)``: the :class:`RowDensity` protocol in a linear frame.

    Parameters
    ----------
    inner : RowDensity
        The model (its data is read only through its row methods).
    center : ndarray, shape (d,)
        Released private mode.
    frame : ndarray, shape (d, d)
        Invertible; released (e.g. the symmetric square root of the private covariance).
    """

    def __init__(self, inner: Any, center: np.ndarray, frame: np.ndarray) -> None:
        self._inner = inner
        self.center = np.asarray(center, dtype=float).copy()
        self.frame = np.asarray(frame, dtype=float).copy()
        d = int(inner.dim)
        if self.center.shape != (d,) or self.frame.shape != (d, d):
            raise ValueError(f"center must have shape ({d},) and frame ({d}, {d})")
        self._inverse = np.linalg.inv(self.frame)
        self.n_rows = inner.n_rows
        self.dim = d
        self.param_names = list(inner.param_names)
        self._q = queries(inner)
        self.owner_noise = bool(getattr(inner, "owner_noise", False))
        if self.owner_noise:
            self.owner_labels = list(inner.owner_labels)

    def theta(self, u: np.ndarray) -> np.ndarray:
        """The model's unconstrained point of ``u``."""
        return self.center + self.frame @ np.asarray(u, dtype=float)

    def log_prior(self, u: np.ndarray) -> float:
        """The model's log prior at ``theta(u)`` (data-independent)."""
        return float(self._inner.log_prior(self.theta(u)))

    def log_prior_grad(self, u: np.ndarray) -> tuple[float, np.ndarray]:
        """Log prior and its gradient in ``u``."""
        value, grad = prior_gradient(self._inner, self.theta(u))
        return value, self.frame.T @ grad

    def row_log_lik(self, u: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """Per-row log-likelihoods at ``theta(u)`` (reads the data)."""
        return self._inner.row_log_lik(self.theta(u), rows)

    def row_log_lik_grad(self, u: np.ndarray, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Per-row values and gradients in ``u`` (``grad_theta @ frame``)."""
        values, grads = self._inner.row_log_lik_grad(self.theta(u), rows)
        with np.errstate(all="ignore"):
            return values, np.asarray(grads, dtype=float) @ self.frame

    # Aggregate queries (stan_dp.aggregates), answered by the model where its
    # rows live: points are mapped, gradients taken through the frame.
    def clipped_ratio_sums(self, u_new: np.ndarray, u_old: np.ndarray, bound: float,
                           **kwargs: Any) -> RatioSums:
        """The model's clipped ratio sums between ``theta(u_new)`` and ``theta(u_old)``."""
        return self._q.clipped_ratio_sums(self.theta(u_new), self.theta(u_old), bound, **kwargs)

    def clipped_grad_sum(self, u: np.ndarray, bound: float, *, rows: np.ndarray | None = None,
                         frame: np.ndarray | None = None) -> GradSum:
        """Clipped sum of the per-row gradients in ``u`` (``frameᵀ Aᵀ g_j``)."""
        inner_frame = self.frame if frame is None else self.frame @ np.asarray(frame, dtype=float)
        return self._q.clipped_grad_sum(self.theta(u), bound, rows=rows, frame=inner_frame)

    def row_statistic(self, fn: Any, *args: Any) -> RowStatistic:
        """``fn`` of the rows seen in this frame, computed where the rows live."""
        return self._q.row_statistic(_in_frame, self.center, self.frame, fn, args)

    def reduce(self, stat: RowStatistic, fn: Any, *args: Any) -> np.ndarray:
        """The model's reduction of a statistic from :meth:`row_statistic`."""
        return self._q.reduce(stat, fn, *args)

    def release_owner_ratio_sums(self, rng_noise: Any, u_new: np.ndarray, u_old: np.ndarray,
                                 bound: float, sd: float, *, temperature: float = 1.0) -> np.ndarray:
        """The owners' noised sums between ``theta(u_new)`` and ``theta(u_old)`` (multi-owner models)."""
        return self._inner.release_owner_ratio_sums(rng_noise, self.theta(u_new), self.theta(u_old),
                                                    bound, sd, temperature=temperature)

    def constrain(self, u: np.ndarray) -> dict[str, np.ndarray]:
        """The model's constrained parameters at ``theta(u)``."""
        return self._inner.constrain(self.theta(u))

    # The program's other quantities (stan_dp.output.with_transformed, quantity_attrs): read from
    # the program (public) and computed by the model's zero-row instance at theta(u).
    @property
    def output_transformed(self) -> tuple[str, ...]:
        """The model's transformed parameters returned with the draws."""
        return tuple(getattr(self._inner, "output_transformed", ()))

    @property
    def output_generated(self) -> tuple[str, ...]:
        """The model's generated quantities returned with the draws."""
        return tuple(getattr(self._inner, "output_generated", ()))

    @property
    def generated_blocked(self) -> bool:
        """Whether the model's generated quantities block cannot run without rows."""
        return bool(getattr(self._inner, "generated_blocked", False))

    @property
    def omitted_quantities(self) -> dict[str, list[str]]:
        """The model's quantities left out of the output."""
        return dict(getattr(self._inner, "omitted_quantities", None) or {})

    def quantity_rng(self, seed: int | None) -> Any:
        """The model's generator for its generated quantities."""
        return self._inner.quantity_rng(seed)

    def transformed_values(self, u: np.ndarray, rng: Any = None) -> dict[str, np.ndarray]:
        """The model's returned quantities at ``theta(u)``."""
        return self._inner.transformed_values(self.theta(u), rng)

    def unconstrain(self, values: Mapping[str, Any]) -> np.ndarray:
        """``u`` of constrained values (needs the model's ``unconstrain``)."""
        return self._inverse @ (np.asarray(self._inner.unconstrain(values), dtype=float) - self.center)


def _in_frame(density: Any, center: np.ndarray, frame: np.ndarray, fn: Any, args: tuple) -> np.ndarray:
    """``fn(WhitenedDensity(density, center, frame), *args)``: run where the rows live."""
    return fn(WhitenedDensity(density, center, frame), *args)

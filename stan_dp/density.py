"""Log-density protocols the samplers are written against.

Samplers never see the C++ bridge: they see an object satisfying one of the
protocols below.  :class:`stan_dp.RowModel` satisfies :class:`RowDensity`;
NumPy test densities (``tests/densities.py``) satisfy it too, so every sampler
can be unit-tested without a compiler.

Only the ``row_*`` methods (and :meth:`ExpFamilyDensity.row_stats`) read the
private data.  Everything else — prior, transforms, names, sizes — must be
data-independent (``n_rows`` is treated as public, as usual under the
replace-one relation).  The checks in this module never call a data method, so
a model can be validated before any data is touched.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

__all__ = [
    "RowDensity",
    "ExpFamilyDensity",
    "check_row_density",
    "check_expfamily_density",
    "prior_gradient",
]


@runtime_checkable
class RowDensity(Protocol):
    """A posterior whose log-likelihood is a sum over data rows.

    Attributes
    ----------
    n_rows : int
        Number of data rows (the unit of privacy).
    dim : int
        Dimension of the unconstrained parameter space.
    param_names : list of str
        Stan's constrained flattened names, e.g. ``["mu", "beta[1]"]``.

    Optional, read with ``getattr`` where present (public facts from the program, never data):
    ``log_transformed_parameters`` (names declared with a lower bound only) and
    ``bounded_coordinates`` (a boolean mask over the unconstrained coordinates on Stan's logit
    transform, :func:`stan_dp.adaptation.curvature.logit_coordinates`), ``log_coordinates``
    (the same for its log transform, :func:`stan_dp.adaptation.far.holdable_coordinates`) and
    ``bounded_scale_coordinates`` (those of ``bounded_coordinates`` that the program passes as a
    sampling statement's scale, :func:`stan_dp.adaptation.far.scale_coordinates`).
    """

    n_rows: int
    dim: int
    param_names: list[str]

    def log_prior(self, theta: np.ndarray) -> float:
        """Zero-row log density (prior plus log Jacobian) at unconstrained ``theta``."""
        ...

    def row_log_lik(self, theta: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """Per-row log-likelihood, shape ``(n_rows,)`` or ``(len(rows),)``.

        May contain NaN or ±inf; samplers must cope.
        """
        ...

    def row_log_lik_grad(
        self, theta: np.ndarray, rows: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per-row values ``(n,)`` and gradients ``(n, dim)``."""
        ...

    def constrain(self, theta: np.ndarray) -> dict[str, np.ndarray]:
        """Constrained variables by name with their Stan shapes (scalars: shape ``()``)."""
        ...


@runtime_checkable
class ExpFamilyDensity(Protocol):
    """A posterior whose log-likelihood is affine in summed sufficient statistics.

    ``log_lik_stats(theta, S) = a(theta) + phi(theta) @ S`` where
    ``S = sum_i s(y_i)`` (Yıldırım, eq. (7)).  ``a`` already contains the
    factor ``n`` (public).  ``phi(theta)`` is recovered as
    ``log_lik_stats(theta, e_k) - log_lik_stats(theta, 0)``; affinity is
    checked numerically when a sampler is set up.

    Attributes
    ----------
    n_rows : int
        Number of data rows.
    dim : int
        Unconstrained dimension.
    stat_dim : int
        Dimension of the sufficient statistic.
    param_names : list of str
        Constrained flattened names.
    """

    n_rows: int
    dim: int
    stat_dim: int
    param_names: list[str]

    def log_prior(self, theta: np.ndarray) -> float:
        """Log prior (incl. Jacobian) at unconstrained ``theta``."""
        ...

    def log_lik_stats(self, theta: np.ndarray, stats: np.ndarray) -> float:
        """Log-likelihood as a function of the summed statistic ``stats`` (affine in it)."""
        ...

    def row_stats(self) -> np.ndarray:
        """Per-row sufficient statistics, shape ``(n_rows, stat_dim)`` (reads the data)."""
        ...

    def constrain(self, theta: np.ndarray) -> dict[str, np.ndarray]:
        """Constrained variables by name with their shapes."""
        ...


_ROW_METHODS = ("log_prior", "row_log_lik", "constrain")
_EXP_METHODS = ("log_prior", "log_lik_stats", "row_stats", "constrain")


def _check_common(model: object, kind: str, methods: tuple[str, ...], ints: tuple[str, ...]) -> None:
    missing = [m for m in methods if not callable(getattr(model, m, None))]
    if missing:
        raise TypeError(
            f"{type(model).__name__} does not satisfy the {kind} protocol: "
            f"missing method(s) {', '.join(missing)}"
        )
    for name in ints:
        value = getattr(model, name, None)
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise TypeError(
                f"{type(model).__name__} does not satisfy the {kind} protocol: "
                f"attribute {name!r} must be a positive integer, got {value!r}"
            )
    names = getattr(model, "param_names", None)
    if names is None or not all(isinstance(n, str) for n in names):
        raise TypeError(
            f"{type(model).__name__} does not satisfy the {kind} protocol: "
            "attribute 'param_names' must be a list of str"
        )


def check_row_density(model: object, *, gradients: bool = False, relation: str | None = None,
                      owners_ok: bool = False) -> None:
    """Check that ``model`` satisfies :class:`RowDensity` without touching data.

    A density that answers the aggregate queries of :mod:`stan_dp.aggregates`
    (rows held in C++ or on other machines) needs no per-row method; one whose
    owners add the noise (``owner_noise``) needs ``release_owner_ratio_sums``
    and cannot serve gradient-based samplers.

    Parameters
    ----------
    model : object
        Candidate density.
    gradients : bool
        Also require ``row_log_lik_grad`` (gradient-based samplers).
    relation : str, optional
        The run's neighbouring relation: refused if the model declares the
        relations it supports (``relations``) and this is not one of them.
    owners_ok : bool
        The caller is the penalty sampler, the one algorithm whose only data
        release is a sum each owner can noise itself (seed 000, Algorithm 2).
        Every other caller refuses a model whose owners add the noise.

    Raises
    ------
    TypeError
        If an attribute or method is missing or malformed.
    """
    if getattr(model, "owner_noise", False) and not owners_ok:
        raise TypeError(
            f"{type(model).__name__} holds its rows with data owners who add their own noise "
            "(multi-owner, seed 000's Algorithm 2): only the penalty sampler runs on it, with "
            "clip and step_size given; the gradient samplers, the minibatch samplers and the "
            "private adaptation need un-noised sums, which never leave an owner")
    supported = getattr(model, "relations", None)
    if relation is not None and supported is not None and relation not in tuple(supported):
        raise ValueError(
            f"{type(model).__name__} supports relation={' or '.join(map(repr, supported))} only, "
            f"not {relation!r}" + (" (the owners' shard sizes leave them, and are public only "
                                   "under replace-one)" if getattr(model, "owner_noise", False) else ""))
    if _has_queries(model, gradients):
        # Rows held elsewhere (stan_dp.aggregates): the clipped-sum queries
        # stand in for the per-row methods.
        _check_common(model, "RowDensity", ("log_prior", "constrain"), ("n_rows", "dim"))
        return
    methods = _ROW_METHODS + (("row_log_lik_grad",) if gradients else ())
    _check_common(model, "RowDensity", methods, ("n_rows", "dim"))


def _has_queries(model: object, gradients: bool) -> bool:
    """Whether ``model`` answers the aggregate queries of :mod:`stan_dp.aggregates`."""
    if getattr(model, "owner_noise", False):
        return not gradients and callable(getattr(model, "release_owner_ratio_sums", None))
    need = ("clipped_ratio_sums", "row_statistic", "reduce") + (("clipped_grad_sum",) if gradients else ())
    return all(callable(getattr(model, m, None)) for m in need)


def check_expfamily_density(model: object) -> None:
    """Check that ``model`` satisfies :class:`ExpFamilyDensity` without touching data.

    Raises
    ------
    TypeError
        If an attribute or method is missing or malformed.
    """
    _check_common(model, "ExpFamilyDensity", _EXP_METHODS, ("n_rows", "dim", "stat_dim"))


def prior_gradient(density: object, theta: np.ndarray) -> tuple[float, np.ndarray]:
    """Log prior and its gradient (the model's ``log_prior_grad`` or central differences).

    The prior is data-independent, so neither path touches the data.
    """
    fn = getattr(density, "log_prior_grad", None)
    if callable(fn):
        value, grad = fn(theta)
        return float(value), np.asarray(grad, dtype=float)
    value = float(density.log_prior(theta))
    grad = np.empty(theta.size)
    for k in range(theta.size):
        h = 1e-6 * max(1.0, abs(theta[k]))
        up, down = theta.copy(), theta.copy()
        up[k] += h
        down[k] -= h
        grad[k] = (float(density.log_prior(up)) - float(density.log_prior(down))) / (2 * h)
    return value, grad

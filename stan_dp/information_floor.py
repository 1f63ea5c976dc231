"""The information floor of issue 13: what one perfectly preconditioned release could achieve.

**Not private**: it reads the raw rows and a non-private reference fit; it is a
yardstick for benchmarks and tests, never part of a private run.

At the reference mean, in the reference posterior's own frame (``Sigma`` the
reference covariance in unconstrained space), the per-row scores are
``g~_i = Sigma^{1/2} grad loglik_i``; ``C_w`` is the 90th percentile of their
norms.  One Gaussian release of the score sum clipped at ``C_w`` with the
whole budget has noise sd ``k C_w / mu`` per coordinate (``k = 2``
replace-one, ``1`` add/remove; ``mu`` the Gaussian-DP parameter of
``(epsilon, delta)``), and since the curvature is the identity in that frame,
a one-step estimate of the mode inherits it in posterior sds: the floor.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from stan_dp.accounting import sensitivity_factor
from stan_dp.adaptation.forecast import gdp_mu

__all__ = ["unconstrained_draws", "whitened_scores", "information_floor"]


def unconstrained_draws(model: Any, reference: Any) -> np.ndarray:
    """The reference's draws mapped to the model's unconstrained space, shape ``(draws, dim)``."""
    post = reference.posterior
    shapes = model.param_shapes
    n = post.sizes["chain"] * post.sizes["draw"]
    columns = {name: np.asarray(post[name].values).reshape((n,) + tuple(shape))
               for name, shape in shapes.items()}
    return np.array([model.unconstrain({k: v[i] for k, v in columns.items()}) for i in range(n)])


def information_floor(model: Any, reference: Any, epsilon: float, delta: float,
                      relation: str = "replace_one") -> float:
    """``k C_w / mu`` at the reference (posterior sds).  NOT private: a yardstick.

    Parameters
    ----------
    model : RowModel
        The model with its data (its rows are read).
    reference : arviz.InferenceData
        A non-private fit of the same model and data (e.g. :func:`stan_dp.reference_fit`).
    epsilon, delta : float
        The budget.
    relation : str
        Neighbouring relation.
    """
    _, _, whitened = whitened_scores(model, unconstrained_draws(model, reference))
    norms = np.linalg.norm(whitened, axis=1)
    return float(sensitivity_factor(relation) * np.quantile(norms, 0.9) / gdp_mu(epsilon, delta))


def whitened_scores(model: Any, draws: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The per-row scores at the draws' mean in their covariance's own frame.  NOT private.

    Parameters
    ----------
    model : RowModel
        The model with its data (its rows are read).
    draws : ndarray, shape (draws, dim)
        Unconstrained draws of a non-private fit (:func:`unconstrained_draws`).

    Returns
    -------
    mean : ndarray, shape (dim,)
        The draws' mean, where the scores are taken.
    root : ndarray, shape (dim, dim)
        ``Sigma^{1/2}``, the symmetric root of the draws' covariance.
    whitened : ndarray, shape (n_rows, dim)
        Rows ``(Sigma^{1/2} grad loglik_i)'`` (non-finite gradient entries as 0).
    """
    mean = draws.mean(axis=0)
    cov = np.atleast_2d(np.cov(draws.T))
    lam, q = np.linalg.eigh(0.5 * (cov + cov.T))
    root = (q * np.sqrt(np.maximum(lam, 0.0))) @ q.T
    _, grads = model.row_log_lik_grad(mean)
    with np.errstate(all="ignore"):
        whitened = np.nan_to_num(np.asarray(grads, dtype=float).reshape(-1, mean.size)) @ root
    return mean, root, whitened

"""The normal-mean model shared by the NumPy-density examples.

``y_i ~ N(mu, 1)``, ``mu ~ N(0, 10^2)``: a ``stan_dp.density.RowDensity``
written in NumPy, with its exact (tempered) posterior as the oracle.
"""

from __future__ import annotations

import numpy as np

PRIOR_SD = 10.0


class NormalMean:
    """Satisfies stan_dp.density.RowDensity."""

    def __init__(self, y: np.ndarray) -> None:
        self.y = np.asarray(y, float)
        self.n_rows, self.dim, self.param_names = self.y.size, 1, ["mu"]

    def log_prior(self, theta):
        return float(-0.5 * (theta[0] / PRIOR_SD) ** 2)

    def row_log_lik(self, theta, rows=None):
        y = self.y if rows is None else self.y[rows]
        return -0.5 * (y - theta[0]) ** 2

    def row_log_lik_grad(self, theta, rows=None):
        y = self.y if rows is None else self.y[rows]
        return -0.5 * (y - theta[0]) ** 2, (y - theta[0])[:, None]

    def constrain(self, theta):
        return {"mu": np.asarray(theta[0])}


def exact_posterior(model: NormalMean, temperature: float = 1.0) -> tuple[float, float]:
    """Mean and sd of ``mu`` under ``p(y | mu)^T p(mu)`` (conjugate normal)."""
    prec = temperature * model.n_rows + 1 / PRIOR_SD**2
    return temperature * model.y.sum() / prec, prec**-0.5

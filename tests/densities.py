"""NumPy densities satisfying :class:`stan_dp.density.RowDensity` / ``ExpFamilyDensity``.

* :class:`NormalMean` — conjugate normal mean, known sigma: exact (tempered) posterior.
* :class:`NormalMeanScale` — unknown mean and log-scale; reference by grid quadrature.
* :class:`LogisticRegression` — ``alpha`` scalar and ``beta[2]`` vector (output shapes).
* :class:`VaryingIntercept` — group intercepts partially pooled (a hierarchical mean and
  scale only the prior touches); exact joint mode by Newton's method.
* :class:`NormalRegression` — flat priors, exact posterior (multivariate t); and
  :class:`UniformScaleRegression`, the same with ``sigma`` under ``uniform(0, upper)`` on Stan's
  logit transform.
* :class:`CentredInterceptsSlopes` — a varying intercept and slope with known scales:
  exactly Gaussian, both groups declared.
* :class:`Untouchable` — wraps a density and raises if the data is touched.
* :class:`NormalMeanExpFamily`, :class:`NormalMeanScaleExpFamily` — the same
  models written on summed sufficient statistics.
* :func:`group_data` — six groups of 400 down to 20 rows, a centred covariate, outcomes about 20
  (``tests/test_index_groups.py``, ``tests/test_rowless_hyperparameters.py``).
* :func:`flat_prior_sigma_posterior` — the exact posterior of ``sigma`` in
  ``tests/stan/normal_scale.stan`` (also read by ``benchmarks/scale_warnings.py``).
"""

from __future__ import annotations

import numpy as np
from scipy import special

LOG_2PI = float(np.log(2 * np.pi))


def flat_prior_sigma_posterior(y: np.ndarray) -> tuple[float, float]:
    """Posterior mean and sd of ``sigma`` in ``y_i ~ N(mu, sigma^2)`` with flat priors on ``mu``
    and ``sigma > 0``: ``p(sigma | y) ~ sigma^-(n-1) exp(-S / (2 sigma^2))`` (``mu`` integrated
    out, ``S`` the sum of squares about the mean), by quadrature on a grid of 20,001 points."""
    y = np.asarray(y, dtype=float)
    n, ss = y.size, float(np.sum((y - y.mean()) ** 2))
    centre = np.sqrt(ss / (n - 2))
    grid = np.linspace(0.7 * centre, 1.4 * centre, 20001)
    logp = -(n - 1) * np.log(grid) - ss / (2.0 * grid**2)
    p = np.exp(logp - logp.max())
    mass = np.trapezoid(p, grid)
    mean = np.trapezoid(grid * p, grid) / mass
    return float(mean), float(np.sqrt(np.trapezoid((grid - mean) ** 2 * p, grid) / mass))


class DataTouched(AssertionError):
    """Raised by :class:`Untouchable` when a data method is called."""


class NormalMean:
    """``y_i ~ N(mu, sigma^2)`` (sigma known), ``mu ~ N(m0, s0^2)``."""

    def __init__(self, y: np.ndarray, sigma: float = 1.0, m0: float = 0.0, s0: float = 10.0) -> None:
        self.y = np.asarray(y, dtype=float)
        self.sigma, self.m0, self.s0 = float(sigma), float(m0), float(s0)
        self.n_rows = int(self.y.size)
        self.dim = 1
        self.param_names = ["mu"]
        self.row_calls = 0

    def log_prior(self, theta: np.ndarray) -> float:
        return float(-0.5 * ((theta[0] - self.m0) / self.s0) ** 2 - np.log(self.s0) - 0.5 * LOG_2PI)

    def row_log_lik(self, theta: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        self.row_calls += 1
        y = self.y if rows is None else self.y[np.asarray(rows)]
        return -0.5 * ((y - theta[0]) / self.sigma) ** 2 - np.log(self.sigma) - 0.5 * LOG_2PI

    def row_log_lik_grad(self, theta, rows=None):
        y = self.y if rows is None else self.y[np.asarray(rows)]
        return self.row_log_lik(theta, rows), ((y - theta[0]) / self.sigma**2)[:, None]

    def constrain(self, theta: np.ndarray) -> dict[str, np.ndarray]:
        return {"mu": np.asarray(theta[0])}

    def unconstrain(self, values: dict) -> np.ndarray:
        return np.array([float(values["mu"])])

    def posterior(self, temperature: float = 1.0) -> tuple[float, float]:
        """Exact mean and sd of the tempered posterior of ``mu``."""
        prec = temperature * self.n_rows / self.sigma**2 + 1 / self.s0**2
        mean = (temperature * self.y.sum() / self.sigma**2 + self.m0 / self.s0**2) / prec
        return float(mean), float(prec**-0.5)


class NormalMeanScale:
    """``y_i ~ N(mu, exp(tau)^2)``; ``mu ~ N(0, 5^2)``, ``tau ~ N(0, 1)`` (unconstrained ``tau``).

    Constrained parameters: ``mu`` and ``sigma = exp(tau)``.
    """

    def __init__(self, y: np.ndarray) -> None:
        self.y = np.asarray(y, dtype=float)
        self.n_rows = int(self.y.size)
        self.dim = 2
        self.param_names = ["mu", "sigma"]

    def log_prior(self, theta: np.ndarray) -> float:
        return float(-0.5 * (theta[0] / 5.0) ** 2 - 0.5 * theta[1] ** 2)

    def row_log_lik(self, theta: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        y = self.y if rows is None else self.y[np.asarray(rows)]
        return -0.5 * ((y - theta[0]) * np.exp(-theta[1])) ** 2 - theta[1] - 0.5 * LOG_2PI

    def row_log_lik_grad(self, theta, rows=None):
        y = self.y if rows is None else self.y[np.asarray(rows)]
        z = (y - theta[0]) * np.exp(-theta[1])
        vals = -0.5 * z**2 - theta[1] - 0.5 * LOG_2PI
        return vals, np.stack([z * np.exp(-theta[1]), z**2 - 1.0], axis=1)

    def constrain(self, theta: np.ndarray) -> dict[str, np.ndarray]:
        return {"mu": np.asarray(theta[0]), "sigma": np.asarray(np.exp(theta[1]))}

    def reference(self, temperature: float = 1.0, points: int = 400) -> dict[str, tuple[float, float]]:
        """Posterior means and sds of ``mu`` and ``tau`` (unconstrained) by grid quadrature."""
        ybar, s2 = self.y.mean(), self.y.var()
        n = self.n_rows
        mu = np.linspace(ybar - 3, ybar + 3, points)
        tau = np.linspace(np.log(np.sqrt(s2)) - 1.5, np.log(np.sqrt(s2)) + 1.5, points)
        M, Tau = np.meshgrid(mu, tau, indexing="ij")
        ssq = n * s2 + n * (ybar - M) ** 2
        logp = temperature * (-0.5 * ssq * np.exp(-2 * Tau) - n * Tau) - 0.5 * (M / 5) ** 2 - 0.5 * Tau**2
        w = np.exp(logp - logp.max())
        w /= w.sum()
        out = {}
        for name, G in (("mu", M), ("tau", Tau)):
            m = float((w * G).sum())
            out[name] = (m, float(np.sqrt((w * (G - m) ** 2).sum())))
        return out


class LogisticRegression:
    """``y_i ~ Bernoulli(logit^-1(alpha + x_i . beta))``, standard normal priors."""

    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        self.x, self.y = np.asarray(x, float), np.asarray(y, float)
        self.n_rows = int(self.y.size)
        self.dim = 1 + self.x.shape[1]
        self.param_names = ["alpha"] + [f"beta[{k + 1}]" for k in range(self.x.shape[1])]

    def log_prior(self, theta: np.ndarray) -> float:
        return float(-0.5 * theta @ theta - 0.5 * self.dim * LOG_2PI)

    def row_log_lik(self, theta, rows=None):
        idx = slice(None) if rows is None else np.asarray(rows)
        eta = theta[0] + self.x[idx] @ theta[1:]
        return self.y[idx] * eta - np.logaddexp(0.0, eta)

    def row_log_lik_grad(self, theta, rows=None):
        idx = slice(None) if rows is None else np.asarray(rows)
        eta = theta[0] + self.x[idx] @ theta[1:]
        resid = self.y[idx] - 1 / (1 + np.exp(-eta))
        grad = np.column_stack([resid, resid[:, None] * self.x[idx]])
        return self.y[idx] * eta - np.logaddexp(0.0, eta), grad

    def constrain(self, theta):
        return {"alpha": np.asarray(theta[0]), "beta": np.asarray(theta[1:])}


class Untouchable:
    """Wraps a density; any data access raises :class:`DataTouched`."""

    def __init__(self, inner) -> None:
        self._inner = inner
        self.n_rows, self.dim, self.param_names = inner.n_rows, inner.dim, inner.param_names
        if hasattr(inner, "stat_dim"):
            self.stat_dim = inner.stat_dim

    def log_prior(self, theta):
        return self._inner.log_prior(theta)

    def constrain(self, theta):
        return self._inner.constrain(theta)

    def log_lik_stats(self, theta, stats):
        return self._inner.log_lik_stats(theta, stats)

    def row_log_lik(self, theta, rows=None):
        raise DataTouched("row_log_lik called")

    def row_log_lik_grad(self, theta, rows=None):
        raise DataTouched("row_log_lik_grad called")

    def row_stats(self):
        raise DataTouched("row_stats called")


class NormalMeanExpFamily(NormalMean):
    """:class:`NormalMean` on the summed statistic ``S = sum y_i`` (``stat_dim = 1``).

    ``log_lik_stats(theta, S) = -n mu^2 / (2 sigma^2) + mu S / sigma^2`` (terms
    not depending on ``mu`` dropped).  No ``row_log_lik``: a sampler that
    needs it fails loudly.
    """

    stat_dim = 1

    def __init__(self, y, sigma=1.0, m0=0.0, s0=10.0) -> None:
        super().__init__(y, sigma, m0, s0)
        self.stat_calls = 0
        self.lik_calls = 0

    def row_log_lik(self, theta, rows=None):  # noqa: D102
        raise AssertionError("exp-family sampler must not evaluate rows")

    def log_lik_stats(self, theta: np.ndarray, stats: np.ndarray) -> float:
        self.lik_calls += 1
        mu = theta[0]
        return float(-0.5 * self.n_rows * mu**2 / self.sigma**2 + mu * stats[0] / self.sigma**2)

    def row_stats(self) -> np.ndarray:
        self.stat_calls += 1
        return self.y[:, None].copy()


class NormalMeanScaleExpFamily(NormalMeanScale):
    """:class:`NormalMeanScale` on ``S = (sum y_i, sum y_i^2)``."""

    stat_dim = 2

    def __init__(self, y) -> None:
        super().__init__(y)
        self.stat_calls = 0

    def row_log_lik(self, theta, rows=None):  # noqa: D102
        raise AssertionError("exp-family sampler must not evaluate rows")

    def log_lik_stats(self, theta, stats) -> float:
        mu, tau = theta
        n = self.n_rows
        prec = np.exp(-2 * tau)
        return float(-n * tau - 0.5 * n * LOG_2PI - 0.5 * prec * (stats[1] - 2 * mu * stats[0] + n * mu**2))

    def row_stats(self) -> np.ndarray:
        self.stat_calls += 1
        return np.column_stack([self.y, self.y**2])


class NotAffine(NormalMeanExpFamily):
    """Log-likelihood quadratic in S: must be refused at set-up."""

    def log_lik_stats(self, theta, stats) -> float:
        return super().log_lik_stats(theta, stats) + 1e-3 * float(stats[0]) ** 2


class VaryingIntercept:
    """``y_i ~ N(a[g_i], sigma)``, ``a_j ~ N(mu, tau)``, ``mu ~ N(0, 100)``, ``tau, sigma ~ N+(0, 10)``.

    Unconstrained ``theta = (mu, log tau, a_1..a_J, log sigma)``; the log
    prior includes the Jacobians of the log transforms.  Rows touch only
    ``a`` and ``log sigma``; ``mu`` and ``log tau`` are held by the prior.
    """

    def __init__(self, y: np.ndarray, g: np.ndarray, groups: int) -> None:
        self.y, self.g, self.groups = np.asarray(y, float), np.asarray(g, int), int(groups)
        self.n_rows, self.dim = int(self.y.size), self.groups + 3
        self.param_names = ["mu", "tau"] + [f"a[{j + 1}]" for j in range(self.groups)] + ["sigma"]

    def log_prior_grad(self, th: np.ndarray) -> tuple[float, np.ndarray]:
        mu, lt, a, ls = th[0], th[1], th[2:-1], th[-1]
        tau, sigma = np.exp(lt), np.exp(ls)
        r = (a - mu) / tau
        value = (-0.5 * (mu / 100.0) ** 2 - 0.5 * (tau / 10.0) ** 2 + lt
                 - self.groups * lt - 0.5 * np.sum(r * r) - 0.5 * (sigma / 10.0) ** 2 + ls)
        grad = np.zeros(self.dim)
        grad[0] = -mu / 1e4 + np.sum(r) / tau
        grad[1] = -(tau / 10.0) ** 2 + 1.0 - self.groups + np.sum(r * r)
        grad[2:-1] = -r / tau
        grad[-1] = -(sigma / 10.0) ** 2 + 1.0
        return float(value), grad

    def log_prior(self, th: np.ndarray) -> float:
        return self.log_prior_grad(th)[0]

    def row_log_lik_grad(self, th: np.ndarray, rows=None):
        idx = slice(None) if rows is None else np.asarray(rows)
        y, g = self.y[idx], self.g[idx]
        ls = th[-1]
        r = (y - th[2:-1][g]) / np.exp(ls)
        value = -0.5 * r * r - ls - 0.5 * LOG_2PI
        grad = np.zeros((y.size, self.dim))
        grad[np.arange(y.size), 2 + g] = r / np.exp(ls)
        grad[:, -1] = r * r - 1.0
        return value, grad

    def row_log_lik(self, th: np.ndarray, rows=None) -> np.ndarray:
        return self.row_log_lik_grad(th, rows)[0]

    def constrain(self, th: np.ndarray) -> dict[str, np.ndarray]:
        return {"mu": np.asarray(th[0]), "tau": np.asarray(np.exp(th[1])),
                "a": np.asarray(th[2:-1]), "sigma": np.asarray(np.exp(th[-1]))}

    def exact(self) -> tuple[np.ndarray, np.ndarray]:
        """Joint posterior mode (unconstrained) and the inverse Hessian there (Newton's method)."""
        th = np.zeros(self.dim)
        th[2:-1] = [self.y[self.g == j].mean() for j in range(self.groups)]
        th[0] = th[2:-1].mean()
        th[1] = np.log(th[2:-1].std() + 1e-3)
        th[-1] = np.log(np.std(self.y - th[2:-1][self.g]))

        def total_grad(t: np.ndarray) -> np.ndarray:
            return self.log_prior_grad(t)[1] + self.row_log_lik_grad(t)[1].sum(axis=0)

        for _ in range(100):
            h = np.empty((self.dim, self.dim))
            for j in range(self.dim):
                e = np.zeros(self.dim)
                e[j] = 1e-5
                h[:, j] = -(total_grad(th + e) - total_grad(th - e)) / 2e-5
            h = 0.5 * (h + h.T)
            th = th + np.linalg.solve(h, total_grad(th))
        return th, np.linalg.inv(h)


class BoundedVaryingIntercept(VaryingIntercept):
    """``y_i ~ N(a[g_i], sigma)``, ``a_j ~ N(mu, tau)``, ``mu ~ N(0, 100)``, with ``tau`` and
    ``sigma`` declared ``real<lower=0, upper=100>`` (flat between: Gelman and Hill's BUGS radon
    model).

    Unconstrained ``theta = (mu, logit(tau / 100), a_1..a_J, logit(sigma / 100))``; the log prior
    includes the transforms' log Jacobians ``log(tau / 100) + log(1 - tau / 100)`` (up to a
    constant).  It declares what a compiled model reads from such a program: the group
    (``hierarchical_hyperparameters``, ``hierarchical_coordinates``), its scale's upper bound
    (``hierarchical_scale_uppers``), and both scales on the logit transform and passed as a
    sampling statement's scale (``bounded_coordinates``, ``bounded_scale_coordinates``)."""

    upper = 100.0
    intercept_in_rows = False
    """Whether ``mu`` enters the rows (``ZeroMeanIntercept``) or only the groups' statement."""

    def __init__(self, y: np.ndarray, g: np.ndarray, groups: int) -> None:
        super().__init__(y, g, groups)
        members = tuple(range(2, 2 + self.groups))
        self.hierarchical_hyperparameters = ((members, (0,), (1,)),)
        self.hierarchical_coordinates = ((members, 0),)
        self.hierarchical_scale_uppers = {1: self.upper}
        self.bounded_coordinates = np.zeros(self.dim, dtype=bool)
        self.bounded_coordinates[[1, -1]] = True
        self.bounded_scale_coordinates = self.bounded_coordinates.copy()
        self.log_coordinates = np.zeros(self.dim, dtype=bool)

    def _scale(self, u: float) -> tuple[float, float]:
        """``(sigma, d log sigma / du)`` at ``u = logit(sigma / upper)``."""
        s = 1.0 / (1.0 + np.exp(-u))
        return self.upper * s, 1.0 - s

    def log_prior_grad(self, th: np.ndarray) -> tuple[float, np.ndarray]:
        mu, a = th[0], th[2:-1]
        (tau, dt), (_, ds) = self._scale(th[1]), self._scale(th[-1])
        r = (a - mu) / tau
        jacobian = lambda u: -np.logaddexp(0.0, -u) - np.logaddexp(0.0, u)   # log s + log(1 - s)
        value = (-0.5 * (mu / 100.0) ** 2 - self.groups * np.log(tau) - 0.5 * np.sum(r * r)
                 + jacobian(th[1]) + jacobian(th[-1]))
        grad = np.zeros(self.dim)
        grad[0] = -mu / 1e4 + np.sum(r) / tau
        grad[1] = (np.sum(r * r) - self.groups) * dt + (2.0 * dt - 1.0)
        grad[2:-1] = -r / tau
        grad[-1] = 2.0 * ds - 1.0
        return float(value), grad

    def row_log_lik_grad(self, th: np.ndarray, rows=None):
        idx = slice(None) if rows is None else np.asarray(rows)
        y, g = self.y[idx], self.g[idx]
        sigma, ds = self._scale(th[-1])
        r = (y - self.intercept_in_rows * th[0] - th[2:-1][g]) / sigma
        value = -0.5 * r * r - np.log(sigma) - 0.5 * LOG_2PI
        grad = np.zeros((y.size, self.dim))
        grad[:, 0] = self.intercept_in_rows * r / sigma
        grad[np.arange(y.size), 2 + g] = r / sigma
        grad[:, -1] = (r * r - 1.0) * ds
        return value, grad

    def constrain(self, th: np.ndarray) -> dict[str, np.ndarray]:
        return {"mu": np.asarray(th[0]), "tau": np.asarray(self._scale(th[1])[0]),
                "a": np.asarray(th[2:-1]), "sigma": np.asarray(self._scale(th[-1])[0])}

    def exact(self) -> tuple[np.ndarray, np.ndarray]:
        """Joint posterior mode (unconstrained) and the inverse Hessian there (Newton's method from
        the groups' means, :meth:`_start`, with step halving)."""
        th = self._start()

        def total(t: np.ndarray) -> tuple[float, np.ndarray]:
            value, grad = self.row_log_lik_grad(t)
            prior, prior_grad = self.log_prior_grad(t)
            return float(np.sum(value)) + prior, prior_grad + grad.sum(axis=0)

        for _ in range(200):
            h = np.empty((self.dim, self.dim))
            for j in range(self.dim):
                e = np.zeros(self.dim)
                e[j] = 1e-5
                h[:, j] = -(total(th + e)[1] - total(th - e)[1]) / 2e-5
            h = 0.5 * (h + h.T)
            value, grad = total(th)
            step, t = np.linalg.solve(h, grad), 1.0
            while t > 1e-8 and not total(th + t * step)[0] >= value:
                t *= 0.5
            th = th + t * step
        return th, np.linalg.inv(h)


    def _start(self) -> np.ndarray:
        """Newton's start: the groups' means, their spread and the rows' spread about them."""
        logit = lambda x: np.log(x / (self.upper - x))
        means = np.array([self.y[self.g == j].mean() for j in range(self.groups)])
        return np.r_[means.mean(), logit(means.std() + 1e-3), means, logit(np.std(self.y - means[self.g]))]


class ZeroMeanIntercept(BoundedVaryingIntercept):
    """:class:`BoundedVaryingIntercept` written as rstanarm and most users write random effects:
    ``y_i ~ N(mu + a[g_i], sigma)``, ``a_j ~ N(0, tau)`` (the group's intercept ``mu`` in the
    likelihood, the elements' statement without a location).  Same coordinates; it declares the
    group without a location (``zero_mean_hyperparameters`` ``(members, (), (tau,))``, and no
    centred group) and its intercept ridge (``flat_directions``: ``mu`` +1, every ``a_j`` -1), as a
    compiled model reads such a program.  ``bounded=False``:
    ``tau`` and ``sigma`` declared ``real<lower=0>`` instead (coordinates ``log tau``,
    ``log sigma``; flat priors)."""

    intercept_in_rows = True

    def __init__(self, y: np.ndarray, g: np.ndarray, groups: int, bounded: bool = True) -> None:
        super().__init__(y, g, groups)
        self.bounded = bool(bounded)
        self.zero_mean_hyperparameters = ((self.hierarchical_hyperparameters[0][0], (), (1,)),)
        # a vector indexed by each row's group: an index group (its elements' first frame and the
        # far phase's direction), as a compiled model reads a[g] without a centred statement
        self.index_group_coordinates = (self.hierarchical_hyperparameters[0][0],)
        # mu + a[g] in every row: the ridge a compiled model reads (flat_directions)
        ridge = np.zeros(self.dim)
        ridge[0], ridge[list(self.hierarchical_hyperparameters[0][0])] = 1.0, -1.0
        self.flat_directions = (ridge,)
        self.hierarchical_hyperparameters = ()
        self.hierarchical_coordinates = ()
        if not self.bounded:
            self.hierarchical_scale_uppers = {}
            self.log_coordinates = self.bounded_coordinates.copy()
            self.bounded_coordinates = np.zeros(self.dim, dtype=bool)
            self.bounded_scale_coordinates = self.bounded_coordinates.copy()

    def _scale(self, u: float) -> tuple[float, float]:
        return super()._scale(u) if self.bounded else (float(np.exp(u)), 1.0)

    def log_prior_grad(self, th: np.ndarray) -> tuple[float, np.ndarray]:
        mu, a = th[0], th[2:-1]
        (tau, dt), (_, ds) = self._scale(th[1]), self._scale(th[-1])
        r = a / tau
        if self.bounded:
            jacobian = lambda u: -np.logaddexp(0.0, -u) - np.logaddexp(0.0, u)
            jac_grad = lambda u: 2.0 * self._scale(u)[1] - 1.0
        else:
            jacobian, jac_grad = (lambda u: u), (lambda u: 1.0)
        value = (-0.5 * (mu / 100.0) ** 2 - self.groups * np.log(tau) - 0.5 * np.sum(r * r)
                 + jacobian(th[1]) + jacobian(th[-1]))
        grad = np.zeros(self.dim)
        grad[0] = -mu / 1e4
        grad[1] = (np.sum(r * r) - self.groups) * dt + jac_grad(th[1])
        grad[2:-1] = -r / tau
        grad[-1] = jac_grad(th[-1])
        return float(value), grad

    def posterior_moments(self, half_width: float = 10.0, points: int = 161) -> tuple[np.ndarray, np.ndarray]:
        """Exact posterior mean and sd of every unconstrained coordinate.

        Given the two scales, ``(mu, a)`` is Gaussian (a linear model with the prior's precision
        ``(1e-4, 1 / tau^2, ...)``), so the posterior is a mixture over the scales' coordinates
        ``(u_tau, u_sigma)``: their marginal density (the Gaussian's normaliser times the scales'
        priors and Jacobians) on a ``points x points`` grid within ``half_width`` Laplace sds of
        :meth:`exact`'s mode on each, the conditional means and variances of ``(mu, a)`` at every
        node, and the moments by the law of total variance.  Raises where the grid's edge holds
        more than 1e-8 of the mass.
        """
        n, groups = self.y.size, self.groups
        design = np.zeros((n, groups + 1))
        design[:, 0] = 1.0
        design[np.arange(n), 1 + self.g] = 1.0
        xtx, xty, yty = design.T @ design, design.T @ self.y, float(self.y @ self.y)
        mode, cov = self.exact()
        sd = np.sqrt(np.diag(cov))
        offsets = np.linspace(-half_width, half_width, points)
        u_tau, u_sigma = mode[1] + sd[1] * offsets, mode[-1] + sd[-1] * offsets
        log_jacobian = ((lambda u: -np.logaddexp(0.0, -u) - np.logaddexp(0.0, u)) if self.bounded
                        else (lambda u: u))
        log_density = np.empty((points, points))
        means = np.empty((points, points, groups + 1))
        variances = np.empty((points, points, groups + 1))
        for i, ut in enumerate(u_tau):
            prior_precision = np.r_[1e-4, np.full(groups, self._scale(ut)[0] ** -2)]
            for k, us in enumerate(u_sigma):
                w = self._scale(us)[0] ** -2
                precision = xtx * w + np.diag(prior_precision)
                chol = np.linalg.cholesky(precision)
                mean = np.linalg.solve(precision, xty * w)
                log_density[i, k] = (0.5 * n * np.log(w) - 0.5 * yty * w + 0.5 * mean @ precision @ mean
                                     - np.sum(np.log(np.diag(chol))) + 0.5 * np.sum(np.log(prior_precision))
                                     + log_jacobian(ut) + log_jacobian(us))
                means[i, k] = mean
                variances[i, k] = np.diag(np.linalg.inv(precision))
        weight = np.exp(log_density - special.logsumexp(log_density))
        edge = max(weight[0].sum(), weight[-1].sum(), weight[:, 0].sum(), weight[:, -1].sum())
        if edge > 1e-8:
            raise ValueError(f"the grid's edge holds {edge:.2g} of the posterior mass: widen it")
        mean_beta = np.einsum("ik,ikj->j", weight, means)
        var_beta = np.einsum("ik,ikj->j", weight, variances + means ** 2) - mean_beta ** 2
        w_tau, w_sigma = weight.sum(axis=1), weight.sum(axis=0)
        m_tau, m_sigma = w_tau @ u_tau, w_sigma @ u_sigma
        v_tau, v_sigma = w_tau @ u_tau ** 2 - m_tau ** 2, w_sigma @ u_sigma ** 2 - m_sigma ** 2
        return (np.r_[mean_beta[0], m_tau, mean_beta[1:], m_sigma],
                np.sqrt(np.r_[var_beta[0], v_tau, var_beta[1:], v_sigma]))

    def _start(self) -> np.ndarray:
        """Newton's start: the groups' means about their mean, their spread, the rows' spread."""
        means = np.array([self.y[self.g == j].mean() for j in range(self.groups)])
        to_u = (lambda x: np.log(x / (self.upper - x))) if self.bounded else np.log
        return np.r_[means.mean(), to_u(means.std() + 1e-3), means - means.mean(),
                     to_u(np.std(self.y - means[self.g]))]


def radon_like_rows(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(y, g)``: 1,000 rows in 20 groups of ~50, group means 1.5 +- 0.3, ``sigma`` = 0.75 (the
    data of ``seed``), for any of the varying-intercept densities here (20 groups)."""
    rng = np.random.default_rng(seed)
    g = rng.integers(0, 20, 1000)
    return (1.5 + 0.3 * rng.normal(size=20))[g] + 0.75 * rng.normal(size=1000), g


def radon_like(seed: int) -> VaryingIntercept:
    """A ``radon``-like varying intercept on :func:`radon_like_rows` of ``seed``."""
    return VaryingIntercept(*radon_like_rows(seed), 20)


class NormalRegression:
    """``y_i ~ N(x_i . beta, sigma^2)`` with flat priors on ``beta`` and on ``sigma > 0``.

    Written as Stan writes ``real<lower=0> sigma;`` with no prior: the
    unconstrained coordinate is ``log sigma`` and the prior part is its
    Jacobian, ``log sigma``.  :meth:`exact` gives the posterior means and sds
    in closed form: ``beta`` is multivariate t around the least-squares fit
    with ``nu = n - p - 1`` degrees of freedom, and ``u = RSS exp(-2 log sigma) / 2``
    is ``Gamma((n - p - 1) / 2)``.
    """

    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        self.x, self.y = np.asarray(x, float), np.asarray(y, float)
        self.n_rows, self.p = self.x.shape
        self.dim = self.p + 1
        self.param_names = [f"beta[{k + 1}]" for k in range(self.p)] + ["log_sigma"]

    def log_prior(self, theta: np.ndarray) -> float:
        return float(theta[-1])

    def log_prior_grad(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        g = np.zeros(self.dim)
        g[-1] = 1.0
        return self.log_prior(theta), g

    def row_log_lik(self, theta, rows=None):
        idx = slice(None) if rows is None else np.asarray(rows)
        r = self.y[idx] - self.x[idx] @ theta[:-1]
        return -0.5 * r * r * np.exp(-2.0 * theta[-1]) - theta[-1] - 0.5 * LOG_2PI

    def row_log_lik_grad(self, theta, rows=None):
        idx = slice(None) if rows is None else np.asarray(rows)
        r = self.y[idx] - self.x[idx] @ theta[:-1]
        e = np.exp(-2.0 * theta[-1])
        grad = np.column_stack([self.x[idx] * (r * e)[:, None], r * r * e - 1.0])
        return self.row_log_lik(theta, rows), grad

    def constrain(self, theta):
        return {"beta": np.asarray(theta[:-1]), "log_sigma": np.asarray(theta[-1])}

    def exact(self) -> tuple[np.ndarray, np.ndarray]:
        """Posterior means and sds of ``(beta, log sigma)``."""
        from scipy import special

        beta, *_ = np.linalg.lstsq(self.x, self.y, rcond=None)
        rss = float(np.sum((self.y - self.x @ beta) ** 2))
        nu = self.n_rows - self.p - 1
        sd_beta = np.sqrt(rss / nu * np.diag(np.linalg.inv(self.x.T @ self.x)) * nu / (nu - 2))
        k = nu / 2.0
        mean_t = 0.5 * (np.log(rss / 2.0) - special.digamma(k))
        sd_t = 0.5 * np.sqrt(special.polygamma(1, k))
        return np.append(beta, mean_t), np.append(sd_beta, sd_t)


class UniformScaleRegression(NormalRegression):
    """:class:`NormalRegression` with ``real<lower=0, upper=upper> sigma`` (a ``uniform(0, upper)``
    prior, the BUGS idiom), on Stan's logit transform: ``sigma = upper * logistic(u)``.

    The prior part is the transform's log Jacobian, ``log logistic(u) + log logistic(-u)`` (up to
    a constant), so the posterior is :class:`NormalRegression`'s (flat in ``sigma``) restricted to
    ``sigma < upper``: where the rows put ``sigma`` far below ``upper``, :meth:`exact` holds for
    ``beta`` and ``log sigma``.  It declares ``bounded_coordinates`` and
    ``bounded_scale_coordinates`` as a compiled program with that declaration does (read by the
    search)."""

    def __init__(self, x: np.ndarray, y: np.ndarray, upper: float = 100.0) -> None:
        super().__init__(x, y)
        self.upper = float(upper)
        self.param_names = [f"beta[{k + 1}]" for k in range(self.p)] + ["sigma"]
        self.bounded_coordinates = np.r_[np.zeros(self.p, dtype=bool), True]
        self.bounded_scale_coordinates = self.bounded_coordinates.copy()   # sigma is the rows' scale
        self.log_coordinates = np.zeros(self.dim, dtype=bool)

    def _log_scale(self, theta: np.ndarray) -> np.ndarray:
        """``theta`` with ``u`` replaced by ``log sigma``."""
        return np.r_[theta[:-1], np.log(self.upper) - np.logaddexp(0.0, -theta[-1])]

    def log_prior(self, theta: np.ndarray) -> float:
        return float(-np.logaddexp(0.0, -theta[-1]) - np.logaddexp(0.0, theta[-1]))

    def log_prior_grad(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        g = np.zeros(self.dim)
        g[-1] = 1.0 - 2.0 / (1.0 + np.exp(-theta[-1]))
        return self.log_prior(theta), g

    def row_log_lik(self, theta, rows=None):
        return super().row_log_lik(self._log_scale(theta), rows)

    def row_log_lik_grad(self, theta, rows=None):
        # the parent's values call self.row_log_lik, which would transform u a second time
        _, grad = super().row_log_lik_grad(self._log_scale(theta), rows)
        grad = grad.copy()
        grad[:, -1] /= 1.0 + np.exp(theta[-1])   # d log sigma / du = logistic(-u)
        return self.row_log_lik(theta, rows), grad

    def constrain(self, theta):
        return {"beta": np.asarray(theta[:-1]), "sigma": np.asarray(np.exp(self._log_scale(theta)[-1]))}


class CentredGroups:
    """``y_i ~ N(a[g_i], 1)``, ``a_j ~ N(mu, 1)``, ``mu ~ N(0, 10^2)``: a centred varying intercept
    with known scales, so the posterior is exactly Gaussian (:meth:`exact`; :class:`VaryingIntercept`
    has unknown scales and only a Newton mode).  Coordinates
    ``a.1 .. a.J, mu``; with ``groups`` it declares, as a compiled model reads from its program,
    its group (``hierarchical_coordinates``: the ``a_j`` and their location ``mu``)."""

    def __init__(self, y: np.ndarray, g: np.ndarray, groups: bool = True) -> None:
        self.y, self.g = np.asarray(y, float), np.asarray(g, int)
        self.J = int(self.g.max()) + 1
        self.n_rows, self.dim = int(self.y.size), self.J + 1
        self.param_names = [f"a.{j + 1}" for j in range(self.J)] + ["mu"]
        if groups:
            self.hierarchical_coordinates = ((tuple(range(self.J)), self.J),)

    def log_prior(self, theta: np.ndarray) -> float:
        a, mu = theta[:-1], theta[-1]
        return float(-0.5 * np.sum((a - mu) ** 2) - 0.5 * (mu / 10.0) ** 2)

    def log_prior_grad(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        a, mu = theta[:-1], theta[-1]
        return self.log_prior(theta), np.append(-(a - mu), np.sum(a - mu) - mu / 100.0)

    def row_log_lik(self, theta, rows=None):
        idx = slice(None) if rows is None else np.asarray(rows)
        return -0.5 * (self.y[idx] - theta[self.g[idx]]) ** 2 - 0.5 * LOG_2PI

    def row_log_lik_grad(self, theta, rows=None):
        idx = slice(None) if rows is None else np.asarray(rows)
        r = self.y[idx] - theta[self.g[idx]]
        grads = np.zeros((r.size, self.dim))
        grads[np.arange(r.size), self.g[idx]] = r
        return -0.5 * r**2 - 0.5 * LOG_2PI, grads

    def constrain(self, theta: np.ndarray) -> dict[str, np.ndarray]:
        return {"a": np.asarray(theta[:-1]), "mu": np.asarray(theta[-1])}

    def exact(self) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and covariance (the log density is quadratic)."""
        J, d = self.J, self.dim
        counts = np.bincount(self.g, minlength=J)
        prec = np.zeros((d, d))
        prec[np.arange(J), np.arange(J)] = counts + 1.0
        prec[:J, J] = prec[J, :J] = -1.0
        prec[J, J] = J + 1.0 / 100.0
        cov = np.linalg.inv(prec)
        return cov @ np.append(np.bincount(self.g, weights=self.y, minlength=J), 0.0), cov


class CentredInterceptsSlopes:
    """``y_i ~ N(a[g_i] + b[g_i] x_i, 1)``, ``a_j ~ N(mu_a, 1)``, ``b_j ~ N(mu_b, 1)``, both
    ``mu ~ N(0, 10^2)``: a centred varying intercept and varying slope with known scales (the shape
    of ``radon-slopes``), so the posterior is exactly Gaussian (:meth:`exact`).  Coordinates
    ``a.1 .. a.J, b.1 .. b.J, mu_a, mu_b``; it declares both groups (``hierarchical_coordinates``),
    as a compiled model reads them from its program."""

    def __init__(self, y: np.ndarray, x: np.ndarray, g: np.ndarray) -> None:
        self.y, self.x, self.g = np.asarray(y, float), np.asarray(x, float), np.asarray(g, int)
        self.J = J = int(self.g.max()) + 1
        self.n_rows, self.dim = int(self.y.size), 2 * J + 2
        self.param_names = ([f"a.{j + 1}" for j in range(J)] + [f"b.{j + 1}" for j in range(J)]
                            + ["mu_a", "mu_b"])
        self.hierarchical_coordinates = ((tuple(range(J)), 2 * J), (tuple(range(J, 2 * J)), 2 * J + 1))

    def _prior_precision(self) -> np.ndarray:
        J, d = self.J, self.dim
        prec = np.zeros((d, d))
        for block, loc in ((slice(0, J), 2 * J), (slice(J, 2 * J), 2 * J + 1)):
            idx = np.arange(d)[block]
            prec[idx, idx] = 1.0
            prec[idx, loc] = prec[loc, idx] = -1.0
            prec[loc, loc] = J + 1.0 / 100.0
        return prec

    def log_prior(self, theta: np.ndarray) -> float:
        return float(-0.5 * theta @ self._prior_precision() @ theta)

    def log_prior_grad(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        return self.log_prior(theta), -self._prior_precision() @ theta

    def _design(self, idx) -> np.ndarray:
        g, x = self.g[idx], self.x[idx]
        v = np.zeros((g.size, self.dim))
        v[np.arange(g.size), g] = 1.0
        v[np.arange(g.size), self.J + g] = x
        return v

    def row_log_lik(self, theta, rows=None):
        idx = slice(None) if rows is None else np.asarray(rows)
        r = self.y[idx] - self._design(idx) @ theta
        return -0.5 * r**2 - 0.5 * LOG_2PI

    def row_log_lik_grad(self, theta, rows=None):
        idx = slice(None) if rows is None else np.asarray(rows)
        v = self._design(idx)
        r = self.y[idx] - v @ theta
        return -0.5 * r**2 - 0.5 * LOG_2PI, r[:, None] * v

    def constrain(self, theta: np.ndarray) -> dict[str, np.ndarray]:
        J = self.J
        return {"a": np.asarray(theta[:J]), "b": np.asarray(theta[J:2 * J]),
                "mu_a": np.asarray(theta[2 * J]), "mu_b": np.asarray(theta[2 * J + 1])}

    def exact(self) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and covariance (the log density is quadratic)."""
        v = self._design(slice(None))
        cov = np.linalg.inv(v.T @ v + self._prior_precision())
        return cov @ (v.T @ self.y), cov


SIZES = (400, 250, 180, 100, 50, 20)


def group_data(seed: int = 72) -> dict:
    """Six groups of :data:`SIZES` rows, a covariate centred near 0 (sd 10), outcomes about 20 (sd 3)."""
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(1, len(SIZES) + 1), SIZES)
    x = rng.normal(0.0, 10.0, g.size)
    mu = np.array([20.0, 22.0, 18.0, 25.0, 21.0, 19.0])
    y = mu[g - 1] + 0.2 * x + rng.normal(0.0, 3.0, g.size)
    return {"N": int(g.size), "J": len(SIZES), "g": g, "x": x, "y": y}

"""A Stan program written in terms of summed sufficient statistics (Yıldırım, Section 3.3).

For an exponential family the log-likelihood of ``n`` i.i.d. rows is affine
in the summed statistic ``S = Σ_i s(y_i)`` (seed 000, eq. (7))::

    log p(y_{1:n} | θ) = n log g(θ) + φ(θ)ᵀ S

The user writes a Stan program whose data are the row count ``N``, the
statistic ``S`` (``vector[K] S``) and any public, shared data — never the rows
— and whose log density is ``prior(θ) + φ(θ)ᵀ S + N c(θ)``.  The rows stay in
Python: a per-row function ``statistic(row) -> (K,)`` maps each row to its
statistic, and :func:`stan_dp.samplers.expfamily.penalty_expfamily` projects
each row's statistic onto the l2 ball of radius ``clip`` and releases a fresh
noisy ``S`` every iteration (Algorithm 3).

:class:`StanExpFamilyModel` satisfies :class:`stan_dp.density.ExpFamilyDensity`.
It builds a few BridgeStan instances of the compiled program on *public* data
only (shared variables, ``N`` and a fixed ``S``)::

    prior(θ)      = lp(N = 0, S = 0; θ)
    a(θ)          = lp(N = n, S = 0; θ) − lp(N = 0, S = 0; θ)
    φ_k(θ)        = [lp(N = n, S = t e_k; θ) − lp(N = n, S = 0; θ)] / t,   t = max(1, n)
    log_lik_stats(θ, S) = a(θ) + φ(θ)ᵀ S

(``lp`` with ``propto=False, jacobian=True``; the Jacobian cancels in the
differences).  The scale ``t`` keeps ``φ`` accurate when ``n c(θ)`` is large:
the rounding error of the difference is divided by ``t``.  Affinity in ``S``
and a parameter dimension independent of ``N`` are verified at set-up at
random points; a program that fails either is refused.

One sampler iteration costs ``K + 2`` model evaluations (prior, ``S = 0`` and
the ``K`` unit statistics at the proposal), whatever ``n``; the rows are read
once per run, by :meth:`StanExpFamilyModel.row_stats`.
"""

from __future__ import annotations

import logging
import os
import re
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Sequence

import numpy as np
import stanio

from stan_dp.data import check_row_count, load_data
from stan_dp.model import CHECK_POINT_RADII, _as_library, check_points
from stan_dp.params import ParamLayout

logger = logging.getLogger(__name__)

__all__ = ["StanExpFamilyModel", "ExpFamilyModelError", "AFFINE_RTOL"]

#: Relative tolerance of the set-up affinity check.
AFFINE_RTOL = 1e-8

_DIMS_DECLARED = re.compile(r"variable name=(\w+);(?: position=\d+;)? dims declared=\(([\d,\s]*)\)")
_VARIABLE = re.compile(r"variable name=(\w+)|(\w+)(?:\[[\d,\s]*\])* is [^,]*, but must be")


class ExpFamilyModelError(ValueError):
    """The Stan program is not of the form ``prior(θ) + φ(θ)ᵀ S + N c(θ)``, or its data are unusable."""


def _lp(instance: Any, theta: np.ndarray) -> float:
    """Stan's log density (``propto=False``, Jacobian); NaN where Stan rejects θ."""
    try:
        return float(instance.log_density(theta, propto=False, jacobian=True))
    except RuntimeError:
        return float("nan")


def _as_floats(value: Any) -> np.ndarray:
    """``value`` as a float array; a failure names no value (it would be data)."""
    try:
        return np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(
            "statistic returned something that is not an array of numbers for some row; "
            "it must return numbers only (the value is not shown: it is data)"
        ) from None


class StanExpFamilyModel:
    """A Stan program in terms of a summed statistic ``S``, plus a per-row statistic function.

    Parameters
    ----------
    model : path
        A ``.stan`` file (compiled and cached on first use) or a library built
        by :func:`stan_dp.compile_model`.  Its data block declares the row count
        (``int<lower=0> N``), the statistic (``vector[K] S``, no constraints)
        and shared public data only; its log density must be affine in ``S``.
    data : dict or path
        All the data: the shared public variables, ``N`` and the confidential
        row variables (arrays whose leading dimension is ``N``).  ``S`` must not
        be included: it is computed from the rows.  Row variables are passed
        only to ``statistic``, never to the Stan program.
    statistic : callable
        ``statistic(row) -> array (K,)`` where ``row`` maps each row variable
        to that row's value (e.g. ``{"y": array(1.3)}``).  With
        ``vectorized=True`` it receives the full row arrays (leading dimension
        ``n``) and returns ``(n, K)``.  Bound its l2 norm by clamping inside
        the function and pass that bound as ``clip`` to the sampler.
    stat_var : str, default "S"
        The Stan data variable holding the summed statistic.
    rows : str, default "N"
        The integer data variable that counts rows.
    row_vars : sequence of str, optional
        The confidential row variables.  By default every variable (other
        than ``rows``) whose leading dimension equals the row count.
    stat_dim : int, optional
        ``K``; read from the Stan program's declaration of ``stat_var`` when
        omitted.
    vectorized : bool, default False
        Whether ``statistic`` takes all rows at once.
    seed : int, default 1234
        Seed for RNG calls in ``transformed data`` (the same for every instance).
    check : bool, default True
        Verify affinity in ``S`` at random points (recommended).
    stanc_args : sequence of str
        Extra stanc arguments when ``model`` is a ``.stan`` file.
    cache_dir : path, optional
        Compilation cache (default: the per-user cache).

    Attributes
    ----------
    n_rows, dim, stat_dim : int
        Rows, unconstrained dimension, statistic dimension ``K``.
    param_names : list of str
        Stan's constrained names of the ``parameters`` block (``beta.1``).
    row_vars : tuple of str
        The confidential row variables (never passed to Stan).
    public_data : dict
        The shared data given to every Stan instance (without ``N`` and ``S``).
    n_evaluations : int
        Stan log-density evaluations so far (for cost checks).
    n_row_passes : int
        Calls of :meth:`row_stats` so far (data accesses).

    Raises
    ------
    ExpFamilyModelError
        For bad data (``S`` given, no/bad row count, unknown row variables), a
        Stan program that rejects the public data (for instance because it
        declares a row variable), cannot be built with ``N = 0``, whose
        parameter dimension depends on ``N``, or whose log density is not
        affine in ``S``.
    """

    def __init__(
        self,
        model: str | os.PathLike[str],
        data: Mapping[str, Any] | str | os.PathLike[str],
        *,
        statistic: Callable[..., Any],
        stat_var: str = "S",
        rows: str = "N",
        row_vars: Sequence[str] | None = None,
        stat_dim: int | None = None,
        vectorized: bool = False,
        seed: int = 1234,
        check: bool = True,
        stanc_args: Sequence[str] = (),
        cache_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        import bridgestan

        self._bridgestan = bridgestan
        if not callable(statistic):
            raise TypeError(f"statistic must be callable, got {type(statistic).__name__}")
        if not isinstance(stat_var, str) or not stat_var:
            raise ValueError("stat_var must be the name of the Stan data variable holding S")
        if stat_var == rows:
            raise ValueError("stat_var and rows must name different variables")
        self.statistic = statistic
        self.vectorized = bool(vectorized)
        self.stat_var = stat_var
        self.rows_var = rows
        self.seed = int(seed)

        values = self._read_data(data)
        try:
            self.n_rows = check_row_count(values, rows)
        except ValueError as exc:
            raise ExpFamilyModelError(str(exc)) from exc
        if stat_var in values:
            raise ExpFamilyModelError(
                f"the data include {stat_var!r}, the summed statistic: it is computed from the "
                "rows by `statistic` (and released only with noise by the sampler); "
                f"remove {stat_var!r} from the data"
            )
        self.row_vars = self._find_row_vars(values, row_vars)
        # The confidential rows: kept here, handed only to `statistic`.
        self._rows = {v: np.asarray(values[v]) for v in self.row_vars}
        self.public_data = {k: v for k, v in values.items()
                            if k not in self.row_vars and k != rows}

        self.library = _as_library(model, stanc_args, cache_dir)
        if stat_dim is None:
            stat_dim = self._declared_stat_dim()
        if isinstance(stat_dim, bool) or not isinstance(stat_dim, (int, np.integer)) or stat_dim < 1:
            raise ExpFamilyModelError(f"stat_dim must be a positive integer, got {stat_dim!r}")
        self.stat_dim = int(stat_dim)
        self.stat_scale = float(max(1, self.n_rows))
        self.n_evaluations = 0
        self.n_row_passes = 0

        k, t = self.stat_dim, self.stat_scale
        # N = n first, so that a data problem is not reported as an N = 0 problem.
        self._base = self._instance(self.n_rows, np.zeros(k), f"the instance N = {self.n_rows}, S = 0")
        self._prior = self._instance(0, np.zeros(k), "the prior instance (N = 0, S = 0)")
        self._units = [
            self._instance(self.n_rows, t * np.eye(k)[j], f"the instance N = {self.n_rows}, S = {t:g} e_{j + 1}")
            for j in range(k)
        ]
        self.dim = int(self._prior.param_unc_num())
        self.param_names = list(self._prior.param_names())
        for inst in (self._base, *self._units):
            if int(inst.param_unc_num()) != self.dim or list(inst.param_names()) != self.param_names:
                raise ExpFamilyModelError(
                    f"the parameters of the Stan program depend on the row count {rows!r} "
                    f"({self.dim} unconstrained parameters with {rows} = 0, "
                    f"{int(inst.param_unc_num())} with {rows} = {self.n_rows}); an "
                    "exponential-family model must have a fixed parameter vector"
                )
        if self.dim < 1:
            raise ExpFamilyModelError("the Stan program has no parameters")
        self._layout = ParamLayout(self.param_names)
        self._prior_cache: OrderedDict[bytes, float] = OrderedDict()
        self._nat_cache: OrderedDict[bytes, tuple[float, np.ndarray]] = OrderedDict()
        if check:
            self.check_affine()

    # ------------------------------------------------------------ set-up --
    @staticmethod
    def _read_data(data: Any) -> dict[str, Any]:
        if isinstance(data, Mapping):
            bad = [key for key in data if not isinstance(key, str)]
            if bad:
                raise TypeError(f"data variable names must be strings, got {bad!r}")
            return dict(data)
        return load_data(data)[1]

    def _find_row_vars(self, values: Mapping[str, Any], row_vars: Sequence[str] | None) -> tuple[str, ...]:
        n = self.n_rows

        def leading(v: str) -> int | None:
            arr = np.asarray(values[v])
            return arr.shape[0] if arr.ndim >= 1 else None

        if row_vars is None:
            found = tuple(v for v in values if v != self.rows_var and leading(v) == n)
        else:
            if isinstance(row_vars, str):
                row_vars = [row_vars]
            missing = [v for v in row_vars if v not in values]
            if missing:
                raise ExpFamilyModelError(f"row variables not in the data: {', '.join(missing)}")
            if self.rows_var in row_vars:
                raise ExpFamilyModelError(f"the row count {self.rows_var!r} cannot be a row variable")
            wrong = [v for v in row_vars if leading(v) != n]
            if wrong:
                raise ExpFamilyModelError(
                    f"row variables must have leading dimension {self.rows_var} = {n}: "
                    f"{', '.join(wrong)} do not"
                )
            found = tuple(row_vars)
        if not found:
            raise ExpFamilyModelError(
                f"no row variables: no data variable has leading dimension {self.rows_var} = {n}; "
                "name them with row_vars=..."
            )
        return found

    def _json(self, n: int, stats: np.ndarray) -> str:
        # Only public data: the shared variables, the row count and a fixed S.
        payload = dict(self.public_data)
        payload[self.rows_var] = int(n)
        payload[self.stat_var] = np.asarray(stats, dtype=float)
        return stanio.dump_stan_json(payload)

    def _construct(self, data_json: str) -> Any:
        return self._bridgestan.StanModel(str(self.library), data_json, seed=self.seed, warn=False)

    def _declared_stat_dim(self) -> int:
        """Read ``K`` from Stan's complaint about an empty ``S``."""
        try:
            self._construct(self._json(self.n_rows, np.zeros(0)))
        except RuntimeError as exc:
            msg = str(exc)
            match = _DIMS_DECLARED.search(msg)
            if match and match.group(1) == self.stat_var:
                dims = [d for d in match.group(2).replace(" ", "").split(",") if d]
                if len(dims) == 1 and int(dims[0]) >= 1:
                    return int(dims[0])
                raise ExpFamilyModelError(
                    f"the statistic {self.stat_var!r} must be declared as a vector "
                    f"(`vector[K] {self.stat_var};`), found dimensions ({match.group(2)})"
                ) from exc
            raise self._rejected(exc, f"reading the size of {self.stat_var!r}") from exc
        raise ExpFamilyModelError(
            f"could not read the size of {self.stat_var!r} from the Stan program (it accepted an "
            f"empty {self.stat_var}); declare `vector[K] {self.stat_var};` with K >= 1, or pass stat_dim="
        )

    def _rejected(self, exc: RuntimeError, what: str, n: int | None = None) -> ExpFamilyModelError:
        msg = str(exc)
        match = _VARIABLE.search(msg)
        var = (match.group(1) or match.group(2)) if match else None
        if var in self.row_vars:
            return ExpFamilyModelError(
                f"the Stan program declares the row variable {var!r} as data. In an "
                f"exponential-family model the rows never reach Stan: declare only "
                f"{self.rows_var}, {self.stat_var} and shared data, and write the likelihood "
                f"in terms of {self.stat_var} (Stan said: {msg})"
            )
        if n == 0 and self.n_rows > 0:
            return ExpFamilyModelError(
                f"the Stan program cannot be built with {self.rows_var} = 0, which gives the prior; "
                f"declare `int<lower=0> {self.rows_var};` and make any transformed data valid "
                f"for {self.rows_var} = 0 (Stan said: {msg})"
            )
        if var == self.stat_var:
            return ExpFamilyModelError(
                f"the Stan program rejected {self.stat_var} while building {what}; declare it as "
                f"`vector[K] {self.stat_var};` without constraints, since the sampler works with "
                f"noisy values of any sign (Stan said: {msg})"
            )
        return ExpFamilyModelError(
            f"the Stan program rejected the public data while building {what}: {msg}. It receives "
            f"only {self.rows_var}, {self.stat_var} and the shared variables "
            f"({', '.join(sorted(self.public_data)) or 'none'}); the row variables "
            f"({', '.join(self.row_vars)}) are never passed to it"
        )

    def _instance(self, n: int, stats: np.ndarray, what: str) -> Any:
        try:
            return self._construct(self._json(n, stats))
        except RuntimeError as exc:
            raise self._rejected(exc, what, n) from exc

    # ------------------------------------------------------------ basics --
    def __repr__(self) -> str:
        return (
            f"StanExpFamilyModel({self.name!r}, n_rows={self.n_rows}, dim={self.dim}, "
            f"stat_dim={self.stat_dim}, row_vars={list(self.row_vars)})"
        )

    @property
    def name(self) -> str:
        """The Stan model's name."""
        return self._prior.name()

    @property
    def bridge(self) -> Any:
        """The ``bridgestan.StanModel`` of the prior (``N = 0``, ``S = 0``): no data in it."""
        return self._prior

    def _theta(self, theta: Any) -> np.ndarray:
        arr = np.ascontiguousarray(theta, dtype=np.float64)
        if arr.shape != (self.dim,):
            raise ValueError(
                f"theta must have shape ({self.dim},) (unconstrained parameters), got {arr.shape}"
            )
        return arr

    def _eval(self, instance: Any, theta: np.ndarray) -> float:
        self.n_evaluations += 1
        return _lp(instance, theta)

    @staticmethod
    def _remember(cache: OrderedDict, key: bytes, value: Any, size: int = 4) -> None:
        cache[key] = value
        cache.move_to_end(key)
        while len(cache) > size:
            cache.popitem(last=False)

    # ------------------------------------------------------- densities --
    def log_prior(self, theta: Any) -> float:
        """``lp(N = 0, S = 0; θ)``: prior plus log Jacobian (NaN where Stan rejects θ)."""
        th = self._theta(theta)
        key = th.tobytes()
        if key not in self._prior_cache:
            self._remember(self._prior_cache, key, self._eval(self._prior, th))
        return self._prior_cache[key]

    def natural_parameters(self, theta: Any) -> tuple[float, np.ndarray]:
        """``(a(θ), φ(θ))`` with ``log_lik_stats(θ, S) = a(θ) + φ(θ)ᵀ S``.

        ``a`` contains the factor ``n`` (``a = n log g(θ)`` in eq. (7)).  Costs
        ``K + 1`` evaluations (plus the prior, if not already computed at θ).
        """
        th = self._theta(theta)
        key = th.tobytes()
        cached = self._nat_cache.get(key)
        if cached is None:
            prior = self.log_prior(th)
            base = self._eval(self._base, th)
            phi = np.array([(self._eval(u, th) - base) / self.stat_scale for u in self._units])
            cached = (base - prior, phi)
            self._remember(self._nat_cache, key, cached)
        return cached[0], cached[1].copy()

    def log_lik_stats(self, theta: Any, stats: Any) -> float:
        """Log-likelihood as a function of the summed statistic: ``a(θ) + φ(θ)ᵀ S``.

        Parameters
        ----------
        theta : array_like, shape (dim,)
            Unconstrained parameters.
        stats : array_like, shape (stat_dim,)
            A value of the summed statistic (typically a noisy release).
        """
        s = np.asarray(stats, dtype=float)
        if s.shape != (self.stat_dim,):
            raise ValueError(f"stats must have shape ({self.stat_dim},), got {s.shape}")
        offset, phi = self.natural_parameters(theta)
        return float(offset + phi @ s)

    # ------------------------------------------------------------ data --
    def row_stats(self) -> np.ndarray:
        """Per-row statistics ``s(y_i)``, shape ``(n_rows, stat_dim)``: reads the rows.

        Raises
        ------
        ValueError
            If ``statistic`` returns the wrong shape or non-finite values.  The
            messages name no row, no count of rows and no value or shape
            computed from the rows: they may be logged or shared.
        """
        self.n_row_passes += 1
        n, k = self.n_rows, self.stat_dim
        if self.vectorized:
            out = _as_floats(self.statistic(dict(self._rows)))
            if out.shape != (n, k):
                # The shape returned may depend on the data (e.g. rows dropped): not shown.
                raise ValueError(
                    f"statistic (vectorized) must return shape ({n}, {k}), one row per data "
                    f"row (K = {k} from {self.stat_var!r}); it returned another "
                    "shape. Do not drop or add rows inside it: map missing or invalid values "
                    "to a finite vector instead"
                )
        else:
            out = np.empty((n, k))
            for i in range(n):
                value = _as_floats(self.statistic({v: a[i] for v, a in self._rows.items()}))
                if value.shape != (k,):
                    if value.size == k and value.ndim <= 1:
                        value = value.reshape(k)
                    else:
                        raise ValueError(
                            f"statistic must return an array of shape ({k},) for every row "
                            f"(K = {k} from {self.stat_var!r}); it returned another shape for "
                            "some row. Make its output size independent of the row's values"
                        )
                out[i] = value
        if not np.isfinite(out).all():
            raise ValueError(
                "statistic returned non-finite values (NaN or ±inf) for some row; it must map "
                "every row to a finite vector: clamp or impute inside it (which rows, how many "
                "and their values are not shown: they are data)"
            )
        return out

    # ----------------------------------------------------- transforms --
    def constrain(self, theta: Any) -> dict[str, np.ndarray]:
        """The ``parameters`` block's variables at unconstrained θ (from the prior instance)."""
        return self._layout.split(self._prior.param_constrain(self._theta(theta)))

    def unconstrain(self, values: Mapping[str, Any]) -> np.ndarray:
        """Unconstrained parameters from a dict of constrained values."""
        vec = self._layout.join(values)
        try:
            return self._prior.param_unconstrain(vec)
        except RuntimeError as exc:
            raise ValueError(f"could not unconstrain the values: {exc}") from exc

    @property
    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        """Shape of every variable in the ``parameters`` block."""
        return dict(self._layout.shapes)

    # ---------------------------------------------------------- checks --
    def check_affine(self, points: int = 4, stats: int = 3, seed: int = 20240601) -> None:
        """Verify ``lp(N = n, S; θ) − prior(θ) == a(θ) + φ(θ)ᵀ S`` at random θ and S.

        θ is drawn uniformly on (−2, 2) in unconstrained space (then on narrower
        boxes, :func:`stan_dp.model.check_points`) and each
        coordinate of S normally with sd ``max(1, n)``; no data are read.
        Points where the log density is not finite are skipped; at least one
        finite point is required.

        Raises
        ------
        ExpFamilyModelError
            If the two sides differ by more than :data:`AFFINE_RTOL` relative
            to the magnitude of the terms.
        """
        rng = np.random.default_rng(seed)
        k, t = self.stat_dim, self.stat_scale
        draws = [rng.normal(0.0, t, size=k) for _ in range(stats)]
        instances = [self._instance(self.n_rows, s, f"a check instance with random {self.stat_var}")
                     for s in draws]
        checked = 0
        for theta in check_points(rng, self.dim, 8 * points):
            prior = _lp(self._prior, theta)
            base = _lp(self._base, theta)
            if not (np.isfinite(prior) and np.isfinite(base)):
                continue
            units = np.array([_lp(u, theta) for u in self._units])
            offset, phi = base - prior, (units - base) / t
            for s, inst in zip(draws, instances):
                direct = _lp(inst, theta) - prior
                affine = offset + float(phi @ s)
                scale = max(1.0, abs(direct), abs(offset), float(np.abs(phi * s).sum()))
                if not (np.isfinite(direct) and abs(direct - affine) <= AFFINE_RTOL * scale):
                    raise ExpFamilyModelError(
                        f"the log density is not affine in {self.stat_var!r}: at a test point "
                        f"lp({self.rows_var} = n, {self.stat_var}) − prior is {direct:.12g} but "
                        f"a(θ) + φ(θ)·{self.stat_var} is {affine:.12g}. Write the likelihood as "
                        f"`target += dot_product(phi(θ), {self.stat_var}) + {self.rows_var} * c(θ)` "
                        f"(terms nonlinear in {self.stat_var}, such as square({self.stat_var}[1]) or "
                        f"{self.stat_var}[1] / {self.stat_var}[2], are not allowed)"
                    )
            checked += 1
            if checked >= points:
                return
        raise ExpFamilyModelError(
            "could not verify affinity in the statistic: the log density was not finite at any "
            f"test point drawn uniformly on (-r, r) in unconstrained space, r in {CHECK_POINT_RADII}"
        )

"""RowModel: a Stan model and its data, seen row by row.

A data row is the unit of privacy.  For a Stan program whose likelihood
factorises over rows, the log density splits as

    log p(θ | all rows) = lp(no rows; θ) + Σ_i [lp(row i only; θ) − lp(no rows; θ)]

where ``lp`` is Stan's log density with ``propto=False`` and the Jacobian of
the constraining transform.  ``lp(no rows; θ)`` is the prior part
(:meth:`RowModel.log_prior`) and the bracket is the row log-likelihood
(:meth:`RowModel.row_log_lik`).  The split needs no change to the model; it
is verified numerically when the model is loaded.

Only the ``parameters`` block is exposed by :meth:`RowModel.constrain`;
the draws also carry the transformed parameters and generated quantities the
program computes from the parameters, shared data and (generated quantities)
Stan's RNG alone (:attr:`ZeroRowPart.output_transformed`,
:attr:`ZeroRowPart.output_generated`, evaluated by an instance with no row).
The others may be computed from the data, and anything derived from the raw
data must not reach a sampler's output.  The constraining
transform is that of the zero-row model, and a model whose constraints depend
on the rows is refused at load.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import math
import re
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import stanio

from stan_dp.aggregates import GradSum, RatioSums, RowStatistic, local_reduce, local_statistic
from stan_dp.data import check_row_count, load_data, zero_row_data
from stan_dp.native.rows import NativeError, NativeRows
from stan_dp.params import ParamLayout
from stan_dp.toolchain import compile_model, default_cache_dir, find_toolchain

if TYPE_CHECKING:
    from stan_dp.stan_source import HierarchicalStatement

logger = logging.getLogger(__name__)

#: Relative tolerance of the load-time decomposition check.
DECOMPOSITION_RTOL = 1e-8

#: Half-widths of the boxes around 0 (unconstrained space) the load-time checks draw their test points
#: from, widest first.  Stan initialises chains on (-2, 2); a probit regression with a predictor in
#: metres, ``bernoulli(Phi(a + b * dist))``, has a log density of -inf nearly everywhere there
#: (``Phi`` underflows where ``|b * dist|`` is beyond ~38) but is finite near 0, where stan_dp starts.
CHECK_POINT_RADII = (2.0, 0.2, 0.02, 0.002)


def check_points(rng: np.random.Generator, dim: int, per_radius: int) -> Iterator[np.ndarray]:
    """Data-independent test points: ``per_radius`` uniform draws on ``(-r, r)^dim`` for each ``r`` of
    :data:`CHECK_POINT_RADII` in turn (the caller stops when it has checked enough finite ones)."""
    for radius in CHECK_POINT_RADII:
        for _ in range(per_radius):
            yield rng.uniform(-radius, radius, size=dim)


class ModelDecompositionError(ValueError):
    """The model's log density does not split into a prior part and per-row terms."""


def positional_message(where: Sequence[str]) -> str:
    """The refusal of a program whose terms span rows (:func:`stan_dp.stan_source.positional_row_indexing`):
    what it found and what to do (names program text only, never data)."""
    shown = ", ".join(where[:4])
    return (
        f"the model indexes a row variable by position across rows ({shown}): a term that reads "
        "another row (a lag, a difference, a moving window) makes the log-likelihood something "
        "other than a sum of one term per row, which the privacy guarantee is stated for. Give "
        "each row what its term needs as data of its own, sliced per row like the others (for an "
        "AR(1), a column y_lag with the previous value, the first observation left out or given "
        "as shared data), and write the likelihood with the row's own index (y[n], y_lag[n]). "
        "Each observation then sits in two rows, and the guarantee is per row: an observation "
        "is protected as a group of two rows is (each release's sensitivity doubled: a "
        "Gaussian-DP mu twice the row's), not at the epsilon stated for one row")


from stan_dp.toolchain import as_library  # noqa: E402  (moved to the toolchain module)

_as_library = as_library
"""Former name of :func:`stan_dp.toolchain.as_library`, kept for old imports."""


def _rejection_message(stan_message: str) -> str:
    """Stan's data rejection, without the values, sizes or positions it quotes (they are data).

    Stan says e.g. ``y[8] is -12345.7, but must be greater than or equal to 0``
    or ``mismatch in dimension declared and found in context; ...; variable
    name=X; ...; dims found=(20,3)``; only the variable's name (part of the
    program) and a kind of problem that quotes no number are kept.  The
    original exception is not chained, so no traceback carries them either.
    """
    named = re.search(r"variable name=([A-Za-z][A-Za-z0-9_]*)", stan_message)
    quoted = re.search(r"([A-Za-z][A-Za-z0-9_]*)(\[[^\]]*\])?(\.[0-9]+)* is ", stan_message)
    name = named.group(1) if named else quoted.group(1) if quoted else None
    text = stan_message.split(":", 1)[-1] if stan_message.startswith("Exception") else stan_message
    first = text.split(";")[0].strip()
    problem = first if first and not re.search(r"[0-9]", first) and " is " not in first else (
        "a value violates a declared constraint")
    where = f"; variable name={name}" if name else ""
    return (f"the model rejected the data ({problem}{where}); the values, sizes and positions "
            "are not shown: they are data. To see them, load the data with "
            "bridgestan.StanModel directly — NOT private.")


class ZeroRowPart:
    """The data-independent part of a model split into rows: prior and transforms.

    Everything here is evaluated by the zero-row instance of the compiled
    model (``self._zero``, a :class:`~stan_dp.native.rows.NativeRows`),
    which depends on the shared data only, never on a row.  Shared by
    :class:`RowModel` (whose rows are in the same object) and
    :class:`stan_dp.distributed.ShardedModel` (whose rows are on workers).
    Needs ``dim``, ``_zero`` and ``_layout`` (a :class:`~stan_dp.params.ParamLayout`), and for
    :attr:`log_transformed_parameters` the program's ``stan_file`` (or None) with the
    ``_stanc_args`` and ``_cmdstan`` it was compiled with.
    """

    dim: int
    stan_file: Path | None = None
    _stanc_args: tuple[str, ...] = ()
    _cmdstan: Any = None
    _log_transformed: tuple[str, ...] | None = None
    _logit_transformed: tuple[str, ...] | None = None
    _interval: tuple[str, ...] | None = None
    _ordered: dict[str, str] | None = None
    _hierarchical: dict[str, "HierarchicalStatement"] | None = None
    _sampled: tuple[tuple[str, str], ...] | None = None
    _scales: tuple[str, ...] | None = None
    _zero_mean: dict | None = None
    _flat: list | None = None
    _simplex: tuple[str, ...] | None = None
    _mixture: bool | None = None
    _indexed: dict[str, tuple[str, ...]] | None = None
    _standard: tuple[str, ...] = ()
    zero_row_json: str | None = None
    """The data with no rows (shared data only, the row count 0), as JSON."""
    _output_gq: tuple[str, ...] | None = None
    generated_blocked: bool = False
    """Whether the ``generated quantities`` block throws at zero rows (``mean(y_rep)`` of an empty
    vector), so that none of them is returned (:attr:`output_generated`)."""
    _readings: dict[str, tuple[str, ...] | None] | None = None
    _zero_bridge: Any = None
    _tp_layout: Any = None
    _gq_layout: Any = None
    _program_text: tuple[Path | None, str] | None = None

    def _theta(self, theta: Any) -> np.ndarray:
        arr = np.ascontiguousarray(theta, dtype=np.float64)
        if arr.shape != (self.dim,):
            raise ValueError(
                f"theta must have shape ({self.dim},) (unconstrained parameters), got {arr.shape}"
            )
        return arr

    def log_prior(self, theta: Any) -> float:
        """Log density of the model with no rows (prior and Jacobian).

        Parameters
        ----------
        theta : array_like, shape (dim,)
            Unconstrained parameters.
        """
        return self._zero.log_prior(self._theta(theta), with_grad=False)[0]

    def log_prior_grad(self, theta: Any) -> tuple[float, np.ndarray]:
        """Value and gradient of :meth:`log_prior`."""
        value, grad = self._zero.log_prior(self._theta(theta), with_grad=True)
        assert grad is not None
        return value, grad

    def constrain(self, theta: Any) -> dict[str, np.ndarray]:
        """The ``parameters`` block's variables at unconstrained θ, by name and shape."""
        return self._layout.split(self._zero.param_constrain(self._theta(theta)))

    def unconstrain(self, values: Mapping[str, Any]) -> np.ndarray:
        """Unconstrained parameters from a dict of constrained values."""
        vec = self._layout.join(values)
        try:
            return self._zero.param_unconstrain(vec)
        except ValueError as exc:
            raise ValueError(f"could not unconstrain the values: {exc}") from exc

    @property
    def output_transformed(self) -> tuple[str, ...]:
        """The ``transformed parameters`` returned with the draws: those the program computes from
        the parameters and shared data alone (public: read from the program,
        :func:`stan_dp.stan_source.row_free_transformed_parameters`), evaluated by a zero-row
        instance of the model (:meth:`transformed_values`), which never holds a row.  ``()``
        where the program or the zero-row data are not at hand."""
        if self.zero_row_json is None:
            return ()
        return self._read_program("row_free_transformed_parameters", with_rows_var=True) or ()

    @property
    def output_generated(self) -> tuple[str, ...]:
        """The ``generated quantities`` returned with the draws: those the program computes from
        the parameters, shared data and its random number generator alone (public: read from the
        program, :func:`stan_dp.stan_source.row_free_generated_quantities`), evaluated like
        :attr:`output_transformed` by the zero-row instance (``real theta_new = normal_rng(mu,
        tau)``, ``real sigma2 = square(sigma)``).  ``()`` where the program or the zero-row data
        are not at hand, or where the block throws at zero rows (:attr:`generated_blocked`)."""
        if self._output_gq is None:
            names: tuple[str, ...] = ()
            if self.zero_row_json is not None:
                names = self._read_program("row_free_generated_quantities", with_rows_var=True) or ()
            if names:   # the block runs whole or not at all: try it at a data-independent point
                bridge = self._zero_row_bridge()
                try:
                    bridge.param_constrain(np.zeros(self.dim), include_tp=True, include_gq=True,
                                           rng=bridge.new_rng(0))
                except RuntimeError as err:
                    logger.debug("the generated quantities do not run at zero rows: %s", err)
                    self.generated_blocked, names = True, ()
            self._output_gq = names
        return self._output_gq

    def _zero_row_bridge(self) -> Any:
        """The zero-row BridgeStan instance (shared data only), built once."""
        if self._zero_bridge is None:
            import bridgestan

            self._zero_bridge = bridgestan.StanModel(str(self.library), self.zero_row_json, warn=False)
        return self._zero_bridge

    def quantity_rng(self, seed: int | None) -> Any:
        """A random number generator for :attr:`output_generated` (BridgeStan's, seeded by
        ``seed``, drawn from the OS's entropy where None); None where none is returned."""
        if not self.output_generated:
            return None
        if seed is None:
            seed = int(np.random.SeedSequence().generate_state(1)[0])
        return self._zero_row_bridge().new_rng(int(seed) % 2**32)

    def transformed_values(self, theta: Any, rng: Any = None) -> dict[str, np.ndarray]:
        """:attr:`output_transformed` at unconstrained θ, by name and shape, from the zero-row
        instance (shared data only: post-processing of θ), and with ``rng``
        (:meth:`quantity_rng`) :attr:`output_generated` too.  NaN where the program rejects θ
        there (a constraint on a transformed parameter); the generated quantities alone are NaN
        where the block throws at zero rows (a quantity of the rows' there: ``mean(y)``)."""
        names = self.output_transformed + (self.output_generated if rng is not None else ())
        if not names:
            return {}
        bridge = self._zero_row_bridge()
        if self._tp_layout is None:
            self._tp_layout = ParamLayout(list(bridge.param_names(include_tp=True)))
            self._gq_layout = ParamLayout(list(bridge.param_names(include_tp=True, include_gq=True)))
        theta = self._theta(theta)
        values: dict[str, np.ndarray] | None = None
        if rng is not None and self.output_generated:
            try:
                values = self._gq_layout.split(bridge.param_constrain(theta, include_tp=True, include_gq=True,
                                                                      rng=rng))
            except RuntimeError:
                values = None
        if values is None:
            try:
                values = self._tp_layout.split(bridge.param_constrain(theta, include_tp=True))
            except RuntimeError:
                values = {}
        if all(name in values for name in names):   # every draw but those the program rejected
            return {name: values[name] for name in names}
        blank = self._gq_layout.split(np.full(len(self._gq_layout.names), np.nan))
        return {name: values.get(name, blank[name]) for name in names}

    @property
    def omitted_quantities(self) -> dict[str, list[str]]:
        """The program's ``transformed parameters`` and ``generated quantities`` variables, which
        the output leaves out (they may be computed from the data, which only a privacy
        mechanism may touch): ``{"transformed parameters": [...], "generated quantities": [...]}``,
        by variable name, each list empty where the block declares none (public: the program's
        names); the transformed parameters returned (:attr:`output_transformed`) are not listed.
        Empty lists where the compiled model is not at hand."""
        bridge = getattr(self, "bridge", None)
        out: dict[str, list[str]] = {"transformed parameters": [], "generated quantities": []}
        if bridge is None:
            return out

        def variables(names: Any) -> list[str]:
            seen: dict[str, None] = {}
            for name in names:
                seen.setdefault(str(name).split(".")[0], None)
            return list(seen)

        params = set(variables(bridge.param_names()))
        with_tp = variables(bridge.param_names(include_tp=True))
        everything = variables(bridge.param_names(include_tp=True, include_gq=True))
        returned = set(self.output_transformed) | set(self.output_generated)
        out["transformed parameters"] = [v for v in with_tp if v not in params and v not in returned]
        out["generated quantities"] = [v for v in everything
                                       if v not in with_tp and v not in params and v not in returned]
        return out

    @property
    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        """Shape of every variable in the ``parameters`` block."""
        return dict(self._layout.shapes)

    @property
    def log_transformed_parameters(self) -> tuple[str, ...]:
        """Parameters the program declares with a lower bound and no upper bound (public: read
        from the program, never the data; ``()`` where the program is unknown or unreadable).

        :func:`stan_dp.sample` raises the gradient clip bound near the mode for such models
        even where its forecast warns (:func:`stan_dp.stan_source.log_transformed_parameters`).
        """
        return self._bounded_parameters()[0]

    @property
    def logit_transformed_parameters(self) -> tuple[str, ...]:
        """Parameters the program declares with both a lower and an upper bound, other than
        ``(0, 1)`` and ``(-1, 1)`` (public, read from the program; ``()`` where it is unknown or
        unreadable; :func:`stan_dp.stan_source.logit_transformed_parameters`)."""
        return self._bounded_parameters()[1]

    @property
    def bounded_coordinates(self) -> np.ndarray:
        """Which unconstrained coordinates belong to :attr:`logit_transformed_parameters`
        (boolean, shape ``(dim,)``; public: the program and the compiled model's names).

        The private search takes the logit transform's curvature out of the rows' curvature
        along them (:func:`stan_dp.adaptation.curvature._row_neg_hessians`).  All False where
        the program or the unconstrained names are not known.
        """
        return self._coordinates_of(self.logit_transformed_parameters)

    @property
    def bounded_scale_coordinates(self) -> np.ndarray:
        """Which of :attr:`bounded_coordinates` belong to a parameter the ``model`` block passes
        as a sampling statement's scale (``real<lower=0, upper=100> sigma`` in ``y ~ normal(mu,
        sigma)``; :func:`stan_dp.stan_source.scale_parameters`); boolean, shape ``(dim,)``;
        public: the program and the compiled model's names.

        The far phase of the private search steps them as scales, not as locations
        (:func:`stan_dp.adaptation.far.scale_coordinates`).  All False where the program or the
        unconstrained names are not known.
        """
        logit = set(self.logit_transformed_parameters)
        return self._coordinates_of(tuple(name for name in (self._scales or ()) if name in logit))

    @property
    def interval_coordinates(self) -> np.ndarray:
        """Which unconstrained coordinates are on Stan's logit transform: every parameter declared
        with both bounds, ``(0, 1)`` and ``(-1, 1)`` included (boolean, shape ``(dim,)``; public:
        the program and the compiled model's names).  Read for the transform's Jacobian only
        (:func:`stan_dp.adaptation.curvature._jacobian_ratio`).  All False where the program or
        the unconstrained names are not known.
        """
        self._bounded_parameters()
        return self._coordinates_of(self._interval or ())

    @property
    def log_coordinates(self) -> np.ndarray:
        """Which unconstrained coordinates are on Stan's log transform: those of
        :attr:`log_transformed_parameters`, and an ``ordered`` vector's increments (all but its
        first element) or every element of a ``positive_ordered`` one
        (:func:`stan_dp.stan_source.ordered_parameters`); boolean, shape ``(dim,)``; public: the
        program and the compiled model's names.

        The far phase of the private search does not take back a move along them where the
        rows' median gradient collapsed (:data:`stan_dp.adaptation.far.COLLAPSE_OCTAVES`): a
        scale parameter approaching its mode from far below does that; and its Newton rounds move
        none of them by more than :data:`stan_dp.adaptation.newton.LOG_STEP_MAX` a round.  All
        False where the program or the unconstrained names are not known.
        """
        mask = self._coordinates_of(self.log_transformed_parameters)
        ordered = self._bounded_parameters()[2]
        names = self.unconstrained_names if ordered else None
        if names is not None:
            for j, name in enumerate(names):
                parts = name.split(".")
                kind = ordered.get(parts[0])
                # BridgeStan names an element "c.2" ("c.1.2" in an array of vectors: the vector's
                # index last); an ordered vector's first element is its free location
                if kind == "positive_ordered" or (kind == "ordered" and parts[-1] != "1"):
                    mask[j] = True
        return mask

    @property
    def simplex_parameters(self) -> tuple[str, ...]:
        """Parameters the program declares ``simplex`` (public, read from the program; ``()``
        where it is unknown or unreadable; :func:`stan_dp.stan_source.simplex_parameters`).

        :func:`stan_dp.sample` lets the private search raise its curvature bound for such models
        (:attr:`stan_dp.adaptation.plan.AdaptationSettings.raise_curvature`)."""
        self._bounded_parameters()
        return self._simplex or ()

    @property
    def outcome_families(self) -> tuple[str, ...]:
        """The families of the ``model`` block's sampling statements whose variate is a row
        variable (``("student_t",)`` for ``spend ~ student_t(nu, alpha + beta * income, sigma)``
        where ``spend`` is sliced by rows), sorted, each once.

        Public: read from the program and the names of the row variables, never the data.
        ``()`` where the program is unknown or unreadable, or its likelihood is written in
        another shape (:func:`stan_dp.stan_source.sampled_variates`); the heavy-tail warning then
        gives its general advice (:func:`stan_dp.auto._tail_advice`).
        """
        self._bounded_parameters()
        rows = set(getattr(self, "row_vars", ()) or ())
        return tuple(sorted({family for variate, family in (self._sampled or ()) if variate in rows}))

    def _read_program(self, reader: str, with_rows_var: bool = False) -> tuple[str, ...] | None:
        """``stan_dp.stan_source.<reader>(program, [rows_var,] row_vars)`` (public: the program and
        the names of the row count and row variables, never the data), read once per model; None
        where the program is unknown or unreadable."""
        readings = self._readings if self._readings is not None else {}
        self._readings = readings
        if reader not in readings:
            found: tuple[str, ...] | None = None
            if self.stan_file is not None:
                import stan_dp.stan_source as stan_source

                rows = (str(getattr(self, "rows_var", "N")),) if with_rows_var else ()
                try:
                    found = getattr(stan_source, reader)(self._canonical_program(), *rows,
                                                         tuple(getattr(self, "row_vars", ()) or ()))
                except Exception as err:  # noqa: BLE001 - unknown: the caller's default stands
                    logger.debug("could not read the program (%s): %s", reader, err)
            readings[reader] = found
        return readings[reader]

    @property
    def covariates(self) -> tuple[str, ...] | None:
        """The row variables the program reads as covariates (not as an outcome, not only as an
        index into a parameter vector; :func:`stan_dp.stan_source.covariate_row_variables`), or
        None where the program is unknown or unreadable.

        The unsettled-search warning advises centring predictors only where there is one
        (:func:`stan_dp.auto._centring_hint`): an item-response model's rows hold an outcome and
        two indices."""
        return self._read_program("covariate_row_variables")

    @property
    def likelihood_weights(self) -> tuple[str, ...] | None:
        """The row variables that weight a row's log density in a ``target +=`` statement
        (``w`` in ``target += w[n] * normal_lpdf(y[n] | ...)``;
        :func:`stan_dp.stan_source.likelihood_weights`), or None where the program is unknown or
        unreadable.  The heavy-tail warning names them (:func:`stan_dp.auto._tail_advice`)."""
        return self._read_program("likelihood_weights")

    @property
    def writes_mixture(self) -> bool | None:
        """Whether the program writes a mixture (``log_mix`` or ``log_sum_exp`` in its functions,
        transformed parameters or model block; public: read from the program, never the data;
        None where it is unknown or unreadable; :func:`stan_dp.stan_source.writes_mixture`).  The
        saddle warning names a merged mixture only for such a program
        (:func:`stan_dp.auto._saddle_causes`)."""
        self._bounded_parameters()
        return self._mixture

    @property
    def hierarchical_locations(self) -> dict[str, str]:
        """The program's centred hierarchical vectors, each with its location parameter
        (``{"a": "mu_a"}`` for ``a ~ normal(mu_a, sigma_a)``; public: read from the program, never
        the data; ``{}`` where it is unknown or unreadable;
        :func:`stan_dp.stan_source.hierarchical_locations`)."""
        self._bounded_parameters()
        return {vector: stmt.location for vector, stmt in (self._hierarchical or {}).items()}

    @property
    def hierarchical_coordinates(self) -> tuple[tuple[tuple[int, ...], int], ...]:
        """Per :attr:`hierarchical_locations` entry, ``(its vector's unconstrained coordinates, its
        location's coordinate)`` (public: the program and the compiled model's names).  Moving
        them all by the same amount leaves their sampling statement unchanged; the private search
        moves along that direction (:mod:`stan_dp.adaptation.groups`).  Empty where the names are
        not known, and without a vector of fewer than two elements."""
        return tuple((members, location[0]) for members, location, _ in self.hierarchical_hyperparameters)

    @property
    def index_groups(self) -> tuple[str, ...]:
        """The vector parameters indexed by each row's group, not declared hierarchical: ``("mu",)``
        for ``y ~ normal(mu[g] + b * x, sigma)`` with ``g`` sliced by rows and no
        ``mu ~ normal(mu_0, tau)`` (a fixed effect per group; public: read from the program and the
        names of the row variables, never the data; :func:`stan_dp.stan_source.indexed_vectors`).
        ``()`` where the program is unknown or unreadable.

        A vector sampled from a standard normal is left out
        (:func:`stan_dp.stan_source.standard_normal_parameters`): a non-centred group's
        standardised effects (``mu + tau * z[g]``, ``z ~ std_normal()``), whose common level is the
        intercept's direction already and is pinned by that prior.  As a group, the battery's
        non-centred ``hierarchical`` went 1.195 times further off at 3,000 rows, epsilon = 16
        (median 1.91 -> 2.72 sds, 24 runs; 1.009 and 0.796 at 1,000 rows, epsilon = 16 and 4)."""
        self._bounded_parameters()
        rows = set(getattr(self, "row_vars", ()) or ())
        left_out = set(self._hierarchical or {}) | set(self._standard)
        return tuple(vector for vector, indices in (self._indexed or {}).items()
                     if vector not in left_out and rows.intersection(indices))

    @property
    def index_group_coordinates(self) -> tuple[tuple[int, ...], ...]:
        """Per :attr:`index_groups` entry, its vector's unconstrained coordinates (public: the
        program and the compiled model's names).  Every row depends on one of them, so moving them
        all by the same amount moves every row as an intercept would; the private search moves
        along that direction too (:mod:`stan_dp.adaptation.groups`).  Empty where the names are not
        known, and without a vector of fewer than two elements."""
        out = []
        for vector in self.index_groups:
            members = self._coordinates_of((vector,))
            if members.sum() >= 2:
                out.append(tuple(int(j) for j in np.flatnonzero(members)))
        return tuple(out)

    @property
    def hierarchical_hyperparameters(self) -> tuple[tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]], ...]:
        """Per centred hierarchical statement, ``(its vector's unconstrained coordinates, its
        location's, its scale's)``: ``mu_a`` and ``log(sigma_a)`` for ``a ~ normal(mu_a, sigma_a)``
        with ``real<lower=0> sigma_a`` (public: read from the program,
        :func:`stan_dp.stan_source.hierarchical_statements`, and the compiled model's names), or
        ``logit(sigma_a / U)`` with ``real<lower=0, upper=U> sigma_a``
        (:attr:`hierarchical_scale_uppers`).  The scale's is given for a ``normal`` statement only
        (empty otherwise, or where the scale is not a parameter so declared).  The private search
        starts those that no row depends on at the prior's scale
        (:func:`stan_dp.adaptation.groups.hyperparameter_scale`) and, where the rounds end
        unsettled, puts them at the expected prior's mode
        (:func:`stan_dp.adaptation.groups.hyperparameters_at_expected_mode`; zero-mean groups too:
        :attr:`zero_mean_hyperparameters`).  Empty where the names are not known, and without a
        vector of fewer than two elements."""
        self._bounded_parameters()
        return self._group_entries(self._hierarchical)

    @property
    def zero_mean_hyperparameters(self) -> tuple[tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]], ...]:
        """Per zero-mean group, ``u ~ normal(0, sigma_u)`` with the group's intercept in the
        likelihood (rstanarm's and most users' random effects;
        ``hierarchical_statements(program, literal=True)``), ``(its vector's coordinates, (), its
        scale's)``: as :attr:`hierarchical_hyperparameters`, without a location.  Read by the
        pooled rounds (the scale no row depends on:
        :func:`stan_dp.adaptation.groups.rowless_hyperparameters`) and where the rounds end
        unsettled (:func:`~stan_dp.adaptation.groups.hyperparameters_at_expected_mode`,
        :func:`~stan_dp.adaptation.groups.unpooled_bounded_scales`,
        :func:`~stan_dp.adaptation.groups.element_axes_widened`); public: the program and the
        compiled model's names.  Empty where none, or the names are not known."""
        self._bounded_parameters()
        return self._group_entries(self._zero_mean)

    @property
    def flat_directions(self) -> tuple[np.ndarray, ...]:
        """The directions along which every row's log likelihood is exactly constant, as the
        program writes it (:func:`stan_dp.stan_source.flat_directions`), each a vector of shape
        ``(dim,)``: a parameter's coefficient on each of its unconstrained coordinates.  An
        intercept ridge (``mu + a[g]``: ``+1`` on ``mu``, ``-1`` on every ``a_j``), a vector read
        only through balanced differences (``ability[p1] - ability[p2]``: ``1`` on every element),
        crossed factors (``a[site] + c[year]``: ``+1`` on ``a``, ``-1`` on ``c``).  The prior alone
        sets the posterior along them: its mode there
        (:func:`stan_dp.adaptation.groups.ridges_at_prior_mode`) and its curvature
        (:func:`~stan_dp.adaptation.groups.ridge_curvature_from_prior`).  Public: the program
        and the compiled model's names.  Empty where none, or the names are not known."""
        self._bounded_parameters()
        out = []
        for direction in self._flat or ():
            v = np.zeros(self.dim)
            members = [(self._coordinates_of((name,)), coefficient) for name, coefficient in direction.items()]
            if all(m.any() for m, _ in members):   # a parameter left out would leave it not flat
                for m, coefficient in members:
                    v[m] = float(coefficient)
                v.setflags(write=False)
                out.append(v)
        return tuple(out)

    def _group_entries(self, statements: dict | None) -> tuple[tuple[tuple[int, ...], ...], ...]:
        """``(members, location, scale)`` coordinates of each statement of
        :func:`stan_dp.stan_source.hierarchical_statements` with at least two elements: its
        location's (one coordinate; none where the location is a number, and then the entry needs
        its scale) and its scale's (for a ``normal`` statement only)."""
        out = []
        for vector, stmt in (statements or {}).items():
            members = self._coordinates_of((vector,))
            location = self._coordinates_of((stmt.location,) if stmt.location else ())
            scale = (self._coordinates_of((stmt.scale,)) if stmt.scale and stmt.family == "normal"
                     else np.zeros_like(members))
            # a scalar location and scale: one coordinate each
            if members.sum() >= 2 and (location.sum() == 1 if stmt.location else scale.sum() == 1):
                out.append(tuple(tuple(int(j) for j in np.flatnonzero(m)) for m in (members, location, scale)))
        return tuple(out)

    @property
    def hierarchical_scale_uppers(self) -> dict[int, float]:
        """``{coordinate: U}`` for each scale of :attr:`hierarchical_hyperparameters` declared
        ``real<lower=0, upper=U>``, whose unconstrained coordinate is ``logit(sigma / U)`` (the
        others are ``log(sigma)``); public: read from the program.  Empty where none is, or the
        names are not known."""
        self._bounded_parameters()
        out: dict[int, float] = {}
        for stmt in [*(self._hierarchical or {}).values(), *(self._zero_mean or {}).values()]:
            if stmt.scale and stmt.family == "normal" and math.isfinite(stmt.upper):
                for j in np.flatnonzero(self._coordinates_of((stmt.scale,))):
                    out[int(j)] = float(stmt.upper)
        return out

    @property
    def unconstrained_names(self) -> list[str] | None:
        """BridgeStan's name of each unconstrained coordinate (``beta.2``; a simplex's ``K - 1``
        coordinates are named by their position, not by the constrained elements), or None where
        unknown or not one per coordinate (public: read from the program)."""
        dim = int(getattr(self, "dim", 0) or 0)
        bridge = getattr(self, "bridge", None)
        if bridge is None:
            return None
        try:
            names = [str(u) for u in bridge.param_unc_names()]
        except Exception as err:  # noqa: BLE001 - unknown: no coordinate is marked
            logger.debug("could not read the unconstrained names: %s", err)
            return None
        return names if len(names) == dim else None

    def _coordinates_of(self, parameters: tuple[str, ...]) -> np.ndarray:
        """Which unconstrained coordinates belong to the named ``parameters`` (boolean, shape
        ``(dim,)``; all False where the unconstrained names are not known)."""
        dim = int(getattr(self, "dim", 0) or 0)
        names = set(parameters)
        unconstrained = self.unconstrained_names if names else None
        if unconstrained is None:   # BridgeStan names an element of a container "beta.2"
            return np.zeros(dim, dtype=bool)
        return np.array([u.split(".")[0] in names for u in unconstrained], dtype=bool)

    def _canonical_program(self) -> str:
        """The program as stanc prints it (:func:`stan_dp.stan_source.canonical_program`), read once
        per :attr:`stan_file` (public); raises where it cannot be read."""
        from stan_dp.stan_source import canonical_program

        cached = self._program_text
        if cached is None or cached[0] != self.stan_file:
            text = canonical_program(self.stan_file, find_toolchain(self._cmdstan).stanc, self._stanc_args)
            self._program_text = (self.stan_file, text)
            return text
        return cached[1]

    def _bounded_parameters(self) -> tuple[tuple[str, ...], tuple[str, ...], dict[str, str]]:
        """``(log_transformed_parameters, logit_transformed_parameters, ordered_parameters)``,
        from one reading of the program (cached)."""
        if self._log_transformed is None or self._logit_transformed is None or self._ordered is None:
            from stan_dp.stan_source import (flat_directions, hierarchical_statements,
                                             log_transformed_parameters, logit_transformed_parameters,
                                             indexed_vectors, ordered_parameters, sampled_variates,
                                             scale_parameters, simplex_parameters,
                                             standard_normal_parameters, writes_mixture)

            log: tuple[str, ...] = ()
            logit: tuple[str, ...] = ()
            interval: tuple[str, ...] = ()
            ordered: dict[str, str] = {}
            hierarchical: dict[str, HierarchicalStatement] = {}
            sampled: tuple[tuple[str, str], ...] = ()
            simplex: tuple[str, ...] = ()
            scales: tuple[str, ...] = ()
            zero_mean: dict[str, HierarchicalStatement] = {}
            flat: list[dict[str, int]] = []
            mixture: bool | None = None
            indexed: dict[str, tuple[str, ...]] = {}
            standard: tuple[str, ...] = ()
            if self.stan_file is not None:
                try:
                    program = self._canonical_program()
                    log, logit = log_transformed_parameters(program), logit_transformed_parameters(program)
                    interval = logit_transformed_parameters(program, unit=True)
                    ordered = ordered_parameters(program)
                    hierarchical = hierarchical_statements(program)
                    sampled, simplex = sampled_variates(program), simplex_parameters(program)
                    mixture = writes_mixture(program)
                    indexed, standard = indexed_vectors(program), standard_normal_parameters(program)
                    scales = scale_parameters(program)
                    zero_mean = hierarchical_statements(program, literal=True)
                    # the row count and the row variables: a prior statement reading them is per row
                    row_names = {name for name in (getattr(self, "rows_var", None),
                                                   *(getattr(self, "row_vars", None) or ())) if name}
                    flat = flat_directions(program, row_names)
                except Exception as err:  # noqa: BLE001 - unknown: the default rule stands
                    logger.debug("could not read the parameters' constraints: %s", err)
            self._log_transformed, self._logit_transformed, self._ordered = log, logit, ordered
            self._interval, self._mixture, self._indexed, self._standard = interval, mixture, indexed, standard
            self._hierarchical, self._sampled, self._simplex = hierarchical, sampled, simplex
            self._scales, self._zero_mean, self._flat = scales, zero_mean, flat
        return self._log_transformed, self._logit_transformed, self._ordered


class RowModel(ZeroRowPart):
    """A compiled Stan model with its data, split into per-row log-likelihoods.

    Parameters
    ----------
    model : path
        A ``.stan`` file (compiled and cached on first use) or a library
        built by :func:`stan_dp.compile_model`.
    data : dict or path
        The data: a mapping of variable names to values (NumPy arrays
        allowed) or the path of a JSON file.
    rows : str, default "N"
        The integer data variable that counts rows.
    row_vars : sequence of str, optional
        The data variables to slice per row.  By default every variable whose
        leading dimension equals the row count.
    threads : int, optional
        Worker threads for the per-row calls; default all cores.  Results do
        not depend on it.
    seed : int, default 1234
        Seed for RNG calls in ``transformed data`` (as in BridgeStan).
    check : bool, default True
        Verify the decomposition at a few random points (recommended).
    stanc_args : sequence of str, optional
        Extra stanc arguments when ``model`` is a ``.stan`` file.
    cache_dir : path, optional
        Compilation cache (default: the per-user cache).
    cmdstan : path, optional
        Compile with this CmdStan installation instead of the httpstan
        wheel, as :func:`stan_dp.compile_model` does.
    public_data : mapping, optional
        Public values for ``transformed data`` variables, by name (e.g.
        ``{"means_X": [0.1, -0.3]}`` for a brms model that centres its
        predictors).  A ``transformed data`` value computed from every row
        (a mean, an sd) breaks the per-row split and is private; with this
        argument stan_dp rewrites the program so that those variables are
        read from the data instead (:func:`stan_dp.stan_source.override_program`:
        a derived ``.stan`` file in the cache, compiled like any other) and
        their statements in ``transformed data`` are dropped.  The values
        are treated as public: choose them without looking at the data
        (design, domain knowledge, a published source) or release them
        privately first and count that release in your budget.  Needs the
        Stan program (a ``.stan`` file, or a library from stan_dp's cache).

    Attributes
    ----------
    n_rows : int
        Number of rows.
    dim : int
        Number of unconstrained parameters.
    param_names : list of str
        Stan's constrained parameter names (``beta.1`` for ``beta[1]``).
    row_vars : tuple of str
        The data variables sliced per row.
    public_data : dict of str to ndarray
        The ``public_data`` values used (empty without it).
    stan_file : pathlib.Path or None
        The program compiled: the user's, or one derived from it (with
        ``public_data``, or with a row count declared ``int<lower=1>``
        relaxed to ``lower=0``, which the prior part's zero rows need:
        :func:`stan_dp.stan_source.relax_row_count`); None when a library
        was given and its program is unknown.
    bridge : bridgestan.StanModel
        BridgeStan's model on the full data.

    Raises
    ------
    FileNotFoundError
        If the model or data file does not exist.
    ValueError
        For missing or mistyped data, a bad row-count variable, a parameter
        dimension that depends on the row count, or a log density that does
        not decompose over rows (:class:`ModelDecompositionError`; when the
        cause is a ``transformed data`` value that uses all rows, the one
        message names the variables, says why and how to fix it), or bad
        ``public_data``.
    stan_dp.toolchain.StanCompileError
        If the Stan program does not compile.
    """

    def __init__(
        self,
        model: str | os.PathLike[str],
        data: Mapping[str, Any] | str | os.PathLike[str],
        *,
        rows: str = "N",
        row_vars: Sequence[str] | None = None,
        threads: int | None = None,
        seed: int = 1234,
        check: bool = True,
        stanc_args: Sequence[str] = (),
        cache_dir: str | os.PathLike[str] | None = None,
        cmdstan: str | os.PathLike[str] | None = None,
        public_data: Mapping[str, Any] | None = None,
    ) -> None:
        import bridgestan

        data_json, values = load_data(data)
        self._nonfinite_data = _nonfinite_variables(values)   # for the data holder's own error
        self.n_rows = check_row_count(values, rows)
        if row_vars is not None:
            if isinstance(row_vars, str):
                row_vars = [row_vars]
            missing = [v for v in row_vars if v not in values]
            if missing:
                raise ValueError(f"row variables not in the data: {', '.join(missing)}")
        if threads is not None and (not isinstance(threads, (int, np.integer)) or threads < 1):
            raise ValueError(f"threads must be a positive integer, got {threads!r}")
        self.rows_var = rows
        self._stanc_args = tuple(str(a) for a in stanc_args)
        self._cmdstan = cmdstan
        self.stan_file = _stan_source(model)
        self.public_data: dict[str, np.ndarray] = {}
        if public_data is not None:
            if row_vars is None:  # fixed before the public values join the data
                row_vars = default_row_vars(values, rows, self.n_rows)
            model, data_json = self._apply_public_data(values, public_data, cache_dir)
        self.library = _as_library(model, stanc_args, cache_dir, cmdstan=cmdstan)

        def build() -> None:
            try:
                self.bridge = bridgestan.StanModel(
                    str(self.library), data_json, seed=seed, warn=False
                )
            except RuntimeError as exc:
                raise ValueError(_rejection_message(str(exc))) from None
            self._native = self._zero = NativeRows(
                self.bridge.stanlib, data_json, rows, row_vars, seed,
                0 if threads is None else int(threads),
            )
            if self._native.n_rows != self.n_rows:  # pragma: no cover - defensive
                raise ValueError("row count mismatch between Python and the native library")
            self.dim = self._native.dim
            self.row_vars = self._native.sliced
            self.param_names = list(self.bridge.param_names())
            self._layout = ParamLayout(self.param_names)
            self.zero_row_json = stanio.dump_stan_json(zero_row_data(json.loads(data_json), rows, self.row_vars))
            if check:
                self.check_decomposition()

        self._relaxed_from: int | None = None
        sliced = row_vars if row_vars is not None else default_row_vars(values, rows, self.n_rows)
        try:
            try:
                build()
            except ValueError as exc:
                relaxed = self._relaxed_row_count(exc, sliced, cache_dir)
                if relaxed is None:
                    raise
                self.library = _as_library(relaxed, stanc_args, cache_dir, cmdstan=cmdstan)
                build()
        except (ValueError, NativeError) as exc:
            better = self._explain_failure(exc, sliced)
            if better is None:
                raise
            raise better from None

    def _relaxed_row_count(self, exc: ValueError, row_vars: Sequence[str],
                           cache_dir: str | os.PathLike[str] | None) -> Path | None:
        """The program with ``int<lower=1> N`` relaxed to ``lower=0``, where only that bound
        refused the model with no rows (:func:`stan_dp.stan_source.relax_row_count`); None
        otherwise (another error, no such bound, or a ``transformed data`` value computed from
        the rows, which :meth:`_explain_failure` reports instead).

        Reads the program only, never the data; the derived program goes into
        the cache like ``public_data``'s and becomes :attr:`stan_file`.
        """
        from stan_dp.stan_source import analyse_transformed_data, canonical_program, relax_row_count

        if self.stan_file is None or not str(exc).startswith("the model cannot be built with zero rows"):
            return None
        try:
            program = canonical_program(self.stan_file, find_toolchain(self._cmdstan).stanc,
                                        self._stanc_args)
            report = analyse_transformed_data(program, self.rows_var, row_vars)
        except Exception as err:  # noqa: BLE001 - the original error stands
            logger.debug("could not analyse the program: %s", err)
            return None
        derived = None if report.found else relax_row_count(program, self.rows_var)
        if derived is None:
            return None
        self._relaxed_from = report.rows_lower_bound
        target = _derived_program_path(derived, self.stan_file.name, cache_dir)
        logger.info("%s has a positive lower bound; the prior part needs %s = 0: compiling the "
                    "program with lower=0 (derived program %s)", self.rows_var, self.rows_var, target)
        self.stan_file = target
        return target

    # ------------------------------------------------- transformed data --
    def _apply_public_data(
        self,
        values: Mapping[str, Any],
        public_data: Mapping[str, Any],
        cache_dir: str | os.PathLike[str] | None,
    ) -> tuple[Path, str]:
        """The derived program reading ``public_data``, and the data extended with them."""
        import stanio

        from stan_dp.stan_source import canonical_program, override_program

        if not isinstance(public_data, Mapping) or not public_data:
            raise ValueError("public_data must be a non-empty dict of transformed data "
                             "variable names to values")
        if self.stan_file is None:
            raise ValueError(
                "public_data needs the Stan program: pass the .stan file, not a library "
                "built outside stan_dp's cache")
        bad = [k for k in public_data if not isinstance(k, str)]
        if bad:
            raise ValueError(f"public_data names must be strings, got {bad!r}")
        stanc = find_toolchain(self._cmdstan).stanc
        program = canonical_program(self.stan_file, stanc, self._stanc_args)
        derived, overrides = override_program(program, public_data, self.rows_var)
        extra: dict[str, Any] = {}
        for name, spec in overrides.items():
            given = public_data[name]
            try:
                arr = np.array(given, dtype=np.float64)
            except (TypeError, ValueError):
                raise ValueError(f"public_data[{name!r}] must be numbers") from None
            if arr.ndim != spec.rank:
                raise ValueError(
                    f"public_data[{name!r}] must have {spec.rank} dimension(s) like its "
                    f"declaration `{spec.declaration}`, got shape {arr.shape}")
            if spec.integer:
                if not np.all(np.isfinite(arr)) or not np.array_equal(arr, np.round(arr)):
                    raise ValueError(f"public_data[{name!r}] must be integers "
                                     f"(`{spec.declaration}`)")
                arr = arr.astype(np.int64)
            clash = [n for n in (spec.data_name, spec.dims_name) if n is not None and n in values]
            if clash:
                raise ValueError(f"the data already hold {', '.join(clash)}, a name stan_dp "
                                 "uses for public_data")
            extra[spec.data_name] = arr
            if spec.dims_name is not None:
                extra[spec.dims_name] = np.asarray(arr.shape, dtype=np.int64)
            self.public_data[name] = arr
        target = _derived_program_path(derived, self.stan_file.name, cache_dir)
        logger.info("public_data: %s read from the data (derived program %s)",
                    ", ".join(overrides), target)
        self.stan_file = target
        return target, stanio.dump_stan_json({**dict(values), **extra})

    def _explain_failure(self, exc: Exception, row_vars: Sequence[str]
                         ) -> ModelDecompositionError | None:
        """One message for a model refused because its terms span rows (a lag: the program
        indexes a row variable by position, :func:`stan_dp.stan_source.positional_row_indexing`)
        or its transformed data use all rows.

        Reads the program only, never the data.  Returns None when the
        program is unknown or shows no such cause (the original error stands).
        """
        from stan_dp.stan_source import analyse_transformed_data, canonical_program, positional_row_indexing

        if self.stan_file is None:
            return None
        zero_rows = str(exc).startswith("the model cannot be built with zero rows")
        try:
            program = canonical_program(self.stan_file, find_toolchain(self._cmdstan).stanc,
                                        self._stanc_args)
            positional = positional_row_indexing(program, row_vars)
            report = analyse_transformed_data(program, self.rows_var, row_vars)
        except Exception as err:  # noqa: BLE001 - an explanation must never hide the error
            logger.debug("could not analyse the transformed data: %s", err)
            return None
        if positional:
            return ModelDecompositionError(positional_message(positional))
        if isinstance(exc, NativeError):
            return None
        rv = self.rows_var
        if report.found:
            return ModelDecompositionError(transformed_data_message(report, rv))
        if zero_rows and (report.rows_lower_bound is None or report.rows_lower_bound <= 0):
            # The library's hint ("declare it int<lower=0>") is wrong here.
            text = re.sub(r"\s*\(allow \S+ = 0, e\.g\. declare it int<lower=0>\)\s*$", "",
                          str(exc))
            allows = (f"{rv} already allows 0" if self._relaxed_from is None else
                      f"stan_dp relaxed {rv}'s declared lower={self._relaxed_from} to 0 for that "
                      f"(derived program {self.stan_file})")
            return ModelDecompositionError(
                f"{text}. {allows}, so something else fails without rows: a data "
                f"variable sized by {rv} that is not sliced per row (check row_vars=), or a "
                "statement of the transformed data that needs at least one element; make the "
                "model accept zero rows")
        return None

    # ------------------------------------------------------------ basics --
    def __repr__(self) -> str:
        return (
            f"RowModel({self.bridge.name()!r}, n_rows={self.n_rows}, dim={self.dim}, "
            f"row_vars={list(self.row_vars)})"
        )

    @property
    def name(self) -> str:
        """The Stan model's name."""
        return self.bridge.name()

    @property
    def threads(self) -> int:
        """Worker threads used by the per-row calls."""
        return self._native.threads

    @threads.setter
    def threads(self, value: int) -> None:
        if not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"threads must be a positive integer, got {value!r}")
        self._native.threads = int(value)

    def _rows(self, rows: Any) -> np.ndarray | None:
        if rows is None:
            return None
        idx = np.asarray(rows)
        if idx.ndim != 1:
            raise ValueError("rows must be a one-dimensional array of row indices")
        if idx.size and not np.issubdtype(idx.dtype, np.integer):
            raise ValueError(f"row indices must be integers, got dtype {idx.dtype}")
        idx = np.ascontiguousarray(idx, dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= self.n_rows):
            raise IndexError("row indices must lie in [0, n_rows)")
        return idx

    # ------------------------------------------------------- densities --
    def row_log_lik(self, theta: Any, rows: Any = None) -> np.ndarray:
        """Per-row log-likelihoods ``lp(row i; θ) − lp(no rows; θ)``.

        Parameters
        ----------
        theta : array_like, shape (dim,)
            Unconstrained parameters.
        rows : array_like of int, optional
            Row indices (repeats allowed); all rows in order by default.

        Returns
        -------
        ndarray, shape (n,)
            One value per requested row.  A row that Stan rejects at θ gives
            NaN; an impossible row gives -inf.
        """
        return self._native.row_log_lik(self._theta(theta), self._rows(rows), False)[0]

    def row_log_lik_grad(self, theta: Any, rows: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """Per-row log-likelihoods and their gradients.

        Returns
        -------
        values : ndarray, shape (n,)
        grads : ndarray, shape (n, dim)
            Gradients with respect to the unconstrained parameters.
        """
        values, grads = self._native.row_log_lik(self._theta(theta), self._rows(rows), True)
        assert grads is not None
        return values, grads

    # -------------------------------------------- aggregate queries --
    # stan_dp.aggregates.AggregateDensity: clip-and-sum in C++, no per-row
    # vector crosses into Python.
    def clipped_ratio_sums(self, theta_new: Any, theta_old: Any, bound: float, *,
                           pre_scale: float = 1.0, post_scale: float = 1.0, rows: Any = None,
                           groups: Any = None, n_groups: int = 1) -> RatioSums:
        """Sums of ``post * clip(pre * (l_j(θ') − l_j(θ)), ±bound)`` (see :mod:`stan_dp.aggregates`).

        Parameters
        ----------
        theta_new, theta_old : array_like, shape (dim,)
        bound : float
            Clip bound (``>= 0``; ``inf`` for no clipping).
        pre_scale, post_scale : float
            Factors before and after the clip (tempering).
        rows : array_like of int, optional
            Row indices (a minibatch); all rows by default.
        groups : array_like of int, optional
            Each data row's group (owner) in ``range(n_groups)``; one group by default.
        n_groups : int
            Number of groups.
        """
        if not float(bound) >= 0.0:
            raise ValueError(f"bound must be >= 0, got {bound!r}")
        n_groups = int(n_groups)
        grp = None
        if groups is not None:
            grp = np.ascontiguousarray(groups, dtype=np.int32)
            if grp.shape != (self.n_rows,):
                raise ValueError("groups must give one group index per data row")
        totals, count, m2, n_clipped = self._native.clipped_ratio_sums(
            self._theta(theta_new), self._theta(theta_old), float(bound), float(pre_scale),
            float(post_scale), self._rows(rows), grp, n_groups)
        return RatioSums(totals, count, m2, n_clipped)

    def clipped_grad_sum(self, theta: Any, bound: float, *, rows: Any = None,
                         frame: Any = None) -> GradSum:
        """Sum of per-row gradients (``frameᵀ g_j``) projected on the l2 ball of radius ``bound``."""
        if not float(bound) >= 0.0:
            raise ValueError(f"bound must be >= 0, got {bound!r}")
        a = None
        if frame is not None:
            a = np.ascontiguousarray(frame, dtype=np.float64)
            if a.ndim != 2 or a.shape[0] != self.dim or a.shape[1] < 1:
                raise ValueError(f"frame must have shape ({self.dim}, k)")
        total, n_clipped = self._native.clipped_grad_sum(self._theta(theta), float(bound), a,
                                                         self._rows(rows))
        return GradSum(total, n_clipped)

    def row_statistic(self, fn: Any, *args: Any) -> RowStatistic:
        """A per-row array ``fn(self, *args)`` kept in this process (see :mod:`stan_dp.aggregates`)."""
        return local_statistic(self, fn, *args)

    def reduce(self, stat: RowStatistic, fn: Any, *args: Any) -> np.ndarray:
        """``fn(array, *args)`` of a statistic from :meth:`row_statistic` (additive over rows)."""
        return local_reduce(stat, fn, *args)

    # -------------------------------------------------------- checks --
    def check_decomposition(self, points: int = 4, seed: int = 20240917) -> None:
        """Verify ``Σ row_log_lik + log_prior == log density`` at random points.

        The points are drawn uniformly on (−2, 2) in unconstrained space, then
        on narrower boxes around 0 (:func:`check_points`; data-independent).
        Points where the full log density is not finite are skipped; at least
        one finite point is required.

        Raises
        ------
        ModelDecompositionError
            If the two sides differ by more than ``DECOMPOSITION_RTOL``
            relative to the magnitude of the terms.
        """
        rng = np.random.default_rng(seed)
        checked = 0
        for theta in check_points(rng, self.dim, 8 * points):
            try:
                full = self.bridge.log_density(theta, propto=False, jacobian=True)
            except RuntimeError:
                continue
            if not np.isfinite(full):
                continue
            with_rows = self.bridge.param_constrain(theta)
            without_rows = self._native.param_constrain(theta)
            if not np.allclose(with_rows, without_rows, rtol=1e-12, atol=0.0, equal_nan=True):
                raise ModelDecompositionError(
                    "the constraints of the parameters depend on the row data (the "
                    "constrained values differ with and without rows), e.g. a bound "
                    "like <lower=max(y)>; such a transform would reveal the data. "
                    "Use bounds that depend on shared data only"
                )
            rows = self.row_log_lik(theta)
            prior = self.log_prior(theta)
            with np.errstate(all="ignore"):  # no warning that depends on the rows' values
                total = float(np.sum(rows)) + prior
                scale = max(1.0, abs(full), float(np.sum(np.abs(rows))) + abs(prior))
            if not abs(total - full) <= DECOMPOSITION_RTOL * scale:
                # The message names no value computed from the rows (log densities,
                # their difference) and no row: it may be logged or shared.
                raise ModelDecompositionError(
                    "the model's log density does not decompose over rows of "
                    f"{self.rows_var!r}: at a data-independent test point the full-data log "
                    "density differs from the prior part plus the sum of the per-row terms "
                    f"(beyond a relative tolerance of {DECOMPOSITION_RTOL:g}). stan_dp needs "
                    "log p(θ|data) = lp(no rows) + Σ_i [lp(row i) − lp(no rows)]; a term that "
                    "depends on the row count other than through the rows (e.g. "
                    f"`target += {self.rows_var} * ...`), or rows that interact (e.g. a term in "
                    "sum(y) or mean(y)), break this. Write the model block as a sum of one "
                    "term per row plus terms in the parameters and shared data only, and check "
                    "rows=/row_vars= (the values involved are not shown: they are computed "
                    "from the data)"
                )
            checked += 1
            if checked >= points:
                return
        nonfinite = getattr(self, "_nonfinite_data", ())
        if nonfinite:
            # The data holder's own error at load time, as Stan's data checks are: it names
            # variables, never a row or a value.
            raise ModelDecompositionError(
                f"the data has non-finite values (NaN or ±inf) in {', '.join(nonfinite)}, so the "
                "log density was not finite at any test point: drop or impute those rows (Stan "
                "reads NaN as a number, and a NaN outcome makes every log density NaN)")
        raise ModelDecompositionError(
            "could not verify the per-row decomposition: the log density was not finite "
            f"at any test point drawn uniformly on (-r, r) in unconstrained space, r in {CHECK_POINT_RADII}. "
            "Check that the model's log density is finite near 0 in unconstrained space (all "
            "unconstrained parameters 0: bounded parameters at the middle of their range, positive ones "
            "at 1), where stan_dp starts"
        )


def _nonfinite_variables(values: Mapping[str, Any]) -> tuple[str, ...]:
    """Names of the data variables holding a NaN or an infinity (numeric ones only)."""
    out = []
    for name, value in values.items():
        try:
            arr = np.asarray(value, dtype=float)
        except (TypeError, ValueError):
            continue
        if arr.size and not np.all(np.isfinite(arr)):
            out.append(str(name))
    return tuple(out)


def _derived_program_path(derived: str, name: str,
                          cache_dir: str | os.PathLike[str] | None) -> Path:
    """Write a program stan_dp derived from the user's into the cache (by its hash)."""
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    digest = hashlib.sha256(derived.encode()).hexdigest()[:16]
    target = cache / "derived" / digest / name
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_text(derived)
        os.replace(tmp, target)
    return target


def _stan_source(model: str | os.PathLike[str]) -> Path | None:
    """The ``.stan`` program of a model argument: itself, or the copy next to a cached library."""
    path = Path(model).expanduser()
    if path.suffix == ".stan":
        return path.resolve() if path.is_file() else None
    if not path.parent.is_dir():
        return None
    candidates = sorted(path.parent.glob("*.stan"))
    same = [c for c in candidates if c.stem == path.stem.removesuffix("_reference")]
    if len(same) == 1:
        return same[0].resolve()
    return candidates[0].resolve() if len(candidates) == 1 else None


def default_row_vars(values: Mapping[str, Any], rows: str, n_rows: int) -> list[str]:
    """The data variables whose leading dimension is the row count (the library's default)."""
    out = []
    for name, value in values.items():
        if name == rows:
            continue
        try:
            shape = np.shape(value)
        except ValueError:  # ragged nested lists: not a Stan array
            continue
        if shape and shape[0] == n_rows:
            out.append(name)
    return sorted(out)


def transformed_data_message(report: Any, rows: str) -> str:
    """The one message for transformed data that use all rows.

    It names variables of the program only, never a value computed from the
    data.

    Parameters
    ----------
    report : stan_dp.stan_source.TransformedDataReport
        What :func:`stan_dp.stan_source.analyse_transformed_data` found.
    rows : str
        The row-count variable.
    """
    parts = []
    if report.all_rows:
        listed = ", ".join(f"{name} (from {', '.join(src)})" for name, src in report.all_rows.items())
        parts.append(
            f"the transformed data block computes {listed} from all rows of the data. Each "
            "row's log-likelihood then depends on the other rows (stan_dp builds the model on "
            "one row and on no rows, where such a value comes from one row or from none, so "
            "the log density does not split into per-row terms), and the value itself is "
            "private: a function of the whole data set that no privacy mechanism covers, which "
            "a sampler would use and its output could reveal")
    if report.row_count:
        parts.append(
            f"{', '.join(report.row_count)} depend(s) on the row count {rows} (the one-row "
            f"model has {rows} = 1, the zero-row model {rows} = 0)")
    per_row = list(report.per_row)
    names = [n for n in report.all_rows if n not in per_row] + list(report.row_count)
    example = ", ".join(f'"{n}": ...' for n in names)
    steps = [_per_row_fix(report, per_row)] if per_row else []
    if names:
        steps.append(
            f"{'Then give the other' if per_row else 'give these'} constants public values, "
            f"RowModel(..., public_data={{{example}}}) "
            "(stan_dp then reads them from the data instead of computing them from the rows). "
            "They are then public: choose them without looking at the data (from the design, "
            "domain knowledge or a published source), or release them privately first and count "
            "that release in your budget. Or declare them in the data block yourself")
    fixes = "Fixes: " + ". ".join(steps)
    if any(n.startswith(("means_X", "Xc")) for n in names):   # brms's names for its centring
        fixes += (". For a brms model, fit with center = FALSE (e.g. bf(y ~ x, center = FALSE)) "
                  "so that brms does not centre the predictors on their means")
    bound = report.rows_lower_bound
    if bound is not None and bound > 0:
        fixes += (f". {rows} is declared int<lower={bound}> but the prior part is the model "
                  "with no rows: public_data relaxes it to lower=0 in the derived program; in "
                  f"your own edit declare int<lower=0> {rows}")
    return "; ".join(parts) + ". " + fixes + "."


QR_Q = ("qr_thin_Q", "qr_Q")
QR_R = ("qr_thin_R", "qr_R")


def _per_row_fix(report: Any, per_row: list[str]) -> str:
    """The fix for ``transformed data`` variables with one entry per row that a function over all
    rows computes (``Q_ast = qr_thin_Q(x) * sqrt(N - 1)``): no public value can stand for a row's
    own entry, so the statement must change.  For the QR reparameterisation of Stan's User's Guide
    the rewrite is exact: ``x = Q R`` gives ``Q = x * inverse(R)``, each row's own predictors times
    a constant that can be public.  Names program variables only, never a value."""
    calls = report.calls
    listed = ", ".join(f"{n} (with {', '.join(calls.get(n, ())) or 'a function over the rows'})"
                       for n in per_row)
    used = sorted(set().union(*(set(calls.get(n, ())) for n in per_row)))
    q = [n for n in per_row if set(calls.get(n, ())) & set(QR_Q)]
    r = [n for n in report.all_rows if set(calls.get(n, ())) & set(QR_R)]
    text = (f"{listed} {'has' if len(per_row) == 1 else 'have'} one entry per row computed by a "
            "function over all rows, so no public value can stand for it (a row's entry is that "
            "row's data): compute each row's entry from that row's own data and named constants "
            "instead, and give those constants public values")
    if used and not q:
        text += (f" (e.g. each {' and '.join(used)} over the rows in a transformed data variable "
                 "of its own, which public_data can then give)")
    if q and r:
        sources = report.all_rows[q[0]]
        x = sources[0] if len(sources) == 1 else "the predictor matrix"
        inverse = [n for n in report.all_rows if "inverse" in calls.get(n, ())]
        by = inverse[0] if inverse else f"inverse({r[0]})"
        text += (f". For the QR reparameterisation: compute {q[0]} = {x} * {by} after {by} "
                 "(x = Q R, so Q = x R^-1 exactly: the sqrt(N - 1) scalings cancel), or fit "
                 "without it")
    return text

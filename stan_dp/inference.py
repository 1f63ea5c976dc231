"""The sampling driver shared by all private samplers: validate → budget → chains → InferenceData.

A sampler module (penalty, subsampled penalty, DP Barker, DP HMC, ...)
validates its own arguments, then hands a :class:`SamplerSpec` to :func:`run`.
The spec supplies

* ``plan(z)``: the per-iteration release plan for noise multiplier ``z``
  (a list of :class:`stan_dp.accounting.Release`);
* ``build_kernel(z)``: ``kernel(rng_prop, rng_noise, state) -> (state, info)``;
* ``init_state(rng_prop, chain)``: the chain's initial state (data-independent
  position; may evaluate the data to cache values, which never leave);
* ``position(state)``: the unconstrained point to record;
* which ``info`` fields are releasable (``stats``) and which are non-private
  diagnostics that need an explicit opt-in (``nonprivate_stats``);
* optionally ``step_rdp``: the per-iteration RDP curve of a sampler whose
  steps are not Gaussian releases (DP Barker); the run is then accounted by
  composing that curve and there is no noise multiplier to choose.

The driver resolves the budget before anything touches the data, runs the
chains sequentially with separate proposal and noise streams, and builds the
output.
"""

from __future__ import annotations

import json
import logging
import os
import warnings
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Protocol, Sequence

import numpy as np

from stan_dp.accounting import (
    Budget,
    PrivacyBudgetError,
    Release,
    validate_privacy_params,
)
from stan_dp.accounting.curve import ACCOUNTANT_CURVE, RdpCurve, curve_epsilon, curve_max_steps
from stan_dp.accounting.validation import check_relation, weak_delta_message
from stan_dp.honesty import chain_diagnostics, emit, mixing_warnings
from stan_dp.mechanisms import chain_streams
from stan_dp.output import build_inference_data, constrain_draws, quantity_attrs, quantity_seed, with_transformed

__all__ = [
    "DEFAULT_ITERATIONS",
    "PrivacyWarning",
    "Kernel",
    "SamplerSpec",
    "BudgetPlan",
    "resolve_budget",
    "resolve_curve_budget",
    "validate_run_args",
    "resolve_init",
    "initial_position",
    "run",
    "preceding_releases",
    "warn_weak_delta",
    "read_init_file",
]

logger = logging.getLogger(__name__)
logger.addHandler(logging.NullHandler())

DEFAULT_ITERATIONS = 2000
"""Post-warm-up draws per chain when neither ``iterations`` nor ``noise`` is given."""

class PrivacyWarning(UserWarning):
    """The run protects less than it may seem: something non-private is about to be released
    (explicit opt-in only), or ``delta`` is at least ``1 / n`` (:func:`warn_weak_delta`)."""


def warn_weak_delta(delta: float, n_public: int | None, stacklevel: int = 2) -> None:
    """A :class:`PrivacyWarning` where ``delta >= 1 / n``
    (:func:`~stan_dp.accounting.validation.weak_delta_message`), shown at the caller
    ``stacklevel`` frames above the one that calls this.  ``n_public`` must be public (``None``:
    nothing checked)."""
    message = weak_delta_message(float(delta), n_public)
    if message is not None:
        warnings.warn(message, PrivacyWarning, stacklevel=stacklevel + 1)


class Kernel(Protocol):
    """One iteration of a sampler."""

    def __call__(
        self, rng_prop: np.random.Generator, rng_noise: np.random.Generator, state: Any
    ) -> tuple[Any, Any]:
        ...


@dataclass(frozen=True)
class SamplerSpec:
    """What a sampler hands to the driver.

    Attributes
    ----------
    name : str
        Sampler name recorded in ``attrs["sampler"]``.
    plan : callable
        ``z -> list[Release]``, the per-iteration releases for multiplier ``z``.
    build_kernel : callable
        ``z -> kernel``.
    init_state : callable
        ``(rng_prop, chain_index) -> state``.  Must use only data-independent
        information to choose the point.
    position : callable
        ``state -> ndarray (dim,)``.
    stats : tuple of str
        ``info`` fields released in ``sample_stats`` (post-processing of
        mechanism outputs or data-independent).
    nonprivate_stats : tuple of str
        ``info`` fields derived from raw data; released only on opt-in.
    once : sequence of Release, or callable
        Releases made once per chain (none for penalty).  A callable
        ``z -> list[Release]`` (linear in ``z``, like ``plan``) is evaluated at
        the resolved noise multiplier, so one-off releases whose noise follows
        the calibrated scale (DP HMC's initial gradient) are accounted at the
        scale actually used.
    attrs : mapping
        Extra sampler-specific attributes.
    attrs_for : callable, optional
        ``BudgetPlan -> mapping``: extra attributes that depend on the resolved
        budget (e.g. per-owner reports).
    step_rdp : RdpCurve, optional
        Per-iteration RDP of a sampler that is not a Gaussian release (DP
        Barker).  When given, ``plan`` and ``once`` are not used for
        accounting, ``noise`` must be ``None``, the budget is resolved by
        :func:`resolve_curve_budget`, ``build_kernel`` receives ``nan`` and
        ``attrs`` has no ``noise_multiplier``.
    """

    name: str
    plan: Callable[[float], Sequence[Release]]
    build_kernel: Callable[[float], Kernel]
    init_state: Callable[[np.random.Generator, int], Any]
    position: Callable[[Any], np.ndarray]
    stats: tuple[str, ...]
    nonprivate_stats: tuple[str, ...] = ()
    once: Sequence[Release] | Callable[[float], Sequence[Release]] = ()
    attrs: Mapping[str, Any] = field(default_factory=dict)
    attrs_for: Callable[["BudgetPlan"], Mapping[str, Any]] | None = None
    step_rdp: RdpCurve | None = None


@dataclass(frozen=True)
class BudgetPlan:
    """Resolved run size and noise."""

    iterations: int
    noise_multiplier: float
    epsilon_spent: float
    accountant: str


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def validate_positive(name: str, value: Any) -> float:
    """Return ``value`` as a float if it is a positive, finite number; else raise ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    if not (np.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be positive and finite, got {value!r}")
    return float(value)


def validate_run_args(
    *,
    epsilon: float,
    delta: float,
    iterations: int | None,
    noise: float | None,
    chains: int,
    warmup: int,
    relation: str,
    seed: Any,
) -> None:
    """Validate the arguments every private run shares; touches no data.

    Raises
    ------
    ValueError
        With a message naming the offending argument.
    """
    validate_privacy_params(epsilon, delta)
    check_relation(relation)
    _check_int("chains", chains, 1)
    _check_int("warmup", warmup, 0)
    if iterations is not None:
        _check_int("iterations", iterations, 1)
    if noise is not None:
        if isinstance(noise, bool) or not isinstance(noise, (int, float, np.floating, np.integer)) \
                or not np.isfinite(noise) or noise <= 0:
            raise ValueError(f"noise (the noise multiplier) must be positive and finite, got {noise!r}")
    if seed is not None and not isinstance(seed, (int, np.integer, np.random.SeedSequence)):
        raise ValueError(f"seed must be None, an int or a numpy SeedSequence, got {type(seed).__name__}")
    if isinstance(seed, (int, np.integer)) and seed < 0:
        raise ValueError(f"seed must be non-negative, got {seed!r}")


def resolve_budget(
    budget: Budget,
    plan: Callable[[float], Sequence[Release]],
    *,
    iterations: int | None,
    noise: float | None,
    warmup: int,
    chains: int,
    once: Sequence[Release] | Callable[[float], Sequence[Release]] = (),
) -> BudgetPlan:
    """Turn (iterations, noise) into a run that fits the budget, or refuse.

    * ``iterations`` only (or neither: :data:`DEFAULT_ITERATIONS`): calibrate
      the noise multiplier so that ``chains * (warmup + iterations)``
      iterations spend exactly the budget.
    * ``noise`` only: the most post-warm-up iterations that fit.
    * both: the run must fit.

    ``once`` is either a fixed sequence or a callable ``z -> list[Release]``
    linear in ``z`` (evaluated at the resolved multiplier for the fit and the
    reported epsilon, at ``z = 1`` for calibration, which scales it).

    Raises
    ------
    PrivacyBudgetError
        If the requested run does not fit.
    """
    def once_at(z: float) -> tuple[Release, ...]:
        return tuple(once(z)) if callable(once) else tuple(once)

    if noise is None:
        its = DEFAULT_ITERATIONS if iterations is None else iterations
        total = warmup + its
        z = float(budget.calibrate(list(plan(1.0)), total, chains=chains, once=once_at(1.0)))
        if not (np.isfinite(z) and z > 0):
            raise PrivacyBudgetError(f"calibration returned an invalid noise multiplier {z!r}")
    else:
        z = float(noise)
        max_total = int(budget.max_iterations(list(plan(z)), chains=chains, once=once_at(z)))
        if iterations is None:
            its = max_total - warmup
            if its < 1:
                raise PrivacyBudgetError(
                    f"with noise multiplier {z:g} the budget allows {max_total} iterations per "
                    f"chain ({chains} chains), not enough for warmup={warmup} plus one draw"
                )
        else:
            its = iterations
            if warmup + its > max_total:
                raise PrivacyBudgetError(
                    f"{chains} chains x (warmup {warmup} + iterations {its}) = "
                    f"{chains * (warmup + its)} releases do not fit in the budget with noise "
                    f"multiplier {z:g}; at most {max_total} iterations per chain fit"
                )
        total = warmup + its
    plan_z = list(plan(z))
    spent = float(budget.epsilon_spent(plan_z, total, chains=chains, once=once_at(z)))
    return BudgetPlan(its, z, spent, str(budget.accountant(plan_z, once=once_at(z))))


def resolve_curve_budget(
    budget: Budget, curve: RdpCurve, *, iterations: int | None, warmup: int, chains: int,
) -> BudgetPlan:
    # Gaussian releases made before the run (budget.preceding) compose with
    # the curve order by order (their RDP is alpha * M).
    """Run size of a sampler accounted by a per-step RDP curve, or refuse.

    Every iteration of every chain (warm-up included) is one step of
    ``curve``.  ``iterations=None``: the most post-warm-up iterations that fit;
    otherwise ``chains * (warmup + iterations)`` steps must fit.

    Returns
    -------
    BudgetPlan
        With ``noise_multiplier = nan`` (there is none).

    Raises
    ------
    PrivacyBudgetError
        If the requested run (or one post-warm-up iteration) does not fit.
    """
    pre_m = sum(r.count / (2.0 * r.noise_multiplier**2) for r in budget.preceding)
    if any(r.subsampled for r in budget.preceding):
        raise ValueError("a curve-accounted run can only follow plain Gaussian releases")
    max_steps = curve_max_steps(curve, budget.epsilon, budget.delta, pre_m)
    max_total = max_steps // chains
    if iterations is None:
        its = max_total - warmup
        if its < 1:
            raise PrivacyBudgetError(
                f"the budget (epsilon={budget.epsilon:g}, delta={budget.delta:g}) allows "
                f"{max_total} iterations per chain ({chains} chains) under {curve.name}, not "
                f"enough for warmup={warmup} plus one draw; use a larger batch, more rows or "
                "a larger budget"
            )
    else:
        its = iterations
        if warmup + its > max_total:
            raise PrivacyBudgetError(
                f"{chains} chains x (warmup {warmup} + iterations {its}) = "
                f"{chains * (warmup + its)} steps do not fit in the budget (epsilon="
                f"{budget.epsilon:g}, delta={budget.delta:g}) under {curve.name}; at most "
                f"{max_total} iterations per chain fit"
            )
    spent = curve_epsilon(curve, chains * (warmup + its), budget.delta, pre_m)
    return BudgetPlan(its, float("nan"), spent, ACCOUNTANT_CURVE)


_PRECEDING: ContextVar[tuple[Release, ...]] = ContextVar("stan_dp_preceding_releases", default=())


@contextmanager
def preceding_releases(releases: Sequence[Release]) -> Iterator[None]:
    """Account ``releases``, already made on the same data, in every run started inside.

    :func:`stan_dp.sample` runs its private adaptation first and then a
    sampler on the adapted density; inside this context the sampler's
    :func:`run` composes the adaptation's releases with its own
    (:attr:`stan_dp.accounting.Budget.preceding`), so the whole run spends
    at most ``(epsilon, delta)``, and records them in ``attrs``.
    """
    token = _PRECEDING.set(tuple(releases))
    try:
        yield
    finally:
        _PRECEDING.reset(token)


INIT_RADIUS = 2.0
"""Default initial points are uniform(-INIT_RADIUS, INIT_RADIUS) in unconstrained space."""


def read_init_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Constrained values by name from a JSON file (as CmdStan's and cmdstanpy's ``inits=``)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"init file not found: {path} (init= takes a dict of constrained "
                                "values, an unconstrained array, or a JSON file of the values)")
    try:
        values = json.loads(p.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"init file {path} is not valid JSON: {exc}") from None
    if not isinstance(values, dict):
        raise ValueError(f"init file {path} must hold a JSON object of parameter values by name")
    return values


def resolve_init(model: Any, init: Any, chains: int) -> np.ndarray | None:
    """Validate a user initial point without touching the data.

    Parameters
    ----------
    model : object
        Provides ``dim`` and ``log_prior``; ``unconstrain`` is needed for a dict.
    init : None, array-like, dict or path
        ``None`` (random, see :func:`initial_position`), an unconstrained
        array of size ``dim`` (shared by all chains) or of shape
        ``(chains, dim)``, or a dict of constrained values (needs
        ``model.unconstrain``), or the path of a JSON file holding that dict
        (CmdStan's init files); parameters the dict leaves out start where
        zeros unconstrained put them (a positive parameter at 1), and a name
        that is not a parameter is refused.  A user initial point must not
        depend on the private data.
    chains : int
        Number of chains.

    Returns
    -------
    ndarray of shape (chains, dim) or None

    Raises
    ------
    ValueError, TypeError
        For a wrong size, a dict without ``unconstrain``, or a point where the
        log prior is not finite.
    """
    if init is None:
        return None
    dim = int(model.dim)
    if isinstance(init, (str, os.PathLike)):
        init = read_init_file(init)
    if isinstance(init, Mapping):
        unconstrain = getattr(model, "unconstrain", None)
        if not callable(unconstrain):
            raise TypeError(
                f"init given as a dict of constrained values, but {type(model).__name__} "
                "has no unconstrain(); pass an unconstrained array of size dim instead"
            )
        values = dict(init)
        shapes = getattr(model, "param_shapes", None)
        if isinstance(shapes, Mapping):
            unknown = sorted(str(k) for k in values if k not in shapes)
            if unknown:
                raise ValueError(f"init names {', '.join(unknown)}, not in the parameters block "
                                 f"({', '.join(shapes)})")
            left_out = [k for k in shapes if k not in values]
            if left_out and callable(getattr(model, "constrain", None)):
                default = model.constrain(np.zeros(dim))
                values = {k: (values[k] if k in values else default[k]) for k in shapes}
        init = unconstrain(values)
    arr = np.asarray(init, dtype=float)
    if arr.size == dim:
        arr = np.broadcast_to(arr.reshape(dim), (chains, dim)).copy()
    elif arr.shape != (chains, dim):
        raise ValueError(
            f"init must have size dim={dim} (or shape (chains, dim)=({chains}, {dim})), "
            f"got shape {np.shape(init)}"
        )
    if not np.all(np.isfinite(arr)):
        raise ValueError("init must be finite")
    for row in arr:
        if not np.isfinite(float(model.log_prior(row))):
            raise ValueError(f"the log prior is not finite at init {row.tolist()}")
    return arr


def initial_position(
    rng: np.random.Generator, model: Any, user_init: np.ndarray | None, chain: int,
    max_tries: int = 100,
) -> np.ndarray:
    """Data-independent initial point of one chain.

    A user point if given, otherwise uniform(-2, 2) per coordinate in
    unconstrained space drawn from the chain's *proposal* stream (redrawn, up
    to ``max_tries`` times, where the log prior is not finite).
    """
    if user_init is not None:
        return np.array(user_init[chain], dtype=float)
    dim = int(model.dim)
    for _ in range(max_tries):
        theta = rng.uniform(-INIT_RADIUS, INIT_RADIUS, size=dim)
        if np.isfinite(float(model.log_prior(theta))):
            return theta
    raise ValueError(f"no initial point with a finite log prior found in {max_tries} tries")


from stan_dp.progress import Progress  # noqa: E402  (moved to its own module)

_Progress = Progress
"""Former name of :class:`stan_dp.progress.Progress`, kept for old imports."""


def _version() -> str:
    try:
        from stan_dp.version import __version__

        return str(__version__)
    except Exception:  # noqa: BLE001
        return "unknown"


def run(
    spec: SamplerSpec,
    model: Any,
    *,
    epsilon: float,
    delta: float,
    iterations: int | None,
    noise: float | None,
    chains: int,
    warmup: int,
    seed: int | np.random.SeedSequence | None,
    relation: str,
    progress: bool,
    release_nonprivate: Sequence[str] = (),
    run_attrs: Mapping[str, Any] | None = None,
):
    """Run a private sampler and return ``arviz.InferenceData``.

    Parameters
    ----------
    spec : SamplerSpec
        The sampler.
    model : object
        Provides ``constrain``, ``param_names`` and ``n_rows`` (data-independent).
    epsilon, delta : float
        Budget for the whole run (all chains, warm-up included).
    iterations : int or None
        Post-warm-up draws per chain.
    noise : float or None
        Noise multiplier.
    chains, warmup : int
        Number of chains; warm-up (burn-in) iterations per chain.
    seed : int, SeedSequence or None
        ``None``: fresh OS entropy.
    relation : {"replace_one", "add_remove"}
        Neighbouring relation.
    progress : bool
        Show a progress bar.
    release_nonprivate : sequence of str
        Names in ``spec.nonprivate_stats`` the user explicitly asked to release.
    run_attrs : mapping, optional
        Extra attributes from the sampler call (clip, temperature, ...).

    Returns
    -------
    arviz.InferenceData
    """
    validate_run_args(epsilon=epsilon, delta=delta, iterations=iterations, noise=noise,
                      chains=chains, warmup=warmup, relation=relation, seed=seed)
    unknown = [s for s in release_nonprivate if s not in spec.nonprivate_stats]
    if unknown:
        raise ValueError(f"cannot release {unknown}: not a diagnostic of {spec.name}")

    preceding = _PRECEDING.get()
    if not preceding and relation == "replace_one":   # after an adaptation: sample() checked it
        rows = getattr(model, "n_rows", None)
        warn_weak_delta(delta, int(rows) if rows is not None else None, stacklevel=3)
    budget = Budget(float(epsilon), float(delta), relation=relation, preceding=preceding)
    if spec.step_rdp is not None:
        if noise is not None:
            raise ValueError(f"{spec.name} has no noise multiplier to choose; pass noise=None")
        resolved = resolve_curve_budget(budget, spec.step_rdp, iterations=iterations,
                                        warmup=warmup, chains=chains)
    else:
        resolved = resolve_budget(budget, spec.plan, iterations=iterations, noise=noise,
                                  warmup=warmup, chains=chains, once=spec.once)
    if release_nonprivate:
        warnings.warn(
            f"releasing {', '.join(release_nonprivate)}: computed from the raw data WITHOUT "
            "privacy protection; the output is NOT differentially private as a whole. "
            "Use for debugging only and do not publish it.",
            PrivacyWarning,
            stacklevel=3,
        )

    # ---- nothing above touched the data ----
    kernel = spec.build_kernel(resolved.noise_multiplier)
    total = warmup + resolved.iterations
    streams = chain_streams(seed, chains)
    stat_names = tuple(spec.stats) + tuple(release_nonprivate)
    positions: list[np.ndarray] = []
    stats: dict[str, np.ndarray] = {name: np.empty((chains, total)) for name in stat_names}
    bar = _Progress(chains * total, progress, spec.name)
    try:
        for c, stream in enumerate(streams):
            state = spec.init_state(stream.proposal, c)
            first = np.asarray(spec.position(state), dtype=float)
            pos = np.empty((total, first.size))
            for i in range(total):
                state, info = kernel(stream.proposal, stream.noise, state)
                pos[i] = spec.position(state)
                for name in stat_names:
                    stats[name][c, i] = getattr(info, name)
                bar.update(1)
            positions.append(pos)
    finally:
        bar.close()

    stacked = np.stack(positions)
    draws = with_transformed(constrain_draws(model.constrain, stacked), model, stacked,
                             None if seed is None else quantity_seed(seed))
    for name in stat_names:
        if name == "is_accepted":
            stats[name] = stats[name].astype(bool)

    attrs: dict[str, Any] = {
        "sampler": spec.name,
        "epsilon": float(epsilon),
        "delta": float(delta),
        "epsilon_spent": resolved.epsilon_spent,
        "iterations": resolved.iterations,
        "warmup": int(warmup),
        "chains": int(chains),
        "relation": relation,
        "accountant": resolved.accountant,
        "seeded": seed is not None,
        "nonprivate_outputs": ",".join(release_nonprivate),
        "preceding_releases": int(sum(r.count for r in preceding)),
        "stan_dp_version": _version(),
    }
    if relation == "replace_one":
        # Under add/remove the row count is private (DESIGN.md): never published.
        attrs["n_rows"] = int(model.n_rows)
    if spec.step_rdp is None:
        attrs["noise_multiplier"] = resolved.noise_multiplier
    attrs.update(spec.attrs)
    attrs.update(quantity_attrs(model))
    if run_attrs:
        attrs.update(run_attrs)
    if spec.attrs_for is not None:
        attrs.update(spec.attrs_for(resolved))
    logger.info("%s: %d chains x %d iterations, noise multiplier %.4g, epsilon spent %.4g",
                spec.name, chains, total, resolved.noise_multiplier, resolved.epsilon_spent)
    # Honest output: diagnostics of the released post-warm-up draws only.
    kept = {k: np.asarray(v)[:, warmup:] for k, v in draws.items()}
    acceptance = stats.get("acceptance_rate")
    diag = chain_diagnostics(kept, None if acceptance is None else np.asarray(acceptance)[:, warmup:])
    attrs["max_rhat"] = diag["max_rhat"]
    attrs["min_ess_bulk"] = diag["min_ess_bulk"]
    attrs["acceptance_per_chain"] = ",".join(f"{a:.4g}" for a in diag["acceptance"])
    attrs["mixed"] = not mixing_warnings(diag)
    emit(mixing_warnings(diag), attrs, stacklevel=4)
    attrs.setdefault("warnings", "")
    return build_inference_data(draws, stats, warmup=warmup, attrs=attrs)

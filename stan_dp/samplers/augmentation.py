"""Data-augmentation MCMC for inference from a privatised statistic.

Ju, Awan, Gong, Rao (2022), seed ``004``: given only ``s_dp``, released by a
record-additive mechanism ``η(s_dp | x) = η(s_dp | Σ_i t(x_i))``, sample
``p(θ, x | s_dp) ∝ p(θ) Π_i f(x_i | θ) η(s_dp | x)`` by Metropolis-within-
Gibbs (Algorithm 1, a case of Algorithm 2):

1. ``θ | x``: any kernel leaving ``p(θ | x)`` invariant — here HMC on the
   Stan log density of the current imputed records, or an exact draw
   supplied by the user (a conjugate update);
2. for ``i = 1..n``: propose ``x_i* ~ f(· | θ)`` (all n drawn in one
   generated-quantities call), accept with probability
   ``min(1, η(s_dp | s - t(x_i) + t(x_i*)) / η(s_dp | s))`` and update the
   running sum ``s`` in O(1) (Proposition 3.2).  For a pure ε-DP mechanism
   every acceptance probability is at least ``exp(-ε)`` (Proposition 3.1).

The chain converges to ``p(θ | s_dp)`` under A1–A4 of Theorem S-3.1 (proper
prior, support of ``f`` free of θ, ``η > 0``).  The sampler reads nothing
but the public ``s_dp`` and the model: it spends no privacy budget.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, Sequence

import numpy as np

from stan_dp.augmentation.privacy import RecordPrivacy
from stan_dp.augmentation.records import StanRecordModel
from stan_dp.native.overlay import augment_sweep
from stan_dp.output import build_inference_data, constrain_draws
from stan_dp.progress import Progress
from stan_dp.version import __version__

__all__ = [
    "AugmentationState",
    "AugmentationInfo",
    "sweep_records_reference",
    "update_records",
    "hmc_transition",
    "build_kernel",
    "augmented_sample",
]

Records = dict[str, np.ndarray]
ThetaUpdate = Callable[[Mapping[str, np.ndarray], np.random.Generator], Mapping[str, Any]]

#: Initial HMC step size (adapted during warm-up).
INIT_STEP_SIZE = 0.1
#: Target HMC acceptance of the step-size adaptation.
TARGET_ACCEPT = 0.8
#: Unconstrained radius of default initial values (as in Stan).
INIT_RADIUS = 2.0


class AugmentationState(NamedTuple):
    """State of one chain: θ (unconstrained), imputed records, their statistics and sum."""

    theta: np.ndarray
    records: Records
    stats: np.ndarray   # (n, k): t(clamp(x_i))
    s: np.ndarray       # (k,): Σ_i stats[i]


class AugmentationInfo(NamedTuple):
    """What one sweep reports (all functions of imputed, never confidential, records)."""

    record_acceptance: float       # fraction of the n record proposals accepted
    min_record_acceptance: float   # min over records of the acceptance probability
    acceptance_rate: float         # θ-update acceptance probability (1 for exact draws)


# ------------------------------------------------------------ records ------
def sweep_records_reference(kind: str, weights: np.ndarray, s_dp: np.ndarray, delta: np.ndarray,
                            log_u: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Plain-Python sweep of record decisions (the oracle for the native sweep).

    Record ``i`` moves the sum by ``delta[i]`` and is accepted when
    ``log_u[i] < log η(s_dp | s + delta[i]) - log η(s_dp | s)``.

    Returns
    -------
    accepted : ndarray of bool, shape (n,)
    s : ndarray, shape (k,)
        The sum after the sweep, updated record by record.
    min_log_ratio : float
        ``min_i min(0, log ratio_i)``.
    """
    s = np.array(s, dtype=float)
    accepted = np.zeros(len(delta), dtype=bool)
    min_lr = 0.0
    for i, d in enumerate(delta):
        r = s_dp - s
        if kind == "l1":
            lr = float(np.sum(weights * (np.abs(r) - np.abs(r - d))))
        else:
            lr = float(np.sum(weights * (r * r - (r - d) ** 2)))
        min_lr = min(min_lr, lr)
        if log_u[i] < lr:
            accepted[i] = True
            s = s + d
    return accepted, s, min_lr


def update_records(state: AugmentationState, proposals: Mapping[str, np.ndarray],
                   privacy: RecordPrivacy, s_dp: np.ndarray, log_u: np.ndarray,
                   lib: Any = None) -> tuple[AugmentationState, np.ndarray, float, np.ndarray]:
    """Algorithm 1, step 2, for all records: accept or reject every proposal in order.

    Parameters
    ----------
    state : AugmentationState
    proposals : mapping
        One proposed record per row, ``x_i* ~ f(· | θ)``.
    privacy : RecordPrivacy
    s_dp : ndarray, shape (k,)
    log_u : ndarray, shape (n,)
        Log uniforms, one per record.
    lib : ctypes.CDLL, optional
        A stan_dp model library for the native sweep; ``None`` uses
        :func:`sweep_records_reference`.

    Returns
    -------
    state : AugmentationState
        New records and statistics; ``s`` recomputed as ``Σ stats``.
    accepted : ndarray of bool
    min_log_ratio : float
    s_incremental : ndarray
        The sum as updated record by record (equals ``state.s`` up to rounding).
    """
    mech = privacy.mechanism
    new_stats = privacy.record_stats(proposals)
    delta = np.ascontiguousarray(new_stats - state.stats)
    weights = np.full(delta.shape[1], mech.weight)
    s_inc = np.array(state.s, dtype=np.float64)
    if lib is None:
        accepted, s_inc, min_lr = sweep_records_reference(mech.kind, weights, s_dp, delta, log_u, s_inc)
    else:
        accepted, min_lr = augment_sweep(lib, mech.kind, s_dp, weights, delta,
                                         np.ascontiguousarray(log_u, dtype=np.float64), s_inc)
    records = {}
    for v, old in state.records.items():
        x = np.array(old, copy=True)
        x[accepted] = proposals[v][accepted]
        records[v] = x
    stats = np.where(accepted[:, None], new_stats, state.stats)
    return AugmentationState(state.theta, records, stats, stats.sum(axis=0)), accepted, min_lr, s_inc


# ------------------------------------------------------------- theta -------
def hmc_transition(log_density_grad: Callable[[np.ndarray], tuple[float, np.ndarray]],
                   theta: np.ndarray, step_size: float, n_leapfrog: int,
                   rng: np.random.Generator) -> tuple[np.ndarray, float]:
    """One HMC transition (identity metric, ``n_leapfrog`` leapfrog steps).

    Returns the new position and the acceptance probability; a non-finite
    log density on the trajectory rejects the move.
    """
    lp0, g = log_density_grad(theta)
    p = rng.standard_normal(theta.shape)
    h0 = lp0 - 0.5 * float(p @ p)
    q = theta.copy()
    lp = lp0
    p = p + 0.5 * step_size * g
    for step in range(n_leapfrog):
        q = q + step_size * p
        lp, g = log_density_grad(q)
        if not np.isfinite(lp):
            return theta, 0.0
        if step < n_leapfrog - 1:
            p = p + step_size * g
    p = p + 0.5 * step_size * g
    log_alpha = min(0.0, lp - 0.5 * float(p @ p) - h0)
    if not math.isfinite(log_alpha):
        return theta, 0.0
    alpha = math.exp(log_alpha)
    return (q if rng.random() < alpha else theta), alpha


class DualAveraging:
    """Step-size adaptation toward a target acceptance (Hoffman & Gelman 2014, Alg. 5)."""

    def __init__(self, step_size: float, target: float = TARGET_ACCEPT) -> None:
        self.mu = math.log(10 * step_size)
        self.target = target
        self.h_bar = 0.0
        self.log_step = math.log(step_size)
        self.log_step_bar = 0.0
        self.t = 0

    def update(self, accept: float) -> float:
        """Record one acceptance probability; return the next step size."""
        self.t += 1
        eta = 1.0 / (self.t + 10.0)
        self.h_bar = (1 - eta) * self.h_bar + eta * (self.target - accept)
        self.log_step = self.mu - math.sqrt(self.t) / 0.05 * self.h_bar
        w = self.t ** -0.75
        self.log_step_bar = w * self.log_step + (1 - w) * self.log_step_bar
        return math.exp(self.log_step)

    @property
    def final(self) -> float:
        """The step size to use after warm-up."""
        return math.exp(self.log_step_bar) if self.t else math.exp(self.log_step)


def build_kernel(model: StanRecordModel, privacy: RecordPrivacy, s_dp: np.ndarray, *,
                 theta_update: str | ThetaUpdate = "hmc", leapfrog: int = 10, theta_steps: int = 1,
                 native: bool = True, profile: dict[str, float] | None = None):
    """One sweep of Algorithm 1: ``kernel(rng, stan_rng, state, step_size) -> (state, info)``.

    ``profile``, when given, accumulates seconds per phase: ``construct``
    (model on the imputed records), ``theta`` (gradients and HMC),
    ``generate`` (n proposals from generated quantities), ``statistic``
    and ``sweep`` (record decisions).
    """
    lib = model.native_library if native else None
    clock = time.perf_counter

    def tick(key: str, t0: float) -> float:
        t1 = clock()
        if profile is not None:
            profile[key] = profile.get(key, 0.0) + t1 - t0
        return t1

    def kernel(rng: np.random.Generator, stan_rng: Any, state: AugmentationState,
               step_size: float) -> tuple[AugmentationState, AugmentationInfo]:
        t0 = clock()
        if callable(theta_update):
            theta = model.unconstrain(theta_update(state.records, rng))
            alpha = 1.0
            t0 = tick("theta", t0)
        else:
            density = model.density(state.records)
            t0 = tick("construct", t0)
            theta = state.theta
            alphas = []
            for _ in range(theta_steps):
                theta, a = hmc_transition(density.log_density_gradient, theta,
                                          step_size * rng.uniform(0.9, 1.1), leapfrog, rng)
                alphas.append(a)
            alpha = float(np.mean(alphas))
            del density
            t0 = tick("theta", t0)
        proposals = model.generate(theta, stan_rng)
        t0 = tick("generate", t0)
        log_u = np.log(rng.random(model.n_records))
        current = state._replace(theta=theta)
        new, accepted, min_lr, _ = update_records(current, proposals, privacy, s_dp, log_u, lib)
        tick("sweep", t0)
        info = AugmentationInfo(float(np.mean(accepted)), math.exp(min_lr), alpha)
        return new, info

    return kernel


# ------------------------------------------------------------ driver -------
def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _check_s_dp(s_dp: Any, privacy: RecordPrivacy) -> np.ndarray:
    try:
        arr = np.asarray(s_dp, dtype=float)
    except (TypeError, ValueError):
        raise ValueError("s_dp must be a one-dimensional array of numbers") from None
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"s_dp must be a non-empty one-dimensional array, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError("s_dp must be finite")
    if privacy.mechanism.integer and not np.all(arr == np.round(arr)):
        raise ValueError(f"s_dp must hold integers for the {privacy.mechanism.name} mechanism")
    return np.ascontiguousarray(arr)


def _initial_thetas(model: StanRecordModel, init: Any, chains: int,
                    rngs: Sequence[np.random.Generator]) -> list[np.ndarray]:
    if init is None:
        return [rng.uniform(-INIT_RADIUS, INIT_RADIUS, size=model.dim) for rng in rngs]
    inits = [init] * chains if isinstance(init, Mapping) else list(init)
    if len(inits) != chains or not all(isinstance(i, Mapping) for i in inits):
        raise ValueError("init must be a dict of parameter values or a list of one dict per chain")
    return [model.unconstrain(i) for i in inits]


def augmented_sample(
    model: StanRecordModel | str | os.PathLike[str],
    privacy: RecordPrivacy,
    s_dp: Any,
    *,
    data: Mapping[str, Any] | str | os.PathLike[str] | None = None,
    rows: str = "N",
    generate: Mapping[str, str] | None = None,
    iterations: int = 1000,
    warmup: int = 1000,
    chains: int = 2,
    init: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
    theta_update: str | ThetaUpdate = "hmc",
    leapfrog: int = 10,
    theta_steps: int = 1,
    step_size: float = INIT_STEP_SIZE,
    seed: int | None = None,
    progress: bool = False,
    profile: dict[str, float] | None = None,
):
    """Sample ``p(θ | s_dp)`` by data augmentation (the counterpart of ``dapper_sample``).

    Parameters
    ----------
    model : StanRecordModel or path
        The Stan model of the records, with a record generator in generated
        quantities (see :class:`stan_dp.StanRecordModel`); a path needs ``data``.
    privacy : RecordPrivacy
        How ``s_dp`` was released (:func:`stan_dp.new_privacy`).
    s_dp : array_like, shape (k,)
        The released statistic.
    data : dict or path, optional
        The model's data when ``model`` is a path: shared variables and the
        record variables at their full shapes (values ignored).
    rows, generate
        As for :class:`stan_dp.StanRecordModel`.
    iterations, warmup, chains : int
        Sweeps kept per chain, sweeps discarded (step-size adaptation) and chains.
    init : dict or list of dict, optional
        Initial parameter values (constrained, Stan names); default uniform
        on (-2, 2) in unconstrained space.  Initial records are drawn from
        ``f(· | θ_init)``.
    theta_update : "hmc" or callable
        ``"hmc"``: ``theta_steps`` HMC transitions of ``leapfrog`` steps on
        the Stan log density of the imputed records, step size adapted in
        warm-up.  A callable ``(records, rng) -> {name: value}`` must return
        an exact draw from ``p(θ | records)`` (e.g. a conjugate update).
    step_size : float
        Initial HMC step size.
    seed : int, optional
        Seed of every random stream; ``None`` for OS entropy.
    progress : bool
        Show a progress bar.
    profile : dict, optional
        Accumulates seconds per phase of the sweeps (see :func:`build_kernel`).

    Returns
    -------
    arviz.InferenceData
        ``posterior``: the ``parameters`` block with Stan's names and shapes;
        ``sample_stats``: ``record_acceptance`` (mean record acceptance of each
        sweep), ``min_record_acceptance`` (smallest record acceptance
        probability of each sweep), ``acceptance_rate`` and ``step_size`` of
        the θ-update; ``attrs``: mechanism, epsilon, s_dp, noise scale, clamp
        bounds, n_records, ``privacy_budget_spent = 0``.

    Raises
    ------
    ValueError
        For a bad argument, an ``s_dp`` of the wrong length, a statistic that
        is not record-additive, or a generator that reads the record data.
    """
    if not isinstance(privacy, RecordPrivacy):
        raise ValueError("privacy must come from stan_dp.new_privacy(statistic, mechanism, clamp=...)")
    s_dp = _check_s_dp(s_dp, privacy)
    iterations = _check_int("iterations", iterations, 1)
    warmup = _check_int("warmup", warmup, 0)
    chains = _check_int("chains", chains, 1)
    leapfrog = _check_int("leapfrog", leapfrog, 1)
    theta_steps = _check_int("theta_steps", theta_steps, 1)
    if not (isinstance(step_size, (int, float)) and math.isfinite(step_size) and step_size > 0):
        raise ValueError(f"step_size must be a positive number, got {step_size!r}")
    if not (theta_update == "hmc" or callable(theta_update)):
        raise ValueError("theta_update must be 'hmc' or a callable (records, rng) -> parameter dict")
    if seed is not None:
        _check_int("seed", seed, 0)
    if not isinstance(model, StanRecordModel):
        if data is None:
            raise ValueError("data is required when model is a path")
        model = StanRecordModel(model, data, rows=rows, generate=generate)

    root = np.random.SeedSequence(seed)
    chain_seqs = root.spawn(chains)
    rngs = [np.random.default_rng(sq) for sq in chain_seqs]
    stan_seeds = [int(sq.generate_state(1)[0]) for sq in chain_seqs]
    thetas = _initial_thetas(model, init, chains, rngs)

    # The statistic and the generator are checked on records drawn from the
    # model at the first chain's initial point (no data involved).
    first = model.check_generator(thetas[0], seed=stan_seeds[0])
    k = privacy.check_statistic(first, np.random.default_rng(root.spawn(1)[0]))
    if s_dp.size != k:
        raise ValueError(f"s_dp has length {s_dp.size} but the statistic has {k} components")

    kernel = build_kernel(model, privacy, s_dp, theta_update=theta_update, leapfrog=leapfrog,
                          theta_steps=theta_steps, profile=profile)
    total = warmup + iterations
    positions = np.empty((chains, total, model.dim))
    stats = {name: np.empty((chains, total)) for name in
             ("record_acceptance", "min_record_acceptance", "acceptance_rate", "step_size")}
    bar = Progress(chains * total, progress, "augmentation")
    try:
        for c in range(chains):
            rng = rngs[c]
            stan_rng = model.new_rng(stan_seeds[c])
            records = model.generate(thetas[c], stan_rng)
            t = privacy.record_stats(records)
            state = AugmentationState(thetas[c], records, t, t.sum(axis=0))
            adapt = DualAveraging(step_size)
            eps = step_size
            for it in range(total):
                if it == warmup:
                    eps = adapt.final
                state, info = kernel(rng, stan_rng, state, eps)
                positions[c, it] = state.theta
                stats["step_size"][c, it] = eps
                for name in ("record_acceptance", "min_record_acceptance", "acceptance_rate"):
                    stats[name][c, it] = getattr(info, name)
                if it < warmup and theta_update == "hmc":
                    eps = adapt.update(info.acceptance_rate)
                bar.update()
    finally:
        bar.close()

    attrs = {
        "sampler": "data_augmentation",
        "algorithm": "Ju, Awan, Gong, Rao 2022, Algorithm 1",
        "privacy_budget_spent": 0.0,
        "post_processing": True,
        "s_dp": s_dp.tolist(),
        "n_records": model.n_records,
        "theta_update": theta_update if isinstance(theta_update, str) else "user",
        "chains": chains,
        "iterations": iterations,
        "warmup": warmup,
        "seeded": seed is not None,
        "stan_dp_version": __version__,
        **privacy.attrs(),
    }
    draws = constrain_draws(model.constrain, positions)
    return build_inference_data(draws, stats, warmup=warmup, attrs=attrs)

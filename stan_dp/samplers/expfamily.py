"""Penalty MCMC for exponential families with noisy sufficient statistics (Yıldırım, Alg. 3).

The log-likelihood is affine in the summed statistic ``S = sum_i s(y_i)``:
``loglik(theta) = a(theta) + phi(theta) . S`` (eq. (7)).  Each iteration
releases a fresh ``S_hat = S + N(0, xi I)`` (Gaussian mechanism; ``sqrt(xi) =
z * k * B`` with ``B`` the per-row l2 bound enforced by clamping, ``k = 2``
replace-one; add/remove is refused, since ``a(theta) = n c(theta)`` below uses
the row count without noise) and computes

``lambda_hat = T [a(theta') - a(theta) + (phi(theta') - phi(theta)) . S_hat]
+ log prior ratio + log proposal ratio``,

whose variance is ``sigma^2(theta, theta') = T^2 ||phi(theta') - phi(theta)||^2 xi``
(eq. (8), with the tempering factor).  Accept with
``min(1, exp(lambda_hat - sigma^2 / 2))``.

The clamped sum ``S`` is computed once (one pass over the data, after the
budget is resolved) and kept inside the kernel's closure; each iteration costs
``stat_dim + 1`` evaluations of ``log_lik_stats``, independent of ``n``.
``a`` and ``phi`` are recovered from ``log_lik_stats`` at ``S = 0`` and
``S = e_k``; affinity in ``S`` is checked numerically at set-up.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import numpy as np

from stan_dp.accounting import Release, sensitivity_factor
from stan_dp.density import ExpFamilyDensity, check_expfamily_density
from stan_dp.inference import (
    SamplerSpec,
    initial_position,
    resolve_init,
    run,
    validate_positive as _validate_positive,
    validate_run_args,
)
from stan_dp.mechanisms import clamp_rows_l2, gaussian_release
from stan_dp.samplers.penalty import RELEASED_STATS, log_acceptance
from stan_dp.samplers.proposals import Proposal, make_proposal

__all__ = [
    "ExpFamilyState",
    "ExpFamilyInfo",
    "natural_parameters",
    "check_affine",
    "clamped_stat_sum",
    "init",
    "build_kernel",
    "penalty_expfamily",
]


class ExpFamilyState(NamedTuple):
    """Chain state; ``offset = a(theta)`` and ``phi = phi(theta)`` are data-independent."""

    position: np.ndarray
    log_prior: float
    offset: float
    phi: np.ndarray
    aux: np.ndarray


class ExpFamilyInfo(NamedTuple):
    """Per-iteration information (all released)."""

    acceptance_rate: float
    is_accepted: bool
    noise_sd: float
    """``sqrt(sigma^2(theta, theta'))`` from eq. (8)."""
    step_size: float


def natural_parameters(model: ExpFamilyDensity, theta: np.ndarray) -> tuple[float, np.ndarray]:
    """``(a(theta), phi(theta))`` with ``log_lik_stats(theta, S) = a + phi . S``.

    A model may provide its own ``natural_parameters`` (e.g.
    :class:`stan_dp.expfamily_model.StanExpFamilyModel`, which avoids the
    cancellation of ``log_lik_stats(theta, e_k) - log_lik_stats(theta, 0)``
    when ``a(theta)`` carries a factor n); otherwise they are read off from
    ``stat_dim + 1`` evaluations of ``log_lik_stats``.
    """
    own = getattr(model, "natural_parameters", None)
    if callable(own):
        offset, phi = own(theta)
        return float(offset), np.asarray(phi, dtype=float)
    k = int(model.stat_dim)
    offset = float(model.log_lik_stats(theta, np.zeros(k)))
    phi = np.empty(k)
    for j in range(k):
        e = np.zeros(k)
        e[j] = 1.0
        phi[j] = float(model.log_lik_stats(theta, e)) - offset
    return offset, phi


def check_affine(model: ExpFamilyDensity, *, points: int = 5, scale: float = 10.0, rtol: float = 1e-6) -> None:
    """Verify numerically that ``log_lik_stats`` is affine in the statistic.

    Uses data-independent random ``theta`` (uniform(-2, 2)) and statistics
    (normal with sd ``scale``) from a fixed private generator; touches no data.

    Raises
    ------
    ValueError
        If ``log_lik_stats(theta, S) != a(theta) + phi(theta) . S`` beyond ``rtol``.
    """
    rng = np.random.default_rng(20240531)
    k, dim = int(model.stat_dim), int(model.dim)
    for _ in range(points):
        theta = rng.uniform(-2, 2, size=dim)
        offset, phi = natural_parameters(model, theta)
        for _ in range(3):
            s = rng.normal(0.0, scale, size=k)
            direct = float(model.log_lik_stats(theta, s))
            affine = offset + float(phi @ s)
            if not np.isfinite(direct) or abs(direct - affine) > rtol * max(
                1.0, abs(direct), abs(offset), float(np.abs(phi * s).sum())
            ):
                raise ValueError(
                    f"{type(model).__name__}.log_lik_stats is not affine in the statistic "
                    f"(at theta={theta.round(3).tolist()}: {direct!r} vs {affine!r}); "
                    "the exponential-family penalty needs loglik = a(theta) + phi(theta) . S"
                )


def clamped_stat_sum(model: ExpFamilyDensity, bound: float) -> np.ndarray:
    """Sum of per-row statistics, each projected onto the l2 ball of radius ``bound``.

    This reads the data (once); the result is private and must only be
    released through :func:`stan_dp.mechanisms.gaussian_release`.
    """
    rows = np.asarray(model.row_stats(), dtype=float)
    if rows.shape != (int(model.n_rows), int(model.stat_dim)):
        raise ValueError(f"row_stats() must return shape (n_rows, stat_dim), got {rows.shape}")
    clamped, _ = clamp_rows_l2(rows, bound)
    return clamped.sum(axis=0)


def init(model: ExpFamilyDensity, position: np.ndarray, aux: np.ndarray | None = None) -> ExpFamilyState:
    """Initial state at ``position`` (no data access)."""
    theta = np.array(position, dtype=float)
    offset, phi = natural_parameters(model, theta)
    return ExpFamilyState(theta, float(model.log_prior(theta)), offset, phi,
                          np.empty(0) if aux is None else np.asarray(aux, dtype=float))


_init = init


def build_kernel(
    model: ExpFamilyDensity,
    proposal: Proposal,
    *,
    stat_sum: np.ndarray,
    stat_sd: float,
    temperature: float = 1.0,
    correction: bool = True,
):
    """Build the Algorithm 3 kernel.

    Parameters
    ----------
    model : ExpFamilyDensity
        The model.
    proposal : Proposal
        Data-independent proposal.
    stat_sum : ndarray (stat_dim,)
        The clamped summed statistic (private; kept in the closure).
    stat_sd : float
        ``sqrt(xi)``: sd of the noise added to each coordinate of ``S``.
    temperature : float
        Tempering factor ``T``.
    correction : bool
        Keep the penalty term (``False`` only for demonstrations).

    Returns
    -------
    callable
        ``kernel(rng_prop, rng_noise, state) -> (ExpFamilyState, ExpFamilyInfo)``.
    """
    s_private = np.array(stat_sum, dtype=float)

    def kernel(rng_prop: np.random.Generator, rng_noise: np.random.Generator, state: ExpFamilyState):
        move = proposal.propose(rng_prop, state.position, state.aux)
        lp_new = float(model.log_prior(move.position))
        if not np.isfinite(lp_new):
            aux = proposal.update_aux(state.aux, move, False)
            return state._replace(aux=aux), ExpFamilyInfo(0.0, False, 0.0, move.step)
        offset_new, phi_new = natural_parameters(model, move.position)
        dphi = phi_new - state.phi
        s_hat = gaussian_release(rng_noise, s_private, stat_sd)   # the only data release
        lam_hat = (temperature * (offset_new - state.offset + float(dphi @ s_hat))
                   + lp_new - state.log_prior + move.log_q_ratio)
        variance = temperature**2 * float(dphi @ dphi) * stat_sd**2          # eq. (8)
        log_a = log_acceptance(lam_hat, variance, correction)
        accepted = bool(np.log(rng_prop.random()) < log_a)
        aux = proposal.update_aux(state.aux, move, accepted)
        new = (ExpFamilyState(move.position, lp_new, offset_new, phi_new, aux) if accepted
               else state._replace(aux=aux))
        return new, ExpFamilyInfo(float(np.exp(log_a)), accepted, float(np.sqrt(variance)), move.step)

    return kernel


def penalty_expfamily(
    model: ExpFamilyDensity,
    *,
    epsilon: float,
    delta: float,
    iterations: int | None = None,
    noise: float | None = None,
    clip: float,
    step_size: float | Sequence[float] | np.ndarray,
    proposal: str = "gaussian",
    temperature: float = 1.0,
    chains: int = 4,
    warmup: int = 0,
    init: Any = None,
    seed: int | np.random.SeedSequence | None = None,
    relation: str = "replace_one",
    progress: bool = True,
):
    """Penalty MCMC from fresh noisy sufficient statistics (Yıldırım, Algorithm 3).

    Parameters
    ----------
    model : ExpFamilyDensity
        Log-likelihood affine in the summed statistic.
    clip : float
        ``B``: each row's statistic is projected onto the l2 ball of radius
        ``B``; the sensitivity of the sum is ``2B`` (replace-one).
    relation : {"replace_one"}
        Replace-one only: ``"add_remove"`` is refused (before any data is
        touched) because ``a(theta) = n c(theta)`` uses the row count without
        noise, and ``n`` is private under add/remove.
    epsilon, delta, iterations, noise, step_size, proposal, temperature,
    chains, warmup, init, seed, progress
        As in :func:`stan_dp.samplers.penalty.penalty`.  Each iteration is
        one Gaussian release of ``S`` with multiplier ``z``.

    Returns
    -------
    arviz.InferenceData
    """
    check_expfamily_density(model)
    validate_run_args(epsilon=epsilon, delta=delta, iterations=iterations, noise=noise,
                      chains=chains, warmup=warmup, relation=relation, seed=seed)
    if relation == "add_remove":
        # Refused before any data is touched.  lambda_hat contains a(theta') - a(theta)
        # with a(theta) = n c(theta): the row count enters un-noised, so a neighbour
        # with one more row shifts lambda_hat by up to T |c(theta') - c(theta)| beyond
        # the sensitivity the noise on S covers (issue 14, item 1).
        raise ValueError(
            "penalty_expfamily does not support relation='add_remove': the log-likelihood "
            "a(theta) + phi(theta) . S has a(theta) = n c(theta), which uses the row count n "
            "without noise, and under add/remove n is private (adding or removing a row moves "
            "a(theta) by c(theta), which the noise on S does not cover, so the run would spend "
            "more privacy than it reports). Use relation='replace_one', under which n is public"
        )
    clip = _validate_positive("clip", clip)
    temperature = _validate_positive("temperature", temperature)
    prop = make_proposal(proposal, step_size, int(model.dim))
    user_init = resolve_init(model, init, chains)
    check_affine(model)
    factor = sensitivity_factor(relation)

    def make_kernel(z: float):
        stat_sum = clamped_stat_sum(model, clip)   # the one pass over the data
        return build_kernel(model, prop, stat_sum=stat_sum, stat_sd=z * factor * clip,
                            temperature=temperature)

    def init_state(rng: np.random.Generator, chain: int) -> ExpFamilyState:
        return _init(model, initial_position(rng, model, user_init, chain), prop.init_aux(rng))

    spec = SamplerSpec(
        name="penalty_expfamily",
        plan=lambda z: [Release(z)],
        build_kernel=make_kernel,
        init_state=init_state,
        position=lambda s: s.position,
        stats=RELEASED_STATS,
    )
    steps = np.broadcast_to(np.asarray(step_size, dtype=float), (int(model.dim),))
    return run(
        spec, model, epsilon=epsilon, delta=delta, iterations=iterations, noise=noise,
        chains=chains, warmup=warmup, seed=seed, relation=relation, progress=progress,
        run_attrs={"clip": clip, "temperature": temperature, "proposal": proposal,
                   "step_size": steps.tolist(), "stat_dim": int(model.stat_dim),
                   "init": "user" if user_init is not None else "uniform(-2, 2) unconstrained"},
    )

"""The DP penalty algorithm (Yıldırım, Alg. 1 and 2; Räisä, Section 3.1).

At ``theta`` with proposal ``theta'`` (data-independent):

* per-row log-likelihood ratios ``r_j = loglik_j(theta') - loglik_j(theta)``,
  each clipped to ``±b`` with ``b = L * ||theta' - theta||`` (``L = clip``);
* release ``D = T * sum_j clip(r_j) + N(0, sigma^2)`` with ``sigma = z * Delta``,
  ``Delta = k * T * b`` the sensitivity of ``T * sum_j clip(r_j)``
  (``k = 2`` replace-one, ``1`` add/remove) and ``z`` the noise multiplier;
* ``lambda_hat = D + log prior ratio + log proposal ratio``;
* accept with probability ``min(1, exp(lambda_hat - sigma^2 / 2))``.

Because ``sigma`` scales with ``||theta' - theta||`` exactly like the
sensitivity, each release is a Gaussian mechanism with multiplier ``z``
whatever the step, and ``sigma^2(theta, theta')`` is symmetric, so without
active clipping the chain targets the exact (tempered) posterior for any
``sigma`` (the penalty ``sigma^2/2`` is what makes it exact).

Multi-owner (Alg. 2): rows are labelled by owner; each owner's clipped sum
gets its own noise ``N(0, sigma^2)`` and the penalty is the sum of the
variances, ``K sigma^2 / 2``.

Code shape follows BlackJAX: :class:`PenaltyState`, :class:`PenaltyInfo`, a
pure :func:`init`, :func:`build_kernel` returning
``kernel(rng_prop, rng_noise, state) -> (state, info)``, and the user-facing
:func:`penalty`.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from stan_dp.accounting import Release, sensitivity_factor
from stan_dp.density import RowDensity, check_row_density
from stan_dp.inference import (
    SamplerSpec,
    initial_position,
    resolve_init,
    run,
    validate_positive as _validate_positive,
    validate_run_args,
)
from stan_dp.aggregates import queries
from stan_dp.mechanisms import gaussian_release
from stan_dp.samplers.automatic import automatic as _automatic
from stan_dp.samplers.proposals import Move, Proposal, make_proposal

__all__ = [
    "PenaltyState",
    "PenaltyInfo",
    "init",
    "log_acceptance",
    "build_kernel",
    "penalty",
    "RELEASED_STATS",
    "NONPRIVATE_STATS",
]

RELEASED_STATS = ("acceptance_rate", "is_accepted", "noise_sd", "step_size")
"""Sample statistics released by default (post-processing or data-independent)."""
NONPRIVATE_STATS = ("clip_fraction",)
"""Computed from raw data without noise: released only with ``release_clip_fraction=True``."""


class PenaltyState(NamedTuple):
    """State of a penalty chain: nothing derived from the data.

    The per-row log-likelihoods at ``position`` stay with the density (its
    point cache, :class:`stan_dp.aggregates.PointCache`), next to the rows.
    """

    position: np.ndarray
    log_prior: float
    aux: np.ndarray


class PenaltyInfo(NamedTuple):
    """Per-iteration information."""

    acceptance_rate: float
    """``min(1, exp(lambda_hat - sigma_total^2 / 2))`` from the released ratio."""
    is_accepted: bool
    noise_sd: float
    """Total noise sd of ``lambda_hat`` (``sqrt(K) sigma`` with K owners)."""
    step_size: float
    """Nominal step size of the move."""
    clip_fraction: float
    """Fraction of rows whose ratio was clipped (NOT privatised)."""


def init(density: RowDensity, position: np.ndarray, aux: np.ndarray | None = None) -> PenaltyState:
    """Initial state at a data-independent ``position`` (touches no data).

    Parameters
    ----------
    density : RowDensity
        The model.
    position : ndarray (dim,)
        Unconstrained starting point.
    aux : ndarray, optional
        Proposal auxiliary state (guided-walk directions).
    """
    theta = np.array(position, dtype=float)
    return PenaltyState(
        theta,
        float(density.log_prior(theta)),
        np.empty(0) if aux is None else np.asarray(aux, dtype=float),
    )


_init = init


def log_acceptance(lambda_hat: float, variance: float, correction: bool = True) -> float:
    """Log acceptance probability of the penalty test.

    ``min(0, lambda_hat - variance / 2)``; with ``correction=False`` the
    penalty term is dropped (the biased noisy Metropolis test — for tests and
    demonstrations only).  NaN gives ``-inf`` (reject).
    """
    value = lambda_hat - 0.5 * variance if correction else lambda_hat
    if np.isnan(value):
        return -np.inf
    return min(0.0, float(value))


def _owner_index(
    owners: Sequence[Any] | np.ndarray | None, n_rows: int,
    public_owners: Sequence[Any] | np.ndarray | None = None,
) -> tuple[np.ndarray, list[str]]:
    """Each row's owner index and the owner labels (sorted).

    Parameters
    ----------
    owners : array of length n_rows, optional
        Owner label of each row.
    n_rows : int
        Number of rows (not quoted in messages: private under add/remove).
    public_owners : sequence, optional
        Every owner label, declared public.  Given, the labels (and their
        number, the number of noise terms) are these, whether or not an owner
        holds any rows; otherwise they are the labels present in ``owners``,
        which depend on the rows.

    Raises
    ------
    ValueError
        If ``owners`` is not one label per row, ``public_owners`` is empty or
        repeats a label, or a row's label is not in ``public_owners`` (the
        message names neither the row nor the label).
    """
    if owners is None:
        if public_owners is not None:
            raise ValueError("public_owners is given without owners=")
        return np.zeros(n_rows, dtype=np.intp), []
    labels = np.asarray(owners)
    if labels.ndim != 1 or labels.shape[0] != n_rows:
        raise ValueError("owners must be a 1-D array with one label per row (length n_rows)")
    if public_owners is None:
        uniq, index = np.unique(labels, return_inverse=True)
        return index.astype(np.intp), [str(u) for u in uniq]
    declared = np.asarray(public_owners)
    if declared.ndim != 1 or declared.size == 0:
        raise ValueError("public_owners must be a non-empty 1-D sequence of owner labels")
    uniq = np.unique(declared)
    if uniq.size != declared.size:
        raise ValueError("public_owners must not repeat a label")
    lookup = {u.item(): k for k, u in enumerate(uniq)}
    present, inverse = np.unique(labels, return_inverse=True)
    where = [lookup.get(u.item()) for u in present]
    if any(k is None for k in where):
        raise ValueError("owners contains a label that is not in public_owners; declare every owner")
    index = np.asarray(where, dtype=np.intp)[inverse.reshape(-1)] if where else np.zeros(0, np.intp)
    return index, [str(u) for u in uniq]


def _owners(density: Any, owners: Sequence[Any] | np.ndarray | None,
            public_owners: Sequence[Any] | np.ndarray | None) -> tuple[np.ndarray | None, list[str]]:
    """Each row's owner index and the owner labels, as :func:`_owner_index`.

    A model whose owners add their own noise (``owner_noise``, seed 000's
    Algorithm 2 with the rows held by the owners) has its shards as owners:
    its public ``owner_labels``, and no per-row index (its rows are not here).
    """
    if getattr(density, "owner_noise", False):
        if owners is not None or public_owners is not None:
            raise ValueError("this model's owners are its shards (owner_labels); do not pass owners=")
        return None, list(density.owner_labels)
    return _owner_index(owners, int(density.n_rows), public_owners)


def _decide(
    rng_prop: np.random.Generator, state: PenaltyState, move: Move, proposal: Proposal,
    log_a: float, new_state: Callable[[], PenaltyState],
) -> tuple[PenaltyState, bool]:
    accepted = bool(np.log(rng_prop.random()) < log_a)
    aux = proposal.update_aux(state.aux, move, accepted)
    if accepted:
        return new_state()._replace(aux=aux), True
    return state._replace(aux=aux), False


def build_kernel(
    density: RowDensity,
    proposal: Proposal,
    *,
    clip: float,
    noise_multiplier: float,
    temperature: float = 1.0,
    relation: str = "replace_one",
    owners: Sequence[Any] | np.ndarray | None = None,
    noise_sd: float | None = None,
    correction: bool = True,
    public_owners: Sequence[Any] | np.ndarray | None = None,
):
    """Build the penalty kernel.

    Parameters
    ----------
    density : RowDensity
        The model.
    proposal : Proposal
        From :func:`stan_dp.samplers.proposals.make_proposal`.
    clip : float
        ``L``: per-row ratios are clipped to ``±L ||theta' - theta||``.  May be
        ``inf`` only together with ``noise_sd`` (non-private use).
    noise_multiplier : float
        ``z``; the noise sd is ``z * k * T * L * ||theta' - theta||``.
    temperature : float
        Tempering factor ``T`` (1 = the posterior).
    relation : {"replace_one", "add_remove"}
        Neighbouring relation (sets ``k``).
    owners : array of length n_rows, optional
        Owner label of each row (Algorithm 2).
    noise_sd : float, optional
        Fixed per-owner noise sd overriding the calibrated one — for testing
        the kernel at a given noise level; a run with it is not private unless
        ``noise_sd`` happens to match the calibrated value.
    correction : bool
        Keep the penalty term (``False`` only to show that it matters).
    public_owners : sequence, optional
        Every owner label, declared public: one noise term per declared
        owner, whether it holds rows or not (see :func:`penalty`).

    Returns
    -------
    callable
        ``kernel(rng_prop, rng_noise, state) -> (PenaltyState, PenaltyInfo)``.
    """
    if not clip > 0 or (np.isinf(clip) and noise_sd is None):
        raise ValueError(f"clip must be positive (and finite unless noise_sd is fixed), got {clip!r}")
    owner_noise = bool(getattr(density, "owner_noise", False))
    owner_index, labels = _owners(density, owners, public_owners)
    n_owners = max(1, len(labels))
    factor = sensitivity_factor(relation)
    n_rows = int(density.n_rows)
    q = queries(density)

    def kernel(
        rng_prop: np.random.Generator, rng_noise: np.random.Generator, state: PenaltyState
    ) -> tuple[PenaltyState, PenaltyInfo]:
        move = proposal.propose(rng_prop, state.position, state.aux)
        bound = clip * move.norm
        sd = noise_sd if noise_sd is not None else noise_multiplier * factor * temperature * bound
        variance = n_owners * sd * sd
        total_sd = float(np.sqrt(variance))
        log_prior_new = float(density.log_prior(move.position))
        if not np.isfinite(log_prior_new):
            # Data-independent rejection: no data access, no release needed.
            new, _ = _decide(rng_prop, state, move, proposal, -np.inf, lambda: state)
            return new, PenaltyInfo(0.0, False, total_sd, move.step, 0.0)

        if owner_noise:
            # Multi-owner placement: each owner adds its own noise before its sum
            # leaves it; only the K noised sums reach this process.
            released = q.release_owner_ratio_sums(rng_noise, move.position, state.position, bound,
                                                  sd, temperature=temperature)
            n_clipped = 0
        else:
            # Clipped sums computed where the rows live (stan_dp.aggregates); no
            # floating-point warning may depend on the rows, and none is raised
            # there (a row at -inf at both points counts -bound).
            sums = q.clipped_ratio_sums(move.position, state.position, bound,
                                        groups=owner_index if n_owners > 1 else None,
                                        n_groups=n_owners)
            n_clipped = sums.n_clipped
            with np.errstate(all="ignore"):
                values = temperature * sums.totals
            released = gaussian_release(rng_noise, values, sd)   # the only data release
        lambda_hat = float(np.sum(released)) + (log_prior_new - state.log_prior) + move.log_q_ratio
        log_a = log_acceptance(lambda_hat, variance, correction)
        new, accepted = _decide(
            rng_prop, state, move, proposal, log_a,
            lambda: PenaltyState(move.position, log_prior_new, state.aux),
        )
        info = PenaltyInfo(float(np.exp(log_a)), accepted, total_sd, move.step,
                           n_clipped / n_rows if not owner_noise else float("nan"))
        return new, info

    return kernel


def penalty(
    model: RowDensity,
    *,
    epsilon: float,
    delta: float,
    iterations: int | None = None,
    noise: float | None = None,
    clip: float | None = None,
    step_size: float | Sequence[float] | np.ndarray | None = None,
    proposal: str = "gaussian",
    temperature: float = 1.0,
    chains: int = 4,
    warmup: int = 0,
    init: Any = None,
    seed: int | np.random.SeedSequence | None = None,
    relation: str = "replace_one",
    progress: bool = True,
    owners: Sequence[Any] | np.ndarray | None = None,
    public_owners: Sequence[Any] | np.ndarray | None = None,
    release_clip_fraction: bool = False,
):
    """Differentially private penalty MCMC.

    Parameters
    ----------
    model : RowDensity
        E.g. a :class:`stan_dp.RowModel`.
    epsilon, delta : float
        Privacy budget of the whole run: all chains, warm-up included.
    iterations : int, optional
        Post-warm-up draws per chain.  Total releases are
        ``chains * (warmup + iterations)``.
    noise : float, optional
        Noise multiplier ``z`` (noise sd / sensitivity).  Given ``iterations``
        only, ``z`` is calibrated; given ``noise`` only, the largest
        ``iterations`` that fits is used; given both, the run must fit or is
        refused; given neither, ``iterations = 2000`` with calibrated noise.
    clip : float, optional
        ``L``: each row's log-likelihood ratio is clipped to
        ``±L ||theta' - theta||`` (unconstrained space).
    step_size : float or array (dim,), optional
        Proposal scale(s) in unconstrained space.  Leave out both ``clip``
        and ``step_size`` and the run goes through :func:`stan_dp.sample`'s
        private adaptation (half the budget), which sets them in posterior
        units from public facts (``stan_dp.auto``); give both for the seed's
        algorithm exactly as written.
    proposal : {"gaussian", "component", "guided"}
        Random walk, one coordinate per iteration, or guided walk.
    temperature : float
        Tempering factor ``T`` (likelihood to the power ``T``).
    chains, warmup : int
        Chains (run sequentially) and warm-up (burn-in, no adaptation)
        iterations per chain.
    init : None, array or dict
        ``None``: uniform(-2, 2) per coordinate in unconstrained space, drawn
        from each chain's proposal stream.  An array of size ``dim`` (or
        ``(chains, dim)``), or a dict of constrained values if the model has
        ``unconstrain``.  Must not depend on the data.
    seed : int, SeedSequence or None
        ``None`` draws fresh OS entropy.  A fixed seed makes the run
        reproducible (``attrs["seeded"] = 1``) — do not publish such a run.
    relation : {"replace_one", "add_remove"}
        Neighbouring relation.
    progress : bool
        Show a progress bar.
    owners : array of length n_rows, optional
        Data owner of each row (Yıldırım, Alg. 2): each owner's clipped sum
        is released with its own noise.  The owner labels present in the
        rows determine the number of noise terms (hence ``noise_sd``) and
        ``attrs["owners"]``; under ``relation="add_remove"`` removing an
        owner's only row would change them, so there ``public_owners`` is
        required.
    public_owners : sequence, optional
        Every owner label, declared public (chosen without looking at which
        owners hold rows): one noise term per declared owner, rows or not;
        every label in ``owners`` must be one of them.  Required with
        ``owners`` under add/remove; optional under replace-one.
    release_clip_fraction : bool
        Also return ``clip_fraction`` in ``sample_stats``.  It is computed
        from the raw data WITHOUT noise: the output is then not DP
        (a :class:`~stan_dp.inference.PrivacyWarning` is issued and
        ``attrs["nonprivate_outputs"]`` says so).

    Returns
    -------
    arviz.InferenceData
        ``posterior`` (constrained names and shapes), ``sample_stats``
        (``acceptance_rate``, ``is_accepted``, ``noise_sd``, ``step_size``),
        warm-up groups if ``warmup > 0``, privacy facts in ``attrs``.

    Raises
    ------
    TypeError, ValueError
        For invalid arguments, or ``owners`` without ``public_owners`` under
        add/remove — before any data is touched.
    stan_dp.accounting.PrivacyBudgetError
        If the run does not fit the budget — before any data is touched.
    """
    if clip is None or step_size is None:
        return _automatic("penalty", model, epsilon=epsilon, delta=delta, iterations=iterations,
                          chains=chains, warmup=warmup, init=init, seed=seed, relation=relation,
                          progress=progress, given=locals(), knobs=("clip", "step_size"),
                          free={"noise": None, "proposal": "gaussian", "temperature": 1.0,
                                "owners": None, "public_owners": None,
                                "release_clip_fraction": False})
    check_row_density(model, relation=relation, owners_ok=True)
    validate_run_args(epsilon=epsilon, delta=delta, iterations=iterations, noise=noise,
                      chains=chains, warmup=warmup, relation=relation, seed=seed)
    clip = _validate_positive("clip", clip)
    temperature = _validate_positive("temperature", temperature)
    prop = make_proposal(proposal, step_size, int(model.dim))
    if relation == "add_remove" and owners is not None and public_owners is None:
        raise ValueError(
            "under relation='add_remove' the owners present in the rows are private: removing an "
            "owner's only row would change the number of noise terms (and noise_sd) and the "
            "owners reported; pass public_owners=, every owner label declared public, or use "
            "relation='replace_one'")
    _, labels = _owners(model, owners, public_owners)
    if getattr(model, "owner_noise", False) and release_clip_fraction:
        raise ValueError("release_clip_fraction is not available when the owners add the noise: "
                         "they report nothing un-noised")
    user_init = resolve_init(model, init, chains)
    if not isinstance(release_clip_fraction, (bool, np.bool_)):
        raise ValueError("release_clip_fraction must be a bool")

    def init_state(rng: np.random.Generator, chain: int) -> PenaltyState:
        position = initial_position(rng, model, user_init, chain)
        return _init(model, position, prop.init_aux(rng))

    def make_kernel(z: float):
        return build_kernel(model, prop, clip=clip, noise_multiplier=z, temperature=temperature,
                            relation=relation, owners=owners, public_owners=public_owners)

    steps = np.broadcast_to(np.asarray(step_size, dtype=float), (int(model.dim),))
    run_attrs: dict[str, Any] = {
        "clip": clip,
        "temperature": temperature,
        "proposal": proposal,
        "step_size": steps.tolist(),
        "init": "user" if user_init is not None else "uniform(-2, 2) unconstrained",
    }

    attrs_for = None
    if labels:
        run_attrs["owners"] = labels

        def attrs_for(resolved: Any) -> dict[str, Any]:
            # Each row enters exactly one owner's release per iteration, so each
            # owner's data is protected by its own Gaussian mechanism with
            # multiplier z: every owner gets the full (epsilon_spent, delta).
            k = len(labels)
            return {
                "owner_noise_multiplier": [resolved.noise_multiplier] * k,
                "owner_epsilon": [resolved.epsilon_spent] * k,
                "owner_delta": [float(delta)] * k,
                "owner_privacy": "each owner's rows: the run's (epsilon_spent, delta); "
                                 "noise variance of lambda_hat is n_owners * sigma^2",
            }

    spec = SamplerSpec(
        name="penalty" if not labels else "penalty_multi_owner",
        plan=lambda z: [Release(z)],
        build_kernel=make_kernel,
        init_state=init_state,
        position=lambda s: s.position,
        stats=RELEASED_STATS,
        nonprivate_stats=NONPRIVATE_STATS,
        attrs_for=attrs_for,
    )
    return run(
        spec, model, epsilon=epsilon, delta=delta, iterations=iterations, noise=noise,
        chains=chains, warmup=warmup, seed=seed, relation=relation, progress=progress,
        release_nonprivate=("clip_fraction",) if release_clip_fraction else (),
        run_attrs=run_attrs,
    )


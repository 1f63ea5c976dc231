r"""The subsampled DP penalty algorithm (seed 003, Section 4.1, Lemma 1, Theorem 9).

At ``theta`` with a data-independent proposal ``theta'`` (``h = ||theta' - theta||``):

* draw a batch ``B`` of ``b`` rows without replacement (secret, noise stream);
* per-row ratios ``r_j`` on the batch only, clipped to ``±L h``, tempered
  ``x_j = T clip(r_j)``;
* ``lambda* = (n/b) sum_B x_j`` and its subsampling-variance estimate
  ``sigma_b^2`` (:func:`stan_dp.samplers.minibatch.batch_estimate`);
* release ``D = lambda* - sigma_b^2 / 2 + N(0, sigma^2)`` with
  ``sigma = z c(h)`` and ``c(h) = Delta_lambda + (1 - b/n) Delta_sigma`` the
  replace-one sensitivity of ``lambda* - sigma_b^2/2`` (Lemma 1, Theorem 9;
  the factor ``1 - b/n`` is the finite-population correction carried by
  ``sigma_b^2``);
* accept with ``min(1, exp(D + log prior ratio + log q ratio - sigma^2/2))``,
  i.e. seed 003's ``min(1, exp(lambda* + N(0, sigma^2) - (sigma^2 + sigma_b^2)/2))``.

Privacy: each iteration is a Gaussian mechanism with multiplier ``z`` on a
batch drawn without replacement, accounted by RDP with the WBK amplification
(``Release(z, batch_size=b, n=n)``; Theorem 9's ``tau = z^2``), composed over
all iterations and chains.  Replace-one neighbours only.

Exactness: at ``b = n`` (``sigma_b^2 = 0``) this is the penalty algorithm with
the same noise.  For ``b < n`` it relies on the central limit theorem for the
subsampling error (seed 003, Section 4.1), so it is approximate.

``sigma_b^2`` and the clip count are computed from raw data without noise;
they are *not* released (only on explicit opt-in, which makes the output
non-private).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import numpy as np

from stan_dp.accounting import Release
from stan_dp.accounting.bounds import subsampled_penalty_sensitivity_terms
from stan_dp.density import RowDensity, check_row_density
from stan_dp.inference import (
    SamplerSpec,
    initial_position,
    resolve_init,
    run,
    validate_positive,
    validate_run_args,
)
from stan_dp.aggregates import queries
from stan_dp.mechanisms import gaussian_release
from stan_dp.samplers import minibatch as mb
from stan_dp.samplers.automatic import automatic as _automatic
from stan_dp.samplers.penalty import _decide, log_acceptance
from stan_dp.samplers.proposals import Proposal, make_proposal

__all__ = [
    "SubsampledInfo",
    "sensitivity_coefficients",
    "build_kernel",
    "subsampled_penalty",
    "RELEASED_STATS",
    "NONPRIVATE_STATS",
]

RELEASED_STATS = ("acceptance_rate", "is_accepted", "noise_sd", "step_size")
"""Released by default: post-processing of the release, or data-independent."""
NONPRIVATE_STATS = ("clip_fraction", "batch_variance")
"""Raw-data statistics of the batch, released only on opt-in (``release_nonprivate``)."""

ADD_REMOVE_REFUSAL = (
    "subsampled_penalty supports relation='replace_one' only: its sensitivity (seed 003, "
    "Lemma 1 and Theorem 9) and the amplification by sampling without replacement are proven for "
    "replace-one neighbours, and the estimate's scale n/b, the batch fraction b/n, the tempering "
    "n0/n and the accounting all use the row count n, which is private under add/remove; use "
    "relation='replace_one' (n public), or penalty/hmc for add/remove")
"""Why :func:`subsampled_penalty` refuses ``relation="add_remove"``."""


class SubsampledInfo(NamedTuple):
    """Per-iteration information."""

    acceptance_rate: float
    """``min(1, exp(lambda_hat - sigma^2/2))`` from the released value."""
    is_accepted: bool
    noise_sd: float
    """``sigma = z c(h)``: data-independent."""
    step_size: float
    clip_fraction: float
    """Fraction of batch rows clipped (NOT privatised)."""
    batch_variance: float
    """``sigma_b^2`` (NOT privatised)."""


def sensitivity_coefficients(n_rows: int, batch_size: int, temperature: float, clip: float) -> tuple[float, float]:
    """``(a1, a2)`` with ``c(h) = a1 h + a2 h^2`` the sensitivity of ``lambda* - sigma_b^2/2``.

    ``a1 h = Delta_lambda`` and ``a2 h^2 = (1 - b/n) Delta_sigma`` from
    :func:`stan_dp.accounting.bounds.subsampled_penalty_sensitivity_terms`
    (seed 003, Lemma 1 and Theorem 9).
    """
    d_lambda, d_sigma = subsampled_penalty_sensitivity_terms(n_rows, batch_size, temperature, clip, 1.0)
    return d_lambda, (1.0 - batch_size / n_rows) * d_sigma


def build_kernel(
    density: RowDensity,
    proposal: Proposal,
    *,
    batch_size: int,
    clip: float,
    noise_multiplier: float,
    temperature: float = 1.0,
    noise_sd: float | None = None,
):
    """Build the subsampled-penalty kernel.

    Parameters
    ----------
    density : RowDensity
        The model; only ``row_log_lik(theta, rows=batch)`` is called on data.
    proposal : Proposal
        From :func:`stan_dp.samplers.proposals.make_proposal`.
    batch_size : int
        ``b``, ``2 <= b <= n``.
    clip : float
        ``L``: ratios are clipped to ``±L h``.
    noise_multiplier : float
        ``z``; the noise sd is ``z c(h)``.
    temperature : float
        ``T``.
    noise_sd : float, optional
        Fixed noise sd overriding ``z c(h)`` (tests only; not private unless it
        matches).

    Returns
    -------
    callable
        ``kernel(rng_prop, rng_noise, state) -> (MinibatchState, SubsampledInfo)``.
    """
    n_rows = int(density.n_rows)
    b = mb.validate_batch_size(batch_size, n_rows)
    a1, a2 = sensitivity_coefficients(n_rows, b, temperature, clip)
    q = queries(density)

    def kernel(rng_prop: np.random.Generator, rng_noise: np.random.Generator,
               state: mb.MinibatchState) -> tuple[mb.MinibatchState, SubsampledInfo]:
        move = proposal.propose(rng_prop, state.position, state.aux)
        h = move.norm
        sd = noise_sd if noise_sd is not None else noise_multiplier * (a1 * h + a2 * h * h)
        log_prior_new = float(density.log_prior(move.position))
        if not np.isfinite(log_prior_new):
            new, _ = _decide(rng_prop, state, move, proposal, -np.inf, lambda: state)
            return new, SubsampledInfo(0.0, False, sd, move.step, 0.0, 0.0)

        rows = mb.draw_batch(rng_noise, n_rows, b)
        # The batch's clipped, tempered ratios are summed where the rows live
        # (stan_dp.aggregates); nothing there raises a floating-point warning
        # (a row at -inf at both points counts -bound).
        sums = q.clipped_ratio_sums(move.position, state.position, clip * h,
                                    post_scale=temperature, rows=rows)
        n_clipped = sums.n_clipped
        with np.errstate(all="ignore"):
            estimate, batch_var = mb.batch_estimate(sums, n_rows)
        released = gaussian_release(rng_noise, estimate - 0.5 * batch_var, sd)  # the only data release
        lambda_hat = released + (log_prior_new - state.log_prior) + move.log_q_ratio
        log_a = log_acceptance(lambda_hat, sd * sd)
        new, accepted = _decide(rng_prop, state, move, proposal, log_a,
                                lambda: mb.MinibatchState(move.position, log_prior_new, state.aux))
        return new, SubsampledInfo(float(np.exp(log_a)), accepted, sd, move.step, n_clipped / b, batch_var)

    return kernel


def subsampled_penalty(
    model: RowDensity,
    *,
    epsilon: float,
    delta: float,
    batch_size: int | None = None,
    iterations: int | None = None,
    noise: float | None = None,
    clip: float | None = None,
    step_size: float | Sequence[float] | np.ndarray | None = None,
    proposal: str = "gaussian",
    temperature: float = 1.0,
    n0: float | None = None,
    chains: int = 4,
    warmup: int = 0,
    init: Any = None,
    seed: int | np.random.SeedSequence | None = None,
    progress: bool = True,
    release_nonprivate: Sequence[str] = (),
    relation: str = "replace_one",
):
    """Differentially private penalty MCMC on minibatches (seed 003, Section 4.1, Theorem 9).

    Parameters
    ----------
    model : RowDensity
        E.g. a :class:`stan_dp.RowModel`.  Each iteration evaluates ``2 b``
        row log-likelihoods, whatever ``n``.
    epsilon, delta : float
        Budget of the whole run (all chains, warm-up included), replace-one
        neighbours.
    batch_size : int, optional
        ``b``, ``2 <= b <= n``: rows drawn without replacement per iteration.
    iterations : int, optional
        Post-warm-up draws per chain.
    noise : float, optional
        Noise multiplier ``z``.  As in :func:`stan_dp.penalty`: ``iterations``
        only calibrates ``z``; ``noise`` only runs the most iterations that
        fit; both must fit; neither means 2000 iterations.
    clip : float, optional
        ``L``: per-row ratios are clipped to ``±L ||theta' - theta||``.
    step_size : float or array (dim,), optional
        Proposal scale(s), unconstrained space.
        Leave out all of the hand-set knobs (``batch_size``, ``step_size``, ``clip``)
        and the run goes through :func:`stan_dp.sample`'s private adaptation
        (half the budget), which sets them from public facts.
    proposal : {"gaussian", "component", "guided"}
        See :func:`stan_dp.penalty`.
    temperature : float
        Tempering factor ``T``.
    n0 : float, optional
        Convenience: ``T = n0 / n`` (``0 < n0 <= n``), which keeps the noise
        independent of ``n`` (seed 003, end of Section 4.1).  Not together
        with ``temperature``.
    chains, warmup, init, seed, progress
        As in :func:`stan_dp.penalty`.
    release_nonprivate : sequence of str
        Any of ``"clip_fraction"``, ``"batch_variance"``: raw-data diagnostics
        added to ``sample_stats`` WITHOUT privacy (a
        :class:`~stan_dp.inference.PrivacyWarning` is issued).
    relation : {"replace_one"}
        Replace-one only; ``"add_remove"`` is refused before any data is
        touched (see :data:`ADD_REMOVE_REFUSAL`).

    Returns
    -------
    arviz.InferenceData
        ``posterior``; ``sample_stats`` with ``acceptance_rate``,
        ``is_accepted``, ``noise_sd``, ``step_size``; ``attrs`` with the
        privacy facts plus ``batch_size``, ``n_rows``, ``temperature``,
        ``clip``, ``sensitivity``.

    Raises
    ------
    TypeError, ValueError
        For invalid arguments (``batch_size`` outside ``[2, n]``, …) — before
        any data is touched.
    stan_dp.accounting.PrivacyBudgetError
        If the run does not fit the budget — before any data is touched.
    """
    if batch_size is None or clip is None or step_size is None:
        return _automatic("subsampled_penalty", model, epsilon=epsilon, delta=delta,
                          iterations=iterations, chains=chains, warmup=warmup, init=init, seed=seed,
                          relation=relation, progress=progress, given=locals(),
                          knobs=("batch_size", "clip", "step_size"),
                          free={"noise": None, "proposal": "gaussian", "temperature": 1.0, "n0": None,
                                "release_nonprivate": ()})
    check_row_density(model, relation=relation)
    validate_run_args(epsilon=epsilon, delta=delta, iterations=iterations, noise=noise,
                      chains=chains, warmup=warmup, relation=relation, seed=seed)
    if relation != "replace_one":
        raise ValueError(ADD_REMOVE_REFUSAL)
    n_rows = int(model.n_rows)
    b = mb.validate_batch_size(batch_size, n_rows)
    clip = validate_positive("clip", clip)
    temperature = mb.resolve_temperature(temperature, n0, n_rows)
    prop = make_proposal(proposal, step_size, int(model.dim))
    user_init = resolve_init(model, init, chains)
    release = tuple(release_nonprivate)
    a1, a2 = sensitivity_coefficients(n_rows, b, temperature, clip)

    def init_state(rng: np.random.Generator, chain: int) -> mb.MinibatchState:
        return mb.init(model, initial_position(rng, model, user_init, chain), prop.init_aux(rng))

    spec = SamplerSpec(
        name="subsampled_penalty",
        plan=lambda z: [Release(z, batch_size=b, n=n_rows)],
        build_kernel=lambda z: build_kernel(model, prop, batch_size=b, clip=clip,
                                            noise_multiplier=z, temperature=temperature),
        init_state=init_state,
        position=lambda s: s.position,
        stats=RELEASED_STATS,
        nonprivate_stats=NONPRIVATE_STATS,
    )
    steps = np.broadcast_to(np.asarray(step_size, dtype=float), (int(model.dim),))
    run_attrs: dict[str, Any] = {
        "batch_size": b,
        "sampling": "without replacement",
        "clip": clip,
        "temperature": temperature,
        "n0": temperature * n_rows,
        "sensitivity": f"{a1!r} * h + {a2!r} * h^2 (Lemma 1 / Thm 9, h = |theta' - theta|)",
        "proposal": proposal,
        "step_size": steps.tolist(),
        "init": "user" if user_init is not None else "uniform(-2, 2) unconstrained",
    }
    return run(spec, model, epsilon=epsilon, delta=delta, iterations=iterations, noise=noise,
               chains=chains, warmup=warmup, seed=seed, relation="replace_one", progress=progress,
               release_nonprivate=release, run_attrs=run_attrs)

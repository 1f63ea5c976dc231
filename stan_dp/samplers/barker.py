r"""DP Barker (seed 003, Section 3.2, Algorithm 2, Theorem 8; Heikkilä et al. 2019).

At ``theta`` with a data-independent proposal ``theta'``:

* draw a batch ``B`` of ``b`` rows without replacement (secret, noise stream);
* per-row ratios ``r_j`` on the batch only, tempered and clipped as Theorem 8
  requires: ``x_j = clip(T r_j, ±sqrt(b)/n)`` — the bound follows from ``b``,
  ``n`` (and ``T``), not from the user (``|r_j| <= sqrt(b)/n0`` with ``T = n0/n``);
* ``lambda = (n/b) sum_B x_j`` and its subsampling-variance estimate
  ``sigma_b^2`` (:func:`stan_dp.samplers.minibatch.batch_estimate`), which
  the clip keeps in ``[0, 1]``;
* release ``lambda_tilde = lambda + N(0, C - sigma_b^2) + log prior ratio +
  log q ratio`` (the only data release);
* accept iff ``lambda_tilde + V_corr > 0`` with ``V_corr`` from
  :mod:`stan_dp.samplers.barker_correction`: the total noise
  ``N(0, sigma_b^2)`` (subsampling error, by the CLT) ``+ N(0, C - sigma_b^2)
  + V_corr`` is approximately Logistic(0, 1), which makes this the Barker
  test ``lambda + V_log > 0`` for the (tempered) posterior.

Privacy: seed 003, Theorem 8 (stated for ``C = 2``; the same proof for other
``1 < C < pi^2/3``, see :func:`stan_dp.accounting.bounds.barker_base_rdp_epsilon`
— the default ``C = 1.6`` relies on that extension, which the tests check
against the exact Rényi divergence of the two Gaussians a step releases),
composed over all iterations and chains through
:func:`stan_dp.accounting.curve.barker_step_rdp`.  There is no noise
multiplier: the number of iterations follows from ``(epsilon, delta)``, ``b``
and ``n``.  Replace-one neighbours only.

Noise: the batch, the test noise ``N(0, C - sigma_b^2)`` and ``V_corr`` all
come from the chain's noise stream; in a ``seed=None`` run that is a
:class:`~stan_dp.secure_noise.SecureNoise` (OS CSPRNG; exact discrete Gaussian
test noise on a grid fixed by ``sqrt(C - (1 - b/n))``, which is
data-independent, since the sd itself depends on the batch; see
``docs/noise.md``).

Batch variance above ``C``: impossible here.  The clip bounds every ``x_j``
by ``sqrt(b)/n``, so ``sigma_b^2 <= (1 - b/n) <= 1 < C``; that is what
Theorem 8's proof uses.  The kernel still checks it and, if it ever failed
(it cannot, short of a bug), would reject the move without releasing
anything and count it in ``sample_stats["variance_exceeded"]``.  Since the
count is provably always 0, releasing it leaks nothing.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Sequence

import numpy as np

from stan_dp.accounting.bounds import barker_clip_bound
from stan_dp.accounting.curve import barker_step_rdp
from stan_dp.density import RowDensity, check_row_density
from stan_dp.inference import SamplerSpec, initial_position, resolve_init, run, validate_run_args
from stan_dp.aggregates import queries
from stan_dp.mechanisms import gaussian_release
from stan_dp.samplers import minibatch as mb
from stan_dp.samplers.automatic import automatic as _automatic
from stan_dp.samplers.barker_correction import (
    DEFAULT_CORRECTION_VARIANCE,
    CorrectionDistribution,
    correction_distribution,
)
from stan_dp.samplers.proposals import Proposal, make_proposal
from stan_dp.secure_noise import default_grid_exponent

__all__ = [
    "BarkerInfo",
    "build_kernel",
    "barker",
    "RELEASED_STATS",
    "NONPRIVATE_STATS",
]

RELEASED_STATS = ("acceptance_rate", "is_accepted", "step_size", "variance_exceeded")
"""Released by default (post-processing of the release, or data-independent)."""
NONPRIVATE_STATS = ("clip_fraction", "batch_variance")
"""Raw-data statistics of the batch, released only on opt-in (``release_nonprivate``)."""

ADD_REMOVE_REFUSAL = (
    "barker supports relation='replace_one' only: Theorem 8 (seed 003) is proven for replace-one "
    "neighbours, and the clip sqrt(b)/n, the test noise, the tempering n0/n and the RDP curve "
    "all use the row count n, which is private under add/remove; use relation='replace_one' "
    "(n public), or penalty/hmc for add/remove")
"""Why :func:`barker` refuses ``relation="add_remove"``."""


class BarkerInfo(NamedTuple):
    """Per-iteration information."""

    acceptance_rate: float
    """``P(V_corr > -lambda_tilde)``: the acceptance probability given the release."""
    is_accepted: bool
    step_size: float
    variance_exceeded: bool
    """``sigma_b^2 >= C`` (provably never; see the module docstring)."""
    clip_fraction: float
    """Fraction of batch rows clipped (NOT privatised)."""
    batch_variance: float
    """``sigma_b^2`` (NOT privatised)."""


def build_kernel(
    density: RowDensity,
    proposal: Proposal,
    *,
    batch_size: int,
    temperature: float = 1.0,
    correction: CorrectionDistribution | None = None,
):
    """Build the DP Barker kernel.

    Parameters
    ----------
    density : RowDensity
        The model; only ``row_log_lik(theta, rows=batch)`` is called on data.
    proposal : Proposal
        From :func:`stan_dp.samplers.proposals.make_proposal`.
    batch_size : int
        ``b``, ``2 <= b <= n``.
    temperature : float
        ``T``.
    correction : CorrectionDistribution, optional
        ``V_corr`` (default: ``C = DEFAULT_CORRECTION_VARIANCE = 1.6``).

    Returns
    -------
    callable
        ``kernel(rng_prop, rng_noise, state) -> (MinibatchState, BarkerInfo)``.
    """
    n_rows = int(density.n_rows)
    b = mb.validate_batch_size(batch_size, n_rows)
    corr = correction if correction is not None else correction_distribution(DEFAULT_CORRECTION_VARIANCE)
    total_variance = corr.variance
    bound = barker_clip_bound(b, n_rows)  # on T * r_j (seed 003, Theorem 8)
    q = queries(density)
    # The test-noise sd sqrt(C - sigma_b^2) depends on the batch, so the secure
    # path's grid must not follow it: it is fixed by the data-independent lower
    # bound sqrt(C - (1 - b/n)) (sigma_b^2 <= 1 - b/n, see the module docstring),
    # halved for a margin against rounding in sigma_b^2.  (C <= 1, refused by
    # barker(), leaves no such bound: the grid then follows the sd.)
    lowest_variance = total_variance - (1.0 - b / n_rows)
    grid_exponent = (default_grid_exponent(0.5 * math.sqrt(lowest_variance))
                     if lowest_variance > 0.0 else None)

    def decide(state: mb.MinibatchState, move: Any, accepted: bool, new_state) -> mb.MinibatchState:
        aux = proposal.update_aux(state.aux, move, accepted)
        return (new_state() if accepted else state)._replace(aux=aux)

    def kernel(rng_prop: np.random.Generator, rng_noise: np.random.Generator,
               state: mb.MinibatchState) -> tuple[mb.MinibatchState, BarkerInfo]:
        move = proposal.propose(rng_prop, state.position, state.aux)
        log_prior_new = float(density.log_prior(move.position))
        if not np.isfinite(log_prior_new):
            # Data-independent rejection: no data access, no release.
            return decide(state, move, False, None), BarkerInfo(0.0, False, move.step, False, 0.0, 0.0)

        rows = mb.draw_batch(rng_noise, n_rows, b)
        # Tempered, then clipped, and summed where the rows live (stan_dp.aggregates);
        # nothing there raises a floating-point warning (a row at -inf at both
        # points counts -bound, huge finite values are clipped silently).
        sums = q.clipped_ratio_sums(move.position, state.position, bound,
                                    pre_scale=temperature, rows=rows)
        n_clipped = sums.n_clipped
        estimate, batch_var = mb.batch_estimate(sums, n_rows)
        variance = total_variance - batch_var
        if not variance > 0.0:  # pragma: no cover - impossible: batch_var <= 1 < C
            return (decide(state, move, False, None),
                    BarkerInfo(0.0, False, move.step, True, n_clipped / b, batch_var))
        released = gaussian_release(rng_noise, estimate, math.sqrt(variance),  # the only data release
                                    grid_exponent=grid_exponent)
        lambda_tilde = released + (log_prior_new - state.log_prior) + move.log_q_ratio
        accepted = bool(lambda_tilde + corr.sample(rng_noise) > 0.0)
        new = decide(state, move, accepted,
                     lambda: mb.MinibatchState(move.position, log_prior_new, state.aux))
        info = BarkerInfo(corr.prob_greater(-lambda_tilde), accepted, move.step, False,
                          n_clipped / b, batch_var)
        return new, info

    return kernel


def barker(
    model: RowDensity,
    *,
    epsilon: float,
    delta: float,
    batch_size: int | None = None,
    iterations: int | None = None,
    step_size: float | Sequence[float] | np.ndarray | None = None,
    proposal: str = "gaussian",
    temperature: float = 1.0,
    n0: float | None = None,
    correction_variance: float = DEFAULT_CORRECTION_VARIANCE,
    chains: int = 4,
    warmup: int = 0,
    init: Any = None,
    seed: int | np.random.SeedSequence | None = None,
    progress: bool = True,
    release_nonprivate: Sequence[str] = (),
    relation: str = "replace_one",
):
    """Differentially private Barker MCMC on minibatches (seed 003, Algorithm 2, Theorem 8).

    Parameters
    ----------
    model : RowDensity
        E.g. a :class:`stan_dp.RowModel`.  Each iteration evaluates ``2 b``
        row log-likelihoods, whatever ``n``.
    epsilon, delta : float
        Budget of the whole run (all chains, warm-up included), replace-one
        neighbours.
    batch_size : int, optional
        ``b``: rows per iteration, drawn without replacement;
        ``10/(C-1) < b <= n`` (Theorem 8 needs ``5 alpha < (C-1) b`` for
        some order ``alpha >= 2``).
    iterations : int, optional
        Post-warm-up draws per chain.  ``None``: the most that fit the budget.
        Given: refused (before any data is read) if it does not fit.
    step_size : float or array (dim,), optional
        Proposal scale(s), unconstrained space.
        Leave out all of the hand-set knobs (``batch_size``, ``step_size``)
        and the run goes through :func:`stan_dp.sample`'s private adaptation
        (half the budget), which sets them from public facts.
    proposal : {"gaussian", "component", "guided"}
        See :func:`stan_dp.penalty`.
    temperature : float
        Tempering factor ``T``; per-row ratios are clipped to
        ``|T r_j| <= sqrt(b)/n``.
    n0 : float, optional
        Convenience: ``T = n0/n``, so the clip is ``|r_j| <= sqrt(b)/n0``
        (seed 003, end of Section 3.2).  Not together with ``temperature``.
    correction_variance : float
        ``C``, the total Gaussian variance of the test, ``1 < C < pi^2/3``.
        Default 1.6: ``N(0, 1.6) + V_corr`` is within TV 5.45e-4 of
        Logistic(0, 1).  2 is Theorem 8 as stated, but there no ``V_corr``
        gets closer than TV 3.85e-3 (see
        :mod:`stan_dp.samplers.barker_correction`).  Smaller ``C`` gives a
        better ``V_corr`` but costs privacy (less test noise).
    chains, warmup, init, seed, progress
        As in :func:`stan_dp.penalty`.
    release_nonprivate : sequence of str
        Any of ``"clip_fraction"``, ``"batch_variance"``: raw-data diagnostics
        WITHOUT privacy (a :class:`~stan_dp.inference.PrivacyWarning` is issued).
    relation : {"replace_one"}
        Replace-one only; ``"add_remove"`` is refused before any data is
        touched (see :data:`ADD_REMOVE_REFUSAL`).

    Returns
    -------
    arviz.InferenceData
        ``posterior``; ``sample_stats`` with ``acceptance_rate``,
        ``is_accepted``, ``step_size``, ``variance_exceeded``; ``attrs`` with
        the privacy facts plus ``batch_size``, ``n_rows``, ``temperature``,
        ``correction_variance``, ``clip_bound`` (no ``noise_multiplier``).

    Raises
    ------
    TypeError, ValueError
        For invalid arguments (``batch_size`` outside the range above,
        ``correction_variance`` outside ``(1, pi^2/3)``, …) — before any
        data is touched.
    stan_dp.accounting.PrivacyBudgetError
        If the run does not fit the budget — before any data is touched.
    """
    if batch_size is None or step_size is None:
        return _automatic("barker", model, epsilon=epsilon, delta=delta, iterations=iterations,
                          chains=chains, warmup=warmup, init=init, seed=seed, relation=relation,
                          progress=progress, given=locals(), knobs=("batch_size", "step_size"),
                          free={"proposal": "gaussian", "temperature": 1.0, "n0": None,
                                "correction_variance": DEFAULT_CORRECTION_VARIANCE,
                                "release_nonprivate": ()})
    check_row_density(model, relation=relation)
    validate_run_args(epsilon=epsilon, delta=delta, iterations=iterations, noise=None,
                      chains=chains, warmup=warmup, relation=relation, seed=seed)
    if relation != "replace_one":
        raise ValueError(ADD_REMOVE_REFUSAL)
    n_rows = int(model.n_rows)
    b = mb.validate_batch_size(batch_size, n_rows)
    curve = barker_step_rdp(b, n_rows, correction_variance)  # validates C and b for Theorem 8
    temperature = mb.resolve_temperature(temperature, n0, n_rows)
    prop = make_proposal(proposal, step_size, int(model.dim))
    user_init = resolve_init(model, init, chains)
    release = tuple(release_nonprivate)
    corr = correction_distribution(float(correction_variance))

    def init_state(rng: np.random.Generator, chain: int) -> mb.MinibatchState:
        return mb.init(model, initial_position(rng, model, user_init, chain), prop.init_aux(rng))

    spec = SamplerSpec(
        name="barker",
        plan=lambda z: [],
        build_kernel=lambda z: build_kernel(model, prop, batch_size=b, temperature=temperature,
                                            correction=corr),
        init_state=init_state,
        position=lambda s: s.position,
        stats=RELEASED_STATS,
        nonprivate_stats=NONPRIVATE_STATS,
        step_rdp=curve,
    )
    steps = np.broadcast_to(np.asarray(step_size, dtype=float), (int(model.dim),))
    run_attrs: dict[str, Any] = {
        "batch_size": b,
        "sampling": "without replacement",
        "temperature": temperature,
        "n0": temperature * n_rows,
        "correction_variance": corr.variance,
        "correction_tv": corr.fitted_tv,
        "clip_bound": barker_clip_bound(b, n_rows),
        "clip_bound_untempered": barker_clip_bound(b, n_rows) / temperature,
        "rdp_orders": f"{int(curve.orders[0])}..{int(curve.orders[-1])}",
        "proposal": proposal,
        "step_size": steps.tolist(),
        "init": "user" if user_init is not None else "uniform(-2, 2) unconstrained",
    }
    return run(spec, model, epsilon=epsilon, delta=delta, iterations=iterations, noise=None,
               chains=chains, warmup=warmup, seed=seed, relation="replace_one", progress=progress,
               release_nonprivate=release, run_attrs=run_attrs)

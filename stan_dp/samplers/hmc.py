"""Differentially private Hamiltonian Monte Carlo (Räisä, seed 003, Section 5.2, Algorithm 3).

One iteration at ``theta`` with the released gradient ``G(theta)`` cached:

1. momentum ``p ~ N(0, M)`` (diagonal ``M``; proposal stream);
2. ``L`` leapfrog steps of size ``eta`` driven by *released* gradients
   ``G(theta) = T * sum_i clip_{b_g}(grad loglik_i(theta)) + grad log prior(theta) + N(0, sigma_g^2 I)``
   with ``sigma_g = z_g * k * T * b_g`` (per-row gradients projected on the
   l2 ball of radius ``b_g = grad_clip``; ``k = 2`` replace-one, ``1``
   add/remove): one release at each new point, the gradient at the start is
   the one released when the chain arrived there (Algorithm 3 reuses
   ``G_{i,0}`` after a rejection and ``G_{i,L}`` after an acceptance — no
   release is repeated);
3. the penalty test of Section 5.2 on the energy difference: per-row
   log-likelihood ratios clipped to ``±b_l ||theta_L - theta||``
   (``b_l = clip``), their tempered sum released with noise sd
   ``sigma_l = z_l * k * T * b_l ||theta_L - theta||`` (replace-one: the
   thesis's ``2 b_l ||.||`` sensitivity; its printed
   ``sigma_l = 2 tau_l sqrt(n b_l) ||.||`` is a typo for
   ``2 tau_l sqrt(n) b_l ||.||``, see :func:`stan_dp.accounting.bounds.zcdp_hmc_max_iterations`),
   ``Delta H = R + log prior ratio + p0' M^-1 p0 / 2 - pL' M^-1 pL / 2`` and
   acceptance ``min(1, exp(Delta H - sigma_l^2 / 2))``.

Exactness
---------
Extend the state with the noise ``xi`` of the cached gradient
(``G = g(theta) + xi``).  For a fixed noise realisation each half-kick
``p -> p + eta/2 G(theta)`` is a shear and the drift
``theta -> theta + eta M^-1 p`` is a shear, so the noisy leapfrog preserves
volume, and composed with a momentum flip it is an involution on
``(theta, p, xi_0, xi_1, ..., xi_L)`` (the reverse trajectory meets the same
points, so it uses the same noises in reverse order: Theorem 10 of the
thesis, tested in ``tests/test_hmc.py``).  The fresh noises have the same
density forwards and backwards (``prod_{j>=1} N(xi_j)`` vs
``prod_{j<L} N(xi_j)``; with the target's factor ``N(xi_0)`` resp.
``N(xi_L)`` both sides are ``prod_j N(xi_j)``), so the Metropolis ratio on
the extended state is the ordinary HMC one.  Hence the chain targets
``pi(theta) x N(xi)`` for *any* gradient noise and *any* gradient clipping:
these only lower the acceptance rate.  Only clipping of the log-likelihood
ratios (when it binds) biases the posterior; the ratio noise is corrected
by the penalty term exactly as in the penalty algorithm.

Friction (not implemented)
--------------------------
Section 5.2 also shows the SGHMC friction term of Chen et al. (2014),
``p -> p - eta/2 (1/2 sigma_g^2 M^-1 p)`` in each half-kick.  It is not
implemented: (1) the noisy leapfrog above is already exact, friction is only
needed when the noise is *not* corrected by an accept/reject step; (2) a
friction kick has Jacobian ``det(I - eta sigma_g^2 M^-1 / 4) != 1`` and is no
longer reversible under a momentum flip (the reverse trajectory would need
negative friction), so the acceptance would need both the log-Jacobian
``2 L sum_k log|1 - eta sigma_g^2 / (4 m_k)|`` and the densities of the
*noises* of a reverse trajectory through different points, which are not
released and cannot be computed privately; (3) at DP noise levels
``eta sigma_g^2 / (4 m)`` is typically above 1, so the "friction" would
reverse the momentum at every half-step.

Code shape follows BlackJAX and :mod:`stan_dp.samplers.penalty`: this module
holds the kernel and the entry point :func:`hmc`; the warm-up (mode search,
step-size adaptation) is in :mod:`stan_dp.adaptation.warmup`.
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

import numpy as np

from stan_dp.accounting import Release, sensitivity_factor
from stan_dp.adaptation.warmup import (  # Adaptation, mode_search, ADAPT_RESTARTS: re-exported
    ADAPT_RESTARTS,
    Adaptation,
    adapt_step_size,
    mode_search,
    new_adaptation,
)
from stan_dp.density import RowDensity, check_row_density, prior_gradient
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
from stan_dp.samplers.penalty import log_acceptance

__all__ = [
    "HMCState",
    "HMCInfo",
    "Adaptation",
    "NoisyGradient",
    "make_noisy_gradient",
    "leapfrog",
    "init",
    "build_kernel",
    "hmc",
    "HMCDefaults",
    "default_settings",
    "default_grad_clip",
    "RELEASED_STATS",
    "NONPRIVATE_STATS",
]

RELEASED_STATS = (
    "acceptance_rate", "is_accepted", "step_size", "n_steps", "diverging",
    "energy_error", "noise_sd", "grad_noise_sd",
)
"""Sample statistics released by default (post-processing or data-independent)."""
NONPRIVATE_STATS = ("clip_fraction", "grad_clip_fraction")
"""Computed from raw data without noise: released only with ``release_clip_fraction=True``."""

DIVERGENCE_THRESHOLD = 1000.0
"""A transition is ``diverging`` when ``-Delta H`` (released) exceeds this, as in Stan."""

STEP_JITTER = 0.1
"""Each iteration's step size is ``eta * U(1 - STEP_JITTER, 1 + STEP_JITTER)`` (proposal stream)."""

# ----------------------------------------------------------------- defaults --
DEFAULT_ITERATIONS = 100
"""Post-warm-up iterations per chain when neither ``iterations`` nor the noise is given."""
DEFAULT_WARMUP = 50
"""Warm-up iterations per chain when ``warmup`` is not given (counted in the budget)."""
DEFAULT_N_LEAPFROG = 3
"""Leapfrog steps per iteration (see :func:`default_settings`)."""
DEFAULT_SEARCH_RELEASES = 200
"""Gradient releases per chain of the warm-up mode search
(:func:`~stan_dp.adaptation.warmup.mode_search`)."""
SEARCH_SHARE = 0.8
"""Share of the privacy budget (in ``sum 1 / z^2``) given to the mode search."""
DEFAULT_TARGET_ACCEPT = 0.3
"""Target of the warm-up step-size adaptation (noise-dominated optimum is ~0.23)."""


class HMCDefaults(NamedTuple):
    """Data-independent defaults of :func:`hmc` (see :func:`default_settings`)."""

    clip: float
    grad_clip: float
    n_leapfrog: int
    step_size: float
    grad_noise_ratio: float


def default_settings(n_rows: int, dim: int, n_leapfrog: int | None = None,
                     clip: float | None = None, grad_clip: float | None = None) -> HMCDefaults:
    """The defaults of :func:`hmc`; they depend only on ``n`` and ``dim``.

    ``n_rows`` must be public: the true row count under replace-one, a
    declared ``public_n`` under add/remove (where the true count is private).

    * ``clip = sqrt(dim + max(0, ln n - 5))``, the default gradient bound: a
      row's log-likelihood ratio is at most its gradient norm (somewhere on
      the segment) times ``||theta' - theta||``, so the ratio bound is the
      gradient bound.  A binding ratio clip biases the chain's target, by an
      amount that grows like ``sqrt(n)`` in posterior sds for the same reason
      as the search's (next item): with ``sqrt(dim)`` on the bundled logistic
      regression at n = 1e5, D = 3, epsilon = 5 (seed 1) the chains drifted
      0.64 sd from the mode (0.38 with this default).
    * ``grad_clip = sqrt(dim + max(0, ln n - 5))`` (:func:`default_grad_clip`):
      gradient clipping never biases the chain (module docstring), but the
      warm-up mode search converges to the zero of the *clipped*
      gradient sum.  That zero moves away from the mode by the clipped mass
      over the curvature, which in posterior sds grows like ``sqrt(n)``
      times the share of rows the bound clips, while the search's noise
      error shrinks like ``grad_clip / sqrt(n)``.  A fixed bound therefore
      fails as n grows (``sqrt(dim)`` on the bundled logistic regression at
      D = 3: 1.4 sd at n = 3e4, 2.6 sd at 1e5, 8.4 sd at 1e6).  For a GLM
      with standardised predictors the row gradient is ``residual * (1,
      x_i)`` with ``||(1, x_i)||^2 ~ 1 + chi2(dim - 1)``, whose tail past
      ``dim + t`` falls like ``exp(-t / 2)``; keeping the shift fixed needs
      ``t`` to grow like ``ln n``.  The constant 5 puts the worst shift near
      0.1 sd at n = 1e5 on that model (measured at D = 3, 5); below
      ``n = e^5 ~ 148`` it is ``sqrt(dim)``.
    * ``n_leapfrog = 3``: with DP noise the length of a move is limited by the
      ratio noise (``sigma_l`` grows with ``||theta_L - theta||``), so long
      trajectories do not pay; a few steps keep the gradient drift that pulls
      the chain to the mode.
    * ``step_size = 1 / sqrt(n)``: the initial step of the warm-up adaptation,
      on the scale of a regular posterior's sd (``~ 1 / sqrt(n * info)``).
    * gradient noise multiplier ``z_g = grad_noise_ratio * z_l`` with
      ``grad_noise_ratio = 0.6 * sqrt(L) * clip / grad_clip``: balances the
      energy error from gradient noise (``~ eta sigma_g sqrt(L d / 2)``)
      against the ratio noise (``sigma_l ~ 2 z_l clip L eta sqrt(d)``).
    """
    bound = default_grad_clip(n_rows, dim)
    b_l = bound if clip is None else clip
    b_g = bound if grad_clip is None else grad_clip
    steps = DEFAULT_N_LEAPFROG if n_leapfrog is None else n_leapfrog
    ratio = 0.6 * math.sqrt(steps) * b_l / b_g
    return HMCDefaults(b_l, b_g, steps, 1.0 / math.sqrt(n_rows), ratio)


def default_grad_clip(n_rows: int, dim: int) -> float:
    """Default per-row gradient bound ``sqrt(dim + max(0, ln n - 5))`` (see :func:`default_settings`).

    Depends only on ``n`` and ``dim``.  It assumes rows like a GLM's with
    standardised, light-tailed predictors; with heavy-tailed predictors the
    bound binds more often and the mode search is biased: pass
    ``grad_clip=`` from what you know of the data's range.
    """
    return float(math.sqrt(dim + max(0.0, math.log(max(n_rows, 1)) - 5.0)))


def search_noise_ratio(search_releases: int, iterations: int, n_leapfrog: int,
                       grad_noise_ratio: float, share: float = SEARCH_SHARE) -> float:
    """``z_s / z_l`` giving the mode search ``share`` of the budget.

    Under the tight composition of Gaussian releases only
    ``sum_k 1 / z_k^2`` counts (seed 003, end of Section 5.2).  Per chain the
    ``iterations`` HMC iterations contribute ``iterations * (1 + L / r^2) / z_l^2``
    (``r = z_g / z_l``) and the search ``K / z_s^2``; the ratio returned makes
    the latter ``share`` of the total.  Data-independent.
    """
    per_iteration = 1.0 + n_leapfrog / grad_noise_ratio**2
    return math.sqrt(search_releases * (1.0 - share) / (share * max(iterations, 1) * per_iteration))


# -------------------------------------------------------------- state/info --
class HMCState(NamedTuple):
    """State of a DP HMC chain.

    ``grad`` is the *released* noisy gradient at ``position``
    (post-processing, reused until the chain moves).  The per-row
    log-likelihoods at ``position`` stay with the density (its point cache,
    :class:`stan_dp.aggregates.PointCache`), next to the rows.
    """

    position: np.ndarray
    log_prior: float
    grad: np.ndarray | None
    step_size: float
    inv_mass: np.ndarray
    iteration: int
    adapt: Adaptation | None


class HMCInfo(NamedTuple):
    """Per-iteration information."""

    acceptance_rate: float
    """``min(1, exp(Delta H - sigma_l^2 / 2))`` from released values."""
    is_accepted: bool
    step_size: float
    """Step size used (after jitter)."""
    n_steps: int
    """Leapfrog steps taken (fewer than ``L`` if the prior support was left)."""
    diverging: bool
    energy_error: float
    """``-Delta H`` of the proposal (released, noisy)."""
    noise_sd: float
    """``sigma_l`` of the log-ratio release."""
    grad_noise_sd: float
    """``sigma_g`` of each gradient release."""
    clip_fraction: float
    """Fraction of rows whose ratio was clipped (NOT privatised)."""
    grad_clip_fraction: float
    """Fraction of per-row gradients clipped, averaged over the trajectory (NOT privatised)."""


# --------------------------------------------------------------- mechanism --
class NoisyGradient(NamedTuple):
    """A released gradient at one point with what the sampler keeps privately."""

    grad: np.ndarray
    """Released ``T * sum clip(grad_i) + grad log prior + noise``."""
    log_prior: float
    n_clipped: int
    """Rows whose gradient was clipped (NOT private)."""


def make_noisy_gradient(
    density: RowDensity, *, grad_clip: float, grad_noise_sd: float, temperature: float = 1.0,
) -> Callable[[np.random.Generator, np.ndarray], NoisyGradient | None]:
    """The gradient mechanism of Algorithm 3: ``grad(theta, b_g)`` plus Gaussian noise.

    Returns ``release(rng_noise, theta)``: ``None`` (no data access, no
    release) where the log prior is not finite, else a :class:`NoisyGradient`.
    Per-row gradients are projected on the l2 ball of radius ``grad_clip``
    (non-finite entries zeroed first, :func:`stan_dp.mechanisms.clamp_rows_l2`),
    so their tempered sum has l2 sensitivity ``k * T * grad_clip``; the
    clipped sum is computed where the rows live
    (:meth:`stan_dp.aggregates.AggregateDensity.clipped_grad_sum`).
    """
    q = queries(density)

    def release(rng_noise: np.random.Generator, theta: np.ndarray) -> NoisyGradient | None:
        log_prior, prior_grad = prior_gradient(density, theta)
        if not (np.isfinite(log_prior) and np.all(np.isfinite(prior_grad))):
            return None
        summed = q.clipped_grad_sum(theta, grad_clip)
        noisy = gaussian_release(rng_noise, temperature * summed.total, grad_noise_sd)  # release
        return NoisyGradient(prior_grad + noisy, log_prior, summed.n_clipped)

    return release


def leapfrog(
    gradient: Callable[[np.ndarray], Any],
    position: np.ndarray,
    momentum: np.ndarray,
    grad: np.ndarray,
    *,
    step_size: float,
    inv_mass: np.ndarray,
    n_steps: int,
) -> tuple[np.ndarray, np.ndarray, Any, int]:
    """``n_steps`` leapfrog steps driven by (noisy) gradients of the log density.

    Parameters
    ----------
    gradient : callable
        ``theta -> obj`` with ``obj.grad`` the gradient to use at ``theta``
        (one release per call), or ``None`` to stop (left the prior support).
    position, momentum : ndarray
        Start point.
    grad : ndarray
        Gradient at ``position`` (already released: not recomputed).
    step_size : float
    inv_mass : ndarray
        Diagonal of ``M^-1``.
    n_steps : int

    Returns
    -------
    position, momentum : ndarray
        End point (or the last point reached).
    last : object or None
        The last ``gradient(...)`` result (``None`` if the trajectory stopped,
        or if ``n_steps == 0``).
    steps : int
        Steps completed.
    """
    theta = np.array(position, dtype=float)
    p = np.array(momentum, dtype=float)
    g = np.asarray(grad, dtype=float)
    last = None
    for j in range(n_steps):
        p = p + 0.5 * step_size * g
        theta = theta + step_size * inv_mass * p
        last = gradient(theta)
        if last is None:
            return theta, p, None, j
        g = last.grad
        p = p + 0.5 * step_size * g
    return theta, p, last, n_steps


def init(position: np.ndarray, *, step_size: float, adapt: bool = False) -> HMCState:
    """Initial state at a data-independent ``position``; touches no data.

    The first gradient (Algorithm 3's ``G_{1,0}``, accounted as the one-off
    release of each chain) is released by the kernel's first call, from the
    chain's noise stream.
    """
    theta = np.array(position, dtype=float)
    dim = theta.size
    adaptation = new_adaptation(step_size) if adapt else None
    return HMCState(theta, np.nan, None, float(step_size), np.ones(dim), 0, adaptation)


def _first_release(state: HMCState, release: Callable, rng_noise: np.random.Generator) -> HMCState:
    first = release(rng_noise, state.position)
    if first is None:
        raise ValueError("the log prior is not finite at the initial point")
    return state._replace(log_prior=first.log_prior, grad=first.grad)


def _adapt(state: HMCState, accept: float, warmup: int, target: float) -> HMCState:
    """The warm-up step size of the chain (:func:`stan_dp.adaptation.warmup.adapt_step_size`)."""
    adapt, step = adapt_step_size(state.adapt, state.step_size, state.iteration, accept,
                                  warmup=warmup, target=target)
    return state._replace(step_size=step, adapt=adapt)


def build_kernel(
    density: RowDensity,
    *,
    clip: float,
    grad_clip: float,
    noise_multiplier: float,
    grad_noise_multiplier: float,
    n_leapfrog: int,
    temperature: float = 1.0,
    relation: str = "replace_one",
    warmup: int = 0,
    target_accept: float = DEFAULT_TARGET_ACCEPT,
    jitter: float = STEP_JITTER,
    noise_sd: float | None = None,
    grad_noise_sd: float | None = None,
    search_releases: int = 0,
    search_noise_multiplier: float | None = None,
    search_step: float | None = None,
):
    """Build the DP HMC kernel.

    Parameters
    ----------
    density : RowDensity
        The model (``row_log_lik_grad`` needed).
    clip : float
        ``b_l``: per-row log-likelihood ratios are clipped to
        ``±b_l ||theta_L - theta||``.  ``inf`` only with ``noise_sd``.
    grad_clip : float
        ``b_g``: per-row gradients are projected on the l2 ball of radius
        ``b_g``.  ``inf`` only with ``grad_noise_sd``.
    noise_multiplier, grad_noise_multiplier : float
        ``z_l`` and ``z_g``.
    n_leapfrog : int
        ``L``.
    temperature : float
        ``T``.
    relation : {"replace_one", "add_remove"}
    warmup : int
        Iterations during which the step size adapts, if the
        state carries an :class:`~stan_dp.adaptation.warmup.Adaptation`.
    target_accept : float
        Target of the dual averaging.
    jitter : float
        Relative step-size jitter.
    noise_sd, grad_noise_sd : float, optional
        Fixed noise sds overriding the calibrated ones (for tests; such a
        kernel is not private unless they match).  ``noise_sd`` is then the
        ratio noise sd itself, independent of the move length.
    search_releases : int
        ``K > 0``: the first call runs
        :func:`~stan_dp.adaptation.warmup.mode_search` from the initial
        position (``K`` gradient releases with multiplier
        ``search_noise_multiplier``, step ``1 / (n T)``) and the chain starts
        at its averaged point; these ``K`` releases replace the initial
        gradient release.  ``0``: the initial gradient is released at the
        initial position.
    search_noise_multiplier : float, optional
        ``z_s`` of the search releases (default ``grad_noise_multiplier``).
    search_step : float, optional
        Step of the mode search; default ``1 / (n T)`` with ``n =
        density.n_rows``, which is private under add/remove: :func:`hmc`
        passes ``1 / (n T)`` with a public ``n`` there.

    Returns
    -------
    callable
        ``kernel(rng_prop, rng_noise, state) -> (HMCState, HMCInfo)``.  On
        the first call (``state.grad is None``) it first releases the initial
        gradient, or runs the mode search.
    """
    if not clip > 0 or (np.isinf(clip) and noise_sd is None):
        raise ValueError(f"clip must be positive (and finite unless noise_sd is fixed), got {clip!r}")
    if not grad_clip > 0 or (np.isinf(grad_clip) and grad_noise_sd is None):
        raise ValueError(f"grad_clip must be positive (and finite unless grad_noise_sd is fixed), "
                         f"got {grad_clip!r}")
    factor = sensitivity_factor(relation)
    sd_g = (grad_noise_multiplier * factor * temperature * grad_clip
            if grad_noise_sd is None else float(grad_noise_sd))
    q = queries(density)  # one point cache for the gradients and the ratio test
    release = make_noisy_gradient(q, grad_clip=grad_clip, grad_noise_sd=sd_g,
                                  temperature=temperature)
    n_rows = int(density.n_rows)
    search_releases = _validate_int("search_releases", search_releases, 0)
    z_s = grad_noise_multiplier if search_noise_multiplier is None else search_noise_multiplier
    search = make_noisy_gradient(q, grad_clip=grad_clip, temperature=temperature,
                                 grad_noise_sd=z_s * factor * temperature * grad_clip)
    first_step = 1.0 / (n_rows * temperature) if search_step is None else float(search_step)

    def kernel(rng_prop: np.random.Generator, rng_noise: np.random.Generator,
               state: HMCState) -> tuple[HMCState, HMCInfo]:
        if state.grad is None and search_releases > 0:
            position, first = mode_search(search, rng_noise, state.position, search_releases,
                                          first_step)
            state = state._replace(position=position, log_prior=first.log_prior, grad=first.grad)
        elif state.grad is None:
            state = _first_release(state, release, rng_noise)
        theta0 = state.position
        step = state.step_size * (1.0 + jitter * (2.0 * rng_prop.random() - 1.0))
        p0 = rng_prop.standard_normal(theta0.size) / np.sqrt(state.inv_mass)
        clipped_grads = [0]

        def gradient(theta: np.ndarray) -> NoisyGradient | None:
            out = release(rng_noise, theta)
            if out is not None:
                clipped_grads[0] += out.n_clipped
            return out

        theta, p, last, steps = leapfrog(gradient, theta0, p0, state.grad, step_size=step,
                                         inv_mass=state.inv_mass, n_steps=n_leapfrog)
        sd_l, n_clipped, energy = 0.0, 0, np.inf
        if last is None:
            log_a = -np.inf  # left the prior support: data-independent rejection
        else:
            distance = float(np.linalg.norm(theta - theta0))
            bound = clip * distance
            sd_l = noise_sd if noise_sd is not None else noise_multiplier * factor * temperature * bound
            # The values at both ends are the density's (cached with the gradients).
            sums = q.clipped_ratio_sums(theta, theta0, bound)
            n_clipped = sums.n_clipped
            released = gaussian_release(rng_noise, temperature * float(sums.totals[0]), sd_l)  # release
            kinetic0 = 0.5 * float(np.sum(state.inv_mass * p0 * p0))
            kinetic1 = 0.5 * float(np.sum(state.inv_mass * p * p))
            delta_h = released + (last.log_prior - state.log_prior) + kinetic0 - kinetic1
            energy = -delta_h if np.isfinite(delta_h) else np.inf
            log_a = log_acceptance(delta_h, sd_l * sd_l)
        accepted = bool(np.log(rng_prop.random()) < log_a)
        if accepted:
            new = state._replace(position=theta, log_prior=last.log_prior, grad=last.grad)
        else:
            new = state
        accept_prob = float(np.exp(log_a))
        new = new._replace(iteration=state.iteration + 1)
        new = _adapt(new, accept_prob, warmup, target_accept)
        info = HMCInfo(
            accept_prob, accepted, float(step), int(steps),
            bool(last is None or energy > DIVERGENCE_THRESHOLD),
            float(energy), float(sd_l), float(sd_g),
            n_clipped / n_rows if last is not None else 0.0,
            clipped_grads[0] / (n_rows * max(steps, 1)),
        )
        return new, info

    return kernel


_init = init


def _validate_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def hmc(
    model: RowDensity,
    *,
    epsilon: float,
    delta: float,
    iterations: int | None = None,
    noise: float | None = None,
    grad_noise: float | None = None,
    clip: float | None = None,
    grad_clip: float | None = None,
    step_size: float | None = None,
    n_leapfrog: int | None = None,
    temperature: float = 1.0,
    chains: int = 4,
    warmup: int | None = None,
    init: Any = None,
    seed: int | np.random.SeedSequence | None = None,
    progress: bool = True,
    relation: str = "replace_one",
    public_n: int | None = None,
    release_clip_fraction: bool = False,
):
    """Differentially private HMC with clipped noisy per-row gradients (seed 003, Alg. 3).

    Parameters
    ----------
    model : RowDensity
        E.g. a :class:`stan_dp.RowModel` (needs ``row_log_lik_grad``;
        ``log_prior_grad`` is used if present, else central differences of
        the data-independent prior).
    epsilon, delta : float
        Budget of the whole run: all chains, warm-up included.
    iterations : int, optional
        Post-warm-up draws per chain.
    noise, grad_noise : float, optional
        Noise multipliers ``z_l`` (log-ratio release) and ``z_g`` (each
        gradient release).  Both given: ``iterations`` is the most that fits
        (or must fit if given).  One given: the other follows from the default
        ratio ``z_g / z_l`` (:func:`default_settings`).  Neither: both are
        calibrated, with that ratio, so that ``chains * (warmup + iterations)``
        iterations spend exactly the budget (``iterations`` defaults to
        :data:`DEFAULT_ITERATIONS`).
    clip : float, optional
        ``b_l``: log-likelihood ratios clipped to ``±b_l ||theta' - theta||``;
        default: the default ``grad_clip`` (a ratio is at most a gradient
        norm times the step).
    grad_clip : float, optional
        ``b_g``: per-row gradient l2 bound; default
        ``sqrt(dim + max(0, ln n - 5))`` (:func:`default_grad_clip`; it grows
        slowly with n so that the warm-up search's clipping bias does not).
    step_size : float, optional
        Leapfrog step size.  Given: used as is (identity metric, no
        adaptation, no mode search).  Default: ``1 / sqrt(n)``, then adapted
        during warm-up (dual averaging on the released acceptance
        probability), after a private mode search
        (:func:`~stan_dp.adaptation.warmup.mode_search`,
        :data:`DEFAULT_SEARCH_RELEASES` gradient releases per chain carrying
        :data:`SEARCH_SHARE` of the budget) from which the chain starts.  The mass
        matrix is the identity (the kernel supports a diagonal one through
        ``HMCState.inv_mass``).
    n_leapfrog : int, optional
        ``L``; default 3.
    temperature : float
        Tempering ``T`` (likelihood to the power ``T``).
    chains : int
        Chains (run sequentially).
    warmup : int, optional
        Warm-up iterations per chain (adaptation, counted in the budget);
        default :data:`DEFAULT_WARMUP`.  ``0`` also disables the mode search.
    init : None, array or dict
        Data-independent initial point(s); default uniform(-2, 2) per
        unconstrained coordinate.
    seed : int, SeedSequence or None
        ``None`` draws fresh OS entropy; a fixed seed makes the run
        reproducible (``attrs["seeded"] = 1``) — do not publish such a run.
    progress : bool
        Show a progress bar.
    relation : {"replace_one", "add_remove"}
        Neighbouring relation (sensitivity factor 2 or 1).  Under
        ``"add_remove"`` the row count ``n`` is private, and the defaults of
        ``clip``, ``grad_clip`` and ``step_size`` (with the mode search's step
        ``1 / (n T)``) depend on it: give ``public_n``, or all three of
        ``clip``, ``grad_clip`` and ``step_size``; otherwise the run is refused
        before any data is touched.  Nothing derived from the private ``n``
        is then published (no ``n_rows`` in ``attrs``).
    public_n : int, optional
        A row count declared public, chosen without looking at the data (e.g.
        the planned sample size): the ``n`` of the defaults above, recorded in
        ``attrs["public_n"]``.  Default: the model's ``n_rows``, which only
        replace-one treats as public.
    release_clip_fraction : bool
        Also return the (NOT private) clip fractions of ratios and gradients.

    Returns
    -------
    arviz.InferenceData
        ``posterior``; ``sample_stats`` (``acceptance_rate``, ``is_accepted``,
        ``step_size``, ``n_steps``, ``diverging``, ``energy_error``,
        ``noise_sd``, ``grad_noise_sd``); privacy facts in ``attrs``
        including ``grad_noise_multiplier``, ``n_leapfrog``, ``grad_clip``.

    Raises
    ------
    TypeError, ValueError
        For invalid arguments, or an add/remove run needing an n-dependent
        default without ``public_n`` — before any data is touched.
    stan_dp.accounting.PrivacyBudgetError
        If the run does not fit the budget — before any data is touched.
    """
    check_row_density(model, gradients=True, relation=relation)
    warmup = DEFAULT_WARMUP if warmup is None else warmup
    validate_run_args(epsilon=epsilon, delta=delta, iterations=iterations, noise=noise,
                      chains=chains, warmup=warmup, relation=relation, seed=seed)
    if grad_noise is not None:
        grad_noise = _validate_positive("grad_noise", grad_noise)
    if clip is not None:
        clip = _validate_positive("clip", clip)
    if grad_clip is not None:
        grad_clip = _validate_positive("grad_clip", grad_clip)
    if step_size is not None:
        step_size = _validate_positive("step_size", step_size)
    if n_leapfrog is not None:
        n_leapfrog = _validate_int("n_leapfrog", n_leapfrog, 1)
    temperature = _validate_positive("temperature", temperature)
    if public_n is not None:
        public_n = _validate_int("public_n", public_n, 1)
    n_dependent = [name for name, value in (("clip", clip), ("grad_clip", grad_clip),
                                            ("step_size", step_size)) if value is None]
    if relation == "add_remove" and public_n is None and n_dependent:
        raise ValueError(
            "under relation='add_remove' the row count n is private, and the default "
            f"{', '.join(n_dependent)} of hmc depend{'s' if len(n_dependent) == 1 else ''} on it "
            "(grad_clip and clip sqrt(dim + ln n - 5), initial step size 1/sqrt(n), mode-search "
            "step 1/(n T)), so using them would publish n: pass public_n=, a row count chosen "
            "without looking at the data (e.g. the planned sample size), or give clip, grad_clip "
            "and step_size, or use relation='replace_one'")
    n_defaults = int(model.n_rows) if public_n is None else public_n
    if not isinstance(progress, (bool, np.bool_)):
        raise ValueError("progress must be a bool")
    if not isinstance(release_clip_fraction, (bool, np.bool_)):
        raise ValueError("release_clip_fraction must be a bool")
    user_init = resolve_init(model, init, chains)

    defaults = default_settings(n_defaults, int(model.dim), n_leapfrog, clip, grad_clip)
    steps_l = defaults.n_leapfrog
    if noise is not None and grad_noise is not None:
        ratio = grad_noise / float(noise)
    elif noise is None and grad_noise is not None:
        ratio = defaults.grad_noise_ratio
        noise = grad_noise / ratio
    else:
        ratio = defaults.grad_noise_ratio
    if iterations is None and noise is None:
        iterations = DEFAULT_ITERATIONS
    adapt = step_size is None
    eta0 = defaults.step_size if step_size is None else step_size

    searching = adapt and warmup > 0
    search_ratio = search_noise_ratio(DEFAULT_SEARCH_RELEASES, warmup + (
        DEFAULT_ITERATIONS if iterations is None else iterations), steps_l, ratio)

    def plan(z: float) -> list[Release]:
        return [Release(z), Release(z * ratio, count=steps_l)]

    def once(z: float) -> list[Release]:
        if searching:
            return [Release(z * search_ratio, count=DEFAULT_SEARCH_RELEASES)]
        return [Release(z * ratio)]

    def make_kernel(z: float):
        return build_kernel(
            model, clip=defaults.clip, grad_clip=defaults.grad_clip, noise_multiplier=z,
            grad_noise_multiplier=z * ratio, n_leapfrog=steps_l, temperature=temperature,
            relation=relation, warmup=warmup if adapt else 0,
            search_releases=DEFAULT_SEARCH_RELEASES if searching else 0,
            search_noise_multiplier=z * search_ratio,
            search_step=1.0 / (n_defaults * temperature),
        )

    def init_state(rng: np.random.Generator, chain: int) -> HMCState:
        position = initial_position(rng, model, user_init, chain)
        return _init(position, step_size=eta0, adapt=searching)

    run_attrs: dict[str, Any] = {
        "clip": defaults.clip,
        "grad_clip": defaults.grad_clip,
        "n_leapfrog": steps_l,
        "temperature": temperature,
        "step_size_initial": eta0,
        "adapted": ("mode search (averaged ascent on released gradients) and step size (dual "
                    "averaging on released acceptance) in warm-up" if searching else "none"),
        "search_releases": DEFAULT_SEARCH_RELEASES if searching else 0,
        "public_n": "" if public_n is None else public_n,
        "init": "user" if user_init is not None else "uniform(-2, 2) unconstrained",
    }
    spec = SamplerSpec(
        name="hmc",
        plan=plan,
        build_kernel=make_kernel,
        init_state=init_state,
        position=lambda s: s.position,
        stats=RELEASED_STATS,
        nonprivate_stats=NONPRIVATE_STATS,
        once=once,
        attrs_for=lambda resolved: {
            "grad_noise_multiplier": resolved.noise_multiplier * ratio,
            "search_noise_multiplier": resolved.noise_multiplier * search_ratio if searching else 0.0,
        },
    )
    return run(
        spec, model, epsilon=epsilon, delta=delta, iterations=iterations, noise=noise,
        chains=chains, warmup=warmup, seed=seed, relation=relation, progress=progress,
        release_nonprivate=NONPRIVATE_STATS if release_clip_fraction else (),
        run_attrs=run_attrs,
    )

"""``stan_dp.sample``: one call from a Stan model, data and a budget to a private posterior.

The automatic path (``method="auto"`` or ``"gaussian"``):

1. **Validate and forecast** — before any data is touched: the budget, the
   relation (under add/remove the row count is private, so a public
   ``public_n`` must be declared), and the accuracy the budget can buy from
   public facts (:func:`stan_dp.adaptation.forecast.forecast`).  When the
   forecast gives some coordinate more than a :data:`EXCEED_PROBABILITY`
   chance of being off by more than :data:`FORECAST_LIMIT` posterior sds, a
   :class:`~stan_dp.honesty.UtilityWarning` is raised up front.
2. **Private adaptation** with the whole budget
   (:func:`stan_dp.adaptation.newton.private_mode`): a private mode, a
   private curvature and the covariance of the privacy noise in the mode,
   every release accounted (exact Gaussian composition).
3. **Noise-aware Gaussian approximation**: draws from
   ``N(mode, covariance + noise_covariance)`` in unconstrained space, mapped
   to Stan's constrained parameters.  Widening by the noise covariance keeps
   the intervals calibrated for the parameter when the mode is off by privacy
   noise (post-processing: no further privacy cost).

Why the Gaussian and not a chain: every MCMC iteration is a release, so at
the budgets of interest (n = 1e3-1e5, epsilon = 1-4) a chain's per-iteration
noise is orders of magnitude above the posterior's scale — the README's
benchmarks measured penalty fits 56-185 posterior sds off and DP HMC within
0.5 sd only at n = 1e5 — while the averaged one-step estimate spends the whole
budget on the one quantity that matters.  ``method="hmc"`` and the other
samplers stay available (``stan_dp.hmc`` etc.); ``auto`` chooses the Gaussian.
"""

from __future__ import annotations

import math
import os
from collections import Counter
import warnings
from typing import Any, NamedTuple

import numpy as np
from scipy import stats

from stan_dp.accounting import Budget, Release, gaussian_epsilon, validate_privacy_params
from stan_dp.accounting.validation import check_relation
from stan_dp.adaptation.curvature import flat_likelihood, log_coordinates
from stan_dp.adaptation.forecast import (exceed_probability, forecast, pld_mean_budget,
                                        whitened_grad_scale)
from stan_dp.adaptation.newton import private_mode
from stan_dp.adaptation.plan import (AdaptationSettings, adaptation_releases, clip_inflation,
                                     far_start_blind, planned_settings, rounds_share,
                                     scale_clip_inflation)
from stan_dp.adaptation.prior_start import START_SHARE, moves_scales, prior_mode_start
from stan_dp.adaptation.result import SADDLE_LIMIT, TAIL_MULTIPLE, AdaptationResult, scale_bias_per_row
from stan_dp.adaptation.whitened import WhitenedDensity
from stan_dp.density import check_row_density
from stan_dp.honesty import (DISPERSION_LEVEL, MOVING_WINDOW, PULL_SDS, UtilityWarning, emit,
                             moving_coordinates, over_dispersed, pulled_coordinates)
from stan_dp.inference import preceding_releases, resolve_init, validate_run_args, warn_weak_delta
from stan_dp.mechanisms import chain_streams
from stan_dp.output import (build_inference_data, constrain_draws, netcdf_safe_attrs, quantity_attrs,
                             with_transformed)
from stan_dp.version import __version__

__all__ = ["METHODS", "FORECAST_LIMIT", "sample", "choose_method"]

METHODS = ("auto", "gaussian", "hmc", "penalty", "subsampled_penalty", "barker")
"""Methods :func:`sample` accepts."""

FORECAST_LIMIT = 0.5
"""Error (posterior sds) that issue 13's target allows in every coordinate (0.5 sd or three
times the floor): a run warns when it is likely that some coordinate is off by more."""
EXCEED_PROBABILITY = 0.1
"""A run warns when the chance that some coordinate of the private mode is off by more than
:data:`FORECAST_LIMIT` exceeds this: before it starts from the public forecast, afterwards from
the released noise sds.  (A warning on the *typical* worst coordinate left one run in three at
n = 1e4, epsilon = 4 off by 0.51-0.60 sd without a warning.)"""

PRIOR_SHARE_LIMIT = 0.9
"""Warn when the prior supplies more than this share of a data-informed coordinate's curvature
(the prior outweighs the rows nine-fold there).  At the funnel neck of the bundled-test
hierarchical model (n = 1e4) the share was 0.97; at its proper mode below 1e-3."""

SKEW_FALSE_ALARM = 0.01
"""The skew check's shift counts (in the warning and in the chance of a miss) only beyond
``Phi^-1(1 - SKEW_FALSE_ALARM / (2 d))`` of its noise sds (:func:`shape_bias`: 3.3 at d = 11, 3.0 at
d = 4), so that its noise alone makes some coordinate count in at most 1 % of runs of a Gaussian
posterior.  At 2 sds it would have counted in 15 % of the runs at 1,000 rows, epsilon = 4, d = 11
(noise sd 0.56 posterior sds) and 31 % at epsilon = 1 (1.9); at 3,000 rows, epsilon = 16 its noise
is 0.034."""
SKEW_LIMIT = 0.25
"""Warn that the posterior is not Gaussian where the skew check's shift beyond its noise
(:func:`shape_bias`) exceeds this many posterior sds in some coordinate.  Released, at 3,000 rows,
epsilon = 16 (noise sd 0.02-0.03; 24 runs each), GLMs and published-style regressions shifted by
0.00-0.17 sds and a non-centred hierarchical logistic regression by 0.54-4.2 (its private modes
1.9-4.7 sds from NUTS's mean in ``log tau``, 15 of 24 with no warning before; docs/adaptation.md
§5, "A Gaussian that is not the posterior")."""
SKEW_CORRECTION_MAX = 1.0
"""The Gaussian approximation's centre moves from the private mode by the skew check's shift beyond
its noise (:func:`skew_correction`), at most this many posterior sds per coordinate: the check is a
second-order expansion, which a shift of a posterior sd or more has outgrown (the run warns there,
:data:`SKEW_LIMIT`).  Uncapped, a non-centred hierarchical logistic regression (1,000 rows,
epsilon = 16, shifts of up to 15 sds) ended 1.6 times farther from NUTS than the mode in geometric mean;
capped at 1, 0.76 times (docs/adaptation.md §5, "The centre moved by the shift")."""




def _as_model(model: Any, data: Any) -> Any:
    if isinstance(model, (str, os.PathLike)):
        if data is None:
            raise ValueError("a .stan path needs data=: a dict or the path of a JSON file")
        from stan_dp.model import RowModel

        return RowModel(model, data)
    if data is not None:
        raise ValueError("data= is only for a .stan path; a RowModel already holds its data")
    return model


def sample(
    model: Any,
    *,
    epsilon: float,
    delta: float,
    method: str = "auto",
    data: Any = None,
    chains: int = 4,
    draws: int = 1000,
    seed: int | np.random.SeedSequence | None = None,
    relation: str = "replace_one",
    public_n: int | None = None,
    init: Any = None,
    progress: bool = True,
    **method_options: Any,
):
    """A private posterior of a Stan model with only a model, data and a budget.

    Parameters
    ----------
    model : RowModel or path
        A :class:`stan_dp.RowModel`, or a ``.stan`` path together with ``data=``.
    epsilon, delta : float
        The whole budget (adaptation and sampling).
    method : {"auto", "gaussian", "hmc", "penalty", "subsampled_penalty", "barker"}
        ``"auto"`` and ``"gaussian"``: private adaptation with the whole budget
        and the noise-aware Gaussian approximation (module docstring).  The
        others spend part of the budget on the adaptation and run the seeds'
        samplers (:func:`stan_dp.hmc`, ...) in the adapted frame, every knob
        set from public facts; ``method_options`` override them.
    data : dict or path, optional
        With a ``.stan`` path.
    chains, draws : int
        Shape of the returned draws (for the Gaussian: independent draws).
    seed : int, SeedSequence or None
        ``None``: fresh OS entropy (publishable).  A fixed seed makes the run
        reproducible and is recorded as ``attrs["seeded"]``.
    relation : {"replace_one", "add_remove"}
        Neighbouring relation.  Under ``"add_remove"`` the row count is
        private: pass ``public_n``, a value chosen without looking at the data.
    public_n : int, optional
        Public row count for the bounds under add/remove.
    init : array or dict, optional
        Data-independent starting point of the mode search (default: zeros,
        the centre of Stan's default initialisation range, or a point towards
        the mode of the program's priors where they place a location away from
        zeros and the rows prefer it: one or two releases of 1 % of the budget,
        ``attrs["start_towards_prior_mode"]``; docs/adaptation.md §3, "The start").
    progress : bool
        Progress bars of the samplers.
    **method_options
        Passed to the sampler; for ``"gaussian"``: ``settings``
        (:class:`~stan_dp.adaptation.plan.AdaptationSettings`).

    Returns
    -------
    arviz.InferenceData
        ``posterior`` with Stan's names and shapes; ``attrs`` with the privacy
        report, the releases of the adaptation, the forecast, and
        ``warnings`` (also raised as :class:`~stan_dp.honesty.UtilityWarning`).

    Raises
    ------
    ValueError, TypeError
        For invalid arguments, before any data is touched.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    validate_privacy_params(epsilon, delta)
    check_relation(relation)
    if relation == "add_remove":
        if public_n is None:
            raise ValueError(
                "under relation='add_remove' the row count is private, and the automatic bounds "
                "depend on it: pass public_n=, a row count chosen without looking at the data "
                "(e.g. the planned sample size), or use relation='replace_one'")
    if public_n is not None and (isinstance(public_n, bool) or not isinstance(public_n, (int, np.integer))
                                 or public_n < 1):
        raise ValueError(f"public_n must be a positive integer, got {public_n!r}")
    model = _as_model(model, data)
    warn_weak_delta(delta, int(model.n_rows) if relation == "replace_one" else int(public_n))
    if method == "auto":
        method = choose_method(int(model.n_rows) if public_n is None else int(public_n),
                               int(model.dim), epsilon, delta, relation)
    if method == "gaussian":
        return _gaussian(model, epsilon=epsilon, delta=delta, chains=chains, draws=draws, seed=seed,
                         relation=relation, public_n=public_n, init=init, **method_options)
    return _mcmc(method, model, epsilon=epsilon, delta=delta, chains=chains, draws=draws, seed=seed,
                 relation=relation, public_n=public_n, init=init, progress=progress,
                 **method_options)


def _fitting_pld_mean(epsilon: float, delta: float, settings: AdaptationSettings) -> float:
    """The adaptation's PLD-mean budget, shrunk by ulps until its releases provably fit.

    Splitting ``M`` into shares rounds; the plan is checked with the exact
    accountant before any data is touched, so ``epsilon_spent <= epsilon``.
    """
    m = pld_mean_budget(epsilon, delta)
    for _ in range(200):
        plan = adaptation_releases(m, settings, 1, 1)   # settings.rounds is fixed by the caller
        spent = gaussian_epsilon([r.noise_multiplier for r in plan], [r.count for r in plan], delta)
        if spent <= epsilon:
            return m
        m *= 1.0 - 1e-12
    raise RuntimeError("could not fit the adaptation in the budget")  # pragma: no cover


class _Adapted(NamedTuple):
    result: AdaptationResult
    attrs: dict[str, Any]
    """Adaptation attributes; ``"warnings"`` holds what it already raised."""
    releases: list[Release]
    draw_seed: Any


def _validated_start(model: Any, init: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """The search's start and, without ``init=``, the prior's mode the rows may choose instead.

    The start is ``init`` or zeros unconstrained (Stan's default initialisation centre).  Without
    ``init=``, where the program's priors have a mode away from zeros along some location (a
    coordinate not on Stan's log transform;
    :func:`~stan_dp.adaptation.prior_start.prior_mode_start`, public: the program and its shared
    data, no row), that point is returned too, for the search's start choice
    (:func:`~stan_dp.adaptation.prior_start.choose_start`); else ``None``.  A prior's mode along
    scales alone is not offered: at the default locations the rows would judge a scale by the
    outcome's size (docs/adaptation.md §3, "The start").  Nor is any where the density does not say
    which coordinates are scales (no ``log_coordinates``: a density written in Python, not a
    program; a ``RowModel`` always says).
    """
    start = resolve_init(model, init, 1)
    start = np.zeros(int(model.dim)) if start is None else start[0]
    if not np.isfinite(float(model.log_prior(start))):
        raise ValueError("the log prior is not finite at the starting point; pass init=")
    if init is not None or getattr(model, "log_coordinates", None) is None:
        return start, None
    mode, moved = prior_mode_start(model, start)
    scales = log_coordinates(model, start.size)
    locations = moved if scales is None else moved & ~scales
    return start, (mode if locations.any() else None)


def _release_counts(releases: list[Release]) -> Counter:
    """Releases per noise multiplier (the composition depends on nothing else)."""
    counts: Counter = Counter()
    for r in releases:
        counts[r.noise_multiplier] += r.count
    return counts


def _adaptation_plan(epsilon: float, delta: float, share: float, settings: AdaptationSettings,
                     n_public: int, dim: int) -> tuple[AdaptationSettings, float, list[Release]]:
    """The adaptation's settings (rounds fixed), PLD-mean budget and releases: public facts only."""
    settings = planned_settings(settings, n_public, dim, pld_mean_budget(epsilon, delta) * share)
    budget_m = _fitting_pld_mean(epsilon, delta, settings) * share
    return settings, budget_m, adaptation_releases(budget_m, settings, n_public, dim)


def rounds_over_dispersed(result: AdaptationResult) -> bool:
    """A settled pool whose rounds disagree far beyond their noise (:func:`stan_dp.honesty
    .over_dispersed`): the widening covers their scatter, not a shift they share, and the Gaussian
    approximation says so (``attrs["rounds_over_dispersed"]``)."""
    return bool(result.settled and over_dispersed(result.dispersion, result.mode.size,
                                                  result.rounds_averaged))


def _simplex(model: Any) -> bool:
    """Whether the model's program declares a ``simplex`` parameter (public; models without a
    program say no): :attr:`~stan_dp.adaptation.plan.AdaptationSettings.raise_curvature`'s
    default.  A multinomial logit with ``simplex[4]`` base shares on an uncentred age
    (``tests/stan/multinomial_logit.stan``, 3,000 rows, epsilon = 16, 6 seeds) read a saddle in
    5 runs without the raise, where its log density is concave, 1.25-12.6 NUTS sds off and none
    mixed; with it none did, 0.46-0.78 off and 3 mixed (docs/adaptation.md §3, "The curvature
    bound raised for a simplex")."""
    return bool(getattr(model, "simplex_parameters", ()))


def _log_transformed(model: Any) -> bool:
    """Whether the model's program declares a parameter with a lower bound only (public; models
    without a program, such as NumPy row densities, say no).

    Its per-row gradients are skewed like ``r^2 - 1``, so :func:`_adapt` raises the clip bound
    near the mode even where the forecast warns, and reports the clipping bias of each row beyond
    it as that skew's tail scale (:func:`~stan_dp.adaptation.result.scale_bias_per_row`).  Paired
    runs (``adaptation_trace.py``, 24 per cell, Stan against NUTS; docs/adaptation.md §3, "A scale
    or shape parameter raises the bound by default"): at 1,000 rows, epsilon = 4, `beta` 0.557,
    Weibull 0.615, `earnings` 0.727, gamma 0.755, Student-t 0.899 in the geometric mean of the
    worst error (each p < 0.01); the GLMs without such a parameter, which lose from the raise where
    the forecast warns (a Poisson GLM at 10^4 rows, epsilon = 1: 1.13, 1.34 with a predictor in
    metres), keep the rms-optimal bound.
    """
    return bool(getattr(model, "log_transformed_parameters", ()))


SCALE_FREE_FAMILIES = ("bernoulli", "binomial", "poisson", "categorical", "ordered", "multinomial")
"""Name prefixes of the outcome families without a scale or shape parameter (``bernoulli_logit``,
``poisson_log_glm``, ``ordered_logistic``, ...): a log-transformed parameter of a program whose
outcome families are all among them is a prior's scale (a hierarchical ``tau``), not the
likelihood's."""


def _likelihood_scale(model: Any) -> bool:
    """Whether the program declares a log-transformed parameter and some outcome family of it has
    a scale or shape (public: the program's declarations and sampling statements on row variables;
    models without a program say no).

    Such a likelihood's rows' scores are skewed like ``z^2 - 1`` along its scale, so
    :func:`_adapt` starts the gradient bound at
    :func:`~stan_dp.adaptation.plan.scale_clip_inflation`'s ``kappa``, not :func:`clip_inflation`'s.
    A hierarchical logistic regression's ``tau`` (every family Bernoulli) is left out: its rows'
    scores are a slope's, and 1.3 times the bound cost it 1.59 in the battery at 1,000 rows,
    epsilon = 16.
    """
    families = tuple(getattr(model, "outcome_families", ()) or ())
    return _log_transformed(model) and any(not f.startswith(SCALE_FREE_FAMILIES) for f in families)


def _adapt(model: Any, *, epsilon: float, delta: float, share: float, seed: Any, relation: str,
           public_n: int | None, start: np.ndarray, settings: AdaptationSettings,
           trace: list | None = None, prior_mode: np.ndarray | None = None) -> _Adapted:
    """Forecast (public), then the private adaptation with ``share`` of the budget's PLD mean.

    Everything up to the private search touches no data; the caller has
    validated all its own arguments before calling.  ``trace``, if given,
    receives :func:`private_mode`'s per-round dicts (released values only;
    ``benchmarks/adaptation_trace.py`` reads them).  ``prior_mode``, if given (public: the
    program's priors, :func:`_validated_start`), is the other start the rows choose from, with
    ``settings.start_share`` of the budget (``None``:
    :data:`~stan_dp.adaptation.prior_start.START_SHARE`; 0: no choice, the default start).
    """
    if not isinstance(settings, AdaptationSettings):
        raise TypeError("settings must be an AdaptationSettings")
    dim = int(model.dim)
    if prior_mode is None:
        settings = settings._replace(start_share=0.0)
    else:
        scales = log_coordinates(model, dim)
        settings = settings._replace(start_releases=1 + int(moves_scales(start, prior_mode, scales)))
        if settings.start_share is None:
            settings = settings._replace(start_share=START_SHARE)
    n_public = int(model.n_rows) if public_n is None else int(public_n)
    settings, budget_m, releases = _adaptation_plan(epsilon, delta, share, settings, n_public, dim)
    final_share = rounds_share(settings) * (1.0 - settings.clip_share) * (1.0 - settings.hessian_share)
    if settings.kappa is None and _likelihood_scale(model):   # public: the program
        per_kappa = forecast(n_public, dim, epsilon, delta, relation=relation, kappa=1.0,
                             share=final_share * share, limit=FORECAST_LIMIT).expected_error
        settings = settings._replace(kappa=scale_clip_inflation(
            clip_inflation(settings, n_public, budget_m, relation), n_public, dim, per_kappa))
    fc = forecast(n_public, dim, epsilon, delta, relation=relation,
                  kappa=clip_inflation(settings, n_public, budget_m, relation),
                  share=final_share * share, limit=FORECAST_LIMIT)
    attrs: dict[str, Any] = {"warnings": "", "flat_likelihood": flat_likelihood(model)}
    if fc.exceed_probability > EXCEED_PROBABILITY:
        emit([f"forecast from public facts (n={n_public}, dim={dim}, epsilon={epsilon:g}, "
              f"delta={delta:g}): the private mode is expected to be off by about "
              f"{fc.expected_error:.2g} posterior sds per coordinate, {fc.worst_error:.2g} in the "
              f"worst of them, and by more than {FORECAST_LIMIT:g} in some coordinate with "
              f"probability {fc.exceed_probability:.0%} (information floor {fc.floor:.2g}); a "
              "larger epsilon or more rows would help"], attrs, stacklevel=4)
    if far_start_blind(settings, n_public, budget_m):
        emit([f"at this size (n={n_public}, epsilon={epsilon:g}) the private search can only refine "
              "a start already near the posterior: its far phase is planned out and its clip "
              "bounds cannot be raised (the noise of their count releases is a quarter of the rows "
              "or more), so from a start far from the posterior (the default: zeros "
              "unconstrained, every scale parameter at 1, or as far towards the mode of the "
              "program's priors as the rows prefer) it does not arrive; in the benchmark "
              "models at 40 rows and epsilon = 16, 100 rows and epsilon = 4, or 434 rows and "
              "epsilon = 1 no search settled and the median error was 5-15 posterior sds (0.9-1.8 "
              "when started at the posterior mean). A data-independent init= within a few "
              "posterior sds, more rows or a larger epsilon would help"], attrs, stacklevel=4)

    clip_by_default = settings.adaptive_clip is None
    if clip_by_default:
        # where the forecast claims the budget buys 0.5 sd, clipping bias must not break the
        # claim (docs/adaptation.md §3, "Clipping bias"); where it warns anyway, keep the
        # rms-optimal bound of clip_inflation, unless the program declares a log-transformed
        # parameter, whose rows' gradients are skewed (the rows clipping cuts push one way)
        settings = settings._replace(adaptive_clip=bool(fc.exceed_probability <= EXCEED_PROBABILITY
                                                        or _log_transformed(model)))
    if settings.raise_curvature is None:   # the program is public: a simplex's rows curve both ways
        settings = settings._replace(raise_curvature=_simplex(model))
    # ---- nothing above touched the data ----
    root = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    adapt_seed, draw_seed = root.spawn(2)
    stream = chain_streams(None if seed is None else adapt_seed, 1)[0]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result = private_mode(model, n_public=n_public, pld_mean=budget_m, relation=relation,
                              rng_noise=stream.noise, init=start, settings=settings, trace=trace,
                              prior_mode=prior_mode)
    if _log_transformed(model):   # the program is public: its scale's clipped rows push one way
        result = result._replace(bias_per_row=scale_bias_per_row(result.grad_clip * result.clip_adjust,
                                                                 n_public))
    made, planned = _release_counts(result.ledger.releases()), _release_counts(releases)
    if made != planned:   # the samplers' accounting composes the plan: it must be what was done
        raise RuntimeError("the private adaptation made releases that its accounted plan does not "
                           f"list (made {dict(made)}, planned {dict(planned)}); nothing is returned")
    # ---- post-processing of released values only from here on ----
    post_sd = result.posterior_sd
    noise_sd = np.sqrt(np.maximum(np.diag(result.noise_covariance), 0.0)) / post_sd
    moving: list[str] = []
    pulled: list[str] = []
    if not result.settled:
        report_sd = np.sqrt(np.maximum(np.diag(result.covariance + result.noise_covariance), 0.0))
        walking_flags = moving_coordinates(result.path, report_sd)
        moving = _moving_parameters(model, result.path, walking_flags)
        pulling = pulled_coordinates(result.pull)
        if pulling.shape == walking_flags.shape:   # a walk already named is not named twice
            names = _coordinate_names(model, pulling.size)
            pulled = [f"{names[j]} ({'up' if result.pull[-1, j] > 0 else 'down'})"
                      for j in np.flatnonzero(pulling & ~walking_flags)]
        walking = ("" if not moving else
                   f"; it was still walking one way when its rounds ran out ({'; '.join(moving)}, "
                   "each step the same way and together beyond the reported spread): it ran out "
                   "of rounds before the mode along these, so the result is not where the "
                   "posterior is — typically it started far from the posterior (the default "
                   "init, zeros unconstrained, puts a positive parameter at 1, unless the rows "
                   "chose a point towards the mode of the program's priors: a data-independent "
                   "init= on the scale you expect can help, e.g. a scale parameter near the "
                   "spread you expect of your outcome or a log-link intercept near the log of the "
                   "outcome's level, though a guess a unit off is still many posterior sds away at "
                   "a small budget, and so can priors on that scale, such as mu ~ normal(170, 20) "
                   "for heights in cm, whose mode the rows are offered as a start), or the budget "
                   "is small for this many rows")
        if pulled:
            walking += (f"; the released gradient still pulled it one way along {', '.join(pulled)} "
                        f"(beyond {PULL_SDS:g} noise sds the same way in each of its last "
                        f"{MOVING_WINDOW} rounds, 'up' meaning larger unconstrained values): the mode "
                        "is farther that way than the search got — a data-independent init= on the "
                        "scale you expect for these can help")
            back = _walked_past(model, result.path, settings.far_rounds, result.pull,
                                pulling & ~walking_flags)
            if back:
                walking += (f"; the far phase had first moved {', '.join(back)} the other way: "
                            "where most rows' gradients point one way and a few the other way much "
                            "harder (the intercept of a binary outcome far from 50 % or of counts that "
                            "are mostly 0), its steps "
                            "follow the many past the mode, and an init= there does not help; "
                            "--far-phase off (settings=AdaptationSettings(far_rounds=0)) starts the "
                            "Newton rounds at the init instead (docs/adaptation.md §7, \"Imbalanced "
                            "binary outcomes\")")
        if result.checked >= 0:
            walking += (f"; its final check found that the rows prefer the point of its round "
                        f"{result.checked} to its last estimate beyond the check's noise, and that "
                        "point is reported (the search jumped where the rows are worse)")
        ridge = _centring_hint(model) + _group_hint(model) + _shape_hint(model)
        emit(["the private mode search did not settle (its last steps were still large or went "
              f"back): the mode may be far from the posterior's{walking}; a larger epsilon, more "
              "rows, a data-independent init= nearer the posterior, or rescaled parameters would "
              f"help{ridge}"], attrs, stacklevel=4)
    if result.prior_share > PRIOR_SHARE_LIMIT:
        emit([f"at the private mode the prior supplies {100 * result.prior_share:.3g}% of the "
              "curvature of a parameter the rows depend on: the mode is held by the prior, not "
              f"the data — either a very strong prior,{_dispersion_limit(model)} or (typically) "
              "the degenerate neck of a hierarchical model (a group sd near 0, the group effects "
              "at their mean), where a Gaussian is not the posterior; a non-centred "
              "parametrisation may help"], attrs, stacklevel=4)
    if result.saddle:
        emit([_saddle_warning(model, result)], attrs, stacklevel=4)
    shape = shape_bias(result)
    if result.heavy_tail:
        raised = ("" if result.clip_adjust == 1.0 else
                  f" (the rule's bound, before the run raised it {result.clip_adjust:.2g}-fold)")
        emit([f"about {result.tail_rows:.0f} rows (released count, noise sd {result.tail_rows_sd:.2g}) "
              f"have per-row gradients beyond {TAIL_MULTIPLE:g} times the clip bound{raised} near the "
              "private mode, so clipping bounds their pull and biases the mode. Typically a heavy tail "
              "(outlying predictors or outcomes): the non-private posterior is pulled by a few "
              "rows, which privacy must bound, and the private mode can be many posterior sds "
              f"from it; {_tail_advice(model)}"], attrs, stacklevel=4)
    # where the forecast warns anyway (the bound not adaptive) the bias figure errs high: the rows
    # beyond twice the bound are added as if they all pushed one way (docs/adaptation.md §3,
    # "Counted in every run"); where the run is about to claim 0.5 sd, the count-calibrated figure
    # alone (with the tail term a D = 3 logistic regression with normal predictors, n = 1e4,
    # epsilon = 4, warned in 5 of 16 runs instead of 4)
    tail_bias = 0.0 if settings.adaptive_clip else result.tail_bias_bound
    bias = result.clipping_bias_bound + tail_bias
    attrs.update({
        "tail_rows": float(result.tail_rows) if np.isfinite(result.tail_rows) else "",
        "tail_rows_sd": float(result.tail_rows_sd) if np.isfinite(result.tail_rows_sd) else "",
        "prior_share": float(result.prior_share),
        "adaptation_share": float(share),
        "adaptation_releases": len(result.ledger.entries),
        "release_summary": result.ledger.summary(),
        "grad_clip_whitened": float(result.grad_clip),
        "grad_clip_raised": float(result.clip_adjust),
        "curvature_clip_raised": float(result.curvature_adjust),
        "raise_curvature": bool(settings.raise_curvature),
        "raise_curvature_tail": bool(settings.raise_curvature_tail),
        "adaptive_clip": bool(settings.adaptive_clip),
        "adaptive_clip_by_default": bool(clip_by_default),
        "frame_turned": bool(result.frame_turned),
        "search_settled": bool(result.settled),
        "final_check_round": int(result.checked),
        "still_moving": "; ".join(moving),
        "still_pulled": "; ".join(pulled),
        "rounds_averaged": int(result.rounds_averaged),
        "round_dispersion": float(result.dispersion) if np.isfinite(result.dispersion) else "",
        "random_effects_pooling": bool(result.dispersed),
        "max_noise_sd_in_posterior_sds": float(np.max(noise_sd)),
        "clipping_bias_bound": bias,
        "noise_exceed_probability": _miss_probability(noise_sd, tail_bias, result, shape),
        "least_curvature": (float(result.least_curvature) if np.isfinite(result.least_curvature)
                            else ""),
        "saddle": bool(result.saddle),
        "skew_shift": float(np.max(np.abs(result.skew_shift))) if result.skew_shift is not None else 0.0,
        "skew_shift_sd": (float(np.max(result.skew_shift_sd)) if result.skew_shift_sd is not None
                          else 0.0),
        "gaussian_shape_ok": not float(np.max(shape, initial=0.0)) > SKEW_LIMIT,
        "start_towards_prior_mode": ("" if result.start_choice is None
                                     else float(result.start_choice.fraction)),
        "start_scales_towards_prior_mode": ("" if result.start_choice is None
                                            else float(result.start_choice.scale_fraction)),
        "forecast_error": float(fc.expected_error),
        "forecast_floor": float(fc.floor),
        "public_n": n_public if relation == "add_remove" else "",
        "stan_dp_version": __version__,
    })
    return _Adapted(result, attrs, releases, draw_seed)


def _walked_past(model: Any, path: np.ndarray, far_rounds: int, pull: np.ndarray,
                 pulled: np.ndarray) -> list[str]:
    """Names of the ``pulled`` coordinates that the far phase had moved the other way: its net move
    (``path[far_rounds] - path[0]``, the far rounds' points come first in ``path``) has the sign
    opposite to the last round's released pull (``pull``, one row per round; the caller has flagged
    ``pulled`` from it).  Post-processing of released values."""
    if not far_rounds or len(path) <= far_rounds:
        return []
    moved = np.asarray(path[far_rounds], dtype=float) - np.asarray(path[0], dtype=float)
    last = np.asarray(pull[-1], dtype=float)
    names = _coordinate_names(model, last.size)
    return [names[j] for j in np.flatnonzero(pulled & (moved * last < 0.0))]


SADDLE_NAMES = 3
""":func:`_saddle_warning` names at most this many coordinates of the upward direction."""


def _saddle_warning(model: Any, result: AdaptationResult) -> str:
    """The warning of :attr:`AdaptationResult.saddle`: where the search stopped, the log density
    curves upward along a direction, named by its largest coordinates in reported posterior sds.
    Post-processing of released values."""
    names = _coordinate_names(model, np.asarray(result.mode).size)
    sd = result.posterior_sd
    direction = (np.zeros(sd.size) if result.upward is None
                 else np.where(np.isfinite(result.upward), result.upward / sd, 0.0))
    order = [j for j in np.argsort(-np.abs(direction))[:SADDLE_NAMES] if direction[j] != 0.0]
    along = ", ".join(names[j] for j in order) if order else "some direction"
    causes, advice = _saddle_causes(model)
    return (f"the private mode search stopped where the curvature released in its last rounds is "
            f"negative along a direction (mostly {along}; its least eigenvalue "
            f"{result.least_curvature:.2g} times the release's noise, below -{SADDLE_LIMIT:g}): the "
            f"log density curves upward there, so this is not a mode but a saddle point — {causes} — "
            "and what is built there from the curvature's absolute values (the Gaussian "
            "approximation, or the chains' start and mass matrix) does not represent the posterior. "
            f"{advice}")


MIXTURE_SADDLE = ("a mixture whose components merged into one",
                  "for a multimodal posterior (mixtures, symmetric or label-switching parameters) a "
                  "data-independent init= near the mode you expect (e.g. mixture means spread over "
                  "the outcome's range) or a parametrisation that removes the symmetry may help, where "
                  "more rows or a larger epsilon will not")
FUNNEL_SADDLE = ("the neck of a hierarchical funnel",
                 "for a hierarchical model, more rows per group or a larger epsilon (the posterior "
                 "nearer Gaussian) may help")
""":func:`_saddle_causes`: the two causes the saddle warning names, each with its advice."""
DISPERSION_ADVICE = "for a dispersion, a prior on its scale or the simpler family may help"
NO_CAUSE_SADDLE = ("the program has no mixture, centred hierarchical statement or dispersion that "
                   "explains one, so the neck of a non-centred hierarchy's funnel or a point short of "
                   "the mode, where the curvature changes sign",
                   "for a hierarchical model, more rows per group or a larger epsilon may help; "
                   "otherwise a data-independent init= nearer the posterior or rescaled parameters may")


def _saddle_causes(model: Any) -> tuple[str, str]:
    """The saddle warning's examples of a cause and its advice, fitted to the program.

    Read from the program (public): a merged mixture only where it writes one
    (``model.writes_mixture``), a hierarchical funnel's neck only where it has a centred
    hierarchical statement (``model.hierarchical_locations``), a dispersion heading to its limit
    only where its outcome family has one (:func:`_dispersion_saddle`), a shape at its stationary
    point only where the family has one (:func:`_stationary_shape_saddle`).  A program with none of
    them is told of a non-centred hierarchy's funnel (which the program's text does not tell
    from a regression's standard-normal coefficients: session 50's non-centred ``hlogit`` read
    saddles) or a point short of the mode (:data:`NO_CAUSE_SADDLE`); a density whose program is
    not known (``writes_mixture`` None or absent) keeps both general examples.  The session-66
    audit's multinomial logit and negative binomial were told of mixtures and funnels they did not
    have (docs/adaptation.md §5).
    """
    mixture = getattr(model, "writes_mixture", None)
    if mixture is None:
        causes = [MIXTURE_SADDLE, FUNNEL_SADDLE]
    else:
        causes = ([MIXTURE_SADDLE] if mixture else []) + (
            [FUNNEL_SADDLE] if getattr(model, "hierarchical_locations", None) else [])
    texts = [" or ".join(cause for cause, _ in causes) + ", where the curvature changes sign"] if causes else []
    advice = [a for _, a in causes]
    dispersion = _dispersion_saddle(model)
    if dispersion:
        texts.append(dispersion)
        advice.append(DISPERSION_ADVICE)
    shape = _stationary_shape_saddle(model)
    if shape:
        texts.append(shape[0])
        advice.append(shape[1])
    if not texts:
        texts, advice = [NO_CAUSE_SADDLE[0]], [NO_CAUSE_SADDLE[1]]
    joined = "; ".join(advice)
    return ", or ".join(texts), joined[0].upper() + joined[1:] + "."


COUNT_NODES = 16
"""Gauss-Hermite nodes of :func:`_miss_probability`'s average over the clipped-row count's noise."""


def shape_bias(result: AdaptationResult) -> np.ndarray:
    """Per coordinate, the skew check's shift beyond its noise (posterior sds).

    ``max(|shift_j| - k sd_j, 0)`` with ``k = Phi^-1(1 - SKEW_FALSE_ALARM / (2 d))``
    (:data:`SKEW_FALSE_ALARM`): the part of the posterior mean's distance from the reported mode
    that the posterior's shape, not the check's noise, accounts for (zeros where no check was
    made).  Post-processing of the released check.
    """
    if result.skew_shift is None:
        return np.zeros(np.asarray(result.mode).size)
    shift = np.asarray(result.skew_shift, dtype=float)
    sd = np.zeros_like(shift) if result.skew_shift_sd is None else np.asarray(result.skew_shift_sd)
    k = float(stats.norm.isf(SKEW_FALSE_ALARM / (2 * max(shift.size, 1))))
    excess = np.abs(shift) - k * sd
    return np.where(np.isfinite(excess), np.maximum(excess, 0.0), np.inf)


def skew_correction(result: AdaptationResult) -> np.ndarray:
    """How far the Gaussian approximation's centre moves from the private mode (unconstrained units).

    Per coordinate ``sign(shift_j) min(b_j, SKEW_CORRECTION_MAX) sd_j``, with ``b`` the skew check's
    shift beyond its noise (:func:`shape_bias`), ``shift`` the released shift and ``sd`` the
    reported posterior sd: the posterior mean lies from the mode by the shift to second order (the
    classical mean correction of a Laplace approximation, docs/adaptation.md §5), and only its part
    beyond ``k`` noise sds moves the centre, so that a Gaussian posterior's centre stays at the mode
    in 99 % of runs (:data:`SKEW_FALSE_ALARM`).  Zeros where no check was made or it is not finite.
    Post-processing of released values.
    """
    shape = shape_bias(result)
    if result.skew_shift is None:
        return np.zeros_like(shape)
    moved = np.sign(result.skew_shift) * np.minimum(shape, SKEW_CORRECTION_MAX) * result.posterior_sd
    return np.where(np.isfinite(moved), moved, 0.0)


def _miss_probability(noise_sd: np.ndarray, fixed_bias: float, result: AdaptationResult,
                      shape: np.ndarray | None = None) -> float:
    """Chance that some coordinate of the private mode is off by more than :data:`FORECAST_LIMIT`.

    The noise is ``noise_sd`` per coordinate; the bias is ``fixed_bias`` (the tail term, or 0)
    plus the clipping bias, ``clipping_bias_per_row`` times the count of clipped rows.  That count
    is released with noise sd ``s`` (``result.clipped_rows_sd``) and is often small against it
    (a beta regression at 1e4 rows, epsilon = 4: 2 rows released with sd 9, while its bound
    clipped 23 rows without noise and the precision parameter ended 0.87 sd off without a
    warning), so the chance averages over the count's noise, ``N ~ N(released, s^2)`` cut at 0
    (:data:`COUNT_NODES`-point Gauss-Hermite), instead of taking the released count as known.
    The bias is a vector of about that length, its direction unknown: taken all on the
    coordinate with the largest noise (where it most raises the chance of a miss).  Post-processing
    of released values.  ``shape`` (:func:`shape_bias`, per coordinate) adds where it falls: the
    skew check says which coordinate its shift is in.
    """
    worst = np.arange(noise_sd.size) == np.argmax(noise_sd)
    shape = np.zeros(noise_sd.size) if shape is None else np.asarray(shape, dtype=float)

    def at(count: float) -> float:
        bias = fixed_bias + result.clipping_bias_per_row * max(count, 0.0)
        return exceed_probability(noise_sd, FORECAST_LIMIT, bias=np.where(worst, bias, 0.0) + shape)

    count, sd = result.clipped_rows, result.clipped_rows_sd
    if not np.isfinite(count):   # no count made: the fixed bias alone
        return at(0.0)
    if not (np.isfinite(sd) and sd > 0.0):
        return at(count)
    nodes, weights = np.polynomial.hermite_e.hermegauss(COUNT_NODES)
    return float(sum(w * at(count + sd * x) for x, w in zip(nodes, weights)) / np.sum(weights))


HEAVY_TAILED_FAMILIES = frozenset({"student_t", "cauchy"})
"""Outcome families whose per-row gradient along the location and the scale stays bounded however
far an outcome lies from its location: a Student-t's score in the location is
``(nu + 1) r / (nu s^2 + r^2)`` for the residual ``r``, in ``log s`` it is
``(nu + 1) r^2 / (nu s^2 + r^2) - 1``.  Along a Student-t's ``nu`` it still grows, like
``-log |r|`` (:data:`DEGREES_OF_FREEDOM_FAMILIES`)."""

DEGREES_OF_FREEDOM_FAMILIES = frozenset({"student_t"})
"""Heavy-tailed families with a tail parameter whose per-row score grows without bound in an
outlying outcome (slowly): outliers can still pull it beyond the clip bound (docs/adaptation.md
§3, a Student-t's outliers moving ``nu``)."""

BOUNDED_OUTCOME_FAMILIES = frozenset({
    "bernoulli", "bernoulli_logit", "bernoulli_logit_glm", "categorical", "categorical_logit",
    "categorical_logit_glm", "ordered_logistic", "ordered_probit", "ordered_logistic_glm"})
"""Outcome families whose outcome is one of a few values: a row's gradient is bounded by its
predictors (``(y - p) x`` for a logistic regression), never by its outcome's size; but where one
class is rare (share ``p``) its rows' gradients are about ``1/p`` times the others' in the
posterior's units (``(1 - p) x`` against ``p x``, each over the Fisher scale ``sqrt(n p) |x|``), so
the heavy-tail advice names a rare outcome too."""

LIGHT_TAILED_ALTERNATIVE = {"normal": "student_t in place of normal",
                            "normal_id_glm": "student_t in place of normal_id_glm",
                            "lognormal": "a Student-t on the log outcome in place of lognormal",
                            "poisson": "neg_binomial_2 in place of poisson",
                            "poisson_log": "neg_binomial_2_log in place of poisson_log",
                            "poisson_log_glm": "neg_binomial_2_log_glm in place of poisson_log_glm"}
"""Outcome families whose per-row gradient grows with an outlying outcome, with the heavier-tailed
likelihood that bounds or slows that growth."""


DISPERSION_FAMILIES = {"neg_binomial_2": "phi", "neg_binomial_2_log": "phi",
                       "neg_binomial_2_log_glm": "phi", "neg_binomial": "beta",
                       "beta_binomial": "alpha + beta"}
"""Outcome families with a dispersion parameter whose limit is a simpler family, with the argument
that goes to infinity there (``neg_binomial_2``'s ``phi``: the Poisson).  Near that limit the rows
barely inform it, and the prior holds it."""


def _dispersion_family(model: Any) -> str:
    """The program's outcome family from :data:`DISPERSION_FAMILIES` (public: the program's
    sampling statements on row variables; the first by name where several), or ``""``."""
    families = sorted(set(getattr(model, "outcome_families", ()) or ()) & set(DISPERSION_FAMILIES))
    return families[0] if families else ""


def _dispersion_limit(model: Any) -> str:
    """The prior-share warning's example for a program whose outcome family has a dispersion
    parameter (:func:`_dispersion_family`): an audit's negative binomial with 70 % zeros was told
    only of a hierarchical funnel's neck while its ``phi`` ran towards the Poisson limit
    (docs/adaptation.md §7)."""
    family = _dispersion_family(model)
    if not family:
        return ""
    return (f" a dispersion the rows barely inform (the program's {family}: its "
            f"{DISPERSION_FAMILIES[family]} heading to infinity, where the rows look like "
            f"{'a binomial' if family == 'beta_binomial' else 'a Poisson'}: a prior on the "
            "dispersion's scale, or the simpler family, may fit),")


def _dispersion_saddle(model: Any) -> str:
    """The saddle warning's example for a program whose outcome family has a dispersion parameter
    (:func:`_dispersion_family`): towards its limit the log density flattens along it and its
    curvature can change sign.  An audit's negative binomial with 70 % zeros read a saddle with
    ``phi`` running towards the Poisson limit, and was told only of mixtures and funnels."""
    family = _dispersion_family(model)
    if not family:
        return ""
    return (f"a dispersion heading to its limit (the program's {family}: "
            f"{DISPERSION_FAMILIES[family]} towards infinity, where the log density flattens)")


STATIONARY_SHAPE_FAMILIES = frozenset({"skew_normal"})
"""Outcome families whose shape parameter has a stationary point of the likelihood at 0 whatever the
data.  For ``skew_normal(xi, omega, alpha)`` a row's log density is ``log 2 - log omega + log phi(z) +
log Phi(alpha z)`` with ``z = (y - xi) / omega``; at ``alpha = 0`` the shape's score is ``sqrt(2/pi)
z`` and the location's ``z / omega``, collinear (the information is singular there: Azzalini 1985),
so at the normal fit's ``xi``, where the ``z`` sum to 0, the shape's score sums to 0 too and the
profile log-likelihood in the shape is stationary at 0.  The default start, zeros unconstrained, is
that point: a skew-normal of incomes (800 rows, epsilon = 16, noise seed 2) stopped at shape 0.12
against NUTS's 2.9, 7-17 sds off, and read a saddle (docs/measured.md, "Programs as users write
them")."""


def _stationary_shape_saddle(model: Any) -> tuple[str, str] | None:
    """The saddle warning's cause and advice for a program whose outcome family has a stationary
    shape (:data:`STATIONARY_SHAPE_FAMILIES`; public: the program's sampling statements on row
    variables), or ``None``."""
    families = sorted(set(getattr(model, "outcome_families", ()) or ()) & STATIONARY_SHAPE_FAMILIES)
    if not families:
        return None
    return (f"a shape near 0 (the program's {families[0]}: its likelihood's profile in the shape, "
            "the last argument, is stationary at 0 whatever the data, and the default start puts "
            "it there)",
            f"for a {families[0]}, a data-independent init= of its shape with the sign you expect "
            "(e.g. 2 for an outcome with a long right tail) may help")


def _tail_advice(model: Any) -> str:
    """The heavy-tail warning's advice, fitted to the program's outcome likelihood.

    ``model.outcome_families`` (public: the program's sampling statements on row variables) says
    where the large per-row gradients can come from.  A likelihood that already bounds an
    outlying outcome's pull (:data:`HEAVY_TAILED_FAMILIES`) or an outcome of a few values
    (:data:`BOUNDED_OUTCOME_FAMILIES`) leaves the predictors, and a Student-t's degrees of freedom
    (:data:`DEGREES_OF_FREEDOM_FAMILIES`): such a program is not told to use a robust likelihood.
    A light-tailed one (:data:`LIGHT_TAILED_ALTERNATIVE`) is told which likelihood to try.
    Anything else, several families, or none read, keeps the general advice.  A program that
    weights each row's log density by a row variable (``likelihood_weights``: ``target += w[n] *
    normal_lpdf(...)``) is told first that its heavily weighted rows are the likely ones.
    """
    weights = tuple(getattr(model, "likelihood_weights", ()) or ())
    if weights:
        listed = ", ".join(weights)
        return (f"the program weights each row's log density by {listed}: a row of weight 10 pulls "
                "like 10 rows, and privacy bounds every row's pull alike, so the heavily weighted rows "
                f"are the likely ones clipped; capping {listed} at a bound chosen without looking at "
                "the data (which changes the model) or more rows would help")
    families = tuple(getattr(model, "outcome_families", ()) or ())
    predictors = "transforming heavy-tailed predictors (e.g. log of an income)"
    if len(families) == 1:
        family = families[0]
        if family in DEGREES_OF_FREEDOM_FAMILIES:
            return (f"the program's likelihood ({family}) bounds an outlying outcome's pull on the "
                    "location and scale but not on the degrees of freedom (that score grows like "
                    f"log |residual|), so the large gradients come from the predictors or from "
                    f"outliers moving the degrees of freedom: {predictors}, a prior that says more "
                    "about the degrees of freedom, or more rows would help")
        if family in HEAVY_TAILED_FAMILIES:
            return (f"the program's likelihood ({family}) already bounds an outlying outcome's pull, "
                    f"so the large gradients come from the predictors: {predictors} or more rows would "
                    "help")
        if family in BOUNDED_OUTCOME_FAMILIES:
            return (f"the program's likelihood ({family}) has outcomes of a few values, so the large "
                    "gradients come from the predictors or from a rare outcome (in the posterior's "
                    "units a row of a class of a few percent pulls about 1/p times as hard as one of "
                    f"the common class): {predictors}, or more rows (more of the rare class), would "
                    "help")
        if family in LIGHT_TAILED_ALTERNATIVE:
            return (f"{predictors}, a heavier-tailed likelihood "
                    f"({LIGHT_TAILED_ALTERNATIVE[family]}) if the outcomes have outliers, or more "
                    "rows would help")
    return f"{predictors}, a robust likelihood, or more rows would help"


def _centring_hint(model: Any) -> str:
    """The unsettled-search warning's advice to centre predictors, where the model can have one.

    An intercept-slope ridge needs two coordinates and a predictor: a one-parameter model, a
    program whose rows hold one variable (``y`` alone: a mixture, a normal mean and scale), or one
    that reads no row variable as a covariate (``covariates`` empty: an item-response model's rows
    hold an outcome and two indices), is not told to centre predictors.  ``row_vars`` and
    ``covariates`` are read from the program and the sliced data layout (names, public); a density
    that does not say (a NumPy density) keeps the advice.
    """
    row_vars = getattr(model, "row_vars", None)
    if (int(model.dim) < 2 or (row_vars is not None and len(tuple(row_vars)) < 2)
            or getattr(model, "covariates", None) == ()):
        return ""
    return (" — in particular centred predictors (a predictor far from 0 relative to its spread, "
            "like a distance in metres around 5 km, makes its slope and the intercept nearly "
            "collinear, a ridge the search cannot resolve at this budget)")


def _group_hint(model: Any) -> str:
    """The unsettled-search warning's advice on group intercepts without a hierarchical prior,
    where the program has them (:attr:`stan_dp.model.ZeroRowPart.index_groups`; public: the
    program and the row variables' names).

    Each such element is informed by its own group's rows only, and a group of a few tens of rows
    has a curvature below the search's release noise in any frame (docs/adaptation.md §3, "A
    vector of group intercepts without a hierarchical prior"): a hierarchical prior lets the
    groups inform each other (its common level and spread are every row's)."""
    names = tuple(getattr(model, "index_groups", ()) or ())
    if not names:
        return ""
    listed = ", ".join(f"{name}[...]" for name in names)
    first = names[0]
    return (f" — and for the group effects {listed}, each informed by its own group's rows only, "
            f"a hierarchical prior on them (e.g. {first} ~ normal({first}_0, tau), {first}_0 and "
            "tau parameters), or merging the smallest groups")


def _shape_hint(model: Any) -> str:
    """The unsettled-search warning's advice for a program whose outcome family has a stationary
    shape (:func:`_stationary_shape_saddle`), which the default start sits on: the skew-normal
    incomes of :data:`STATIONARY_SHAPE_FAMILIES` at epsilon = 4 (noise seeds 1-4) ended 3.1-18.7
    sds off NUTS from the default start, unsettled and not always at a saddle, and 0.99-3.1 from
    ``init={"alpha": 2}`` (epsilon = 16: 0.24-17 against 0.37-0.81)."""
    shape = _stationary_shape_saddle(model)
    return f" — and {shape[1]}, since {shape[0]}" if shape else ""


def _coordinate_names(model: Any, dim: int) -> list[str]:
    """Stan's name of each unconstrained coordinate (``beta[1]``).

    Where the constrained and unconstrained coordinates differ in number (a ``simplex[K]`` has
    ``K - 1`` unconstrained coordinates), a variable whose counts differ is named by its position
    among its own unconstrained coordinates (``base_share's unconstrained coordinate 3``) and the
    others as Stan names them; ``unconstrained coordinate j`` where the model names none of them.
    """
    from stan_dp.diagnostics import _parse_flat, stan_name   # compare's reading of flat names

    def variable(flat: str) -> str:
        parsed = _parse_flat(flat)   # BridgeStan's "beta.1" is Stan's beta[1]
        return flat if parsed is None else parsed[0]

    names = list(getattr(model, "param_names", None) or [])
    flat_names, lopsided = names, set()
    if len(names) != dim:
        flat_names = list(getattr(model, "unconstrained_names", None) or [])
        if len(flat_names) != dim:
            return [f"unconstrained coordinate {j + 1}" for j in range(dim)]
        constrained = Counter(variable(name) for name in names)
        lopsided = {var for var, k in Counter(variable(name) for name in flat_names).items()
                    if constrained[var] != k}
    out, position = [], Counter()
    for flat in flat_names:
        parsed = _parse_flat(flat)
        var = flat if parsed is None else parsed[0]
        position[var] += 1
        if var in lopsided:
            out.append(f"{var}'s unconstrained coordinate {position[var]}")
        else:
            out.append(flat if parsed is None else stan_name(parsed[0], [i - 1 for i in parsed[1]]))
    return out


def _aligned_constrained(model: Any, points: np.ndarray) -> np.ndarray | None:
    """The constrained values of each unconstrained point (rows of ``points``) in Stan's flattened
    order (each variable column-major, in declaration order), or None where they do not line up
    one to one with the coordinates (a simplex, a Cholesky factor) or the model cannot map them."""
    if len(getattr(model, "param_names", None) or []) != points.shape[1]:   # the names line up
        return None
    try:
        constrained = np.array([np.concatenate([np.asarray(v, dtype=float).ravel(order="F")
                                                for v in model.constrain(p).values()])
                                for p in points])
    except (ValueError, TypeError, AttributeError, RuntimeError):
        return None
    return constrained if constrained.shape == points.shape else None


def _moving_parameters(model: Any, path: np.ndarray, flags: np.ndarray) -> list[str]:
    """``"name a -> b -> c"`` for each coordinate ``flags`` marks (:func:`moving_coordinates`: the
    search was still walking along it), on the constrained scale where the model maps the path."""
    if not flags.any():
        return []
    points = np.asarray(path)[-(MOVING_WINDOW + 1):]
    names = _coordinate_names(model, points.shape[1])
    constrained = _aligned_constrained(model, points)
    out = []
    for j in np.flatnonzero(flags):
        if constrained is not None:
            out.append(f"{names[j]} " + " -> ".join(f"{v:.4g}" for v in constrained[:, j]))
        else:
            out.append(f"unconstrained coordinate {j + 1} " + " -> ".join(f"{v:.4g}" for v in points[:, j]))
    return out


def _kept_bound_note(by_default: bool) -> str:
    """The clipping-bias warning's note where the clip bound kept its rms-optimal value: why it
    did (the rule of :func:`_adapt`, or the user's ``adaptive_clip=False``) and how to raise it."""
    why = ("the default where the forecast warns and the program declares no parameter with only a "
           "lower bound" if by_default else "adaptive_clip=False was set")
    return (f". The bound kept its rms-optimal value ({why}); where rows' gradients are skewed (a "
            "skewed predictor's, a scale parameter's), settings=stan_dp.adaptation."
            "AdaptationSettings(adaptive_clip=True) or the CLI's --adaptive-clip on raises it near "
            "the mode, which can help (docs/adaptation.md §3, \"Counted in every run\")")


def _gaussian(model: Any, *, epsilon: float, delta: float, chains: int, draws: int, seed: Any,
              relation: str, public_n: int | None, init: Any,
              settings: AdaptationSettings = AdaptationSettings()):
    check_row_density(model, gradients=True, relation=relation)
    validate_run_args(epsilon=epsilon, delta=delta, iterations=draws, noise=None, chains=chains,
                      warmup=0, relation=relation, seed=seed)
    start, prior_mode = _validated_start(model, init)
    adapted = _adapt(model, epsilon=epsilon, delta=delta, share=1.0, seed=seed, relation=relation,
                     public_n=public_n, start=start, settings=settings, prior_mode=prior_mode)
    result, attrs = adapted.result, adapted.attrs
    grouped = _release_counts(result.ledger.releases())
    spent = gaussian_epsilon(list(grouped), list(grouped.values()), delta)
    cov = result.covariance + result.noise_covariance
    cov = 0.5 * (cov + cov.T)
    lam, q = np.linalg.eigh(cov)
    root_cov = q * np.sqrt(np.maximum(lam, 0.0))
    rng = np.random.Generator(np.random.PCG64(None if seed is None else adapted.draw_seed))
    moved = skew_correction(result)
    centre = result.mode + moved
    constrained, positions, redrawn, left = _finite_gaussian_draws(model.constrain, centre, root_cov, rng,
                                                                   chains, draws)
    constrained = with_transformed(constrained, model, positions, int(rng.integers(2**32)))
    noise = attrs["max_noise_sd_in_posterior_sds"]
    if not attrs["gaussian_shape_ok"]:
        emit([_shape_warning(model, result)], attrs)
    dispersed = rounds_over_dispersed(result)
    attrs["rounds_over_dispersed"] = dispersed
    if attrs["noise_exceed_probability"] > EXCEED_PROBABILITY:
        if not result.settled:
            consequence = ("the draws are widened by it, but the search did not settle, so this noise "
                           "leaves out how far the mode may still be: the intervals are not credible "
                           "intervals")
        elif attrs["clipping_bias_bound"] > 0.0:
            counted = ("released counts of the rows beyond the bound each pooled round was made at, "
                       "including rounds before the bound rose" if attrs["adaptive_clip"] else
                       "released counts of the rows beyond the bound and beyond twice it, the "
                       "latter as if they all pushed one way")
            consequence = (f"and the rows beyond the clip bound can bias it by about "
                           f"{attrs['clipping_bias_bound']:.2g} more ({counted}; where a few rows' "
                           "gradients lie far beyond the bound and push one way, such as outliers "
                           "moving a heavy-tailed likelihood's tail or shape parameter, it can be "
                           "several times that); the draws are widened by the noise, not by that "
                           "bias, so the intervals may be too narrow and the mean is imprecise")
            if not attrs["adaptive_clip"]:
                consequence += _kept_bound_note(attrs["adaptive_clip_by_default"])
        elif dispersed:
            consequence = ("the draws are widened by it and by the rounds' scatter, not by a shift "
                           "the rounds share (below), so the intervals may not be calibrated and "
                           "the mean is imprecise")
        else:
            consequence = ("the draws are widened by it so intervals stay calibrated, but the mean is "
                           "imprecise")
        disagreement = ("" if not result.dispersed else
                        f", including the disagreement between the search's rounds, "
                        f"{result.dispersion:.2g} times what their noise explains")
        emit([f"the privacy noise in the mean is up to {noise:.2g} posterior sds per coordinate "
              f"(released estimate{disagreement}; some coordinate is off by more than "
              f"{FORECAST_LIMIT:g} with probability {attrs['noise_exceed_probability']:.0%}); "
              f"{consequence}"], attrs)
    if dispersed:
        emit([f"the private mode search settled, but the rounds it pooled disagree "
              f"{result.dispersion:.2g} times beyond what their privacy noise explains (beyond the "
              f"{DISPERSION_LEVEL:.0%} quantile of that disagreement under the noise alone): "
              "rounds that far apart were still moving or were pulled apart by more than noise (a "
              "frame too narrow along some direction, clipping that changed between rounds), and "
              "the reported spread covers their scatter, not a shift they share, so the mode may "
              "be farther from the posterior's than the stated noise says (a 20-county varying "
              "intercept at epsilon = 64 settled 22 posterior sds off this way, its stated noise "
              "0.72 sds); a larger epsilon, more rows, a data-independent init= nearer the "
              "posterior, or a rescaled (e.g. non-centred) parametrisation would help"], attrs)
    if redrawn:
        emit([_overflow_warning(model.constrain, centre, redrawn, left, chains * draws)], attrs)
    squashed = squashed_coordinates(model, centre, np.sqrt(np.maximum(np.diag(cov), 0.0)))
    if squashed:
        emit([f"{', '.join(squashed)}: the Gaussian sits where the constraint's transform is flat "
              "(a bounded parameter far out in unconstrained space), so every draw lies at the "
              "bound, to within a ten-thousandth of its value: the draws' spread there says nothing "
              "about the posterior's; the posterior may pile up against the bound (the data "
              "favouring values beyond it), or the search may have ended in a region where the "
              "rows are flat; a larger epsilon or more rows would help, and the intervals are not "
              "credible intervals"], attrs)
    attrs.update({
        "sampler": "gaussian",
        "method": "noise-aware Gaussian approximation at a private mode",
        "epsilon": float(epsilon),
        "delta": float(delta),
        "epsilon_spent": float(spent),
        "relation": relation,
        "accountant": "gaussian-pld-exact",
        "chains": int(chains),
        "iterations": int(draws),
        "warmup": 0,
        "seeded": seed is not None,
        "releases": len(result.ledger.entries),
        # an unsettled search's covariance leaves out how far its mode may still be, and a
        # Gaussian at the mode of a posterior far from Gaussian is not it: its intervals are not
        # credible intervals (the CLI then leaves them out); nor is a Gaussian at a saddle point
        "mixed": bool(result.settled and attrs["gaussian_shape_ok"] and not result.saddle
                      and not squashed),
        "at_bound": ", ".join(squashed),
        "nonfinite_draws_redrawn": int(redrawn),
        # the centre's move from the private mode by the skew check (largest, posterior sds)
        "skew_correction": float(np.max(np.abs(moved) / result.posterior_sd, initial=0.0)),
    })
    if relation == "replace_one":
        attrs["n_rows"] = int(model.n_rows)
    attrs.update(quantity_attrs(model))
    return build_inference_data(constrained, {}, warmup=0, attrs=attrs)


def _shape_warning(model: Any, result: AdaptationResult) -> str:
    """What the skew check says where the posterior is not Gaussian around the mode (only the
    Gaussian approximation, whose answer a Gaussian at the mode is, says it)."""
    shape = shape_bias(result)
    names = _coordinate_names(model, shape.size)
    along = ", ".join(f"{names[j]} {result.skew_shift[j]:+.2g}" for j in np.argsort(-shape)[:3]
                      if shape[j] > SKEW_LIMIT)
    return ("the posterior is not Gaussian around the private mode: averaged over the reported "
            "Gaussian, the log density's gradient puts the posterior mean away from the mode by about "
            f"{along} posterior sds (released skew check, noise sd "
            f"{float(np.max(result.skew_shift_sd)):.2g}; unconstrained coordinates, '+' meaning "
            f"larger); the reported Gaussian is centred at the mode moved by that shift (at most "
            f"{SKEW_CORRECTION_MAX:g} posterior sd per coordinate), but the check is a second-order "
            "expansion, so the means may be off by more, and symmetric intervals do not represent "
            "a posterior this skewed. Typical causes: a hierarchical "
            "model's group scale (its joint mode shrinks the group effects and moves the scale away "
            "from where the posterior's mass is), parameters with few rows behind them, or a bounded "
            "parameter near its bound; a Gaussian approximation cannot represent such a posterior, "
            "and more rows or a larger epsilon (where the posterior is more nearly Gaussian) would help")


SQUASHED_RTOL = 1e-4
""":func:`squashed_coordinates`: a coordinate's constrained values at the Gaussian's ``+-3`` sds differ
by at most this fraction of their size."""


def squashed_coordinates(model: Any, centre: np.ndarray, sd: np.ndarray) -> list[str]:
    """Stan names (with the value) of the coordinates whose Gaussian the constraint's transform
    squashes onto a bound: at least 0.01 wide in unconstrained space, while the constrained values
    at ``centre +- 3 sd`` along it differ by at most :data:`SQUASHED_RTOL` of their size (a
    ``real<lower=0.3, upper=0.9>`` at unconstrained -31: every draw 0.3 to 12 digits; at -28 with
    an sd of 5, within 2e-6 of it, against a posterior sd of 0.005).  An unconstrained coordinate
    is never flagged short of ``|u| > 6e4 sd``, nor a log-transformed one (its relative spread is
    at least ``e^0.06 - 1``).  Nor is a bound at 0 (a probability's draws at 1e-13, which differ
    relatively, though every one is 0 to 12 digits): the test is relative to the values, and a
    variance parameter may lie at 1e-5 legitimately.  Only where the constrained values line up
    one to one with the unconstrained coordinates (reals and vectors with bounds; a simplex or a
    Cholesky factor is not judged).  Post-processing of the released Gaussian and the public
    transform."""
    d = int(centre.size)
    base = _aligned_constrained(model, centre[None, :])
    if base is None:
        return []
    names = _coordinate_names(model, d)
    out = []
    for j in np.flatnonzero(np.isfinite(sd) & (sd >= 0.01)):
        step = np.zeros(d)
        step[j] = 3.0 * sd[j]
        ends = _aligned_constrained(model, np.array([centre + step, centre - step]))
        if ends is None:
            continue
        hi, lo = ends[:, j]
        if np.isfinite(hi) and np.isfinite(lo) and abs(hi - lo) <= SQUASHED_RTOL * 0.5 * (abs(hi) + abs(lo)):
            out.append(f"{names[j]} (at {base[0, j]:.6g})")
    return out


def _overflow_warning(constrain: Any, mode: np.ndarray, redrawn: int, left: int, total: int) -> str:
    """The warning for Gaussian draws that overflowed the constraints, with its likely cause."""
    at_mode = constrain_draws(constrain, mode[None, None, :])
    why = ("the Gaussian is so wide that the data pin nothing down"
           if all(np.all(np.isfinite(v)) for v in at_mode.values()) else
           "the private mode itself is beyond what the model can represent (a parameter at "
           "infinity), so the search ended nowhere near the posterior")
    return (f"{redrawn} of {total} draws of the noise-aware Gaussian overflowed the model's "
            "constraining transforms (a non-finite parameter value) and were drawn again"
            + (f"; {left} still are non-finite" if left else "") + f": {why}")


GAUSSIAN_REDRAWS = 50
"""Times a Gaussian draw whose constrained value is non-finite is drawn again (:func:`_finite_gaussian_draws`)."""


def _finite_gaussian_draws(constrain: Any, mode: np.ndarray, root_cov: np.ndarray,
                           rng: np.random.Generator, chains: int, draws: int
                           ) -> tuple[dict[str, np.ndarray], np.ndarray, int, int]:
    """Draws of ``N(mode, root_cov root_cov')`` mapped by ``constrain``, all finite if possible.

    A draw whose constrained value is non-finite (``exp`` of a log-scale
    beyond ~709 overflows) is drawn again, up to :data:`GAUSSIAN_REDRAWS`
    times: the result is the Gaussian restricted to values the model can
    represent, which differs from it only when the Gaussian is so wide that
    the fit says nothing (the caller warns).  Post-processing of the
    released mode and covariance only.

    Returns
    -------
    constrained : dict
        ``name -> array (chains, draws, *shape)``.
    positions : ndarray
        The draws in unconstrained space, ``(chains, draws, dim)``.
    redrawn : int
        Draws that were drawn again at least once.
    left : int
        Draws still non-finite after the last attempt.
    """
    dim = mode.size
    positions = mode + rng.standard_normal((chains, draws, dim)) @ root_cov.T
    out = constrain_draws(constrain, positions)

    def bad_draws() -> np.ndarray:
        flags = np.zeros((chains, draws), dtype=bool)
        for value in out.values():
            flags |= ~np.all(np.isfinite(value.reshape(chains, draws, -1)), axis=2)
        return flags

    bad = bad_draws()
    redrawn = int(bad.sum())
    for _ in range(GAUSSIAN_REDRAWS):
        if not bad.any():
            break
        idx = np.argwhere(bad)
        fresh = mode + rng.standard_normal((len(idx), dim)) @ root_cov.T
        redone = constrain_draws(constrain, fresh[None, :, :])
        for name, value in redone.items():
            out[name][idx[:, 0], idx[:, 1]] = value[0]
        positions[idx[:, 0], idx[:, 1]] = fresh
        bad = bad_draws()
    return out, positions, redrawn, int(bad.sum())


MCMC_ADAPTATION_SHARE = 0.5
"""Share of the budget (PLD mean) the adaptation gets before a chain runs."""
MCMC_WARMUP = 200
"""Warm-up iterations per chain after the adaptation (counted in the budget)."""
MCMC_ITERATIONS = 1000
"""Post-warm-up draws per chain after the adaptation."""
MCMC_LEAPFROG = 3
"""Leapfrog steps of DP HMC after the adaptation."""
MCMC_BATCH = 1000
"""Batch size of the minibatch samplers after the adaptation (at most n)."""
RATIO_NOISE_TARGET = 1.0
"""Step sizes make the log-ratio noise sd about this (penalty family), capped at 2.38 / sqrt(d)."""


def _ratio_noise_multiplier(epsilon: float, delta: float, relation: str, preceding: list[Release],
                            iterations: int, chains: int, plan: list[Release], once: list[Release] = ()) -> float:
    """The log-ratio noise multiplier a run of ``plan`` gets from what the adaptation left."""
    budget = Budget(epsilon, delta, relation=relation, preceding=tuple(preceding))
    return float(budget.calibrate(plan, iterations, chains=chains, once=list(once)))


def choose_method(n_public: int, dim: int, epsilon: float, delta: float, relation: str,
                  settings: AdaptationSettings = AdaptationSettings()) -> str:
    """``method="auto"``: ``"penalty"`` when a chain can mix after the adaptation, else ``"gaussian"``.

    From public facts only.  After the adaptation (half the budget) the
    penalty chain of :data:`MCMC_ITERATIONS` + :data:`MCMC_WARMUP` iterations
    per chain has noise multiplier ``z``; with the public clip
    ``kappa C_w`` and the largest useful step ``2.38 / sqrt(d)`` per
    coordinate (Roberts & Rosenthal's optimal random-walk scale in posterior
    units), its log-ratio noise sd is ``2 z kappa C_w 2.38``.  A chain whose
    noise sd exceeds 2 at that step barely moves (penalised acceptance
    ``exp(-sd^2/2)``), and the averaged one-step estimate of the Gaussian uses
    the same budget better; at the sizes of ``benchmarks/utility.py``
    (n <= 1e5) this sd is 10-1000, so ``auto`` picks the Gaussian there.
    """
    m = pld_mean_budget(epsilon, delta) * (1.0 - MCMC_ADAPTATION_SHARE)
    z = math.sqrt((4 * (MCMC_ITERATIONS + MCMC_WARMUP)) / (2.0 * m))
    clip = clip_inflation(settings, n_public, m, relation) * whitened_grad_scale(n_public, dim)
    factor = 2.0 if relation == "replace_one" else 1.0
    sd = factor * z * clip * 2.38
    return "penalty" if sd <= 2.0 else "gaussian"


def _chain_bias_warning(adapted: Any, dim: int) -> str:
    """The warning of a chain whose target's clipping bias may exceed :data:`FORECAST_LIMIT`.

    The chain clips every row's ratio at the adaptation's final bound, in its frame (DP Barker's
    ratio bound is fixed, ``sqrt(b) / n``, and its step size makes it that gradient bound), so the bias
    the adaptation's released counts give there (``clipping_bias_bound``, with the rows beyond
    twice the bound where the bound was not adaptive) is the chain's target's too.  Its chance of
    exceeding the limit, over the count's noise (:func:`_miss_probability` with no other noise:
    the chain's own Monte Carlo error is R-hat's and ESS's), above :data:`EXCEED_PROBABILITY`
    warns.  Post-processing of released values; ``""`` otherwise.
    """
    result = adapted.result
    bias = float(adapted.attrs["clipping_bias_bound"])
    chance = _miss_probability(np.zeros(dim), bias - result.clipping_bias_bound, result)
    if not chance > EXCEED_PROBABILITY:
        return ""
    return (f"the chain's target clips every row's log-likelihood ratio at the adaptation's final "
            f"bound, and the rows beyond it (released counts) can move it by about {bias:.2g} "
            f"posterior sds (more than {FORECAST_LIMIT:g} with probability {chance:.0%}), which "
            "neither the chains' spread nor R-hat shows; a larger epsilon or more rows would help"
            + ("" if adapted.attrs["adaptive_clip"] else
               ", and so would the adaptive bound (AdaptationSettings(adaptive_clip=True))"))


def _mcmc(method: str, model: Any, *, epsilon: float, delta: float, chains: int, draws: int, seed: Any,
          relation: str, public_n: int | None, init: Any, progress: bool,
          settings: AdaptationSettings = AdaptationSettings(),
          adaptation_share: float = MCMC_ADAPTATION_SHARE, **options: Any):
    """Adaptation with ``adaptation_share`` of the budget, then ``method`` on the whitened density."""
    from stan_dp.samplers.barker import barker
    from stan_dp.samplers.hmc import hmc
    from stan_dp.samplers.penalty import penalty
    from stan_dp.samplers.subsampled import subsampled_penalty

    check_row_density(model, gradients=True, relation=relation)
    if method in ("subsampled_penalty", "barker") and relation != "replace_one":
        raise ValueError(f"{method} is accounted for replace-one neighbours only")
    if not (isinstance(adaptation_share, float) and 0.0 < adaptation_share < 1.0):
        raise ValueError(f"adaptation_share must be a float in (0, 1), got {adaptation_share!r}")
    if method == "barker":
        # Barker has no noise to trade for iterations: its budget fixes the
        # number of steps, so by default the run is as long as the budget allows.
        warmup = int(options.pop("warmup", 0))
        iterations = options.pop("iterations", None)
    else:
        warmup = int(options.pop("warmup", MCMC_WARMUP))
        iterations = int(options.pop("iterations", draws if draws != 1000 else MCMC_ITERATIONS))
    validate_run_args(epsilon=epsilon, delta=delta, iterations=iterations, noise=None, chains=chains,
                      warmup=warmup, relation=relation, seed=seed)
    start, prior_mode = _validated_start(model, init)
    d = int(model.dim)
    n_public = int(model.n_rows) if public_n is None else int(public_n)
    chain_m = pld_mean_budget(epsilon, delta) * (1.0 - adaptation_share)
    given_clip = options.pop("clip", None)
    rule_clip = float(clip_inflation(settings, n_public, chain_m, relation) * whitened_grad_scale(n_public, d))
    factor = 2.0 if relation == "replace_one" else 1.0
    max_step = 2.38 / math.sqrt(d)
    # The adaptation's releases are fixed by the budget split alone, so the
    # chain's noise can be calibrated (and refused) before any data is read.
    _, _, pre = _adaptation_plan(epsilon, delta, adaptation_share, settings, n_public, d)
    kwargs: dict[str, Any] = {"epsilon": epsilon, "delta": delta, "chains": chains, "warmup": warmup,
                              "iterations": iterations, "progress": progress}
    if method == "penalty":
        z = _ratio_noise_multiplier(epsilon, delta, relation, pre, warmup + iterations, chains,
                                    [Release(1.0)])
        kwargs.update(proposal="gaussian", relation=relation)
        fn = penalty
    elif method == "hmc":
        ratio = 0.6 * math.sqrt(MCMC_LEAPFROG)   # DP HMC's default z_g / z_l at grad_clip = clip
        z = _ratio_noise_multiplier(epsilon, delta, relation, pre, warmup + iterations, chains,
                                    [Release(1.0), Release(ratio, MCMC_LEAPFROG)], [Release(ratio)])
        kwargs.update(n_leapfrog=MCMC_LEAPFROG, relation=relation)
        fn = hmc
    elif method == "subsampled_penalty":
        fn = subsampled_penalty
    elif method == "barker":
        fn = barker
    else:  # pragma: no cover - checked by sample()
        raise ValueError(method)

    adapted = _adapt(model, epsilon=epsilon, delta=delta, share=adaptation_share, seed=seed,
                     relation=relation, public_n=public_n, start=start, settings=settings,
                     prior_mode=prior_mode)
    result = adapted.result
    # The chain's clip: the rule's, times the raise the adaptation's released counts of rows beyond
    # its bound asked for (post-processing of released counts).  Its target is the
    # posterior with every row's log-likelihood ratio clipped, so a bound the adaptation found too
    # low biases the chain's target the same way; the step sizes follow the clip.
    clip = float(given_clip) if given_clip is not None else rule_clip * float(result.clip_adjust)
    b = min(n_public, MCMC_BATCH)
    if method == "penalty":
        kwargs.update(clip=clip, step_size=min(max_step, RATIO_NOISE_TARGET / (factor * z * clip * math.sqrt(d))))
    elif method == "hmc":
        kwargs.update(clip=clip, grad_clip=clip, step_size=min(
            0.5, RATIO_NOISE_TARGET / (factor * z * clip * MCMC_LEAPFROG * math.sqrt(d))))
    elif method == "subsampled_penalty":
        kwargs.update(clip=clip, step_size=min(max_step, math.sqrt(b) / (n_public * clip * math.sqrt(d))),
                      batch_size=b)
    else:
        kwargs.update(step_size=min(max_step, math.sqrt(b) / (n_public * clip * math.sqrt(d))),
                      batch_size=b)
    kwargs.update(options)
    whitened = WhitenedDensity(model, result.mode, result.frame)   # frame frame' = covariance
    # overdispersed, data-independent starts around the released mode
    rng = np.random.Generator(np.random.PCG64(None if seed is None else adapted.draw_seed))
    kwargs["init"] = rng.standard_normal((chains, d))
    chain_seed = None if seed is None else adapted.draw_seed.spawn(1)[0]
    with preceding_releases(adapted.releases), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UtilityWarning)
        fit = fn(whitened, seed=chain_seed, **kwargs)
    attrs = dict(fit.attrs)
    for w in caught:
        if not issubclass(w.category, UtilityWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    # the adaptation raised its own warnings; the sampler's were held back above
    sampler_messages = [m for m in str(attrs.get("warnings", "")).split("\n") if m]
    if given_clip is None:
        bias_message = _chain_bias_warning(adapted, d)
        if bias_message:
            sampler_messages.append(bias_message)
    for message in sampler_messages:
        warnings.warn(message, UtilityWarning, stacklevel=3)
    messages = [m for m in adapted.attrs["warnings"].split("\n") if m] + sampler_messages
    extra = {k: v for k, v in adapted.attrs.items() if k != "warnings"}
    extra.update({"warnings": "\n".join(messages), "adapted_frame": "private mode and covariance",
                  "seeded": seed is not None})
    for group in fit.groups():
        fit[group].attrs.update(netcdf_safe_attrs(extra))
    fit.attrs.update(netcdf_safe_attrs(extra))
    return fit

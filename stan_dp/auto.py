"""``stan_dp.sample``: one call from a Stan model, data and a budget to a private posterior.

The automatic path (``method="auto"`` or ``"gaussian"``):

1. **Validate and forecast** — before any data is touched: the budget, the
   relation (under add/remove the row count is private, so a public
   ``public_n`` must be declared), and the accuracy the budget can buy from
   public facts (:func:`stan_dp.adaptation.forecast.forecast`).  A forecast
   error above :data:`FORECAST_LIMIT` posterior sds raises a
   :class:`~stan_dp.honesty.UtilityWarning` up front.
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

import os
from collections import Counter
import warnings
from typing import Any, Mapping

import numpy as np

from stan_dp.accounting import gaussian_epsilon, validate_privacy_params
from stan_dp.accounting.validation import check_relation
from stan_dp.adaptation.forecast import forecast, pld_mean_budget
from stan_dp.adaptation.newton import AdaptationSettings, adaptation_releases, private_mode
from stan_dp.density import check_row_density
from stan_dp.honesty import UtilityWarning, emit
from stan_dp.inference import resolve_init, validate_run_args
from stan_dp.mechanisms import chain_streams
from stan_dp.output import build_inference_data, constrain_draws
from stan_dp.version import __version__

__all__ = ["METHODS", "FORECAST_LIMIT", "sample"]

METHODS = ("auto", "gaussian", "hmc", "penalty", "subsampled_penalty", "barker")
"""Methods :func:`sample` accepts."""

FORECAST_LIMIT = 0.5
"""Forecast per-coordinate error (posterior sds) above which a run warns before it starts."""

NOISE_LIMIT = 0.5
"""Released noise sd of the private mode (posterior sds) above which a result warns."""


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
        others call the seeds' samplers (:func:`stan_dp.hmc`, ...) with
        ``method_options``; ``penalty``, ``subsampled_penalty`` and ``barker``
        need their ``clip`` and ``step_size`` there.
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
        the centre of Stan's default initialisation range).
    progress : bool
        Progress bars of the samplers.
    **method_options
        Passed to the sampler; for ``"gaussian"``: ``settings``
        (:class:`~stan_dp.adaptation.newton.AdaptationSettings`).

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
    if method not in ("auto", "gaussian"):
        from stan_dp.samplers.barker import barker
        from stan_dp.samplers.hmc import hmc
        from stan_dp.samplers.penalty import penalty
        from stan_dp.samplers.subsampled import subsampled_penalty

        fn = {"hmc": hmc, "penalty": penalty, "subsampled_penalty": subsampled_penalty,
              "barker": barker}[method]
        return fn(model, epsilon=epsilon, delta=delta, chains=chains, seed=seed, relation=relation,
                  init=init, progress=progress, **method_options)
    return _gaussian(model, epsilon=epsilon, delta=delta, chains=chains, draws=draws, seed=seed,
                     relation=relation, public_n=public_n, init=init, **method_options)


def _fitting_pld_mean(epsilon: float, delta: float, settings: AdaptationSettings) -> float:
    """The adaptation's PLD-mean budget, shrunk by ulps until its releases provably fit.

    Splitting ``M`` into shares rounds; the plan is checked with the exact
    accountant before any data is touched, so ``epsilon_spent <= epsilon``.
    """
    m = pld_mean_budget(epsilon, delta)
    for _ in range(200):
        plan = adaptation_releases(m, settings)
        spent = gaussian_epsilon([r.noise_multiplier for r in plan], [r.count for r in plan], delta)
        if spent <= epsilon:
            return m
        m *= 1.0 - 1e-12
    raise RuntimeError("could not fit the adaptation in the budget")  # pragma: no cover


def _gaussian(model: Any, *, epsilon: float, delta: float, chains: int, draws: int, seed: Any,
              relation: str, public_n: int | None, init: Any,
              settings: AdaptationSettings = AdaptationSettings()):
    check_row_density(model, gradients=True)
    validate_run_args(epsilon=epsilon, delta=delta, iterations=draws, noise=None, chains=chains,
                      warmup=0, relation=relation, seed=seed)
    if not isinstance(settings, AdaptationSettings):
        raise TypeError("settings must be an AdaptationSettings")
    dim = int(model.dim)
    n_public = int(model.n_rows) if public_n is None else int(public_n)
    start = resolve_init(model, init, 1)
    start = np.zeros(dim) if start is None else start[0]
    if not np.isfinite(float(model.log_prior(start))):
        raise ValueError("the log prior is not finite at the starting point; pass init=")
    share = (1.0 - settings.quantile_share) * (1.0 - settings.clip_share) * (1.0 - settings.hessian_share)
    fc = forecast(n_public, dim, epsilon, delta, relation=relation, kappa=settings.kappa, share=share)
    attrs: dict[str, Any] = {"warnings": ""}
    if fc.expected_error > FORECAST_LIMIT:
        emit([f"forecast from public facts (n={n_public}, dim={dim}, epsilon={epsilon:g}, "
              f"delta={delta:g}): the private mean is expected to be off by about "
              f"{fc.expected_error:.2g} posterior sds per coordinate (information floor "
              f"{fc.floor:.2g}); a larger epsilon or more rows would help"], attrs)

    budget_m = _fitting_pld_mean(epsilon, delta, settings)

    # ---- nothing above touched the data ----
    root = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    adapt_seed, draw_seed = root.spawn(2)
    stream = chain_streams(None if seed is None else adapt_seed, 1)[0]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result = private_mode(model, n_public=n_public, pld_mean=budget_m, relation=relation,
                              rng_noise=stream.noise, init=start, settings=settings)
    # ---- post-processing of released values only from here on ----
    ledger = result.ledger
    grouped = Counter(e.noise_multiplier for e in ledger.entries)
    spent = gaussian_epsilon(list(grouped), list(grouped.values()), delta)
    cov = result.covariance + result.noise_covariance
    cov = 0.5 * (cov + cov.T)
    lam, q = np.linalg.eigh(cov)
    root_cov = q * np.sqrt(np.maximum(lam, 0.0))
    rng = np.random.Generator(np.random.PCG64(None if seed is None else draw_seed))
    z = rng.standard_normal((chains, draws, dim))
    unconstrained = result.mode + z @ root_cov.T
    constrained = constrain_draws(model.constrain, unconstrained)

    post_sd = np.sqrt(np.maximum(np.diag(result.covariance), 1e-300))
    noise_sd = np.sqrt(np.maximum(np.diag(result.noise_covariance), 0.0)) / post_sd
    messages = []
    if not result.settled:
        messages.append(
            "the private mode search did not settle (its last steps were still large or went "
            "back): the mode may be far from the posterior's; a larger epsilon, more rows, a "
            "data-independent init= nearer the posterior, or rescaled parameters would help")
    if float(np.max(noise_sd)) > NOISE_LIMIT:
        messages.append(
            f"the privacy noise in the mean is up to {float(np.max(noise_sd)):.2g} posterior sds "
            "(released estimate); the draws are widened by it so intervals stay calibrated, but "
            "the mean is imprecise")
    emit(messages, attrs)
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
        "releases": len(ledger.entries),
        "release_summary": ledger.summary(),
        "adaptation_share": 1.0,
        "grad_clip_whitened": float(result.grad_clip),
        "search_settled": bool(result.settled),
        "rounds_averaged": int(result.rounds_averaged),
        "max_noise_sd_in_posterior_sds": float(np.max(noise_sd)),
        "forecast_error": float(fc.expected_error),
        "forecast_floor": float(fc.floor),
        "public_n": n_public if relation == "add_remove" else "",
        "mixed": True,
    })
    if relation == "replace_one":
        attrs["n_rows"] = int(model.n_rows)
    attrs["stan_dp_version"] = __version__
    return build_inference_data(constrained, {}, warmup=0, attrs=attrs)

"""Where the private mode search goes wrong: its rounds set against the non-private posterior.

For each model, data seed and noise seed this runs the private adaptation
exactly as ``stan_dp.sample(model, epsilon=..., delta=..., seed=SEED)`` does
with the default ``method="auto"`` (the same plan, budget share and noise
stream, so the mode is the one ``sample`` reports), keeps its per-round trace
(released values only) and sets it against the NUTS fit of the same model and
data (``stan_dp.reference_fit``; NOT private — a yardstick only).  Per run it
prints

* ``worst``: the worst |private estimate - reference mean| in reference sds
  (and which coordinate, unconstrained), the estimate being the Gaussian
  approximation's centre (the private mode moved by the skew check's shift
  beyond its noise, ``stan_dp.auto.skew_correction``) or, where ``sample``
  would run a chain, the mode;
* ``start``: how far the Newton rounds began, after the far phase (worst
  coordinate, reference sds): a search that begins tens of sds away at a
  small budget rarely arrives;
* ``frame0`` / ``frame_end``: the largest eigenvalue of the reference
  covariance in the first and the last Newton round's frame (1 where the
  frame is the posterior's own; ``r^2`` along a direction ``r`` times too
  narrow, which the rounds' curvature release cannot resolve:
  docs/adaptation.md §7, "Frames the rounds do not correct"), and the
  smallest in the last (below 1: too wide);
* ``blind``: the Newton rounds whose every released eigenvalue was at the
  noise floor (the release resolved no curvature at all), of ``rounds``;
* ``pooled`` and ``settled``: the pool's size after the last round and
  whether the search settled.

A reference whose chains did not converge (R-hat above 1.05 in some
unconstrained coordinate: ``ref_rhat`` in each ``--out`` line) is said so
before its runs: they are measured against no yardstick.
The ``--out`` lines also carry the final pool's ``dispersion`` (``Q / dof``
of its rounds' one-step estimates) and ``over_dispersed``: whether
``stan_dp.sample``'s Gaussian approximation would warn that a settled pool
disagrees beyond its noise (:func:`stan_dp.honesty.over_dispersed`), and
what the run would say: ``adapt_warned`` (the search's own warnings: the
forecast, an unsettled search, a prior-held mode, a heavy tail), ``p_miss``
(the chance of a miss beyond 0.5 sds the Gaussian approximation warns on
above 10 %), ``clipping_bias`` and ``noise`` (the largest noise sd, posterior
sds), and per coordinate ``errors`` (signed, reference sds) and ``noise_sds``
(the stated noise sd, in reference sds), and what clipping at the run's
final bound and frame does to the raw rows at the reference mean
(:func:`true_clipping`: ``true_clipped``, ``true_excess``,
``true_clip_bias``; NOT private), against which the stated clipping bias is
judged.  A run beyond 0.5 sds with none of
``adapt_warned``, ``p_miss > 0.1`` or ``over_dispersed`` is a silent miss
where the target is 0.5; ``benchmarks/warning_calibration.py`` sets the
stated chances and noise of such files against what happened.

With ``--rounds`` it also prints every Newton round: how far its point was
(worst coordinate, reference sds), its released gradient in its frame in
noise sds (data part plus the exact prior, as the round used it), the same
from the exact, unclipped rows without noise (NOT private: what the round
could have seen), its largest frame eigenvalue of the reference covariance
and the pool's size: a round whose exact gradient is within a few noise sds
cannot tell it is far (docs/adaptation.md §7, "Why the rounds crawl where
the frame is narrow").

Models: those of ``benchmarks/published_models.py`` by name, and the utility
table's GLMs as ``logistic-std``, ``logistic-unstd``, ``poisson-std``,
``poisson-unstd`` (``benchmarks/utility.py``; the unstandardised reference is
the standardised one mapped, as there).

``--set '{"hessian_share": 0.05}'`` overrides ``AdaptationSettings`` fields
(an experiment), ``--oracle-start`` starts the search at the reference mean
(not private: what a start at the posterior is worth), ``--init '{"b0": 6.9}'``
starts it where a user's data-independent ``init=`` would; ``--out FILE``
writes one line per run, and ``--compare A B`` pairs two such files run by
run (same data and noise seeds): median and largest worst error, the
geometric mean of the ratio B / A and a Wilcoxon signed-rank p-value.
Measured figures: docs/adaptation.md §7.

Usage: ``python benchmarks/adaptation_trace.py [--models gamma weibull ...] [--n 1000]
[--epsilon 1] [--data-seeds 0 1] [--noise-seeds 11 ... 22] [--set JSON] [--out FILE]
[--cache DIR] [--rounds]`` or ``python benchmarks/adaptation_trace.py --compare A B``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import arviz as az
import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent))

import published_models  # noqa: E402  (a sibling script)
import utility  # noqa: E402

import stan_dp  # noqa: E402
from stan_dp.adaptation.plan import AdaptationSettings  # noqa: E402
from stan_dp.auto import (MCMC_ADAPTATION_SHARE, _adapt, _validated_start, choose_method,  # noqa: E402
                           rounds_over_dispersed, shape_bias, skew_correction)
from stan_dp.density import prior_gradient  # noqa: E402
from stan_dp.diagnostics import RHAT_MAX  # noqa: E402
from stan_dp.information_floor import unconstrained_draws  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
REFERENCE_CHAINS = 4
"""``stan_dp.reference_fit``'s default chains: the cached draws are its chains one after another."""
GLMS = ("logistic-std", "logistic-unstd", "poisson-std", "poisson-unstd")


def model_and_reference(name: str, n: int, data_seed: int, workdir: Path,
                        cache: Path | None) -> tuple[Any, np.ndarray]:
    """The ``RowModel`` of ``name`` on simulated data and the reference's unconstrained draws."""
    if name in GLMS:
        glm, scaling = name.split("-")
        if glm == "logistic":
            path = ROOT / "stan_models" / "logistic_regression.stan"
        else:
            path = workdir / "poisson_regression.stan"
            path.write_text(utility.POISSON)
        data = utility.simulate(glm, n, data_seed, scaling == "unstd")
    else:
        code, make, _ = published_models.MODELS[name]
        path = workdir / f"{name}.stan"
        path.write_text(code)
        data = make(n, np.random.default_rng(data_seed))
    model = stan_dp.RowModel(path, data)
    stored = None if cache is None else cache / f"{name}_{n}_{data_seed}.npy"
    if stored is not None and stored.exists():
        return model, np.load(stored)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name in GLMS and name.endswith("unstd"):
            glm = name.split("-")[0]
            std = stan_dp.reference_fit(path, utility.simulate(glm, n, data_seed, False), seed=data_seed + 1)
            ref = utility.mapped_reference(std)
        else:   # the seed published_models.py and utility.py give NUTS
            ref = stan_dp.reference_fit(path, data, seed=data_seed + 1,
                                        **published_models.REFERENCE_OPTIONS.get(name, {}))
    draws = unconstrained_draws(model, ref)
    if stored is not None:
        stored.parent.mkdir(parents=True, exist_ok=True)
        np.save(stored, draws)
    return model, draws


def _finite(value: float) -> float | None:
    """``value`` as a float, ``None`` where it is not finite (JSON has no NaN)."""
    return float(value) if np.isfinite(value) else None


def reference_rhat(draws: np.ndarray, chains: int = REFERENCE_CHAINS) -> float:
    """The largest rank-normalised split R-hat of the reference's unconstrained draws (``draws``
    chain after chain, as :func:`model_and_reference` keeps them; NaN where constant)."""
    per_chain = draws.reshape(chains, -1, draws.shape[1])
    values = [float(az.rhat(per_chain[:, :, j])) for j in range(draws.shape[1])]
    finite = [v for v in values if np.isfinite(v)]
    return max(finite) if finite else float("nan")


def frame_eigenvalues(frame: np.ndarray, cov: np.ndarray) -> tuple[float, float]:
    """Smallest and largest eigenvalue of ``F^-1 Sigma F^-T`` (all 1 where ``F F' = Sigma``)."""
    inv = np.linalg.inv(frame)
    ev = np.linalg.eigvalsh(inv @ cov @ inv.T)
    return float(ev.min()), float(ev.max())


def start_point(model: Any, init: dict[str, Any]) -> np.ndarray:
    """The unconstrained start of ``sample(..., init=...)`` with only some parameters given: the
    others where the default start (zeros unconstrained) puts them."""
    values = model.constrain(np.zeros(int(model.dim)))
    unknown = set(init) - set(values)
    if unknown:
        raise ValueError(f"--init names no parameter of the model: {sorted(unknown)}")
    return np.asarray(model.unconstrain(values | {k: np.asarray(v, dtype=float) for k, v in init.items()}))


def exact_gradient(model: Any, theta: np.ndarray, frame: np.ndarray) -> np.ndarray:
    """The log density's gradient at ``theta`` in ``frame`` (``A' grad``), from the raw rows without
    clipping or noise plus the exact prior (NOT private: a yardstick for a round's release)."""
    _, grads = model.row_log_lik_grad(theta)
    _, pg = prior_gradient(model, theta)
    total = np.asarray(grads, dtype=float).reshape(-1, theta.size).sum(axis=0)
    return frame.T @ (total + np.where(np.isfinite(pg), pg, 0.0))


def true_clipping(model: Any, mean: np.ndarray, cov: np.ndarray, frame: np.ndarray,
                  bound: float) -> dict[str, Any]:
    """What clipping at the run's final ``bound`` in its final ``frame`` does at the reference mean,
    from the raw rows without noise (NOT private: the yardstick the stated clipping bias is set
    against).  ``true_clipped``: rows whose whitened gradient norm exceeds ``bound``;
    ``true_beyond2``: beyond twice it; ``true_max_ratio``: the largest norm over ``bound``;
    ``true_excess``: the length of the clipped rows' summed excess over ``bound`` (whitened);
    ``true_clip_bias``: per coordinate, in reference sds, how far that excess moves the root of the
    clipped score to first order (``-cov A^-T e``, signed as ``errors``)."""
    _, grads = model.row_log_lik_grad(mean)
    w = np.asarray(grads, dtype=float).reshape(-1, mean.size) @ frame
    norms = np.linalg.norm(w, axis=1)
    keep = np.minimum(1.0, bound / np.maximum(norms, 1e-300))
    excess = (w * (1.0 - keep)[:, None]).sum(axis=0)
    shift = -cov @ np.linalg.solve(frame.T, excess) / np.sqrt(np.diag(cov))
    return {"true_clipped": int((norms > bound).sum()), "true_beyond2": int((norms > 2.0 * bound).sum()),
            "true_max_ratio": float(norms.max() / bound), "true_excess": float(np.linalg.norm(excess)),
            "true_clip_bias": [float(v) for v in shift]}


def print_rounds(model: Any, newton: list[dict[str, Any]], mean: np.ndarray, cov: np.ndarray,
                 sd: np.ndarray) -> None:
    """One line per Newton round (``newton``: the trace's Newton rounds): distance in ``sd`` units,
    released and exact gradient in noise sds (frame axes), the frame's largest eigenvalue of
    ``cov``, the pool's size."""
    with np.printoptions(precision=2, suppress=True, linewidth=160):
        for k, t in enumerate(newton):
            dist = float(np.max(np.abs(t["theta"] - mean) / sd))
            exact = exact_gradient(model, t["theta"], t["frame"]) / t["grad_sd"]
            _, largest = frame_eigenvalues(t["frame"], cov)
            print(f"    round {k}: {dist:7.3g} sds off  released {t['grad'] / t['grad_sd']}  "
                  f"exact {exact}  frame eigenvalue {largest:.3g}  pooled {t['pooled']}")


def run(model: Any, mean: np.ndarray, cov: np.ndarray, epsilon: float, delta: float, seed: int,
        settings: AdaptationSettings, start: np.ndarray | None = None,
        rounds: bool = False) -> dict[str, Any]:
    """One private adaptation as ``stan_dp.sample(..., seed=seed)`` runs it, against the reference
    (``mean`` and ``cov`` of its unconstrained draws).

    ``start``: where the search starts (unconstrained); default as ``sample`` without ``init=``
    (zeros, or a point towards the mode of the program's priors that the rows choose).
    ``rounds``: print every Newton round (:func:`print_rounds`).
    """
    n, d = int(model.n_rows), int(model.dim)
    method = choose_method(n, d, epsilon, delta, "replace_one")   # as sample() picks it
    share = 1.0 if method == "gaussian" else MCMC_ADAPTATION_SHARE
    trace: list[dict[str, Any]] = []
    begin, prior_mode = _validated_start(model, None) if start is None else (start, None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adapted = _adapt(model, epsilon=epsilon, delta=delta, share=share, seed=seed,
                         relation="replace_one", public_n=None,
                         start=begin, prior_mode=prior_mode, settings=settings,
                         trace=trace)
    result = adapted.result
    sd = np.sqrt(np.diag(cov))
    newton = [t for t in trace if "frame" in t]
    if rounds:
        print_rounds(model, newton, mean, cov, sd)
    # what sample() reports: the Gaussian approximation's centre (the mode moved by the skew
    # check's shift beyond its noise), or the mode the chains start from
    centre = result.mode + (skew_correction(result) if method == "gaussian" else 0.0)
    signed = (centre - mean) / sd
    err = np.where(np.isfinite(signed), np.abs(signed), np.inf)
    noise_ref = np.sqrt(np.maximum(np.diag(result.noise_covariance), 0.0)) / sd
    choice = result.start_choice
    out = {"start_fraction": None if choice is None else choice.fraction,
           "start_scale_fraction": None if choice is None else choice.scale_fraction,
           "start_scores": None if choice is None else choice.scores.tolist(),
           "worst": float(err.max()), "coordinate": int(err.argmax()), "settled": bool(result.settled),
           "rounds": len(newton), "method": method,
           "checked": int(result.checked),
           "dispersion": float(result.dispersion) if np.isfinite(result.dispersion) else None,
           "over_dispersed": rounds_over_dispersed(result),
           # what the run would say: warnings of the search (forecast, not settled, prior-held,
           # heavy tail) and the chance of a miss the Gaussian approximation warns on beyond 10 %
           "adapt_warned": bool(adapted.attrs["warnings"]),
           "p_miss": float(adapted.attrs["noise_exceed_probability"]),
           "clipping_bias": float(adapted.attrs["clipping_bias_bound"]),
           "noise": float(adapted.attrs["max_noise_sd_in_posterior_sds"]),
           # the skew check: the posterior mean's shift from the mode by its shape, and whether
           # it warned (posterior sds)
           "skew_shift": float(adapted.attrs["skew_shift"]),
           "shape_ok": bool(adapted.attrs["gaussian_shape_ok"]),
           # the final pool's least curvature eigenvalue over its noise, and whether it warned of a
           # saddle (below -SADDLE_LIMIT)
           "least_curvature": (float(result.least_curvature) if np.isfinite(result.least_curvature)
                               else None),
           "saddle": bool(result.saddle),
           # the factor the near rounds' counts raised the curvature bound by (1: not raised)
           "curvature_raised": float(result.curvature_adjust),
           # per coordinate, in reference sds: the signed error and the noise sd the run states
           # (benchmarks/warning_calibration.py sets one against the other)
           "errors": [float(e) if np.isfinite(e) else None for e in signed],
           # the skew check's shift per coordinate, in reference sds (what moving the mode by it
           # would change)
           "skew_shifts": ([] if result.skew_shift is None else
                           [float(v) if np.isfinite(v) else None
                            for v in result.skew_shift * result.posterior_sd / sd]),
           # and its noise sd per coordinate, in reference sds
           "skew_shift_sds": ([] if result.skew_shift_sd is None else
                              [float(v) if np.isfinite(v) else None
                               for v in result.skew_shift_sd * result.posterior_sd / sd]),
           "noise_sds": [float(v) for v in noise_ref],
           # what the chance of a miss is computed from (auto._miss_probability): the released
           # counts of rows beyond the final bound and beyond TAIL_MULTIPLE times it, with their
           # noise sds, the bias one clipped row is taken to add, the final whitened bound, and
           # per coordinate the noise sd and the skew check's shape bias in reported posterior sds
           "clipped_rows": _finite(result.clipped_rows), "clipped_rows_sd": _finite(result.clipped_rows_sd),
           "tail_rows": _finite(result.tail_rows), "tail_rows_sd": _finite(result.tail_rows_sd),
           "bias_per_clipped_row": float(result.clipping_bias_per_row),
           "bound": float(result.grad_clip * result.clip_adjust),
           "adaptive_clip": bool(adapted.attrs["adaptive_clip"]),
           "noise_post": [float(v) for v in np.sqrt(np.maximum(np.diag(result.noise_covariance), 0.0))
                          / result.posterior_sd],
           "shape_bias": [float(v) for v in shape_bias(result)],
           "clip_adjust": float(result.clip_adjust)}
    if np.all(np.isfinite(result.frame)) and np.all(np.isfinite(mean)):
        out |= true_clipping(model, mean, cov, result.frame, float(result.grad_clip * result.clip_adjust))
    if newton:
        blind = [bool(np.all(t["eig"] <= min(1.0, t["tau"]) * (1.0 + 1e-9))) for t in newton]
        _, first_max = frame_eigenvalues(newton[0]["frame"], cov)
        last_min, last_max = frame_eigenvalues(newton[-1]["frame"], cov)
        out |= {"start": float(np.max(np.abs(newton[0]["theta"] - mean) / sd)), "frame0": first_max,
                "frame_end": last_max, "frame_end_min": last_min, "blind": int(sum(blind)),
                "pooled": int(newton[-1]["pooled"])}
    return out


def compare(file_a: str, file_b: str) -> None:
    """Pair two ``--out`` files run by run and print the summary of B against A."""
    def load(path: str) -> dict[tuple[str, ...], float]:
        rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
        return {(r["model"], str(r["n"]), str(r["epsilon"]), str(r["data_seed"]), str(r["seed"])): r["worst"]
                for r in rows}
    a, b = load(file_a), load(file_b)
    for model in sorted({k[0] for k in a} & {k[0] for k in b}):
        keys = sorted(k for k in set(a) & set(b) if k[0] == model)
        x = np.array([a[k] for k in keys])
        y = np.array([b[k] for k in keys])
        ratio = np.log(np.maximum(y, 1e-3) / np.maximum(x, 1e-3))
        ratio = np.where(np.isfinite(ratio), ratio, 0.0)
        p = stats.wilcoxon(ratio).pvalue if np.any(ratio != 0.0) else 1.0
        print(f"{model:15s} runs {len(keys):3d}  median {np.median(x):8.3g} -> {np.median(y):8.3g}  "
              f"max {x.max():9.3g} -> {y.max():9.3g}  geometric mean ratio {np.exp(ratio.mean()):.3f} "
              f"(p = {p:.3f}; {int(np.sum(np.isclose(x, y)))} runs the same)")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["gamma", "weibull", "earnings", "ordered"],
                    choices=[*published_models.MODELS, *GLMS])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--delta", type=float, default=1e-5)
    ap.add_argument("--data-seeds", nargs="+", type=int, default=[0, 1])
    ap.add_argument("--noise-seeds", nargs="+", type=int, default=list(range(11, 23)))
    ap.add_argument("--set", default="{}", help="JSON object of AdaptationSettings fields to override")
    ap.add_argument("--out", help="write one JSON line per run here (for --compare)")
    ap.add_argument("--cache", help="directory keeping the references' unconstrained draws")
    ap.add_argument("--oracle-start", action="store_true",
                    help="start at the reference mean (NOT private: what a start there is worth)")
    ap.add_argument("--init", default=None,
                    help="JSON object of constrained start values, as a user's data-independent "
                         "init= (the rest where the default start puts them)")
    ap.add_argument("--rounds", action="store_true",
                    help="print every Newton round against the exact rows (NOT private)")
    ap.add_argument("--compare", nargs=2, metavar=("A", "B"), help="pair two --out files and stop")
    args = ap.parse_args(argv)
    if args.compare:
        compare(*args.compare)
        return
    settings = AdaptationSettings()._replace(**json.loads(args.set))
    workdir = Path(tempfile.mkdtemp())
    cache = None if args.cache is None else Path(args.cache)
    lines = []
    print("model           n     eps  data seed  worst (coord) settled start   frame0   frame_end "
          "(min)   blind/rounds pooled")
    for name in args.models:
        for data_seed in args.data_seeds:
            model, draws = model_and_reference(name, args.n, data_seed, workdir, cache)
            mean, cov = draws.mean(axis=0), np.atleast_2d(np.cov(draws.T))
            ref_rhat = reference_rhat(draws)
            if ref_rhat > RHAT_MAX:
                print(f"# the reference of {name} (n={args.n}, data seed {data_seed}) did not converge "
                      f"(max R-hat {ref_rhat:.3g} > {RHAT_MAX:g}): its runs below are measured against "
                      "no yardstick (ref_rhat in --out)", flush=True)
            start = (mean if args.oracle_start
                     else None if args.init is None else start_point(model, json.loads(args.init)))
            for seed in args.noise_seeds:
                r = run(model, mean, cov, args.epsilon, args.delta, seed, settings, start, args.rounds)
                print(f"{name:15s} {args.n:<5d} {args.epsilon:<4g} {data_seed:<4d} {seed:<4d} "
                      f"{r['worst']:8.3g} ({r['coordinate']}) {str(r['settled']):5s} "
                      f"{r.get('start', np.nan):7.3g} {r.get('frame0', np.nan):8.3g} "
                      f"{r.get('frame_end', np.nan):9.3g} ({r.get('frame_end_min', np.nan):.2g}) "
                      f"{r.get('blind', 0)}/{r['rounds']:<3d} {r.get('pooled', 0)}", flush=True)
                lines.append(json.dumps({"model": name, "n": args.n, "epsilon": args.epsilon,
                                         "data_seed": data_seed, "seed": seed, "ref_rhat": ref_rhat,
                                         **r}))
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

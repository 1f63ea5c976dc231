"""The ``stan-dp`` command line.

Subcommands
-----------
``stan-dp rows MODEL.stan --data DATA.json [--rows N]``
    Compile a model, check that it decomposes over rows, and print a summary
    of its per-row log-likelihoods at a data-independent point.  The output is
    computed from the raw rows without noise and says so ("NOT private: for
    the data holder only").
``stan-dp sample MODEL.stan --data DATA.json --epsilon E --delta D [--sampler S] [options] [--output fit.nc]``
    A private fit: summary, warnings, privacy report, and the fit as netCDF.
    The default ``--sampler auto`` needs no other option (``stan_dp.sample``);
    ``penalty``, ``subsampled``, ``barker`` and ``hmc`` take the sampler options.
    With ``--shards A.json B.json ... --scheduler ADDRESS`` instead of
    ``--data`` the rows stay on Dask workers (:class:`stan_dp.distributed.ShardedModel`);
    ``--owners`` makes each shard a data owner that noises its own sums.
``stan-dp reference MODEL.stan --data DATA.json [--output ref.nc]``
    The non-private NUTS fit of the same model (CmdStan if installed,
    otherwise Stan's NUTS compiled from the bundled toolchain).
``stan-dp compare fit.nc ref.nc [--plot out.png]``
    The comparison table (means, sds, standardised mean error, sd ratio,
    Wasserstein-1 distance, coverage, R-hat and ESS of the private draws), the
    headline, MMD and the privacy report; optionally an overlay plot.
``stan-dp demo``
    The main job: a private fit of the bundled logistic regression on
    simulated data next to its non-private reference, with the comparison,
    the privacy report and a plot written to a folder it creates
    (``stan_dp_demo/`` by default, ``--output-dir`` to choose).

Errors in arguments or files give a one-line message and exit code 2 (1 for
an unexpected failure); they never print a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import sys
import warnings
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from stan_dp.bundled import BUNDLED_DIR as BUNDLED, bundled_model  # noqa: E402  (package data, not the checkout)


def _bundled(name: str) -> Path:
    return bundled_model(name)


DEMO_ALPHA = 0.5
DEMO_BETA = (1.0, 0.0, -1.0)


def simulated_logistic_data(n: int = 20000, seed: int = 20250101) -> dict:
    """Simulated data for the bundled logistic regression (public, synthetic).

    The true coefficients are ``DEMO_ALPHA`` and ``DEMO_BETA``.
    """
    rng = np.random.default_rng(seed)
    beta = np.asarray(DEMO_BETA)
    x = rng.normal(size=(n, beta.size))
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-(DEMO_ALPHA + x @ beta)))).astype(int)
    return {"N": n, "D": beta.size, "X": x, "y": y, "prior_scale": 2.5}


ROWS_LABEL = "NOT private: for the data holder only"
"""Heads every output of ``stan-dp rows``: it is computed from the raw rows without noise."""


def cmd_rows(args: argparse.Namespace) -> int:
    """Check a model's per-row decomposition and summarise its rows, for the data holder.

    Everything printed is computed from the raw data without noise (the row
    count, and the per-row log-likelihoods at a data-independent point, whose
    extremes can reveal single values): it is labelled as not private, and is
    meant for checking the model, never for publication.
    """
    from stan_dp import RowModel

    model = RowModel(args.model, args.data, rows=args.rows, row_vars=args.row_vars)
    theta = np.zeros(model.dim)
    values = np.asarray(model.row_log_lik(theta), dtype=float)
    finite = values[np.isfinite(values)]
    print(f"{ROWS_LABEL} (computed from the raw rows without noise; do not publish or share it)")
    print(model)
    print(f"sliced per row: {', '.join(model.row_vars)}")
    print("decomposition check: passed (log density = prior part + sum of per-row terms)")
    print(f"per-row log-likelihood at theta = 0 (unconstrained), {ROWS_LABEL}:")
    print(f"  rows with a finite value {finite.size}, -inf (impossible) "
          f"{int(np.count_nonzero(values == -np.inf))}, NaN (rejected by Stan) "
          f"{int(np.count_nonzero(np.isnan(values)))}, +inf {int(np.count_nonzero(values == np.inf))}")
    if finite.size:
        with np.errstate(all="ignore"):  # no warning that depends on the values
            print(f"  over the finite rows: min {finite.min():.4g}, mean {finite.mean():.4g}, "
                  f"max {finite.max():.4g} (the extremes can reveal single rows)")
    return 0


def read_init(spec: str | None, model) -> object:
    """The ``--init`` of ``stan-dp sample``: None, ``zeros`` or a JSON file.

    ``zeros`` is the origin of the unconstrained space (CmdStan's
    ``init=0``); a JSON file holds constrained values by variable name, as
    CmdStan's init files do, and may name only some of them (the rest start
    at zeros unconstrained).  Either must be chosen without the data.
    """
    from stan_dp.inference import read_init_file

    if spec is None:
        return None
    if spec == "zeros":
        return np.zeros(model.dim)
    if not Path(spec).is_file():
        raise FileNotFoundError(f"--init: not 'zeros' and no such file: {spec}")
    return read_init_file(spec)   # the library's reading of an init file (sample(init="file.json"))


# ---------------------------------------------------------------- sampling

SAMPLERS = {
    "penalty": "penalty",
    "subsampled": "subsampled_penalty",
    "barker": "barker",
    "hmc": "hmc",
}
"""``--sampler`` choice -> function name in :mod:`stan_dp`."""

SAMPLER_OPTIONS = (
    # (flag dest, type, help)
    ("iterations", int, "post-warm-up draws per chain"),
    ("noise", float, "noise multiplier (noise sd / sensitivity)"),
    ("clip", float, "log-likelihood-ratio clip bound"),
    ("step_size", float, "proposal / leapfrog step size"),
    ("proposal", str, "proposal of the penalty samplers: gaussian, component or guided"),
    ("temperature", float, "tempering T (likelihood to the power T)"),
    ("n0", float, "tempering as T = n0 / n (subsampled, barker)"),
    ("chains", int, "chains (default 4)"),
    ("warmup", int, "warm-up iterations per chain, counted in the budget (sampler's default)"),
    ("batch_size", int, "rows per iteration (subsampled, barker)"),
    ("correction_variance", float, "Barker's C (barker)"),
    ("grad_noise", float, "gradient noise multiplier (hmc)"),
    ("grad_clip", float, "per-row gradient clip bound (hmc)"),
    ("n_leapfrog", int, "leapfrog steps per iteration (hmc)"),
    ("relation", str, "neighbouring relation: replace_one or add_remove"),
)

PRIVACY_KEYS = ("sampler", "method", "epsilon", "delta", "epsilon_spent", "noise_multiplier",
                "grad_noise_multiplier", "relation", "accountant", "chains", "warmup",
                "iterations", "clip", "grad_clip", "batch_size", "temperature", "n_rows", "public_n",
                "seeded", "nonprivate_outputs", "release_summary", "search_settled", "frame_turned",
                "max_noise_sd_in_posterior_sds", "clipping_bias_bound", "skew_shift", "skew_correction",
                "saddle",
                "forecast_error", "max_rhat", "min_ess_bulk")


def _sampler_function(name: str):
    import stan_dp

    fn = getattr(stan_dp, SAMPLERS[name], None)
    if fn is None:
        raise ValueError(f"sampler {name!r} is not available in this version of stan_dp")
    return fn


def _sampler_kwargs(fn, args: argparse.Namespace) -> dict:
    """The sampler options given on the command line, refusing those ``fn`` does not take."""
    import inspect

    accepted = inspect.signature(fn).parameters
    kwargs = {}
    for dest, _, _ in SAMPLER_OPTIONS:
        value = getattr(args, dest, None)
        if value is None:
            continue
        if dest not in accepted:
            flag = "--" + dest.replace("_", "-")
            raise ValueError(f"option {flag} does not apply to sampler {args.sampler!r}")
        kwargs[dest] = value
    return kwargs


def print_privacy_report(attrs) -> None:
    """Print the privacy facts of a private fit, floats to 4 significant digits."""
    from stan_dp.report import format_report

    print(format_report("privacy report", attrs, PRIVACY_KEYS))


SUMMARY_DIGITS = 4
"""Significant figures of the command line's summary tables: ArviZ's default rounding (two
decimals) printed a coefficient on income in dollars, about 4e-4, as 0.000."""


def _table_text(table) -> str:
    """A summary table (unrounded) with :data:`SUMMARY_DIGITS` significant figures."""
    return table.to_string(float_format=lambda v: f"{v:.{SUMMARY_DIGITS}g}")


def _print_fit(fit) -> None:
    from stan_dp.report import stan_summary

    attrs = fit.posterior.attrs
    table = stan_summary(fit, kind="stats", round_to="none")   # Stan's 1-based names
    mixed = bool(attrs.get("mixed", True))
    if not mixed:
        # intervals of chains that did not mix are not credible intervals
        table = table[[c for c in table.columns if not c.startswith("hdi")]]
    print(_table_text(table))
    omitted = str(attrs.get("not_in_output", "") or "")
    if omitted:
        print(f"note: {omitted}")
    warnings_text = str(attrs.get("warnings", "") or "")
    if warnings_text:
        print()
        print("WARNINGS (this result is less accurate than it looks):")
        for line in warnings_text.split("\n"):
            print(f"  - {line}")
    if not mixed:
        print(f"  (intervals not shown: {_not_mixed_reason(attrs)}; the sd column is the draws' "
              "spread, not a posterior sd)")
    print()
    print_privacy_report(attrs)


def _not_mixed_reason(attrs: Any) -> str:
    """Why a fit's ``attrs["mixed"]`` is false, in words: for the Gaussian approximation, each of
    an unsettled search, a posterior the skew check found far from Gaussian, and a saddle point
    (``stan_dp.auto``); for chains, that they did not mix."""
    if attrs.get("sampler") != "gaussian":
        return "the chains did not mix"
    reasons = []
    if not bool(attrs.get("search_settled", True)):
        reasons.append("the private mode search did not settle")
    if bool(attrs.get("saddle", False)):
        reasons.append("it stopped at a saddle point")
    if not bool(attrs.get("gaussian_shape_ok", True)):
        reasons.append("the posterior is not Gaussian around the private mode")
    if str(attrs.get("at_bound", "") or ""):
        reasons.append(f"the draws of {attrs['at_bound']} collapse onto a bound")
    return "; ".join(reasons) if reasons else "the Gaussian approximation does not represent the posterior"


@contextlib.contextmanager
def _warnings_shown_once() -> Iterator[list]:
    """Hold back the fit's UtilityWarnings that its ``attrs["warnings"]`` records.

    The command prints those in its WARNINGS block (:func:`_print_fit`, or the comparison's
    diagnostics); Python's own display of the same text to stderr, with a line of stan_dp's
    source under each, doubled every warning.  Yields a one-item list for the fit; on leaving,
    also by an exception, every other warning caught (another category, a UtilityWarning the
    attrs do not record, or all of them where no fit was made) is shown as Python would have
    shown it, and a PrivacyWarning (about the user's budget) as ``stan-dp: privacy warning:
    ...``: nothing is lost.
    """
    from stan_dp.honesty import UtilityWarning
    from stan_dp.inference import PrivacyWarning

    holder: list = []
    held: list = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UtilityWarning)
            try:
                yield holder
            finally:
                held[:] = caught
    finally:   # outside the catch, so the caller's filters decide; also when the fit raised
        recorded = set()
        if holder:
            attrs = holder[0].posterior.attrs
            recorded = {m for m in str(attrs.get("warnings", "") or "").split("\n") if m}
        for w in held:
            if issubclass(w.category, UtilityWarning) and str(w.message) in recorded:
                continue
            if issubclass(w.category, PrivacyWarning):   # about the user's budget, not stan_dp's code
                print(f"stan-dp: privacy warning: {cli_words(str(w.message))}", file=sys.stderr)
                continue
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def _check_output(path: str | Path | None) -> None:
    """Refuse an ``--output`` path that cannot be written, before any data is read: a private fit
    whose draws cannot be saved would have spent its budget for nothing, and a re-run spends it
    again."""
    if not path:
        return
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise FileNotFoundError(f"output folder not found: {folder} (checked before the fit: no "
                                "budget was spent)")
    if path.is_dir():
        raise ValueError(f"--output {path} is a folder; give a file name such as {path / 'fit.nc'}")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise PermissionError(f"cannot write {path} (checked before the fit: no budget was spent)")


def _write_netcdf(idata, path: str | Path) -> Path:
    _check_output(path)
    path = Path(path)
    idata.to_netcdf(str(path))
    return path


def _check_sources(args: argparse.Namespace) -> None:
    """``--data`` or ``--shards`` (with ``--scheduler``), checked before any work."""
    shards = getattr(args, "shards", None)
    if (args.data is None) == (shards is None):
        raise ValueError("give the data as --data DATA.json, or as --shards A.json B.json ... "
                         "with --scheduler ADDRESS")
    if shards is None:
        if args.scheduler is not None or args.owners:
            raise ValueError("--scheduler and --owners go with --shards, not --data")
        return
    if args.scheduler is None:
        raise ValueError("--shards needs --scheduler ADDRESS (a Dask scheduler, or 'local' for a "
                         "cluster on this machine)")
    if args.owners and (args.relation or "replace_one") != "replace_one":
        raise ValueError("--owners supports --relation replace_one only: the owners' shard sizes "
                         "reach the driver, and they are public under replace-one but private "
                         "under add/remove")
    if args.owners and args.sampler != "penalty":
        raise ValueError("--owners (each data owner adds its own noise) works with --sampler "
                         "penalty only")


@contextlib.contextmanager
def _model(args: argparse.Namespace) -> Iterator[object]:
    """The model of ``stan-dp sample``: a RowModel, or a ShardedModel on a Dask cluster."""
    if args.shards is None:
        from stan_dp import RowModel

        yield RowModel(args.model, args.data, rows=args.rows, row_vars=args.row_vars)
        return
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise ValueError("--shards needs the Dask extra: pip install 'stan_dp[distributed]'") from None
    from stan_dp.distributed import ShardedModel

    with contextlib.ExitStack() as stack:
        if args.scheduler == "local":
            cluster = stack.enter_context(LocalCluster(
                n_workers=len(args.shards), threads_per_worker=1, processes=True,
                host="127.0.0.1", dashboard_address=":0"))   # any free port, never a clash
            client = stack.enter_context(Client(cluster))
        else:
            client = stack.enter_context(Client(args.scheduler))
        extra = {"row_vars": args.row_vars} if args.row_vars is not None else {}
        model = ShardedModel(client, args.model, args.shards, rows=args.rows,
                             owners=bool(args.owners), **extra)
        stack.callback(model.close)
        yield model


def cmd_sample(args: argparse.Namespace) -> int:
    from stan_dp import sample

    _check_sources(args)
    _check_output(args.output)
    if args.sampler in ("auto", "gaussian"):
        given = [("--" + d.replace("_", "-")) for d, _, _ in SAMPLER_OPTIONS
                 if getattr(args, d, None) is not None and d not in ("chains", "relation")]
        if given:
            raise ValueError(f"option(s) {', '.join(given)} do not apply to --sampler {args.sampler}; "
                             "name a sampler (e.g. --sampler hmc) to set them")
        with _model(args) as model, _warnings_shown_once() as shown:
            extra = {"chains": args.chains} if args.chains is not None else {}
            chosen: dict = {}
            if args.adaptive_clip is not None:
                chosen["adaptive_clip"] = args.adaptive_clip == "on"
            if args.far_phase is not None:
                from stan_dp.adaptation.far import FAR_ROUNDS

                chosen["far_rounds"] = FAR_ROUNDS if args.far_phase == "on" else 0
            if chosen:
                from stan_dp.adaptation import AdaptationSettings

                extra["settings"] = AdaptationSettings(**chosen)
            fit = sample(model, epsilon=args.epsilon, delta=args.delta, method=args.sampler,
                         seed=args.seed, relation=args.relation or "replace_one",
                         public_n=args.public_n, progress=not args.quiet,
                         init=read_init(args.init, model), **extra)
            shown.append(fit)
    else:
        for flag, value in (("--adaptive-clip", args.adaptive_clip), ("--far-phase", args.far_phase)):
            if value is not None:
                raise ValueError(f"{flag} applies to the private adaptation of --sampler auto or "
                                 f"gaussian, not to the seed's sampler {args.sampler}")
        fn = _sampler_function(args.sampler)
        kwargs = _sampler_kwargs(fn, args)
        with _model(args) as model, _warnings_shown_once() as shown:
            if args.init is not None:
                kwargs["init"] = read_init(args.init, model)
            fit = fn(model, epsilon=args.epsilon, delta=args.delta, seed=args.seed,
                     progress=not args.quiet, **kwargs)
            shown.append(fit)
    _print_fit(fit)
    if args.output:
        print(f"written: {_write_netcdf(fit, args.output)}")
    return 0


def cmd_reference(args: argparse.Namespace) -> int:
    from stan_dp import reference_fit
    from stan_dp.report import stan_summary

    _check_output(args.output)
    fit = reference_fit(args.model, args.data, chains=args.chains, draws=args.draws,
                        warmup=args.warmup, seed=args.seed, backend=args.backend,
                        init_radius=args.init_radius, metric=args.metric)
    print(_table_text(stan_summary(fit, round_to="none")))  # Stan's 1-based names, as compare prints them
    print(f"backend: {fit.posterior.attrs.get('backend', 'unknown')} (non-private)")
    if args.output:
        print(f"written: {_write_netcdf(fit, args.output)}")
    return 0


def _read_netcdf(path: str):
    from stan_dp.output import _import_arviz

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"file not found: {path}")
    az = _import_arviz()
    try:
        idata = az.from_netcdf(str(p))
    except Exception as exc:  # noqa: BLE001 - any reader failure means a malformed file
        raise ValueError(f"cannot read {path} as an ArviZ netCDF file ({type(exc).__name__})") from None
    if "posterior" not in idata.groups():
        raise ValueError(f"{path} has no posterior group")
    return idata


def report_comparison(private, reference, *, plot: str | Path | None, var_names=None) -> None:
    """Print the comparison table, MMD and privacy report; optionally write the plot."""
    from stan_dp import compare

    result = compare(private, reference, var_names=var_names)
    print("private fit vs non-private reference, one row per component (Stan's 1-based names)\n"
          "  std_mean_error = (mean - ref_mean) / ref_sd; sd_ratio = sd / ref_sd; "
          "w1 = Wasserstein-1 distance in reference sds\n"
          f"  coverage = share of reference draws inside the central {result.interval:.0%} of the "
          "private draws; rhat, ess_bulk: mixing of the private draws")
    print(result)
    print()
    print_privacy_report(result.privacy)
    if plot:
        print(f"plot: {result.plot(plot)}")


def cmd_compare(args: argparse.Namespace) -> int:
    fit, ref = _read_netcdf(args.fit), _read_netcdf(args.reference)
    report_comparison(fit, ref, plot=args.plot, var_names=args.var_names)
    return 0


# ---------------------------------------------------------------- the demo

def cmd_demo(args: argparse.Namespace) -> int:
    from stan_dp.accounting import validate_privacy_params

    validate_privacy_params(args.epsilon, args.delta)
    from stan_dp import RowModel, reference_fit, sample
    from stan_dp.samplers.penalty import penalty

    out = Path(args.output_dir)
    if not out.parent.is_dir():
        raise FileNotFoundError(f"output folder's parent not found: {out.parent}")
    out.mkdir(exist_ok=True)
    data = simulated_logistic_data(n=args.n)
    stan_file = _bundled("logistic_regression")
    print(f"stan_dp demo: bundled logistic regression, {args.n} simulated rows, D = {data['D']} "
          f"(truth: alpha {DEMO_ALPHA}, beta {list(DEMO_BETA)})")
    model = RowModel(stan_file, data)
    print(f"compiled and checked: {model}")
    # the comparison below prints the fit's warnings
    with _warnings_shown_once() as shown:
        if args.method == "auto":
            print(f"\n1. private fit: stan_dp.sample (automatic: private adaptation, noise-aware "
                  f"Gaussian), epsilon = {args.epsilon}, delta = {args.delta}")
            fit = sample(model, epsilon=args.epsilon, delta=args.delta, chains=args.chains,
                         seed=args.seed, progress=not args.quiet)
        else:
            print(f"\n1. private fit: penalty algorithm ({args.proposal} proposal), "
                  f"epsilon = {args.epsilon}, delta = {args.delta}")
            fit = penalty(
                model, epsilon=args.epsilon, delta=args.delta, clip=args.clip,
                step_size=args.step_size, proposal=args.proposal, chains=args.chains,
                warmup=args.warmup, iterations=args.iterations, seed=args.seed,
                init=np.zeros(model.dim), progress=not args.quiet,
            )
        shown.append(fit)
    print("2. non-private reference: Stan's NUTS on the same data")
    ref = reference_fit(stan_file, data, chains=args.chains, draws=args.reference_draws,
                        warmup=args.reference_draws, seed=args.seed)
    print(f"   backend: {ref.posterior.attrs.get('backend', 'unknown')}\n")
    fit_path = _write_netcdf(fit, out / "stan_dp_demo_fit.nc")
    ref_path = _write_netcdf(ref, out / "stan_dp_demo_reference.nc")
    report_comparison(fit, ref, plot=out / "stan_dp_demo.png")
    print(f"written: {fit_path}, {ref_path}")
    return 0


def _int_at_least(minimum: int):
    """argparse type: an integer >= ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


_positive_int = _int_at_least(1)
_nonnegative_int = _int_at_least(0)


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error and exit code 2 (no usage dump)."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="stan-dp", description="Differentially private MCMC on Stan models")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    rows = sub.add_parser("rows", help="check a model's per-row decomposition (output NOT private: "
                                       "for the data holder only)")
    rows.add_argument("model", help="a .stan file")
    rows.add_argument("--data", required=True, help="data as a JSON file")
    rows.add_argument("--rows", default="N", help="the data variable counting rows (default N)")
    rows.add_argument("--row-vars", dest="row_vars", nargs="+", default=None, metavar="VAR",
                      help="the data variables to slice per row (default: every variable whose "
                           "leading dimension is the row count)")
    rows.set_defaults(func=cmd_rows)

    sample = sub.add_parser("sample", help="a private fit of a Stan model")
    sample.add_argument("model", help="a .stan file")
    sample.add_argument("--data", default=None, help="data as a JSON file (or --shards)")
    sample.add_argument("--shards", nargs="+", default=None, metavar="JSON",
                        help="the data as one JSON file per shard, each opened by the Dask worker "
                             "that holds it (needs --scheduler; stan_dp[distributed])")
    sample.add_argument("--scheduler", default=None, metavar="ADDRESS",
                        help="a Dask scheduler address (tcp://host:8786), or 'local' to start a "
                             "cluster of one worker per shard on this machine")
    sample.add_argument("--owners", action="store_true",
                        help="each shard is a data owner that adds its own noise before anything "
                             "leaves it (Algorithm 2; --sampler penalty)")
    sample.add_argument("--rows", default="N", help="the data variable counting rows (default N)")
    sample.add_argument("--sampler", "--method", dest="sampler", default="auto",
                        choices=["auto", "gaussian"] + sorted(SAMPLERS),
                        help="auto (default): private adaptation and the noise-aware Gaussian; "
                             "or one of the seeds' samplers")
    sample.add_argument("--public-n", dest="public_n", type=_positive_int, default=None,
                        help="a public row count (needed with --relation add_remove, where n is private)")
    sample.add_argument("--adaptive-clip", dest="adaptive_clip", choices=["on", "off"], default=None,
                        help="raise the gradient clip bound near the mode while the released count "
                             "of clipped rows is too large (default: on where the public "
                             "forecast does not warn or the program declares a parameter with "
                             "only a lower bound, a scale or shape; 'on' can help other rows "
                             "with skewed gradients, docs/adaptation.md §3)")
    sample.add_argument("--far-phase", dest="far_phase", choices=["on", "off"], default=None,
                        help="the sign-led steps from a start far from the posterior before the "
                             "Newton rounds (default: on where its votes can be resolved). 'off' "
                             "can still help at about 1,000 rows where most rows sit at one value: "
                             "a binary outcome far from 50 %% (5-20 %% events) or counts that are "
                             "mostly 0 (the steps follow the many rows' direction; a step past the "
                             "mode that collapses their gradients is taken back, a shorter one is "
                             "not, docs/adaptation.md §7, \"Imbalanced binary outcomes\")")
    sample.add_argument("--epsilon", type=float, required=True, help="privacy budget epsilon (whole run)")
    sample.add_argument("--delta", type=float, required=True, help="privacy budget delta (whole run)")
    for dest, kind, text in SAMPLER_OPTIONS:
        parse = (_nonnegative_int if dest == "warmup" else _positive_int) if kind is int else kind
        sample.add_argument("--" + dest.replace("_", "-"), dest=dest, type=parse, default=None, help=text)
    sample.add_argument("--row-vars", dest="row_vars", nargs="+", default=None, metavar="VAR",
                        help="the data variables to slice per row (default: every variable "
                             "whose leading dimension is the row count)")
    sample.add_argument("--init", default=None,
                        help="initial point, chosen without the data: 'zeros' (unconstrained "
                             "origin) or a JSON file of parameter values, which may name only "
                             "some (the rest start at zeros unconstrained; e.g. {\"sigma\": 20} "
                             "for a scale parameter on the outcome's scale). Default: zeros for "
                             "the automatic path, or a point towards the mode of the program's "
                             "priors where they place a location away from zeros and the rows "
                             "prefer it (1%% of the budget); random for a seed's sampler given "
                             "all its knobs")
    sample.add_argument("--seed", type=_nonnegative_int, default=None,
                        help="fix for a reproducible (not publishable) run")
    sample.add_argument("--output", default=None, help="write the fit as netCDF (e.g. fit.nc)")
    sample.add_argument("--quiet", action="store_true", help="no progress bar")
    sample.set_defaults(func=cmd_sample)

    ref = sub.add_parser("reference", help="the non-private NUTS fit of a Stan model")
    ref.add_argument("model", help="a .stan file")
    ref.add_argument("--data", required=True, help="data as a JSON file")
    ref.add_argument("--chains", type=_positive_int, default=4)
    ref.add_argument("--draws", type=_positive_int, default=1000)
    ref.add_argument("--warmup", type=_nonnegative_int, default=1000)
    ref.add_argument("--seed", type=_nonnegative_int, default=None)
    ref.add_argument("--backend", default="auto", choices=["auto", "cmdstan", "offline"])
    ref.add_argument("--init-radius", type=float, default=2.0,
                     help="chains start uniformly on (-R, R) in unconstrained space, as CmdStan's "
                          "init=R (default 2; 0 starts every chain at 0)")
    ref.add_argument("--metric", default="diag_e", choices=["diag_e", "dense_e"],
                     help="CmdStan's metric: the inverse metric adapted in warm-up is a diagonal "
                          "(default) or a full matrix (strongly correlated parameters)")
    ref.add_argument("--output", default=None, help="write the fit as netCDF (e.g. ref.nc)")
    ref.set_defaults(func=cmd_reference)

    cmp = sub.add_parser("compare", help="a private fit next to a reference fit")
    cmp.add_argument("fit", help="the private fit (netCDF)")
    cmp.add_argument("reference", help="the reference fit (netCDF)")
    cmp.add_argument("--plot", default=None, help="write an overlay plot (PNG)")
    cmp.add_argument("--var-names", nargs="+", default=None,
                     help="variables (beta) or components (beta[2]) to compare (default: all)")
    cmp.set_defaults(func=cmd_compare)

    demo = sub.add_parser("demo", help="the main job: a private fit next to its non-private reference")
    demo.add_argument("--n", type=_positive_int, default=20000, help="simulated rows (default 20000)")
    demo.add_argument("--epsilon", type=float, default=4.0, help="privacy budget epsilon (default 4)")
    demo.add_argument("--delta", type=float, default=1e-5, help="privacy budget delta (default 1e-5)")
    demo.add_argument("--method", default="auto", choices=["auto", "penalty"],
                      help="auto (default): stan_dp.sample with no knobs; penalty: the seed's "
                           "penalty algorithm with the options below")
    demo.add_argument("--clip", type=float, default=2.5, help="clip bound L (default 2.5)")
    demo.add_argument("--step-size", type=float, default=0.006, help="proposal step (default 0.006)")
    demo.add_argument("--proposal", default="guided", choices=["gaussian", "component", "guided"])
    demo.add_argument("--chains", type=_positive_int, default=2)
    demo.add_argument("--warmup", type=_nonnegative_int, default=1500)
    demo.add_argument("--iterations", type=_positive_int, default=1000, help="draws per chain after warm-up")
    demo.add_argument("--reference-draws", type=_positive_int, default=1000,
                      help="NUTS warm-up and draws per chain of the reference (default 1000)")
    demo.add_argument("--output-dir", default="stan_dp_demo",
                      help="folder for the fits and the plot, created if needed "
                           "(default: stan_dp_demo)")
    demo.add_argument("--seed", type=_nonnegative_int, default=None, help="fix for a reproducible (not publishable) run")
    demo.add_argument("--quiet", action="store_true", help="no progress bar")
    demo.set_defaults(func=cmd_demo)
    return parser


ERROR_LINES = 40
"""Most lines of an error message the command line prints (stanc's and Stan's diagnostics run to a
few lines; a C++ compiler's can run to thousands)."""


def _error_text(exc: BaseException) -> str:
    """The error's whole message in the command line's words: its first line after
    ``stan-dp: error:``, the rest (stanc's location and diagnosis, Stan's reason) indented below,
    at most :data:`ERROR_LINES` lines."""
    lines = [line.rstrip() for line in str(exc).strip().splitlines()]
    lines = [line for line in lines if line.strip()] or [type(exc).__name__]
    more = len(lines) - ERROR_LINES
    shown = [cli_words(line) for line in lines[:ERROR_LINES]]
    if more > 0:
        shown.append(f"... ({more} more lines)")
    return "\n".join([shown[0], *("  " + line for line in shown[1:])])


CLI_FLAGS: dict[str, str] = {
    "rows": "--rows", "row_vars": "--row-vars", "init": "--init", "public_n": "--public-n",
    **{dest: "--" + dest.replace("_", "-") for dest, _, _ in SAMPLER_OPTIONS},
}
"""Python keyword (as messages write it, ``rows=``) -> the command line's flag."""


def cli_words(message: str) -> str:
    """A library message in the command line's words: ``rows=`` becomes ``--rows``.

    The library speaks Python (``pass init=``, ``check rows=/row_vars=``);
    every keyword that has a flag is renamed, and ``RowModel(...,
    public_data=...)``, which has none, is marked as the Python API.
    """
    def flag(m: re.Match) -> str:
        if m.group(1) not in CLI_FLAGS:
            return m.group(0)
        value = m.group(2) or ""
        if value == "...":
            return CLI_FLAGS[m.group(1)] + " ..."
        # a quoted Python value is the flag's argument: relation='add_remove' -> --relation add_remove
        return CLI_FLAGS[m.group(1)] + (" " + value[1:-1] if value else "")

    out = re.sub(r"(?<![\w.-])([a-z_]+)=(?!=)(\.\.\.|'[^']*'|\"[^\"]*\")?", flag, message)
    return out.replace("RowModel(..., public_data=", "the Python API's RowModel(..., public_data=")


class _CliLogHandler(logging.StreamHandler):
    """Shows stan_dp's INFO messages (compile progress) on the current stderr as ``stan-dp: ...``."""

    @property  # type: ignore[override]
    def stream(self):  # noqa: D102 - the stderr of the moment (tests replace it)
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


@contextlib.contextmanager
def _progress_messages() -> Iterator[None]:
    """stan_dp's INFO messages on stderr while a command runs; the logger is restored after."""
    log = logging.getLogger("stan_dp")
    level = log.level
    handler = _CliLogHandler()
    handler.setFormatter(logging.Formatter("stan-dp: %(message)s"))
    log.addHandler(handler)
    if level == logging.NOTSET or level > logging.INFO:
        log.setLevel(logging.INFO)
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.setLevel(level)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with _progress_messages():
            return int(args.func(args))
    except (FileNotFoundError, ValueError, RuntimeError, TypeError, OSError, KeyError) as exc:
        print(f"stan-dp: error: {_error_text(exc)}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - the command line never shows a traceback
        print(f"stan-dp: error: {type(exc).__name__}: {_error_text(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # pragma: no cover
        print("stan-dp: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

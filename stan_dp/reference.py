"""Non-private reference fits: Stan's own NUTS on the full data.

A private posterior is judged by putting it next to the non-private fit of
the same model and data.  :func:`reference_fit` runs Stan's adaptive NUTS
(diagonal metric, CmdStan's defaults) and returns ArviZ ``InferenceData``
with the same variable names and shapes as the private samplers' output.

Two backends give the same kind of object:

- ``"cmdstan"``: CmdStan through ``cmdstanpy``, converted with ArviZ's
  ``from_cmdstanpy``; used when a CmdStan installation is found
  (``STAN_DP_CMDSTAN`` or cmdstanpy's own discovery).
- ``"offline"``: Stan's NUTS service (``stan::services::sample::
  hmc_nuts_diag_e_adapt``, the function CmdStan calls) compiled into a
  "reference" variant of the stan_dp model library with the toolchain the
  package already ships (the ``httpstan`` wheel); no CmdStan, no network.

THE OUTPUT IS NOT PRIVATE: it is computed from the raw data without any
privacy mechanism, and is meant as a yardstick only.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from stan_dp.accounting.validation import check_real
from stan_dp.data import load_data
from stan_dp.output import build_inference_data, netcdf_safe_attrs

logger = logging.getLogger(__name__)

__all__ = ["reference_fit", "BACKENDS", "METRICS", "cmdstan_available"]

#: Accepted values of ``backend``.
BACKENDS: tuple[str, ...] = ("auto", "cmdstan", "offline")

#: Accepted values of ``metric`` (CmdStan's ``metric=``; ``unit_e``, which adapts no metric at
#: all, is not offered: a yardstick wants the adapted one).
METRICS: tuple[str, ...] = ("diag_e", "dense_e")

#: Stan's sampler columns -> ArviZ ``sample_stats`` names (as ``from_cmdstanpy``) and dtypes.
SAMPLE_STATS: dict[str, tuple[str, type]] = {
    "lp__": ("lp", float),
    "accept_stat__": ("acceptance_rate", float),
    "stepsize__": ("step_size", float),
    "treedepth__": ("tree_depth", np.int64),
    "n_leapfrog__": ("n_steps", np.int64),
    "divergent__": ("diverging", bool),
    "energy__": ("energy", float),
}

_MAX_SEED = 2**32 - 1


def _positive_int(value: Any, name: str, minimum: int = 1) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return int(value)


def _check_seed(seed: Any) -> int | None:
    if seed is None:
        return None
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"seed must be None or an integer, got {seed!r}")
    if not 0 <= seed <= _MAX_SEED:
        raise ValueError(f"seed must be in [0, 2**32 - 1] (Stan's seed range), got {seed}")
    return int(seed)


def _stan_file(model: Any) -> Path:
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(f"model must be the path of a .stan file, not {type(model).__name__}")
    path = Path(model).expanduser()
    if path.suffix != ".stan":
        raise ValueError(f"model must be a .stan file, got {model}")
    if not path.is_file():
        raise FileNotFoundError(f"Stan file not found: {model}")
    return path.resolve()


def _check_scalar_data(stan_path: Path, values: Mapping[str, Any]) -> None:
    """Check the program with stanc, and refuse data lacking a scalar it declares.

    Runs before any compilation and for both backends, so that a syntax
    error is the same :class:`~stan_dp.toolchain.StanCompileError` (with
    stanc's file, line and column) whichever backend would run.  Arrays are
    left to Stan (a zero-size array may be omitted); its message names the
    variable too.  Skipped quietly if the bundled stanc is unavailable.
    """
    from stan_dp.toolchain import StanCompileError, ToolchainError, find_toolchain

    try:
        stanc = find_toolchain().stanc
        proc = subprocess.run([str(stanc), "--info", f"--include-paths={stan_path.parent}",
                               str(stan_path)], capture_output=True, text=True, timeout=60)
    except (ToolchainError, OSError, subprocess.TimeoutExpired):
        return
    if proc.returncode != 0:
        raise StanCompileError(
            f"stanc could not translate {stan_path.name}:\n"
            + (proc.stderr.strip() or proc.stdout.strip()))
    try:
        inputs = json.loads(proc.stdout)["inputs"]
    except (ValueError, KeyError):
        return
    missing = [n for n, info in inputs.items()
               if info.get("dimensions") == 0 and n not in values]
    if missing:
        raise ValueError(
            f"the data lack {', '.join(map(repr, missing))}, declared in the data "
            f"block of {stan_path.name}"
        )


@contextlib.contextmanager
def _cmdstanpy_env(path: str | None) -> Iterator[None]:
    """Point cmdstanpy at ``path`` (if given) for the block, then restore its setting.

    cmdstanpy keeps its CmdStan path in ``os.environ["CMDSTAN"]``; both
    ``set_cmdstan_path`` and ``cmdstan_path()`` (when it discovers an
    installation under ``~/.cmdstan``) write it.  stan_dp never leaves such
    a change behind.
    """
    saved = os.environ.get("CMDSTAN")
    try:
        if path is not None:
            os.environ["CMDSTAN"] = path
        yield
    finally:
        if saved is None:
            os.environ.pop("CMDSTAN", None)
        else:
            os.environ["CMDSTAN"] = saved


def find_cmdstan() -> Path | None:
    """The CmdStan installation a reference fit would use, or None.

    ``STAN_DP_CMDSTAN`` when set, otherwise cmdstanpy's own discovery
    (``CMDSTAN``, then the newest under ``~/.cmdstan``).  cmdstanpy's global
    setting is left as it was.
    """
    try:
        import cmdstanpy
        from cmdstanpy.utils import validate_cmdstan_path
    except ImportError:
        return None
    env = os.environ.get("STAN_DP_CMDSTAN")
    with _cmdstanpy_env(None):
        try:
            if env:
                validate_cmdstan_path(env)
                return Path(env).expanduser().resolve()
            return Path(cmdstanpy.cmdstan_path()).resolve()
        except (ValueError, OSError):
            return None


def cmdstan_available() -> bool:
    """Whether a CmdStan installation is found (``STAN_DP_CMDSTAN`` or cmdstanpy's discovery).

    It does not change cmdstanpy's global CmdStan path.
    """
    return find_cmdstan() is not None


def cmdstan_version_string(root: Path | None) -> str:
    """CmdStan's version as ``"MAJOR.MINOR.PATCH"``, the format of ``nuts.stan_version``.

    Read from the installation's ``makefile`` (``CMDSTAN_VERSION := 2.35.0``);
    if it does not say, from ``cmdstanpy.cmdstan_version()`` with patch 0.
    """
    if root is not None:
        try:
            text = (root / "makefile").read_text()
            m = re.search(r"^CMDSTAN_VERSION\s*:=\s*(\d+\.\d+\.\d+)", text, re.M)
            if m:
                return m.group(1)
        except OSError:
            pass
    import cmdstanpy

    with _cmdstanpy_env(None if root is None else str(root)):
        version = cmdstanpy.cmdstan_version()
    if not version:
        return "unknown"
    return ".".join(str(v) for v in (tuple(version) + (0, 0, 0))[:3])


def _choose_backend(backend: str) -> str:
    if backend == "offline":
        return "offline"
    if cmdstan_available():
        return "cmdstan"
    if backend == "cmdstan":
        raise RuntimeError(
            "backend='cmdstan' but no CmdStan installation was found: install it with "
            "cmdstanpy.install_cmdstan(), set STAN_DP_CMDSTAN to its directory, or use "
            "backend='offline'"
        )
    return "offline"


def columns_to_groups(
    names: list[str], values: np.ndarray
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Split Stan's output columns into model variables and sampler statistics.

    Parameters
    ----------
    names : list of str
        Stan's column names (``lp__``, ..., ``beta.1``, ...).
    values : ndarray, shape (chains, iterations, len(names))

    Returns
    -------
    (dict, dict)
        ``name -> (chains, iterations, *shape)`` for the model's variables
        (Stan's column-major layout, as :mod:`stan_dp.params`) and for the
        sampler statistics under their ArviZ names.
    """
    import stanio

    variables = stanio.parse_header(",".join(names))
    draws: dict[str, np.ndarray] = {}
    stats: dict[str, np.ndarray] = {}
    for name, var in variables.items():
        array = var.extract_reshape(values)
        if name in SAMPLE_STATS:
            arviz_name, dtype = SAMPLE_STATS[name]
            stats[arviz_name] = array.astype(dtype)
        elif not name.endswith("__"):
            draws[name] = array
    return draws, stats


def _attrs(*, backend: str, stan_version: str, stan_path: Path, seed: int, seeded: bool,
           chains: int, draws: int, warmup: int, adapt_delta: float,
           max_treedepth: int, init_radius: float, metric: str) -> dict[str, Any]:
    from stan_dp.version import __version__

    return {
        "backend": backend,
        "sampler": "nuts",
        "private": False,
        "stan_version": stan_version,
        "model": stan_path.name,
        "seed": seed,
        "seeded": seeded,
        "chains": chains,
        "draws": draws,
        "warmup": warmup,
        "adapt_delta": adapt_delta,
        "max_treedepth": max_treedepth,
        "init_radius": init_radius,
        "metric": metric,
        "stan_dp_version": __version__,
    }


def _fit_offline(stan_path: Path, data_json: str, *, seed: int, seeded: bool, chains: int,
                 draws: int, warmup: int, adapt_delta: float, max_treedepth: int, init_radius: float,
                 metric: str, parallel_chains: int, progress: bool, cache_dir: Any) -> Any:
    from stan_dp.progress import Progress
    from stan_dp.native import nuts
    from stan_dp.toolchain import compile_model

    library = compile_model(stan_path, variant="reference", cache_dir=cache_dir)
    lib = nuts.load(library)
    bar = Progress(chains * (warmup + draws), progress, "reference NUTS")
    done = [0]

    def on_progress(total: int) -> None:
        bar.update(total - done[0])
        done[0] = total

    try:
        out = nuts.run_nuts(
            lib, data_json, seed=seed, chains=chains, warmup=warmup, draws=draws,
            settings=nuts.NutsSettings(delta=adapt_delta, max_depth=max_treedepth, init_radius=init_radius,
                                       dense=metric == "dense_e"),
            threads=parallel_chains, on_progress=on_progress,
        )
    except nuts.NutsDataError as exc:
        raise ValueError(f"the data do not fit {stan_path.name}: {exc}") from None
    except nuts.NutsError as exc:
        raise nuts.NutsError(f"{exc}{_init_hint(str(exc), init_radius)}") from None
    finally:
        bar.close()
    for line in out.messages.splitlines():
        logger.debug("%s", line)
    posterior, stats = columns_to_groups(out.names, out.values)
    attrs = _attrs(backend="offline", stan_version=nuts.stan_version(lib), stan_path=stan_path,
                   seed=seed, seeded=seeded, chains=chains, draws=draws, warmup=warmup,
                   adapt_delta=adapt_delta, max_treedepth=max_treedepth, init_radius=init_radius,
                   metric=metric)
    return build_inference_data(posterior, stats, warmup=warmup, attrs=attrs)


#: Phrases of CmdStan's console output when the data do not fit the program
#: (reading the JSON, the data block's sizes and constraints).
_CMDSTAN_DATA_ERRORS = ("processing stage=data initialization", "variable name=",
                        "variable does not exist", "Error reading", "mismatch in dimension",
                        "mismatch in number dimensions", "int variable contained non-int values")


def _init_hint(message: str, init_radius: float) -> str:
    """What to add to Stan's report when no chain could start (empty otherwise)."""
    if "Initialization failed" not in message or init_radius == 0.0:
        return ""
    return (f"\nstan_dp: no chain found a finite log density at uniform draws on "
            f"(-{init_radius:g}, {init_radius:g}) in unconstrained space; init_radius=0 "
            "(stan-dp reference --init-radius 0) starts every chain at 0, where stan_dp's "
            "private search starts")


def cmdstan_model_file(stan_path: Path, root: Path | None,
                       cache_dir: str | os.PathLike[str] | None) -> Path:
    """A copy of the program in stan_dp's cache, where CmdStan builds its executable.

    cmdstanpy writes the executable next to the ``.stan`` file; compiling a
    copy keeps the user's folder clean.  The copy's folder is keyed by the
    source and the installation, so a change of either builds anew; the
    original folder stays on the include path.
    """
    from stan_dp.toolchain import default_cache_dir

    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    source = stan_path.read_bytes()
    key = hashlib.sha256(source + b"\0" + str(root).encode() + b"\0"
                         + str(stan_path.parent).encode()).hexdigest()[:16]
    target = cache / "cmdstan" / key / stan_path.name
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp")
        shutil.copyfile(stan_path, tmp)
        os.replace(tmp, target)
    return target


def _fit_cmdstan(stan_path: Path, data: Any, *, seed: int, seeded: bool, chains: int,
                 draws: int, warmup: int, adapt_delta: float, max_treedepth: int, init_radius: float,
                 metric: str, parallel_chains: int, progress: bool, cache_dir: Any = None) -> Any:
    import cmdstanpy

    from stan_dp.output import _import_arviz
    from stan_dp.toolchain import StanCompileError

    az = _import_arviz()
    root = find_cmdstan()
    model_file = cmdstan_model_file(stan_path, root, cache_dir)
    if not model_file.with_suffix("").exists():
        logger.info("compiling %s with CmdStan (first time, about 30-60 s)", stan_path.name)
    with _cmdstanpy_env(None if root is None else str(root)):
        try:
            model = cmdstanpy.CmdStanModel(
                stan_file=str(model_file),
                stanc_options={"include-paths": [str(stan_path.parent)]})
        except (ValueError, RuntimeError) as exc:
            raise StanCompileError(f"CmdStan could not compile {stan_path.name}: {exc}") from None
        try:
            fit = model.sample(
                data=data, chains=chains, iter_warmup=warmup, iter_sampling=draws, seed=seed,
                save_warmup=warmup > 0, adapt_delta=adapt_delta, max_treedepth=max_treedepth,
                inits=init_radius, metric=metric, parallel_chains=parallel_chains, show_progress=progress,
            )
        except RuntimeError as exc:
            text = str(exc)
            if any(p in text for p in _CMDSTAN_DATA_ERRORS):
                detail = next((line.strip() for line in text.splitlines()
                               if any(p in line for p in _CMDSTAN_DATA_ERRORS)), text)
                raise ValueError(f"the data do not fit {stan_path.name}: {detail}") from None
            raise RuntimeError(f"CmdStan failed on {stan_path.name}: {exc}"
                               f"{_init_hint(text, init_radius)}") from exc
        version = cmdstan_version_string(root)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        idata = az.from_cmdstanpy(posterior=fit, save_warmup=warmup > 0)
    attrs = netcdf_safe_attrs(_attrs(
        backend="cmdstan", stan_version=version, stan_path=stan_path, seed=seed,
        seeded=seeded, chains=chains, draws=draws, warmup=warmup, adapt_delta=adapt_delta,
        max_treedepth=max_treedepth, init_radius=init_radius, metric=metric))
    idata.attrs.update(attrs)
    for group in idata.groups():
        idata[group].attrs.update(attrs)
    return idata


def reference_fit(
    model: str | os.PathLike[str],
    data: Mapping[str, Any] | str | os.PathLike[str] | None,
    *,
    chains: int = 4,
    draws: int = 1000,
    warmup: int = 1000,
    seed: int | None = None,
    backend: str = "auto",
    adapt_delta: float = 0.8,
    max_treedepth: int = 10,
    init_radius: float = 2.0,
    metric: str = "diag_e",
    parallel_chains: int | None = None,
    progress: bool = False,
    cache_dir: str | os.PathLike[str] | None = None,
):
    """Fit a Stan model to the full data with Stan's NUTS (NOT private).

    The non-private yardstick for private fits: Stan's adaptive NUTS with
    CmdStan's defaults (a diagonal metric unless ``metric="dense_e"``),
    chain ``k`` with chain id ``k`` and the one ``seed`` (Stan derives each
    chain's random stream from seed and chain id, as CmdStan does).

    Parameters
    ----------
    model : str or path
        A ``.stan`` program.
    data : mapping, str or path, or None
        Variable name to value, or the path of a JSON data file.
    chains : int
        Number of chains.
    draws : int
        Post-warm-up draws per chain.
    warmup : int
        Warm-up (adaptation) iterations per chain; kept in the
        ``warmup_posterior`` and ``warmup_sample_stats`` groups.
    seed : int, optional
        Stan's seed, ``0 <= seed < 2**32``; ``None`` draws one from OS entropy.
        The seed used is recorded in ``attrs["seed"]`` (and ``attrs["seeded"]``
        says whether the caller fixed it).
    backend : {"auto", "cmdstan", "offline"}
        ``"auto"`` uses CmdStan (through cmdstanpy) when an installation is
        found and the offline NUTS service otherwise; the other two force
        one and raise if it is unavailable.
    adapt_delta : float
        Target acceptance statistic of step-size adaptation, in (0, 1).
    max_treedepth : int
        Maximum NUTS tree depth.
    init_radius : float
        CmdStan's ``init=R``: each chain starts at a uniform draw on ``(-R, R)``
        in unconstrained space; 0 starts every chain at 0 (bounded parameters
        at the middle of their range, positive ones at 1, where stan_dp's
        private search starts).  Lower it when Stan reports "Rejecting initial
        value": a probit regression ``bernoulli(Phi(a + b * dist))`` with a
        distance in metres has a log density of -inf nearly everywhere on
        ``(-2, 2)``, and no chain could start there.
    metric : {"diag_e", "dense_e"}
        CmdStan's ``metric``: the inverse metric adapted in warm-up is a
        diagonal (CmdStan's default) or a full matrix.  A dense metric costs
        ``O(d^2)`` per leapfrog step but crosses a posterior whose
        parameters are strongly correlated in short trajectories (two
        predictors 0.999 correlated: 4 leapfrog steps per draw against 206,
        ``tests/test_reference.py``).  Neither rescales a coefficient whose
        posterior sd is far below 0.03: Stan adds ``1e-3 * 5 / (m + 5)`` to
        every adapted variance (``m`` the window's draws), so a slope on an
        income in dollars (``benchmarks/user_programs``' ``poisglm``, sd
        5.6e-7) keeps a metric thousands of times too wide, and its chains
        gave R-hat 2.34 with ``diag_e`` and 2.12 with ``dense_e`` (every
        chain started at 0); rescale such predictors.
    parallel_chains : int, optional
        Chains run at the same time; default ``min(chains, os.cpu_count())``.
        Results do not depend on it.
    progress : bool
        Show a progress bar.
    cache_dir : path, optional
        stan_dp's cache (default the per-user one): the compiled library
        (offline backend), or the copy of the program that CmdStan compiles
        (the executable is built there, never next to ``model``).

    Returns
    -------
    arviz.InferenceData
        ``posterior`` (every parameter, transformed parameter and generated
        quantity with Stan's names and shapes, e.g. ``beta`` with shape
        ``(chain, draw, D)``), ``sample_stats`` (``lp``, ``acceptance_rate``,
        ``step_size``, ``tree_depth``, ``n_steps``, ``diverging``,
        ``energy``), the warm-up groups, and ``attrs`` with ``backend``,
        ``sampler="nuts"``, ``private=0``, ``metric``, ``stan_version`` (Stan's or
        CmdStan's version as ``"2.35.0"`` for both backends), ``seed``,
        ``chains``, ``draws``, ``warmup``.  Saveable with ``to_netcdf``.

    Raises
    ------
    ValueError
        Bad arguments, or data that do not fit the model (the same for both
        backends: "the data lack ..." for a missing scalar, else "the data
        do not fit <model>: ..." with Stan's message naming the variable).
    FileNotFoundError
        Missing model or data file.
    RuntimeError
        ``backend="cmdstan"`` without CmdStan, or a failed run.
    stan_dp.StanCompileError
        The program does not compile (a syntax error is found by stanc
        before either backend runs, with its line and column).
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}")
    chains = _positive_int(chains, "chains")
    draws = _positive_int(draws, "draws")
    warmup = _positive_int(warmup, "warmup", minimum=0)
    max_treedepth = _positive_int(max_treedepth, "max_treedepth")
    adapt_delta = check_real(adapt_delta, "adapt_delta", positive=True)
    if not adapt_delta < 1.0:
        raise ValueError(f"adapt_delta must be below 1, got {adapt_delta}")
    init_radius = check_real(init_radius, "init_radius", nonnegative=True)
    if parallel_chains is None:
        parallel_chains = min(chains, os.cpu_count() or 1)
    parallel_chains = _positive_int(parallel_chains, "parallel_chains")
    fixed_seed = _check_seed(seed)
    stan_path = _stan_file(model)
    data_json, values = load_data(data)
    _check_scalar_data(stan_path, values)

    used_seed = fixed_seed if fixed_seed is not None else int(
        np.random.SeedSequence().generate_state(1, dtype=np.uint32)[0])
    chosen = _choose_backend(backend)
    settings = dict(seed=used_seed, seeded=fixed_seed is not None, chains=chains, draws=draws, warmup=warmup,
                    adapt_delta=adapt_delta, max_treedepth=max_treedepth, init_radius=init_radius,
                    metric=metric, parallel_chains=parallel_chains, progress=progress)
    if chosen == "cmdstan":
        cmdstan_data = str(Path(data).expanduser()) if isinstance(data, (str, os.PathLike)) \
            else values
        idata = _fit_cmdstan(stan_path, cmdstan_data, cache_dir=cache_dir, **settings)
    else:
        idata = _fit_offline(stan_path, data_json, cache_dir=cache_dir, **settings)
    _warn_divergences(idata)
    _warn_convergence(idata, (lambda: large_predictors(stan_path, values)) if init_radius > 0 else None,
                      init_radius)
    return idata


LARGE_PREDICTOR = 10.0
"""A covariate column with an entry beyond this in absolute value is named by a reference fit whose
chains did not converge.  Stan's random inits put every unconstrained parameter on ``(-R, R)``
(``init_radius`` 2 by default), so a slope on it starts the linear predictor up to ``2 |x|``
away from where the data put it: at ``|x|`` = 10 a Poisson or logistic rate of ``e^20``, where a
chain may never move."""


def large_predictors(stan_path: str | os.PathLike[str],
                     values: Mapping[str, Any]) -> list[tuple[str, float]]:
    """``(name, largest |entry|)`` of every data column the program reads as a covariate with an
    entry beyond :data:`LARGE_PREDICTOR` in absolute value (non-private: the reference reads the
    data).

    Candidates are the numeric data vectors (and each column of a matrix, named ``X[, j]`` with
    Stan's 1-based ``j``) of at least three entries that
    :func:`stan_dp.stan_source.covariate_row_variables` finds read as a covariate (never as an
    outcome or as an index), other than a likelihood weight
    (:func:`~stan_dp.stan_source.likelihood_weights`).  Advice only: where the program cannot be
    read (no stanc) the list is empty.  Why: a Poisson regression of admissions on beds (50-400)
    and staff (120 +- 30), 1,500 rows, returned chains with R-hat 1.83 and bulk ESS 7, and the
    message advised centring; with both centred (beds - 200, staff - 100) R-hat was 2.31, and with
    ``init_radius=0`` 1.008 uncentred and 1.013 centred (bulk ESS 597 and 430).
    """
    from stan_dp.stan_source import canonical_program, covariate_row_variables, likelihood_weights
    from stan_dp.toolchain import find_toolchain

    columns: dict[str, list[tuple[str, np.ndarray]]] = {}
    for name, value in values.items():
        try:
            array = np.asarray(value, dtype=float)
        except (TypeError, ValueError):   # ragged or non-numeric: not a covariate column
            continue
        if array.ndim == 1 and array.size >= 3:
            columns[name] = [(name, array)]
        elif array.ndim == 2 and array.shape[0] >= 3:
            columns[name] = [(f"{name}[, {j + 1}]", array[:, j]) for j in range(array.shape[1])]
    if not columns:
        return []
    try:
        program = canonical_program(stan_path, find_toolchain().stanc)
    except (OSError, ValueError, RuntimeError, subprocess.SubprocessError):
        return []
    out = []
    weights = set(likelihood_weights(program, tuple(columns)))   # a row's weight has no slope
    for name in covariate_row_variables(program, tuple(columns)):
        if name in weights:
            continue
        for label, column in columns[name]:
            largest = float(np.max(np.abs(column)))
            if largest > LARGE_PREDICTOR:
                out.append((label, largest))
    return out


def _warn_convergence(idata: Any, predictors: Any = None, init_radius: float = 2.0) -> None:
    """Log a warning where the chains did not converge: a yardstick that is not one.

    ``predictors`` (a callable returning :func:`large_predictors`' list, called only then) names
    the predictors whose size puts Stan's random inits (on ``(-init_radius, init_radius)``) far
    from the data, and the remedy; the fit passes it only where ``init_radius > 0``.

    Rank-normalised split R-hat above :data:`stan_dp.diagnostics.RHAT_MAX` (1.05) or a bulk ESS
    below :data:`stan_dp.diagnostics.ESS_MIN` (100), the thresholds ``compare`` judges fits by, in
    any posterior component (constant components, such as a generated
    copy of the data, are not judged; nor is a single chain's R-hat).  Why: a Poisson regression
    with an exposure offset and coefficients bounded by ``uniform(-10, 10)`` (a distance in km,
    1,000 rows) returned chains with R-hat 1.60 and bulk ESS 7, its mean an intercept of 0.97 and
    a slope of -0.040 where the maximum likelihood is 0.49 and -0.020 (the rows' scores summed to
    -562 and 11,576 there), and said nothing; the information floor computed from it came out 2.4
    posterior sds instead of about 0.15.  ``compare`` already refuses to trust such a reference;
    this says so where the fit is made.
    """
    from stan_dp.diagnostics import ESS_MIN, RHAT_MAX, _mixing

    post = idata.posterior
    chains, draws = post.sizes.get("chain", 1), post.sizes.get("draw", 0)
    columns = [np.asarray(post[name].values, dtype=float).reshape(chains, draws, -1)
               for name in post.data_vars]
    if not columns:
        return
    rhats, esss = _mixing(np.concatenate(columns, axis=2))   # NaN with fewer than 4 draws

    def extreme(values: np.ndarray, pick: Any) -> float:
        values = values[np.isfinite(values)]
        return float(pick(values)) if values.size else float("nan")

    rhat = extreme(rhats, np.max) if chains > 1 else float("nan")
    ess = extreme(esss, np.min)
    if rhat > RHAT_MAX or ess < ESS_MIN:   # nan: not judged
        named = predictors() if predictors is not None else []
        advice = ("more warm-up or draws, centred predictors, a dense metric for strongly correlated "
                  "parameters (metric='dense_e') or a reparametrisation would help")
        if named:
            listed = ", ".join(f"{label} (up to {largest:.3g})" for label, largest in named)
            advice = (f"predictors of large size: {listed}; Stan's random inits put each slope on "
                      f"(-{init_radius:g}, {init_radius:g}), up to {init_radius:g} times that far from "
                      "where the data put the linear predictor, "
                      "where a chain may never move: start every chain at 0 (init_radius=0, "
                      "--init-radius 0, where the private search starts too), or rescale them; "
                      "else more warm-up, centred predictors or a reparametrisation")
        logger.warning("reference fit: the chains did not converge (max R-hat %.3g, min bulk ESS %.3g): it "
                       "is not a trustworthy yardstick; %s", rhat, ess, advice)


def _warn_divergences(idata: Any) -> None:
    diverging = np.asarray(idata.sample_stats["diverging"])
    count = int(diverging.sum())
    if count:
        logger.warning(
            "reference fit: %d of %d post-warm-up transitions diverged; consider a "
            "higher adapt_delta or reparametrising the model", count, diverging.size)

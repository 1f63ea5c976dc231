"""Cost of the offline non-private reference fit (Stan's NUTS service).

Prints, measured in this run:

1. compile times in fresh caches (the precompiled header is shared from the
   user cache, as on any machine after the first model): the NUTS service
   object (``services.o``, once per toolchain), the reference variant of the
   bundled linear regression (bridge + model, linked with ``services.o``),
   and, as the baseline, the default variant of the same model;
2. a 4 x (1000 warm-up + 1000) draw fit of the linear regression with
   n = 1000 rows and D = 5 predictors, chains one at a time and two at a
   time: wall time, leapfrog steps (every gradient NUTS takes, warm-up
   included) and time per gradient, against the baseline of one gradient of
   the same model and data through the BridgeStan ABI from Python
   (``bridgestan.StanModel.log_density_gradient``), i.e. what a Python-side
   NUTS would pay per gradient in calls alone.

No CmdStan is installed here, so there is no CmdStan row.

Run:  python benchmarks/reference.py
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from stan_dp import reference_fit  # noqa: E402
from stan_dp.toolchain import (  # noqa: E402
    _compiler,
    compile_model,
    default_cache_dir,
    ensure_services_object,
    find_toolchain,
)

MODEL = ROOT / "stan_models" / "linear_regression.stan"


def _data(n: int = 1000, d: int = 5, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    y = 0.5 + x @ np.linspace(-1, 1, d) + rng.normal(scale=1.5, size=n)
    return {"N": n, "D": d, "X": x, "y": y, "sigma": 1.5, "prior_scale": 5.0}


def _fresh_cache(root: Path, name: str) -> Path:
    cache = root / name
    cache.mkdir()
    shared_pch = default_cache_dir() / "pch"
    if shared_pch.exists():
        (cache / "pch").symlink_to(shared_pch, target_is_directory=True)
    return cache


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def compile_times() -> None:
    tc, cxx = find_toolchain(), _compiler()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        compile_model(MODEL)  # make sure the shared precompiled header exists
        ref_cache = _fresh_cache(root, "ref")
        _, t_services = _timed(lambda: ensure_services_object(tc, ref_cache, cxx))
        _, t_ref = _timed(lambda: compile_model(MODEL, variant="reference", cache_dir=ref_cache))
        _, t_default = _timed(lambda: compile_model(MODEL, cache_dir=_fresh_cache(root, "def")))
        shutil.rmtree(root, ignore_errors=True)
    print("compile (fresh cache, shared precompiled header)")
    print(f"  services.o (once per toolchain)          {t_services:7.1f} s")
    print(f"  linear_regression, reference variant     {t_ref:7.1f} s")
    print(f"  linear_regression, default (baseline)    {t_default:7.1f} s"
          f"   ratio {t_ref / t_default:.2f}")


def gradient_baseline(data: dict, repeats: int = 20000) -> float:
    import bridgestan

    from stan_dp.data import load_data

    model = bridgestan.StanModel(str(compile_model(MODEL)), load_data(data)[0], warn=False)
    theta = np.zeros(model.param_unc_num())
    grad = np.empty_like(theta)
    model.log_density_gradient(theta, out=grad)
    t0 = time.perf_counter()
    for _ in range(repeats):
        model.log_density_gradient(theta, out=grad)
    return (time.perf_counter() - t0) / repeats


def fit_times() -> None:
    data = _data()
    reference_fit(MODEL, data, chains=1, draws=10, warmup=10, seed=1)  # build / load once
    per_grad_py = gradient_baseline(data)
    print("\nfit: linear_regression, n = 1000, D = 5, 4 chains x (1000 warm-up + 1000)")
    for parallel in (1, 2):
        idata, wall = _timed(lambda: reference_fit(
            MODEL, data, chains=4, draws=1000, warmup=1000, seed=1, parallel_chains=parallel))
        steps = int(idata.sample_stats["n_steps"].sum()
                    + idata.warmup_sample_stats["n_steps"].sum())
        print(f"  parallel_chains={parallel}: {wall:6.2f} s wall, {steps} gradients, "
              f"{wall / steps * 1e6:6.2f} us/gradient (wall)")
    print(f"  baseline: one gradient via bridgestan from Python  {per_grad_py * 1e6:6.2f} us")


if __name__ == "__main__":
    compile_times()
    fit_times()

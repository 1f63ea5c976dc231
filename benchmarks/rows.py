"""Per-row log-likelihoods vs one full-data evaluation (issue 2 benchmark).

Model: the bundled logistic regression, n = 10,000 rows, D = 10 predictors.
Every figure is measured in this run and printed as a ratio to the
full-data BridgeStan call on the same model and data:

- batched per-row gradients (RowModel.row_log_lik_grad) vs one full-data
  ``log_density_gradient``;
- batched per-row values (RowModel.row_log_lik) vs one full-data
  ``log_density``;
- a Python loop over per-row ``bridgestan.StanModel`` instances (the naive
  approach), for gradients and values;
- the aggregate queries (issue 16): a clipped ratio sum and a clipped
  gradient sum formed in C++, vs the per-row arrays returned to Python and
  clipped and summed in NumPy (the ratio to the latter is the gain).

Run:  python benchmarks/rows.py [--n 10000] [--d 10] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import bridgestan  # noqa: E402

from stan_dp import RowModel, compile_model  # noqa: E402
from stan_dp.aggregates import PerRowQueries  # noqa: E402


def best_time(fn: Callable[[], object], repeat: int = 7, min_time: float = 0.2) -> float:
    """Best-of-``repeat`` seconds per call, each sample timing enough calls for ``min_time``."""
    fn()
    start = time.perf_counter()
    fn()
    once = max(time.perf_counter() - start, 1e-7)
    number = max(1, int(min_time / once))
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - start) / number)
    return best


def make_data(n: int, d: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    beta = rng.normal(size=d) / np.sqrt(d)
    y = (rng.random(n) < 1 / (1 + np.exp(-(0.2 + x @ beta)))).astype(int)
    return {"N": n, "D": d, "X": x, "y": y, "prior_scale": 2.5}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--d", type=int, default=10)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--loop-rows", type=int, default=2_000,
                        help="rows used to time the Python loop (scaled to n)")
    args = parser.parse_args()

    lib = compile_model(ROOT / "stan_models" / "logistic_regression.stan")
    data = make_data(args.n, args.d)
    model = RowModel(lib, data, threads=args.threads)
    theta = np.random.default_rng(1).normal(size=model.dim) * 0.1

    full_grad = best_time(lambda: model.bridge.log_density_gradient(theta, propto=False))
    full_val = best_time(lambda: model.bridge.log_density(theta, propto=False))
    rows_grad = best_time(lambda: model.row_log_lik_grad(theta))
    rows_val = best_time(lambda: model.row_log_lik(theta))
    model.threads = 1
    rows_grad_1 = best_time(lambda: model.row_log_lik_grad(theta))
    rows_val_1 = best_time(lambda: model.row_log_lik(theta))
    model.threads = args.threads

    # Issue 16, item 1: clipped sums formed in C++ (the aggregate queries) vs
    # per-row arrays returned to Python and clipped and summed in NumPy.  The
    # points move by 1e-9 per call so that the point cache never answers.
    per_row = PerRowQueries(model)
    step = np.full(model.dim, 1e-9)
    counter = [0]

    def moving(q, kind: str) -> Callable[[], object]:
        def call() -> object:
            counter[0] += 1
            a = theta + counter[0] * step
            if kind == "ratio":
                return q.clipped_ratio_sums(a + 0.01, a, 0.05)
            return q.clipped_grad_sum(a, 1.0)
        return call

    agg = {(kind, name): best_time(moving(q, kind))
           for kind in ("ratio", "grad") for name, q in (("native", model), ("per-row", per_row))}

    # Naive: one BridgeStan model per row, looped in Python (timed on a
    # subset of rows and scaled to n, to keep the run short).
    m = min(args.loop_rows, args.n)
    singles = []
    for i in range(m):
        row = dict(data, N=1, X=data["X"][i:i + 1], y=data["y"][i:i + 1])
        singles.append(bridgestan.StanModel(str(lib), json.dumps(
            {k: np.asarray(v).tolist() for k, v in row.items()}), warn=False))
    empty = bridgestan.StanModel(str(lib), json.dumps(
        {**{k: np.asarray(v).tolist() for k, v in data.items()}, "N": 0, "X": [], "y": []}), warn=False)

    def loop_grad() -> None:
        _, g0 = empty.log_density_gradient(theta, propto=False)
        for s in singles:
            s.log_density_gradient(theta, propto=False)

    def loop_val() -> None:
        empty.log_density(theta, propto=False)
        for s in singles:
            s.log_density(theta, propto=False)

    loop_g = best_time(loop_grad, repeat=3) * args.n / m
    loop_v = best_time(loop_val, repeat=3) * args.n / m

    print(f"logistic regression, n = {args.n}, D = {args.d}, threads = {args.threads}")
    print(f"{'':42s}{'time':>12s}{'ratio':>10s}")
    rows = [
        ("full-data log_density_gradient (baseline)", full_grad, full_grad),
        (f"per-row gradients, batched ({args.threads} threads)", rows_grad, full_grad),
        ("per-row gradients, batched (1 thread)", rows_grad_1, full_grad),
        ("per-row gradients, Python loop", loop_g, full_grad),
        ("full-data log_density (baseline)", full_val, full_val),
        (f"per-row values, batched ({args.threads} threads)", rows_val, full_val),
        ("per-row values, batched (1 thread)", rows_val_1, full_val),
        ("per-row values, Python loop", loop_v, full_val),
    ]
    for name, t, base in rows:
        print(f"{name:42s}{t * 1e3:10.3f}ms{t / base:9.1f}x")
    print()
    print(f"{'aggregate queries (issue 16)':42s}{'C++':>12s}{'per-row+NumPy':>16s}{'gain':>8s}")
    for kind, label in (("ratio", "clipped ratio sum (2 points, values)"),
                        ("grad", "clipped gradient sum (1 point)")):
        t_c, t_p = agg[(kind, "native")], agg[(kind, "per-row")]
        print(f"{label:42s}{t_c * 1e3:10.3f}ms{t_p * 1e3:14.3f}ms{t_p / t_c:7.2f}x")
    print(f"per-row gradient cost: {rows_grad_1 / args.n * 1e9:.0f} ns/row on one core; "
          f"speed-up over the Python loop: {loop_g / rows_grad:.0f}x")


if __name__ == "__main__":
    main()

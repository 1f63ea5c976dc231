"""Are the Gaussian approximation's stated chances and noise honest?  Set against what happened.

Reads the ``--out`` files of ``benchmarks/adaptation_trace.py`` (one JSON line per private run:
its worst error against NUTS, the chance ``p_miss`` of a miss beyond 0.5 sds that the run states,
whether it warned, and per coordinate its signed error and stated noise sd, all in reference sds)
and prints three checks of what a run says against what it did:

* **Reliability**: runs binned by their stated ``p_miss``; per bin the mean stated chance and the
  share that missed 0.5.  Honest chances put the two near each other (a bin of 60 runs at 5 % has a
  binomial sd of 2.8 points).
* **Silent misses**: over the runs that said nothing (no warning of the search, ``p_miss`` at most
  ``stan_dp.auto.EXCEED_PROBABILITY``, pool not over-dispersed), the misses expected from their own
  stated chances (the sum of ``p_miss``), the misses observed, and the chance of at least that many
  if each run missed independently with its stated chance (a Poisson-binomial tail).  A 10 % rule
  leaves some misses; this asks whether it leaves more than it says.
* **Noise and shared bias, per cell**: for each data set and coordinate the runs' errors split
  into their mean over noise seeds (a bias the runs share: clipping, or one row; the reference's
  own Monte Carlo error is about 0.02 sds) and their scatter about it, set against the stated noise
  sd (``scatter/noise`` near 1 where the stated noise is honest).  Printed with the largest shared
  bias in the cell (and its standard error) and the median clipping bias the runs state.

A stated chance is computed from released values only; the comparison needs the NUTS reference,
so this is a yardstick (NOT private).  Figures: docs/adaptation.md §7, "Are the stated chances
honest?".

Usage: ``python benchmarks/warning_calibration.py FILE [FILE ...]`` (files of
``adaptation_trace.py --out``; older files without per-coordinate fields skip the third check).
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from stan_dp.auto import EXCEED_PROBABILITY, FORECAST_LIMIT

BIN_EDGES = (0.0, 0.01, 0.03, 0.1, 0.3, 0.6, 0.9, 1.0)
"""Edges of the reliability table's bins of stated ``p_miss`` (the last bin includes 1)."""


def load(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    """Every run of the given ``adaptation_trace.py --out`` files, with ``cell`` (model, n, epsilon)."""
    runs = []
    for path in paths:
        for line in Path(path).read_text().splitlines():
            if line.strip():
                run = json.loads(line)
                run["cell"] = (run["model"], int(run["n"]), float(run["epsilon"]))
                runs.append(run)
    return runs


def warned(run: dict[str, Any]) -> bool:
    """Whether ``stan_dp.sample`` would have warned on this run (as ``adaptation_trace.py`` says)."""
    return bool(run["adapt_warned"] or run["p_miss"] > EXCEED_PROBABILITY or run["over_dispersed"])


def missed(run: dict[str, Any]) -> bool:
    """Whether the run's worst coordinate is beyond the target's 0.5 reference sds."""
    return bool(run["worst"] > FORECAST_LIMIT)


def poisson_binomial_tail(p: Sequence[float], k: int) -> float:
    """``P(X >= k)`` for ``X`` a sum of independent Bernoulli(``p_i``) (exact convolution)."""
    if k <= 0:
        return 1.0
    dist = np.zeros(len(p) + 1)
    dist[0] = 1.0
    for i, pi in enumerate(p):
        pi = min(max(float(pi), 0.0), 1.0)
        dist[1:i + 2] = dist[1:i + 2] * (1.0 - pi) + dist[:i + 1] * pi
        dist[0] *= 1.0 - pi
    return float(min(1.0, dist[k:].sum()))


def reliability(runs: list[dict[str, Any]],
                edges: Sequence[float] = BIN_EDGES) -> list[tuple[float, float, int, float, int]]:
    """Per bin of stated ``p_miss``: ``(low, high, runs, mean stated, observed share)``."""
    rows = []
    p = np.array([r["p_miss"] for r in runs])
    miss = np.array([missed(r) for r in runs])
    for j, (lo, hi) in enumerate(zip(edges[:-1], edges[1:])):
        inside = (p >= lo) & ((p < hi) if j < len(edges) - 2 else (p <= hi))
        if inside.any():
            rows.append((lo, hi, int(inside.sum()), float(p[inside].mean()), float(miss[inside].mean())))
    return rows


def silent(runs: list[dict[str, Any]]) -> dict[str, float]:
    """The runs that said nothing: how many, misses expected from their chances and observed, and
    the chance of at least the observed count under the stated chances."""
    quiet = [r for r in runs if not warned(r)]
    p = [r["p_miss"] for r in quiet]
    observed = sum(missed(r) for r in quiet)
    return {"runs": len(runs), "quiet": len(quiet), "expected": float(sum(p)),
            "observed": int(observed), "tail": poisson_binomial_tail(p, observed)}


def noise_and_bias(runs: list[dict[str, Any]]) -> dict[str, float] | None:
    """Over one cell's runs with per-coordinate fields: ``scatter/noise`` (root mean square of the
    errors about their per-(data set, coordinate) mean, over the root mean square stated noise), the
    largest shared bias ``|mean error|`` with its standard error, and the median stated clipping
    bias.  ``None`` where no data set has two runs with those fields."""
    groups: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        if r.get("errors") is not None and r.get("noise_sds") is not None:
            groups[r["data_seed"]].append(r)
    resid2, noise2, count = 0.0, 0.0, 0
    shared, shared_se = 0.0, 0.0
    for group in groups.values():
        if len(group) < 2:
            continue
        err = np.array([[math.nan if e is None else e for e in r["errors"]] for r in group])
        noise = np.array([r["noise_sds"] for r in group])
        keep = np.all(np.isfinite(err), axis=1)
        err, noise = err[keep], noise[keep]
        if len(err) < 2:
            continue
        mean = err.mean(axis=0)
        resid2 += float(((err - mean) ** 2).sum())
        noise2 += float((noise ** 2).sum() * (len(err) - 1) / len(err))   # same dof as the scatter
        count += err.size
        se = err.std(axis=0, ddof=1) / math.sqrt(len(err))
        j = int(np.argmax(np.abs(mean)))
        if abs(mean[j]) > shared:
            shared, shared_se = float(abs(mean[j])), float(se[j])
    if count == 0 or noise2 <= 0.0:
        return None
    return {"scatter_over_noise": math.sqrt(resid2 / noise2), "shared_bias": shared,
            "shared_bias_se": shared_se,
            "stated_clipping_bias": float(np.median([r["clipping_bias"] for r in runs]))}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+", help="adaptation_trace.py --out files")
    args = ap.parse_args(argv)
    runs = load(args.files)
    by_budget: dict[tuple[int, float], list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        by_budget[(r["cell"][1], r["cell"][2])].append(r)
    for (n, eps), group in sorted(by_budget.items()):
        print(f"== n = {n}, epsilon = {eps:g}: {len(group)} runs")
        print("  stated p_miss     runs  mean stated  observed")
        for lo, hi, k, stated, seen in reliability(group):
            print(f"  [{lo:4.2f}, {hi:4.2f}]   {k:6d}  {stated:11.3f}  {seen:8.3f}")
        s = silent(group)
        print(f"  said nothing: {s['quiet']} runs; misses expected from their chances "
              f"{s['expected']:.1f}, observed {s['observed']} (chance of at least that many "
              f"{s['tail']:.2g})")
        cells: dict[tuple[str, int, float], list[dict[str, Any]]] = defaultdict(list)
        for r in group:
            cells[r["cell"]].append(r)
        print("  cell                 quiet  silent  scatter/noise  largest shared bias (se)  "
              "stated clipping bias")
        for cell, members in sorted(cells.items()):
            quiet = [r for r in members if not warned(r)]
            line = f"  {cell[0]:18s} {len(quiet):6d}  {sum(missed(r) for r in quiet):6d}"
            nb = noise_and_bias(members)
            if nb is not None:
                line += (f"  {nb['scatter_over_noise']:13.2f}  {nb['shared_bias']:10.2f} "
                         f"({nb['shared_bias_se']:.2f})        {nb['stated_clipping_bias']:10.2f}")
            print(line)


if __name__ == "__main__":
    main()

"""Sharded models on Dask vs in-process (issue 16 benchmark).

Model: the bundled logistic regression, ``n`` rows, ``D`` predictors.  For
each ``n`` the same run measures:

- the in-process baseline, ``RowModel`` on all rows (all cores), and
  ShardedModels on a ``LocalCluster`` of 1 worker (2 threads, one shard)
  and of 2 workers (1 thread each, two shards), processes on the loopback
  address;
- penalty: marginal seconds per iteration (two runs of different lengths,
  the difference divided by the extra iterations: calibration and output
  costs cancel), same seed and settings everywhere (the sharded chains are
  checked to equal the in-process chain);
- DP HMC with fixed knobs (``--hmc``): the same, per iteration
  (``n_leapfrog`` gradient queries and one ratio query);
- round trips: a no-op call to every shard through ``ShardedModel``'s own
  fan-out, and the raw RPC gather under it; the share of a penalty round
  trip that is serialisation (Dask's ``dumps``/``loads`` of a typical
  request and response, both ends, every shard);
- memory: each worker's RSS before and after its shard is built (and the
  driver's for the in-process model), per row;
- build time of each shard (reported by the shard: data file read twice,
  model built) and of the whole ShardedModel as the driver sees it.

Ratios are against the in-process baseline of the same run.  Timings are
wall clock on whatever machine runs this; nothing here asserts a time.

Run:  python benchmarks/distributed.py [--n 200000 2000000] [--d 3] [--hmc]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import pickle
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
# This file's folder must not shadow the ``distributed`` package it measures.
HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(ROOT))

import stanio  # noqa: E402

import stan_dp  # noqa: E402
from stan_dp import RowModel  # noqa: E402
from stan_dp.aggregates import queries  # noqa: E402


def make_data(n: int, d: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    beta = rng.normal(size=d) / np.sqrt(d)
    y = (rng.random(n) < 1 / (1 + np.exp(-(0.2 + x @ beta)))).astype(int)
    return {"N": n, "D": d, "X": x, "y": y, "prior_scale": 2.5}


def write_shards(folder: Path, data: dict, k: int) -> list[str]:
    n = data["N"]
    bounds = np.linspace(0, n, k + 1).astype(int)
    paths = []
    for i in range(k):
        a, b = bounds[i], bounds[i + 1]
        part = dict(data, N=int(b - a), X=data["X"][a:b], y=data["y"][a:b])
        path = folder / f"n{n}_k{k}_shard{i}.json"
        if not path.exists():
            path.write_text(stanio.dump_stan_json(part))
        paths.append(str(path))
    return paths


def rss() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def per_iteration(run, short: int, long: int, warm: bool = True) -> tuple[float, object]:
    """Marginal seconds per iteration: (t(long) - t(short)) / (long - short), after a warm-up run."""
    if warm:
        run(short)
    start = time.perf_counter()
    run(short)
    t_short = time.perf_counter() - start
    start = time.perf_counter()
    fit = run(long)
    t_long = time.perf_counter() - start
    return (t_long - t_short) / (long - short), fit


def positions(fit) -> np.ndarray:
    post = fit.posterior
    return np.concatenate([np.asarray(post[v]).reshape(post.sizes["draw"], -1)
                           for v in post.data_vars], axis=-1)


def penalty_runner(model, args):
    def run(iterations: int):
        return stan_dp.penalty(model, epsilon=4.0, delta=1e-5, clip=0.5, step_size=0.002,
                               iterations=iterations, chains=1, seed=1, progress=False)
    return run


def hmc_runner(model, args):
    def run(iterations: int):
        return stan_dp.hmc(model, epsilon=4.0, delta=1e-5, clip=0.5, grad_clip=2.0,
                           step_size=1e-3, n_leapfrog=args.leapfrog, warmup=0,
                           iterations=iterations, chains=1, seed=1, progress=False)
    return run


def best(fn, repeat: int = 5, number: int = 50) -> float:
    """Best-of-``repeat`` seconds per call."""
    fn()
    out = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        out = min(out, (time.perf_counter() - start) / number)
    return out


def serialisation_seconds(model, theta_new, theta_old) -> tuple[float, int]:
    """(De)serialisation of one penalty round trip, both ends, every shard.

    What ShardedModel sends: the query pickled once into bytes inside Dask's
    ``actor_execute`` message (dumped on the driver, loaded and unpickled on
    the worker), and the pickled result inside the response (Dask wraps it
    in its own serialisation on the worker).  Returns seconds and bytes on
    the wire per round trip.
    """
    from distributed.protocol import dumps, loads, to_serialize
    from distributed.protocol import pickle as dask_pickle

    shards = len(model.shard_sizes)
    query = ("ratio_sums", (theta_new, theta_old, 0.1, 1.0, 1.0, None, None, 1))
    sums = model.clipped_ratio_sums(theta_new, theta_old, 0.1)

    def request():
        return {"op": "actor_execute", "function": "call", "actor": "stan_dp-shard-0-0123456789ab",
                "args": [dask_pickle.dumps(query)], "kwargs": {}, "reply": True}

    def one():
        msg = loads(dumps(request()))
        dask_pickle.loads(msg["args"][0])
        out = loads(dumps({"status": "OK", "result": to_serialize(dask_pickle.dumps(sums))}))
        dask_pickle.loads(out["result"])

    size = (sum(len(f) for f in dumps(request()))
            + sum(len(f) for f in dumps({"status": "OK", "result": to_serialize(dask_pickle.dumps(sums))})))
    return shards * best(one, number=200), shards * size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=float, nargs="+", default=[2e5])
    parser.add_argument("--d", type=int, default=3)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--short", type=int, default=30, help="iterations of the short penalty run")
    parser.add_argument("--long", type=int, default=130, help="iterations of the long penalty run")
    parser.add_argument("--hmc", action="store_true", help="also time DP HMC")
    parser.add_argument("--reps", type=int, default=3, help="interleaved repetitions (best kept)")
    parser.add_argument("--leapfrog", type=int, default=5)
    parser.add_argument("--hmc-iterations", type=int, nargs=2, default=[5, 25], metavar=("SHORT", "LONG"),
                        help="iterations of the short and long DP HMC runs")
    parser.add_argument("--folder", default=None, help="where to write the shard files (default: temp)")
    parser.add_argument("--fanout", type=int, nargs="*", default=[1, 2, 4, 8, 16],
                        help="shard counts for the fan-out measurement (none: skip it)")
    parser.add_argument("--thread-pool", action="store_true",
                        help="run the queries in the workers' actor thread pools (inline=False)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")

    from distributed import Client, LocalCluster

    from stan_dp.distributed import ShardedModel

    library = stan_dp.compile_model(stan_dp.bundled_model("logistic_regression"))
    folder = Path(args.folder or tempfile.mkdtemp(prefix="stan_dp_bench_"))
    folder.mkdir(parents=True, exist_ok=True)
    cores = os.cpu_count() or 1
    print(f"machine: {cores} cores; logistic regression D = {args.d}; penalty marginal time per "
          f"iteration from {args.short} vs {args.long} iterations; shards in {folder}")

    for n in (int(x) for x in args.n):
        print(f"\n=== n = {n:,} rows")
        data = make_data(n, args.d)
        start = time.perf_counter()
        paths = {k: write_shards(folder, data, k) for k in args.workers}
        print(f"shard files written in {time.perf_counter() - start:.1f} s")

        gc.collect()
        before = rss()
        start = time.perf_counter()
        whole = RowModel(library, data)
        build_in = time.perf_counter() - start
        mem_in = rss() - before
        del data
        gc.collect()
        print(f"in-process RowModel: build {build_in:.1f} s, +{mem_in / 2**20:.0f} MiB RSS "
              f"({mem_in / n:.0f} B/row)")
        rng = np.random.default_rng(3)
        theta_old = rng.normal(size=whole.dim) * 0.1
        news = [theta_old + 0.002 * rng.normal(size=whole.dim) for _ in range(64)]

        with contextlib.ExitStack() as stack:
            configs: list[tuple[str, object, object]] = [("in-process", queries(whole), None)]
            for workers in args.workers:
                threads = max(1, cores // workers)
                cluster = stack.enter_context(LocalCluster(
                    n_workers=workers, threads_per_worker=threads, processes=True,
                    host="127.0.0.1", dashboard_address=None, memory_limit=0))
                client = stack.enter_context(Client(cluster))
                idle = client.run(rss)
                start = time.perf_counter()
                model = ShardedModel(client, stan_dp.bundled_model("logistic_regression"),
                                     paths[workers], inline=not args.thread_pool)
                build_wall = time.perf_counter() - start
                stack.callback(model.close)
                loaded = client.run(rss)
                mem = {a: loaded[a] - idle[a] for a in loaded}
                label = f"{workers} worker(s) x {threads} thread(s)"
                configs.append((label, model, client))
                print(f"--- {label}, shards of {list(model.shard_sizes)} rows")
                print(f"  build: ShardedModel {build_wall:.1f} s wall; per shard (on its worker) "
                      + ", ".join(f"{s:.1f} s" for s in model.build_seconds))
                print("  worker RSS added by its shard: "
                      + ", ".join(f"{mem[a] / 2**20:.0f} MiB ({mem[a] / model.shard_sizes[i]:.0f} B/row)"
                                  for i, a in enumerate(model.shard_addresses)))
                ping = best(model.ping, number=200)
                raw = best(lambda: client.sync(model._gather, "ping",
                                               {i: () for i in range(len(model.shard_sizes))}, None),
                           number=200)
                ser, wire = serialisation_seconds(model, news[0], theta_old)

                async def nothing():
                    return None

                handoff = best(lambda: client.sync(nothing), number=500)
                print(f"  round trip, no-op to every shard: {ping * 1e3:.2f} ms "
                      f"(raw RPC gather {raw * 1e3:.2f} ms, ShardedModel bookkeeping "
                      f"{(ping - raw) * 1e3:.2f} ms)")
                print(f"  of which: driver thread -> client event loop -> back (client.sync of "
                      f"nothing) {handoff * 1e3:.3f} ms; serialisation of a penalty round trip "
                      f"(dumps+loads, both ends, all shards) {ser * 1e3:.3f} ms = "
                      f"{ser / ping:.0%}, {wire} bytes")

            # Interleaved repetitions, best of each: the machine may be shared.
            times: dict[str, dict[str, float]] = {c[0]: {} for c in configs}
            fits = {}
            for rep in range(args.reps):
                for label, model, _ in configs:
                    counter = iter(range(10**9))

                    def query(model=model, counter=counter):
                        model.clipped_ratio_sums(news[next(counter) % 64], theta_old, 0.1)

                    got = {"query": best(query, repeat=2, number=10)}
                    got["penalty"], fits[label] = per_iteration(
                        penalty_runner(model, args), args.short, args.long, warm=rep == 0)
                    if args.hmc:
                        got["hmc"] = per_iteration(hmc_runner(model, args), *args.hmc_iterations,
                                                   warm=rep == 0)[0]
                    for key, value in got.items():
                        times[label][key] = min(times[label].get(key, float("inf")), value)
            base = times["in-process"]
            print(f"\n  best of {args.reps} interleaved repetitions (ms; ratio and difference "
                  "against in-process)")
            keys = ["query", "penalty"] + (["hmc"] if args.hmc else [])
            names = {"query": "one ratio query", "penalty": "penalty per iteration",
                     "hmc": f"DP HMC per iteration (L={args.leapfrog}: {args.leapfrog} gradient "
                            "queries + 1 ratio query)"}
            for key in keys:
                row = [f"{label}: {times[label][key] * 1e3:.2f}" + (
                    "" if label == "in-process" else
                    f" (x{times[label][key] / base[key]:.2f}, "
                    f"{(times[label][key] - base[key]) * 1e3:+.2f})")
                       for label, _, _ in configs]
                print(f"  {names[key]}: " + "; ".join(row))
            same = all(np.array_equal(positions(fits[label]), positions(fits["in-process"]))
                       for label in fits)
            print(f"  penalty draws of every configuration equal the in-process draws: {same}")
            if args.fanout:
                fanout(configs[-1][2], folder, args)


def fanout(client, folder: Path, args) -> None:
    """No-op round trip vs number of shards (tiny shards on the same workers): the driver's cost per shard."""
    from stan_dp.distributed import ShardedModel

    tiny = make_data(2000, args.d, seed=5)
    out = []
    for k in args.fanout:
        paths = write_shards(folder, tiny, k)
        model = ShardedModel(client, stan_dp.bundled_model("logistic_regression"), paths)
        wall = best(model.ping, number=100)
        cpu = time.process_time()
        for _ in range(200):
            model.ping()
        out.append((k, wall, (time.process_time() - cpu) / 200))
        model.close()
    print("  fan-out, no-op round trip to k shards on these workers (driver CPU per round trip): "
          + ", ".join(f"k={k}: {t * 1e3:.2f} ms ({c * 1e3:.2f})" for k, t, c in out))
    if len(out) > 1:
        slope = np.polyfit([k for k, _, _ in out], [t for _, t, _ in out], 1)[0]
        cpu_slope = np.polyfit([k for k, _, _ in out], [c for _, _, c in out], 1)[0]
        print(f"  least-squares slopes per extra shard: {slope * 1e3:.3f} ms wall, "
              f"{cpu_slope * 1e3:.3f} ms driver CPU")


if __name__ == "__main__":
    main()

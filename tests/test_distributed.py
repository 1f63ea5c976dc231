"""stan_dp.distributed: sharded models on a local Dask cluster (issue 16).

Oracles: the in-process RowModel on the concatenated data (every query and,
with the same seed, every draw), the closed form of the noise sd, and the
in-process multi-owner penalty run's accounting.  One LocalCluster of two
worker processes on the loopback address serves the whole module.
"""

from __future__ import annotations

import builtins
import io
import json
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")

import stanio  # noqa: E402

import stan_dp  # noqa: E402
from conftest import logistic_data  # noqa: E402
from stan_dp import RowModel  # noqa: E402
from stan_dp.aggregates import queries  # noqa: E402
from stan_dp.distributed import OwnerNoiseError, ShardedModel, ShardFailure  # noqa: E402

SIZES = (70, 50, 40)
N = sum(SIZES)


@pytest.fixture(scope="module")
def cluster():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None) as cl, Client(cl) as client:
        yield cl, client


@pytest.fixture(scope="module")
def client(cluster):
    return cluster[1]


@pytest.fixture(scope="module")
def library(compiled):
    return compiled(stan_dp.bundled_model("logistic_regression"))


@pytest.fixture(scope="module")
def data():
    return logistic_data(N, d=3, seed=7)


def write_shards(folder: Path, data: dict, sizes=SIZES) -> list[str]:
    """The data split into JSON shard files (each with the shared data)."""
    paths, start = [], 0
    for k, size in enumerate(sizes):
        part = dict(data, N=size, X=np.asarray(data["X"])[start:start + size],
                    y=np.asarray(data["y"])[start:start + size])
        path = folder / f"shard{k}.json"
        path.write_text(stanio.dump_stan_json(part))
        paths.append(str(path))
        start += size
    return paths


@pytest.fixture(scope="module")
def shard_paths(tmp_path_factory, data):
    return write_shards(tmp_path_factory.mktemp("shards"), data)


@pytest.fixture(scope="module")
def whole(library, data):
    return RowModel(library, data)


@pytest.fixture(scope="module")
def sharded(client, library, shard_paths):
    model = ShardedModel(client, stan_dp.bundled_model("logistic_regression"), shard_paths)
    yield model
    model.close()


def points(dim, k=3, seed=11):
    return np.random.default_rng(seed).uniform(-1.0, 1.0, size=(k, dim))


def close(a, b, rel=1e-12):
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    np.testing.assert_allclose(a, b, rtol=rel, atol=rel * max(1.0, float(np.max(np.abs(b)))))


# ------------------------------------------------------------------ (a) queries

def test_facts_and_placement(sharded, whole, client):
    assert sharded.n_rows == N and sharded.shard_sizes == SIZES
    assert sharded.dim == whole.dim and sharded.param_names == whole.param_names
    assert sharded.row_vars == whole.row_vars
    # Spread over both workers, none in the driver's process.
    assert len(set(sharded.shard_addresses)) == 2
    assert os.getpid() not in sharded.shard_pids
    assert json.loads(sharded.zero_row_json) == {"N": 0, "D": 3, "X": [], "y": [], "prior_scale": 2.5}


def test_prior_and_transforms_equal_in_process(sharded, whole):
    for theta in points(whole.dim, 5):
        assert sharded.log_prior(theta) == whole.log_prior(theta)
        v1, g1 = sharded.log_prior_grad(theta)
        v2, g2 = whole.log_prior_grad(theta)
        assert v1 == v2 and np.array_equal(g1, g2)
        c1, c2 = sharded.constrain(theta), whole.constrain(theta)
        assert c1.keys() == c2.keys() and all(np.array_equal(c1[k], c2[k]) for k in c1)
        assert np.array_equal(sharded.unconstrain(c1), whole.unconstrain(c2))
    # The zero-row bridge's log density is the prior part (Jacobian included).
    theta = points(whole.dim, 1, seed=3)[0]
    assert sharded.bridge.log_density(theta, propto=False, jacobian=True) == whole.log_prior(theta)


def test_ratio_sums_equal_in_process(sharded, whole):
    ref = queries(whole)
    a, b = points(whole.dim, 2, seed=5)
    rng = np.random.default_rng(0)
    groups = rng.integers(0, 3, size=N)
    rows = np.sort(rng.choice(N, 45, replace=False))      # crosses all three shards
    rows_unsorted = rng.permutation(N)[:30]
    for kwargs in ({}, {"pre_scale": 0.7, "post_scale": 1.3},
                   {"groups": groups, "n_groups": 3},
                   {"rows": rows}, {"rows": rows_unsorted, "groups": groups, "n_groups": 3},
                   {"rows": np.array([5, 5, 100, 5])}):
        for bound in (0.05, 10.0):
            got = sharded.clipped_ratio_sums(a, b, bound, **kwargs)
            want = ref.clipped_ratio_sums(a, b, bound, **kwargs)
            close(got.totals, want.totals)
            assert got.count == want.count and got.n_clipped == want.n_clipped
            close(got.m2, want.m2, rel=1e-10)
    # Some rows clip at the small bound, none at the large one (so both paths ran).
    assert sharded.clipped_ratio_sums(a, b, 0.05).n_clipped > 0
    assert sharded.clipped_ratio_sums(a, b, 10.0).n_clipped == 0
    empty = sharded.clipped_ratio_sums(a, b, 1.0, rows=np.array([], dtype=int), n_groups=2)
    assert empty.count == 0 and np.array_equal(empty.totals, np.zeros(2))


def test_grad_sums_equal_in_process(sharded, whole):
    ref = queries(whole)
    frame = np.linalg.cholesky(np.array([[2.0, 0.3, 0, 0], [0.3, 1.0, 0.1, 0],
                                         [0, 0.1, 0.5, 0], [0, 0, 0, 0.2]]))
    rows = np.array([0, 69, 70, 119, 120, 159, 3])
    for theta in points(whole.dim, 2, seed=8):
        for kwargs in ({}, {"frame": frame}, {"rows": rows}, {"rows": rows, "frame": frame[:, :2]}):
            for bound in (0.1, 50.0):
                got = sharded.clipped_grad_sum(theta, bound, **kwargs)
                want = ref.clipped_grad_sum(theta, bound, **kwargs)
                close(got.total, want.total)
                assert got.n_clipped == want.n_clipped


def grad_norms(model, theta):
    """Per-row gradient norms (a row statistic)."""
    _, grads = model.row_log_lik_grad(theta)
    return np.linalg.norm(grads, axis=1)


def count_above(values, thresholds):
    return (values[:, :1] > np.asarray(thresholds)[None, :]).sum(axis=0).astype(float)


def test_row_statistic_and_reduce_equal_in_process(sharded, whole):
    ref = queries(whole)
    theta = points(whole.dim, 1, seed=4)[0]
    stat = sharded.row_statistic(grad_norms, theta)
    assert stat.columns == 1 and not isinstance(stat.key, np.ndarray)  # a key, no values
    want_stat = ref.row_statistic(grad_norms, theta)
    thresholds = np.quantile(want_stat.key[:, 0], [0.1, 0.5, 0.9])
    assert np.array_equal(sharded.reduce(stat, count_above, thresholds),
                          ref.reduce(want_stat, count_above, thresholds))
    with pytest.raises(TypeError, match="does not belong"):
        sharded.reduce(want_stat, count_above, thresholds)


def test_rows_and_arguments_are_checked(sharded):
    theta = np.zeros(sharded.dim)
    with pytest.raises(IndexError):
        sharded.clipped_ratio_sums(theta, theta, 1.0, rows=np.array([N]))
    with pytest.raises(ValueError, match="shape"):
        sharded.clipped_grad_sum(np.zeros(2), 1.0)
    with pytest.raises(TypeError, match="per-row values never reach"):
        sharded.row_log_lik(theta)
    with pytest.raises(ValueError, match="owners=True"):
        sharded.release_owner_ratio_sums(np.random.default_rng(0), theta, theta, 1.0, 1.0)


def test_shards_with_different_shared_data_are_refused(client, tmp_path, data):
    paths = write_shards(tmp_path, data, sizes=(80, 80))
    other = json.loads(Path(paths[1]).read_text())
    other["prior_scale"] = 3.0
    Path(paths[1]).write_text(json.dumps(other))
    with pytest.raises(ValueError, match="prior_scale"):
        ShardedModel(client, stan_dp.bundled_model("logistic_regression"), paths)


def test_missing_shard_source_is_a_shard_failure(client, tmp_path, shard_paths):
    with pytest.raises(ShardFailure, match=r"shard 1 .*FileNotFoundError"):
        ShardedModel(client, stan_dp.bundled_model("logistic_regression"),
                     [shard_paths[0], str(tmp_path / "missing.json")])

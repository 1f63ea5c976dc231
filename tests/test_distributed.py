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

# Short runs of a few dozen draws: their low-ESS warnings are expected.
pytestmark = pytest.mark.filterwarnings("ignore::stan_dp.UtilityWarning")

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


@pytest.fixture(autouse=True)
def _both_workers_up(request):
    """Before a test that uses the cluster, wait until both workers are live: on a loaded machine
    a worker the nanny restarted was not yet up when the next test placed its shards ("the cluster
    has no workers", seen once in CI while other jobs ran on the machine)."""
    if "client" in request.fixturenames:
        request.getfixturevalue("client").wait_for_workers(2, timeout=120)


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
    assert sharded.relations == ("replace_one", "add_remove")
    # read from the program (the clip bound's default): no scale parameter in either
    assert sharded.stan_file is not None
    assert sharded.log_transformed_parameters == whole.log_transformed_parameters == ()


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


def column_sums(values):
    return values.sum(axis=0)


def test_round_rows_with_bounded_coordinates_equal_in_process(sharded, whole):
    # the Newton rounds' per-row statistic with the logit transform's curvature taken out along
    # some coordinates (a public mask sent with the query): the same sums on the shards as in
    # process, and not those of the plain rows (the mask reaches the workers)
    from stan_dp.adaptation.curvature import _round_rows

    ref = queries(whole)
    theta = points(whole.dim, 1, seed=5)[0]
    frame = np.diag(np.linspace(0.2, 0.5, whole.dim))
    mask = np.arange(whole.dim) % 2 == 1
    scales = np.array([1.0, 1.0])
    got = sharded.reduce(sharded.row_statistic(_round_rows, theta, frame, 1e-4, scales, mask), column_sums)
    want = ref.reduce(ref.row_statistic(_round_rows, theta, frame, 1e-4, scales, mask), column_sums)
    plain = ref.reduce(ref.row_statistic(_round_rows, theta, frame, 1e-4, scales), column_sums)
    close(got, want, rel=1e-10)
    assert np.abs(want - plain).max() > 1e-3
    # the bundled logistic regression declares no bounded parameter, on the shards or not
    assert not sharded.bounded_coordinates.any() and sharded.bounded_coordinates.shape == (whole.dim,)
    assert not whole.bounded_coordinates.any()


def test_rows_and_arguments_are_checked(sharded):
    theta = np.zeros(sharded.dim)
    with pytest.raises(IndexError):
        sharded.clipped_ratio_sums(theta, theta, 1.0, rows=np.array([N]))
    with pytest.raises(ValueError, match="shape"):
        sharded.clipped_grad_sum(np.zeros(2), 1.0)
    assert not hasattr(sharded, "row_log_lik")   # per-row values never reach the driver
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


# ------------------------------------------------- (b), (e) samplers on shards
#
# The sharded sums equal the in-process sums up to the rounding of adding
# per-shard partial sums (a few units in the last place).  A penalty chain
# depends on the sums only through its accept decisions, log(u) < log_a,
# with the same u and the same noise (both from the seeded streams, drawn
# whatever the sums), so its positions are bit-identical unless some log_a
# falls within ~1e-13 of its log(u): in a short run, essentially never.
# The minibatch samplers draw the same batches from the same noise stream,
# so the same argument holds for them.  DP HMC's positions are continuous
# functions of the gradient sums, so they agree to rounding (1e-9), not bit
# for bit.

PENALTY = dict(epsilon=2.0, delta=1e-5, clip=1.0, step_size=0.05, iterations=60, chains=1,
               seed=20261123, progress=False)


def positions(fit):
    post = fit.posterior
    return np.concatenate([np.asarray(post[v]).reshape(post.sizes["chain"], post.sizes["draw"], -1)
                           for v in post.data_vars], axis=-1)


def test_penalty_draws_equal_in_process(sharded, whole):
    got = stan_dp.penalty(sharded, **PENALTY)
    want = stan_dp.penalty(whole, **PENALTY)
    assert np.array_equal(positions(got), positions(want))
    assert 0.05 < float(got.sample_stats["is_accepted"].mean()) < 0.95   # decisions were made
    for key in ("epsilon_spent", "noise_multiplier", "n_rows", "seeded"):
        assert got.posterior.attrs[key] == want.posterior.attrs[key]


def test_single_curator_under_add_remove_equals_in_process(sharded, whole):
    # The driver is the curator: it knows the shard sizes as an in-process
    # driver knows n, and publishes neither.
    run = dict(PENALTY, relation="add_remove", iterations=30)
    got, want = stan_dp.penalty(sharded, **run), stan_dp.penalty(whole, **run)
    assert np.array_equal(positions(got), positions(want))
    assert "n_rows" not in got.posterior.attrs and "n_rows" not in want.posterior.attrs


@pytest.mark.parametrize("name,kwargs,exact", [
    ("subsampled_penalty", dict(batch_size=60, clip=1.0, step_size=0.05), True),
    ("barker", dict(batch_size=40, step_size=0.01, epsilon=20.0, iterations=10), True),
    ("hmc", dict(clip=1.0, grad_clip=2.0, step_size=0.005, n_leapfrog=3, warmup=0, epsilon=10.0), False),
])
def test_every_sampler_runs_on_shards(sharded, whole, name, kwargs, exact):
    fn = getattr(stan_dp, name)
    common = dict(dict(epsilon=2.0, delta=1e-5, iterations=25, chains=1, seed=7, progress=False),
                  **kwargs)
    got, want = fn(sharded, **common), fn(whole, **common)
    a, b = positions(got), positions(want)
    assert np.all(np.isfinite(a)) and len(np.unique(a[0, :, 0])) > 1   # the chain moved
    if exact:
        assert np.array_equal(a, b)
    else:
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9)


def test_automatic_path_runs_on_shards(sharded, whole):
    # stan_dp.sample: private adaptation (row statistics kept on the shards,
    # counts and clipped sums back) and the noise-aware Gaussian; its output is
    # a function of the released sums, so it agrees to rounding: the shards sum in
    # another order (1e-16 relative); the draws agree to 1e-14 relative.  (Until each
    # round's next frame was the symmetric root of its curvature, a floored pair of
    # eigenvalues let LAPACK pick different bases in the two runs, the next rounds'
    # noise landed rotated, and the runs ended 6e-8, then 2.6e-5, then O(1) apart as
    # the noise draws shifted.)  A wrong combination of the shards' sums would be off
    # by O(1).
    common = dict(epsilon=2.0, delta=1e-5, chains=2, draws=100, seed=3, progress=False)
    got, want = stan_dp.sample(sharded, **common), stan_dp.sample(whole, **common)
    assert got.posterior.attrs["method"] == want.posterior.attrs["method"]
    assert got.posterior.attrs["epsilon_spent"] == want.posterior.attrs["epsilon_spent"]
    np.testing.assert_allclose(positions(got), positions(want), rtol=1e-10, atol=1e-12)
    # the skew check's per-row statistic (2 d + 1 gradients a row, on the shards) gives the same
    # released shift
    assert got.posterior.attrs["skew_shift"] == pytest.approx(want.posterior.attrs["skew_shift"], rel=1e-8)


def test_skew_rows_equal_in_process(sharded, whole):
    # the skew check's per-row shift vectors (gradients at the 2 d cubature points about the mode,
    # in a frame sent with the query): the same sums on the shards as in process
    from stan_dp.adaptation.skew import _shift_rows

    ref = queries(whole)
    theta = points(whole.dim, 1, seed=6)[0]
    frame = np.diag(np.linspace(0.2, 0.5, whole.dim))
    got = sharded.reduce(sharded.row_statistic(_shift_rows, theta, frame), column_sums)
    want = ref.reduce(ref.row_statistic(_shift_rows, theta, frame), column_sums)
    close(got, want, rel=1e-10)
    assert np.abs(want).max() > 1e-6


# ------------------------------------------------------------- (c) owners

OWNER_SIZES = (90, 70)


@pytest.fixture(scope="module")
def owner_paths(tmp_path_factory, data):
    return write_shards(tmp_path_factory.mktemp("owners"), data, sizes=OWNER_SIZES)


class _NoDataFiles:
    """Makes every way the driver could open a shard file raise."""

    def __init__(self, monkeypatch, paths):
        self.paths = {os.path.realpath(p) for p in paths}
        real_open, real_load = builtins.open, json.load

        def guarded_open(file, *args, **kwargs):
            if isinstance(file, (str, os.PathLike)) and os.path.realpath(file) in self.paths:
                raise AssertionError(f"the driver opened a data file: {file}")
            return real_open(file, *args, **kwargs)

        def guarded_load(fp, *args, **kwargs):
            if os.path.realpath(getattr(fp, "name", "")) in self.paths:
                raise AssertionError("the driver parsed a data file")
            return real_load(fp, *args, **kwargs)

        monkeypatch.setattr(builtins, "open", guarded_open)
        monkeypatch.setattr(io, "open", guarded_open)
        monkeypatch.setattr(json, "load", guarded_load)


def _arrays(obj, seen=None, depth=0):
    """Every numpy array reachable from an object's attributes (not through the client)."""
    seen = set() if seen is None else seen
    if id(obj) in seen or depth > 4:
        return []
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        return [obj]
    skip = ("distributed", "bridgestan", "ctypes")
    if isinstance(obj, distributed.Client) or type(obj).__module__.startswith(skip):
        return []
    children = []
    if isinstance(obj, dict):
        children = list(obj.values())
    elif isinstance(obj, (list, tuple, set)):
        children = list(obj)
    elif hasattr(obj, "__dict__"):
        children = list(vars(obj).values())
    out = []
    for child in children:
        out += _arrays(child, seen, depth + 1)
    return out


@pytest.fixture(scope="module")
def owners_model(client, owner_paths):
    model = ShardedModel(client, stan_dp.bundled_model("logistic_regression"), owner_paths, owners=True)
    yield model
    model.close()


def test_owners_driver_never_opens_a_data_file(client, owner_paths, monkeypatch):
    _NoDataFiles(monkeypatch, owner_paths)
    with pytest.raises(AssertionError, match="opened a data file"):   # the guard works
        open(owner_paths[0])
    model = ShardedModel(client, stan_dp.bundled_model("logistic_regression"), owner_paths, owners=True)
    try:
        fit = stan_dp.penalty(model, **dict(PENALTY, iterations=10))
        assert fit.posterior.attrs["owners"] == ["0", "1"]
        # No row array on the driver: the largest array the model holds is its offsets.
        assert max(a.size for a in _arrays(model)) <= len(owner_paths) + 1
    finally:
        model.close()


def test_owners_refuse_unnoised_queries(owners_model):
    theta = np.zeros(owners_model.dim)
    for call in (lambda: owners_model.clipped_ratio_sums(theta, theta, 1.0),
                 lambda: owners_model.clipped_grad_sum(theta, 1.0),
                 lambda: owners_model.row_statistic(grad_norms, theta),
                 lambda: owners_model.reduce(None, count_above, [0.0])):
        with pytest.raises(OwnerNoiseError, match="un-noised"):
            call()
    assert owners_model.relations == ("replace_one",)   # the owners' sizes reach the driver
    # The owner's own actor refuses too, whatever the driver does.
    shard = owners_model._shards[0]
    (_, status, exc), = owners_model._client.sync(
        owners_model._gather, "ratio_sums", {0: (theta, theta, 1.0, 1.0, 1.0, None, None, 1)}, None)
    assert status == "error" and isinstance(exc, OwnerNoiseError) and shard.future is not None
    with pytest.raises(ValueError, match="positive finite noise"):
        owners_model.release_owner_ratio_sums(np.random.default_rng(0), theta, theta, 1.0, 0.0)
    # A gradient sampler is refused (before any release, or at its first query).
    with pytest.raises((TypeError, OwnerNoiseError)):
        stan_dp.hmc(owners_model, epsilon=1.0, delta=1e-5, clip=1.0, grad_clip=1.0, step_size=0.01,
                    n_leapfrog=2, warmup=0, iterations=5, chains=1, seed=1, progress=False)


def owner_sums(whole, a, b, bound, temperature):
    sums = queries(whole).clipped_ratio_sums(a, b, bound, groups=np.repeat([0, 1], OWNER_SIZES),
                                             n_groups=2)
    return temperature * sums.totals


def test_owner_release_is_sum_plus_own_noise(owners_model, whole):
    a, b = points(whole.dim, 2, seed=21)
    bound, sd, temp = 0.3, 0.8, 0.5
    exact = owner_sums(whole, a, b, bound, temp)
    rng = np.random.default_rng(99)
    released = owners_model.release_owner_ratio_sums(rng, a, b, bound, sd, temperature=temp)
    seeds = np.random.default_rng(99).integers(2**63, size=2)
    noise = np.array([sd * np.random.default_rng(int(s)).standard_normal() for s in seeds])
    close(released, exact + noise, rel=1e-12)
    # Secure noise (unseeded runs): drawn on the owners; released values are noised.
    secure = owners_model.release_owner_ratio_sums(stan_dp.mechanisms.SecureNoise(), a, b, bound, sd,
                                                   temperature=temp)
    assert secure.shape == (2,) and np.all(np.isfinite(secure)) and not np.allclose(secure, exact)


def test_owner_noise_sd_statistically(owners_model, whole):
    a, b = points(whole.dim, 2, seed=22)
    bound, sd = 0.2, 1.7
    exact = owner_sums(whole, a, b, bound, 1.0)
    rng = np.random.default_rng(2026)
    calls = 300
    noise = np.array([owners_model.release_owner_ratio_sums(rng, a, b, bound, sd) - exact
                      for _ in range(calls)])
    # Per owner: mean 0 within 4 standard errors, sd within a 99.99% chi-square interval,
    # owners independent (correlation within 4 / sqrt(calls)).
    from scipy import stats

    for k in range(2):
        assert abs(noise[:, k].mean()) < 4 * sd / np.sqrt(calls)
        s2 = noise[:, k].var(ddof=1) * (calls - 1) / sd**2
        assert stats.chi2.ppf(5e-5, calls - 1) < s2 < stats.chi2.ppf(1 - 5e-5, calls - 1)
    assert abs(np.corrcoef(noise.T)[0, 1]) < 4 / np.sqrt(calls)


def test_owners_accounting_equals_in_process(owners_model, whole):
    labels = np.repeat(["0", "1"], OWNER_SIZES)
    before = owners_model.owner_release_counts()
    got = stan_dp.penalty(owners_model, **PENALTY)
    after = owners_model.owner_release_counts()
    want = stan_dp.penalty(whole, owners=labels, **PENALTY)
    ga, wa = dict(got.posterior.attrs), dict(want.posterior.attrs)
    for key in ("sampler", "epsilon", "delta", "epsilon_spent", "noise_multiplier", "relation",
                "accountant", "owners", "owner_noise_multiplier", "owner_epsilon", "owner_delta",
                "owner_privacy", "iterations", "chains", "clip", "seeded"):
        assert key in wa, key
        assert np.array_equal(np.asarray(ga.get(key)), np.asarray(wa[key])), key
    assert np.array_equal(got.sample_stats["noise_sd"], want.sample_stats["noise_sd"])
    # Each owner's own ledger: one release per iteration (the prior is finite everywhere).
    assert [x - y for x, y in zip(after, before)] == [PENALTY["iterations"]] * 2


# ------------------------------------------------------------------- CLI

def test_cli_sample_on_shards(cluster, shard_paths, capsys):
    from stan_dp.cli import main

    address = cluster[0].scheduler_address
    base = ["sample", str(stan_dp.bundled_model("logistic_regression")), "--epsilon", "2",
            "--delta", "1e-5", "--sampler", "penalty", "--clip", "1", "--step-size", "0.05",
            "--iterations", "20", "--chains", "1", "--seed", "5", "--quiet"]
    assert main(base + ["--shards", *shard_paths, "--scheduler", address]) == 0
    out = capsys.readouterr().out
    assert "privacy report" in out and "beta[1]" in out
    assert main(base + ["--shards", *shard_paths[:2], "--scheduler", address, "--owners"]) == 0
    out = capsys.readouterr().out
    assert "privacy report" in out and "penalty_multi_owner" in out
    # Refused before any work, one line each.
    for extra, message in (
            (["--shards", *shard_paths], "needs --scheduler"),
            (["--shards", *shard_paths[:2], "--scheduler", address, "--owners", "--relation",
              "add_remove"], "replace_one only"),
            (["--data", shard_paths[0], "--owners"], "go with --shards"),
            ([], "--data DATA.json, or as --shards")):
        assert main(base + extra) == 2
        assert message in capsys.readouterr().err
    argv = [a if a != "penalty" else "hmc" for a in base]
    assert main(argv + ["--shards", *shard_paths[:2], "--scheduler", address, "--owners"]) == 2
    assert "--sampler penalty only" in capsys.readouterr().err


def test_cli_scheduler_local_starts_its_own_cluster(shard_paths, capsys, tmp_path):
    from stan_dp.cli import main

    out = tmp_path / "fit.nc"
    argv = ["sample", str(stan_dp.bundled_model("logistic_regression")), "--epsilon", "2",
            "--delta", "1e-5", "--sampler", "penalty", "--clip", "1", "--step-size", "0.05",
            "--iterations", "10", "--chains", "1", "--seed", "5", "--quiet",
            "--shards", *shard_paths[:2], "--scheduler", "local", "--output", str(out)]
    assert main(argv) == 0
    assert "privacy report" in capsys.readouterr().out and out.is_file()


# ----------------------------------------------------------------- (d) faults

FAULT_RUN = dict(PENALTY, iterations=100)


@pytest.fixture
def fault_model(client, tmp_path, data):
    client.wait_for_workers(2, timeout=60)
    paths = write_shards(tmp_path, data, sizes=(90, 70))
    model = ShardedModel(client, stan_dp.bundled_model("logistic_regression"), paths,
                         restart_timeout=60)
    yield model, paths
    model.close()


def kill_worker(client, address):
    pid = client.run(os.getpid, workers=[address])[address]
    os.kill(pid, signal.SIGKILL)


def kill_at_call(monkeypatch, model, at, shard, in_thread=False):
    """Kill the worker holding ``shard`` when the driver makes its ``at``-th query."""
    real, count = model._call, {"n": 0}
    go = threading.Event()

    def counting(method, calls):
        count["n"] += 1
        if count["n"] == at:
            go.set()
            if not in_thread:
                kill_worker(model._client, model.shard_addresses[shard])
        return real(method, calls)

    monkeypatch.setattr(model, "_call", counting)
    if in_thread:
        address = model.shard_addresses[shard]
        pid = model._client.run(os.getpid, workers=[address])[address]
        threading.Thread(target=lambda: go.wait(60) and os.kill(pid, signal.SIGKILL),
                         daemon=True).start()


def test_worker_killed_between_queries_same_draws(fault_model, monkeypatch):
    model, _ = fault_model
    want = stan_dp.penalty(model, **FAULT_RUN)
    kill_at_call(monkeypatch, model, at=30, shard=1)
    got = stan_dp.penalty(model, **FAULT_RUN)
    assert model.recoveries == 1
    assert np.array_equal(positions(got), positions(want))
    assert got.posterior.attrs["epsilon_spent"] == want.posterior.attrs["epsilon_spent"]


def test_worker_killed_during_a_query_same_draws(fault_model, monkeypatch):
    model, _ = fault_model
    want = stan_dp.penalty(model, **FAULT_RUN)
    kill_at_call(monkeypatch, model, at=20, shard=0, in_thread=True)
    got = stan_dp.penalty(model, **FAULT_RUN)
    assert model.recoveries >= 1
    assert np.array_equal(positions(got), positions(want))


def test_shard_that_cannot_come_back_stops_the_run(fault_model, monkeypatch):
    model, paths = fault_model
    os.rename(paths[1], paths[1] + ".gone")      # its data source is gone
    kill_at_call(monkeypatch, model, at=10, shard=1)
    result = None
    with pytest.raises(ShardFailure, match=r"shard 1 .*3 attempt.*FileNotFoundError") as info:
        result = stan_dp.penalty(model, **FAULT_RUN)
    assert result is None and info.value.shard == 1 and info.value.source == paths[1]


def test_owner_killed_comes_back_on_its_own_worker(client, owner_paths, monkeypatch):
    client.wait_for_workers(2, timeout=60)
    model = ShardedModel(client, stan_dp.bundled_model("logistic_regression"), owner_paths,
                         owners=True, restart_timeout=60)
    try:
        want = stan_dp.penalty(model, **dict(PENALTY, iterations=30))
        names = model._workers()
        pinned = names[model.shard_addresses[1]]
        kill_at_call(monkeypatch, model, at=10, shard=1)
        got = stan_dp.penalty(model, **dict(PENALTY, iterations=30))
        assert model.recoveries == 1
        # Same worker name (the nanny's restart), never the other owner's worker.
        assert model._workers()[model.shard_addresses[1]] == pinned
        assert model.shard_addresses[0] != model.shard_addresses[1]
        # The retried owner reused its seed: its first value was never released.
        assert np.array_equal(positions(got), positions(want))
    finally:
        model.close()


def test_hung_worker_times_out_and_its_shard_moves(fault_model, monkeypatch, client):
    model, _ = fault_model
    want = stan_dp.penalty(model, **dict(FAULT_RUN, iterations=40))
    address = model.shard_addresses[1]
    pid = client.run(os.getpid, workers=[address])[address]
    model.timeout = 2.0
    real, count = model._call, {"n": 0}

    def stopping(method, calls):
        count["n"] += 1
        if count["n"] == 15:
            os.kill(pid, signal.SIGSTOP)       # alive but silent: only the timeout notices
        return real(method, calls)

    monkeypatch.setattr(model, "_call", stopping)
    try:
        got = stan_dp.penalty(model, **dict(FAULT_RUN, iterations=40))
    finally:
        os.kill(pid, signal.SIGCONT)
    assert model.recoveries == 1 and model.shard_addresses[1] != address
    assert np.array_equal(positions(got), positions(want))

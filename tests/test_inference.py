"""End-to-end tests of penalty() and the driver: budget, output, privacy invariants, errors."""

from __future__ import annotations

import warnings

import densities
import numpy as np
import pytest
from test_penalty import check_moments

from stan_dp import inference
from stan_dp.accounting import Budget, PrivacyBudgetError, Release
from stan_dp.inference import DEFAULT_ITERATIONS, PrivacyWarning, initial_position
from stan_dp.samplers.penalty import RELEASED_STATS, penalty

REQUIRED_ATTRS = {
    "sampler", "epsilon", "delta", "epsilon_spent", "noise_multiplier", "iterations", "warmup",
    "chains", "clip", "temperature", "relation", "accountant", "n_rows", "seeded",
    "stan_dp_version",
}
BASE = dict(epsilon=2.0, delta=1e-5, clip=2.0, step_size=0.05, progress=False)


@pytest.fixture()
def normal_mean():
    return densities.NormalMean(np.random.default_rng(1).normal(0.3, 1.0, 100))


@pytest.fixture(scope="module")
def logistic():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(40, 2))
    y = (rng.random(40) < 1 / (1 + np.exp(-(0.5 + x @ [1.0, -1.0])))).astype(float)
    return densities.LogisticRegression(x, y)


def test_output_structure_names_shapes_and_attrs(logistic):
    idata = penalty(logistic, **BASE, iterations=30, warmup=10, chains=3, seed=1)
    groups = set(idata.groups())
    assert groups == {"posterior", "sample_stats", "warmup_posterior", "warmup_sample_stats"}
    post = idata.posterior
    assert post["alpha"].shape == (3, 30)
    assert post["beta"].shape == (3, 30, 2)
    assert idata.warmup_posterior["beta"].shape == (3, 10, 2)
    assert set(idata.sample_stats.data_vars) == set(RELEASED_STATS)
    assert idata.sample_stats["is_accepted"].dtype == bool
    assert REQUIRED_ATTRS <= set(idata.attrs)
    assert REQUIRED_ATTRS <= set(post.attrs)
    a = idata.attrs
    assert (a["iterations"], a["warmup"], a["chains"], a["n_rows"]) == (30, 10, 3, 40)
    assert a["sampler"] == "penalty" and a["relation"] == "replace_one" and a["seeded"] == 1
    assert a["nonprivate_outputs"] == ""


def test_no_raw_data_in_output(normal_mean, tmp_path):
    idata = penalty(normal_mean, **BASE, iterations=20, chains=2, seed=2)
    assert "observed_data" not in idata.groups() and "warmup_posterior" not in idata.groups()
    names = set(idata.sample_stats.data_vars)
    assert not names & {"lp", "clip_fraction", "log_likelihood", "gradient"}
    assert not any("seed" in k and k != "seeded" for k in idata.attrs)
    idata.to_netcdf(tmp_path / "run.nc")  # attrs are netCDF-safe


def test_clip_fraction_is_opt_in_with_a_loud_warning(normal_mean):
    with pytest.warns(PrivacyWarning, match="NOT differentially private"):
        idata = penalty(normal_mean, **{**BASE, "clip": 0.05}, iterations=50, chains=2, seed=3,
                        release_clip_fraction=True)
    assert idata.attrs["nonprivate_outputs"] == "clip_fraction"
    assert float(idata.sample_stats["clip_fraction"].mean()) > 0


def test_accounting_attrs_agree_with_the_accounting_module(normal_mean):
    idata = penalty(normal_mean, **BASE, iterations=40, warmup=15, chains=3, seed=4)
    a = idata.attrs
    budget = Budget(2.0, 1e-5)
    z = budget.calibrate([Release(1.0)], 55, chains=3)
    assert a["noise_multiplier"] == pytest.approx(z)
    assert a["epsilon_spent"] == pytest.approx(budget.epsilon_spent([Release(z)], 55, chains=3))
    # calibrated to spend the whole budget (up to the accountant's root-finding ulps)
    assert a["epsilon_spent"] == pytest.approx(2.0, rel=1e-9)
    assert a["accountant"] == budget.accountant([Release(z)])
    # noise sd released per iteration = z * 2 * T * L * ||move||  -> ratio to step is z*2*L*|N(0,1)|
    assert np.all(idata.sample_stats["noise_sd"].values > 0)


def test_noise_given_uses_the_most_iterations_that_fit(normal_mean):
    budget = Budget(2.0, 1e-5)
    k = budget.max_iterations([Release(40.0)], chains=2)
    idata = penalty(normal_mean, **BASE, noise=40.0, warmup=5, chains=2, seed=5)
    assert idata.attrs["iterations"] == k - 5
    assert idata.attrs["noise_multiplier"] == 40.0
    assert idata.attrs["epsilon_spent"] <= 2.0


def test_default_iteration_count(normal_mean, monkeypatch):
    monkeypatch.setattr(inference, "DEFAULT_ITERATIONS", 25)
    idata = penalty(normal_mean, **BASE, chains=1, seed=6)
    assert idata.attrs["iterations"] == 25 and idata.posterior["mu"].shape == (1, 25)
    assert DEFAULT_ITERATIONS == 2000


def test_budget_refusals_happen_before_the_data_is_touched(normal_mean):
    model = densities.Untouchable(normal_mean)
    with pytest.raises(PrivacyBudgetError, match="do not fit"):
        penalty(model, **BASE, noise=40.0, iterations=10**6)
    with pytest.raises(PrivacyBudgetError):
        penalty(model, **BASE, noise=0.01)                       # not even one iteration
    k = Budget(2.0, 1e-5).max_iterations([Release(40.0)], chains=4)
    with pytest.raises(PrivacyBudgetError, match="warmup"):
        penalty(model, **BASE, noise=40.0, warmup=k)             # warm-up eats the budget
    with pytest.raises(densities.DataTouched):                   # a fitting run does touch it
        penalty(model, **BASE, noise=40.0, iterations=k)


@pytest.mark.parametrize(
    "change, err, match",
    [
        ({"clip": 0.0}, ValueError, "clip"),
        ({"clip": -1.0}, ValueError, "clip"),
        ({"clip": np.inf}, ValueError, "clip"),
        ({"step_size": 0.0}, ValueError, "step_size"),
        ({"step_size": [0.1, 0.1]}, ValueError, "step_size"),
        ({"epsilon": 0.0}, ValueError, "epsilon"),
        ({"epsilon": -1.0}, ValueError, "epsilon"),
        ({"delta": 0.0}, ValueError, "delta"),
        ({"delta": 1.0}, ValueError, "delta"),
        ({"proposal": "hmc"}, ValueError, "unknown proposal"),
        ({"init": [0.0, 1.0]}, ValueError, "init"),
        ({"init": {"mu": 0.0}, "_no_unconstrain": True}, TypeError, "unconstrain"),
        ({"relation": "swap"}, ValueError, "relation"),
        ({"chains": 0}, ValueError, "chains"),
        ({"warmup": -1}, ValueError, "warmup"),
        ({"iterations": 0}, ValueError, "iterations"),
        ({"noise": -1.0}, ValueError, "noise"),
        ({"temperature": 0.0}, ValueError, "temperature"),
        ({"owners": [1, 2]}, ValueError, "owners"),
        ({"seed": "abc"}, ValueError, "seed"),
    ],
)
def test_invalid_arguments_are_refused_before_the_data_is_touched(normal_mean, change, err, match):
    model = densities.Untouchable(normal_mean)
    kwargs = {**BASE, "iterations": 10, **change}
    if kwargs.pop("_no_unconstrain", False):
        assert not hasattr(model, "unconstrain")
    with pytest.raises(err, match=match):
        penalty(model, **kwargs)


def test_non_protocol_model_is_refused():
    class NoRows:
        n_rows, dim, param_names = 3, 1, ["mu"]

        def log_prior(self, theta):
            return 0.0

        def constrain(self, theta):
            return {"mu": theta[0]}

    with pytest.raises(TypeError, match="row_log_lik"):
        penalty(NoRows(), **BASE, iterations=10)

    class BadDim(densities.NormalMean):
        dim = 0

    bad = BadDim(np.zeros(3))
    bad.dim = 0
    with pytest.raises(TypeError, match="dim"):
        penalty(bad, **BASE, iterations=10)


def test_reproducible_with_seed_and_fresh_without(normal_mean):
    a = penalty(normal_mean, **BASE, iterations=50, chains=2, seed=42)
    b = penalty(normal_mean, **BASE, iterations=50, chains=2, seed=42)
    c = penalty(normal_mean, **BASE, iterations=50, chains=2, seed=43)
    np.testing.assert_array_equal(a.posterior["mu"].values, b.posterior["mu"].values)
    assert not np.array_equal(a.posterior["mu"].values, c.posterior["mu"].values)
    d = penalty(normal_mean, **BASE, iterations=50, chains=2)
    e = penalty(normal_mean, **BASE, iterations=50, chains=2)
    assert d.attrs["seeded"] == 0
    assert not np.array_equal(d.posterior["mu"].values, e.posterior["mu"].values)


def test_init_options(normal_mean):
    idata = penalty(normal_mean, **BASE, iterations=5, chains=2, seed=1, init=[0.25])
    assert idata.attrs["init"] == "user"
    idata = penalty(normal_mean, **BASE, iterations=5, chains=2, seed=1, init={"mu": 0.25})
    idata = penalty(normal_mean, **BASE, iterations=5, chains=2, seed=1, init=[[0.1], [0.2]])
    rng = np.random.default_rng(0)
    pts = np.array([initial_position(rng, densities.NormalMeanScale(np.zeros(3)), None, 0)
                    for _ in range(200)])
    assert pts.shape == (200, 2) and np.all(np.abs(pts) <= 2.0)


def test_progress_bar_can_never_crash_a_run(normal_mean, monkeypatch):
    import tqdm.auto

    class Broken:
        def __init__(self, *a, **k):
            pass

        def update(self, n):
            raise RuntimeError("display gone")

        def close(self):
            raise RuntimeError("display gone")

    monkeypatch.setattr(tqdm.auto, "tqdm", Broken)
    idata = penalty(normal_mean, **{**BASE, "progress": True}, iterations=10, chains=1, seed=1)
    assert idata.posterior["mu"].shape == (1, 10)


def test_multi_owner_report(normal_mean):
    owners = np.where(np.arange(100) < 30, "clinic_a", "clinic_b")
    idata = penalty(normal_mean, **BASE, iterations=20, chains=2, seed=7, owners=owners)
    a = idata.attrs
    assert a["sampler"] == "penalty_multi_owner"
    assert list(a["owners"]) == ["clinic_a", "clinic_b"]
    assert list(a["owner_epsilon"]) == pytest.approx([a["epsilon_spent"]] * 2)
    assert list(a["owner_delta"]) == [1e-5, 1e-5]
    assert list(a["owner_noise_multiplier"]) == pytest.approx([a["noise_multiplier"]] * 2)


def test_private_run_is_exact_when_clipping_is_inactive():
    """A real private run (large budget) on a model where the clip bound never binds.

    |r_j| = |dmu| |y_j - (mu + mu')/2| <= 5 |dmu| while |y_j| <= 2 and |mu| <= 3.
    """
    rng = np.random.default_rng(8)
    model = densities.NormalMean(np.clip(rng.normal(0.3, 0.7, 10_000), -2, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        idata = penalty(model, epsilon=200.0, delta=1e-5, iterations=2500, warmup=200, chains=4,
                        clip=5.0, step_size=0.02, init=[0.3], seed=9, progress=False,
                        release_clip_fraction=True)
    assert float(idata.sample_stats["clip_fraction"].max()) == 0.0
    z = idata.attrs["noise_multiplier"]
    assert z > 1.0  # genuinely noisy: sigma = 2 z L |dmu| ~ 1 per step
    assert float(np.median(idata.sample_stats["noise_sd"])) > 0.5
    check_moments(idata.posterior["mu"].values, *model.posterior())


def test_a_delta_of_at_least_one_over_n_is_a_privacy_warning():
    """(epsilon, delta)-DP with delta >= 1/n admits publishing one random row in full, so such a
    delta protects no one: the boundary is exactly 1/n, and n must be public to check it."""
    from stan_dp.accounting.validation import weak_delta_message

    assert weak_delta_message(1.0 / 200, 200) is not None            # exactly 1/n
    assert weak_delta_message(np.nextafter(1.0 / 200, 0.0), 200) is None
    assert weak_delta_message(0.5, None) is None                    # no public n: nothing to check
    assert "1/n = 0.005" in weak_delta_message(0.01, 200)


@pytest.mark.parametrize("delta, warned", [(0.02, True), (1e-5, False)])
def test_the_seed_samplers_warn_once_on_a_delta_of_at_least_one_over_n(normal_mean, delta, warned):
    n = int(normal_mean.n_rows)
    assert (delta >= 1.0 / n) == warned
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        penalty(normal_mean, **{**BASE, "delta": delta}, iterations=5, warmup=0, chains=1, seed=1)
    privacy = [w for w in caught if issubclass(w.category, PrivacyWarning)]
    assert len(privacy) == int(warned)
    if warned:
        assert "1/n" in str(privacy[0].message) and privacy[0].filename == __file__


def test_init_may_be_a_json_file_of_constrained_values(compiled, tmp_path):
    """As cmdstanpy's inits="file.json": it raised "could not convert string to float"."""
    import json

    from conftest import bundled, linear_data
    from stan_dp import RowModel
    from stan_dp.inference import resolve_init

    model = RowModel(compiled(bundled("linear_regression_unknown_scale")),
                     linear_data(n=30, unknown_scale=True))
    path = tmp_path / "init.json"
    path.write_text(json.dumps({"sigma": 5.0}))
    np.testing.assert_array_equal(resolve_init(model, str(path), 2), resolve_init(model, {"sigma": 5.0}, 2))
    np.testing.assert_array_equal(resolve_init(model, path, 1), resolve_init(model, {"sigma": 5.0}, 1))
    with pytest.raises(FileNotFoundError, match="init file not found"):
        resolve_init(model, str(tmp_path / "absent.json"), 1)
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match="JSON object"):
        resolve_init(model, path, 1)

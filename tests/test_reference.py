"""Non-private reference fits (Stan's NUTS), offline backend; CmdStan when installed."""

from __future__ import annotations

import json
import logging
import os
import re
import warnings
from pathlib import Path

import numpy as np
import pytest

from conftest import bundled, linear_data
from stan_dp import reference_fit
from stan_dp import reference as reference_module
from stan_dp.toolchain import cache_key

LINEAR = bundled("linear_regression")
UNKNOWN_SCALE = bundled("linear_regression_unknown_scale")
SHORT = dict(chains=2, draws=400, warmup=300)


def _arviz():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        import arviz as az
    return az


def exact_linear_posterior(data: dict) -> tuple[np.ndarray, np.ndarray]:
    """Mean and covariance of (alpha, beta) for linear_regression.stan.

    Known sigma and independent N(0, s^2) priors on alpha and beta make the
    posterior Gaussian: precision Z'Z / sigma^2 + I / s^2 and mean
    precision^-1 Z'y / sigma^2, with Z = [1, X].
    """
    z = np.column_stack([np.ones(data["N"]), data["X"]])
    precision = z.T @ z / data["sigma"] ** 2 + np.eye(z.shape[1]) / data["prior_scale"] ** 2
    cov = np.linalg.inv(precision)
    return cov @ z.T @ data["y"] / data["sigma"] ** 2, cov


@pytest.fixture(scope="module")
def linear_fit():
    data = linear_data(n=100, d=2)
    return data, reference_fit(LINEAR, data, chains=2, draws=1000, warmup=500, seed=11,
                               backend="offline")


def test_offline_nuts_matches_the_exact_gaussian_posterior(linear_fit):
    az = _arviz()
    data, idata = linear_fit
    mean, cov = exact_linear_posterior(data)
    sd = np.sqrt(np.diag(cov))
    post = idata.posterior
    assert post["alpha"].shape == (2, 1000)
    assert post["beta"].shape == (2, 1000, 2)  # (chain, draw, D), as private fits
    draws = np.column_stack([post["alpha"].values.reshape(-1),
                             post["beta"].values.reshape(-1, 2)])
    ess = az.ess(idata, var_names=["alpha", "beta"])
    ess = np.concatenate([[float(ess["alpha"])], ess["beta"].values])
    assert ess.min() > 300  # NUTS on a Gaussian mixes well; the bounds below need a real ESS
    # Monte Carlo errors from the effective sample size: sd(mean) = sd / sqrt(ESS),
    # sd(sample sd) ~= sd / sqrt(2 ESS) for a Gaussian.  4 Monte Carlo sds on each of
    # 6 checks: a false failure has probability < 1e-3.
    assert np.all(np.abs(draws.mean(axis=0) - mean) < 4 * sd / np.sqrt(ess))
    assert np.all(np.abs(draws.std(axis=0, ddof=1) - sd) < 4 * sd / np.sqrt(2 * ess))
    # The correlation of the betas too (a wrong metric or data layout shows here).
    rho_exact = cov[1, 2] / (sd[1] * sd[2])
    rho = np.corrcoef(draws[:, 1], draws[:, 2])[0, 1]
    assert abs(rho - rho_exact) < 4 * (1 - rho_exact**2) / np.sqrt(ess[1:].min())


def test_dense_metric_samples_a_correlated_posterior_in_short_trajectories():
    """``metric="dense_e"`` runs Stan's dense-metric NUTS: on a linear regression whose two
    predictors are 0.999 correlated (and not centred) the exact Gaussian posterior's moments are
    recovered, and the adapted full metric crosses it in far fewer leapfrog steps than the
    diagonal one, which can only rescale the axes (a wrong or ignored option would not)."""
    az = _arviz()
    rng = np.random.default_rng(5)
    n = 200
    common = rng.normal(size=n)
    x = 3.0 + np.column_stack([common, common + 0.045 * rng.normal(size=n)])
    data = {"N": n, "D": 2, "X": x, "y": 1.0 + x @ [1.0, -0.5] + rng.normal(size=n),
            "sigma": 1.0, "prior_scale": 10.0}
    mean, cov = exact_linear_posterior(data)
    sd = np.sqrt(np.diag(cov))
    corr = cov / np.outer(sd, sd)
    assert abs(corr[1, 2]) > 0.99   # the case is the one a diagonal metric cannot rescale
    steps = {}
    for metric in ("diag_e", "dense_e"):
        idata = reference_fit(LINEAR, data, chains=2, draws=1000, warmup=500, seed=3, backend="offline",
                              metric=metric)
        assert idata.attrs["metric"] == metric
        steps[metric] = float(idata.sample_stats["n_steps"].mean())
        if metric == "dense_e":
            post = idata.posterior
            draws = np.column_stack([post["alpha"].values.reshape(-1), post["beta"].values.reshape(-1, 2)])
            ess = az.ess(idata, var_names=["alpha", "beta"])
            ess = np.concatenate([[float(ess["alpha"])], ess["beta"].values])
            assert ess.min() > 300
            # 4 Monte Carlo sds on each of 6 checks, as above
            assert np.all(np.abs(draws.mean(axis=0) - mean) < 4 * sd / np.sqrt(ess))
            assert np.all(np.abs(draws.std(axis=0, ddof=1) - sd) < 4 * sd / np.sqrt(2 * ess))
    assert steps["dense_e"] < steps["diag_e"] / 4, steps


def test_fit_records_backend_and_stan_sample_stats(linear_fit):
    _, idata = linear_fit
    attrs = idata.attrs
    assert attrs["backend"] == "offline" and attrs["sampler"] == "nuts"
    assert attrs["private"] == 0 and attrs["seed"] == 11 and attrs["seeded"] == 1
    assert (attrs["chains"], attrs["draws"], attrs["warmup"]) == (2, 1000, 500)
    assert attrs["stan_version"].startswith("2.")
    assert idata.posterior.attrs["backend"] == "offline"
    stats = idata.sample_stats
    assert set(stats.data_vars) == {"lp", "acceptance_rate", "step_size", "tree_depth",
                                    "n_steps", "diverging", "energy"}
    assert stats["diverging"].dtype == bool and not stats["diverging"].any()
    assert np.all(stats["n_steps"] >= 1) and np.all(stats["tree_depth"] <= 10)
    assert np.all((stats["acceptance_rate"] >= 0) & (stats["acceptance_rate"] <= 1))
    # NUTS doubles the trajectory per level; Stan counts a level only once its
    # subtree completes without a U-turn, so n_leapfrog <= 2^(treedepth + 1) - 1.
    assert np.all(stats["n_steps"] <= 2 ** (stats["tree_depth"] + 1) - 1)
    # Step size is fixed after adaptation: one value per chain.
    assert np.all(stats["step_size"].min("draw") == stats["step_size"].max("draw"))
    assert idata.warmup_posterior["beta"].shape == (2, 500, 2)
    assert idata.warmup_sample_stats["lp"].shape == (2, 500)


def test_lp_is_the_log_density_of_the_draws(linear_fit):
    # Stan's lp__ (propto, Jacobian) of the exact Gaussian equals
    # -0.5 (theta - m)' P (theta - m) + const: differences between draws must match.
    data, idata = linear_fit
    mean, cov = exact_linear_posterior(data)
    theta = np.column_stack([idata.posterior["alpha"].values.reshape(-1),
                             idata.posterior["beta"].values.reshape(-1, 2)])
    dev = theta - mean
    quad = -0.5 * np.einsum("ij,jk,ik->i", dev, np.linalg.inv(cov), dev)
    lp = idata.sample_stats["lp"].values.reshape(-1)
    np.testing.assert_allclose(lp - lp[0], quad - quad[0], atol=1e-6)


def test_constrained_parameter_model_gives_positive_scale():
    data = linear_data(n=100, d=2, unknown_scale=True)
    idata = reference_fit(UNKNOWN_SCALE, data, seed=3, backend="offline", **SHORT)
    sigma = idata.posterior["sigma"].values
    assert sigma.shape == (2, 400) and np.all(sigma > 0)
    # Independent oracle: with n = 100 and weak priors the posterior of sigma sits
    # at the least-squares residual scale (its sd is ~ sigma / sqrt(2n) ~= 0.1).
    z = np.column_stack([np.ones(100), data["X"]])
    resid = data["y"] - z @ np.linalg.lstsq(z, data["y"], rcond=None)[0]
    sigma_hat = np.sqrt(resid @ resid / (100 - 3))
    assert abs(sigma.mean() - sigma_hat) < 3 * sigma.std()


def test_fixed_seed_reproduces_and_chains_differ():
    data = linear_data(n=50, d=2)
    a = reference_fit(LINEAR, data, seed=5, backend="offline", parallel_chains=2, **SHORT)
    b = reference_fit(LINEAR, data, seed=5, backend="offline", parallel_chains=1, **SHORT)
    c = reference_fit(LINEAR, data, seed=6, backend="offline", **SHORT)
    beta_a = a.posterior["beta"].values
    # Same seed: bit-identical, whether the chains ran in parallel or one by one.
    np.testing.assert_array_equal(beta_a, b.posterior["beta"].values)
    np.testing.assert_array_equal(a.sample_stats["lp"].values, b.sample_stats["lp"].values)
    assert not np.array_equal(beta_a[0], beta_a[1])  # each chain has its own stream
    assert not np.array_equal(beta_a, c.posterior["beta"].values)


def test_seed_none_draws_fresh_entropy():
    data = linear_data(n=20, d=1)
    fits = [reference_fit(LINEAR, data, chains=1, draws=20, warmup=20, backend="offline")
            for _ in range(2)]
    assert fits[0].attrs["seeded"] == 0
    assert fits[0].attrs["seed"] != fits[1].attrs["seed"]
    assert not np.array_equal(fits[0].posterior["alpha"], fits[1].posterior["alpha"])


def test_data_from_a_json_file_and_netcdf_round_trip(tmp_path):
    az = _arviz()
    data = linear_data(n=30, d=2)
    path = tmp_path / "data.json"
    path.write_text(json.dumps({k: np.asarray(v).tolist() for k, v in data.items()}))
    from_file = reference_fit(str(LINEAR), path, seed=8, backend="offline", **SHORT)
    from_dict = reference_fit(LINEAR, data, seed=8, backend="offline", **SHORT)
    np.testing.assert_array_equal(from_file.posterior["beta"], from_dict.posterior["beta"])

    out = tmp_path / "ref.nc"
    from_file.to_netcdf(str(out))
    back = az.from_netcdf(str(out))
    np.testing.assert_array_equal(back.posterior["beta"], from_file.posterior["beta"])
    np.testing.assert_array_equal(back.sample_stats["diverging"],
                                  from_file.sample_stats["diverging"])
    assert back.attrs["backend"] == "offline" and back.attrs["seed"] == 8
    assert "warmup_posterior" in back.groups()


def test_interrupt_stops_the_chains(caplog):
    # on_progress runs in the calling thread where Ctrl-C would arrive.
    from stan_dp.native import nuts
    from stan_dp.toolchain import compile_model

    lib = nuts.load(compile_model(LINEAR, variant="reference"))

    def interrupt(done: int) -> None:
        raise KeyboardInterrupt

    data_json = json.dumps({k: np.asarray(v).tolist() for k, v in linear_data(n=20).items()})
    total = 2 * 300_000
    with caplog.at_level(logging.WARNING, logger="stan_dp.native.nuts"):
        with pytest.raises(KeyboardInterrupt):
            nuts.run_nuts(lib, data_json, seed=1, chains=2, warmup=0, draws=300_000,
                          settings=nuts.NutsSettings(), threads=2, on_progress=interrupt)
    (record,) = [r for r in caplog.records if "interrupted" in r.message]
    done = int(record.message.split("after ")[1].split(" of")[0])
    assert done < total


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(backend="pystan"), "backend must be one of"),
        (dict(chains=0), "chains must be at least 1"),
        (dict(chains=2.0), "chains must be an integer"),
        (dict(draws=0), "draws must be at least 1"),
        (dict(warmup=-1), "warmup must be at least 0"),
        (dict(seed=-1), "seed must be in"),
        (dict(seed=2**32), "seed must be in"),
        (dict(seed="1"), "seed must be None or an integer"),
        (dict(adapt_delta=1.0), "adapt_delta must be below 1"),
        (dict(adapt_delta=0.0), "adapt_delta must be positive"),
        (dict(adapt_delta=True), "adapt_delta must be a real number"),
        (dict(adapt_delta=float("nan")), "adapt_delta must not be NaN"),
        (dict(max_treedepth=0), "max_treedepth must be at least 1"),
        (dict(init_radius=-1.0), "init_radius must be non-negative"),
        (dict(init_radius=float("inf")), "init_radius must be finite"),
        (dict(init_radius=True), "init_radius must be a real number"),
        (dict(parallel_chains=0), "parallel_chains must be at least 1"),
        (dict(metric="unit_e"), "metric must be one of diag_e, dense_e"),
    ],
)
def test_bad_arguments_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        reference_fit(LINEAR, linear_data(n=10), **kwargs)


def test_bad_model_and_data_are_refused(tmp_path):
    data = linear_data(n=10)
    with pytest.raises(FileNotFoundError, match="Stan file not found"):
        reference_fit(tmp_path / "nope.stan", data)
    with pytest.raises(ValueError, match="must be a .stan file"):
        reference_fit(tmp_path / "model.so", data)
    with pytest.raises(FileNotFoundError, match="data file not found"):
        reference_fit(LINEAR, tmp_path / "nope.json")
    missing_scalar = {k: v for k, v in data.items() if k != "sigma"}
    with pytest.raises(ValueError, match="lack 'sigma'"):
        reference_fit(LINEAR, missing_scalar, backend="offline")
    # Left to Stan (arrays may legitimately be absent when empty): still a ValueError
    # that names the variable.
    missing_array = {k: v for k, v in data.items() if k != "X"}
    with pytest.raises(ValueError, match="variable name=X"):
        reference_fit(LINEAR, missing_array, backend="offline", **SHORT)
    wrong_size = dict(data, y=np.zeros(9))
    with pytest.raises(ValueError, match=r"variable name=y; .*dims found=\(9\)"):
        reference_fit(LINEAR, wrong_size, backend="offline", **SHORT)
    with pytest.raises(ValueError, match="sigma is -1"):
        reference_fit(LINEAR, dict(data, sigma=-1.0), backend="offline", **SHORT)


def test_backend_choice_without_cmdstan(monkeypatch):
    monkeypatch.setattr(reference_module, "cmdstan_available", lambda: False)
    with pytest.raises(RuntimeError, match="no CmdStan installation"):
        reference_fit(LINEAR, linear_data(n=10), backend="cmdstan")
    idata = reference_fit(LINEAR, linear_data(n=10), backend="auto", seed=1,
                          chains=1, draws=10, warmup=10)
    assert idata.attrs["backend"] == "offline"


def test_reference_variant_has_its_own_cache_key(tmp_path, monkeypatch):
    from stan_dp import toolchain

    default = cache_key(LINEAR)
    reference = cache_key(LINEAR, variant="reference")
    assert reference != default
    other = tmp_path / "services.cpp"
    other.write_text("// another services source\n")
    monkeypatch.setattr(toolchain, "SERVICES_SOURCE", other)
    # Existing libraries do not depend on the services source; reference ones do.
    assert cache_key(LINEAR) == default
    assert cache_key(LINEAR, variant="reference") != reference
    with pytest.raises(ValueError, match="variant must be one of"):
        cache_key(LINEAR, variant="fast")


def _fake_cmdstan(root: Path, version: str = "2.35.0") -> Path:
    """A folder that cmdstanpy's path validation accepts as a CmdStan installation."""
    root.mkdir(parents=True)
    (root / "makefile").write_text(f"# fake\nCMDSTAN_VERSION := {version}\n")
    return root


class _FakeCmdStan:
    """A stand-in for cmdstanpy.CmdStanModel that binds calls to the real signatures."""

    def __init__(self, calls, sample_error=None, compile_error=None):
        import inspect

        import cmdstanpy

        self.calls, self.sample_error, self.compile_error = calls, sample_error, compile_error
        # The real class's signatures (another fake may already stand in for it).
        real = cmdstanpy.CmdStanModel
        self.real = real.real if isinstance(real, _FakeCmdStan) else real
        self.init_signature = inspect.signature(self.real.__init__)
        self.sample_signature = inspect.signature(self.real.sample)

    def __call__(self, **kwargs):
        self.init_signature.bind(None, **kwargs)
        self.calls.update(model=kwargs, cmdstan_env=os.environ.get("CMDSTAN"))
        if self.compile_error:
            raise self.compile_error
        return self

    def sample(self, **kwargs):
        self.sample_signature.bind(None, **kwargs)
        self.calls.update(kwargs)
        if self.sample_error:
            raise self.sample_error
        return "fit"


def test_cmdstan_backend_wiring(monkeypatch, tmp_path):
    # Without CmdStan: a stand-in for cmdstanpy checks that the call binds to the
    # real CmdStanModel signatures, that the program is compiled from a copy in
    # stan_dp's cache (cmdstanpy puts the executable next to the .stan file),
    # and that the result gets our attrs.
    import cmdstanpy

    calls = {}
    offline = reference_fit(LINEAR, linear_data(n=10), seed=2, chains=1, draws=10, warmup=10)
    az = _arviz()
    root = _fake_cmdstan(tmp_path / "cmdstan-2.36.1", "2.36.1")
    monkeypatch.setenv("STAN_DP_CMDSTAN", str(root))
    monkeypatch.delenv("CMDSTAN", raising=False)
    monkeypatch.setattr(cmdstanpy, "CmdStanModel", _FakeCmdStan(calls))
    monkeypatch.setattr(az, "from_cmdstanpy", lambda posterior, save_warmup: offline)
    user_folder = sorted(p.name for p in Path(LINEAR).resolve().parent.iterdir())
    idata = reference_fit(LINEAR, linear_data(n=10), seed=2, chains=3, draws=7, warmup=5,
                          adapt_delta=0.9, max_treedepth=8, metric="dense_e", cache_dir=tmp_path / "cache")
    stan_file = Path(calls["model"]["stan_file"])
    assert stan_file.is_relative_to(tmp_path / "cache" / "cmdstan")
    assert stan_file.read_bytes() == Path(LINEAR).read_bytes()
    assert calls["model"]["stanc_options"] == {"include-paths": [str(Path(LINEAR).resolve().parent)]}
    assert calls["cmdstan_env"] == str(root)  # the installation named by STAN_DP_CMDSTAN ...
    assert "CMDSTAN" not in os.environ       # ... for the call only
    assert sorted(p.name for p in Path(LINEAR).resolve().parent.iterdir()) == user_folder
    assert (calls["chains"], calls["iter_sampling"], calls["iter_warmup"]) == (3, 7, 5)
    assert (calls["seed"], calls["adapt_delta"], calls["max_treedepth"]) == (2, 0.9, 8)
    assert calls["metric"] == "dense_e" and idata.attrs["metric"] == "dense_e"
    assert calls["data"]["N"] == 10 and calls["save_warmup"] is True
    # One version format for both backends: MAJOR.MINOR.PATCH.
    assert idata.attrs["backend"] == "cmdstan" and idata.attrs["stan_version"] == "2.36.1"
    assert re.fullmatch(r"\d+\.\d+\.\d+", offline.attrs["stan_version"])
    assert idata.posterior.attrs["backend"] == "cmdstan"


def test_cmdstan_backend_raises_the_documented_errors(monkeypatch, tmp_path):
    import cmdstanpy

    from stan_dp import StanCompileError

    root = _fake_cmdstan(tmp_path / "cmdstan-2.35.0")
    monkeypatch.setenv("STAN_DP_CMDSTAN", str(root))
    cache = tmp_path / "cache"
    # CmdStan 2.35's console output for a data block size mismatch, as cmdstanpy raises it.
    console = RuntimeError(
        "Error during sampling:\nException: mismatch in dimension declared and found in "
        "context; processing stage=data initialization; variable name=y; position=0; "
        "dims declared=(10); dims found=(9) (in 'linear_regression.stan', line 6, column 2 "
        "to column 14)\nCommand and output files: ...")
    monkeypatch.setattr(cmdstanpy, "CmdStanModel", _FakeCmdStan({}, sample_error=console))
    with pytest.raises(ValueError, match=r"^the data do not fit linear_regression.stan: "
                                         r"Exception: mismatch .*variable name=y"):
        reference_fit(LINEAR, linear_data(n=10), backend="cmdstan", cache_dir=cache)
    other = RuntimeError("Error during sampling:\nsomething else\n")
    monkeypatch.setattr(cmdstanpy, "CmdStanModel", _FakeCmdStan({}, sample_error=other))
    with pytest.raises(RuntimeError, match="CmdStan failed on linear_regression.stan"):
        reference_fit(LINEAR, linear_data(n=10), backend="cmdstan", cache_dir=cache)
    failed = ValueError("Failed to compile Stan model")
    monkeypatch.setattr(cmdstanpy, "CmdStanModel", _FakeCmdStan({}, compile_error=failed))
    with pytest.raises(StanCompileError, match="CmdStan could not compile"):
        reference_fit(LINEAR, linear_data(n=10), backend="cmdstan", cache_dir=cache)
    # A syntax error is stanc's StanCompileError before either backend starts (the
    # bundled stanc: the fake installation has none).
    monkeypatch.delenv("STAN_DP_CMDSTAN")
    bad = tmp_path / "bad.stan"
    bad.write_text("parameters { real x } model { }\n")
    for backend in ("cmdstan", "offline"):
        with pytest.raises(StanCompileError, match=r"stanc could not translate bad.stan:\n.*line 1"):
            reference_fit(bad, None, backend=backend, cache_dir=cache)


def test_cmdstan_available_leaves_cmdstanpy_alone(monkeypatch, tmp_path):
    monkeypatch.delenv("CMDSTAN", raising=False)
    monkeypatch.delenv("STAN_DP_CMDSTAN", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert not reference_module.cmdstan_available()
    # Discovery under ~/.cmdstan: cmdstanpy.cmdstan_path() itself writes CMDSTAN.
    _fake_cmdstan(tmp_path / ".cmdstan" / "cmdstan-2.35.0")
    assert reference_module.cmdstan_available()
    assert "CMDSTAN" not in os.environ
    # STAN_DP_CMDSTAN is checked, not installed as cmdstanpy's path.
    other = _fake_cmdstan(tmp_path / "elsewhere" / "cmdstan-2.36.0", "2.36.0")
    monkeypatch.setenv("STAN_DP_CMDSTAN", str(other))
    monkeypatch.setenv("CMDSTAN", "/users/own/choice")
    assert reference_module.cmdstan_available()
    assert reference_module.find_cmdstan() == other.resolve()
    assert os.environ["CMDSTAN"] == "/users/own/choice"
    monkeypatch.setenv("STAN_DP_CMDSTAN", str(tmp_path / "nope"))
    assert not reference_module.cmdstan_available()
    assert reference_module.cmdstan_version_string(other) == "2.36.0"


@pytest.mark.skipif(not reference_module.cmdstan_available(), reason="CmdStan not installed")
def test_cmdstan_backend_agrees_with_the_exact_posterior():
    data = linear_data(n=100, d=2)
    idata = reference_fit(LINEAR, data, chains=2, draws=1000, warmup=500, seed=11,
                          backend="cmdstan")
    assert idata.attrs["backend"] == "cmdstan" and idata.attrs["sampler"] == "nuts"
    assert idata.posterior["beta"].shape == (2, 1000, 2)
    assert {"lp", "acceptance_rate", "step_size", "tree_depth", "n_steps", "diverging",
            "energy"} <= set(idata.sample_stats.data_vars)
    mean, cov = exact_linear_posterior(data)
    beta = idata.posterior["beta"].values.reshape(-1, 2)
    ess = _arviz().ess(idata, var_names=["beta"])["beta"].values
    # Same bound as the offline test (4 Monte Carlo sds from the ESS).
    assert np.all(np.abs(beta.mean(axis=0) - mean[1:]) < 4 * np.sqrt(np.diag(cov)[1:] / ess))


def test_a_reference_whose_chains_disagree_says_so(linear_fit, caplog):
    """No warm-up and a handful of draws from dispersed starts: the chains have not met (R-hat far
    above 1.05), and the fit logs that it is no yardstick; the converged fixture (2 x 1,000 draws
    after 500 of warm-up) passes the same check silently.  Oracle: ArviZ's R-hat of the draws."""
    az = _arviz()
    data, converged = linear_fit
    with caplog.at_level(logging.WARNING, logger="stan_dp.reference"):
        reference_module._warn_convergence(converged)
    assert not [r for r in caplog.records if "did not converge" in r.message]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="stan_dp.reference"):
        short = reference_fit(LINEAR, data, chains=4, draws=8, warmup=0, seed=2, backend="offline")
    rhat = max(float(np.nanmax(az.rhat(short)[name].values)) for name in ("alpha", "beta"))
    assert rhat > 1.05
    (record,) = [r for r in caplog.records if "did not converge" in r.message]
    assert "not a trustworthy yardstick" in record.message


def test_a_reference_that_did_not_converge_names_large_predictors(caplog):
    """The advice names the covariate columns whose size puts Stan's random inits far from the
    data (an entry beyond LARGE_PREDICTOR), and only those: ``X[, 1]`` shifted to around 500 is
    named with its largest entry (oracle: NumPy's max of the column), ``X[, 2]`` (standard normal)
    is not, nor the outcome ``y`` shifted to around 1,000 (read as a variate) nor the scalars.  A
    fit started at 0 (``init_radius=0``) is not told to start there."""
    data = linear_data(n=100, d=2)
    data["X"] = np.array(data["X"]) + np.array([500.0, 0.0])
    data["y"] = np.array(data["y"]) + 1000.0
    named = reference_module.large_predictors(LINEAR, data)
    assert [label for label, _ in named] == ["X[, 1]"]
    assert named[0][1] == pytest.approx(np.max(np.abs(data["X"][:, 0])))
    with caplog.at_level(logging.WARNING, logger="stan_dp.reference"):
        reference_fit(LINEAR, data, chains=4, draws=8, warmup=0, seed=2, backend="offline")
    (record,) = [r for r in caplog.records if "did not converge" in r.message]
    assert "X[, 1] (up to" in record.message and "init_radius=0" in record.message
    assert "X[, 2]" not in record.message and " y " not in record.message
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="stan_dp.reference"):
        reference_fit(LINEAR, data, chains=4, draws=8, warmup=0, seed=2, init_radius=0, backend="offline")
    (record,) = [r for r in caplog.records if "did not converge" in r.message]
    assert "predictors of large size" not in record.message


def test_large_predictors_leave_out_weights_outcomes_and_indices(tmp_path):
    """Read from the program: a likelihood weight (``w[n]`` outside the density call), the outcome
    and a group index are never named, however large; the covariate ``x`` is, with its largest
    entry (oracle: NumPy's max of ``|x|``)."""
    program = tmp_path / "weighted.stan"
    program.write_text("""
data { int<lower=0> N; int<lower=1> G; vector[N] x; vector[N] y; vector[N] w;
       array[N] int<lower=1, upper=G> g; }
parameters { real a; real b; vector[G] u; }
model {
  u ~ normal(0, 1);
  for (n in 1:N) target += w[n] * normal_lpdf(y[n] | a + u[g[n]] + b * x[n], 1);
}
""")
    rng = np.random.default_rng(0)
    x = rng.uniform(-120.0, 80.0, 30)
    data = {"N": 30, "G": 30, "x": x, "y": 1000.0 + x, "w": np.full(30, 50.0), "g": np.arange(1, 31)}
    assert reference_module.large_predictors(program, data) == [("x", float(np.max(np.abs(x))))]

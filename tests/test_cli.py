"""The stan-dp command line: the demo's privacy report and the error paths."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from conftest import bundled, logistic_data
from stan_dp.cli import main


def test_demo_puts_a_private_fit_next_to_its_reference(capsys, tmp_path):
    """The main job: private fit, non-private reference, comparison, privacy report, plot."""
    import arviz as az

    code = main(["demo", "--method", "penalty", "--n", "2000", "--warmup", "50", "--iterations", "100",
                 "--chains", "2", "--reference-draws", "200", "--seed", "3", "--quiet",
                 "--output-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0
    assert "privacy report" in out and "epsilon_spent" in out
    assert "std_mean_error" in out and "MMD" in out
    assert "alpha" in out and "beta[1]" in out
    assert re.search(r"seeded\s+1", out)  # a fixed seed is reported
    assert (tmp_path / "stan_dp_demo.png").read_bytes()[:4] == b"\x89PNG"
    ref = az.from_netcdf(tmp_path / "stan_dp_demo_reference.nc")
    fit = az.from_netcdf(tmp_path / "stan_dp_demo_fit.nc")
    assert ref.posterior.attrs["backend"] in ("offline", "cmdstan")
    assert fit.posterior.attrs["sampler"] == "penalty"
    assert ref.posterior["beta"].shape[2] == fit.posterior["beta"].shape[2] == 3


def test_rows_command(tmp_path, capsys, compiled):
    compiled(bundled("logistic_regression"))
    path = tmp_path / "data.json"
    data = logistic_data(n=20)
    path.write_text(json.dumps({k: np.asarray(v).tolist() for k, v in data.items()}))
    assert main(["rows", str(bundled("logistic_regression")), "--data", str(path)]) == 0
    assert "decomposition check: passed" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["rows", "absent.stan", "--data", "absent.json"], "data file not found"),
    (["demo", "--epsilon", "-1", "--quiet"], "epsilon"),
])
def test_errors_are_one_line_with_exit_code_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("stan-dp: error:") and message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.fixture
def data_file(tmp_path, compiled):
    compiled(bundled("logistic_regression"))
    path = tmp_path / "data.json"
    data = logistic_data(n=150)
    path.write_text(json.dumps({k: np.asarray(v).tolist() for k, v in data.items()}))
    return path


def test_sample_then_compare_round_trip(tmp_path, data_file, capsys):
    """sample writes a netCDF whose posterior and privacy attrs survive; compare reads two."""
    import arviz as az

    fit = tmp_path / "fit.nc"
    args = ["sample", str(bundled("logistic_regression")), "--data", str(data_file),
            "--epsilon", "3", "--delta", "1e-5", "--sampler", "penalty", "--clip", "2",
            "--step-size", "0.1", "--chains", "2", "--iterations", "60", "--seed", "4", "--quiet", "--output", str(fit)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "privacy report" in out and "gaussian-pld-exact" in out
    idata = az.from_netcdf(fit)
    assert idata.posterior["beta"].shape == (2, 60, 3)
    assert idata.posterior.attrs["epsilon"] == 3.0 and idata.posterior.attrs["seeded"] == 1
    other = tmp_path / "other.nc"
    assert main(args[:-1] + [str(other)]) == 0
    capsys.readouterr()
    png = tmp_path / "cmp.png"
    assert main(["compare", str(fit), str(other), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "std_mean_error" in out and "MMD" in out and "epsilon_spent" in out
    assert png.read_bytes()[:4] == b"\x89PNG"
    # the same seed gives the same fit: the two files compare with zero error
    assert "worst |standardised mean error|: 0.000" in out


def test_sample_needs_no_sampler_option(tmp_path, data_file, capsys):
    """The automatic path: model, data and budget only; sampler options are refused there."""
    import arviz as az

    fit = tmp_path / "auto.nc"
    argv = ["sample", str(bundled("logistic_regression")), "--data", str(data_file),
            "--epsilon", "2", "--delta", "1e-5", "--seed", "5", "--quiet"]
    assert main(argv + ["--output", str(fit)]) == 0
    out = capsys.readouterr().out
    assert "privacy report" in out and "release_summary" in out
    idata = az.from_netcdf(fit)
    assert idata.posterior.attrs["sampler"] == "gaussian"
    assert idata.posterior.attrs["epsilon_spent"] <= 2.0
    assert "WARNINGS" in out        # n = 150 at epsilon 2 cannot buy an accurate answer, and says so
    assert main(argv + ["--clip", "2"]) == 2
    assert "--clip do not apply to --sampler auto" in capsys.readouterr().err


@pytest.mark.parametrize("extra, message", [
    (["--batch-size", "10"], "--batch-size does not apply to sampler 'penalty'"),
    (["--chains", "0"], "must be at least 1"),
    (["--sampler", "magic"], "invalid choice"),
    (["--epsilon", "-2"], "epsilon"),
])
def test_sample_errors_are_one_line(extra, message, data_file, capsys):
    argv = ["sample", str(bundled("logistic_regression")), "--data", str(data_file),
            "--epsilon", "1", "--delta", "1e-5", "--sampler", "penalty", "--clip", "2",
            "--step-size", "0.1", "--quiet"]
    try:
        code = main(argv + extra)
    except SystemExit as exc:  # argparse's own errors exit through SystemExit
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_compare_refuses_missing_and_malformed_files(tmp_path, capsys):
    bad = tmp_path / "bad.nc"
    bad.write_text("not netcdf")
    assert main(["compare", str(bad), str(bad)]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert main(["compare", str(tmp_path / "none.nc"), str(bad)]) == 2
    assert "file not found" in capsys.readouterr().err


def test_reference_command_writes_a_fit_that_compare_reads(tmp_path, data_file, capsys):
    import arviz as az

    ref = tmp_path / "ref.nc"
    assert main(["reference", str(bundled("logistic_regression")), "--data", str(data_file),
                 "--chains", "2", "--draws", "150", "--warmup", "150", "--seed", "2",
                 "--output", str(ref)]) == 0
    out = capsys.readouterr().out
    assert "non-private" in out and "beta[1]" in out
    idata = az.from_netcdf(ref)
    assert idata.posterior["beta"].shape == (2, 150, 3)
    assert main(["compare", str(ref), str(ref)]) == 0
    assert "worst |standardised mean error|: 0.000" in capsys.readouterr().out
    from stan_dp.reference import cmdstan_available

    if not cmdstan_available():   # forcing a backend that is not there: one-line error
        assert main(["reference", str(bundled("logistic_regression")), "--data", str(data_file),
                     "--backend", "cmdstan"]) == 2
        err = capsys.readouterr().err
        assert "CmdStan" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("sampler, options", [
    ("subsampled", ["--batch-size", "50", "--clip", "2", "--step-size", "0.05", "--n0", "20",
                    "--iterations", "30"]),
    ("barker", ["--batch-size", "100", "--step-size", "0.05", "--n0", "10", "--epsilon", "50"]),
    ("hmc", ["--iterations", "10", "--warmup", "10", "--n-leapfrog", "2"]),
])
def test_every_sampler_runs_from_the_command_line(sampler, options, tmp_path, data_file, capsys):
    import arviz as az

    fit = tmp_path / "fit.nc"
    argv = ["sample", str(bundled("logistic_regression")), "--data", str(data_file),
            "--sampler", sampler, "--epsilon", "5", "--delta", "1e-5", "--chains", "1",
            "--seed", "1", "--quiet", "--output", str(fit)] + options
    assert main(argv) == 0, capsys.readouterr().err
    idata = az.from_netcdf(fit)
    attrs = idata.posterior.attrs
    assert attrs["epsilon_spent"] <= attrs["epsilon"] * (1 + 1e-9)
    assert idata.posterior["beta"].shape[:2][0] == 1
    assert "privacy report" in capsys.readouterr().out

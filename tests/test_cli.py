"""The stan-dp command line: the demo's privacy report and the error paths."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import bundled, logistic_data
from stan_dp.cli import main


def test_demo_prints_a_private_posterior_and_its_privacy_report(capsys):
    code = main(["demo", "--n", "2000", "--warmup", "50", "--iterations", "100",
                 "--chains", "2", "--seed", "3", "--quiet"])
    out = capsys.readouterr().out
    assert code == 0
    assert "privacy report" in out and "epsilon_spent" in out
    assert "alpha" in out and "beta[0]" in out
    assert "seeded             1" in out  # a fixed seed is reported


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
            "--epsilon", "3", "--delta", "1e-5", "--clip", "2", "--step-size", "0.1",
            "--chains", "2", "--iterations", "60", "--seed", "4", "--quiet", "--output", str(fit)]
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


@pytest.mark.parametrize("extra, message", [
    (["--batch-size", "10"], "--batch-size does not apply to sampler 'penalty'"),
    (["--chains", "0"], "must be at least 1"),
    (["--sampler", "magic"], "invalid choice"),
    (["--epsilon", "-2"], "epsilon"),
])
def test_sample_errors_are_one_line(extra, message, data_file, capsys):
    argv = ["sample", str(bundled("logistic_regression")), "--data", str(data_file),
            "--epsilon", "1", "--delta", "1e-5", "--clip", "2", "--step-size", "0.1", "--quiet"]
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

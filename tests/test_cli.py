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

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


def test_stanc_errors_keep_their_location_and_diagnosis(tmp_path, capsys):
    """A multi-line library error (stanc's) is printed whole, continuation lines indented: cut to
    its first line it said only "stanc could not translate m.stan:"."""
    model = tmp_path / "m.stan"
    model.write_text("data { int N; vector[N] y; }\nparameters { real mu; real<lower=0> sigma }\n"
                     "model { y ~ normal(mu, sigma); }\n")
    data = tmp_path / "d.json"
    data.write_text(json.dumps({"N": 2, "y": [1.0, 2.0]}))
    assert main(["sample", str(model), "--data", str(data), "--epsilon", "1", "--delta", "1e-5",
                 "--quiet"]) == 2
    err = [line for line in capsys.readouterr().err.strip().splitlines()
           if not line.startswith("stan-dp: compiling ")]
    assert err[0].startswith("stan-dp: error: stanc could not translate")
    assert "line 2" in "\n".join(err) and '";" expected' in "\n".join(err)
    assert all(line.startswith("  ") for line in err[1:]) and "Traceback" not in "\n".join(err)


def test_error_text_is_capped_and_in_the_command_lines_words():
    from stan_dp.cli import ERROR_LINES, _error_text

    text = _error_text(ValueError("pass rows= or row_vars=\n" + "\n".join(f"line {i}" for i in range(100))))
    lines = text.splitlines()
    assert lines[0] == "pass --rows or --row-vars"
    assert len(lines) == ERROR_LINES + 1 and lines[-1] == f"  ... ({101 - ERROR_LINES} more lines)"
    assert _error_text(ValueError("")) == "ValueError"


@pytest.mark.parametrize("target, message", [("absent/fit.nc", "output folder not found"),
                                             (".", "is a folder")])
def test_an_output_that_cannot_be_written_is_refused_before_the_data_is_read(
        tmp_path, monkeypatch, capsys, target, message):
    """The fit would spend the budget and then lose its draws; a re-run spends it again."""
    import stan_dp

    def spend(*args, **kwargs):   # noqa: ARG001 - any call means the check came too late
        raise AssertionError("the fit ran before the output was checked")

    monkeypatch.setattr(stan_dp, "sample", spend)
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "d.json"
    data.write_text(json.dumps({"N": 2, "y": [1.0, 2.0]}))
    for command in (["sample", str(bundled("logistic_regression")), "--data", str(data), "--epsilon",
                     "1", "--delta", "1e-5", "--quiet"],
                    ["reference", str(bundled("logistic_regression")), "--data", str(data)]):
        assert main(command + ["--output", target]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err


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
    # --adaptive-clip reaches the adaptation: on/off recorded in attrs, same releases either way
    for choice in ("on", "off"):
        path = tmp_path / f"clip_{choice}.nc"
        assert main(argv + ["--adaptive-clip", choice, "--output", str(path)]) == 0
        attrs = az.from_netcdf(path).posterior.attrs
        assert attrs["adaptive_clip"] == (choice == "on")
        assert attrs["release_summary"] == idata.posterior.attrs["release_summary"]
    # --far-phase off drops the far phase's releases from the plan (and the ledger); on is the
    # default, which plans them at 2,000 rows, epsilon = 2 (not at 150)
    larger = tmp_path / "larger.json"
    larger.write_text(json.dumps({k: np.asarray(v).tolist() for k, v in logistic_data(n=2000).items()}))
    argv = ["sample", str(bundled("logistic_regression")), "--data", str(larger),
            "--epsilon", "2", "--delta", "1e-5", "--seed", "5", "--quiet"]
    summaries = {}
    for choice in ("on", "off", None):
        path = tmp_path / f"far_{choice}.nc"
        extra = [] if choice is None else ["--far-phase", choice]
        assert main(argv + extra + ["--output", str(path)]) == 0
        summaries[choice] = az.from_netcdf(path).posterior.attrs["release_summary"]
        assert az.from_netcdf(path).posterior.attrs["epsilon_spent"] <= 2.0
    assert "far vote" in summaries[None] and summaries["on"] == summaries[None]
    assert "far vote" not in summaries["off"] and "gradient sum" in summaries["off"]
    capsys.readouterr()


def test_sample_prints_each_warning_once(tmp_path, data_file, capsys):
    """The WARNINGS block holds the fit's warnings; Python's stderr display of the same text is held
    back, and anything the attrs do not record still reaches the user."""
    import warnings

    import arviz as az

    from stan_dp import UtilityWarning
    from stan_dp.cli import _warnings_shown_once

    fit = tmp_path / "auto.nc"
    argv = ["sample", str(bundled("logistic_regression")), "--data", str(data_file),
            "--epsilon", "2", "--delta", "1e-5", "--seed", "5", "--quiet", "--output", str(fit)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(argv) == 0
    out = capsys.readouterr().out
    recorded = [m for m in az.from_netcdf(fit).posterior.attrs["warnings"].split("\n") if m]
    assert recorded   # n = 150 at epsilon 2 warns
    for message in recorded:
        assert out.count(message) == 1
    assert not [w for w in caught if issubclass(w.category, UtilityWarning)]
    assert not az.from_netcdf(fit).posterior.attrs["mixed"]   # the search did not settle, so:
    assert "hdi" not in out and "the sd column is the draws' spread, not a posterior sd" in out

    class Fit:   # a fit whose attrs record one message
        class posterior:
            attrs = {"warnings": "recorded"}

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with _warnings_shown_once() as shown:
            warnings.warn("recorded", UtilityWarning)
            warnings.warn("not recorded", UtilityWarning)
            warnings.warn("another kind", RuntimeWarning)
            shown.append(Fit)
    assert sorted(str(w.message) for w in caught) == ["another kind", "not recorded"]
    # a fit that fails made no record: what it raised before the failure is shown
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError):
            with _warnings_shown_once():
                warnings.warn("before the failure", UtilityWarning)
                raise RuntimeError("the fit failed")
    assert [str(w.message) for w in caught] == ["before the failure"]


@pytest.mark.parametrize("extra, message", [
    (["--batch-size", "10"], "--batch-size does not apply to sampler 'penalty'"),
    (["--chains", "0"], "must be at least 1"),
    (["--sampler", "magic"], "invalid choice"),
    (["--epsilon", "-2"], "epsilon"),
    (["--adaptive-clip", "on"], "--adaptive-clip applies to the private adaptation"),
    (["--far-phase", "off"], "--far-phase applies to the private adaptation"),
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
                 "--init-radius", "0", "--metric", "dense_e", "--output", str(ref)]) == 0
    out = capsys.readouterr().out
    assert "non-private" in out and "beta[1]" in out
    idata = az.from_netcdf(ref)
    assert idata.posterior["beta"].shape == (2, 150, 3)
    assert idata.posterior.attrs["init_radius"] == 0.0
    assert idata.posterior.attrs["metric"] == "dense_e"
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


# ------------------------------------------------ issue 15, items 6 and 7 --

def _write_json(path, data) -> str:
    path.write_text(json.dumps({k: np.asarray(v).tolist() for k, v in data.items()}))
    return str(path)


def test_errors_speak_the_command_line(tmp_path, capsys, compiled):
    """Library messages name Python keywords (rows=, row_vars=); the CLI names its flags."""
    from conftest import stan_test_model

    from stan_dp.cli import cli_words

    assert cli_words("name it with rows=...") == "name it with --rows ..."
    assert cli_words("check rows=/row_vars= (x); pass init=, public_n=") == \
        "check --rows/--row-vars (x); pass --init, --public-n"
    assert cli_words("int<lower=0> N; a == b; RowModel(..., public_data={") == \
        "int<lower=0> N; a == b; the Python API's RowModel(..., public_data={"
    data = _write_json(tmp_path / "data.json", logistic_data(n=20))
    assert main(["rows", str(bundled("logistic_regression")), "--data", data, "--rows", "M"]) == 2
    err = capsys.readouterr().err
    assert "name it with --rows ..." in err and "rows=" not in err
    compiled(stan_test_model("rows_interact"))
    interact = _write_json(tmp_path / "interact.json", {"N": 5, "y": np.arange(5.0)})
    assert main(["rows", str(stan_test_model("rows_interact")), "--data", interact]) == 2
    err = capsys.readouterr().err
    assert "does not decompose" in err and "check --rows/--row-vars" in err
    assert "rows=" not in err and len(err.strip().splitlines()) == 1


def test_transformed_data_refusal_on_the_command_line(tmp_path, capsys):
    from conftest import stan_test_model

    rng = np.random.default_rng(0)
    x = np.column_stack([np.ones(30), rng.normal(size=(30, 2))])
    data = _write_json(tmp_path / "brms.json", {"N": 30, "Y": rng.normal(size=30), "K": 3,
                                                "X": x, "Kc": 2, "prior_only": 0})
    assert main(["rows", str(stan_test_model("brms_gaussian")), "--data", data]) == 2
    # One error line (a first compile on a cold cache adds a progress line before it).
    err = "\n".join(line for line in capsys.readouterr().err.strip().splitlines()
                    if not line.startswith("stan-dp: compiling "))
    assert len(err.splitlines()) == 1 and "means_X (from X)" in err
    assert "the Python API's RowModel(..., public_data=" in err and "center = FALSE" in err


def test_rows_and_sample_take_row_vars(tmp_path, data_file, capsys):
    model = str(bundled("logistic_regression"))
    assert main(["rows", model, "--data", str(data_file), "--row-vars", "X"]) == 2
    err = capsys.readouterr().err  # y is then shared, and vector[N] fails with N = 0
    assert "cannot be built with zero rows" in err and "variable name=y" in err
    assert "(check --row-vars)" in err and "declare it int<lower=0>" not in err
    assert main(["rows", model, "--data", str(data_file), "--row-vars", "X", "y"]) == 0
    assert "sliced per row: X, y" in capsys.readouterr().out
    argv = ["sample", model, "--data", str(data_file), "--epsilon", "1", "--delta", "1e-5",
            "--quiet", "--seed", "1", "--row-vars", "X", "nope"]
    assert main(argv) == 2
    assert "row variables not in the data: nope" in capsys.readouterr().err


@pytest.mark.filterwarnings("ignore::stan_dp.honesty.UtilityWarning")  # short runs
def test_sample_init_zeros_and_file_reach_the_sampler(tmp_path, data_file, capsys):
    """--init zeros and an init file give the draws of the Python call with that init."""
    import arviz as az

    from stan_dp import RowModel
    from stan_dp.samplers.penalty import penalty

    model_file = bundled("logistic_regression")
    opts = ["--epsilon", "3", "--delta", "1e-5", "--sampler", "penalty", "--clip", "2",
            "--step-size", "0.05", "--chains", "1", "--warmup", "0", "--iterations", "20",
            "--seed", "9", "--quiet"]
    init_file = tmp_path / "init.json"
    init_file.write_text(json.dumps({"alpha": 0.0, "beta": [0.0, 0.0, 0.0]}))
    draws = {}
    for init in ("zeros", str(init_file)):
        out = tmp_path / f"fit{len(draws)}.nc"
        argv = ["sample", str(model_file), "--data", str(data_file), *opts, "--init", init,
                "--output", str(out)]
        assert main(argv) == 0
        draws[init] = az.from_netcdf(out).posterior["beta"].values
    capsys.readouterr()
    model = RowModel(model_file, str(data_file))
    direct = penalty(model, epsilon=3, delta=1e-5, clip=2, step_size=0.05, chains=1, warmup=0,
                     iterations=20, seed=9, init=np.zeros(model.dim), progress=False)
    np.testing.assert_array_equal(draws["zeros"], direct.posterior["beta"].values)
    np.testing.assert_array_equal(draws[str(init_file)], direct.posterior["beta"].values)
    other = penalty(model, epsilon=3, delta=1e-5, clip=2, step_size=0.05, chains=1, warmup=0,
                    iterations=20, seed=9, progress=False)   # random init: differs
    assert not np.array_equal(other.posterior["beta"].values, draws["zeros"])
    for bad, message in (("absent.json", "--init: not 'zeros' and no such file"),
                         (str(init_file.with_name("bad.json")), "not valid JSON")):
        init_file.with_name("bad.json").write_text("{")
        assert main(["sample", str(model_file), "--data", str(data_file), *opts,
                     "--init", bad]) == 2
        assert message in capsys.readouterr().err


def test_compile_progress_is_shown(tmp_path, monkeypatch, capsys):
    """A first compile says so on stderr (toolchain INFO log shown by the CLI)."""
    from pathlib import Path

    from stan_dp import toolchain

    def fake_run(cmd, what, cwd=None):  # no C++ compile: just the output file
        out = cmd[cmd.index("-o") + 1]
        Path(out).write_bytes(b"")

    monkeypatch.setattr(toolchain, "_run", fake_run)
    monkeypatch.setenv("STAN_DP_CACHE", str(tmp_path / "cache"))
    data = _write_json(tmp_path / "data.json", logistic_data(n=5))
    code = main(["rows", str(bundled("logistic_regression")), "--data", data])
    err = capsys.readouterr().err
    assert code in (1, 2)  # the empty "library" does not load
    assert "stan-dp: compiling logistic_regression.stan \u2014 first time, about 30 s" in err
    import logging

    assert not any(type(h).__name__ == "_CliLogHandler"
                   for h in logging.getLogger("stan_dp").handlers)  # main restores the logger


@pytest.mark.filterwarnings("ignore::stan_dp.honesty.UtilityWarning")  # short runs
def test_demo_creates_its_output_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = ["demo", "--method", "penalty", "--n", "500", "--warmup", "10", "--iterations", "20",
            "--chains", "1", "--reference-draws", "50", "--seed", "1", "--quiet"]
    assert main(argv) == 0
    assert "stan_dp_demo" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stan_dp_demo"]  # nothing loose
    assert {p.name for p in (tmp_path / "stan_dp_demo").iterdir()} == {
        "stan_dp_demo_fit.nc", "stan_dp_demo_reference.nc", "stan_dp_demo.png"}
    assert main(argv + ["--output-dir", str(tmp_path / "no" / "such")]) == 2
    assert "output folder's parent not found" in capsys.readouterr().err
    assert not (tmp_path / "no").exists()


def test_reference_command_prints_stan_names(data_file, capsys):
    """The reference table labels components as Stan and compare do (beta[1]..beta[3])."""
    assert main(["reference", str(bundled("logistic_regression")), "--data", str(data_file),
                 "--chains", "1", "--draws", "50", "--warmup", "50", "--seed", "2"]) == 0
    out = capsys.readouterr().out
    assert "beta[1]" in out and "beta[3]" in out and "beta[0]" not in out


def test_sample_prints_stan_names(tmp_path, data_file, capsys):
    """The printed summary uses Stan's 1-based names, as compare and Stan do."""
    argv = ["sample", str(bundled("logistic_regression")), "--data", str(data_file),
            "--epsilon", "2", "--delta", "1e-5", "--seed", "5", "--quiet"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "beta[1]" in out and "beta[3]" in out and "beta[0]" not in out


def test_a_weak_delta_is_a_privacy_warning_on_the_command_line(data_file, capsys):
    """150 rows: delta = 0.01 is beyond 1/n; the CLI says so in its own words, not as a Python
    warning with a line of stan_dp's source under it."""
    assert main(["sample", str(bundled("logistic_regression")), "--data", str(data_file),
                 "--epsilon", "2", "--delta", "0.01", "--seed", "1", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "stan-dp: privacy warning: delta = 0.01 is at least 1/n" in err
    assert "PrivacyWarning" not in err and "cli.py" not in err


def test_the_summary_keeps_small_coefficients_and_names_what_the_output_leaves_out(capsys):
    """A coefficient on income in dollars (about 4e-4) printed as 0.000 under ArviZ's rounding;
    the note says which of the program's blocks are not in the output."""
    from stan_dp.cli import _print_fit
    from stan_dp.output import build_inference_data

    rng = np.random.default_rng(0)
    draws = {"alpha": 21.0 + rng.normal(size=(2, 200)), "beta": 3.8e-4 + 1e-5 * rng.normal(size=(2, 200))}
    fit = build_inference_data(draws, {}, warmup=0, attrs={
        "sampler": "gaussian", "mixed": True, "warnings": "",
        "not_in_output": "generated quantities: y_rep (not in the output: ...)"})
    _print_fit(fit)
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("beta"))
    assert float(row.split()[1]) == pytest.approx(3.8e-4, rel=0.01)
    assert "note: generated quantities: y_rep" in out


def test_a_quoted_keyword_value_becomes_the_flags_argument():
    """It printed "--relation'add_remove'"."""
    from stan_dp.cli import cli_words

    assert (cli_words("under relation='add_remove' pass public_n= or use relation=\"replace_one\"")
            == "under --relation add_remove pass --public-n or use --relation replace_one")
    assert cli_words("pass init=... or check rows=/row_vars=") == "pass --init ... or check --rows/--row-vars"

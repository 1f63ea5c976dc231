"""Compilation cache, cache keys and toolchain discovery."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import bundled
from stan_dp import ToolchainError, compile_model
from stan_dp.toolchain import cache_key, cmdstan_toolchain, find_toolchain


def test_cache_hit_runs_neither_stanc_nor_the_compiler(compiled, monkeypatch):
    import subprocess

    import stan_dp.toolchain as toolchain

    lib = compiled(bundled("logistic_regression"))  # compiled (or cached) once
    real_run = subprocess.run

    def guarded(cmd, *args, **kwargs):
        text = " ".join(map(str, cmd))
        if "stanc" in text or "-shared" in text or "c++-header" in text:
            raise AssertionError(f"a cache hit must not build anything: {text}")
        return real_run(cmd, *args, **kwargs)

    monkeypatch.setattr(toolchain.subprocess, "run", guarded)
    assert compile_model(bundled("logistic_regression")) == lib and lib.exists()
    # (benchmarked, not asserted: a hit takes ~3 ms, hashing the source and includes)


def test_cache_key_tracks_source_includes_and_arguments(tmp_path):
    inc = tmp_path / "prior.stanfunctions"
    inc.write_text("real my_prior(real x) { return normal_lpdf(x | 0, 1); }\n")
    model = tmp_path / "m.stan"
    model.write_text(
        "functions {\n#include prior.stanfunctions\n}\n"
        "data { int<lower=0> N; vector[N] y; }\nparameters { real mu; }\n"
        "model { target += my_prior(mu); y ~ normal(mu, 1); }\n"
    )
    base = cache_key(model)
    assert cache_key(model) == base  # deterministic
    assert cache_key(model, stanc_args=["--O1"]) != base
    inc.write_text("real my_prior(real x) { return normal_lpdf(x | 0, 2); }\n")
    assert cache_key(model) != base  # an included file changed
    changed = cache_key(model)
    model.write_text(model.read_text() + "// comment\n")
    assert cache_key(model) != changed  # the source changed


def test_default_toolchain_is_the_httpstan_wheel(monkeypatch):
    monkeypatch.delenv("STAN_DP_CMDSTAN", raising=False)
    tc = find_toolchain()
    assert tc.kind == "httpstan"
    assert tc.stanc.exists() and (tc.tbb_lib_dir / "libtbb.so.2").exists()
    assert tc.version.startswith("httpstan-4.13")


def test_cmdstan_by_environment_variable_is_validated(monkeypatch, tmp_path):
    monkeypatch.setenv("STAN_DP_CMDSTAN", str(tmp_path))
    with pytest.raises(ToolchainError, match="bin/stanc"):
        find_toolchain()


def _fake_cmdstan(root: Path) -> Path:
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "stanc").write_text("")
    (root / "src").mkdir()
    (root / "stan" / "src").mkdir(parents=True)
    lib = root / "stan" / "lib" / "stan_math" / "lib"
    for sub in ("eigen_3.4.0", "boost_1.84.0", "sundials_6.1.1/include", "tbb_2020.3/include", "tbb"):
        (lib / sub).mkdir(parents=True)
    (root / "makefile").write_text("CMDSTAN_VERSION := 2.36.0\n")
    return root


def test_cmdstan_layout_is_discovered(tmp_path):
    tc = cmdstan_toolchain(_fake_cmdstan(tmp_path / "cmdstan"))
    assert tc.kind == "cmdstan"
    assert tc.version.startswith("cmdstan-2.36.0")
    names = [p.name for p in tc.include_dirs]
    assert {"src", "stan_math", "eigen_3.4.0", "boost_1.84.0"} <= set(names)
    assert tc.tbb_lib_dir.name == "tbb"


def test_real_cmdstan_compiles_when_installed(tmp_path):
    import os

    root = os.environ.get("STAN_DP_CMDSTAN") or os.environ.get("CMDSTAN")
    if not root or not Path(root, "bin", "stanc").exists():
        pytest.skip("no CmdStan installation (set STAN_DP_CMDSTAN to test it)")
    lib = compile_model(bundled("logistic_regression"), cmdstan=root, cache_dir=tmp_path)
    assert lib.exists()


def test_cache_key_tracks_the_tbb_library_directory(tmp_path):
    # The library is linked with -Wl,-rpath,<tbb_lib_dir>: that absolute path is
    # baked into it, so two toolchains differing only there must not share it.
    import dataclasses

    model = tmp_path / "m.stan"
    model.write_text("parameters { real mu; }\nmodel { mu ~ normal(0, 1); }\n")
    tc = find_toolchain()
    other = dataclasses.replace(tc, tbb_lib_dir=tmp_path / "elsewhere" / "lib")
    assert cache_key(model, toolchain=tc, cxx="c++") == cache_key(model, toolchain=tc, cxx="c++")
    assert cache_key(model, toolchain=other, cxx="c++") != cache_key(model, toolchain=tc, cxx="c++")

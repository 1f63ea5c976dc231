"""A normal (non-editable) install ships everything the package needs (issue 14, item 7).

Static checks of the setuptools configuration in ``pyproject.toml``: every
folder of modules under ``stan_dp/`` is a package that the configured
discovery finds, and every other file there (the bundled Stan models, the
native C++ sources) is declared package data.  An editable install finds
everything through the checkout and would hide either mistake; ``.ci/run``
also builds the wheel, installs it outside the checkout and runs it.
"""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

import pytest

import stan_dp
from stan_dp.bundled import BUNDLED_DIR, bundled_model, bundled_model_names

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "stan_dp"


def setuptools_config() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["tool"]["setuptools"]


def configured_packages() -> set[str]:
    """The packages setuptools will put into a wheel, found as setuptools finds them."""
    from setuptools import find_namespace_packages, find_packages

    config = setuptools_config()
    if isinstance(config.get("packages"), list):  # a hand list: exactly these
        return set(config["packages"])
    find = config["packages"]["find"]
    finder = find_namespace_packages if find.get("namespaces", True) else find_packages
    found: set[str] = set()
    for where in find.get("where", ["."]):
        found |= set(finder(where=str(ROOT / where), include=find.get("include", ("*",)),
                            exclude=find.get("exclude", ())))
    return found


def source_dirs() -> list[Path]:
    """Every folder under stan_dp/ that holds Python modules (with or without __init__.py)."""
    return sorted(
        d for d in [PACKAGE, *PACKAGE.rglob("*")]
        if d.is_dir() and "__pycache__" not in d.parts and any(d.glob("*.py"))
    )


def dotted(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).parts)


def test_every_folder_of_modules_is_a_configured_package():
    packages = configured_packages()
    dirs = source_dirs()
    # The check is not vacuous: the subpackages the issue named are there.
    names = {dotted(d) for d in dirs}
    assert {"stan_dp", "stan_dp.accounting", "stan_dp.samplers", "stan_dp.native",
            "stan_dp.augmentation"} <= names
    with_init = {dotted(d) for d in dirs if (d / "__init__.py").exists()}
    assert with_init <= packages, f"not packaged: {sorted(with_init - packages)}"
    missing = names - packages
    assert not missing, f"folders of modules that a wheel would leave out: {sorted(missing)}"
    # Nothing outside stan_dp (tests, examples, benchmarks) goes into the wheel.
    assert all(p == "stan_dp" or p.startswith("stan_dp.") for p in packages), packages


def test_every_data_file_of_the_package_is_declared_package_data():
    packages = configured_packages()
    package_data: dict[str, list[str]] = setuptools_config().get("package-data", {})
    data_files = sorted(
        f for f in PACKAGE.rglob("*")
        if f.is_file() and "__pycache__" not in f.parts and f.suffix not in (".py", ".pyc")
    )
    # The bundled models and the native sources, at least, are package data.
    suffixes = {f.suffix for f in data_files}
    assert {".stan", ".cpp", ".hpp"} <= suffixes, suffixes
    assert len(list((PACKAGE / "stan_models").glob("*.stan"))) >= 5
    undeclared = []
    for f in data_files:
        # The nearest enclosing package owns the file; patterns are relative to it.
        owner = f.parent
        while dotted(owner) not in packages:
            owner = owner.parent
        rel = f.relative_to(owner).as_posix()
        patterns = package_data.get(dotted(owner), []) + package_data.get("*", [])
        if not any(fnmatch.fnmatchcase(rel, pat) for pat in patterns):
            undeclared.append(f.relative_to(ROOT).as_posix())
    assert not undeclared, f"files a wheel would leave out: {undeclared}"


def test_the_native_sources_the_toolchain_compiles_are_inside_the_package():
    from stan_dp import toolchain

    for source in (toolchain.BRIDGE_SOURCE, toolchain.PCH_SOURCE, toolchain.SERVICES_SOURCE):
        assert source.is_file()
        assert source.resolve().is_relative_to(PACKAGE.resolve())


def test_bundled_model_finds_every_model_inside_the_package():
    names = bundled_model_names()
    assert "logistic_regression" in names and "banana" in names
    for name in names:
        path = bundled_model(name)
        assert path.is_absolute() and path.is_file() and path.suffix == ".stan"
        assert path.resolve().is_relative_to(PACKAGE.resolve())  # not through the checkout
        assert bundled_model(f"{name}.stan") == path
    assert stan_dp.bundled_model is bundled_model
    assert "bundled_model" in stan_dp.__all__
    assert BUNDLED_DIR == PACKAGE.resolve() / "stan_models"


def test_bundled_model_rejects_unknown_names_listing_the_available_ones():
    with pytest.raises(ValueError, match="no bundled model named 'no_such_model'") as info:
        bundled_model("no_such_model")
    for name in bundled_model_names():
        assert name in str(info.value)
    for bad in ("", "../README", "stan_models/banana", "logistic_regression.json"):
        with pytest.raises(ValueError):
            bundled_model(bad)
    with pytest.raises(TypeError):
        bundled_model(None)  # type: ignore[arg-type]


def test_the_checkout_keeps_its_top_level_stan_models_path():
    """README, examples, tests and docs use ./stan_models: a link to the packaged folder."""
    link = ROOT / "stan_models"
    assert link.is_symlink()
    assert link.resolve() == (PACKAGE / "stan_models").resolve()
    assert (link / "logistic_regression.stan").read_text() == bundled_model("logistic_regression").read_text()


def test_the_console_script_points_at_an_importable_function():
    import importlib

    with open(ROOT / "pyproject.toml", "rb") as f:
        scripts = tomllib.load(f)["project"]["scripts"]
    module, func = scripts["stan-dp"].split(":")
    assert callable(getattr(importlib.import_module(module), func))

"""The import arrows run one way: lower layers never import upward.

The toolchain, the model classes, the reference fit, the native wrappers and
the data-augmentation records are below the samplers and the package root.
They used to import small things upward (``from stan_dp import __version__``,
``stan_dp.inference._Progress``, ``stan_dp.model._as_library``), which made
the import graph circular and the package root's import order fragile.  These
tests read the source with :mod:`ast` (so imports inside functions count
too) and fail on any such arrow.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "stan_dp"

LOWER_LAYERS = sorted(
    [PACKAGE / name for name in ("toolchain.py", "reference.py", "model.py", "version.py",
                                 "progress.py", "data.py", "params.py", "output.py",
                                 "diagnostics.py")]
    + list((PACKAGE / "augmentation").glob("*.py"))
    + list((PACKAGE / "native").glob("*.py"))
    + [PACKAGE / "samplers" / "augmentation.py"]
)
"""Modules that must import neither the package root nor :mod:`stan_dp.inference`."""


def _imports(path: Path) -> list[tuple[int, str, str | None]]:
    """Every import of a file as ``(line, module, imported name or None)``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative import: resolve against the file's package
                parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
                base = parts[: len(parts) - node.level]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.extend((node.lineno, module, alias.name) for alias in node.names)
    return found


def _is_submodule(name: str) -> bool:
    return importlib.util.find_spec(f"stan_dp.{name}") is not None


def _upward(path: Path) -> list[str]:
    bad = []
    for line, module, name in _imports(path):
        where = f"{path.relative_to(PACKAGE.parent)}:{line}"
        if module == "stan_dp.inference" or module.startswith("stan_dp.inference."):
            bad.append(f"{where} imports stan_dp.inference")
        elif module == "stan_dp" and name is None:
            bad.append(f"{where} imports the package root (import stan_dp)")
        elif module == "stan_dp" and not _is_submodule(name):
            bad.append(f"{where} imports {name!r} from the package root")
        elif module == "stan_dp" and name == "inference":
            bad.append(f"{where} imports stan_dp.inference")
    return bad


@pytest.mark.parametrize("path", LOWER_LAYERS, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_lower_layers_do_not_import_upward(path):
    assert path.exists()
    assert _upward(path) == []


ADAPTATION = sorted((PACKAGE / "adaptation").glob("*.py"))
"""Modules that must not import :mod:`stan_dp.samplers`: samplers use adaptation, not the reverse
(as BlackJAX keeps ``adaptation/`` apart from its kernels)."""


def _samplers_imported(path: Path) -> list[str]:
    bad = []
    for line, module, name in _imports(path):
        if (module == "stan_dp.samplers" or module.startswith("stan_dp.samplers.")
                or (module == "stan_dp" and name == "samplers")):
            bad.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports stan_dp.samplers")
    return bad


@pytest.mark.parametrize("path", ADAPTATION, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_adaptation_does_not_import_samplers(path):
    assert _samplers_imported(path) == []


def test_the_adaptation_rule_sees_sampler_imports(tmp_path):
    """Each form is flagged, relative imports included; other ``stan_dp`` modules are not."""
    lines = _flagged_lines(tmp_path, _samplers_imported, "adaptation/bad.py", (
        "from stan_dp.samplers.hmc import HMCState\n"
        "import stan_dp.samplers\n"
        "def f():\n"
        "    from stan_dp import samplers\n"
        "    from ..samplers import penalty\n"
        "from stan_dp.aggregates import queries\n"   # allowed
        "from .releases import Ledger\n"             # allowed
    ))
    assert lines == ["1", "2", "4", "5"]


def _flagged_lines(tmp_path, check, relative: str, source: str) -> list[str]:
    """Line numbers ``check`` flags in ``source``, written to ``relative`` in a scratch ``stan_dp``
    package (with :data:`PACKAGE` pointed there while it runs)."""
    global PACKAGE
    package = tmp_path / "stan_dp"
    path = package / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    saved, PACKAGE = PACKAGE, package
    try:
        found = check(path)
    finally:
        PACKAGE = saved
    return [f.split(":")[1].split()[0] for f in found]


def test_the_checker_sees_the_arrows_it_forbids(tmp_path):
    """The check is not vacuous: it flags each form, at module level and inside functions."""
    lines = _flagged_lines(tmp_path, _upward, "bad.py", (
        "from stan_dp import __version__\n"
        "import stan_dp\n"
        "def f():\n"
        "    from stan_dp.inference import _Progress\n"
        "    from stan_dp import inference\n"
        "from stan_dp import toolchain\n"       # a submodule: allowed
        "from stan_dp.version import __version__\n"  # allowed
    ))
    assert lines == ["1", "2", "4", "5"]


def test_old_names_still_work():
    """The moved helpers keep their former private names as aliases."""
    import stan_dp
    from stan_dp import inference, model, progress, toolchain, version

    assert stan_dp.__version__ == version.__version__
    assert inference._Progress is progress.Progress
    assert model._as_library is toolchain.as_library
    bar = progress.Progress(3, False, "x")
    bar.update()
    bar.close()
    bar.close()


RELEASE_FREE = [PACKAGE / "adaptation" / f"{name}.py"
                for name in ("plan", "curvature", "pooling", "result", "groups")]
"""Parts of the mode search that make no release: the plan is fixed from public facts before a row
is read, a round's frame algebra, the pooling and a hierarchical group's directions and frame are
post-processing of the program and of released values, and the result only holds them.  Every release is made in ``newton.py``, ``initial_frame.py``, ``far.py`` or
``quantile.py``, through the mechanisms of ``releases.py``."""

RELEASE_MAKERS = {"noisy_counts", "clipped_vector_sum", "clipped_matrix_sum", "private_quantiles",
                  "gaussian_release", "far_phase"}
RELEASE_MODULES = ("stan_dp.mechanisms", "stan_dp.secure_noise", "stan_dp.aggregates")


def _releases_imported(path: Path) -> list[str]:
    bad = []
    for line, module, name in _imports(path):
        if name in RELEASE_MAKERS or module.startswith(RELEASE_MODULES):
            bad.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {name or module}")
    return bad


@pytest.mark.parametrize("path", RELEASE_FREE, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_search_plan_and_post_processing_make_no_release(path):
    assert path.exists()
    assert _releases_imported(path) == []


def test_the_release_rule_sees_release_imports(tmp_path):
    """Each release-making import is flagged (module level or in a function); the ledger type is not."""
    lines = _flagged_lines(tmp_path, _releases_imported, "adaptation/bad.py", (
        "from stan_dp.adaptation.releases import noisy_counts\n"
        "from .quantile import private_quantiles\n"
        "def f():\n"
        "    from stan_dp.mechanisms import gaussian_release\n"
        "    import stan_dp.aggregates\n"
        "from stan_dp.adaptation.releases import Ledger\n"   # allowed: the type only
    ))
    assert lines == ["1", "2", "4", "5"]

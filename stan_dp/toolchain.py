"""Locate the Stan toolchain, compile Stan programs, and cache the libraries.

The default toolchain is the ``httpstan`` wheel, which ships ``stanc``, the
Stan and Stan Math headers (with Eigen, Boost, SUNDIALS, rapidjson and TBB)
and ``libtbb``.  A user's own CmdStan installation can be used instead, by
argument (``cmdstan=``) or with the ``STAN_DP_CMDSTAN`` environment variable.

A compiled model is one shared library holding the stanc-generated C++ and
the project's bridge (``stan_dp/native/bridge.cpp``): the BridgeStan C ABI
plus the per-row extension.  The ``"reference"`` variant of a model (built
only when a non-private reference fit asks for it) adds Stan's NUTS service
(``stan_dp/native/services.cpp``, compiled once per toolchain into an object
file) and is cached under its own key.  Libraries are cached under a key
that hashes the Stan source, the files it ``#include``\\s, the toolchain
version, the bridge source and the compiler flags.  The Stan headers are
precompiled once per toolchain and flag set (GCC precompiled header), which
takes a cold model compile from ~45 s to ~15-25 s on two cores.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import hashlib
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator, Sequence

from stan_dp.version import __version__

logger = logging.getLogger(__name__)

NATIVE_DIR = Path(__file__).resolve().parent / "native"
BRIDGE_SOURCE = NATIVE_DIR / "bridge.cpp"
PCH_SOURCE = NATIVE_DIR / "stan_dp_pch.hpp"
SERVICES_SOURCE = NATIVE_DIR / "services.cpp"

#: Library variants: the default (bridge) and "reference" (bridge + Stan's NUTS service).
VARIANTS: tuple[str, ...] = ("default", "reference")

#: Compiler flags shared by the precompiled header and every model.
BASE_FLAGS: tuple[str, ...] = (
    "-std=c++17",
    "-O3",
    "-fPIC",
    "-DSTAN_THREADS",
    "-D_REENTRANT",
    "-DBOOST_DISABLE_ASSERTS",
    "-DEIGEN_NO_DEBUG",
    "-DTBB_INTERFACE_NEW",
    "-Wno-deprecated-declarations",
    "-Wno-ignored-attributes",
    "-Wno-int-in-bool-context",
)


NEWER_TYPES = {
    "sum_to_zero_vector": ("2.36", "declare vector[J - 1] a_raw and put vector[J] a = "
                                   "append_row(a_raw, -sum(a_raw)) in transformed parameters"),
    "sum_to_zero_matrix": ("2.37", "declare a matrix one row and one column smaller and complete it "
                                   "with the negated sums in transformed parameters"),
    "row_stochastic_matrix": ("2.36", "declare an array of simplexes, one per row"),
    "column_stochastic_matrix": ("2.36", "declare an array of simplexes, one per column"),
}
"""Parameter types newer than the bundled stanc (2.35): the Stan version that brought each and
the rewrite that works before it."""


def newer_types_hint(program: str, toolchain: str) -> str:
    """A line to add to stanc's parse error where the program declares a type newer than the
    bundled toolchain's stanc (:data:`NEWER_TYPES`; stanc 2.35 reports only a syntax error
    there), or ``""``.  Reads the program text only."""
    if not toolchain.startswith("httpstan"):
        return ""
    found = [t for t in NEWER_TYPES if re.search(rf"\b{t}\b", program)]
    if not found:
        return ""
    parts = [f"{t} came with Stan {NEWER_TYPES[t][0]} (before it, {NEWER_TYPES[t][1]})" for t in found]
    return ("\nThe bundled toolchain's stanc is 2.35 (" + toolchain + "): " + "; ".join(parts)
            + "; or pass cmdstan= (or set STAN_DP_CMDSTAN to) a newer CmdStan.")


class StanCompileError(RuntimeError):
    """The Stan program could not be translated or compiled.

    The message holds the compiler's own report (for stanc: the file, line
    and column of the error).
    """


class ToolchainError(RuntimeError):
    """No usable Stan toolchain (stanc, headers, TBB) was found."""


@dataclasses.dataclass(frozen=True)
class Toolchain:
    """Where ``stanc``, the headers and TBB live.

    Attributes
    ----------
    kind : str
        ``"httpstan"`` or ``"cmdstan"``.
    stanc : Path
        The stanc3 executable.
    include_dirs : tuple of Path
        Directories for ``-I`` (Stan, Stan Math, Eigen, Boost, SUNDIALS, TBB).
    tbb_lib_dir : Path
        Directory holding ``libtbb.so``.
    version : str
        A string identifying the toolchain release (part of the cache key).
    """

    kind: str
    stanc: Path
    include_dirs: tuple[Path, ...]
    tbb_lib_dir: Path
    version: str


def _httpstan_toolchain() -> Toolchain:
    try:
        import httpstan  # noqa: F401  (only to find the package directory)
    except ImportError as exc:  # pragma: no cover - a dependency
        raise ToolchainError(
            "the httpstan package (which ships stanc and the Stan headers) is not "
            "installed; install stan_dp with pip, or point STAN_DP_CMDSTAN at a "
            "CmdStan installation"
        ) from exc
    root = Path(httpstan.__file__).resolve().parent
    stanc = root / "stanc"
    include = root / "include"
    lib = root / "lib"
    for path in (stanc, include / "stan" / "model" / "model_header.hpp", lib):
        if not path.exists():
            raise ToolchainError(f"the httpstan wheel at {root} lacks {path.name}")
    from importlib.metadata import version

    return Toolchain(
        kind="httpstan",
        stanc=stanc,
        include_dirs=(include,),
        tbb_lib_dir=lib,
        version=f"httpstan-{version('httpstan')}",
    )


def _first(paths: Iterator[Path], what: str, root: Path) -> Path:
    found = sorted(paths)
    if not found:
        raise ToolchainError(f"CmdStan at {root}: could not find {what}")
    return found[-1]


def cmdstan_toolchain(root: str | os.PathLike[str]) -> Toolchain:
    """Describe a CmdStan installation as a :class:`Toolchain`.

    Parameters
    ----------
    root : path
        The CmdStan directory (the one holding ``bin/stanc`` and ``stan/``).

    Raises
    ------
    ToolchainError
        If stanc, the headers or TBB cannot be found there.
    """
    root = Path(root).expanduser().resolve()
    stanc = root / "bin" / ("stanc.exe" if sys.platform == "win32" else "stanc")
    if not stanc.exists():
        raise ToolchainError(
            f"CmdStan at {root}: {stanc} does not exist (run `make build` in CmdStan)"
        )
    math = root / "stan" / "lib" / "stan_math"
    libdir = math / "lib"
    tbb = _first(libdir.glob("tbb_*"), "TBB (stan/lib/stan_math/lib/tbb_*)", root)
    includes = (
        root / "src",
        root / "stan" / "src",
        math,
        _first(libdir.glob("eigen_*"), "Eigen", root),
        _first(libdir.glob("boost_*"), "Boost", root),
        _first(libdir.glob("sundials_*"), "SUNDIALS", root) / "include",
        tbb / "include",
        root / "stan" / "lib" / "rapidjson_1.1.0",
    )
    tbb_lib = math / "lib" / "tbb"
    if not tbb_lib.exists():
        raise ToolchainError(
            f"CmdStan at {root}: {tbb_lib} does not exist (build CmdStan first)"
        )
    version_file = root / "makefile"
    version = "cmdstan"
    if version_file.exists():
        match = re.search(r"CMDSTAN_VERSION\s*:?=\s*(\S+)", version_file.read_text())
        if match:
            version = f"cmdstan-{match.group(1)}"
    return Toolchain(
        kind="cmdstan",
        stanc=stanc,
        include_dirs=tuple(p for p in includes if p.exists()),
        tbb_lib_dir=tbb_lib,
        version=f"{version}@{root}",
    )


def find_toolchain(cmdstan: str | os.PathLike[str] | None = None) -> Toolchain:
    """Return the toolchain to use.

    Parameters
    ----------
    cmdstan : path, optional
        A CmdStan installation to use instead of the httpstan wheel.  When
        omitted, the ``STAN_DP_CMDSTAN`` environment variable is consulted,
        and then the wheel.
    """
    chosen = cmdstan if cmdstan is not None else os.environ.get("STAN_DP_CMDSTAN")
    if chosen:
        return cmdstan_toolchain(chosen)
    return _httpstan_toolchain()


def default_cache_dir() -> Path:
    """The per-user cache: ``$STAN_DP_CACHE``, else ``$XDG_CACHE_HOME/stan_dp``."""
    env = os.environ.get("STAN_DP_CACHE")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "stan_dp"


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """Serialise builds of one artefact across processes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


_INCLUDE_RE = re.compile(r"^\s*#include\s+[<\"]?([^>\"\s]+)[>\"]?", re.MULTILINE)


def _include_paths(stan_file: Path, stanc_args: Sequence[str]) -> list[Path]:
    paths = [stan_file.parent]
    args = list(stanc_args)
    for i, arg in enumerate(args):
        value = None
        if arg.startswith("--include-paths="):
            value = arg.split("=", 1)[1]
        elif arg == "--include-paths" and i + 1 < len(args):
            value = args[i + 1]
        if value:
            paths.extend(Path(p) for p in value.split(","))
    return paths


def _included_files(stan_file: Path, stanc_args: Sequence[str]) -> list[Path]:
    """Every file the program ``#include``\\s, recursively (for the cache key)."""
    search = _include_paths(stan_file, stanc_args)
    seen: list[Path] = []
    todo = [stan_file]
    while todo:
        current = todo.pop()
        for name in _INCLUDE_RE.findall(current.read_text(errors="replace")):
            for base in [current.parent, *search]:
                candidate = (base / name).resolve()
                if candidate.is_file() and candidate not in seen:
                    seen.append(candidate)
                    todo.append(candidate)
                    break
    return sorted(seen)


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


def _compiler() -> str:
    return os.environ.get("CXX", "g++")


@functools.lru_cache(maxsize=None)
def _compiler_id(cxx: str) -> str:
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise ToolchainError(
            f"no C++ compiler: `{cxx} --version` failed ({exc}); install g++ or set CXX"
        ) from exc
    return out.stdout.splitlines()[0] if out.stdout else cxx


def _run(cmd: Sequence[str], what: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    logger.debug("running %s", " ".join(map(str, cmd)))
    proc = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, cwd=cwd)
    if proc.returncode != 0:
        raise StanCompileError(f"{what} failed:\n{proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def _include_flags(tc: Toolchain) -> list[str]:
    return [f"-I{p}" for p in tc.include_dirs]


def _pch_supported(cxx: str) -> bool:
    # GCC precompiled headers; clang uses another format and mechanism.
    return "clang" not in _compiler_id(cxx).lower() and os.environ.get(
        "STAN_DP_NO_PCH", ""
    ) not in ("1", "true", "yes")


def ensure_precompiled_header(tc: Toolchain, cache_dir: Path, cxx: str) -> Path | None:
    """Build (once) and return the directory holding the precompiled header.

    Returns ``None`` when precompiled headers are not supported, in which
    case models include the plain header.
    """
    if not _pch_supported(cxx):
        return None
    key = _digest(
        tc.version.encode(),
        _compiler_id(cxx).encode(),
        " ".join(BASE_FLAGS).encode(),
        PCH_SOURCE.read_bytes(),
    )[:16]
    pch_dir = cache_dir / "pch" / key
    gch = pch_dir / "stan_dp_pch.hpp.gch"
    if gch.exists():
        return pch_dir
    with _file_lock(cache_dir / "pch" / f"{key}.lock"):
        if gch.exists():
            return pch_dir
        logger.info("building the precompiled Stan header (once per toolchain, ~1 min)")
        tmp = Path(tempfile.mkdtemp(prefix="pch-", dir=cache_dir / "pch"))
        try:
            shutil.copy(PCH_SOURCE, tmp / "stan_dp_pch.hpp")
            _run(
                [cxx, *BASE_FLAGS, *_include_flags(tc), "-x", "c++-header",
                 tmp / "stan_dp_pch.hpp", "-o", tmp / "stan_dp_pch.hpp.gch"],
                "building the precompiled header",
            )
            if pch_dir.exists():
                shutil.rmtree(pch_dir)
            tmp.rename(pch_dir)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return pch_dir


def _model_name(stan_file: Path) -> str:
    stem = re.sub(r"\W", "_", stan_file.stem)
    if not stem or stem[0].isdigit():
        stem = "m_" + stem
    return f"{stem}_model"


def cache_key(
    stan_file: str | os.PathLike[str],
    *,
    stanc_args: Sequence[str] = (),
    toolchain: Toolchain | None = None,
    cxx: str | None = None,
    variant: str = "default",
) -> str:
    """The cache key of a model library.

    It hashes the Stan source, every file it ``#include``\\s, the stanc
    arguments, the toolchain version, the TBB library directory (linked in
    by absolute path as the library's rpath, so a library built against one
    TBB directory must not be reused with another), the compiler, the
    compiler flags, the bridge and precompiled-header sources and the
    stan_dp version: a change to any of them gives a new library.  The
    ``"reference"`` variant's key hashes the default key with the services
    source, so the default key does not depend on the services at all.
    """
    _check_variant(variant)
    stan_path = Path(stan_file).expanduser().resolve()
    tc = toolchain if toolchain is not None else find_toolchain()
    cxx = cxx if cxx is not None else _compiler()
    stanc_args = tuple(str(a) for a in stanc_args)
    included = _included_files(stan_path, stanc_args)
    key = _digest(
        stan_path.read_bytes(),
        *[p.read_bytes() for p in included],
        " ".join(stanc_args).encode(),
        tc.version.encode(),
        str(tc.tbb_lib_dir).encode(),
        _compiler_id(cxx).encode(),
        " ".join(BASE_FLAGS).encode(),
        BRIDGE_SOURCE.read_bytes(),
        PCH_SOURCE.read_bytes(),
        __version__.encode(),
        _model_name(stan_path).encode(),
    )[:24]
    if variant == "default":
        return key
    return _digest(key.encode(), variant.encode(), SERVICES_SOURCE.read_bytes())[:24]


def _check_variant(variant: str) -> None:
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got {variant!r}")


def ensure_services_object(tc: Toolchain, cache_dir: Path, cxx: str) -> Path:
    """Build (once per toolchain and flags) and return ``services.o``.

    The services source includes no model, so one object serves every
    reference library.
    """
    pch_dir = ensure_precompiled_header(tc, cache_dir, cxx)
    key = _digest(
        tc.version.encode(),
        _compiler_id(cxx).encode(),
        " ".join(BASE_FLAGS).encode(),
        PCH_SOURCE.read_bytes(),
        SERVICES_SOURCE.read_bytes(),
        b"pch" if pch_dir is not None else b"no-pch",
    )[:16]
    obj = cache_dir / "services" / key / "services.o"
    if obj.exists():
        return obj
    with _file_lock(cache_dir / "services" / f"{key}.lock"):
        if obj.exists():
            return obj
        logger.info("compiling Stan's NUTS service (once per toolchain, ~1 min)")
        obj.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="build-", dir=obj.parent) as tmpdir:
            out = Path(tmpdir) / obj.name
            _run(
                [cxx, *BASE_FLAGS, "-c", *_include_flags(tc),
                 "-include", (pch_dir or NATIVE_DIR) / "stan_dp_pch.hpp", "-Winvalid-pch",
                 SERVICES_SOURCE, "-o", out],
                "compiling the NUTS service",
            )
            os.replace(out, obj)
    return obj


def compile_model(
    stan_file: str | os.PathLike[str],
    *,
    stanc_args: Sequence[str] = (),
    cache_dir: str | os.PathLike[str] | None = None,
    cmdstan: str | os.PathLike[str] | None = None,
    variant: str = "default",
) -> Path:
    """Compile a Stan program into a stan_dp model library, or reuse the cache.

    Parameters
    ----------
    stan_file : path
        The ``.stan`` program.
    stanc_args : sequence of str, optional
        Extra arguments for stanc3 (e.g. ``["--O1"]``, ``["--include-paths=..."]``).
    cache_dir : path, optional
        Where libraries are cached; default :func:`default_cache_dir`.
    cmdstan : path, optional
        Use this CmdStan installation instead of the httpstan wheel (the
        ``STAN_DP_CMDSTAN`` environment variable does the same).
    variant : {"default", "reference"}, optional
        ``"reference"`` also links Stan's NUTS service (``sdp_nuts``, used by
        :func:`stan_dp.reference_fit`); it is a separate library with its
        own cache key, built only when asked for.

    Returns
    -------
    pathlib.Path
        The shared library.  It exports BridgeStan's C ABI (load it with
        ``bridgestan.StanModel``) and the stan_dp row extension.

    Raises
    ------
    FileNotFoundError
        If ``stan_file`` does not exist.
    StanCompileError
        If stanc rejects the program (its message names line and column) or
        the C++ compiler fails.
    ToolchainError
        If no toolchain or compiler is available.
    """
    stan_path = Path(stan_file).expanduser().resolve()
    if not stan_path.is_file():
        raise FileNotFoundError(f"Stan file not found: {stan_file}")
    if stan_path.suffix != ".stan":
        raise ValueError(f"expected a .stan file, got {stan_file}")
    _check_variant(variant)
    stanc_args = tuple(str(a) for a in stanc_args)
    tc = find_toolchain(cmdstan)
    cxx = _compiler()
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    name = _model_name(stan_path)

    key = cache_key(stan_path, stanc_args=stanc_args, toolchain=tc, cxx=cxx, variant=variant)
    model_dir = cache / "models" / key
    suffix = "" if variant == "default" else f"_{variant}"
    lib = model_dir / f"{stan_path.stem}{suffix}.so"
    if lib.exists():
        return lib

    with _file_lock(cache / "models" / f"{key}.lock"):
        if lib.exists():
            return lib
        # INFO, so that a first compile is not minutes of silence: the CLI shows
        # stan_dp's INFO messages; in Python, logging.basicConfig(level="INFO").
        logger.info("compiling %s%s \u2014 first time, about 30 s", stan_path.name,
                    "" if variant == "default" else " with Stan's NUTS service")
        model_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="build-", dir=model_dir) as tmpdir:
            tmp = Path(tmpdir)
            hpp = tmp / f"{name}.hpp"
            include_args = [f"--include-paths={stan_path.parent}"]
            stanc = subprocess.run(
                [str(tc.stanc), *include_args, *stanc_args, f"--name={name}",
                 f"--o={hpp}", str(stan_path)],
                capture_output=True, text=True,
            )
            if stanc.returncode != 0:
                raise StanCompileError(
                    f"stanc could not translate {stan_path.name}:\n"
                    + (stanc.stderr.strip() or stanc.stdout.strip())
                    + newer_types_hint(stan_path.read_text(errors="replace"), tc.version)
                )
            if stanc.stderr.strip():
                logger.warning("stanc: %s", stanc.stderr.strip())
            pch_dir = ensure_precompiled_header(tc, cache, cxx)
            extra_objects = (
                [ensure_services_object(tc, cache, cxx)] if variant == "reference" else []
            )
            force_include = (pch_dir or NATIVE_DIR) / "stan_dp_pch.hpp"
            out = tmp / lib.name
            _run(
                [cxx, *BASE_FLAGS, "-shared", *_include_flags(tc),
                 "-include", force_include, "-Winvalid-pch",
                 f'-DSTAN_DP_MODEL_HPP="{hpp}"',
                 f'-DSTAN_DP_VERSION="{__version__}"',
                 BRIDGE_SOURCE, *extra_objects, "-o", out,
                 f"-L{tc.tbb_lib_dir}", "-ltbb", f"-Wl,-rpath,{tc.tbb_lib_dir}"],
                f"compiling {stan_path.name}",
            )
            shutil.copy(stan_path, model_dir / stan_path.name)
            os.replace(out, lib)  # atomic: a partial library is never visible
    return lib


def as_library(
    model: str | os.PathLike[str],
    stanc_args: Sequence[str] = (),
    cache_dir: str | os.PathLike[str] | None = None,
    *,
    cmdstan: str | os.PathLike[str] | None = None,
) -> Path:
    """The model library for a ``.stan`` file (compiled or cached) or a library path.

    Every model class (:class:`stan_dp.RowModel`, the exponential-family and
    record models) accepts either form; this is the one place that tells
    them apart.

    Parameters
    ----------
    model : path
        A ``.stan`` program (compiled with :func:`compile_model`, or taken
        from the cache) or an already built library (``.so``, ``.dylib``,
        ``.dll``), used as is.
    stanc_args : sequence of str, optional
        Extra stanc3 arguments (for a ``.stan`` file).
    cache_dir : path, optional
        The library cache (for a ``.stan`` file).
    cmdstan : path, optional
        A CmdStan installation to compile with (for a ``.stan`` file).

    Returns
    -------
    pathlib.Path
        The shared library.

    Raises
    ------
    FileNotFoundError
        If ``model`` does not exist.
    ValueError
        If ``model`` is neither a ``.stan`` file nor a shared library.
    """
    path = Path(model).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"model not found: {model}")
    if path.suffix == ".stan":
        return compile_model(path, stanc_args=stanc_args, cache_dir=cache_dir, cmdstan=cmdstan)
    if path.suffix in (".so", ".dylib", ".dll"):
        return path.resolve()
    raise ValueError(f"model must be a .stan file or a compiled library, got {model}")

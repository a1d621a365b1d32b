"""tblite and dftd4, imported on an optimised BLAS and LAPACK.

Their PyPI wheels carry netlib's reference BLAS and LAPACK (`tblite.libs/libblas-*.so`),
unblocked loops in which a GFN2-xTB energy and gradient spends about half its time
(matrix products, the generalised eigensolver). scipy's wheel carries OpenBLAS with
every routine renamed (`scipy_dgemm_`, ...). A library of one jump per routine
(`dgemm_: jmp scipy_dgemm_`), assembled once with the C compiler and loaded into the
process's global symbol scope before tblite and dftd4, makes their calls land in
OpenBLAS: a GFN2-xTB optimisation of the CSD 10k set takes about 1.8 times less CPU
(`bench/xtb_blas.py`), with the same numbers to rounding (tests: energies within 1e-9 Eh).

Where it cannot be done (`OODMOL_XTB_BLAS=reference`, no C compiler or `nm`, no scipy
OpenBLAS, another processor, or tblite already imported), tblite and dftd4 run on the
BLAS they came with, and `blas()` says why. Conda's builds, linked to an optimised BLAS,
are left as they are. The library is built in the user's cache folder
(`$XDG_CACHE_HOME/oodmol/blas`), named by a hash of what it was built from; one that
does not load is built again.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

ENVIRONMENT = "OODMOL_XTB_BLAS"  # "reference": keep the wheels' own BLAS
PACKAGES = ("tblite", "dftd4")
# one tail call per routine: the arguments, registers and stack, pass through untouched
JUMPS = {"x86_64": "jmp {target}@PLT", "aarch64": "b {target}"}
PREFIX = "scipy_"

_state: dict[str, object] = {}  # "blas": what tblite runs on; "library": the loaded jumps


def load_tblite() -> ModuleType:
    """`tblite.interface`, on OpenBLAS where it can be (module docstring)."""
    blas()
    return importlib.import_module("tblite.interface")


def load_dftd4() -> ModuleType:
    """`dftd4.interface`, on OpenBLAS where it can be (module docstring)."""
    blas()
    return importlib.import_module("dftd4.interface")


def blas() -> str:
    """What tblite's and dftd4's BLAS and LAPACK calls run on in this process: "OpenBLAS
    (...)" or "bundled (<why>)". Decided once, before either package is imported."""
    if "blas" not in _state:
        _state["blas"] = _put_openblas_first()
    return str(_state["blas"])


def _put_openblas_first() -> str:
    if os.environ.get(ENVIRONMENT, "").lower() == "reference":
        return f"bundled ({ENVIRONMENT}=reference)"
    loaded = [name for name in PACKAGES if name in sys.modules]
    if loaded:
        return f"bundled ({' and '.join(loaded)} imported before oodmol could choose)"
    consumers = [lib for name in PACKAGES for lib in _reference_linked(name)]
    if not consumers:
        return "bundled (tblite and dftd4 carry no reference BLAS here)"
    openblas = _scipy_openblas()
    if openblas is None:
        return "bundled (scipy carries no OpenBLAS here)"
    jump = JUMPS.get(platform.machine())
    if jump is None:
        return f"bundled (no jump written for {platform.machine()} processors)"
    try:
        library = _jumps_library(consumers, openblas, jump)
    except _CannotBuild as reason:
        return f"bundled ({reason})"
    _state["library"] = library
    return f"OpenBLAS ({openblas.name}, through {Path(library._name).name})"


class _CannotBuild(Exception):
    """Why the jumps to OpenBLAS could not be built here."""


def _package_folder(package: str) -> Path | None:
    """Where an installed package lives, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _reference_linked(package: str) -> list[Path]:
    """The package's compiled extensions, where its wheel carries netlib's BLAS."""
    folder = _package_folder(package)
    if folder is None or not any(folder.parent.glob(f"{package}.libs/libblas-*.so*")):
        return []
    return sorted(folder.glob("_lib*.so"))


def _scipy_openblas() -> Path | None:
    folder = _package_folder("scipy")
    found = sorted(folder.parent.glob("scipy.libs/libscipy_openblas*.so")) if folder else []
    return found[0] if found else None


def _jumps_library(consumers: list[Path], openblas: Path, jump: str) -> ctypes.CDLL:
    """The jumps from the routines `consumers` call to OpenBLAS's, loaded into the global
    scope: from the cache, or built (with `nm` and the C compiler) where missing or
    unloadable. The cache's name hashes the libraries it joins."""
    joined = [f"{lib.resolve()}:{lib.stat().st_size}" for lib in (*consumers, openblas)]
    key = hashlib.sha256("\n".join([jump, *joined]).encode()).hexdigest()[:16]
    path = _cache_folder() / f"libtight_binding_openblas-{key}.so"
    if path.exists():
        try:
            return ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
        except OSError:  # damaged: built again below
            path.unlink(missing_ok=True)
    compiler = os.environ.get("CC", "cc")
    missing = [tool for tool in (compiler, "nm") if shutil.which(tool) is None]
    if missing:
        raise _CannotBuild(f"no {' or '.join(missing)} on PATH to build the OpenBLAS jumps")
    try:
        wanted = set().union(*(_symbols(lib, "--undefined-only") for lib in consumers))
        offered = {
            name.removeprefix(PREFIX)
            for name in _symbols(openblas, "--defined-only")
            if name.startswith(PREFIX)
        }
        routines = sorted(name for name in wanted & offered if _is_fortran_routine(name))
        _assemble(compiler, _assembly(routines, jump), openblas, path)
        return ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    except (OSError, subprocess.CalledProcessError) as error:
        raise _CannotBuild(f"the OpenBLAS jumps did not build: {_first_line(error)}") from None


def _symbols(library: Path, which: str) -> set[str]:
    listing = subprocess.run(
        ["nm", "-D", which, str(library)], capture_output=True, text=True, check=True
    ).stdout
    return {line.split()[-1] for line in listing.splitlines() if line.strip()}


def _is_fortran_routine(name: str) -> bool:
    """A BLAS or LAPACK routine's Fortran name: lower case, one trailing underscore."""
    stem = name[:-1]
    return name.endswith("_") and stem.isalnum() and stem.islower() and stem[0].isalpha()


def _assembly(routines: list[str], jump: str) -> str:
    lines = [".text"]
    for name in routines:
        lines += [
            f".globl {name}",
            f".type {name}, %function",
            f"{name}:",
            "\t" + jump.format(target=PREFIX + name),
        ]
    lines.append('.section .note.GNU-stack,"",%progbits')  # no executable stack
    return "\n".join(lines) + "\n"


def _assemble(compiler: str, source: str, openblas: Path, path: Path) -> None:
    """Assemble `source` into `path`, linked to `openblas`; atomic, so that processes
    building it at once each load a whole library."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as scratch:
        assembly = Path(scratch) / "jumps.S"
        assembly.write_text(source)
        built = Path(scratch) / path.name
        subprocess.run(
            [compiler, "-shared", "-o", str(built), str(assembly),
             f"-L{openblas.parent}", f"-l:{openblas.name}", f"-Wl,-rpath,{openblas.parent}"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        os.replace(built, path)


def _cache_folder() -> Path:
    try:
        root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    except RuntimeError as error:  # no home folder to be found
        raise _CannotBuild(f"no cache folder for the OpenBLAS jumps: {error}") from None
    return Path(root) / "oodmol" / "blas"


def _first_line(error: Exception) -> str:
    text = getattr(error, "stderr", None) or str(error)
    return text.strip().splitlines()[0] if text.strip() else type(error).__name__

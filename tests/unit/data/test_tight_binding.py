"""tblite on OpenBLAS (`oodmol.data.featurize.tight_binding`): its BLAS and LAPACK calls
land in scipy's OpenBLAS, the numbers stay those of its bundled reference BLAS, and where
the jumps cannot be built or loaded it runs as before and says why. Each case is a
process of its own, as the choice is made once per process, before tblite is imported."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from oodmol.data.featurize import tight_binding

pytestmark = [
    pytest.mark.slow,  # each case starts a Python process
    pytest.mark.skipif(
        not tight_binding._reference_linked("tblite") or tight_binding._scipy_openblas() is None,
        reason="needs tblite's PyPI wheel (reference BLAS) and scipy's (OpenBLAS)",
    ),
    pytest.mark.skipif(
        shutil.which("cc") is None or shutil.which("nm") is None,
        reason="needs a C compiler and nm to build the jumps",
    ),
]

PROGRAM = """
import json, sys
{before}
from oodmol.data.featurize.conformers import embed_mol
from oodmol.data.featurize.tight_binding import blas
from oodmol.data.featurize.xtb import xtb_energy_gradient
mol, conformer = embed_mol("Oc1ccc(cc1)C(=O)N")
energy, gradient = xtb_energy_gradient(conformer.atomic_numbers, conformer.positions)
print(json.dumps({{"blas": blas(), "energy": energy, "gradient": gradient.tolist()}}))
"""


def computed(tmp_path: Path, name: str, before: str = "", **env: str) -> dict:
    """GFN2-xTB's energy and gradient of one molecule in a fresh process, what it ran on,
    and which library each of tblite's calls to `dgemm_` and `dsyevd_` was bound to."""
    bindings = tmp_path / f"{name}.bindings"
    process = subprocess.run(
        [sys.executable, "-c", PROGRAM.format(before=before)],
        env={
            **os.environ,
            "XDG_CACHE_HOME": str(tmp_path / "cache"),
            "LD_DEBUG": "bindings",
            "LD_DEBUG_OUTPUT": str(bindings),
            **env,
        },
        capture_output=True,
        text=True,
    )
    assert process.returncode == 0, process.stderr[-3000:]
    found = json.loads(process.stdout.strip().splitlines()[-1])
    lines = "".join(path.read_text() for path in tmp_path.glob(f"{name}.bindings.*"))
    found["bound"] = {
        routine: sorted(
            {
                Path(line.split(" to ")[1].split(" [")[0]).name
                for line in lines.splitlines()
                if "_libtblite" in line.split(" to ")[0] and f"`{routine}'" in line
            }
        )
        for routine in ("dgemm_", "dsyevd_")
    }
    return found


def jumps(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "cache" / "oodmol" / "blas").glob("*.so"))


def libraries(found: dict) -> set[str]:
    """Every library tblite's `dgemm_` and `dsyevd_` were bound to."""
    return {name for names in found["bound"].values() for name in names}


def same_numbers(a: dict, b: dict) -> None:
    assert a["energy"] == pytest.approx(b["energy"], abs=1e-9)
    np.testing.assert_allclose(a["gradient"], b["gradient"], atol=1e-8)


def test_tblites_routines_land_in_openblas_with_the_reference_blas_numbers(tmp_path) -> None:
    fast = computed(tmp_path, "fast")
    reference = computed(tmp_path, "reference", OODMOL_XTB_BLAS="reference")
    assert fast["blas"].startswith("OpenBLAS (libscipy_openblas")
    assert reference["blas"] == "bundled (OODMOL_XTB_BLAS=reference)"
    (library,) = jumps(tmp_path)
    assert fast["bound"] == {"dgemm_": [library.name], "dsyevd_": [library.name]}
    assert all(name.startswith(("libblas-", "liblapack-")) for name in libraries(reference))
    same_numbers(fast, reference)


def test_a_damaged_library_is_built_again(tmp_path) -> None:
    first = computed(tmp_path, "first")
    (library,) = jumps(tmp_path)
    library.write_bytes(b"not a library")
    again = computed(tmp_path, "again")
    assert again["blas"] == first["blas"] and again["bound"] == first["bound"]
    assert library.read_bytes().startswith(b"\x7fELF")
    same_numbers(again, first)


@pytest.mark.parametrize(
    ("before", "env", "why"),
    [
        ("", {"CC": "/nowhere/cc"}, "no /nowhere/cc on PATH to build the OpenBLAS jumps"),
        ("import tblite.interface", {}, "tblite imported before oodmol could choose"),
        ("", {"XDG_CACHE_HOME": "/proc/oodmol"}, "the OpenBLAS jumps did not build: "),
    ],
    ids=["no-compiler", "tblite-imported-first", "no-writable-cache"],
)
def test_where_it_cannot_it_runs_on_the_bundled_blas_and_says_why(
    tmp_path, before: str, env: dict[str, str], why: str
) -> None:
    fell_back = computed(tmp_path, "fell_back", before, **env)
    assert fell_back["blas"].startswith(f"bundled ({why}")
    assert not jumps(tmp_path)
    assert not any("tight_binding" in name for name in libraries(fell_back))
    same_numbers(fell_back, computed(tmp_path, "reference", OODMOL_XTB_BLAS="reference"))

"""The device check's report (bench/gpu_check.sh): one Markdown page from what its steps
wrote under one folder.

    python -m bench.gpu_report OUT > OUT/report.md
"""

from __future__ import annotations

import csv
import re
import statistics
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def fenced(text: str) -> str:
    return f"```\n{text.rstrip()}\n```\n"


def test_summary(folder: Path) -> str:
    log = folder / "gpu_tests.log"
    if not log.is_file():
        return ""
    lines = log.read_text().splitlines()
    # `-v` names each outcome as it comes (with xdist after a worker's tag), so a run cut
    # short by its time limit still names its failures; the closing summary repeats them
    # with the start of the reason: each test once, by its outcome and name
    named = (re.search(r"\b(FAILED|ERROR) (tests/\S+)", line) for line in lines)
    failed = list(dict.fromkeys(f"{m[1]} {m[2]}" for m in named if m))
    return "## GPU tests\n\n" + fenced("\n".join([*failed, *lines[-2:]]))


def precision_table(folder: Path) -> str:
    """The relative change of the predictions each precision test recorded."""
    xml = folder / "gpu_tests.xml"
    if not xml.is_file():
        return ""
    rows = []
    for case in ET.parse(xml).iter("testcase"):
        for prop in case.iter("property"):
            if prop.get("name") == "relative_change":
                params = case.get("name", "").partition("[")[2].rstrip("]")
                where = "GPU" if "on_the_gpu" in case.get("name", "") else "CPU"
                rows.append(f"| {params} | {where} | {float(prop.get('value')):.2e} |")
    if not rows:
        return ""
    head = "| model-mode | device | relative RMS change |\n|---|---|---|\n"
    return "## Reduced precision against float32\n\n" + head + "\n".join(sorted(rows)) + "\n"


def tables(folder: Path) -> str:
    parts = []
    for path in sorted(folder.glob("epochs*.md")):
        parts.append(f"## {path.stem}\n\n{path.read_text()}")
        err = path.with_suffix(".err")
        if err.is_file():
            parts.append(fenced("\n".join(err.read_text().splitlines()[-3:])))
    seeds = sorted(folder.glob("seeds?.md")) + sorted(folder.glob("seed_alone.md"))
    rows = [
        f"| {path.stem} {line.split('|', 2)[2].strip()}"
        for path in seeds
        for line in path.read_text().splitlines()
        if "| csd10k_density |" in line
    ]
    if rows:
        parts.append("## Seeds side by side, then alone\n\n" + "\n".join(rows) + "\n")
    return "\n".join(parts)


def utilisation(folder: Path) -> str:
    """nvidia-smi's samples over the whole check: median while the GPU was busy."""
    path = folder / "nvidia_smi.csv"
    if not path.is_file():
        return ""
    with path.open() as handle:
        rows = list(csv.reader(handle))[1:]
    busy = [float(r[1]) for r in rows if len(r) > 2 and r[1].strip().isdigit() and float(r[1])]
    memory = [float(r[2]) for r in rows if len(r) > 2 and r[2].strip().isdigit()]
    if not busy:
        return ""
    return (
        f"nvidia-smi: {len(rows)} samples, utilisation median {statistics.median(busy):.0f} % "
        f"while busy, memory used at most {max(memory):.0f} MiB\n"
    )


def main() -> None:
    folder = Path(sys.argv[1])
    read = lambda name: (folder / name).read_text() if (folder / name).is_file() else ""  # noqa: E731
    print("# Device check\n")
    print(fenced(read("versions.txt")))
    print(test_summary(folder))
    print(precision_table(folder))
    print(tables(folder))
    print(utilisation(folder))
    print("## Steps\n\n" + fenced(read("steps.log")))


if __name__ == "__main__":
    main()

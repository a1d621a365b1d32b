"""bench.gpu_report: the device check's page from the files its steps wrote."""

from __future__ import annotations

from pathlib import Path

from bench.gpu_report import precision_table, tables, utilisation
from bench.gpu_report import test_summary as summary_of_tests

JUNIT = """<?xml version="1.0"?><testsuites><testsuite>
<testcase name="test_reduced_precision_stays_within_tolerance_on_the_gpu[visnet-tf32]">
<properties><property name="relative_change" value="0.0177"/></properties></testcase>
<testcase name="test_bf16_autocast_stays_within_tolerance_on_cpu[egnn]">
<properties><property name="relative_change" value="0.0232"/></properties></testcase>
<testcase name="test_every_model_trains_on_the_gpu[mlp]"/>
</testsuite></testsuites>"""
ROW = "| egnn | csd10k_density | 5.93 | 5.8 | 15 | 203 | NVIDIA H200 | 10 | L40 | 1.7 |"


def test_the_precision_table_holds_each_recorded_change(tmp_path: Path) -> None:
    (tmp_path / "gpu_tests.xml").write_text(JUNIT)
    table = precision_table(tmp_path)
    assert "| visnet-tf32 | GPU | 1.77e-02 |" in table
    assert "| egnn | CPU | 2.32e-02 |" in table
    assert "mlp" not in table  # a test that recorded nothing has no row


def test_epoch_tables_and_seed_rows_are_gathered(tmp_path: Path) -> None:
    (tmp_path / "epochs.md").write_text(f"| model | task |\n|---|---|\n{ROW}\n")
    (tmp_path / "epochs.err").write_text("exit 124\n")
    for name in ("seeds0", "seeds1", "seed_alone"):
        (tmp_path / f"{name}.md").write_text(f"{ROW}\n| egnn | 0.7 | 1.67 |\n")
    text = tables(tmp_path)
    assert "## epochs" in text and ROW in text and "exit 124" in text
    seed_rows = [line for line in text.splitlines() if line.startswith("| seed")]
    assert len(seed_rows) == 3  # the device-hours rows stay out


def test_utilisation_is_the_median_of_busy_samples(tmp_path: Path) -> None:
    samples = ["timestamp, utilization.gpu [%], memory.used [MiB]"]
    samples += [f"t, {u}, {m}" for u, m in [(0, 500), (10, 900), (40, 1200), (70, 800)]]
    (tmp_path / "nvidia_smi.csv").write_text("\n".join(samples) + "\n")
    assert utilisation(tmp_path).startswith("nvidia-smi: 4 samples, utilisation median 40 %")
    assert "at most 1200 MiB" in utilisation(tmp_path)


def test_failures_are_named_when_the_tests_were_cut_short(tmp_path: Path) -> None:
    (tmp_path / "gpu_tests.log").write_text(
        "[gw1] [ 40%] PASSED tests/e2e/test_gpu_path.py::test_a[mlp]\n"
        "[gw3] [ 45%] FAILED tests/e2e/test_gpu_path.py::test_b[egnn]\n"
        "[gw0] [ 47%] PASSED tests/e2e/test_gpu_path.py::test_c\n"
        "exit 124\n"
    )
    text = summary_of_tests(tmp_path)
    assert "FAILED tests/e2e/test_gpu_path.py::test_b[egnn]" in text and "exit 124" in text
    assert "test_a" not in text  # what passed is not listed


def test_a_failure_named_as_it_came_and_in_the_summary_is_listed_once(tmp_path: Path) -> None:
    (tmp_path / "gpu_tests.log").write_text(
        "[gw3] [ 45%] FAILED tests/e2e/test_gpu_path.py::test_b[egnn] \n"
        "FAILED tests/e2e/test_gpu_path.py::test_b[egnn] - AssertionError: exit 1\n"
        "ERROR tests/e2e/test_gpu_path.py::test_d - RuntimeError\n"
        "=== 1 failed, 1 error in 3.0s ===\n"
        "exit 1\n"
    )
    text = summary_of_tests(tmp_path)
    assert text.count("test_b[egnn]") == 1 and "ERROR tests/e2e/test_gpu_path.py::test_d" in text

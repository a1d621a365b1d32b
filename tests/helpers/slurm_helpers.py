"""A SLURM cluster for the tests of tests/e2e/test_slurm.py: the one SLURM_CONF names, else
the local cluster of scripts/slurm_local.sh (`make test-slurm` starts it), and the few
scheduler commands the tests give as an administrator or a scheduler would."""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

LOCAL_CONF = Path(os.environ.get("OODMOL_SLURM_DIR", "/tmp/oodmol-slurm")) / "etc" / "slurm.conf"
START_HINT = "start one with `make test-slurm` (root; installs slurm-wlm and munge where missing)"


@dataclass(frozen=True)
class Cluster:
    conf: Path
    partition: str
    cpus: int  # of the partition's first node

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def command(self, *args: str, check: bool = True) -> str:
        done = subprocess.run(
            list(args),
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=30,
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}): {done.stderr}")
        return done.stdout

    def state(self, job: str) -> str:
        """squeue's state of a job, "" once it has left the queue."""
        return self.command(
            "squeue", "--noheader", "--jobs", job, "--format=%T", check=False
        ).strip()

    def wait_state(self, job: str, done: set[str], timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while (state := self.state(job)) not in done:
            if time.monotonic() > deadline:
                raise TimeoutError(f"SLURM job {job} still {state or 'gone'} after {timeout}s")
            time.sleep(0.5)
        return state

    def job_field(self, job: str, name: str) -> str:
        """One field of `scontrol show job` (kept MinJobAge after the job ended)."""
        shown = self.command("scontrol", "show", "job", job)
        match = re.search(rf"\b{name}=(\S*)", shown)
        if match is None:
            raise KeyError(f"no {name} in scontrol show job {job}:\n{shown}")
        return match.group(1)

    def start_soon(self, job: str) -> None:
        """SLURM holds a requeued batch job for about two minutes (its begin time); the
        tests let it start sooner, as an administrator can. Not at once: the node
        refuses a start within the second its earlier credential was revoked."""
        self.wait_state(job, {"PENDING"})
        time.sleep(3)
        self.command("scontrol", "update", f"JobId={job}", "StartTime=now")


def find_cluster() -> tuple[Cluster | None, str]:
    """The cluster to test on, or None and why there is none."""
    conf = Path(os.environ.get("SLURM_CONF") or LOCAL_CONF)
    partition = os.environ.get("OODMOL_SLURM_PARTITION", "debug")
    if not conf.is_file():
        return None, f"no SLURM cluster: {conf} does not exist; {START_HINT}"
    try:
        done = subprocess.run(
            ["sinfo", "--noheader", f"--partition={partition}", "--format=%a %t %c"],
            env={**os.environ, "SLURM_CONF": str(conf)},
            capture_output=True,
            text=True,
            timeout=15,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return None, f"no SLURM cluster: sinfo failed ({error}); {START_HINT}"
    rows = [line.split() for line in done.stdout.splitlines() if line.strip()]
    up = [r for r in rows if r[0] == "up" and r[1].rstrip("*~#") in ("idle", "mix", "alloc")]
    if done.returncode != 0 or not up:
        why = done.stderr.strip() or done.stdout.strip() or "no node"
        return (
            None,
            f"no SLURM cluster answers ({conf}, partition {partition}: {why}); {START_HINT}",
        )
    return Cluster(conf, partition, int(up[0][2])), ""

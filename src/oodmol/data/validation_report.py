"""What validation dropped or changed: every record is accounted for, nothing silently."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

MAX_EXAMPLES = 10


@dataclass
class Finding:
    """One kind of problem: why, what was done, how many, and a few named examples."""

    reason: str
    action: str  # "dropped" | "changed" | "imputed" | "kept"
    count: int = 0
    examples: list[str] = field(default_factory=list)

    def add(self, where: str, detail: str = "") -> None:
        self.count += 1
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append(f"{where}: {detail}" if detail else where)


@dataclass
class DataReport:
    """Accounts for every input record of one data set: kept + dropped == read."""

    source: str
    n_read: int = 0
    n_kept: int = 0
    findings: dict[str, Finding] = field(default_factory=dict)

    def record(self, reason: str, action: str, where: str, detail: str = "") -> None:
        key = f"{action}:{reason}"
        if key not in self.findings:
            self.findings[key] = Finding(reason, action)
        self.findings[key].add(where, detail)

    @property
    def n_dropped(self) -> int:
        return sum(f.count for f in self.findings.values() if f.action == "dropped")

    def count(self, action: str) -> int:
        return sum(f.count for f in self.findings.values() if f.action == action)

    def summary_line(self) -> str:
        parts = [f"{f.count} {f.action} ({f.reason})" for f in self.findings.values()]
        detail = "; ".join(parts) if parts else "no problems"
        return f"[oodmol] {self.source}: read {self.n_read}, kept {self.n_kept} — {detail}"

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "n_read": self.n_read,
            "n_kept": self.n_kept,
            "findings": [vars(f) for f in self.findings.values()],
        }

    @classmethod
    def from_dict(cls, data: dict) -> DataReport:
        """The report `to_dict` wrote; anything else (a damaged cache's) raises
        ValueError."""
        report = cls(data["source"], data["n_read"], data["n_kept"])
        for f in data["findings"]:
            report.findings[f"{f['action']}:{f['reason']}"] = Finding(**f)
        if not _well_formed(report):
            raise ValueError("not a data report: a field of the wrong kind")
        return report

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_dict(), indent=2))


def _well_formed(report: DataReport) -> bool:
    def count(n: object) -> bool:
        return isinstance(n, int) and not isinstance(n, bool) and n >= 0

    return (
        isinstance(report.source, str)
        and count(report.n_read)
        and count(report.n_kept)
        and all(
            isinstance(f.reason, str)
            and isinstance(f.action, str)
            and count(f.count)
            and isinstance(f.examples, list)
            and all(isinstance(e, str) for e in f.examples)
            for f in report.findings.values()
        )
    )

"""Where the repository is, for tests at any depth of tests/."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

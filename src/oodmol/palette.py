"""The look every figure shares, so that a set reads the same in all of them: BOOM's
colours (OOD molecules blue, ID molecules orange) and the sets' labels."""

from __future__ import annotations

SET_COLORS = {"id": "tab:orange", "ood": "tab:blue"}
SET_LABELS = {"id": "ID", "ood": "OOD"}

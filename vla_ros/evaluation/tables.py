"""The breakdowns both evaluations report (in process and live): success by colour and by phrasing, and
what the safety filter did to the policy's chunks, in shares. Plain functions over per-episode rows."""

from __future__ import annotations

import numpy as np

COLORS = ("red", "green", "blue")


def phrasing(instruction: str, color: str) -> str:
    """The template an instruction was filled from: its colour word back to ``{color}``."""
    return instruction.replace(color, "{color}", 1)


def success_breakdown(rows: list[dict]) -> dict:
    """``success_by_color`` and ``success_by_phrasing`` (rate and episode count per template) of rows with
    ``success``, ``color`` and ``instruction``."""
    def rate(sel):
        return round(float(np.mean([r["success"] for r in sel])), 3) if sel else None

    by_color = {c: rate([r for r in rows if r["color"] == c]) for c in COLORS}
    templates = sorted({phrasing(r["instruction"], r["color"]) for r in rows})
    by_phrasing = {}
    for t in templates:
        sel = [r for r in rows if phrasing(r["instruction"], r["color"]) == t]
        by_phrasing[t] = {"success_rate": rate(sel), "episodes": len(sel)}
    return {"success_by_color": by_color, "success_by_phrasing": by_phrasing}


def verdict_shares(verdicts: dict) -> dict:
    """Percent of chunks the filter passed unmodified and rejected (None without chunks)."""
    total = sum(verdicts.values())
    pct = (lambda n: round(100.0 * n / total, 2)) if total else (lambda n: None)
    return {"filter_pass_unmodified_pct": pct(verdicts.get("pass", 0)), "filter_rejected_pct": pct(verdicts.get("rejected", 0))}

"""Intake bookkeeping of the policy session: per-source counts and the losses seen in the stamps.

No rclpy import. A subscriber cannot see the messages DDS never handed it (a reader queue that overflowed, a
best-effort sample that did not arrive), but a sensor stamps at a steady rate, so the gaps in the stamps
say how many went missing: ``StampGaps`` learns the period from the stamps themselves (the median gap) and
counts, for each new message, the periods it skipped. Example at 100 Hz: stamps 0, 10, 20, 50 ms -> the
gap of 30 ms is 3 periods: 2 messages lost. A silence longer than ``outage_periods`` (a paused camera, a
stopped driver) is an outage, counted apart: nothing was sent, so nothing was lost in transport.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, deque


class StampGaps:
    """Messages missing from one source, from the gaps between consecutive header stamps.

    Args:
        learn: gaps needed before the period is trusted (median of the last ``learn`` gaps, kept updated).
        outage_periods: a gap of more periods than this is an outage (counted in ``outages``), not losses.
    """

    def __init__(self, learn: int = 16, outage_periods: int = 50) -> None:
        self._gaps: deque[int] = deque(maxlen=learn)
        self._last_ns: int | None = None
        self._outage_periods = outage_periods
        self.period_ns: int | None = None
        self.lost = 0
        self.outages = 0

    def add(self, stamp_ns: int) -> int:
        """Take one received stamp; returns how many messages it shows were lost just before it."""
        last, self._last_ns = self._last_ns, stamp_ns
        if last is None or stamp_ns <= last:
            return 0  # first, repeated or out of order (a reset, a duplicate): no gap to read
        gap = stamp_ns - last
        lost = 0
        if self.period_ns is not None:
            periods = round(gap / self.period_ns)
            if periods > self._outage_periods:
                self.outages += 1
                return 0
            lost = max(0, periods - 1)
            self.lost += lost
        if self.period_ns is None or gap < 1.5 * self.period_ns:  # only regular gaps teach the period
            self._gaps.append(gap)
            if len(self._gaps) == self._gaps.maxlen:
                self.period_ns = int(sorted(self._gaps)[len(self._gaps) // 2])
        return lost


@dataclasses.dataclass
class SourceStats:
    """What happened to the messages of one kind of observation (camera frames, joint states).

    ``dropped`` is every message the policy did not use, whatever the cause: lost before it arrived (seen
    in the stamps), rejected on arrival (late, before_reset, corrupt, ...) or accepted but pushed out of
    the window before a tick used it (``unused``, counted by the stream).
    """

    received: int = 0
    accepted: int = 0
    thinned: int = 0  # frames left out to the model's max_frame_rate_hz: used by design, not dropped
    rejected: Counter = dataclasses.field(default_factory=Counter)
    gaps: StampGaps = dataclasses.field(default_factory=StampGaps)
    last_arrival_wall_s: float | None = None  # wall (monotonic) time of the last message received
    arrival_lag_ms: list = dataclasses.field(default_factory=list)  # receive clock - stamp, since last taken

    def dropped(self, unused: int = 0) -> int:
        return self.gaps.lost + sum(self.rejected.values()) + unused

    def dropped_pct(self, unused: int = 0) -> float:
        sent = self.received - self.thinned + self.gaps.lost
        return 100.0 * self.dropped(unused) / sent if sent else 0.0

    def as_dict(self, unused: int = 0) -> dict:
        out = {
            "received": self.received,
            "accepted": self.accepted,
            "thinned": self.thinned,
            "lost": self.gaps.lost,
            "outages": self.gaps.outages,
            "unused": unused,
            "rejected": sum(self.rejected.values()),
        }
        out.update({f"rejected.{k}": v for k, v in sorted(self.rejected.items())})
        out["dropped"] = self.dropped(unused)
        out["dropped_pct"] = round(self.dropped_pct(unused), 3)
        if self.gaps.period_ns:
            out["period_ms"] = round(self.gaps.period_ns * 1e-6, 3)
        return out

"""Pacing simulated time against wall time at a real-time factor, with time passed in (no clock read here).

The physics loop asks ``delay_s(sim_s, wall_s)`` how long to wait before the next step. Simulated time is
measured from an anchor (a simulated and a wall instant): at factor f, ``sim_s - anchor_sim`` simulated
seconds are due ``(sim_s - anchor_sim) / f`` wall seconds after ``anchor_wall``. The anchor moves

- when the factor changes, so the new factor applies from the change on. Measured from the old anchor,
  a lower factor would make all simulated time since that anchor "early" (1.0 -> 0.5 after 160 s: a
  160 s wait); a higher one would make it "late" and step as fast as possible to catch up;
- when the loop falls more than ``max_lag_s`` behind (a stall, a slow machine): it goes on from now
  instead of bursting to catch up;
- when simulated time goes backwards (a reset that restarts the clock);
- at every call with factor 0 (as fast as possible), so switching back to a positive factor starts clean.

``set_factor`` may be called from another thread: it only records the request, which the loop applies at
its next ``delay_s`` (the loop wakes early for it; see ``SimNode``).
"""

from __future__ import annotations

import threading


class Pacing:
    def __init__(self, factor: float, max_lag_s: float = 0.25) -> None:
        if not factor >= 0.0:
            raise ValueError(f"real-time factor must be >= 0, got {factor}")
        self.factor = float(factor)
        self.max_lag_s = max_lag_s
        self._requested: float | None = None
        self._request_lock = threading.Lock()
        self._anchor: tuple[float, float] | None = None  # (sim_s, wall_s)
        self.reanchors = 0  # after stalls or clock restarts (not factor changes): reported on diagnostics

    def set_factor(self, factor: float) -> None:
        """Request a new factor; it takes effect at the next ``delay_s`` (re-anchored there)."""
        if not factor >= 0.0:
            raise ValueError(f"real-time factor must be >= 0, got {factor}")
        with self._request_lock:
            self._requested = float(factor)

    def delay_s(self, sim_s: float, wall_s: float) -> float:
        """Wall seconds to wait before simulating past ``sim_s`` (0 when due or late)."""
        with self._request_lock:
            requested, self._requested = self._requested, None
        if requested is not None:
            self.factor = requested
            self._anchor = (sim_s, wall_s)
        if self.factor == 0.0 or self._anchor is None:
            self._anchor = (sim_s, wall_s)
            return 0.0
        sim0, wall0 = self._anchor
        if sim_s < sim0:  # the clock restarted
            self._anchor = (sim_s, wall_s)
            self.reanchors += 1
            return 0.0
        ahead_s = (sim_s - sim0) / self.factor - (wall_s - wall0)
        if ahead_s >= 0.0:
            return ahead_s
        if ahead_s < -self.max_lag_s:
            self._anchor = (sim_s, wall_s)
            self.reanchors += 1
        return 0.0

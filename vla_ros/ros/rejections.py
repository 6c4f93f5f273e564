"""Rejected inputs: counted by reason code and logged on one throttle per reason.

rclpy throttles a log call per call site, so one ``_reject`` helper logging every reason shares one
throttle: a frequent reason (a stray publisher's chunks at 10 Hz) would hide a rare one (a NaN joint state).
Here each reason code has its own throttle on the steady clock (simulated time may stand still), and a
throttled line says how many of the same it stands for.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable


class ReasonLog:
    """``reject(source, code, detail)`` counts ``code`` in ``counter`` and logs at most one line per code
    every ``period_s`` through ``warn`` (a logger method)."""

    def __init__(self, warn: Callable[[str], None], counter: Counter | None = None, period_s: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._warn = warn
        self.counter: Counter[str] = counter if counter is not None else Counter()
        self._period_s = period_s
        self._clock = clock
        self._last_logged: dict[str, float] = {}
        self._suppressed: Counter[str] = Counter()
        self._newest: dict[str, tuple[float, str]] = {}  # code -> (when, "code: detail") of its newest rejection

    def reject(self, source: str, code: str, detail: str = "") -> None:
        self.counter[code] += 1
        self.note(code, detail)
        self.log(f"rejected {source}: {code}" + (f": {detail}" if detail else ""), code)

    def note(self, code: str, detail: str = "") -> None:
        """Remember ``code``'s newest rejection (``reject`` does; a rejection counted elsewhere calls this)."""
        self._newest[code] = (self._clock(), f"{code}: {detail}" if detail else code)

    def recent(self, within_s: float, prefix: str = "") -> dict[str, str]:
        """Code -> "code: detail" of the rejections within the last ``within_s`` whose code starts with
        ``prefix``: what a node's status reports (WARN) while inputs are being refused."""
        now = self._clock()
        return {c: text for c, (at, text) in sorted(self._newest.items()) if c.startswith(prefix) and now - at <= within_s}

    def log(self, line: str, key: str) -> bool:
        """Log ``line`` unless ``key`` was logged within the period; True when logged."""
        now = self._clock()
        last = self._last_logged.get(key)
        if last is not None and now - last < self._period_s:
            self._suppressed[key] += 1
            return False
        more = self._suppressed.pop(key, 0)
        self._last_logged[key] = now
        self._warn(line + (f" (and {more} more like it since the last report)" if more else ""))
        return True

"""Rejected inputs: counted by reason code and logged on one throttle per reason.

rclpy throttles a log call per call site, so one ``_reject`` helper logging every reason shares one
throttle: a frequent reason (a stray publisher's chunks at 10 Hz) would hide a rare one (a NaN joint state).
Here each reason code has its own throttle on the steady clock (simulated time may stand still), and a
throttled line says how many of the same it stands for. ``RecentRefusals`` keeps what was refused lately,
for a status that is WARN while inputs are being refused and OK again once they stop.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Callable


class ReasonLog:
    """``reject(source, code, detail)`` counts ``code`` in ``counter``, notes it in ``recent`` and logs at most
    one line per code every ``period_s`` through ``warn`` (a logger method)."""

    def __init__(
        self,
        warn: Callable[[str], None],
        counter: Counter | None = None,
        period_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        recent_s: float = 1.0,
    ) -> None:
        self._warn = warn
        self.counter: Counter[str] = counter if counter is not None else Counter()
        self._period_s = period_s
        self._clock = clock
        self._last_logged: dict[str, float] = {}
        self._suppressed: Counter[str] = Counter()
        self.recent = RecentRefusals(recent_s)  # what a node's status reports while inputs are being refused

    def reject(self, source: str, code: str, detail: str = "", log_only: bool = False) -> None:
        """``log_only``: neither counted nor noted, for a refusal counted elsewhere that no status reports
        (the policy's refusals for timing: its session counts them per source)."""
        if not log_only:
            self.counter[code] += 1
            self.recent.note(source, code, detail, self._clock())
        self.log(f"rejected {source}: {code}" + (f": {detail}" if detail else ""), code)

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


class RecentRefusals:
    """Refusals by (source, code) within the last ``hold_s`` (wall): ``note`` each one, ``recent`` says which
    happened lately, how often and the newest detail. Thread-safe (noted on one thread, read on others)."""

    def __init__(self, hold_s: float = 1.0, max_per_key: int = 1000) -> None:
        self.hold_s = hold_s
        self._max = max_per_key
        self._lock = threading.Lock()
        self._times: dict[tuple[str, str], deque] = {}
        self._detail: dict[tuple[str, str], str] = {}

    def note(self, source: str, code: str, detail: str, now_s: float) -> None:
        with self._lock:
            key = (source, code)
            self._times.setdefault(key, deque(maxlen=self._max)).append(now_s)
            self._detail[key] = detail

    def recent(self, now_s: float) -> list[tuple[str, str, int, str]]:
        """(source, code, refusals in the last hold_s, the newest one's detail), sorted by source and code."""
        out = []
        with self._lock:
            for key in sorted(self._times):
                times = self._times[key]
                while times and times[0] < now_s - self.hold_s:
                    times.popleft()
                if times:
                    out.append((*key, len(times), self._detail[key]))
        return out

    def by_code(self, now_s: float, prefix: str = "", exclude: tuple[str, ...] = ()) -> dict[str, str]:
        """Code -> "code: detail" (the newest) of the refusals within ``hold_s`` whose code starts with
        ``prefix``, whatever their source, but those in ``exclude``."""
        return {
            code: f"{code}: {detail}"
            for _, code, _, detail in self.recent(now_s)
            if code.startswith(prefix) and code not in exclude
        }

"""Checks on the policy's inputs that one message alone cannot tell (no rclpy import; time is passed in).

* ``InstructionGate``: ``/vla/instruction`` bounded before any work. Size first, on the raw text: more UTF-8
  bytes than ``max_bytes`` is refused (``instruction_too_long``); a text far too long costs nothing, since
  its length in characters already exceeds the bound. Then rate: an instruction is taken for encoding at
  most once every ``min_interval_s`` (wall); one that arrives sooner waits, and a newer one replaces it
  (the replaced one is refused as ``instruction_flood``: it is never encoded). A flood costs one encoding
  per interval, and the newest instruction wins.
* ``RepeatedFrames``: the run of byte-identical frames of one camera (a frozen camera, a driver that keeps
  republishing its last buffer with fresh stamps), and how far the arm moved meanwhile. Each frame is
  compared with the one before: a strided sample first (a live camera's noise shows there), the whole
  buffer only when the sample matches. On a 640x480 rgb8 frame that is ~25 us for a changed frame and
  ~50 us for a repeated one (test_policy_input_checks prints them). The motion matters because a picture
  may rightly stay the same: a still arm in a scene without sensor noise (a noise-free simulator renders
  it byte for byte the same); a camera that shows the same picture while the arm moves is frozen.
"""

from __future__ import annotations

import threading
from collections import Counter

import numpy as np

from vla_ros.reasons import INSTRUCTION_FLOOD, INSTRUCTION_TOO_LONG

SAMPLE_STRIDE_WORDS = 61  # 8-byte words: a 640x480 rgb8 frame is sampled at 1,889 places (~15 KB)


def instruction_size_error(text: str, max_bytes: int) -> str | None:
    """Why ``text`` is refused for its size (more than ``max_bytes`` bytes of UTF-8), or None. A text with
    more characters than ``max_bytes`` is refused without encoding it: each character is at least one byte."""
    if len(text) > max_bytes:
        return f"instruction has {len(text)} characters, more than max_instruction_bytes={max_bytes} (bytes of UTF-8)"
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        return f"instruction has {size} bytes of UTF-8, more than max_instruction_bytes={max_bytes}"
    return None


def _preview(text: str, chars: int = 40) -> str:
    return repr(text[:chars] + ("..." if len(text) > chars else ""))


class InstructionGate:
    """Size and rate bounds of the instruction input; see the module docstring. Thread-safe: ``offer`` runs
    where messages arrive, ``take`` where instructions are encoded.

    Example with ``min_interval_s`` = 0.5: A offered at 0.0 is taken at 0.0; B at 0.1 waits; C at 0.2 replaces
    B (B refused: instruction_flood); C is taken at 0.5, the earliest after A plus the interval.
    """

    def __init__(self, max_bytes: int, min_interval_s: float) -> None:
        self.max_bytes = int(max_bytes)
        self.min_interval_s = float(min_interval_s)
        self._lock = threading.Lock()
        self._pending: str | None = None
        self._last_text: str | None = None  # the last one taken
        self._last_taken_s: float | None = None
        self.received = 0
        self.taken = 0
        self.refused: Counter[str] = Counter()

    def offer(self, text: str, now_s: float) -> list[tuple[str, str]]:
        """Offer ``text`` (received at ``now_s``, wall). Returns the refusals it caused as (code, detail):
        its own (too long; the instruction in force stays), or that of the waiting one it replaced."""
        text = str(text)
        with self._lock:
            self.received += 1
            reason = instruction_size_error(text, self.max_bytes)
            if reason is not None:
                self.refused[INSTRUCTION_TOO_LONG] += 1
                return [(INSTRUCTION_TOO_LONG, f"{reason}: refused, the instruction in force stays")]
            replaced, self._pending = self._pending, text
            if replaced is None and text == self._last_text:
                self._pending = None  # the instruction already taken, again (a latched topic, a GUI repeating it)
            if replaced is None or replaced == text:
                return []
            self.refused[INSTRUCTION_FLOOD] += 1
            return [
                (
                    INSTRUCTION_FLOOD,
                    f"{_preview(replaced)} replaced by {_preview(text)} before it was encoded "
                    f"(instructions more often than min_instruction_interval_s={self.min_interval_s:g} s)",
                )
            ]

    def wait_s(self, now_s: float) -> float | None:
        """Seconds until the waiting instruction may be taken (0: now); None when none waits."""
        with self._lock:
            if self._pending is None:
                return None
            if self._last_taken_s is None:
                return 0.0
            return max(0.0, self._last_taken_s + self.min_interval_s - now_s)

    def take(self, now_s: float) -> str | None:
        """The waiting instruction when its turn has come (``min_interval_s`` after the last one taken), else None."""
        wait = self.wait_s(now_s)
        if wait is None or wait > 0.0:
            return None
        with self._lock:
            text, self._pending = self._pending, None
            if text is not None:
                self._last_text, self._last_taken_s = text, now_s
                self.taken += 1
            return text

    def values(self) -> dict:
        """Counts for a status: received, encoded (taken), waiting, refused by reason."""
        with self._lock:
            out = {"received": self.received, "encoded": self.taken, "waiting": int(self._pending is not None)}
            out.update({f"refused.{k}": v for k, v in sorted(self.refused.items())})
            return out


def _words(data) -> tuple[np.ndarray, np.ndarray]:
    """A frame's bytes as (8-byte words, the 0-7 bytes after them), without copying."""
    if isinstance(data, np.ndarray):
        raw = (
            data.reshape(-1).view(np.uint8)
            if data.flags.c_contiguous
            else np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        )
    elif isinstance(data, (list, tuple)):
        raw = np.asarray(data, dtype=np.uint8)
    else:
        raw = np.frombuffer(data, dtype=np.uint8)
    n = raw.size // 8 * 8
    return raw[:n].view(np.uint64), raw[n:]


class RepeatedFrames:
    """The run of byte-identical frames of one camera, by their stamps.

    ``add(signature, data, stamp_ns)`` after each accepted frame (``signature``: what else must match, e.g.
    encoding and size); ``count`` is the frames in the current run (1: the newest differs from the one
    before) and ``span_s`` the time between the oldest and the newest stamp in it. ``observe_state(q)``
    with each joint state: ``motion`` is then the furthest any joint got during the run from where the first
    state of the run had it. The previous frame is kept by reference (the message's own buffer), not copied.
    """

    def __init__(self) -> None:
        self._prev: tuple | None = None  # (signature, words, tail)
        self.count = 0
        self.first_ns = self.last_ns = 0
        self._q0: np.ndarray | None = None  # the joint positions when the run began
        self.motion = 0.0

    def add(self, signature, data, stamp_ns: int) -> bool:
        """Take one frame; True when it repeats the one before byte for byte."""
        words, tail = _words(data)
        same = self._prev is not None and self._same(signature, words, tail)
        self._prev = (signature, words, tail)
        stamp_ns = int(stamp_ns)
        if same:
            self.count += 1
            self.first_ns, self.last_ns = min(self.first_ns, stamp_ns), max(self.last_ns, stamp_ns)
        else:
            self.count, self.first_ns, self.last_ns = 1, stamp_ns, stamp_ns
            self._q0, self.motion = None, 0.0
        return same

    def observe_state(self, q: np.ndarray) -> None:
        """The arm's joint positions now (rad or m per joint); the first after a run began is its reference."""
        if self.count == 0:
            return
        if self._q0 is None:
            self._q0 = np.array(q, dtype=np.float64)
        else:
            self.motion = max(self.motion, float(np.max(np.abs(q - self._q0))))

    def _same(self, signature, words: np.ndarray, tail: np.ndarray) -> bool:
        prev_signature, prev_words, prev_tail = self._prev
        if signature != prev_signature or words.size != prev_words.size or not np.array_equal(tail, prev_tail):
            return False
        s = SAMPLE_STRIDE_WORDS
        return bool(np.array_equal(words[::s], prev_words[::s]) and np.array_equal(words, prev_words))

    @property
    def span_s(self) -> float:
        return (self.last_ns - self.first_ns) * 1e-9

    def frozen(self, threshold_s: float, min_motion: float = 0.0) -> bool:
        """Whether the newest frames are one picture repeated for ``threshold_s`` or more of stamps while the
        arm moved at least ``min_motion`` (0: whatever it did)."""
        return self.count >= 2 and threshold_s > 0 and self.span_s >= threshold_s and self.motion >= min_motion

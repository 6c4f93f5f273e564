"""Input watchdogs on a clock that moves (no rclpy import).

A node on simulated time that measures an input's age on ROS time sees nothing wrong when the simulator
dies: ``/clock`` stops, so every age stops too ("joint_state_age_s 0.005" for the whole outage). Each
``InputWatch`` therefore keeps when its input last arrived on the steady clock *and* on ROS time, and calls
it stopped once it has been silent for longer than its timeout on either: the steady clock catches a dead
simulator, driver or upstream node; ROS time catches an input that cannot keep up with a simulator
running faster than real time. A backwards ROS time jump (a simulator reset) restarts the ROS-time age.

The node runs ``check`` on a steady-clock timer a few times per timeout and publishes diagnostics as soon
as an input stops or comes back, so a dead input is reported within its timeout plus one check period.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from vla_ros.ros.diagnostics import ERROR

NS = 1_000_000_000
# Checks per second (steady clock): a stopped input is reported within its timeout plus one period.
CHECK_RATE_HZ = 10.0


@dataclasses.dataclass
class InputWatch:
    """One input. ``what`` names it for people ("joint states on /joint_states"); ``hint`` says what its
    silence usually means ("simulator dead?"); ``level`` is the diagnostic level once it stopped."""

    what: str
    timeout_s: float
    level: bytes
    hint: str = ""
    last_mono_ns: int | None = None
    last_ros_ns: int | None = None
    count: int = 0

    def seen(self, mono_ns: int, ros_ns: int | None = None) -> None:
        self.last_mono_ns = mono_ns
        self.last_ros_ns = ros_ns
        self.count += 1

    def silence_s(self, mono_ns: int, ros_ns: int | None = None) -> float | None:
        """Seconds since the input last arrived, the longer of steady and ROS time; None if never."""
        if self.last_mono_ns is None:
            return None
        silence = (mono_ns - self.last_mono_ns) / NS
        if ros_ns is not None and self.last_ros_ns is not None:
            if ros_ns < self.last_ros_ns:  # time restarted: its age restarts with it
                self.last_ros_ns = ros_ns
            silence = max(silence, (ros_ns - self.last_ros_ns) / NS)
        return silence

    def stopped(self, mono_ns: int, ros_ns: int | None = None) -> bool:
        silence = self.silence_s(mono_ns, ros_ns)
        return silence is not None and silence > self.timeout_s

    def describe(self, mono_ns: int, ros_ns: int | None = None) -> str:
        silence = self.silence_s(mono_ns, ros_ns)
        if silence is None:
            return f"no {self.what} yet"
        text = f"no {self.what} for {silence:.1f} s"
        return f"{text}: {self.hint}" if self.hint else text


def input_watches(
    params: dict, joint_states_topic: str, chunks: InputWatch, use_sim_time: bool
) -> dict[str, InputWatch]:
    """The inputs the safety filter and the controller both watch, in the order their diagnostics list them:
    joint states on ``joint_states_topic`` (as resolved), ``chunks`` (each node says whose), and on simulated
    time /clock; timeouts from ``params`` (``Watchdog.TIMEOUT_PARAMS``)."""
    watches = {
        "joint_states": InputWatch(
            f"joint states on {joint_states_topic}",
            params[Watchdog.TIMEOUT_PARAMS["joint_states"]],
            ERROR,
            "robot driver or simulator dead?",
        ),
        "chunks": chunks,
    }
    if use_sim_time:
        watches["clock"] = InputWatch(
            "simulated time (/clock)", params[Watchdog.TIMEOUT_PARAMS["clock"]], ERROR, "simulator dead or paused?"
        )
    return watches


class Watchdog:
    """A node's watched inputs; ``check`` reports the stopped ones and whether anything changed."""

    def __init__(self, watches: dict[str, InputWatch]) -> None:
        self.watches = watches
        self._stopped: frozenset[str] = frozenset()
        self.stops = 0  # inputs that stopped, counted at each stop
        self._last_ros_ns: int | None = None

    def __getitem__(self, key: str) -> InputWatch:
        return self.watches[key]

    @property
    def stopped_keys(self) -> frozenset[str]:
        """The inputs found stopped at the last ``check``."""
        return self._stopped

    # The parameter that sets each input's timeout, the same in every node that watches it.
    TIMEOUT_PARAMS = {"joint_states": "joint_state_timeout_s", "chunks": "chunk_timeout_s", "clock": "clock_timeout_s"}

    def set_timeouts(self, values: dict) -> None:
        """Apply the ``*_timeout_s`` parameters in ``values`` to the inputs this node watches."""
        for key, name in self.TIMEOUT_PARAMS.items():
            if key in self.watches and name in values:
                self.watches[key].timeout_s = values[name]

    def stopped(self, mono_ns: int, ros_ns: int | None = None) -> list[tuple[str, InputWatch]]:
        """[(key, watch)] of the inputs that stopped."""
        return [(k, w) for k, w in self.watches.items() if w.stopped(mono_ns, ros_ns)]

    def check(self, mono_ns: int, ros_ns: int | None = None) -> tuple[list[tuple[str, InputWatch]], bool]:
        """(the inputs that stopped, True if that set changed since the last check)."""
        stopped = self.stopped(mono_ns, ros_ns)
        keys = frozenset(k for k, _ in stopped)
        changed = keys != self._stopped
        self.stops += len(keys - self._stopped)
        self._stopped = keys
        return stopped, changed

    def poll(self, mono_ns: int, ros_ns: int, report: Callable[[str, str], None]) -> bool:
        """The nodes' steady-clock check: ROS time advancing counts as /clock arriving (0: no /clock yet);
        whenever the set of stopped inputs changes, each one in it is reported as
        ``report(description, "input.<key>")`` (the node's log throttles per key). True when the set changed
        (time to publish diagnostics)."""
        if "clock" in self.watches and ros_ns != self._last_ros_ns and ros_ns != 0:
            self._last_ros_ns = ros_ns
            self.watches["clock"].seen(mono_ns, None)
        stopped, changed = self.check(mono_ns, ros_ns)
        if changed:
            for key, watch in stopped:
                report(watch.describe(mono_ns, ros_ns), f"input.{key}")
        return changed

    def values(self, mono_ns: int, ros_ns: int | None = None) -> dict[str, float | str]:
        """Silence per input for diagnostics (``silence_s.<key>``, "never" before the first message)."""
        out: dict[str, float | str] = {}
        for key, watch in self.watches.items():
            silence = watch.silence_s(mono_ns, ros_ns)
            out[f"silence_s.{key}"] = "never" if silence is None else silence
        return out

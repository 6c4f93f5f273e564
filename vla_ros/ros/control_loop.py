"""The controller's loop runner: one control cycle per period, in the mode ``loop_mode`` names.

``ControlLoop`` calls ``cycle(now_ns, period_s)`` once per period, ``now_ns`` the node's ROS time (wall or
simulated) and ``period_s`` the time since the previous cycle on the loop's own clock; the cycle returns False
when the node is shutting down. Modes (``resolve_loop_mode``):

- ``inline`` (wall time; the default there): cycles run against absolute deadlines on the monotonic clock
  (sleep, then a short busy-wait of ``spin_ns``), the way ros2_control's control node does, in the one thread
  that also serves the node's callbacks, only in the time before each deadline less ``CALLBACK_GUARD_NS``, so
  no other Python thread ever holds the GIL the loop needs;
- ``thread`` (wall time): the same deadlines in a thread of their own beside the executor's;
- ``timer`` (simulated time; also on wall time if asked): an rclpy timer on the node's clock, so the sim's
  ``/clock`` drives the loop.

``realtime_priority`` > 0 runs the loop's thread under SCHED_FIFO (thread mode: the executor thread one step
below it). Statistics: every cycle's period and compute time go into ``stats`` (``control.LoopStats``) under
the node's lock, with the deadlines dropped when the loop fell a whole period behind (``skipped_cycles``) and,
inline, the callbacks that ran into the busy-wait (``late_callbacks``); ``snapshot`` and ``status`` make the
node's ``loop`` diagnostic of them.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable

import rclpy
from rclpy.executors import SingleThreadedExecutor

from vla_ros.control import LoopStats
from vla_ros.control.loop_stats import assess
from vla_ros.ros.diagnostics import OK, WARN

# Inline mode: callbacks are served only while at least this much time is left before the next deadline, so
# one that starts late still ends before it (measured: the diagnostics report 1.2 ms, a 50-point chunk
# 0.4-0.7 ms, a joint state 0.15 ms).
CALLBACK_GUARD_NS = 2_500_000
# Thread mode: a waking loop thread gets the GIL within this, not the default 5 ms. Under SCHED_FIFO (loop and
# executor threads) a hand-over is immediate, so the shorter interval wins (bench: p99 0.44 ms idle, 0.95 ms
# loaded); with normal scheduling each hand-over can wait for the kernel to run the other thread, and the
# shorter interval made p99 three times worse than 0.5 ms does.
GIL_SWITCH_INTERVAL_S = 0.0005
GIL_SWITCH_INTERVAL_FIFO_S = 0.0001
# How the start-up line names each mode.
MODE_DESCRIPTIONS = {
    "inline": "one thread, callbacks between cycles",
    "thread": "loop thread",
    "timer": "executor timer",
}


def resolve_loop_mode(loop_mode: str, use_sim_time: bool) -> str:
    """``inline``, ``thread`` or ``timer`` for a ``loop_mode`` value. Raises ValueError for inline or thread on
    simulated time."""
    if loop_mode == "auto":
        return "timer" if use_sim_time else "inline"
    if loop_mode in ("inline", "thread") and use_sim_time:
        # These pace themselves on the monotonic clock and would not follow /clock (pauses, real-time factor).
        raise ValueError(f"loop_mode={loop_mode} needs wall time (use_sim_time is true): use loop_mode auto or timer")
    return loop_mode


def set_realtime_priority(logger, priority: int, who: str = "control loop thread") -> bool:
    """Run the calling thread under SCHED_FIFO (on Linux, pid 0 means this thread, not the process);
    False (and a warning) where the system does not allow it."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
        logger.info(f"{who} runs SCHED_FIFO priority {priority}")
        return True
    except (OSError, AttributeError) as err:
        logger.warning(f"realtime_priority {priority} not applied ({err}); running with normal scheduling")
        return False


class ControlLoop:
    """Runs ``cycle`` every ``period_s`` on ``node`` in ``mode`` (a resolved mode: ``resolve_loop_mode``).

    Constructed where the node's other timers are created (timer mode creates its timer here; thread mode sets
    the executor thread's priority and the GIL switch interval); ``start()`` last in the node's constructor
    (thread mode starts its thread), ``spin()`` is what the node's ``spin`` runs, ``stop()`` ends it (twice is
    fine). ``lock`` is the node's: ``stats`` and the counters are written under it, so the node reads them
    together with its core. ``spin_ns`` (the busy-wait) may be changed while running: it is read at each
    deadline."""

    def __init__(
        self,
        node,
        mode: str,
        period_s: float,
        cycle: Callable[[int, float], bool],
        lock: threading.Lock,
        *,
        stats_window: int,
        realtime_priority: int = 0,
        spin_us: int = 0,
    ) -> None:
        self.mode = mode
        self.period_s = period_s
        self.stats = LoopStats(period_s, stats_window)
        self.spin_ns = spin_us * 1000
        self.skipped_cycles = 0  # wall modes: deadlines dropped when the loop fell a whole period behind
        self.late_callbacks = 0  # inline mode: callbacks that ran past the guard into the busy-wait or later
        self._node = node
        self._cycle = cycle
        self._lock = lock
        self._priority = realtime_priority
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_tick_ns: int | None = None
        logger = node.get_logger()
        if mode == "timer":
            if realtime_priority > 0:
                set_realtime_priority(logger, realtime_priority)  # this thread spins the executor, hence the timer
            self._timer = node.create_timer(period_s, self._tick)
        elif mode == "thread":
            fifo = False
            if realtime_priority > 0:
                # The executor thread (this one: it spins) runs one step below the loop thread. The loop
                # needs the GIL, and a GIL holder preempted by an ordinary process (the policy, a camera
                # driver) would stall the loop behind it however high the loop's own priority: priority
                # inversion through the GIL. The loop thread, created in start(), inherits this and raises itself.
                fifo = set_realtime_priority(logger, max(1, realtime_priority - 1), "executor thread")
            sys.setswitchinterval(GIL_SWITCH_INTERVAL_FIFO_S if fifo else GIL_SWITCH_INTERVAL_S)

    def describe(self) -> str:
        return MODE_DESCRIPTIONS[self.mode]

    def snapshot(self) -> tuple[dict, dict[str, int]]:
        """Under the node's lock: the statistics' summary and the mode's own counters (wall modes: the
        deadlines dropped when the loop fell a whole period behind; inline: the late callbacks)."""
        counters = {}
        if self.mode in ("inline", "thread"):
            counters["skipped_cycles"] = self.skipped_cycles
        if self.mode == "inline":
            counters["late_callbacks"] = self.late_callbacks
        return self.stats.summary(), counters

    def status(self, snapshot: tuple[dict, dict[str, int]], rate_hz: float, use_sim_time: bool) -> tuple:
        """(level, message, values) of the node's ``loop`` diagnostic from a ``snapshot``: on simulated time the
        timing is information unless the loop falls behind (``control.loop_stats.assess``)."""
        summary, counters = snapshot
        values = {
            k.replace("period_err_ms_", "period_err_ms.").replace("compute_ms_", "compute_ms."): v
            for k, v in summary.items()
        }
        values["rate_hz"] = rate_hz
        values["clock"] = "sim" if use_sim_time else "wall"
        values["loop_mode"] = self.mode
        values.update(counters)
        ok, message = assess(summary, self.period_s, use_sim_time)
        return OK if ok else WARN, message, values

    def start(self) -> None:
        """Thread mode: start the loop thread (call last in the node's constructor, so a failing constructor
        never leaves a loop running)."""
        if self.mode == "thread":
            self._thread = threading.Thread(target=self._run, name="control-loop", daemon=True)
            self._thread.start()

    def spin(self) -> None:
        """Inline mode: this thread alone runs the cycles and, between them, the node's callbacks, so nothing
        else in the process competes with the loop for the GIL. Otherwise: rclpy.spin."""
        node = self._node
        if self.mode != "inline":
            rclpy.spin(node)
            return
        if self._priority > 0:
            set_realtime_priority(node.get_logger(), self._priority, "control loop (inline)")
        executor = SingleThreadedExecutor(context=node.context)
        executor.add_node(node)
        try:
            self._run(executor)
        finally:
            executor.remove_node(node)
            executor.shutdown()

    def stop(self) -> None:
        """Stop the loop (and join its thread); safe to call twice."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2.0)

    def _tick(self) -> None:
        """Timer mode: one cycle per timer callback, the period measured on the node's clock."""
        t0 = time.perf_counter()
        now_ns = self._node.get_clock().now().nanoseconds
        last = self._last_tick_ns
        period_s = (now_ns - last) * 1e-9 if last is not None else self.period_s
        if not self._cycle(now_ns, period_s):
            return
        self._last_tick_ns = now_ns
        if last is not None and now_ns > last:  # a backwards jump is counted by the executor, not timed
            with self._lock:
                self.stats.record(period_s, time.perf_counter() - t0)

    def _serve_callbacks(self, executor: SingleThreadedExecutor, deadline: int) -> None:
        """Inline mode: run ready callbacks, waiting for more, until the guard before ``deadline``."""
        while not self._stop.is_set():
            room = deadline - CALLBACK_GUARD_NS - time.monotonic_ns()
            if room <= 0:
                return
            executor.spin_once(timeout_sec=room * 1e-9)
            if deadline - time.monotonic_ns() < self.spin_ns:  # a callback ran into the busy-wait (or later)
                self.late_callbacks += 1
                return

    def _run(self, executor: SingleThreadedExecutor | None = None) -> None:
        """Inline and thread modes: cycles at absolute deadlines on the monotonic clock (next += period), so a
        late wake-up does not shift the cycles after it. The period given to the cycle and to the statistics
        is the time between cycle starts on the same clock; the cycle still gets the node's ROS time. With an
        ``executor`` (inline mode) its callbacks run in the time before each deadline."""
        node = self._node
        if executor is None and self._priority > 0:
            set_realtime_priority(node.get_logger(), self._priority)  # applies to this thread only
        period_ns = round(self.period_s * 1e9)
        deadline = time.monotonic_ns() + period_ns
        last_start: int | None = None
        while not self._stop.is_set() and node.context.ok():
            if executor is not None:
                self._serve_callbacks(executor, deadline)
            spin_ns = self.spin_ns
            remaining = deadline - time.monotonic_ns()
            if remaining > spin_ns:
                time.sleep((remaining - spin_ns) * 1e-9)
            # The last stretch busy-waits: sleep wake-ups are late by up to the kernel's timer slack.
            while time.monotonic_ns() < deadline:
                pass
            start = time.monotonic_ns()
            t0 = time.perf_counter()
            if self._stop.is_set() or not node.context.ok():
                break
            period_s = (start - last_start) * 1e-9 if last_start is not None else self.period_s
            if not self._cycle(node.get_clock().now().nanoseconds, period_s):
                break
            deadline += period_ns
            behind = time.monotonic_ns() - deadline
            skipped = behind // period_ns if behind > period_ns else 0
            if skipped:
                deadline = time.monotonic_ns()  # re-anchor: run now instead of a burst of catch-up cycles
            with self._lock:
                if last_start is not None:
                    self.stats.record(period_s, time.perf_counter() - t0)
                self.skipped_cycles += skipped
            last_start = start

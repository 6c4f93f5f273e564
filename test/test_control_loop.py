"""The controller's loop runner (``vla_ros.ros.control_loop``) on a real rclpy node, in each of its modes.

The launched controller's loop is covered end to end in test_controller_node.py (modes, SCHED_FIFO, the busy-wait
changed at run time) and timed by ``vla-ros bench controller``; these check the runner alone: what it passes to the
cycle, that a cycle returning False ends it, that stop() ends it, and what it reports.
"""

import sys
import threading

import pytest
import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rosgraph_msgs.msg import Clock
from std_msgs.msg import Header

from vla_ros.ros.control_loop import ControlLoop, resolve_loop_mode
from vla_ros.ros.diagnostics import OK
from vla_ros.ros.time import time_msg_from_ns

PERIOD_S = 0.01


@pytest.fixture
def context():
    context = rclpy.Context()
    rclpy.init(context=context)
    yield context
    rclpy.try_shutdown(context=context)


@pytest.fixture
def switch_interval():
    """Thread mode sets the interpreter's GIL switch interval (process-wide): put it back."""
    before = sys.getswitchinterval()
    yield
    sys.setswitchinterval(before)


def spin_until(executor, predicate, wall_timeout_s: float = 10.0) -> bool:
    deadline = threading.Event()
    timer = threading.Timer(wall_timeout_s, deadline.set)
    timer.start()
    try:
        while not predicate() and not deadline.is_set():
            executor.spin_once(timeout_sec=0.05)
    finally:
        timer.cancel()
    return predicate()


def test_auto_picks_inline_on_wall_time_and_timer_on_simulated_time_and_wall_modes_refuse_simulated_time():
    assert resolve_loop_mode("auto", use_sim_time=False) == "inline"
    assert resolve_loop_mode("auto", use_sim_time=True) == "timer"
    for mode in ("inline", "thread", "timer"):
        assert resolve_loop_mode(mode, use_sim_time=False) == mode
    assert resolve_loop_mode("timer", use_sim_time=True) == "timer"
    for mode in ("inline", "thread"):
        with pytest.raises(ValueError, match=f"loop_mode={mode} needs wall time"):
            resolve_loop_mode(mode, use_sim_time=True)


def test_timer_mode_runs_one_cycle_per_period_of_simulated_time_and_times_it_on_that_clock(context):
    node = Node("loop_timer_test", context=context, parameter_overrides=[Parameter("use_sim_time", value=True)])
    sim = Node("loop_timer_test_clock", context=context)
    clock = sim.create_publisher(Clock, "/clock", 10)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    executor.add_node(sim)
    cycles = []
    loop = ControlLoop(
        node, "timer", PERIOD_S, lambda now_ns, period_s: cycles.append((now_ns, period_s)) or True,
        threading.Lock(), stats_window=100,
    )  # fmt: skip
    try:
        assert loop.describe() == "executor timer"
        published = []
        for i in range(40):  # simulated time from 5 s in steps of one period; each step one cycle
            now_ns = 5_000_000_000 + i * 10_000_000
            published.append(now_ns)
            clock.publish(Clock(clock=time_msg_from_ns(now_ns)))
            n = len(cycles)
            spin_until(executor, lambda n=n: len(cycles) > n, 2.0)
        assert len(cycles) >= 20, cycles
        times = [t for t, _ in cycles]
        assert set(times) <= set(published) and times == sorted(times), times
        # Each cycle's period is the simulated time since the previous one (the first: the nominal period).
        assert cycles[0][1] == PERIOD_S
        for (t0, _), (t1, period_s) in zip(cycles, cycles[1:]):
            assert period_s == pytest.approx((t1 - t0) * 1e-9)
        summary, counters = loop.snapshot()
        assert summary["cycles"] == len({t for t in times}) - 1 and counters == {}  # no deadlines of its own
        level, _, values = loop.status(loop.snapshot(), 100.0, use_sim_time=True)
        assert values["clock"] == "sim" and values["loop_mode"] == "timer" and values["rate_hz"] == 100.0
        assert "skipped_cycles" not in values and "late_callbacks" not in values
        assert level == OK, values
    finally:
        loop.stop()
        executor.shutdown()
        node.destroy_node()
        sim.destroy_node()


def test_thread_mode_runs_cycles_in_its_own_thread_at_absolute_deadlines_until_stopped(context, switch_interval):
    node = Node("loop_thread_test", context=context)
    cycles = []
    enough = threading.Event()

    def cycle(now_ns: int, period_s: float) -> bool:
        cycles.append((threading.current_thread().name, now_ns, period_s))
        if len(cycles) >= 30:
            enough.set()
        return True

    loop = ControlLoop(node, "thread", PERIOD_S, cycle, threading.Lock(), stats_window=100, spin_us=300)
    try:
        assert loop.describe() == "loop thread"
        assert not cycles  # nothing runs before start()
        loop.start()
        assert enough.wait(timeout=30), len(cycles)
    finally:
        loop.stop()
        loop.stop()  # twice is fine
    n = len(cycles)
    assert not loop._thread.is_alive()
    assert {name for name, _, _ in cycles} == {"control-loop"}
    assert all(period_s > 0 for _, _, period_s in cycles)
    # The cycle gets the node's ROS time (wall time here), increasing from cycle to cycle.
    stamps = [now_ns for _, now_ns, _ in cycles]
    assert stamps == sorted(stamps) and stamps[0] > 0
    summary, counters = loop.snapshot()
    assert summary["cycles"] == n - 1 and set(counters) == {"skipped_cycles"}, (summary, counters)
    # Absolute deadlines, a late cycle not made up with a burst: never faster than the period on average.
    assert summary["period_ms_mean"] > 0.9 * PERIOD_S * 1e3, summary
    _, _, values = loop.status(loop.snapshot(), 100.0, use_sim_time=False)
    assert values["clock"] == "wall" and values["loop_mode"] == "thread"
    assert list(values)[-1] == "skipped_cycles" and "late_callbacks" not in values
    node.destroy_node()


def test_inline_mode_serves_the_nodes_callbacks_between_cycles_in_one_thread_and_ends_when_a_cycle_says_so(context):
    node = Node("loop_inline_test", context=context)
    pub = node.create_publisher(Header, "/loop_inline_test/ping", 10)
    heard = []
    node.create_subscription(Header, "/loop_inline_test/ping", lambda m: heard.append(threading.current_thread()), 10)
    cycles = []

    def cycle(now_ns: int, period_s: float) -> bool:
        cycles.append(threading.current_thread())
        pub.publish(Header(stamp=time_msg_from_ns(now_ns)))
        return len(heard) < 5 and len(cycles) < 3000  # the callbacks ran: done (or give up after 30 s)

    loop = ControlLoop(node, "inline", PERIOD_S, cycle, threading.Lock(), stats_window=100, spin_us=300)
    assert loop.describe() == "one thread, callbacks between cycles"
    loop.start()  # nothing to start inline
    assert not cycles
    loop.spin()  # returns once a cycle returned False
    assert len(heard) >= 5, len(cycles)
    assert set(cycles) == set(heard) == {threading.current_thread()}
    summary, counters = loop.snapshot()
    assert summary["cycles"] == len(cycles) - 2  # the first has no period, the last ended the loop untimed
    assert set(counters) == {"skipped_cycles", "late_callbacks"}
    _, _, values = loop.status(loop.snapshot(), 100.0, use_sim_time=False)
    assert list(values)[-2:] == ["skipped_cycles", "late_callbacks"] and values["loop_mode"] == "inline"
    loop.stop()
    node.destroy_node()

"""controller_node: executes the safe action chunks at 100 Hz on the node's clock (wall or simulated).

Subscribes ``/vla/safe_action_chunk`` (trajectory_msgs/JointTrajectory, from the safety filter) and
``/joint_states``; every control period it samples the chunk executor (``vla_ros.control``: time-stamped
chunk execution, blending, watchdog, limits) and sends the command to one output interface:

- ``forward_position``: std_msgs/Float64MultiArray on ``/<position_controller>/commands`` (ros2_control
  forward position controller; values in the order of the ``joints`` parameter);
- ``joint_trajectory``: trajectory_msgs/JointTrajectory on ``/<trajectory_controller>/joint_trajectory``
  (ros2_control joint trajectory controller, JTC): every period a trajectory stamped now whose first point
  (``time_from_start`` 0) is this period's command, then ``trajectory_points`` points of look-ahead one
  period apart, then a controlled stop to rest. JTC follows it from its own first point, never from the
  measured state (so nothing snaps back between messages, whatever ``interpolate_from_desired_state`` or
  ``open_loop_control`` say), every distro accepts it (the last velocity is zero), and if the stream
  stops JTC brakes the arm within the acceleration limits (``vla_ros.control.ros2_control``);
- ``isaac``: sensor_msgs/JointState on ``/joint_command`` (Isaac Sim's ROS 2 bridge).

Before sending to a ros2_control controller the node fetches that controller's ``joints`` parameter and
sends nothing while it does not fit (``controller_check``; ``vla_ros.ros.controller_check``).

Loop (``loop_mode``): on wall time the cycles run against absolute deadlines on the monotonic clock
(sleep, then a short busy-wait), the way ros2_control's control node does. ``inline`` (the default there)
does it in the one thread that also serves the callbacks, only in the time before each deadline less a
guard, so no other Python thread ever holds the GIL the loop needs; ``thread`` runs the cycles in their
own thread beside the executor's. On simulated time an rclpy timer runs them, so the sim's ``/clock``
drives the loop. Either way the chunk is sampled at the node's ROS time, and one lock keeps callbacks
(inputs, services, parameters, diagnostics) from interleaving with a cycle.

Only the safety filter feeds the controller: a chunk is executed only if it can have come from a node
in ``trusted_publishers`` (default: the ``safety_filter`` of the same namespace), judged per message from
the ROS graph (``vla_ros.control.sources``: rclpy gives no publisher identity with a message); anything
else is refused as ``unauthorized_source`` and the offending node is named. Chunks are taken raw and their
size is read from the bytes first, so an oversized message is refused before it is deserialized. Behind
the filter, the executor refuses points outside the position limits and segments above the velocity
limits (defence in depth); its output limiter stays the last line.

Resets: ``/vla/episode_reset`` (the simulator's announcement), a backwards clock jump, or the measured
state leaving every recent command by more than the path tolerance drop the plan; the command re-anchors
at the measured state (ramping there from the last command at the limits while commands were being sent,
never jumping), and chunks stamped before the new episode are refused.

Services: ``~/estop`` and ``~/resume`` (std_srvs/Trigger; the e-stop latches until resumed), ``~/enable``
(std_srvs/SetBool; disabled, the arm is brought to rest and the node then sends nothing). ``/diagnostics``
reports the loop timing (period mean, p50/p99 error, overruns; on simulated time as information, see
``control.loop_stats.assess``), the mode, the watchdog, the active chunk's age, the tracking error, every rejected input
by reason, the inputs' liveness (a watchdog on the steady clock: simulated time, joint states and chunks
that stop are reported within their timeout) and the accepted parameter changes. Runtime parameter
changes that loosen a limit or a timeout are refused unless ``allow_runtime_loosening:=true``.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import time

import numpy as np
import rclpy
from rclpy.clock import Clock, ClockType
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from rclpy.serialization import deserialize_message
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, Header
from std_srvs.srv import SetBool, Trigger
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from vla_ros.chunks import ChunkError
from vla_ros.control import ChunkExecutor, LoopStats, Motion
from vla_ros.control.loop_stats import assess
from vla_ros.control.ros2_control import controlled_stop
from vla_ros.control.sources import SourceGate, resolve_trusted
from vla_ros.joint_state_check import JointStateCheck, JointStateRefused, StateSources
from vla_ros.params.controller import PARAMS, TIGHTENING_RULES, config_from_params
from vla_ros.params.tightening import ParamChange
from vla_ros.ros.chunk_msgs import chunk_from_msg
from vla_ros.ros.controller_check import ControllerJointsCheck
from vla_ros.ros.diagnostics import ERROR, OK, WARN, Diagnostics
from vla_ros.ros.episode import EPISODE_RESET_TOPIC, episode_reset_qos, reset_from_msg
from vla_ros.ros.node_main import run_node
from vla_ros.ros.param_guard import ParamGuard
from vla_ros.ros.params import declare_parameters
from vla_ros.ros.publishers import graph_publishers, with_publisher
from vla_ros.ros.qos import incompatible_qos_events, sensor_qos
from vla_ros.ros.rejections import ReasonLog
from vla_ros.ros.time import duration_msg_from_s, ns_from_time_msg, time_msg_from_ns
from vla_ros.ros.trajectory_wire import WireError, trajectory_size
from vla_ros.ros.watchdog import InputWatch, Watchdog

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
# Input watchdog and graph checks per second (steady clock): a stopped input is reported within its
# timeout plus one check period; a publisher on the chunk topic is seen within one period.
WATCHDOG_RATE_HZ = 10.0
# The control loop says it runs on ~/heartbeat (std_msgs/Header, the cycle's ROS time) every this many
# cycles (10 Hz at 100 Hz): the safety filter reports a stalled or dead controller from its silence.
HEARTBEAT_CYCLES = 10
# Two publishers naming the same joint on /joint_states within this long (steady clock) are a conflict; the
# arm holds until one has been silent this long.
STATE_CONFLICT_WINDOW_S = 0.5


def resolve_loop_mode(loop_mode: str, use_sim_time: bool) -> str:
    """``inline``, ``thread`` or ``timer`` for a ``loop_mode`` value. Raises ValueError for inline or thread on
    simulated time."""
    if loop_mode == "auto":
        return "timer" if use_sim_time else "inline"
    if loop_mode in ("inline", "thread") and use_sim_time:
        # These pace themselves on the monotonic clock and would not follow /clock (pauses, real-time factor).
        raise ValueError(f"loop_mode={loop_mode} needs wall time (use_sim_time is true): use loop_mode auto or timer")
    return loop_mode


class ControllerNode(Node):
    def __init__(self, **kwargs) -> None:
        # Before anything can fail: rclpy destroys a half-built node at shutdown, and destroy_node stops the loop.
        self._stop_loop = threading.Event()
        self._loop_thread: threading.Thread | None = None
        super().__init__("controller", **kwargs)
        self.guard = ParamGuard(self, PARAMS, TIGHTENING_RULES)
        p = declare_parameters(self, PARAMS, on_change=self.guard.on_change)
        self._params = dict(p)
        self.core = ChunkExecutor(config_from_params(p))  # ValueError -> run_node reports, exit 2
        self.guard.install(
            self._params,
            build=config_from_params,
            apply=self._apply_params,
            allow_loosening=p["allow_runtime_loosening"],
        )
        cfg = self.core.config
        self._joints = list(cfg.joint_names)
        self._period_s = cfg.period_s
        self.stats = LoopStats(cfg.period_s, p["loop_stats_window"])
        self.diag = Diagnostics(self, hardware_id="controller")
        self.rejections = ReasonLog(self.get_logger().warning, self.diag.rejected)
        self.guard.on_changes(self._on_params_changed)
        self.gate = SourceGate(resolve_trusted(p["trusted_publishers"], self.get_namespace()))  # ValueError -> exit 2
        self._chunks_deserialized = 0
        self._foreign_reported = False
        self._unnamed_before: set[str] = set()
        # joint states: the checks every node makes, with a jump bounded by the robot's own (URDF) velocity limits
        self._state_check = JointStateCheck(self._joints, list(cfg.urdf_velocity_limits))
        # Who publishes the joint states: per message where rclpy says it (StateSources), else from the graph.
        self._state_sources = StateSources(self._joints, STATE_CONFLICT_WINDOW_S)
        self._trusted_states = resolve_trusted(p["trusted_state_publishers"], self.get_namespace())
        self._state_nodes: dict[str, str] = {}  # publisher gid -> node name, from the graph
        self._state_publishers: list = []  # the graph's publishers on /joint_states, refreshed by _check_inputs
        self._hold_why = ""  # why the core holds (a conflict between sources), for diagnostics
        self._per_message_sources = False  # rclpy said who sent a joint state (Kilted on): the graph fallback is off
        self._state_warned = False
        self._last_tick_ns: int | None = None
        self._published = 0
        self._use_sim_time = bool(self.get_parameter("use_sim_time").value)
        self._loop_mode = resolve_loop_mode(p["loop_mode"], self._use_sim_time)  # ValueError -> exit 2
        # Guards self.core and self.stats: the loop thread runs cycles while the executor runs callbacks.
        self._lock = threading.Lock()
        self._spin_ns = p["loop_spin_us"] * 1000
        self._skipped_cycles = 0
        self._late_callbacks = 0  # inline mode: callbacks that ran past the guard into the busy-wait or later

        self._interface = p["output_interface"]
        # JTC runs each trajectory's look-ahead by itself: after a stall the arm is along it, not at rest
        self.core.resume_at_rest = self._interface != "joint_trajectory"
        if self._interface == "forward_position":
            self._topic = f"/{p['position_controller']}/commands"
            self._pub = self.create_publisher(Float64MultiArray, self._topic, 10)
            self._msg = Float64MultiArray()
        elif self._interface == "joint_trajectory":
            self._topic = f"/{p['trajectory_controller']}/joint_trajectory"
            self._pub = self.create_publisher(JointTrajectory, self._topic, 10)
            self._msg = JointTrajectory(joint_names=self._joints)
            # Rows: this period's command, up to 50 look-ahead periods, the stop (see _sample_trajectory).
            self._traj_q = np.zeros((52, len(self._joints)))
            self._traj_v = np.zeros((52, len(self._joints)))
            self._traj_stop_s = 0.0
            self._traj_limits: tuple = (None,)
            # now: JTC plays each message at absolute times from its stamp (latency compensated); zero: from arrival.
            self._traj_stamp = time_msg_from_ns(0) if p["trajectory_stamp"] == "zero" else None
        else:
            self._topic = p["isaac_topic"]
            self._pub = self.create_publisher(JointState, self._topic, 10)
            self._msg = JointState(name=self._joints)
        controller = p["position_controller"] if self._interface == "forward_position" else p["trajectory_controller"]
        self._check = ControllerJointsCheck(
            self,
            self._interface,
            self._pub.topic_name,
            controller,
            self._joints,
            p["controller_check"],
            p["controller_check_timeout_s"],
        )

        # Raw: who may have sent it and how large it is are known before it is deserialized (_on_chunk).
        self._chunk_sub = self.create_subscription(
            JointTrajectory, "/vla/safe_action_chunk", self._on_chunk, 10, raw=True
        )
        self._state_sub = self.create_subscription(
            JointState,
            "/joint_states",
            with_publisher(self._on_joint_state),
            sensor_qos(p["sensor_qos"], 10),
            event_callbacks=incompatible_qos_events(self, "/joint_states", self.diag.count_rejection),
        )
        self.create_subscription(Header, EPISODE_RESET_TOPIC, self._on_episode_reset, episode_reset_qos())
        self._heartbeat = self.create_publisher(
            Header, "~/heartbeat", QoSProfile(depth=1, reliability=ReliabilityPolicy.BEST_EFFORT)
        )
        self._heartbeat_msg = Header(frame_id=self.get_fully_qualified_name())
        self._cycles = 0
        self.watchdog = self._make_watchdog()
        self.create_service(Trigger, "~/estop", self._on_estop)
        self.create_service(Trigger, "~/resume", self._on_resume)
        self.create_service(SetBool, "~/enable", self._on_enable)
        if not p["start_enabled"]:
            self.core.set_enabled(False)
        if self._loop_mode == "timer":
            if p["realtime_priority"] > 0:
                self._set_realtime_priority(p["realtime_priority"])  # this thread spins the executor, hence the timer
            self._timer = self.create_timer(cfg.period_s, self._tick)
        elif self._loop_mode == "thread":
            fifo = False
            if p["realtime_priority"] > 0:
                # The executor thread (this one: it spins) runs one step below the loop thread. The loop
                # needs the GIL, and a GIL holder preempted by an ordinary process (the policy, a camera
                # driver) would stall the loop behind it however high the loop's own priority: priority
                # inversion through the GIL. The loop thread, created below, inherits this and raises itself.
                fifo = self._set_realtime_priority(max(1, p["realtime_priority"] - 1), "executor thread")
            sys.setswitchinterval(GIL_SWITCH_INTERVAL_FIFO_S if fifo else GIL_SWITCH_INTERVAL_S)
        # Diagnostics run on the steady clock, so they keep coming (and say so) while simulated time stands still.
        steady = Clock(clock_type=ClockType.STEADY_TIME)
        self.create_timer(p["diagnostics_period_s"], self._publish_diagnostics, clock=steady)
        self.create_timer(1.0 / WATCHDOG_RATE_HZ, self._check_inputs, clock=steady)
        loop_desc = {
            "inline": "one thread, callbacks between cycles",
            "thread": "loop thread",
            "timer": "executor timer",
        }
        self.get_logger().info(
            f"controlling {len(self._joints)} joints at {cfg.rate_hz:g} Hz on "
            f"{'simulated' if self._use_sim_time else 'wall'} time "
            f"({loop_desc[self._loop_mode]}); "
            f"output {self._interface} on {self._pub.topic_name} in joint order {self._joints} "
            f"(controller_check {p['controller_check']}); blend {cfg.blend_mode} over {cfg.blend_horizon_s:g} s; "
            f"chunks on {self._chunk_sub.topic_name} only from {', '.join(self.gate.trusted)}"
        )
        if self._loop_mode == "thread":  # last, so a failing constructor never leaves a loop running
            self._loop_thread = threading.Thread(target=self._run_loop, name="control-loop", daemon=True)
            self._loop_thread.start()

    def _set_realtime_priority(self, priority: int, who: str = "control loop thread") -> bool:
        """Run the calling thread under SCHED_FIFO (on Linux, pid 0 means this thread, not the process);
        False (and a warning) where the system does not allow it."""
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
            self.get_logger().info(f"{who} runs SCHED_FIFO priority {priority}")
            return True
        except (OSError, AttributeError) as err:
            self.get_logger().warning(
                f"realtime_priority {priority} not applied ({err}); running with normal scheduling"
            )
            return False

    def _make_watchdog(self) -> Watchdog:
        p = self._params
        trusted = " or ".join(self.gate.trusted)
        watches = {
            "joint_states": InputWatch(
                f"joint states on {self.resolve_topic_name('/joint_states')}",
                p["joint_state_timeout_s"],
                ERROR,
                "robot driver or simulator dead?",
            ),
            "chunks": InputWatch(
                f"chunk from {trusted}", p["chunk_timeout_s"], WARN, "policy or safety filter dead, frozen or refusing?"
            ),
        }
        if self._use_sim_time:
            watches["clock"] = InputWatch(
                "simulated time (/clock)", p["clock_timeout_s"], ERROR, "simulator dead or paused?"
            )
        return Watchdog(watches)

    # ---- parameters ------------------------------------------------------------------------------
    def _apply_params(self, config, values: dict, changes: list[ParamChange]) -> None:
        """A request the guard validated as a whole: takes effect between two cycles (one consistent
        snapshot per cycle)."""
        self._params = dict(values)
        self._spin_ns = values["loop_spin_us"] * 1000  # read by the loop thread at its next deadline
        with self._lock:
            self.core.set_config(config)
        self.watchdog.set_timeouts(values)

    def _on_params_changed(self, changes: list[ParamChange]) -> None:
        if changes:
            self.diag.publish(self.get_clock().now().to_msg(), [self.guard.changes_status(changes)])

    # ---- inputs ----------------------------------------------------------------------------------
    def _reject(self, source: str, code: str, detail: str = "") -> None:
        self.rejections.reject(source, code, detail)

    def _on_chunk(self, data: bytes) -> None:
        """In order, each before any work on the message: its source, its size, then its content."""
        why = self.gate.admit(graph_publishers(self, self._chunk_sub.topic_name), time.monotonic_ns())
        if why is not None:
            self._reject("chunk", "unauthorized_source", why)
            return
        self.watchdog["chunks"].seen(time.monotonic_ns(), self.get_clock().now().nanoseconds)
        limit = self.core.config.max_chunk_points
        try:
            _, points = trajectory_size(data)
        except WireError:
            points = None  # not plain CDR (every ROS 2 rmw sends plain CDR): deserialize, then count
        if points is not None and points > limit:
            with self._lock:
                self.core.rejected["too_long"] += 1
            self.rejections.log(
                f"rejected chunk: too_long: {points} points > max_chunk_points={limit} (not deserialized)", "too_long"
            )
            return
        msg = deserialize_message(data, JointTrajectory)
        self._chunks_deserialized += 1
        try:
            chunk = chunk_from_msg(msg)
        except ChunkError as err:
            self._reject("chunk", err.code, str(err))
            return
        with self._lock:
            code = self.core.submit_chunk(chunk)  # the executor counts its own rejections
            detail = self.core.last_rejection
        if code is not None:
            self.rejections.log(f"rejected chunk: {detail}", code)

    def _on_episode_reset(self, msg: Header) -> None:
        stamp_ns, episode = reset_from_msg(msg)
        with self._lock:
            resets = self.core.counters["resets"]
            self.core.reset_episode(stamp_ns, "" if episode is None else str(episode))
            counted = self.core.counters["resets"] > resets  # not the start-up announcement, not a repeat
            if counted:
                self._state_check.forget()  # the simulator placed the arm elsewhere: not a jump
        if counted:
            self.get_logger().info(
                f"episode {episode} began at {stamp_ns * 1e-9:.3f} s: plan dropped, re-anchoring at the measured state"
            )

    def _source_refusal(self, gid: str | None, names, mono_ns: int) -> tuple[str, str] | None:
        """(code, detail) when the state must be refused for who sent it: a publisher not among
        trusted_state_publishers, or one of two naming the same joints (the arm holds meanwhile)."""
        if self._trusted_states:
            if gid is None:  # no publisher per message (Humble, Jazzy): refuse all while a stranger is on the topic
                strangers = [e.label for e in self._state_publishers if e.node not in self._trusted_states]
                return (
                    (
                        "joint_state_untrusted_source",
                        f"{', '.join(strangers)} also publishes: states refused while it does",
                    )
                    if strangers
                    else None
                )
            node = self._state_nodes.get(gid)
            if node is None:  # a publisher the graph listed after the last look
                self._look_at_state_publishers()
                node = self._state_nodes.get(gid, "")
            if node in self._trusted_states:
                return None
            return (
                "joint_state_untrusted_source",
                f"from {node or 'an unnamed node (gid ' + gid + ')'}, not in trusted_state_publishers",
            )
        if gid is None:
            return None
        self._per_message_sources = True
        group = self._state_sources.observe(gid, names, mono_ns)
        if len(group) < 2:
            return None
        labels = ", ".join(self._state_nodes.get(g) or f"gid {g}" for g in group)
        self._hold_why = f"{len(group)} publishers on {self._state_sub.topic_name} ({labels}) name the same joints"
        return "joint_state_conflict", self._hold_why

    def _on_joint_state(self, msg: JointState, gid: str | None = None) -> None:
        if not self._state_check.concerns(msg.name):
            return  # another driver's joints only (a gripper this controller does not command)
        stamp_ns = ns_from_time_msg(msg.header.stamp)
        now_ns = self.get_clock().now().nanoseconds
        with self._lock:  # once: the check's last state and the core's measured state move together
            refused = self._source_refusal(gid, msg.name, time.monotonic_ns())
            if refused is not None:
                code, detail = refused
                if code == "joint_state_conflict":
                    self.core.set_hold(code)
                q = None
            else:
                try:
                    q = self._state_check.check(msg.name, msg.position, stamp_ns)
                except JointStateRefused as err:
                    code, detail, q = err.code, err.detail, None
                else:  # the merged state is as old as its oldest part
                    code = self.core.set_measured(q, self._state_check.stamp_ns, now_ns)
                    detail = self.core.last_rejection
        if q is None:
            self._reject("joint state", code, detail)
            if code == "joint_state_conflict":
                self.watchdog["joint_states"].seen(time.monotonic_ns(), now_ns)  # they arrive: the cause is named apart
            return
        if code is not None:  # counted by the core
            self.rejections.log(f"rejected joint state: {detail}", code)
            if code != "joint_state_before_reset":  # the previous episode's, in flight at a reset: expected
                self.rejections.recent.note("joint state", code, detail, time.monotonic())
            return
        self.watchdog["joint_states"].seen(time.monotonic_ns(), now_ns)

    # ---- services --------------------------------------------------------------------------------
    def _on_estop(self, request, response):
        with self._lock:
            response.message = self.core.request_estop()
        response.success = True
        self.get_logger().warning(f"e-stop: {response.message}")
        return response

    def _on_resume(self, request, response):
        with self._lock:
            response.success, response.message = self.core.resume()
        self.get_logger().info(f"resume: {response.message}")
        return response

    def _on_enable(self, request, response):
        with self._lock:
            response.message = self.core.set_enabled(bool(request.data))
        response.success = True
        self.get_logger().info(f"enable={bool(request.data)}: {response.message}")
        return response

    # ---- the control loop ------------------------------------------------------------------------
    def _tick(self) -> None:
        """Timer mode: one cycle per timer callback, the period measured on the node's clock."""
        t0 = time.perf_counter()
        now_ns = self.get_clock().now().nanoseconds
        last = self._last_tick_ns
        period_s = (now_ns - last) * 1e-9 if last is not None else self._period_s
        if not self._cycle(now_ns, period_s):
            return
        self._last_tick_ns = now_ns
        if last is not None and now_ns > last:  # a backwards jump is counted by the executor, not timed
            with self._lock:
                self.stats.record(period_s, time.perf_counter() - t0)

    def spin(self) -> None:
        """What run_node runs. Inline mode: this thread alone runs the cycles and, between them, the
        callbacks, so nothing else in the process competes with the loop for the GIL. Otherwise: rclpy.spin."""
        if self._loop_mode != "inline":
            rclpy.spin(self)
            return
        if self._params["realtime_priority"] > 0:
            self._set_realtime_priority(self._params["realtime_priority"], "control loop (inline)")
        executor = SingleThreadedExecutor(context=self.context)
        executor.add_node(self)
        try:
            self._run_loop(executor)
        finally:
            executor.remove_node(self)
            executor.shutdown()

    def _serve_callbacks(self, executor: SingleThreadedExecutor, deadline: int) -> None:
        """Inline mode: run ready callbacks, waiting for more, until the guard before ``deadline``."""
        while not self._stop_loop.is_set():
            room = deadline - CALLBACK_GUARD_NS - time.monotonic_ns()
            if room <= 0:
                return
            executor.spin_once(timeout_sec=room * 1e-9)
            if deadline - time.monotonic_ns() < self._spin_ns:  # a callback ran into the busy-wait (or later)
                self._late_callbacks += 1
                return

    def _run_loop(self, executor: SingleThreadedExecutor | None = None) -> None:
        """Inline and thread modes: cycles at absolute deadlines on the monotonic clock (next += period), so a
        late wake-up does not shift the cycles after it. The period given to the core and to the statistics
        is the time between cycle starts on the same clock; the chunk is still sampled at ROS time. With an
        ``executor`` (inline mode) its callbacks run in the time before each deadline."""
        if executor is None and self._params["realtime_priority"] > 0:
            self._set_realtime_priority(self._params["realtime_priority"])  # applies to this thread only
        period_ns = round(self._period_s * 1e9)
        deadline = time.monotonic_ns() + period_ns
        last_start: int | None = None
        while not self._stop_loop.is_set() and self.context.ok():
            if executor is not None:
                self._serve_callbacks(executor, deadline)
            spin_ns = self._spin_ns
            remaining = deadline - time.monotonic_ns()
            if remaining > spin_ns:
                time.sleep((remaining - spin_ns) * 1e-9)
            # The last stretch busy-waits: sleep wake-ups are late by up to the kernel's timer slack.
            while time.monotonic_ns() < deadline:
                pass
            start = time.monotonic_ns()
            t0 = time.perf_counter()
            if self._stop_loop.is_set() or not self.context.ok():
                break
            period_s = (start - last_start) * 1e-9 if last_start is not None else self._period_s
            if not self._cycle(self.get_clock().now().nanoseconds, period_s):
                break
            deadline += period_ns
            behind = time.monotonic_ns() - deadline
            skipped = behind // period_ns if behind > period_ns else 0
            if skipped:
                deadline = time.monotonic_ns()  # re-anchor: run now instead of a burst of catch-up cycles
            with self._lock:
                if last_start is not None:
                    self.stats.record(period_s, time.perf_counter() - t0)
                self._skipped_cycles += skipped
            last_start = start

    def _cycle(self, now_ns: int, period_s: float) -> bool:
        """The cycle body of both loop modes: update the core, publish. False when shutting down."""
        self._cycles += 1
        if self._cycles % HEARTBEAT_CYCLES == 0 and self.context.ok():
            self._heartbeat_msg.stamp = time_msg_from_ns(now_ns)
            self._heartbeat.publish(self._heartbeat_msg)
        if not self._check.output_allowed:  # the receiver may not get commands: the executor waits too
            self._check.count_withheld()
            return True
        try:
            with self._lock:
                q = self.core.update(now_ns, period_s)  # never raises by design; publishing can
                if q is None:
                    return True
                q = q.tolist()  # the core's buffer changes with the next call; the message gets a copy
                k = self._params["trajectory_points"]
                if self._interface == "joint_trajectory":
                    self._sample_trajectory(k)
            self._publish(q, now_ns, k)
        except Exception as err:  # the loop must keep running; a failing publish is reported, not fatal
            if not self.context.ok():
                return False  # shutting down (SIGTERM/Ctrl-C): the publisher's context is already gone
            with self._lock:
                self.core.counters["tick_errors"] += 1
            self.get_logger().error(f"control cycle failed: {err!r}", throttle_duration_sec=1.0)
        return True

    def _sample_trajectory(self, k: int) -> None:
        """Under the lock, after update: row 0 = this period's command, rows 1..k = the next k periods'
        commands if no input arrives, row k+1 = a controlled stop from there (within the acceleration limits,
        at least one period long so the times stay strictly increasing)."""
        cfg = self.core.config
        if (
            self._traj_limits[0] is not cfg
        ):  # arrays of the limits, rebuilt only when a parameter change swapped the config
            self._traj_limits = (
                cfg,
                *(np.asarray(x) for x in (cfg.acceleration_limits, cfg.position_lower, cfg.position_upper)),
            )
        tq, tv = self._traj_q, self._traj_v
        tq[0], tv[0] = self.core.q_cmd, self.core.v_cmd
        self.core.preview(self._period_s, tq[1 : k + 1], tv[1 : k + 1])
        self._traj_stop_s, tq[k + 1] = controlled_stop(tq[k], tv[k], *self._traj_limits[1:], self._period_s)
        tv[k + 1] = 0.0

    def _publish(self, q: list[float], now_ns: int, k: int) -> None:
        """Only the loop runs this (the message and the trajectory buffers are its own); ``k`` look-ahead points."""
        msg = self._msg
        if self._interface == "forward_position":
            msg.data = q
        elif self._interface == "joint_trajectory":
            tq, tv = self._traj_q, self._traj_v
            times_s = [i * self._period_s for i in range(k + 1)] + [k * self._period_s + self._traj_stop_s]
            msg.header.stamp = self._traj_stamp if self._traj_stamp is not None else time_msg_from_ns(now_ns)
            msg.points = [
                JointTrajectoryPoint(
                    positions=tq[i].tolist(), velocities=tv[i].tolist(), time_from_start=duration_msg_from_s(t)
                )
                for i, t in enumerate(times_s)
            ]
        else:
            msg.header.stamp = time_msg_from_ns(now_ns)
            msg.position = q
        self._pub.publish(msg)
        self._published += 1

    def close(self) -> None:
        """Stop the loop thread (run_node calls this before destroy_node); safe to call twice."""
        self._stop_loop.set()
        thread = self._loop_thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2.0)

    def destroy_node(self) -> None:
        self.close()  # never destroy the publisher under a running cycle
        super().destroy_node()

    # ---- diagnostics -----------------------------------------------------------------------------
    def _publish_diagnostics(self) -> None:
        if self.context.ok():
            self._diagnostics()

    def _check_inputs(self) -> None:
        """Steady-clock timer: looks at the chunk topic's publishers (so one that comes and goes between two
        chunks is still seen) and at the inputs' liveness (simulated time advancing counts as /clock);
        publishes diagnostics at once when an input stops or comes back, or a stranger appears."""
        mono, ros = time.monotonic_ns(), self.get_clock().now().nanoseconds
        foreign = self.gate.observe(graph_publishers(self, self._chunk_sub.topic_name), mono)
        # An endpoint is unnamed for a moment after discovery (the filter's too, at start-up): the gate
        # refuses its chunks meanwhile, but it is reported only if it stays unnamed for two checks.
        unnamed = {e.gid for e in foreign if not e.node}
        foreign = [e for e in foreign if e.node or e.gid in self._unnamed_before]
        self._unnamed_before = unnamed
        if foreign:
            names = ", ".join(e.label for e in foreign)
            self.rejections.log(
                f"{names} publishes on {self._chunk_sub.topic_name}: only {', '.join(self.gate.trusted)} may; "
                "chunks are refused while it is there",
                "source.untrusted",
            )
        changed = self.watchdog.poll(mono, ros, self.rejections.log)
        self._look_at_state_publishers()
        hold, why = self._conflict(mono)
        with self._lock:
            changed |= hold != self.core.held
            self.core.set_hold(hold)
            self._hold_why = why
        if hold and changed:
            self.rejections.log(f"{why}: holding", hold)
        refusing = bool(self._refused_states())
        changed |= refusing != self._state_warned
        self._state_warned = refusing
        if changed or (foreign and not self._foreign_reported):
            self._publish_diagnostics()
        self._foreign_reported = bool(foreign)

    def _look_at_state_publishers(self) -> None:
        """Who publishes joint states now, from the graph, and each publisher's node by its gid."""
        self._state_publishers = graph_publishers(self, self._state_sub.topic_name)
        self._state_nodes = {e.gid: e.node for e in self._state_publishers}

    def _conflict(self, mono_ns: int) -> tuple[str, str]:
        """(hold code, what is wrong) while two sources feed one input, ("", "") otherwise."""
        problems = []
        # with trusted_state_publishers the trusted states are used and others refused per message: no hold
        groups = [] if self._trusted_states else self._state_sources.conflicts(mono_ns)
        if groups:
            labels = "; ".join(", ".join(self._state_nodes.get(g) or f"gid {g}" for g in group) for group in groups)
            problems.append(
                (
                    "joint_state_conflict",
                    f"{sum(map(len, groups))} publishers on {self._state_sub.topic_name} ({labels}) name the same "
                    "joints",
                )
            )
        elif (
            not self._trusted_states
            and not self._per_message_sources
            and len(self._state_publishers) > 1
            and "joint_state_jump" in self._refused_states()
        ):
            # no publisher per message (Humble, Jazzy): a state refused for a jump while two publish is a conflict
            labels = ", ".join(sorted(e.label for e in self._state_publishers))
            problems.append(
                (
                    "joint_state_conflict",
                    f"{len(self._state_publishers)} publishers on {self._state_sub.topic_name} ({labels}) disagree",
                )
            )
        if self._use_sim_time:
            topic = self.resolve_topic_name("/clock")
            clocks = graph_publishers(self, topic)
            if len(clocks) > 1:
                labels = ", ".join(sorted(e.label for e in clocks))
                problems.append(
                    (
                        "clock_conflict",
                        f"{len(clocks)} publishers on {topic} ({labels}): simulated time is not one clock",
                    )
                )
        if not problems:
            return "", ""
        return problems[0][0], "; ".join(text for _, text in problems)

    def _refused_states(self) -> dict[str, str]:
        """Reason code -> the newest refusal of a joint state for it within the last second ("code: detail")."""
        return self.rejections.recent.by_code(time.monotonic(), "joint_state_")

    def _inputs_status(self) -> tuple[bytes, str, dict]:
        """Liveness of /clock, joint states and chunks, and who publishes chunks."""
        mono, ros = time.monotonic_ns(), self.get_clock().now().nanoseconds
        values = self.watchdog.values(mono, ros)
        values["trusted_publishers"] = " ".join(self.gate.trusted)
        values["chunk_publishers"] = " ".join(e.label for e in self.gate.present) or "none"
        values["chunks.deserialized"] = self._chunks_deserialized
        problems = [(w.level, w.describe(mono, ros)) for _, w in self.watchdog.stopped(mono, ros)]
        values["state_publishers"] = " ".join(e.label for e in self._state_publishers) or "none"
        if self._trusted_states:
            values["trusted_state_publishers"] = " ".join(self._trusted_states)
        if self._hold_why:
            problems.append((ERROR, f"{self._hold_why}: holding until only one is left"))
        refused = self._refused_states()
        if refused:
            problems.append((WARN, f"joint states refused: {'; '.join(refused[code] for code in sorted(refused))}"))
        recent = self.gate.recent_untrusted(mono)
        if recent:
            values["untrusted_publishers"] = " ".join(recent)
            problems.append(
                (ERROR, f"untrusted publisher {', '.join(recent)} on {self._chunk_sub.topic_name}: chunks refused")
            )
        if not problems:
            return OK, "all inputs arriving", values
        return max(level for level, _ in problems), "; ".join(text for _, text in problems), values

    def _diagnostics(self) -> None:
        ex = self.core
        now_ns = self.get_clock().now().nanoseconds
        with self._lock:  # one consistent snapshot of the core and the statistics; formatting comes after
            loop = self.stats.summary()
            skipped = self._skipped_cycles
            rate_hz = ex.config.rate_hz
            err, err_joint = ex.tracking_error()
            age = ex.chunk_age_s()
            mode, watchdog, estopped, enabled, motion = ex.mode, ex.watchdog, ex.estopped, ex.enabled, ex.motion
            held = ex.held
            counters = ex.counters.copy()  # a Counter: missing keys read 0
            rejected = self.diag.rejected + ex.rejected
            last_reset, episode = ex.last_reset, ex.episode

        loop_values = {
            k.replace("period_err_ms_", "period_err_ms.").replace("compute_ms_", "compute_ms."): v
            for k, v in loop.items()
        }
        loop_values["rate_hz"] = rate_hz
        loop_values["clock"] = "sim" if self._use_sim_time else "wall"
        loop_values["loop_mode"] = self._loop_mode
        if self._loop_mode in ("inline", "thread"):
            loop_values["skipped_cycles"] = skipped  # deadlines dropped when the loop fell a whole period behind
        if self._loop_mode == "inline":
            loop_values["late_callbacks"] = self._late_callbacks
        ok, loop_msg = assess(loop, self._period_s, self._use_sim_time)
        loop_level = OK if ok else WARN

        state = {
            "mode": mode,
            "watchdog": watchdog or "ok",
            "estop": estopped,
            "enabled": enabled,
            "chunk_age_s": age if age is not None else "none",
            "tracking_error.max": err,
            "tracking_error.joint": err_joint,
            "output_interface": self._interface,
            "output_topic": self._topic,
            "commands.published": self._published,
        }
        for key in (
            "chunks_accepted",
            "chunks_superseded",
            "blends_stretched",
            "clock_jumps",
            "limited_cycles",
            "position_clamped_cycles",
            "starts",
            "anchors.ramped",
            "stalls",
            "tick_errors",
            "holds.joint_state_conflict",
            "holds.clock_conflict",
        ):
            state[key.replace("_", ".", 1) if key.startswith("chunks_") else key] = counters[key]
        state.update({k: v for k, v in sorted(counters.items()) if k.startswith("stops.")})
        state["resets"] = counters["resets"]
        state.update({k: v for k, v in sorted(counters.items()) if k.startswith("resets.")})
        state["last_reset"] = last_reset or "none"
        state["episode"] = episode if episode is not None else "unknown"
        state.update({f"rejected.{k}": v for k, v in sorted(rejected.items())})
        state["rejected.total"] = sum(rejected.values())
        state.update(self.guard.diagnostic_values())
        if estopped:
            level, message = ERROR, "e-stop latched (call ~/resume)"
        elif motion is Motion.WAITING:
            level, message = WARN, "waiting for joint states" if enabled else "disabled"
        elif held:
            level, message = ERROR, f"{mode}: held ({held}), chunks refused until it clears"
        elif watchdog in ("chunk_stale", "joint_states_stale"):
            level, message = WARN, f"{mode}: watchdog {watchdog}"
        else:
            level, message = OK, mode + (f" ({watchdog})" if watchdog else "")
        self.diag.publish(
            time_msg_from_ns(now_ns),
            [
                ("loop", loop_level, loop_msg, loop_values),
                ("state", level, message, state),
                ("output", *self._check.status()),
                ("inputs", *self._inputs_status()),
            ],
        )


def _make_node() -> ControllerNode:
    node = ControllerNode()
    # Everything allocated so far lives as long as the process: move it out of the collector's view, so
    # a full collection never has to walk it in the middle of a control cycle.
    gc.collect()
    gc.freeze()
    return node


_make_node.__name__ = "ControllerNode"  # run_node names the node in its start-up error line


def main(args: list[str] | None = None) -> int:
    return run_node(_make_node, args)


if __name__ == "__main__":
    raise SystemExit(main())

"""controller_node: executes the safe action chunks at 100 Hz on the node's clock (wall or simulated).

Subscribes ``/vla/safe_action_chunk`` (trajectory_msgs/JointTrajectory, from the safety filter) and
``/joint_states``; every control period it samples the chunk executor (``vla_ros.control``: time-stamped
chunk execution, blending, watchdog, limits) and sends the command to one output interface
(``output_interface``, ``vla_ros.ros.controller_outputs``): ``forward_position`` (std_msgs/Float64MultiArray on
``/<position_controller>/commands``, a ros2_control forward position controller), ``joint_trajectory``
(trajectory_msgs/JointTrajectory on ``/<trajectory_controller>/joint_trajectory``, a ros2_control joint
trajectory controller) or ``isaac`` (sensor_msgs/JointState on ``/joint_command``, Isaac Sim's ROS 2 bridge);
the values are in the order of the ``joints`` parameter.

Before sending to a ros2_control controller the node fetches that controller's ``joints`` parameter and
sends nothing while it does not fit (``controller_check``; ``vla_ros.ros.controller_check``).

Loop (``loop_mode``, ``vla_ros.ros.control_loop``): on wall time the cycles run against absolute deadlines
on the monotonic clock, ``inline`` in the one thread that also serves the callbacks (the default there) or in
a ``thread`` of their own; on simulated time an rclpy timer runs them, so the sim's ``/clock`` drives the loop.
Either way the chunk is sampled at the node's ROS time, and one lock keeps callbacks (inputs, services,
parameters, diagnostics) from interleaving with a cycle.

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

import threading
import time
from collections import deque

import numpy as np
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from rclpy.serialization import deserialize_message
from sensor_msgs.msg import JointState
from std_msgs.msg import Header
from std_srvs.srv import SetBool, Trigger
from trajectory_msgs.msg import JointTrajectory

from vla_ros import reasons
from vla_ros.chunks import ChunkError
from vla_ros.control import ChunkExecutor, Motion
from vla_ros.control.sources import SourceGate, resolve_trusted
from vla_ros.joint_state_check import JointStateCheck, JointStateRefused, StateSources
from vla_ros.latency import SplitStages, StageTime
from vla_ros.params.controller import PARAMS, TIGHTENING_RULES, config_from_params
from vla_ros.params.tightening import ParamChange
from vla_ros.ros.chunk_msgs import chunk_from_msg
from vla_ros.ros.chunk_timing import ChunkTimingPublisher, mono_now
from vla_ros.ros.control_loop import ControlLoop, resolve_loop_mode
from vla_ros.ros.controller_check import ControllerJointsCheck
from vla_ros.ros.controller_outputs import make_output
from vla_ros.ros.diagnostics import ERROR, OK, WARN, Diagnostics
from vla_ros.ros.episode import EPISODE_RESET_TOPIC, episode_reset_qos, reset_from_msg
from vla_ros.ros.node_main import run_node
from vla_ros.ros.param_guard import ParamGuard
from vla_ros.ros.params import declare_parameters
from vla_ros.ros.publishers import graph_publishers, with_publisher
from vla_ros.ros.qos import incompatible_qos_events, sensor_qos
from vla_ros.ros.rejections import ReasonLog
from vla_ros.ros.time import ns_from_time_msg, time_msg_from_ns
from vla_ros.ros.trajectory_wire import WireError, trajectory_size
from vla_ros.ros.watchdog import CHECK_RATE_HZ, InputWatch, Watchdog, input_watches

# Input watchdog and graph checks per second (steady clock): a stopped input is reported within its
# timeout plus one check period; a publisher on the chunk topic is seen within one period.
# The control loop says it runs on ~/heartbeat (std_msgs/Header, the cycle's ROS time) every this many
# cycles (10 Hz at 100 Hz): the safety filter reports a stalled or dead controller from its silence.
HEARTBEAT_CYCLES = 10
# Two publishers naming the same joint on /joint_states within this long (steady clock) are a conflict; the
# arm holds until one has been silent this long.
STATE_CONFLICT_WINDOW_S = 0.5


class ControllerNode(Node):
    def __init__(self, **kwargs) -> None:
        # Before anything can fail: rclpy destroys a half-built node at shutdown, and destroy_node stops the loop.
        self.loop: ControlLoop | None = None
        super().__init__("controller", **kwargs)
        p = self._declare_parameters()
        self._set_up_input_checks(p)
        loop_mode = resolve_loop_mode(p["loop_mode"], self._use_sim_time)  # ValueError -> exit 2
        self._set_up_output(p)
        self._set_up_inputs(p)
        self._set_up_services(p)
        self.loop = ControlLoop(
            self,
            loop_mode,
            self._period_s,
            self._cycle,
            self._lock,
            stats_window=p["loop_stats_window"],
            realtime_priority=p["realtime_priority"],
            spin_us=p["loop_spin_us"],
        )
        # Diagnostics run on the steady clock, so they keep coming (and say so) while simulated time stands still.
        steady = Clock(clock_type=ClockType.STEADY_TIME)
        self.create_timer(p["diagnostics_period_s"], self._publish_diagnostics, clock=steady)
        self.create_timer(1.0 / CHECK_RATE_HZ, self._check_inputs, clock=steady)
        self._log_start(p)
        self.loop.start()  # last, so a failing constructor never leaves a loop running

    def _declare_parameters(self) -> dict:
        """The parameters (validated as a whole by the guard) and the core built from them."""
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
        self._joints = list(self.core.config.joint_names)
        self._period_s = self.core.config.period_s
        self._use_sim_time = bool(self.get_parameter("use_sim_time").value)
        # Guards self.core and the loop's statistics: a loop thread runs cycles while the executor runs callbacks.
        self._lock = threading.Lock()
        return p

    def _set_up_input_checks(self, p: dict) -> None:
        """Diagnostics, the refusal log and who may send chunks and joint states."""
        self.diag = Diagnostics(self, hardware_id="controller")
        self.rejections = ReasonLog(self.get_logger().warning, self.diag.rejected)
        self.guard.on_changes(self._on_params_changed)
        trusted = resolve_trusted(p["trusted_publishers"], self.get_namespace())  # ValueError -> exit 2
        self.gate = SourceGate(trusted, unnamed_grace_s=p["unnamed_publisher_grace_s"])
        self._chunks_deserialized = 0
        self._foreign_reported = False
        # joint states: the checks every node makes, with a jump bounded by the robot's own (URDF) velocity limits
        self._state_check = JointStateCheck(self._joints, list(self.core.config.urdf_velocity_limits))
        # Who publishes the joint states: per message where rclpy says it (StateSources), else from the graph.
        self._state_sources = StateSources(self._joints, STATE_CONFLICT_WINDOW_S)
        self._trusted_states = resolve_trusted(p["trusted_state_publishers"], self.get_namespace())
        self._state_nodes: dict[str, str] = {}  # publisher gid -> node name, from the graph
        self._state_publishers: list = []  # the graph's publishers on /joint_states, refreshed by _check_inputs
        self._hold_why = ""  # why the core holds (a conflict between sources), for diagnostics
        self._per_message_sources = False  # rclpy said who sent a joint state (Kilted on): the graph fallback is off
        self._state_warned = False

    def _set_up_output(self, p: dict) -> None:
        """The output interface (``controller_outputs``) and the check of the controller that receives it."""
        self.output = make_output(self, p, self._joints, self._period_s)
        self.core.resume_at_rest = self.output.resume_at_rest
        self._check = ControllerJointsCheck(
            self,
            self.output.name,
            self.output.publisher.topic_name,
            self.output.controller,
            self._joints,
            p["controller_check"],
            p["controller_check_timeout_s"],
        )

    def _set_up_inputs(self, p: dict) -> None:
        """Chunks, joint states, episode resets, the heartbeat and the inputs' watchdog."""
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
        self.timing = ChunkTimingPublisher(self, "controller")
        self.stages = SplitStages("accepted", "first_command")
        # the chunks' ages (node clock - stamp) when taken and at their first command, the newest 1,000
        self._ages = {name: deque(maxlen=1000) for name in ("accepted_age_ms", "first_command_age_ms")}
        self.watchdog = self._make_watchdog()

    def _set_up_services(self, p: dict) -> None:
        self.create_service(Trigger, "~/estop", self._on_estop)
        self.create_service(Trigger, "~/resume", self._on_resume)
        self.create_service(SetBool, "~/enable", self._on_enable)
        if not p["start_enabled"]:
            self.core.set_enabled(False)

    def _log_start(self, p: dict) -> None:
        cfg = self.core.config
        self.get_logger().info(
            f"controlling {len(self._joints)} joints at {cfg.rate_hz:g} Hz on "
            f"{'simulated' if self._use_sim_time else 'wall'} time "
            f"({self.loop.describe()}); "
            f"output {self.output.describe()} in joint order {self._joints} "
            f"(controller_check {p['controller_check']}); blend {cfg.blend_mode} over {cfg.blend_horizon_s:g} s; "
            f"chunks on {self._chunk_sub.topic_name} only from {', '.join(self.gate.trusted)}"
        )

    def _make_watchdog(self) -> Watchdog:
        p = self._params
        trusted = " or ".join(self.gate.trusted)
        chunks = InputWatch(
            f"chunk from {trusted}", p["chunk_timeout_s"], WARN, "policy or safety filter dead, frozen or refusing?"
        )
        return Watchdog(input_watches(p, self.resolve_topic_name("/joint_states"), chunks, self._use_sim_time))

    # ---- parameters ------------------------------------------------------------------------------
    def _apply_params(self, config, values: dict, changes: list[ParamChange]) -> None:
        """A request the guard validated as a whole: takes effect between two cycles (one consistent
        snapshot per cycle)."""
        self._params = dict(values)
        self.loop.spin_ns = values["loop_spin_us"] * 1000  # read by the loop at its next deadline
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
            self._reject("chunk", reasons.UNAUTHORIZED_SOURCE, why)
            return
        self.watchdog["chunks"].seen(time.monotonic_ns(), self.get_clock().now().nanoseconds)
        limit = self.core.config.max_chunk_points
        try:
            _, points = trajectory_size(data)
        except WireError:
            points = None  # not plain CDR (every ROS 2 rmw sends plain CDR): deserialize, then count
        if points is not None and points > limit:
            with self._lock:
                self.core.rejected[reasons.TOO_MANY_POINTS] += 1
            self.rejections.log(
                f"rejected chunk: {reasons.TOO_MANY_POINTS}: {points} points > max_chunk_points={limit} "
                "(not deserialized)",
                reasons.TOO_MANY_POINTS,
            )
            return
        msg = deserialize_message(data, JointTrajectory)
        self._chunks_deserialized += 1
        try:
            chunk = chunk_from_msg(msg)
        except ChunkError as err:
            self._reject("chunk", err.code, str(err))
            return
        taken = mono_now(self)
        self.stages.begin(chunk.stamp_ns, taken)  # before the plan can have it: a cycle may take it at once
        with self._lock:
            code = self.core.submit_chunk(chunk)  # the executor counts its own rejections
            detail = self.core.last_rejection
            if code is None:
                self._ages["accepted_age_ms"].append((taken.clock_ns - chunk.stamp_ns) * 1e-6)
        if code is not None:
            self.stages.discard(chunk.stamp_ns)
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
                        reasons.JOINT_STATE_UNTRUSTED_SOURCE,
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
                reasons.JOINT_STATE_UNTRUSTED_SOURCE,
                f"from {node or 'an unnamed node (gid ' + gid + ')'}, not in trusted_state_publishers",
            )
        if gid is None:
            return None
        self._per_message_sources = True
        group = self._state_sources.observe(gid, names, mono_ns)
        if len(group) < 2:
            return None
        self._hold_why = self._same_joints_text([group])
        return reasons.JOINT_STATE_CONFLICT, self._hold_why

    def _on_joint_state(self, msg: JointState, gid: str | None = None) -> None:
        if not self._state_check.concerns(msg.name):
            return  # another driver's joints only (a gripper this controller does not command)
        stamp_ns = ns_from_time_msg(msg.header.stamp)
        now_ns = self.get_clock().now().nanoseconds
        with self._lock:  # once: the check's last state and the core's measured state move together
            refused = self._source_refusal(gid, msg.name, time.monotonic_ns())
            if refused is not None:
                code, detail = refused
                if code == reasons.JOINT_STATE_CONFLICT:
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
            if code == reasons.JOINT_STATE_CONFLICT:
                self.watchdog["joint_states"].seen(time.monotonic_ns(), now_ns)  # they arrive: the cause is named apart
            return
        if code is not None:  # counted by the core
            self.rejections.log(f"rejected joint state: {detail}", code)
            if code not in reasons.EXPECTED_AT_RESET:  # the previous episode's, in flight at a reset: expected
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
    def spin(self) -> None:
        """What run_node runs: the loop's own spin (inline mode: cycles and, between them, the callbacks)."""
        self.loop.spin()

    def _cycle(self, now_ns: int, period_s: float) -> bool:
        """One control cycle (the loop calls it every period): update the core, publish. False when shutting
        down."""
        self._cycles += 1
        if self._cycles % HEARTBEAT_CYCLES == 0 and self.context.ok():
            self._heartbeat_msg.stamp = time_msg_from_ns(now_ns)
            self._heartbeat.publish(self._heartbeat_msg)
        if not self._check.output_allowed:  # the receiver may not get commands: the executor waits too
            self._check.count_withheld()
            return True
        try:
            with self._lock:
                accepted = self.core.counters["chunks_accepted"]
                q = self.core.update(now_ns, period_s)  # never raises by design; publishing can
                if q is None:
                    return True
                q = q.tolist()  # the core's buffer changes with the next call; the message gets a copy
                k = self._params["trajectory_points"]
                self.output.sample(self.core, k)
                new_chunk = self.core.active_stamp_ns if self.core.counters["chunks_accepted"] != accepted else None
                if new_chunk is not None:
                    self._ages["first_command_age_ms"].append((now_ns - new_chunk) * 1e-6)
            self.output.publish(q, now_ns, k)
            if new_chunk is not None:  # this command is the first from that chunk (vla_ros.latency)
                self.stages.end(new_chunk, StageTime(time.monotonic_ns(), now_ns))
        except Exception as err:  # the loop must keep running; a failing publish is reported, not fatal
            if not self.context.ok():
                return False  # shutting down (SIGTERM/Ctrl-C): the publisher's context is already gone
            with self._lock:
                self.core.counters["tick_errors"] += 1
            self.get_logger().error(f"control cycle failed: {err!r}", throttle_duration_sec=1.0)
        return True

    def close(self) -> None:
        """Stop the loop (run_node calls this before destroy_node); safe to call twice."""
        if self.loop is not None:
            self.loop.stop()

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
        # A publisher the graph has not named yet (the filter's, while it starts) is refused but not reported
        # until the grace is over: SourceGate.to_report.
        foreign = self.gate.to_report(self.gate.observe(graph_publishers(self, self._chunk_sub.topic_name), mono))
        if foreign:
            names = ", ".join(e.label for e in foreign)
            unnamed = (
                f" (the ROS graph has not named its node in {self.gate.unnamed_grace_ns / 1e9:g} s: a DDS writer "
                "outside ROS, or a node whose discovery information does not arrive?)"
                if any(not e.node for e in foreign)
                else ""
            )
            self.rejections.log(
                f"{names} publishes on {self._chunk_sub.topic_name}{unnamed}: only {', '.join(self.gate.trusted)} "
                "may; chunks are refused while it is there",
                "source.untrusted",
            )
        for stamp, stages in self.stages.flush():
            self.timing.publish(stamp, stages)
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

    def _same_joints_text(self, groups) -> str:
        """What is wrong when each group of publisher gids names the same joints (per message and per check)."""
        labels = "; ".join(", ".join(self._state_nodes.get(g) or f"gid {g}" for g in group) for group in groups)
        return f"{sum(map(len, groups))} publishers on {self._state_sub.topic_name} ({labels}) name the same joints"

    def _conflict(self, mono_ns: int) -> tuple[str, str]:
        """(hold code, what is wrong) while two sources feed one input, ("", "") otherwise."""
        problems = []
        # with trusted_state_publishers the trusted states are used and others refused per message: no hold
        groups = [] if self._trusted_states else self._state_sources.conflicts(mono_ns)
        if groups:
            problems.append((reasons.JOINT_STATE_CONFLICT, self._same_joints_text(groups)))
        elif (
            not self._trusted_states
            and not self._per_message_sources
            and len(self._state_publishers) > 1
            and reasons.JOINT_STATE_JUMP in self._refused_states()
        ):
            # no publisher per message (Humble, Jazzy): a state refused for a jump while two publish is a conflict
            labels = ", ".join(sorted(e.label for e in self._state_publishers))
            problems.append(
                (
                    reasons.JOINT_STATE_CONFLICT,
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
        recent = self.gate.recent_untrusted(mono, reported_only=True)
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
            loop = self.loop.snapshot()
            rate_hz = ex.config.rate_hz
            err, err_joint = ex.tracking_error()
            age = ex.chunk_age_s()
            mode, watchdog, estopped, enabled, motion = ex.mode, ex.watchdog, ex.estopped, ex.enabled, ex.motion
            held = ex.held
            ages = {name: list(values) for name, values in self._ages.items() if values}
            counters = ex.counters.copy()  # a Counter: missing keys read 0
            rejected = self.diag.rejected + ex.rejected
            last_reset, episode = ex.last_reset, ex.episode

        state = {
            "mode": mode,
            "watchdog": watchdog or "ok",
            "estop": estopped,
            "enabled": enabled,
            "chunk_age_s": age if age is not None else "none",
            "tracking_error.max": err,
            "tracking_error.joint": err_joint,
            "output_interface": self.output.name,
            "output_topic": self.output.topic,
            "commands.published": self.output.published,
        }
        for name, values in ages.items():  # on the node's clock: /clock steps in the sim
            state[f"{name}.p50"] = float(np.percentile(values, 50))
            state[f"{name}.p99"] = float(np.percentile(values, 99))
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
                ("loop", *self.loop.status(loop, rate_hz, self._use_sim_time)),
                ("state", level, message, state),
                ("output", *self._check.status()),
                ("inputs", *self._inputs_status()),
            ],
        )


def main(args: list[str] | None = None) -> int:
    return run_node(ControllerNode, args, freeze_gc=True)  # the core and buffers live as long as the process


if __name__ == "__main__":
    raise SystemExit(main())

"""safety_filter_node: the only path from the policy's action chunks to the controller.

Subscribes ``/vla/action_chunk`` (JointTrajectory), ``/joint_states``, ``/robot_description`` (transient
local; or the ``robot_description_file`` parameter) and ``/vla/episode_reset``; filters every chunk in its
subscription callback with the ROS-free ``vla_ros.safety.SafetyFilter`` and publishes what is safe on
``/vla/safe_action_chunk`` with the same ``header.stamp``. Without a robot model or a recent joint state
nothing passes, and the diagnostics say so.

Inputs are validated where they arrive, and every refusal is counted by reason (``rejected.<code>``) and
logged on one throttle per reason: a chunk's size is read from its serialized bytes before it is
deserialized (``too_many_points`` costs nothing however large the message); joint states that are
unstamped, ragged, non-finite, incomplete or from before the current episode are refused on arrival. On an
episode reset (the simulator's announcement) the cached joint state of the previous episode is dropped and
chunks stamped before the episode began are refused (``before_reset``), so the first chunk that starts at
the measured state of the new episode passes.

``/diagnostics`` carries counts per reason, the check time and the inputs' liveness every
``diagnostics_period_s`` (wall time) and at once on every rejection or truncation, on every accepted
parameter change, and when an input stops or comes back: a watchdog on the steady clock (simulated time
stops with a dead simulator) reports stopped joint states, chunks or simulated time within its timeout.

Parameters can change at run time. A change is validated as a whole configuration against the robot's
URDF before it takes effect, and refused with the reason when it is invalid or when it weakens a check
(``vla_ros.params.tightening``; unless started with ``allow_runtime_loosening:=true``). Every accepted
change is logged old -> new and reported on ``/diagnostics``.

Not a certified safety function: it belongs above the robot's own safety controller, never instead of it.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from typing import Any

import numpy as np
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from rclpy.serialization import deserialize_message
from sensor_msgs.msg import JointState
from std_msgs.msg import Header, String
from trajectory_msgs.msg import JointTrajectory

from vla_ros import reasons
from vla_ros.chunks import ChunkError
from vla_ros.joint_state_check import JointStateCheck, JointStateRefused
from vla_ros.latency import StageTime
from vla_ros.params.robot import robot_files
from vla_ros.params.safety_filter import PARAMS, config_from_params, lines, tightening_rules
from vla_ros.params.tightening import ParamChange
from vla_ros.ros.chunk_msgs import chunk_from_msg, msg_from_chunk
from vla_ros.ros.chunk_timing import ChunkTimingPublisher, mono_now
from vla_ros.ros.diagnostics import ERROR, OK, WARN, Diagnostics
from vla_ros.ros.episode import EPISODE_RESET_TOPIC, episode_reset_qos, reset_from_msg
from vla_ros.ros.node_main import run_node
from vla_ros.ros.param_guard import ParamGuard
from vla_ros.ros.params import declare_parameters
from vla_ros.ros.qos import incompatible_qos_events, latched_qos, sensor_qos
from vla_ros.ros.rejections import ReasonLog
from vla_ros.ros.time import ns_from_time_msg, time_msg_from_ns
from vla_ros.ros.trajectory_wire import WireError, trajectory_size
from vla_ros.ros.watchdog import CHECK_RATE_HZ, InputWatch, Watchdog, input_watches
from vla_ros.safety import (
    ConfigError,
    FilterReport,
    JointStateSample,
    RobotModelError,
    SafetyFilter,
    load_robot,
    load_robot_files,
)
from vla_ros.timeline import EpisodeTimeline

# Input watchdog checks per second (steady clock): a stopped input is reported within its timeout plus this.


class SafetyFilterNode(Node):
    def __init__(self, **kwargs) -> None:
        super().__init__("safety_filter", **kwargs)
        self.guard = ParamGuard(self, PARAMS, tightening_rules())
        self._params = declare_parameters(self, PARAMS, on_change=self.guard.on_change)
        self.config = config_from_params(self._params)  # ConfigError (a ValueError): the node does not start
        self.guard.install(
            self._params, build=self._build, apply=self._apply, allow_loosening=self._params["allow_runtime_loosening"]
        )
        self.diag = Diagnostics(self, hardware_id="safety_filter")
        self.rejections = ReasonLog(self.get_logger().warning, self.diag.rejected)
        self.guard.on_changes(self._on_params_changed)
        self.robot = None
        self._state_check: JointStateCheck | None = None  # the robot's joints and velocity limits, once loaded
        self.filter: SafetyFilter | None = None
        self._problem = "no robot model yet: waiting for /robot_description"  # why nothing passes, if so
        self._state: JointStateSample | None = None
        self._state_mono_ns: int | None = None
        self._verdicts: Counter[str] = Counter()
        self._modified: Counter[str] = Counter()
        self._check_ms: deque[float] = deque(maxlen=1000)
        # the chunks' ages (node clock - stamp) as they came in and went out, the newest 1,000
        self._ages = {name: deque(maxlen=1000) for name in ("filter_in_age_ms", "filter_out_age_ms")}
        self._last = ("", "")
        self._timeline = EpisodeTimeline()  # the current episode: inputs stamped before it are refused
        self._resets = 0
        self._use_sim_time = bool(self.get_parameter("use_sim_time").value)
        controller = self._params["controller"].strip()
        self._heartbeat_topic = self.resolve_topic_name(f"{controller}/heartbeat") if controller else ""
        self.watchdog = self._make_watchdog()
        self._state_warned = False

        latched = latched_qos()
        self.pub = self.create_publisher(JointTrajectory, "/vla/safe_action_chunk", 10)
        self.timing = ChunkTimingPublisher(self, "safety_filter")
        files = robot_files(self._params)  # ValueError (a bad profile): the node does not start
        if files.urdf:
            robot = load_robot_files(
                files.urdf, files.srdf or None, files.package_paths, progress=self.get_logger().info
            )
            self._use_robot(robot)
            if self.filter is None:
                raise ConfigError(self._problem)
        else:
            self.create_subscription(String, "/robot_description", self._on_description, latched)
        self.create_subscription(
            JointState,
            "/joint_states",
            self._on_joint_state,
            sensor_qos(self._params["sensor_qos"], 10),
            event_callbacks=incompatible_qos_events(self, "/joint_states", self.diag.count_rejection),
        )
        # Raw: the chunk's size is read from its bytes before it is deserialized (see _on_chunk).
        self.create_subscription(JointTrajectory, "/vla/action_chunk", self._on_chunk, 10, raw=True)
        self.create_subscription(Header, EPISODE_RESET_TOPIC, self._on_episode_reset, episode_reset_qos())
        if self._heartbeat_topic:  # wall time only: a stalled process stops it whatever the clock does
            self.create_subscription(
                Header,
                self._heartbeat_topic,
                lambda _: self.watchdog["controller"].seen(time.monotonic_ns()),
                QoSProfile(depth=1, reliability=ReliabilityPolicy.BEST_EFFORT),
            )
        steady = Clock(clock_type=ClockType.STEADY_TIME)
        self.create_timer(self._params["diagnostics_period_s"], self._publish_diagnostics, clock=steady)
        self.create_timer(1.0 / CHECK_RATE_HZ, self._check_inputs, clock=steady)
        self.get_logger().info(
            "safety filter up: "
            + (self._summary() if self.filter else self._problem)
            + " (not a certified safety function; keep the robot's own safety controller)"
        )

    def _make_watchdog(self) -> Watchdog:
        p = self._params
        chunks = InputWatch(
            f"chunk on {self.resolve_topic_name('/vla/action_chunk')}",
            p["chunk_timeout_s"],
            WARN,
            "policy dead, frozen or idle?",
        )
        watches = input_watches(p, self.resolve_topic_name("/joint_states"), chunks, self._use_sim_time)
        if self._heartbeat_topic:
            watches["controller"] = InputWatch(
                f"heartbeat on {self._heartbeat_topic}",
                p["controller_timeout_s"],
                ERROR,
                "controller stalled or dead: the arm gets no commands",
            )
        return Watchdog(watches)

    # ---- robot model and configuration -----------------------------------------------------------
    def _summary(self) -> str:
        f = self.filter
        return (
            f"robot {f.robot.name!r}, joints {list(f.commanded_names)}, {f.collision_pairs} collision pairs "
            f"({f.checker.count_by_kind()}), on_unsafe={self.config.on_unsafe}"
        )

    def _use_robot(self, robot) -> None:
        self.robot = robot
        self._state_check = JointStateCheck(robot.joint_names, robot.velocity)
        self.guard.rules = tightening_rules(robot)  # limit_overrides compared with this URDF's limits
        self._rebuild()

    def _rebuild(self) -> None:
        if self.robot is None:
            return
        try:
            self.filter = SafetyFilter(self.robot, self.config)
            self._problem = ""
        except ConfigError as err:
            self.filter = None
            self._problem = f"invalid configuration for robot {self.robot.name!r}: {err}"
            self.get_logger().error(self._problem + ": nothing passes")

    def _on_description(self, msg: String) -> None:
        try:
            robot = load_robot(
                msg.data, self._srdf_text(), lines(self._params["package_paths"]), progress=self.get_logger().info
            )
        except (RobotModelError, OSError) as err:
            self.filter, self.robot = None, None
            self._problem = f"cannot use /robot_description: {err}"
            self.get_logger().error(self._problem + ": nothing passes")
            self._publish_diagnostics()
            return
        if robot is self.robot:
            return  # the same description again (the cache returns the same model)
        self._use_robot(robot)
        if self.filter is not None:
            self.get_logger().info("robot description received: " + self._summary())

    def _srdf_text(self) -> str | None:
        path = self._params["srdf_file"]
        if not path:
            return None
        with open(path) as fh:
            return fh.read()

    def _build(self, values: dict[str, Any]):
        """The configuration a parameter request would give, and its filter (the limits resolved against
        the URDF); raises ConfigError (a ValueError) naming the field at fault."""
        config = config_from_params(values)
        return config, (SafetyFilter(self.robot, config) if self.robot is not None else None)

    def _apply(self, built, values: dict[str, Any], changes: list[ParamChange]) -> None:
        self._params = values
        self.config, filt = built
        if filt is not None:
            self.filter, self._problem = filt, ""
        self.watchdog.set_timeouts(values)

    def _on_params_changed(self, changes: list[ParamChange]) -> None:
        if changes:
            self.diag.publish(self.get_clock().now().to_msg(), [self.guard.changes_status(changes)])

    # ---- inputs ------------------------------------------------------------------------------------
    def _on_episode_reset(self, msg: Header) -> None:
        stamp_ns, episode = reset_from_msg(msg)
        news = self._timeline.announce(stamp_ns, episode, self.get_clock().now().nanoseconds)
        if news is None:
            return  # the announcement in force, again
        state = self._state
        # Drop the previous episode's joint state: stamped before the new episode began, or, when time
        # restarts (the episode begins before now), anything received so far.
        if state is not None and (state.stamp_ns < stamp_ns or news.restarts_clock):
            self._state = None
        if not news.first and self._state_check is not None:
            self._state_check.forget()  # the simulator placed the arm elsewhere: not a jump
        if not news.first:
            self._resets += 1
            self.get_logger().info(
                f"episode {episode} began at {stamp_ns * 1e-9:.3f} s: chunks and joint states stamped before it "
                "are refused"
            )

    def _on_joint_state(self, msg: JointState) -> None:
        stamp = ns_from_time_msg(msg.header.stamp)
        names = tuple(msg.name)
        start = self._timeline.start_by(self.get_clock().now().nanoseconds)
        if stamp != 0 and start is not None and stamp < start:
            self.rejections.reject(
                "joint state",
                reasons.JOINT_STATE_BEFORE_RESET,
                f"stamped {(start - stamp) * 1e-9:.3f} s before the episode began",
            )
            return
        if self._state_check is None:  # no robot model yet: nothing to check against, nothing to filter with
            self.watchdog["joint_states"].seen(time.monotonic_ns(), self.get_clock().now().nanoseconds)
            return
        if not self._state_check.concerns(names):
            return  # another driver's joints only
        try:  # the checks every node makes (joint_state_check), on the robot's joints
            self._state_check.check(names, msg.position, stamp)
        except JointStateRefused as err:
            self.rejections.reject("joint state", err.code, err.detail)
            return
        positions = np.asarray(msg.position, dtype=np.float64)
        self._state = JointStateSample(names, positions, stamp)
        self._state_mono_ns = time.monotonic_ns()
        self.watchdog["joint_states"].seen(self._state_mono_ns, self.get_clock().now().nanoseconds)

    def _on_chunk(self, data: bytes) -> None:
        t0 = time.perf_counter()
        now_ns = self.get_clock().now().nanoseconds
        taken = StageTime(time.monotonic_ns(), now_ns)
        self.watchdog["chunks"].seen(taken.mono_ns, now_ns)
        filt = self.filter
        msg = None
        try:
            _, points = trajectory_size(data)
        except WireError:
            points = None  # not plain CDR: deserialize and count the points (every ROS 2 rmw sends plain CDR)
        if points is not None and points > self.config.max_points:
            out, report = (
                None,
                FilterReport.reject(
                    reasons.TOO_MANY_POINTS,
                    f"{points} points > max_chunk_points={self.config.max_points} (refused before deserializing)",
                    points_in=points,
                ),
            )
        elif filt is None:
            code = reasons.INVALID_CONFIGURATION if self.robot is not None else reasons.NO_ROBOT_MODEL
            out, report = None, FilterReport.reject(code, self._problem, points_in=points or 0)
        else:
            msg = deserialize_message(data, JointTrajectory)
            stamp_ns = ns_from_time_msg(msg.header.stamp)
            try:
                chunk = chunk_from_msg(msg)
            except ChunkError as err:
                out, report = None, FilterReport.reject(err.code, str(err), points_in=len(msg.points))
            else:
                start = self._timeline.start_by(now_ns)
                if start is not None and 0 < stamp_ns < start:
                    out, report = (
                        None,
                        FilterReport.reject(
                            reasons.BEFORE_RESET,
                            f"stamped {(start - stamp_ns) * 1e-9:.3f} s before the episode began",
                            points_in=chunk.horizon,
                        ),
                    )
                else:
                    out, report = filt.filter(chunk, self._state, now_ns)
        sent = None
        if out is not None:  # unchanged chunks go out as they came (same message, same stamp)
            out_msg = msg if report.verdict == "pass" else msg_from_chunk(out, msg.header.frame_id)
            sent = mono_now(self)  # as it is handed to DDS: the controller may have it before publish() returns
            self.pub.publish(out_msg)
        if msg is not None:
            self._time_stages(ns_from_time_msg(msg.header.stamp), taken, sent)
        self._check_ms.append((time.perf_counter() - t0) * 1e3)
        self._verdicts[report.verdict] += 1
        if report.verdict == "rejected":
            self.diag.count_rejection(report.reason)
        elif report.verdict == "truncated":
            self._modified[report.reason] += 1
        if report.verdict in ("rejected", "truncated"):
            self._last = (report.reason, report.detail)
            self.rejections.log(
                f"chunk {report.verdict}: {report.reason}: {report.detail}", f"{report.verdict}.{report.reason}"
            )
            self._publish_event(report, now_ns)

    def _time_stages(self, stamp_ns: int, taken: StageTime, sent: StageTime | None) -> None:
        """The chunk's stages here (``vla_ros.latency``): on /vla/chunk_timing, and their ages in the report."""
        stages = {"filter_in": taken}
        self._ages["filter_in_age_ms"].append((taken.clock_ns - stamp_ns) * 1e-6)
        if sent is not None:
            stages["filter_out"] = sent
            self._ages["filter_out_age_ms"].append((sent.clock_ns - stamp_ns) * 1e-6)
        self.timing.publish(stamp_ns, stages)

    # ---- watchdog and diagnostics ------------------------------------------------------------------
    def _check_inputs(self) -> None:
        """Steady-clock timer: simulated time advancing counts as /clock arriving; publish at once when an
        input stops or comes back."""
        mono, ros = time.monotonic_ns(), self.get_clock().now().nanoseconds
        changed = self.watchdog.poll(mono, ros, self.rejections.log)
        refusing = bool(self._refused_states())
        changed |= refusing != self._state_warned
        self._state_warned = refusing
        if changed:
            self._publish_diagnostics()

    def _refused_states(self) -> dict[str, str]:
        """Reason code -> "code: detail" of the joint states refused within the last second (not the previous
        episode's, in flight at a reset: expected)."""
        return self.rejections.recent.by_code(
            time.monotonic(), "joint_state_", exclude=tuple(reasons.EXPECTED_AT_RESET)
        )

    def _inputs_status(self) -> tuple[bytes, str, dict[str, Any]]:
        mono, ros = time.monotonic_ns(), self.get_clock().now().nanoseconds
        stopped = self.watchdog.stopped(mono, ros)
        values = self.watchdog.values(mono, ros)
        values["resets"] = self._resets
        values["episode"] = str(self._timeline.episode) if self._timeline.announced else ""
        names = {name for name, _ in stopped}
        # simulated time standing still stops the controller's loop too: the clock is the cause named
        problems = [
            (w.level, w.describe(mono, ros)) for name, w in stopped if not (name == "controller" and "clock" in names)
        ]
        refused = self._refused_states()
        if refused:
            problems.append((WARN, f"joint states refused: {'; '.join(refused.values())}"))
        if not problems:
            return OK, "all inputs arriving", values
        return max(level for level, _ in problems), "; ".join(text for _, text in problems), values

    def _values(self) -> dict[str, Any]:
        ms = np.array(self._check_ms) if self._check_ms else np.zeros(1)
        values: dict[str, Any] = {
            f"chunks.{v}": self._verdicts.get(v, 0) for v in ("pass", "modified", "truncated", "rejected")
        }
        values.update({f"truncated.{k}": v for k, v in sorted(self._modified.items())})
        values.update(self.diag.rejection_values())
        values["check_ms.p50"] = float(np.percentile(ms, 50))
        values["check_ms.p99"] = float(np.percentile(ms, 99))
        for name, ages in self._ages.items():  # on the node's clock: /clock steps in the sim
            if ages:
                values[f"{name}.p50"] = float(np.percentile(ages, 50))
                values[f"{name}.p99"] = float(np.percentile(ages, 99))
        values["collision_pairs"] = self.filter.collision_pairs if self.filter else 0
        values["robot"] = self.robot.name if self.robot else ""
        values["joint_state_age_s"] = (
            (self.get_clock().now().nanoseconds - self._state.stamp_ns) * 1e-9 if self._state else float("inf")
        )
        values["joint_state_wall_age_s"] = (
            (time.monotonic_ns() - self._state_mono_ns) * 1e-9 if self._state_mono_ns is not None else float("inf")
        )
        values["last_reason"], values["last_detail"] = self._last
        values.update(self.guard.diagnostic_values())
        return values

    def _publish_event(self, report: FilterReport, now_ns: int) -> None:
        values = {
            "verdict": report.verdict,
            "reason": report.reason,
            "detail": report.detail,
            "first_unsafe_index": report.first_unsafe_index,
            "points_in": report.points_in,
            "points_out": report.points_out,
            "time_scale": report.time_scale,
        }
        values.update(self._values())
        self.diag.publish(
            time_msg_from_ns(now_ns), [(f"chunk {report.verdict}", WARN, f"{report.reason}: {report.detail}", values)]
        )

    def _publish_diagnostics(self) -> None:
        if not self.context.ok():
            return
        now_ns = self.get_clock().now().nanoseconds
        values = self._values()
        if self.filter is None:
            level, message = ERROR, f"nothing passes: {self._problem}"
        elif self._state is None:
            level, message = WARN, "nothing passes: no joint state received on /joint_states"
        elif values["joint_state_age_s"] > self.config.max_state_age_s:
            level, message = WARN, f"nothing passes: joint state is {values['joint_state_age_s']:.2f} s old"
        else:
            level, message = OK, "filtering"
        self.diag.publish(
            time_msg_from_ns(now_ns), [("filter", level, message, values), ("inputs", *self._inputs_status())]
        )


def main(args: list[str] | None = None) -> int:
    return run_node(SafetyFilterNode, args)


if __name__ == "__main__":
    raise SystemExit(main())

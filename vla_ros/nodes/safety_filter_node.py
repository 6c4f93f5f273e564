"""safety_filter_node: the only path from the policy's action chunks to the controller.

Subscribes ``/vla/action_chunk`` (JointTrajectory), ``/joint_states`` and ``/robot_description`` (transient
local; or the ``robot_description_file`` parameter), filters every chunk in its subscription callback with
the ROS-free ``vla_ros.safety.SafetyFilter`` and publishes what is safe on ``/vla/safe_action_chunk`` with
the same ``header.stamp``. ``/diagnostics`` carries counts per reason and the check time every
``diagnostics_period_s`` (wall time, so it also speaks when simulated time stands still) and at once on
every rejection or truncation. Without a robot model or a recent joint state nothing passes, and the
diagnostics say so.

Parameters can change at runtime; a change is validated as a whole configuration against the robot's URDF
(scale factors in (0, 1], clearances >= 0, parseable obstacles, no limit looser than the URDF) and refused
with the reason otherwise.

Not a certified safety function: it belongs above the robot's own safety controller, never instead of it.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from typing import Any

import numpy as np
from rcl_interfaces.msg import SetParametersResult
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import String
from trajectory_msgs.msg import JointTrajectory

from vla_ros.chunks import ChunkError
from vla_ros.params.safety_filter import PARAMS, SPECS, config_from_params, lines
from vla_ros.ros.chunk_msgs import chunk_from_msg, msg_from_chunk
from vla_ros.ros.diagnostics import ERROR, OK, WARN, Diagnostics
from vla_ros.ros.node_main import run_node
from vla_ros.ros.params import declare_parameters
from vla_ros.ros.qos import incompatible_qos_events, sensor_qos
from vla_ros.ros.time import ns_from_time_msg, time_msg_from_ns
from vla_ros.safety import (
    ConfigError,
    FilterReport,
    JointStateSample,
    RobotModelError,
    SafetyFilter,
    load_robot,
    load_robot_files,
)


class SafetyFilterNode(Node):
    def __init__(self, **kwargs) -> None:
        super().__init__("safety_filter", **kwargs)
        self._params = declare_parameters(self, PARAMS, on_change=self._on_param_change)
        self.add_on_set_parameters_callback(self._validate_change)  # runs before the table's own checks
        self.config = config_from_params(self._params)  # ConfigError (a ValueError): the node does not start
        self.diag = Diagnostics(self, hardware_id="safety_filter")
        self.robot = None
        self.filter: SafetyFilter | None = None
        self._problem = "no robot model yet: waiting for /robot_description"  # why nothing passes, if so
        self._dirty = False
        self._state: JointStateSample | None = None
        self._verdicts: Counter[str] = Counter()
        self._modified: Counter[str] = Counter()
        self._check_ms: deque[float] = deque(maxlen=1000)
        self._last = ("", "")

        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL, reliability=ReliabilityPolicy.RELIABLE)
        self.pub = self.create_publisher(JointTrajectory, "/vla/safe_action_chunk", 10)
        if self._params["robot_description_file"]:
            robot = load_robot_files(self._params["robot_description_file"], self._params["srdf_file"] or None,
                                     lines(self._params["package_paths"]))
            self._use_robot(robot)
            if self.filter is None:
                raise ConfigError(self._problem)
        else:
            self.create_subscription(String, "/robot_description", self._on_description, latched)
        self.create_subscription(JointState, "/joint_states", self._on_joint_state, sensor_qos(self._params["sensor_qos"], 10),
                                 event_callbacks=incompatible_qos_events(self, "/joint_states", self.diag.count_rejection))
        self.create_subscription(JointTrajectory, "/vla/action_chunk", self._on_chunk, 10)
        self.create_timer(self._params["diagnostics_period_s"], self._publish_diagnostics,
                          clock=Clock(clock_type=ClockType.STEADY_TIME))
        self.get_logger().info(
            "safety filter up: " + (self._summary() if self.filter else self._problem)
            + " (not a certified safety function; keep the robot's own safety controller)"
        )

    # ---- robot model and configuration -----------------------------------------------------------
    def _summary(self) -> str:
        f = self.filter
        return (f"robot {f.robot.name!r}, joints {list(f.commanded_names)}, {f.collision_pairs} collision pairs "
                f"({f.checker.count_by_kind()}), on_unsafe={self.config.on_unsafe}")

    def _use_robot(self, robot) -> None:
        self.robot = robot
        self._rebuild()

    def _rebuild(self) -> None:
        self._dirty = False
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
            robot = load_robot(msg.data, self._srdf_text(), lines(self._params["package_paths"]))
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

    def _validate_change(self, params) -> SetParametersResult:
        """The whole configuration after the change must be valid, and must not loosen the URDF."""
        candidate = dict(self._params)
        for p in params:
            spec = SPECS.get(p.name)
            if spec is None:
                continue
            reason = spec.validate(p.value)  # type and range first, with the table's wording
            if reason:
                return SetParametersResult(successful=False, reason=reason)
            candidate[p.name] = spec.coerce(p.value)
        try:
            config = config_from_params(candidate)
            if self.robot is not None:
                SafetyFilter(self.robot, config)  # resolves the limits against the URDF
        except (ConfigError, ValueError, TypeError) as err:
            return SetParametersResult(successful=False, reason=str(err))
        return SetParametersResult(successful=True)

    def _on_param_change(self, name: str, value) -> None:
        self._params[name] = value
        self._dirty = True  # rebuilt once every parameter of the request is in

    def _current_filter(self) -> SafetyFilter | None:
        if self._dirty:
            try:
                self.config = config_from_params(self._params)
            except ConfigError as err:  # validated before the change; kept as a guard
                self.get_logger().error(f"configuration rejected after validation: {err}")
            self._rebuild()
        return self.filter

    # ---- inputs ------------------------------------------------------------------------------------
    def _on_joint_state(self, msg: JointState) -> None:
        stamp = ns_from_time_msg(msg.header.stamp) or self.get_clock().now().nanoseconds
        self._state = JointStateSample(tuple(msg.name), np.asarray(msg.position, dtype=np.float64), stamp)

    def _on_chunk(self, msg: JointTrajectory) -> None:
        t0 = time.perf_counter()
        now_ns = self.get_clock().now().nanoseconds
        filt = self._current_filter()
        if filt is None:
            code = "invalid_configuration" if self.robot is not None else "no_robot_model"
            out, report = None, FilterReport.reject(code, self._problem, points_in=len(msg.points))
        else:
            try:
                chunk = chunk_from_msg(msg)
            except ChunkError as err:
                out, report = None, FilterReport.reject(err.code, str(err), points_in=len(msg.points))
            else:
                out, report = filt.filter(chunk, self._state, now_ns)
        if out is not None:  # unchanged chunks go out as they came (same message, same stamp)
            self.pub.publish(msg if report.verdict == "pass" else msg_from_chunk(out, msg.header.frame_id))
        self._check_ms.append((time.perf_counter() - t0) * 1e3)
        self._verdicts[report.verdict] += 1
        if report.verdict == "rejected":
            self.diag.count_rejection(report.reason)
        elif report.verdict == "truncated":
            self._modified[report.reason] += 1
        if report.verdict in ("rejected", "truncated"):
            self._last = (report.reason, report.detail)
            self.get_logger().warning(f"chunk {report.verdict}: {report.reason}: {report.detail}", throttle_duration_sec=1.0)
            self._publish_event(report, now_ns)

    # ---- diagnostics -------------------------------------------------------------------------------
    def _values(self) -> dict[str, Any]:
        ms = np.array(self._check_ms) if self._check_ms else np.zeros(1)
        values: dict[str, Any] = {f"chunks.{v}": self._verdicts.get(v, 0) for v in ("pass", "modified", "truncated", "rejected")}
        values.update({f"truncated.{k}": v for k, v in sorted(self._modified.items())})
        values.update(self.diag.rejection_values())
        values["check_ms.p50"] = float(np.percentile(ms, 50))
        values["check_ms.p99"] = float(np.percentile(ms, 99))
        values["collision_pairs"] = self.filter.collision_pairs if self.filter else 0
        values["robot"] = self.robot.name if self.robot else ""
        values["joint_state_age_s"] = (
            (self.get_clock().now().nanoseconds - self._state.stamp_ns) * 1e-9 if self._state else float("inf")
        )
        values["last_reason"], values["last_detail"] = self._last
        return values

    def _publish_event(self, report: FilterReport, now_ns: int) -> None:
        values = {"verdict": report.verdict, "reason": report.reason, "detail": report.detail,
                  "first_unsafe_index": report.first_unsafe_index, "points_in": report.points_in,
                  "points_out": report.points_out, "time_scale": report.time_scale}
        values.update(self._values())
        self.diag.publish(time_msg_from_ns(now_ns), [(f"chunk {report.verdict}", WARN, f"{report.reason}: {report.detail}", values)])

    def _publish_diagnostics(self) -> None:
        now_ns = self.get_clock().now().nanoseconds
        values = self._values()
        if self._current_filter() is None:
            level, message = ERROR, f"nothing passes: {self._problem}"
        elif self._state is None:
            level, message = WARN, "nothing passes: no joint state received on /joint_states"
        elif values["joint_state_age_s"] > self.config.max_state_age_s:
            level, message = WARN, f"nothing passes: joint state is {values['joint_state_age_s']:.2f} s old"
        else:
            level, message = OK, "filtering"
        self.diag.publish(time_msg_from_ns(now_ns), [("filter", level, message, values)])


def main(args: list[str] | None = None) -> int:
    return run_node(SafetyFilterNode, args)


if __name__ == "__main__":
    raise SystemExit(main())

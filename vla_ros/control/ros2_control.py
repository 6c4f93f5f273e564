"""What ros2_control's controllers accept from us, as plain Python (no rclpy import).

The controller node sends commands to controllers it does not own, so their rules are written down here
once, from upstream's sources (ros-controls/ros2_controllers, branches ``humble``, ``jazzy``, ``kilted``):

* ``joint_trajectory_controller`` (JTC) checks every ``JointTrajectory`` in ``validate_trajectory_msg``
  and drops the whole message on the first failure: all its joints unless ``allow_partial_joints_goal``;
  no unknown joint; at least one point; a non-zero ``header.stamp`` is the start time and a trajectory
  that has already ended (stamp + last ``time_from_start`` before the controller's now) is dropped, while
  stamp 0 means "start when first sampled"; ``time_from_start`` strictly increasing; per point
  ``positions`` sized like ``joint_names`` and ``velocities``/``accelerations`` empty or that size; no
  ``effort`` (Jazzy and later: unless the controller commands effort); and, unless
  ``allow_nonzero_velocity_at_trajectory_end``, the last point's velocities must be zero within float
  epsilon. That flag defaults to true on Humble and to false on Jazzy and Kilted.
* A new JTC trajectory replaces the old one. On its first sample JTC starts it from a "point before the
  trajectory": the measured state (default), or the last command with ``open_loop_control`` (Humble) /
  ``interpolate_from_desired_state`` (Jazzy, Kilted); it interpolates from that point only until
  ``stamp + time_from_start`` of the first point. A message whose first point has ``time_from_start`` 0
  and is stamped no later than the controller's clock is therefore followed from its own first point,
  whatever those parameters say (``Trajectory::sample``).
* ``forward_command_controller`` (and ``position_controllers/JointGroupPositionController``) takes a
  ``Float64MultiArray`` by index in the order of its ``joints`` parameter and checks only the size.

``check_controller_joints`` compares our joint list with a controller's ``joints`` parameter;
``validate_jtc_trajectory`` applies JTC's message rules for one distro (tests run every message the node
emits through it); ``controlled_stop`` ends a streamed trajectory at rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

JTC_DISTROS = ("humble", "jazzy", "kilted")
# std::numeric_limits<float>::epsilon(): JTC's tolerance for "zero velocity at the end".
FLOAT_EPSILON = 1.1920928955078125e-07

# The JTC parameters that decide whether a message is accepted, with upstream's defaults per distro
# (joint_trajectory_controller_parameters.yaml of each branch).
_COMMON_DEFAULTS = {
    "allow_partial_joints_goal": False,
    "allow_integration_in_goal_trajectories": False,
    "effort_command_interface": False,  # not a parameter: whether command_interfaces holds "effort"
}
JTC_DEFAULTS: dict[str, dict[str, Any]] = {
    "humble": {**_COMMON_DEFAULTS, "allow_nonzero_velocity_at_trajectory_end": True},
    "jazzy": {**_COMMON_DEFAULTS, "allow_nonzero_velocity_at_trajectory_end": False},
    "kilted": {**_COMMON_DEFAULTS, "allow_nonzero_velocity_at_trajectory_end": False},
}


def _ns(msg_time) -> int:
    """builtin_interfaces Time or Duration (anything with sec and nanosec) in integer nanoseconds."""
    return int(msg_time.sec) * 1_000_000_000 + int(msg_time.nanosec)


def validate_jtc_trajectory(
    msg, controller_joints: Sequence[str], now_ns: int, distro: str, params: dict[str, Any] | None = None
) -> str | None:
    """Why JTC of ``distro`` would drop ``msg`` (a trajectory_msgs/JointTrajectory, or anything shaped like
    one), or None when it accepts it. ``now_ns``: the controller's clock when the message arrives;
    ``params``: JTC parameters that differ from the distro's defaults.

    The checks and their order follow ``validate_trajectory_msg`` of Jazzy and Kilted (Humble checks the
    stamp before the joint names, which changes the reason given, never the verdict).
    """
    if distro not in JTC_DEFAULTS:
        raise ValueError(f"distro must be one of {list(JTC_DISTROS)}, got {distro!r}")
    p = {**JTC_DEFAULTS[distro], **(params or {})}
    names = list(msg.joint_names)
    if not p["allow_partial_joints_goal"] and len(names) != len(controller_joints):
        return (
            f"joints on incoming trajectory don't match the controller joints ({len(names)} for "
            f"{len(controller_joints)})"
        )
    if not names:
        return "empty joint names"
    if not msg.points:
        return "empty trajectory"
    for name in names:
        if name not in controller_joints:
            return f"incoming joint {name} doesn't match the controller's joints"
    if not p["allow_nonzero_velocity_at_trajectory_end"]:
        for name, v in zip(names, msg.points[-1].velocities):
            if abs(v) > FLOAT_EPSILON:
                return f"velocity of last trajectory point of joint {name} is not zero: {v:.15f}"
    stamp_ns = _ns(msg.header.stamp)
    if stamp_ns != 0:
        end_ns = stamp_ns + _ns(msg.points[-1].time_from_start)
        if end_ns < now_ns:
            return (
                f"trajectory with non-zero start time ({stamp_ns * 1e-9:.9f}) ends in the past "
                f"({end_ns * 1e-9:.9f} < {now_ns * 1e-9:.9f})"
            )
    previous_ns = 0
    for i, point in enumerate(msg.points):
        tfs_ns = _ns(point.time_from_start)
        if i > 0 and tfs_ns <= previous_ns:
            return (
                f"time between points {i - 1} and {i} is not strictly increasing ({previous_ns * 1e-9} and "
                f"{tfs_ns * 1e-9})"
            )
        previous_ns = tfs_ns
        fields = (
            ("positions", point.positions),
            ("velocities", point.velocities),
            ("accelerations", point.accelerations),
        )
        if p["allow_integration_in_goal_trajectories"]:
            if all(len(values) == 0 for _, values in fields):
                return f"point {i} has no position, velocity or acceleration"
            allow_empty = ("positions", "velocities", "accelerations")
        else:
            allow_empty = ("velocities", "accelerations")
        for field, values in fields:
            if len(values) == 0 and field in allow_empty:
                continue
            if len(values) != len(names):
                return f"mismatch between joint_names size ({len(names)}) and {field} ({len(values)}) at point #{i}"
        if len(point.effort) and (distro == "humble" or not p["effort_command_interface"]):
            return f"point {i} has effort values; this controller takes none"
    return None


def check_controller_joints(
    interface: str, ours: Sequence[str], theirs: Sequence[str], allow_partial: bool = False, interface_name: str = ""
) -> str | None:
    """Why commands in the order ``ours`` would drive the wrong joints of a ros2_control controller
    configured with ``joints`` = ``theirs``, or None when they fit.

    ``forward_position``: the array is taken by index, so the order must be identical, and the controller
    must command positions (``interface_name``, when it has one). ``joint_trajectory``: JTC maps names, so
    the order is free, but it needs exactly its joint set (a subset with ``allow_partial_joints_goal``).
    """
    ours, theirs = list(ours), list(theirs)
    if not theirs:
        return "the controller's joints parameter is empty"
    if interface == "forward_position":
        if interface_name and interface_name != "position":
            return (
                f"the controller commands '{interface_name}', not 'position': positions would be taken as "
                f"{interface_name}s"
            )
        if ours != theirs:
            return (
                f"joint order differs: we send {ours}, the controller takes {theirs} (a forward controller maps "
                "by index)"
            )
        return None
    if interface == "joint_trajectory":
        unknown = [j for j in ours if j not in theirs]
        if unknown:
            return f"the controller has no joints {unknown} (its joints: {theirs})"
        missing = [j for j in theirs if j not in ours]
        if missing and not allow_partial:
            return f"we do not send joints {missing} the controller needs (allow_partial_joints_goal is false)"
        return None
    raise ValueError(f"no ros2_control controller behind interface {interface!r}")


def controlled_stop(
    q: np.ndarray, v: np.ndarray, acceleration: np.ndarray, lower: np.ndarray, upper: np.ndarray, min_duration_s: float
) -> tuple[float, np.ndarray]:
    """(T, q_end): all joints brake together from (q, v) to rest in T = max_j |v_j| / a_j (at least
    ``min_duration_s``), along the parabola q + v t - v t^2 / (2T), which ends at q + v T / 2 (clamped into
    the position limits). The executor's own stops follow the same rule; a cubic Hermite segment from
    (q, v) to (q_end, 0) over T reproduces the parabola exactly, so JTC's spline brakes within the limits.
    """
    duration_s = max(float(np.max(np.abs(v) / acceleration)), min_duration_s)
    return duration_s, np.clip(q + v * (0.5 * duration_s), lower, upper)

"""safety_filter_node's parameters and the core configuration they build. No rclpy import."""

from __future__ import annotations

import math
from typing import Any

from vla_ros.params.spec import ParamSpec
from vla_ros.params.tightening import HIGHER, LOWER, ON
from vla_ros.safety import ConfigError, LimitOverride, Obstacle, SafetyConfig
from vla_ros.safety.config import MODES


def lines(value) -> tuple[str, ...]:
    """String-array parameters default to [''] (an empty list has no type in ROS 2): blanks are ignored."""
    return tuple(v.strip() for v in value if v.strip())


def _check_each(parse):
    def check(value) -> str | None:
        for i, line in enumerate(lines(value)):
            try:
                parse(line, i) if parse is Obstacle.parse else parse(line)
            except ConfigError as err:
                return str(err)
        return None

    return check


# Why the lower bounds: values below them mean nothing (the controller's table says the same of its own).
_MM = "under 1 mm it is below the accuracy of the collision meshes and of the forward kinematics"
_MRAD = "under 1 mrad it is below the joints' encoder resolution and noise"
_SCALE = "below 1 % of the limits the arm barely moves (to stop it, use the controller's ~/enable)"
_STATE_PERIODS = (
    "joint states come at 100 Hz (ros2_control, the sim): under two of their periods a fresh one is refused"
)


def _xyz(name: str):
    return lambda v: None if len(v) == 3 else f"{name} needs 3 values (x, y, z), got {list(v)}"


PARAMS = [
    ParamSpec(
        "robot_description_file",
        "",
        "URDF file to load; empty = the /robot_description topic (transient local)",
        read_only=True,
    ),
    ParamSpec(
        "srdf_file",
        "",
        "SRDF whose disable_collisions pairs are not checked; empty = adjacent and touching-at-reference pairs",
        read_only=True,
    ),
    ParamSpec(
        "package_paths",
        [""],
        "where package:// meshes resolve before the ament index (AMENT_PREFIX_PATH): 'name=/path/to/package' or a "
        "folder holding packages",
        read_only=True,
    ),
    ParamSpec(
        "joints",
        [""],
        "joints a chunk must command; empty = every actuated (non-mimic) joint of the URDF",
        read_only=True,
    ),
    ParamSpec("on_unsafe", "truncate", "keep the safe prefix of a chunk, or reject the whole chunk", choices=MODES),
    ParamSpec(
        "clearance_m",
        0.01,
        "distance kept from the table, workspace bounds and obstacles (0 = contact allowed)",
        min_value=0.0,
        max_value=0.5,
        min_positive=0.001,
        min_reason=_MM,
    ),
    ParamSpec(
        "self_clearance_m",
        0.005,
        "distance kept between the robot's own links (0 = contact allowed)",
        min_value=0.0,
        max_value=0.2,
        min_positive=0.001,
        min_reason=_MM,
    ),
    ParamSpec(
        "position_margin_rad",
        0.01,
        "distance kept from revolute joints' URDF position limits (0 = the limits themselves)",
        min_value=0.0,
        max_value=0.5,
        min_positive=0.001,
        min_reason=_MRAD,
    ),
    ParamSpec(
        "tracking_tolerance_rad",
        0.05,
        "measured-to-first-point offset of revolute joints not counted as motion (servo lag; 0 = every offset counts)",
        min_value=0.0,
        max_value=0.5,
        min_positive=0.001,
        min_reason=_MRAD,
    ),
    ParamSpec(
        "tracking_tolerance_m",
        0.03,
        "measured-to-first-point offset of prismatic joints not counted as motion (a gripper closed "
        "on an object; 0 = every offset counts)",
        min_value=0.0,
        max_value=0.1,
        min_positive=0.001,
        min_reason="under 1 mm it is below a gripper's encoder resolution and noise",
    ),
    ParamSpec(
        "position_clamp_rad",
        0.0,
        "revolute targets this little past a limit are clamped onto it (further: unsafe; 0 = none clamped)",
        min_value=0.0,
        max_value=0.2,
        min_positive=0.001,
        min_reason=_MRAD,
    ),
    ParamSpec(
        "position_clamp_m",
        0.01,
        "prismatic targets this little past a limit are clamped onto it (further: unsafe; 0 = none clamped)",
        min_value=0.0,
        max_value=0.05,
        min_positive=0.001,
        min_reason="under 1 mm it is below a gripper's encoder resolution and noise",
    ),
    ParamSpec(
        "position_margin_m",
        0.0,
        "distance kept from prismatic joints' URDF position limits (0 = the limits themselves)",
        min_value=0.0,
        max_value=0.05,
        min_positive=0.001,
        min_reason="under 1 mm it is below a gripper's encoder resolution and noise",
    ),
    ParamSpec(
        "velocity_scale",
        1.0,
        "fraction [0.01, 1] of the URDF velocity limits",
        min_value=0.01,
        max_value=1.0,
        min_reason=_SCALE,
    ),
    ParamSpec(
        "acceleration_scale",
        1.0,
        "fraction [0.01, 1] of the acceleration limits",
        min_value=0.01,
        max_value=1.0,
        min_reason=_SCALE,
    ),
    ParamSpec(
        "default_acceleration_rad_s2",
        10.0,
        "revolute joints' acceleration limit where limit_overrides gives none",
        min_value=0.01,
        max_value=1000.0,
    ),
    ParamSpec(
        "default_acceleration_m_s2",
        1.0,
        "prismatic joints' acceleration limit where limit_overrides gives none",
        min_value=0.001,
        max_value=100.0,
    ),
    ParamSpec(
        "limit_overrides",
        [""],
        "tighter limits per joint: 'joint: lower=.. upper=.. velocity=.. acceleration=..' (never looser than the URDF)",
        check=_check_each(LimitOverride.parse),
    ),
    ParamSpec(
        "max_time_scale",
        5.0,
        "most a chunk may be slowed down to meet velocity/acceleration limits",
        min_value=1.0,
        max_value=100.0,
        min_reason="1 = never slow a chunk down; less would speed it up",
    ),
    ParamSpec(
        "max_chunk_age_s",
        0.5,
        "chunks stamped earlier than this are stale",
        min_value=0.02,
        max_value=10.0,
        min_reason="a chunk's stamp is its newest observation, and joint states come 10 ms apart: under 20 ms "
        "chunks planned "
        "from the freshest state are refused",
    ),
    ParamSpec(
        "max_future_stamp_s",
        0.05,
        "chunks or joint states stamped later than this in the future are refused",
        min_value=0.001,
        max_value=10.0,
        min_reason="the clocks of two hosts agree to a millisecond at best (NTP, PTP), and /clock trails the sim's "
        "stamps",
    ),
    ParamSpec(
        "max_state_age_s",
        0.2,
        "the joint state must be at most this old",
        min_value=0.02,
        max_value=10.0,
        min_reason=_STATE_PERIODS,
    ),
    ParamSpec(
        "max_horizon_s",
        30.0,
        "largest time_from_start accepted",
        min_value=0.1,
        max_value=3600.0,
        min_reason="a chunk must reach at least the next one (the shipped policy ticks at 10 Hz): a shorter limit "
        "refuses every chunk that does",
    ),
    ParamSpec("max_points", 1000, "most points a chunk may have", min_value=2, max_value=100000),
    ParamSpec(
        "max_joint_step_rad",
        0.05,
        "largest revolute joint step between checked configurations",
        min_value=0.001,
        max_value=1.0,
    ),
    ParamSpec(
        "max_joint_step_m",
        0.01,
        "largest prismatic joint step between checked configurations",
        min_value=0.0001,
        max_value=0.1,
    ),
    ParamSpec("table_enabled", True, "keep clear of the table top (half-space z <= table_height_m)"),
    ParamSpec("table_height_m", 0.0, "table top height in the base frame", min_value=-10.0, max_value=10.0),
    ParamSpec("workspace_enabled", False, "keep the robot inside the workspace box"),
    ParamSpec(
        "workspace_min_m", [-0.9, -0.9, -0.1], "workspace box lower corner (x, y, z)", check=_xyz("workspace_min_m")
    ),
    ParamSpec(
        "workspace_max_m", [0.9, 0.9, 1.3], "workspace box upper corner (x, y, z)", check=_xyz("workspace_max_m")
    ),
    ParamSpec(
        "obstacles",
        [""],
        "static obstacles: 'box center=x,y,z size=sx,sy,sz [rpy=r,p,y]', 'sphere center=.. radius=r', "
        "'plane normal=nx,ny,nz offset=d' (solid where normal . x <= d)",
        check=_check_each(Obstacle.parse),
    ),
    ParamSpec(
        "check_stopping",
        True,
        "the stop after a chunk's last point (at the acceleration limits) must be collision-free too",
    ),
    ParamSpec(
        "diagnostics_period_s",
        1.0,
        "period of /diagnostics (wall time)",
        read_only=True,
        min_value=0.1,
        max_value=60.0,
        min_reason="more often than 10 Hz the status floods /diagnostics",
    ),
    ParamSpec(
        "sensor_qos",
        "reliable",
        "/joint_states subscription: reliable, or best_effort for drivers publishing with SensorDataQoS",
        read_only=True,
        choices=("reliable", "best_effort"),
    ),
    ParamSpec(
        "allow_runtime_loosening",
        False,
        "allow runtime parameter changes that weaken a check (logged at WARN); false: disabling a check, lowering "
        "a clearance or "
        "margin, raising a scale, limit or tolerance, or removing an obstacle is refused",
        read_only=True,
    ),
    ParamSpec(
        "joint_state_timeout_s",
        0.5,
        "joint states silent for this long (wall or ROS time) are reported at ERROR",
        min_value=0.02,
        max_value=60.0,
        min_reason="joint states come at 100 Hz (ros2_control, the sim): under two of their periods a live source "
        "times out",
    ),
    ParamSpec(
        "chunk_timeout_s",
        0.5,
        "no chunk from the policy for this long (wall or ROS time) is reported at WARN (policy dead or frozen?)",
        min_value=0.2,
        max_value=60.0,
        min_reason="chunks come at the policy's rate (10 Hz shipped): under two of its periods the watchdog warns "
        "between any two chunks",
    ),
    ParamSpec(
        "clock_timeout_s",
        0.5,
        "on simulated time: /clock silent for this long (wall time) is reported at ERROR (simulator dead?)",
        min_value=0.05,
        max_value=60.0,
        min_reason="/clock comes every few ms in simulation (the sim: 200 Hz; Isaac: each rendered frame): under "
        "50 ms a busy simulator reads as dead",
    ),
    ParamSpec(
        "controller",
        "controller",
        "the controller whose heartbeat (<controller>/heartbeat, 10 Hz from its control loop) is watched: "
        "silent for controller_timeout_s (wall time) is reported at ERROR (controller stalled or dead: the arm "
        "gets no commands); "
        "relative names are taken in the filter's namespace; '' = not watched",
        read_only=True,
    ),
    ParamSpec(
        "controller_timeout_s",
        0.3,
        "the controller's heartbeat silent for this long (wall time) is reported at ERROR",
        min_value=0.25,
        max_value=60.0,
        min_reason="the heartbeat comes every 0.1 s: under 2.5 of its periods a scheduling hiccup reads as a stall",
    ),
]
SPECS = {s.name: s for s in PARAMS}


# ---- runtime changes may only tighten (see vla_ros.params.tightening) ------------------------------------
def _box_rule(side: str):
    """workspace_min_m may only move up, workspace_max_m only down, while the workspace check is on."""

    def rule(old, new, old_values, new_values) -> str | None:
        if not (old_values["workspace_enabled"] and new_values["workspace_enabled"]):
            return None  # switching the check on is tightening; switching it off has its own rule
        grows = [i for i in range(3) if (new[i] < old[i] if side == "min" else new[i] > old[i])]
        if grows:
            axes = ", ".join("xyz"[i] for i in grows)
            return f"workspace_{side}_m: {list(old)} -> {list(new)} enlarges the workspace box along {axes}"
        return None

    return rule


def _shape(o: Obstacle) -> tuple:
    return (o.kind, o.center_m, o.size_m, o.rpy_rad, o.radius_m, o.normal, o.offset_m)


def _obstacles_rule(old, new, old_values, new_values) -> str | None:
    """Obstacles may be added, never removed, moved or shrunk (compared by shape, whatever their names)."""
    try:
        kept = {_shape(Obstacle.parse(line, i)) for i, line in enumerate(lines(new))}
        gone = [line for i, line in enumerate(lines(old)) if _shape(Obstacle.parse(line, i)) not in kept]
    except ConfigError:
        return None  # the value's own check reports it
    return f"obstacles: removing or changing {gone} loosens the collision check" if gone else None


def _effective_overrides(values, robot) -> dict[tuple[str, str], float]:
    """(joint, key) -> the limit limit_overrides sets for it, with the URDF's value where it sets none
    (unknown without a robot: +-inf) and the default acceleration where it gives none."""
    try:
        overrides = {o.joint: o for o in (LimitOverride.parse(line) for line in lines(values["limit_overrides"]))}
    except ConfigError:
        return {}
    joints = list(robot.joint_names) if robot is not None else list(overrides)
    out = {}
    for j in joints:
        o = overrides.get(j)
        if robot is not None and j in robot.joint_names:
            i = robot.joint_names.index(j)
            urdf = {
                "lower": float(robot.lower[i]),
                "upper": float(robot.upper[i]),
                "velocity": float(robot.velocity[i]),
            }
            accel = values["default_acceleration_m_s2"] if robot.prismatic[i] else values["default_acceleration_rad_s2"]
        else:  # conservative: the URDF could allow anything, the default could be the larger one
            urdf = {"lower": -math.inf, "upper": math.inf, "velocity": math.inf}
            accel = max(values["default_acceleration_m_s2"], values["default_acceleration_rad_s2"])
        out[(j, "lower")] = max(urdf["lower"], o.lower) if o and o.lower is not None else urdf["lower"]
        out[(j, "upper")] = min(urdf["upper"], o.upper) if o and o.upper is not None else urdf["upper"]
        out[(j, "velocity")] = min(urdf["velocity"], o.velocity) if o and o.velocity is not None else urdf["velocity"]
        out[(j, "acceleration")] = o.acceleration if o and o.acceleration is not None else accel
    return out


def _overrides_rule(robot):
    def rule(old, new, old_values, new_values) -> str | None:
        before, after = _effective_overrides(old_values, robot), _effective_overrides(new_values, robot)
        looser = []
        for (joint, key), was in before.items():
            now = after.get((joint, key))
            if now is None and robot is None:
                now = {"lower": -math.inf, "upper": math.inf}.get(key, math.inf)
            if now is None:
                continue
            if (now < was) if key == "lower" else (now > was):
                looser.append(f"{joint} {key} {was:g} -> {now:g}")
        return f"limit_overrides: loosens {', '.join(looser)}" if looser else None

    return rule


def tightening_rules(robot=None) -> dict:
    """The direction each parameter may move at run time; ``robot`` (a RobotModel, once known) lets
    limit_overrides be compared with the URDF's limits instead of conservatively."""
    return {
        "clearance_m": HIGHER, "self_clearance_m": HIGHER, "position_margin_rad": HIGHER, "position_margin_m": HIGHER,
        "tracking_tolerance_rad": LOWER, "tracking_tolerance_m": LOWER,
        "position_clamp_rad": LOWER, "position_clamp_m": LOWER,
        "velocity_scale": LOWER, "acceleration_scale": LOWER,
        "default_acceleration_rad_s2": LOWER, "default_acceleration_m_s2": LOWER,
        "limit_overrides": _overrides_rule(robot),
        "max_time_scale": LOWER, "max_chunk_age_s": LOWER, "max_future_stamp_s": LOWER, "max_state_age_s": LOWER,
        "max_horizon_s": LOWER, "max_points": LOWER, "max_joint_step_rad": LOWER, "max_joint_step_m": LOWER,
        "table_enabled": ON, "table_height_m": HIGHER,
        "workspace_enabled": ON, "workspace_min_m": _box_rule("min"), "workspace_max_m": _box_rule("max"),
        "obstacles": _obstacles_rule, "check_stopping": ON,
        "joint_state_timeout_s": LOWER, "chunk_timeout_s": LOWER, "clock_timeout_s": LOWER,
    }  # fmt: skip


def config_from_params(p: dict[str, Any]) -> SafetyConfig:
    """The core configuration from parameter values (raises ConfigError naming the field)."""
    return SafetyConfig(
        joints=lines(p["joints"]),
        position_margin_rad=p["position_margin_rad"],
        position_margin_m=p["position_margin_m"],
        tracking_tolerance_rad=p["tracking_tolerance_rad"],
        tracking_tolerance_m=p["tracking_tolerance_m"],
        position_clamp_rad=p["position_clamp_rad"],
        position_clamp_m=p["position_clamp_m"],
        velocity_scale=p["velocity_scale"],
        acceleration_scale=p["acceleration_scale"],
        default_acceleration_rad_s2=p["default_acceleration_rad_s2"],
        default_acceleration_m_s2=p["default_acceleration_m_s2"],
        limit_overrides=lines(p["limit_overrides"]),
        max_time_scale=p["max_time_scale"],
        max_chunk_age_s=p["max_chunk_age_s"],
        max_future_stamp_s=p["max_future_stamp_s"],
        max_state_age_s=p["max_state_age_s"],
        max_horizon_s=p["max_horizon_s"],
        max_points=p["max_points"],
        self_clearance_m=p["self_clearance_m"],
        clearance_m=p["clearance_m"],
        max_joint_step_rad=p["max_joint_step_rad"],
        max_joint_step_m=p["max_joint_step_m"],
        table_enabled=p["table_enabled"],
        table_height_m=p["table_height_m"],
        workspace_min_m=tuple(p["workspace_min_m"]) if p["workspace_enabled"] else None,
        workspace_max_m=tuple(p["workspace_max_m"]) if p["workspace_enabled"] else None,
        obstacles=lines(p["obstacles"]),
        on_unsafe=p["on_unsafe"],
        check_stopping=p["check_stopping"],
    )

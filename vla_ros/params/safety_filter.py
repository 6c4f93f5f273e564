"""safety_filter_node's parameters and the core configuration they build. No rclpy import.

Each parameter says which ``SafetyConfig`` field it sets (``field``) and which way a run-time change is
stricter (``tighten``); the joint limits' parameters are ``vla_ros.params.limits``'s, shared with the
controller."""

from __future__ import annotations

from typing import Any

from vla_ros.params import common, limits
from vla_ros.params.limits import check_lines, lines  # noqa: F401  (lines re-exported for the node)
from vla_ros.params.robot import ROBOT_PROFILE, robot_files
from vla_ros.params.spec import ParamSpec, build_config
from vla_ros.params.tightening import HIGHER, LOWER, ON, rules_from_specs
from vla_ros.safety import ConfigError, Obstacle, SafetyConfig
from vla_ros.safety.config import MODES

# Why the lower bounds: values below them mean nothing (the controller's table says the same of its own).
_MM = "under 1 mm it is below the accuracy of the collision meshes and of the forward kinematics"
_MRAD = "under 1 mrad it is below the joints' encoder resolution and noise"
_STATE_PERIODS = common.STATE_PERIODS_REASON


def _xyz(name: str):
    return lambda v: None if len(v) == 3 else f"{name} needs 3 values (x, y, z), got {list(v)}"


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


PARAMS = [
    ParamSpec(
        "robot_description_file",
        "",
        "URDF file to load; empty = the robot profile's, else the /robot_description topic (transient local)",
        read_only=True,
    ),
    ROBOT_PROFILE,
    ParamSpec(
        "srdf_file",
        "",
        "SRDF whose disable_collisions pairs are not checked; empty = the robot profile's, else adjacent and "
        "touching-at-reference pairs",
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
        "joints a chunk must command; empty = the robot profile's (arm, then gripper), else every actuated (non-mimic) "
        "joint of the URDF",
        read_only=True,
        field=True,
        to_field=lines,
    ),
    ParamSpec(
        "on_unsafe", "truncate", "keep the safe prefix of a chunk, or reject the whole chunk", choices=MODES, field=True
    ),
    ParamSpec(
        "clearance_m",
        0.01,
        "distance kept from the table, workspace bounds and obstacles (0 = contact allowed)",
        min_value=0.0,
        max_value=0.5,
        min_positive=0.001,
        min_reason=_MM,
        field=True,
        tighten=HIGHER,
    ),
    ParamSpec(
        "self_clearance_m",
        0.005,
        "distance kept between the robot's own links (0 = contact allowed)",
        min_value=0.0,
        max_value=0.2,
        min_positive=0.001,
        min_reason=_MM,
        field=True,
        tighten=HIGHER,
    ),
    ParamSpec(
        "position_margin_rad",
        0.01,
        "distance kept from revolute joints' URDF position limits (0 = the limits themselves)",
        min_value=0.0,
        max_value=0.5,
        min_positive=0.001,
        min_reason=_MRAD,
        field=True,
        tighten=HIGHER,
    ),
    ParamSpec(
        "tracking_tolerance_rad",
        0.05,
        "measured-to-first-point offset of revolute joints not counted as motion (servo lag; 0 = every offset counts)",
        min_value=0.0,
        max_value=0.5,
        min_positive=0.001,
        min_reason=_MRAD,
        field=True,
        tighten=LOWER,
    ),
    ParamSpec(
        "tracking_tolerance_m",
        0.03,
        "measured-to-first-point offset of prismatic joints not counted as motion (a gripper closed on an object; 0 = "
        "every offset counts)",
        min_value=0.0,
        max_value=0.1,
        min_positive=0.001,
        min_reason="under 1 mm it is below a gripper's encoder resolution and noise",
        field=True,
        tighten=LOWER,
    ),
    ParamSpec(
        "position_clamp_rad",
        0.0,
        "revolute targets this little past a limit are clamped onto it (further: unsafe; 0 = none clamped)",
        min_value=0.0,
        max_value=0.2,
        min_positive=0.001,
        min_reason=_MRAD,
        field=True,
        tighten=LOWER,
    ),
    ParamSpec(
        "position_clamp_m",
        0.01,
        "prismatic targets this little past a limit are clamped onto it (further: unsafe; 0 = none clamped)",
        min_value=0.0,
        max_value=0.05,
        min_positive=0.001,
        min_reason="under 1 mm it is below a gripper's encoder resolution and noise",
        field=True,
        tighten=LOWER,
    ),
    ParamSpec(
        "position_margin_m",
        0.0,
        "distance kept from prismatic joints' URDF position limits (0 = the limits themselves)",
        min_value=0.0,
        max_value=0.05,
        min_positive=0.001,
        min_reason="under 1 mm it is below a gripper's encoder resolution and noise",
        field=True,
        tighten=HIGHER,
    ),
    *limits.PARAMS,
    ParamSpec(
        "max_time_scale",
        5.0,
        "most a chunk may be slowed down to meet velocity/acceleration limits",
        min_value=1.0,
        max_value=100.0,
        min_reason="1 = never slow a chunk down; less would speed it up",
        field=True,
        tighten=LOWER,
    ),
    ParamSpec(
        "max_chunk_age_s",
        0.5,
        "chunks stamped earlier than this are stale",
        min_value=0.02,
        max_value=10.0,
        min_reason="a chunk's stamp is its newest observation, and joint states come 10 ms apart: under 20 ms chunks "
        "planned from the freshest state are refused",
        field=True,
        tighten=LOWER,
    ),
    ParamSpec(
        "max_future_stamp_s",
        0.05,
        "chunks or joint states stamped later than this in the future are refused",
        min_value=0.001,
        max_value=10.0,
        min_reason="the clocks of two hosts agree to a millisecond at best (NTP, PTP), and /clock trails the sim's "
        "stamps",
        field=True,
        tighten=LOWER,
    ),
    ParamSpec(
        "max_state_age_s",
        0.2,
        "the joint state must be at most this old",
        min_value=0.02,
        max_value=10.0,
        min_reason=_STATE_PERIODS,
        field=True,
        tighten=LOWER,
    ),
    ParamSpec(
        "max_horizon_s",
        30.0,
        "largest time_from_start accepted",
        min_value=0.1,
        max_value=3600.0,
        min_reason="a chunk must reach at least the next one (the shipped policy ticks at 10 Hz): a shorter limit "
        "refuses every chunk that does",
        field=True,
        tighten=LOWER,
    ),
    ParamSpec(
        "max_chunk_points",
        1000,
        "most points a chunk may have",
        min_value=2,
        max_value=100000,
        field="max_points",
        tighten=LOWER,
        old_names=("max_points",),
    ),
    ParamSpec(
        "max_joint_step_rad",
        0.05,
        "largest revolute joint step between checked configurations",
        min_value=0.001,
        max_value=1.0,
        field=True,
        tighten=LOWER,
    ),
    ParamSpec(
        "max_joint_step_m",
        0.01,
        "largest prismatic joint step between checked configurations",
        min_value=0.0001,
        max_value=0.1,
        field=True,
        tighten=LOWER,
    ),
    ParamSpec(
        "table_enabled", True, "keep clear of the table top (half-space z <= table_height_m)", field=True, tighten=ON
    ),
    ParamSpec(
        "table_height_m",
        0.0,
        "table top height in the base frame; with a robot_profile, the profile's table_height_m instead",
        min_value=-10.0,
        max_value=10.0,
        field=True,
        tighten=HIGHER,
    ),
    ParamSpec("workspace_enabled", False, "keep the robot inside the workspace box", tighten=ON),
    ParamSpec(
        "workspace_min_m",
        [-0.9, -0.9, -0.1],
        "workspace box lower corner (x, y, z)",
        check=_xyz("workspace_min_m"),
        field=True,
        to_field=tuple,
        tighten=_box_rule("min"),
    ),
    ParamSpec(
        "workspace_max_m",
        [0.9, 0.9, 1.3],
        "workspace box upper corner (x, y, z)",
        check=_xyz("workspace_max_m"),
        field=True,
        to_field=tuple,
        tighten=_box_rule("max"),
    ),
    ParamSpec(
        "obstacles",
        [""],
        "static obstacles: 'box center=x,y,z size=sx,sy,sz [rpy=r,p,y]', 'sphere center=.. radius=r', 'plane "
        "normal=nx,ny,nz offset=d' (solid where normal . x <= d)",
        check=check_lines(Obstacle.parse, indexed=True),
        field=True,
        to_field=lines,
        tighten=_obstacles_rule,
    ),
    ParamSpec(
        "check_stopping",
        True,
        "the stop after a chunk's last point (at the acceleration limits) must be collision-free too",
        field=True,
        tighten=ON,
    ),
    common.diagnostics_period(),
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
        "allow runtime parameter changes that weaken a check (logged at WARN); false: disabling a check, lowering a "
        "clearance or margin, raising a scale, limit or tolerance, or removing an obstacle is refused",
        read_only=True,
    ),
    ParamSpec(
        "joint_state_timeout_s",
        0.5,
        "joint states silent for this long (wall or ROS time) are reported at ERROR",
        min_value=0.02,
        max_value=60.0,
        min_reason=common.JOINT_STATE_TIMEOUT_REASON,
        tighten=LOWER,
    ),
    ParamSpec(
        "chunk_timeout_s",
        0.5,
        "no chunk from the policy for this long (wall or ROS time) is reported at WARN (policy dead or frozen?)",
        min_value=0.2,
        max_value=60.0,
        min_reason=common.CHUNK_TIMEOUT_REASON,
        tighten=LOWER,
    ),
    common.CLOCK_TIMEOUT,
    ParamSpec(
        "controller",
        "controller",
        "the controller whose heartbeat (<controller>/heartbeat, 10 Hz from its control loop) is watched: silent for "
        "controller_timeout_s (wall time) is reported at ERROR (controller stalled or dead: the arm gets no "
        "commands); relative names are taken in the filter's namespace; '' = not watched",
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


def tightening_rules(robot=None) -> dict:
    """The direction each parameter may move at run time (each spec's ``tighten``); ``robot`` (a RobotModel,
    once known) lets limit_overrides be compared with the URDF's limits instead of conservatively."""
    return rules_from_specs(PARAMS, limit_overrides=limits.overrides_rule(robot))


def config_from_params(p: dict[str, Any]) -> SafetyConfig:
    """The core configuration from parameter values (raises ConfigError naming the field; ValueError for a robot
    profile that does not load). Without ``joints`` a chunk commands the robot profile's joints, as the
    controller's do; without either, every actuated joint of the URDF."""
    box = {} if p["workspace_enabled"] else {"workspace_min_m": None, "workspace_max_m": None}
    files = robot_files(p)
    joints = lines(p["joints"]) or files.joints
    if files.profile is not None:  # the table is where the robot profile says (the sim puts it there too)
        p = {**p, "table_height_m": files.profile.table_height_m}
    return build_config(SafetyConfig, PARAMS, p, joints=tuple(joints), **box)

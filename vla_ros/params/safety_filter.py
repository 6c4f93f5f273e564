"""safety_filter_node's parameters and the core configuration they build. No rclpy import."""

from __future__ import annotations

from typing import Any

from vla_ros.params.spec import ParamSpec
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


def _positive(name: str):
    return lambda v: None if v > 0.0 else f"{name} must be > 0 (a fraction of the URDF limit), got {v}"


def _xyz(name: str):
    return lambda v: None if len(v) == 3 else f"{name} needs 3 values (x, y, z), got {list(v)}"


PARAMS = [
    ParamSpec("robot_description_file", "", "URDF file to load; empty = the /robot_description topic (transient local)", read_only=True),
    ParamSpec("srdf_file", "", "SRDF whose disable_collisions pairs are not checked; empty = adjacent and touching-at-reference pairs", read_only=True),
    ParamSpec("package_paths", [""], "where package:// meshes resolve before the ament index (AMENT_PREFIX_PATH): 'name=/path/to/package' or a folder holding packages", read_only=True),
    ParamSpec("joints", [""], "joints a chunk must command; empty = every actuated (non-mimic) joint of the URDF", read_only=True),
    ParamSpec("on_unsafe", "truncate", "keep the safe prefix of a chunk, or reject the whole chunk", choices=MODES),
    ParamSpec("clearance_m", 0.01, "distance kept from the table, workspace bounds and obstacles", min_value=0.0, max_value=0.5),
    ParamSpec("self_clearance_m", 0.005, "distance kept between the robot's own links", min_value=0.0, max_value=0.2),
    ParamSpec("position_margin_rad", 0.01, "distance kept from revolute joints' URDF position limits", min_value=0.0, max_value=0.5),
    ParamSpec("tracking_tolerance_rad", 0.05, "measured-to-first-point offset of revolute joints not counted as motion (servo lag)", min_value=0.0, max_value=0.5),
    ParamSpec("tracking_tolerance_m", 0.03, "measured-to-first-point offset of prismatic joints not counted as motion (a gripper closed on an object)", min_value=0.0, max_value=0.1),
    ParamSpec("position_clamp_rad", 0.0, "revolute targets this little past a limit are clamped onto it (further: unsafe)", min_value=0.0, max_value=0.2),
    ParamSpec("position_clamp_m", 0.01, "prismatic targets this little past a limit are clamped onto it (further: unsafe)", min_value=0.0, max_value=0.05),
    ParamSpec("position_margin_m", 0.0, "distance kept from prismatic joints' URDF position limits", min_value=0.0, max_value=0.05),
    ParamSpec("velocity_scale", 1.0, "fraction (0, 1] of the URDF velocity limits", min_value=0.0, max_value=1.0, check=_positive("velocity_scale")),
    ParamSpec("acceleration_scale", 1.0, "fraction (0, 1] of the acceleration limits", min_value=0.0, max_value=1.0, check=_positive("acceleration_scale")),
    ParamSpec("default_acceleration_rad_s2", 10.0, "revolute joints' acceleration limit where limit_overrides gives none", min_value=0.01, max_value=1000.0),
    ParamSpec("default_acceleration_m_s2", 1.0, "prismatic joints' acceleration limit where limit_overrides gives none", min_value=0.001, max_value=100.0),
    ParamSpec("limit_overrides", [""], "tighter limits per joint: 'joint: lower=.. upper=.. velocity=.. acceleration=..' (never looser than the URDF)",
              check=_check_each(LimitOverride.parse)),
    ParamSpec("max_time_scale", 5.0, "most a chunk may be slowed down to meet velocity/acceleration limits", min_value=1.0, max_value=100.0),
    ParamSpec("max_chunk_age_s", 0.5, "chunks stamped earlier than this are stale", min_value=0.001, max_value=10.0),
    ParamSpec("max_future_stamp_s", 0.05, "chunks or joint states stamped later than this in the future are refused", min_value=0.0, max_value=10.0),
    ParamSpec("max_state_age_s", 0.2, "the joint state must be at most this old", min_value=0.001, max_value=10.0),
    ParamSpec("max_horizon_s", 30.0, "largest time_from_start accepted", min_value=0.01, max_value=3600.0),
    ParamSpec("max_points", 1000, "most points a chunk may have", min_value=2, max_value=100000),
    ParamSpec("max_joint_step_rad", 0.05, "largest revolute joint step between checked configurations", min_value=0.001, max_value=1.0),
    ParamSpec("max_joint_step_m", 0.01, "largest prismatic joint step between checked configurations", min_value=0.0001, max_value=0.1),
    ParamSpec("table_enabled", True, "keep clear of the table top (half-space z <= table_height_m)"),
    ParamSpec("table_height_m", 0.0, "table top height in the base frame", min_value=-10.0, max_value=10.0),
    ParamSpec("workspace_enabled", False, "keep the robot inside the workspace box"),
    ParamSpec("workspace_min_m", [-0.9, -0.9, -0.1], "workspace box lower corner (x, y, z)", check=_xyz("workspace_min_m")),
    ParamSpec("workspace_max_m", [0.9, 0.9, 1.3], "workspace box upper corner (x, y, z)", check=_xyz("workspace_max_m")),
    ParamSpec("obstacles", [""], "static obstacles: 'box center=x,y,z size=sx,sy,sz [rpy=r,p,y]', 'sphere center=.. radius=r', "
              "'plane normal=nx,ny,nz offset=d' (solid where normal . x <= d)", check=_check_each(Obstacle.parse)),
    ParamSpec("check_stopping", True, "the stop after a chunk's last point (at the acceleration limits) must be collision-free too"),
    ParamSpec("diagnostics_period_s", 1.0, "period of /diagnostics (wall time)", read_only=True, min_value=0.1, max_value=60.0),
    ParamSpec("sensor_qos", "reliable", "/joint_states subscription: reliable, or best_effort for drivers publishing with SensorDataQoS",
              read_only=True, choices=("reliable", "best_effort")),
]
SPECS = {s.name: s for s in PARAMS}


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

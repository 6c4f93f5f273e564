"""scripted_motion_node's parameters (the privileged scripted pick). No rclpy import."""

from __future__ import annotations

from vla_ros.params.spec import ParamSpec
from vla_ros.sim import CUP_COLORS

PARAMS = [
    ParamSpec("target_color", "red", "cup to pick", choices=tuple(CUP_COLORS)),
    ParamSpec(
        "speed_scale",
        1.0,
        "time scale of the scripted motion (> 1 is slower)",
        min_value=0.5,
        max_value=5.0,
        min_reason="faster than twice the scripted timing the gripper outruns its URDF velocity limit (0.1 m/s)",
    ),
    ParamSpec(
        "trajectory_controller",
        "joint_trajectory_controller",
        "commands go to /<name>/joint_trajectory",
        read_only=True,
    ),
]

"""MuJoCo simulation of a robot profile's arm (the bundled arm by default), the table and the cups. No rclpy import."""

from vla_ros.sim.arm_sim import HOME_Q, LIFT_HEIGHT_M, ArmSim, CameraIntrinsics, SimConfig
from vla_ros.sim.commands import CommandError, JointLimits
from vla_ros.sim.scene import CUP_COLORS, SceneConfig, default_urdf_path
from vla_ros.sim.trajectory import PositionTrajectory

__all__ = [
    "HOME_Q",
    "LIFT_HEIGHT_M",
    "ArmSim",
    "CameraIntrinsics",
    "CommandError",
    "CUP_COLORS",
    "JointLimits",
    "PositionTrajectory",
    "SceneConfig",
    "SimConfig",
    "default_urdf_path",
]

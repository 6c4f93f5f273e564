"""The controller's functional core: chunk execution at 100 Hz with blending and a watchdog. No rclpy import."""

from vla_ros.control.config import BLEND_MODES, ControllerConfig, UrdfJointLimits, bundled_urdf_path, limits_from_urdf
from vla_ros.control.executor import ChunkExecutor, Motion, smootherstep
from vla_ros.control.hermite import HermitePlan, pchip_slopes
from vla_ros.control.loop_stats import LoopStats

__all__ = [
    "BLEND_MODES",
    "ChunkExecutor",
    "ControllerConfig",
    "HermitePlan",
    "LoopStats",
    "Motion",
    "UrdfJointLimits",
    "bundled_urdf_path",
    "limits_from_urdf",
    "pchip_slopes",
    "smootherstep",
]

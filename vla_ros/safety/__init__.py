"""Safety filter core: limits and whole-chunk collision checking between the policy and the controller.

No rclpy import: ``safety_filter_node`` wraps this. Not a certified safety function; it belongs above the
robot's own safety controller (see ``filter`` for the checks and their order).
"""

from vla_ros.safety.collision import CollisionChecker, PathCheck
from vla_ros.safety.config import ConfigError, LimitOverride, Obstacle, SafetyConfig
from vla_ros.safety.filter import (
    POINT_REASONS,
    REASONS,
    VERDICTS,
    FilterReport,
    Finding,
    JointStateSample,
    SafetyFilter,
)
from vla_ros.safety.limits import JointLimitTable, LimitError, resolve_limits
from vla_ros.safety.robot import RobotModel, RobotModelError, load_robot, load_robot_files

__all__ = [
    "POINT_REASONS",
    "REASONS",
    "VERDICTS",
    "CollisionChecker",
    "ConfigError",
    "FilterReport",
    "Finding",
    "JointLimitTable",
    "JointStateSample",
    "LimitError",
    "LimitOverride",
    "Obstacle",
    "PathCheck",
    "RobotModel",
    "RobotModelError",
    "SafetyConfig",
    "SafetyFilter",
    "load_robot",
    "load_robot_files",
    "resolve_limits",
]

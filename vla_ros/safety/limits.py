"""Joint limits the filter enforces: the URDF's, tightened by configuration, never loosened (no rclpy import).

Position and velocity limits come from the URDF; acceleration limits from configuration (URDF has none); both
tightened by ``joint_limits.tighten_limits``, as the controller's are.
``resolve_limits`` raises ``LimitError`` naming every value that would loosen a URDF limit, so a node can
refuse that parameter change with the reason.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from vla_ros.joint_limits import tighten_limits
from vla_ros.safety.config import ConfigError, SafetyConfig
from vla_ros.safety.robot import RobotModel
from vla_ros.urdf_limits import UrdfJointLimits


class LimitError(ConfigError):
    """A configuration that would loosen the robot description's limits, or names joints it lacks."""


@dataclasses.dataclass(frozen=True)
class JointLimitTable:
    """Limits of the robot's actuated joints, in ``RobotModel.joint_names`` order.

    Args:
        lower / upper: position range a commanded point must stay in (URDF or tighter, minus margins).
        hard_lower / hard_upper: the URDF's own range (the stop extension is clipped to it).
        velocity / acceleration: rad/s or m/s, rad/s^2 or m/s^2 (after the scale factors).
        commanded: (n_act,) True for joints a chunk must command; others hold their measured position.
    """

    names: tuple[str, ...]
    lower: np.ndarray
    upper: np.ndarray
    hard_lower: np.ndarray
    hard_upper: np.ndarray
    velocity: np.ndarray
    acceleration: np.ndarray
    max_step: np.ndarray
    commanded: np.ndarray


def resolve_limits(robot: RobotModel | UrdfJointLimits, config: SafetyConfig) -> JointLimitTable:
    """The limits ``config`` gives ``robot``'s joints: a ``RobotModel`` (the filter) or the URDF limits of
    some joints (``urdf_limits.limits_for``; the policy shapes its chunks to the same numbers)."""
    names = robot.joint_names
    reasons = []
    unknown = [j for j in config.joints if j not in names]
    if unknown:
        reasons.append(f"joints {unknown} are not actuated joints of the robot ({list(names)})")
    tight = tighten_limits(robot, config.limit_settings)  # the one resolution the controller uses too
    reasons.extend(tight.reasons)
    margin = np.where(robot.prismatic, config.position_margin_m, config.position_margin_rad)
    lower, upper = tight.lower + margin, tight.upper - margin
    for i, name in enumerate(names):
        if not lower[i] <= upper[i]:
            reasons.append(
                f"{name}: no range left: [{lower[i]:g}, {upper[i]:g}] after margins of {margin[i]:g} on the limits"
            )
    if reasons:
        raise LimitError("; ".join(reasons))
    commanded = np.array([(not config.joints) or (n in config.joints) for n in names], dtype=bool)
    return JointLimitTable(
        names=names,
        lower=lower,
        upper=upper,
        hard_lower=robot.lower.copy(),
        hard_upper=robot.upper.copy(),
        velocity=tight.velocity,
        acceleration=tight.acceleration,
        max_step=np.where(robot.prismatic, config.max_joint_step_m, config.max_joint_step_rad),
        commanded=commanded,
    )

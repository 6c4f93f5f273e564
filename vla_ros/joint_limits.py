"""One source of joint limits: the URDF's, tightened by one settings block (no rclpy import).

Position and velocity limits come from the URDF (``vla_ros.urdf_limits``); acceleration limits, which URDF
lacks, and every tightening (scales, per-joint overrides) come from ``JointLimitSettings``: the parameters
``velocity_scale``, ``acceleration_scale``, ``default_acceleration_rad_s2``, ``default_acceleration_m_s2`` and
``limit_overrides``, set once in ``config/limits.yaml``. The safety filter (``safety.limits``), the
controller (``control.config``) and the policy's chunk shaping (through the filter's configuration) all
resolve them here, so the three never disagree about a limit.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message names the field and quotes the value."""


def parse_floats(text: str, n: int, field: str, line: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise ConfigError(f"{field}={text!r} in {line!r} is not a list of numbers") from None
    if len(values) != n:
        raise ConfigError(f"{field}={text!r} in {line!r} needs {n} numbers, got {len(values)}")
    if not all(math.isfinite(v) for v in values):
        raise ConfigError(f"{field}={text!r} in {line!r} must be finite")
    return values


def key_values(words: list[str], allowed: set[str], line: str) -> dict[str, str]:
    out = {}
    for word in words:
        key, sep, value = word.partition("=")
        if not sep or not value:
            raise ConfigError(f"expected key=value, got {word!r} in {line!r}")
        if key not in allowed:
            raise ConfigError(f"unknown key {key!r} in {line!r}; expected one of {sorted(allowed)}")
        if key in out:
            raise ConfigError(f"key {key!r} given twice in {line!r}")
        out[key] = value
    return out


@dataclasses.dataclass(frozen=True)
class LimitOverride:
    """Tighter limits for one joint (None = keep the URDF value / the default acceleration)."""

    joint: str
    lower: float | None = None
    upper: float | None = None
    velocity: float | None = None
    acceleration: float | None = None

    @classmethod
    def parse(cls, line: str) -> LimitOverride:
        """``joint_name: lower=.. upper=.. velocity=.. acceleration=..`` (any subset of the keys)."""
        name, sep, rest = line.partition(":")
        name = name.strip()
        if not sep or not name:
            raise ConfigError(f"limit override {line!r} must look like 'joint_name: upper=1.0 velocity=1.5'")
        kv = key_values(rest.split(), {"lower", "upper", "velocity", "acceleration"}, line)
        if not kv:
            raise ConfigError(f"limit override {line!r} sets nothing")
        values = {k: parse_floats(v, 1, k, line)[0] for k, v in kv.items()}
        for key in ("velocity", "acceleration"):
            if key in values and values[key] <= 0.0:
                raise ConfigError(f"limit override {line!r}: {key} must be positive, got {values[key]}")
        if "lower" in values and "upper" in values and values["lower"] >= values["upper"]:
            raise ConfigError(f"limit override {line!r}: lower={values['lower']} must be below upper={values['upper']}")
        return cls(name, **values)


@dataclasses.dataclass(frozen=True)
class JointLimitSettings:
    """How the configuration tightens the URDF's joint limits.

    Args:
        velocity_scale / acceleration_scale: fractions in (0, 1] of the velocity and acceleration limits.
        default_acceleration_rad_s2 / default_acceleration_m_s2: acceleration limits of revolute / prismatic
            joints where no override gives one (URDF has no acceleration limits).
        limit_overrides: per-joint tighter limits, ``"joint: lower=.. upper=.. velocity=.. acceleration=.."``.
    """

    velocity_scale: float = 1.0
    acceleration_scale: float = 1.0
    default_acceleration_rad_s2: float = 10.0  # similar to industrial arms' joint acceleration limits
    default_acceleration_m_s2: float = 1.0  # gripper fingers
    limit_overrides: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("velocity_scale", "acceleration_scale"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and 0.0 < v <= 1.0):
                raise ConfigError(f"{name} must be in (0, 1] (it can only tighten the limits), got {v!r}")
        for name in ("default_acceleration_rad_s2", "default_acceleration_m_s2"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0.0):
                raise ConfigError(f"{name} must be a positive number, got {v!r}")
        overrides = tuple(LimitOverride.parse(line) for line in self.limit_overrides)
        joints = [o.joint for o in overrides]
        if len(set(joints)) != len(joints):
            raise ConfigError(f"limit_overrides name a joint twice: {joints}")
        object.__setattr__(self, "_overrides", overrides)

    @property
    def parsed_overrides(self) -> tuple[LimitOverride, ...]:
        return self._overrides  # type: ignore[attr-defined]


@dataclasses.dataclass(frozen=True)
class TightenedLimits:
    """Limits of named joints after the settings: position range (before any margin), velocity and
    acceleration (scaled). ``reasons`` lists every override that would loosen the URDF or names an unknown
    joint; the caller refuses the configuration with them."""

    lower: np.ndarray
    upper: np.ndarray
    velocity: np.ndarray
    acceleration: np.ndarray
    reasons: tuple[str, ...] = ()


def tighten_limits(robot, settings: JointLimitSettings, unknown_joints: bool = True) -> TightenedLimits:
    """``robot``'s URDF limits (``joint_names``, ``lower``, ``upper``, ``velocity``, ``prismatic``: a
    ``urdf_limits.UrdfJointLimits`` or a ``safety.RobotModel``) tightened by ``settings``. An override naming a
    joint ``robot`` lacks is a reason when ``unknown_joints`` is true, else skipped (the controller drives
    some of the robot's joints; the filter, which knows them all, names the typo)."""
    names: Sequence[str] = robot.joint_names
    reasons = []
    lower, upper, velocity = robot.lower.copy(), robot.upper.copy(), robot.velocity.copy()
    acceleration = np.where(robot.prismatic, settings.default_acceleration_m_s2, settings.default_acceleration_rad_s2)
    for o in settings.parsed_overrides:
        if o.joint not in names:
            if unknown_joints:
                reasons.append(f"limit_overrides names {o.joint!r}, not an actuated joint of the robot ({list(names)})")
            continue
        i = names.index(o.joint)
        if o.lower is not None:
            if o.lower < robot.lower[i]:
                reasons.append(f"{o.joint}: lower={o.lower} would loosen the URDF lower limit {robot.lower[i]:g}")
            lower[i] = max(lower[i], o.lower)
        if o.upper is not None:
            if o.upper > robot.upper[i]:
                reasons.append(f"{o.joint}: upper={o.upper} would loosen the URDF upper limit {robot.upper[i]:g}")
            upper[i] = min(upper[i], o.upper)
        if o.velocity is not None:
            if o.velocity > robot.velocity[i]:
                reasons.append(
                    f"{o.joint}: velocity={o.velocity} would loosen the URDF velocity limit {robot.velocity[i]:g}"
                )
            velocity[i] = min(velocity[i], o.velocity)
        if o.acceleration is not None:
            acceleration[i] = o.acceleration
    return TightenedLimits(
        lower=lower,
        upper=upper,
        velocity=velocity * settings.velocity_scale,
        acceleration=acceleration * settings.acceleration_scale,
        reasons=tuple(reasons),
    )

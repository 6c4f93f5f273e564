"""Controller configuration and the joint limits it enforces (no rclpy import).

Velocity and position limits come from the URDF (``<limit velocity lower upper>``) through
``vla_ros.urdf_limits``, the reader the safety filter uses too; acceleration limits are not part of URDF and
come from the configuration. Both are tightened by the joint limits' settings (scales, default accelerations,
per-joint overrides: ``config/limits.yaml``) through ``vla_ros.joint_limits``, as the filter's are, so the two
never disagree about a limit.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

import numpy as np

from vla_ros.joint_limits import JointLimitSettings, tighten_limits
from vla_ros.urdf_limits import UrdfJointLimits, limits_for

BLEND_MODES = ("crossfade", "freeze")


def bundled_urdf_path() -> Path:
    """The robot description shipped in the package (the same file the simulator loads)."""
    return Path(str(resources.files("vla_ros") / "description" / "vla_arm.urdf"))


def limits_from_urdf(path: Path | str, joints: Sequence[str]) -> UrdfJointLimits:
    """Position and velocity limits of ``joints`` from the URDF (the reader the safety filter uses too).
    Raises ValueError naming the joint that lacks one."""
    return limits_for(Path(path), joints)


@dataclasses.dataclass(frozen=True)
class ControllerConfig:
    """Everything the chunk executor needs; one consistent snapshot is read per control cycle.

    Args:
        joint_names: the controlled joints, in output order (the forward controller's array order).
        velocity_limits: per joint, rad/s or m/s (URDF ``<limit velocity>``, or a tighter override, times a scale).
        acceleration_limits: per joint, rad/s^2 or m/s^2. Bounds the velocity change per period, blends
            and every stop (watchdog, e-stop, disable).
        position_lower / position_upper: per joint; the command is clamped inside as a last guard
            (the safety filter already keeps chunks inside them with a margin).
        rate_hz: control rate; the nominal period is 1 / rate_hz.
        blend_mode: ``crossfade`` (old and new chunk mixed with a smooth weight over the horizon) or
            ``freeze`` (old chunk kept for ``freeze_periods``, then one cubic to the new chunk).
        blend_horizon_s: how long a new chunk takes to take over the running one.
        freeze_periods: control periods of the old chunk that ``freeze`` keeps (already committed).
        max_chunk_age_s: a chunk whose stamp (observation time) is older than this is refused, and stops
            the arm if it is still being executed: it was computed from stale observations.
        max_chunk_future_s: chunks stamped further ahead of the controller's clock are rejected (a clock
            mismatch, or a chunk from before a simulator reset).
        joint_state_timeout_s: without joint states for this long the arm is stopped and held.
        use_chunk_velocities: take the chunk's velocities as spline tangents when it carries them.
            Off by default: monotone cubic (PCHIP) slopes keep the path between two waypoints inside
            their range, which is what the safety filter's segment checks assume; arbitrary tangents
            can bulge past it.
        max_chunk_points: capacity of the preallocated buffers; longer chunks are rejected.
        path_tolerance_rad / path_tolerance_m: largest distance of a revolute / prismatic joint's measured
            position from every command of the last ``PATH_TOLERANCE_WINDOW_S`` (so servo lag does not
            count) before the controller drops its plan and re-anchors at the measured state (the arm was
            moved by someone else: a simulator reset, a hand, another controller); 0 = not checked.
        prismatic / urdf_velocity_limits: per joint, from the URDF: linear joints, and the robot's own velocity
            limits before any tightening (a measured joint-state jump is bounded by these).
    """

    joint_names: tuple[str, ...]
    velocity_limits: tuple[float, ...]
    acceleration_limits: tuple[float, ...]
    position_lower: tuple[float, ...]
    position_upper: tuple[float, ...]
    rate_hz: float = 100.0  # the control rate; joint states arrive at the same rate
    blend_mode: str = "crossfade"  # measured better than freeze: lower deviation, same velocity steps
    blend_horizon_s: float = 0.2  # absorbs a 0.07 rad chunk-to-chunk offset at 10 rad/s^2
    freeze_periods: int = 3  # what a JTC with lookahead has typically already been sent
    max_chunk_age_s: float = 2.0  # longer than one chunk plus policy latency
    max_chunk_future_s: float = 0.5
    joint_state_timeout_s: float = 0.5  # 50 missed joint-state messages at 100 Hz
    use_chunk_velocities: bool = False  # PCHIP stays between neighbouring waypoints, as the filter checked them
    max_chunk_points: int = 256
    path_tolerance_rad: float = 0.3  # 0.25 s of servo lag is forgiven; a reset or a push moves far more
    path_tolerance_m: float = 0.0  # off: a gripper closed on an object never reaches its command
    prismatic: tuple[bool, ...] = ()  # per joint (from the URDF); empty = every joint revolute
    urdf_velocity_limits: tuple[float, ...] = ()  # the robot's own, untightened (joint-state jumps); empty = unknown

    def __post_init__(self) -> None:
        n = len(self.joint_names)
        if n == 0:
            raise ValueError("joint_names is empty: the controller needs at least one joint")
        if len(set(self.joint_names)) != n:
            raise ValueError(f"joint_names repeat: {list(self.joint_names)}")
        for field in ("velocity_limits", "acceleration_limits", "position_lower", "position_upper"):
            values = getattr(self, field)
            if len(values) != n:
                raise ValueError(f"{field} has {len(values)} values for {n} joints {list(self.joint_names)}")
        for field in ("velocity_limits", "acceleration_limits"):
            bad = [(j, v) for j, v in zip(self.joint_names, getattr(self, field)) if not (math.isfinite(v) and v > 0.0)]
            if bad:
                raise ValueError(f"{field} must be finite and > 0, got {bad}")
        bad = [
            (j, lo, hi) for j, lo, hi in zip(self.joint_names, self.position_lower, self.position_upper) if not lo <= hi
        ]
        if bad:
            raise ValueError(f"position_lower must be <= position_upper, got {bad}")
        if not 1.0 <= self.rate_hz <= 1000.0:
            raise ValueError(f"rate_hz must be in [1, 1000], got {self.rate_hz}")
        if self.blend_mode not in BLEND_MODES:
            raise ValueError(f"blend_mode must be one of {list(BLEND_MODES)}, got {self.blend_mode!r}")
        if not 0.0 < self.blend_horizon_s <= 2.0:
            raise ValueError(f"blend_horizon_s must be in (0, 2], got {self.blend_horizon_s}")
        if not 0 <= self.freeze_periods <= 50:
            raise ValueError(f"freeze_periods must be in [0, 50], got {self.freeze_periods}")
        for field in ("max_chunk_age_s", "max_chunk_future_s", "joint_state_timeout_s"):
            value = getattr(self, field)
            if not (math.isfinite(value) and value > 0.0):
                raise ValueError(f"{field} must be finite and > 0, got {value}")
        if self.max_chunk_age_s < 2.0 / self.rate_hz:
            raise ValueError(
                f"max_chunk_age_s={self.max_chunk_age_s} is shorter than two control periods at rate_hz={self.rate_hz}"
            )
        for field in ("prismatic", "urdf_velocity_limits"):
            values = getattr(self, field)
            if values and len(values) != n:
                raise ValueError(f"{field} has {len(values)} values for {n} joints {list(self.joint_names)}")
        for field in ("path_tolerance_rad", "path_tolerance_m"):
            value = getattr(self, field)
            if not (math.isfinite(value) and value >= 0.0):
                raise ValueError(f"{field} must be finite and >= 0 (0 = not checked), got {value}")
        if not 1 <= self.max_chunk_points <= 100_000:
            raise ValueError(f"max_chunk_points must be in [1, 100000], got {self.max_chunk_points}")

    @property
    def period_s(self) -> float:
        return 1.0 / self.rate_hz

    @property
    def plan_capacity(self) -> int:
        """Knots a plan may need: blend samples, frozen steps, the chunk, a lead-in knot and the stop."""
        return int(math.ceil(2.0 * self.rate_hz)) + 50 + self.max_chunk_points + 8

    @classmethod
    def from_urdf(
        cls,
        urdf_path: Path | str,
        joint_names: Sequence[str],
        velocity_scale: float = 1.0,
        acceleration_scale: float = 1.0,
        default_acceleration_rad_s2: float = 10.0,
        default_acceleration_m_s2: float = 1.0,
        limit_overrides: Sequence[str] = (),
        **kwargs,
    ) -> ControllerConfig:
        """Limits from the URDF tightened by the joint limits' settings (``vla_ros.joint_limits``: the scales,
        the default accelerations of revolute / prismatic joints, the per-joint overrides), resolved as the
        safety filter resolves them. Overrides of joints this controller does not drive are the filter's.
        Raises ValueError (an override that would loosen the URDF, a bad setting) saying what is wrong."""
        settings = JointLimitSettings(
            velocity_scale=velocity_scale,
            acceleration_scale=acceleration_scale,
            default_acceleration_rad_s2=default_acceleration_rad_s2,
            default_acceleration_m_s2=default_acceleration_m_s2,
            limit_overrides=tuple(limit_overrides),
        )
        lim = limits_from_urdf(urdf_path, joint_names)
        tight = tighten_limits(lim, settings, unknown_joints=False)
        if tight.reasons:
            raise ValueError("; ".join(tight.reasons))
        return cls(
            joint_names=tuple(joint_names),
            velocity_limits=tuple(float(v) for v in tight.velocity),
            acceleration_limits=tuple(float(a) for a in tight.acceleration),
            position_lower=tuple(float(v) for v in tight.lower),
            position_upper=tuple(float(v) for v in tight.upper),
            prismatic=tuple(bool(p) for p in lim.prismatic),
            urdf_velocity_limits=tuple(float(v) for v in lim.velocity),
            **kwargs,
        )

    def path_tolerances(self) -> np.ndarray:
        """(J,) path tolerance per joint, inf where not checked."""
        prismatic = np.array(self.prismatic or (False,) * len(self.joint_names), dtype=bool)
        tol = np.where(prismatic, self.path_tolerance_m, self.path_tolerance_rad)
        return np.where(tol > 0.0, tol, np.inf)

    def replace(self, **changes) -> ControllerConfig:
        return dataclasses.replace(self, **changes)

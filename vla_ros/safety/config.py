"""Configuration of the safety filter: one frozen dataclass, validated on construction (no rclpy import).

Everything here can only make the filter stricter than the robot description: limit overrides may tighten
the URDF's position and velocity limits but never loosen them (checked in ``limits.resolve_limits`` once the
robot is known). Obstacles and limit overrides are given as short text lines so that they fit ROS 2
string-array parameters and YAML files::

    obstacles: ["box name=shelf center=0.55,0.30,0.20 size=0.20,0.30,0.40",
                "plane name=wall normal=0,-1,0 offset=-0.60",
                "sphere center=0.4,-0.3,0.3 radius=0.05"]
    limit_overrides: ["elbow_joint: lower=-2.0 upper=2.0 velocity=1.5 acceleration=6.0"]

A plane obstacle is the solid half-space ``normal . x <= offset``; the robot must stay on the side the
normal points to.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from vla_ros.joint_limits import (  # noqa: F401  (ConfigError and LimitOverride re-exported)
    ConfigError,
    JointLimitSettings,
    LimitOverride,
    key_values,
    parse_floats,
)

MODES = ("truncate", "reject")


@dataclasses.dataclass(frozen=True)
class Obstacle:
    """A static obstacle in the robot's base frame.

    Args:
        kind: ``box`` (center, size, optional rpy in rad), ``sphere`` (center, radius) or ``plane``
            (solid half-space ``normal . x <= offset``).
    """

    kind: str
    name: str
    center_m: tuple[float, float, float] = (0.0, 0.0, 0.0)
    size_m: tuple[float, float, float] = (0.0, 0.0, 0.0)
    rpy_rad: tuple[float, float, float] = (0.0, 0.0, 0.0)
    radius_m: float = 0.0
    normal: tuple[float, float, float] = (0.0, 0.0, 1.0)
    offset_m: float = 0.0

    @classmethod
    def parse(cls, line: str, index: int = 0) -> Obstacle:
        """``box center=x,y,z size=sx,sy,sz [rpy=r,p,y] [name=n]``, ``sphere center=.. radius=r``,
        ``plane normal=nx,ny,nz offset=d``. Raises ConfigError quoting the line."""
        words = line.split()
        if not words:
            raise ConfigError(f"obstacle {index} is empty")
        kind = words[0]
        default_name = f"obstacle_{index}"
        if kind == "box":
            kv = key_values(words[1:], {"center", "size", "rpy", "name"}, line)
            for req in ("center", "size"):
                if req not in kv:
                    raise ConfigError(f"box obstacle {line!r} needs {req}=x,y,z")
            size = parse_floats(kv["size"], 3, "size", line)
            if min(size) <= 0.0:
                raise ConfigError(f"box obstacle {line!r}: size must be positive, got {size}")
            return cls(
                "box",
                kv.get("name", default_name),
                center_m=parse_floats(kv["center"], 3, "center", line),
                size_m=size,
                rpy_rad=parse_floats(kv["rpy"], 3, "rpy", line) if "rpy" in kv else (0.0, 0.0, 0.0),
            )
        if kind == "sphere":
            kv = key_values(words[1:], {"center", "radius", "name"}, line)
            if "center" not in kv or "radius" not in kv:
                raise ConfigError(f"sphere obstacle {line!r} needs center=x,y,z and radius=r")
            (radius,) = parse_floats(kv["radius"], 1, "radius", line)
            if radius <= 0.0:
                raise ConfigError(f"sphere obstacle {line!r}: radius must be positive, got {radius}")
            return cls(
                "sphere",
                kv.get("name", default_name),
                center_m=parse_floats(kv["center"], 3, "center", line),
                radius_m=radius,
            )
        if kind == "plane":
            kv = key_values(words[1:], {"normal", "offset", "name"}, line)
            if "normal" not in kv or "offset" not in kv:
                raise ConfigError(f"plane obstacle {line!r} needs normal=nx,ny,nz and offset=d")
            n = np.array(parse_floats(kv["normal"], 3, "normal", line))
            norm = float(np.linalg.norm(n))
            if norm < 1e-9:
                raise ConfigError(f"plane obstacle {line!r}: normal must not be zero")
            (offset,) = parse_floats(kv["offset"], 1, "offset", line)
            unit = tuple(float(v) for v in n / norm)
            return cls("plane", kv.get("name", default_name), normal=unit, offset_m=offset / norm)
        raise ConfigError(f"obstacle {line!r}: kind must be box, sphere or plane, got {kind!r}")


@dataclasses.dataclass(frozen=True)
class SafetyConfig:
    """What the safety filter enforces. Defaults suit the bundled sim arm; the YAML file overrides them.

    Args:
        joints: joints a chunk must command (empty = every actuated, non-mimic joint of the URDF). Other
            actuated joints are held at their measured positions for the collision checks.
        tracking_tolerance_rad / tracking_tolerance_m: offset between the measured state and the first point
            that does not count as motion when checking velocity and acceleration (servo lag; a gripper
            closed on an object never reaches its commanded position). Collisions are still checked from
            the measured state.
        position_clamp_rad / position_clamp_m: a target this little past a (margin-reduced) limit is
            clamped onto it instead of ending the chunk there (a learned gripper command of "shut" lands a
            few millimetres past the stroke); further past, the point is unsafe.
        position_margin_rad / position_margin_m: distance kept from the URDF position limits of revolute /
            prismatic joints. 0 m for prismatic joints so a gripper can use its full stroke.
        velocity_scale / acceleration_scale: fractions in (0, 1] of the velocity and acceleration limits.
        default_acceleration_rad_s2 / default_acceleration_m_s2: acceleration limits where no override
            gives one (URDF has no acceleration limits).
        limit_overrides: per-joint tighter limits, ``"joint: lower=.. upper=.. velocity=.. acceleration=.."``.
        max_time_scale: the most a chunk may be slowed down (time stretched) to meet velocity and
            acceleration limits; a chunk needing more is cut where it starts to need more.
        max_chunk_age_s: a chunk whose stamp (its newest observation) is older than this is stale.
        max_future_stamp_s: a chunk stamped further than this in the future points at a clock problem.
        max_state_age_s: the measured joint state must be at most this old.
        max_horizon_s / max_points: bounds on a chunk's length (they also bound the filter's work).
        self_clearance_m: distance kept between robot links (pairs not excluded).
        clearance_m: distance kept from the table, the workspace bounds and the obstacles.
        max_joint_step_rad / max_joint_step_m: largest joint step between checked configurations on
            the straight joint-space segments between waypoints.
        table_enabled / table_height_m: the table top as a half-space ``z <= table_height_m`` (the sim's
            table top is z = 0 with the base standing on it; links fixed to the base are not checked
            against it).
        workspace_min_m / workspace_max_m: axis-aligned box the robot must stay inside (None = no bounds).
        obstacles: static obstacles, see ``Obstacle.parse``.
        on_unsafe: ``truncate`` (keep the safe prefix) or ``reject`` (drop the whole chunk).
        check_stopping: also require the stop after the last kept point (decelerating along the path
            direction at the acceleration limits) to be collision-free, so cutting a chunk never leaves
            the arm coasting into what the cut avoided.
    """

    joints: tuple[str, ...] = ()
    position_margin_rad: float = 0.01  # keeps targets off the hard stops; small against the sim's ranges
    position_margin_m: float = 0.0
    tracking_tolerance_rad: float = 0.05  # servo lag of a position-controlled arm at speed
    tracking_tolerance_m: float = 0.03  # fingers closed on a 6 cm cup: measured 3 cm from commanded
    position_clamp_rad: float = 0.0  # off: a revolute target past its limit marks the point unsafe
    position_clamp_m: float = 0.01  # a "fully closed" gripper target a few mm past the stroke is clamped
    velocity_scale: float = 1.0
    acceleration_scale: float = 1.0
    default_acceleration_rad_s2: float = 10.0  # similar to industrial arms' joint acceleration limits
    default_acceleration_m_s2: float = 1.0  # gripper fingers
    limit_overrides: tuple[str, ...] = ()
    max_time_scale: float = 5.0  # beyond 5x slower the chunk no longer does what the policy meant
    max_chunk_age_s: float = 0.5  # a few policy periods: older chunks were planned from a different state
    max_future_stamp_s: float = 0.05
    max_state_age_s: float = 0.2  # 20 periods of the 100 Hz joint states
    max_horizon_s: float = 30.0
    max_points: int = 1000
    self_clearance_m: float = 0.005
    clearance_m: float = 0.01  # the sim's grasp keeps the fingertips 2.5 cm above the table
    max_joint_step_rad: float = 0.05
    max_joint_step_m: float = 0.01
    table_enabled: bool = True
    table_height_m: float = 0.0
    workspace_min_m: tuple[float, float, float] | None = None
    workspace_max_m: tuple[float, float, float] | None = None
    obstacles: tuple[str, ...] = ()
    on_unsafe: str = "truncate"
    check_stopping: bool = True

    def __post_init__(self) -> None:
        def positive(name: str) -> None:
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0.0):
                raise ConfigError(f"{name} must be a positive number, got {v!r}")

        def non_negative(name: str) -> None:
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0.0):
                raise ConfigError(f"{name} must be a finite number >= 0, got {v!r}")

        # The joint limits' settings (the fields of the same names), validated and parsed as the controller's.
        limits = {f.name: getattr(self, f.name) for f in dataclasses.fields(JointLimitSettings)}
        object.__setattr__(
            self, "_limits", JointLimitSettings(**{**limits, "limit_overrides": tuple(self.limit_overrides)})
        )
        for name in (
            "max_chunk_age_s",
            "max_state_age_s",
            "max_horizon_s",
            "max_joint_step_rad",
            "max_joint_step_m",
        ):
            positive(name)
        for name in (
            "tracking_tolerance_rad",
            "tracking_tolerance_m",
            "position_clamp_rad",
            "position_clamp_m",
            "position_margin_rad",
            "position_margin_m",
            "max_future_stamp_s",
            "self_clearance_m",
            "clearance_m",
        ):
            non_negative(name)
        if not (math.isfinite(self.max_time_scale) and self.max_time_scale >= 1.0):
            raise ConfigError(f"max_time_scale must be >= 1 (1 = never slow a chunk down), got {self.max_time_scale!r}")
        if not (isinstance(self.max_points, int) and 2 <= self.max_points <= 100_000):
            raise ConfigError(f"max_points must be an integer in [2, 100000], got {self.max_points!r}")
        if not math.isfinite(self.table_height_m):
            raise ConfigError(f"table_height_m must be finite, got {self.table_height_m!r}")
        if self.on_unsafe not in MODES:
            raise ConfigError(f"on_unsafe must be one of {list(MODES)}, got {self.on_unsafe!r}")
        if (self.workspace_min_m is None) != (self.workspace_max_m is None):
            raise ConfigError(
                f"workspace_min_m and workspace_max_m go together, got {self.workspace_min_m!r} and "
                f"{self.workspace_max_m!r}"
            )
        if self.workspace_min_m is not None:
            lo, hi = tuple(self.workspace_min_m), tuple(self.workspace_max_m)
            if len(lo) != 3 or len(hi) != 3 or not all(math.isfinite(v) for v in lo + hi):
                raise ConfigError(f"workspace bounds need 3 finite numbers each, got {lo!r} and {hi!r}")
            if not all(a < b for a, b in zip(lo, hi)):
                raise ConfigError(f"workspace_min_m={lo} must be below workspace_max_m={hi} on every axis")
            object.__setattr__(self, "workspace_min_m", tuple(float(v) for v in lo))
            object.__setattr__(self, "workspace_max_m", tuple(float(v) for v in hi))
        if len(set(self.joints)) != len(self.joints):
            raise ConfigError(f"joints repeat: {list(self.joints)}")
        # Parse now so a bad line fails here, naming itself, not when the robot arrives.
        object.__setattr__(self, "_obstacles", tuple(Obstacle.parse(line, i) for i, line in enumerate(self.obstacles)))
        names = [o.name for o in self._obstacles]  # type: ignore[attr-defined]
        if len(set(names)) != len(names):
            raise ConfigError(f"obstacle names repeat: {names}")

    @property
    def parsed_obstacles(self) -> tuple[Obstacle, ...]:
        return self._obstacles  # type: ignore[attr-defined]

    @property
    def limit_settings(self) -> JointLimitSettings:
        """The joint limits' settings (``vla_ros.joint_limits``), as the controller gets them too."""
        return self._limits  # type: ignore[attr-defined]

    @property
    def parsed_overrides(self) -> tuple[LimitOverride, ...]:
        return self.limit_settings.parsed_overrides

    def replace(self, **changes) -> SafetyConfig:
        return dataclasses.replace(self, **changes)

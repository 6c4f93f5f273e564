"""Joint limits as the URDF states them: the one reader the controller and the safety filter share.

``<limit lower upper velocity>`` of every movable joint, read once here, so the controller's output limiter
(``control.config``) and the filter's checks (``safety.robot``) can never disagree about a limit. No rclpy
and no Pinocchio import: the controller needs only these numbers. Acceleration limits are not part of URDF;
each component takes them from its configuration.
"""

from __future__ import annotations

import dataclasses
import math
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

import numpy as np

MOVABLE_TYPES = ("revolute", "continuous", "prismatic")


@dataclasses.dataclass(frozen=True)
class JointLimit:
    """One joint's URDF limits. ``lower``/``upper`` are -inf/+inf for continuous joints; ``velocity`` is NaN
    when the URDF gives none (URDF requires it for revolute and prismatic joints; the users refuse it)."""

    name: str
    kind: str  # revolute, continuous or prismatic
    lower: float
    upper: float
    velocity: float
    mimic: str | None = None  # the joint it follows (<mimic joint=...>), if any

    @property
    def prismatic(self) -> bool:
        return self.kind == "prismatic"


@dataclasses.dataclass(frozen=True)
class UrdfJointLimits:
    """Limits of named joints, in the order asked for. ``prismatic[j]`` is True for linear joints."""

    names: tuple[str, ...]
    lower: np.ndarray
    upper: np.ndarray
    velocity: np.ndarray
    prismatic: np.ndarray

    @property
    def joint_names(self) -> tuple[str, ...]:
        """The names, as a ``RobotModel`` calls them (``safety.limits.resolve_limits`` takes either)."""
        return self.names


def robot_root(urdf: str | Path | ET.Element) -> tuple[ET.Element, str, Path | None]:
    """The <robot> element, how to name the description in messages, and the folder of its file (relative
    mesh paths resolve there; None for XML text or an element)."""
    if isinstance(urdf, ET.Element):
        return urdf, "the robot description", None
    if isinstance(urdf, Path) or not str(urdf).lstrip().startswith("<"):
        try:
            return ET.parse(str(urdf)).getroot(), str(urdf), Path(urdf).parent
        except ET.ParseError as err:
            raise ValueError(f"robot description {urdf} is not valid XML: {err}") from None
    try:
        return ET.fromstring(urdf), "the robot description", None
    except ET.ParseError as err:
        raise ValueError(f"the robot description is not valid XML: {err}") from None


def read_joint_limits(urdf: str | Path | ET.Element) -> dict[str, JointLimit]:
    """Every movable joint's limits by name. ``urdf``: a file path, the XML text or a parsed <robot> element."""
    root, _, _ = robot_root(urdf)
    out = {}
    for joint in root.iter("joint"):
        kind = joint.get("type")
        name = joint.get("name")
        if kind not in MOVABLE_TYPES or not name:
            continue
        limit = joint.find("limit")
        get = (
            (lambda key, default: float(limit.get(key, default)))
            if limit is not None
            else (lambda key, default: float(default))
        )
        velocity = get("velocity", "nan")
        if kind == "continuous":
            lower, upper = -math.inf, math.inf
        else:
            lower, upper = get("lower", "0"), get("upper", "0")  # the URDF defaults
        mimic = joint.find("mimic")
        out[name] = JointLimit(name, kind, lower, upper, velocity, mimic.get("joint") if mimic is not None else None)
    return out


def commanded_joints_of(urdf: str | Path | ET.Element) -> tuple[str, ...]:
    """The joints a controller commands when nobody names them: the movable joints that mimic none, in the
    description's order (a mimic joint follows its leader)."""
    return tuple(name for name, lim in read_joint_limits(urdf).items() if lim.mimic is None)


def limits_for(urdf: str | Path | ET.Element, joints: Sequence[str]) -> UrdfJointLimits:
    """Limits of ``joints`` in that order. Raises ValueError naming a joint that is missing, not movable or
    without a velocity limit."""
    root, where, _ = robot_root(urdf)
    movable = read_joint_limits(root)
    every = {j.get("name"): j.get("type") for j in root.iter("joint")}
    rows = []
    for name in joints:
        if name not in every:
            raise ValueError(f"joint {name!r} is not in {where}; it has {sorted(n for n in every if n)}")
        if name not in movable:
            raise ValueError(
                f"joint {name!r} in {where} is {every[name]!r}; only revolute, continuous and prismatic joints can "
                "be commanded"
            )
        lim = movable[name]
        if not (math.isfinite(lim.velocity) and lim.velocity > 0.0):
            raise ValueError(f"joint {name!r} in {where} has no <limit velocity=...> (or not a positive one)")
        rows.append(lim)
    return UrdfJointLimits(
        names=tuple(joints),
        lower=np.array([r.lower for r in rows], dtype=np.float64),
        upper=np.array([r.upper for r in rows], dtype=np.float64),
        velocity=np.array([r.velocity for r in rows], dtype=np.float64),
        prismatic=np.array([r.prismatic for r in rows], dtype=bool),
    )

"""Chunks that leave the policy inside the robot's limits: the last post-processing step (no rclpy import).

The safety filter (``vla_ros.safety.filter``) checks a chunk against the measured joint state at the
instant it sees it: every target inside the position limits minus margins; the first segment, from the
measured state to the first point, within the velocity limits beyond the tracking tolerance; every later
segment within the velocity limits and every later point within the acceleration limits (second
differences), the first point too where the arm stands within the tracking tolerance of it (by what no
start within that tolerance explains: ``safety.timing``). Anything outside is met by stretching the whole chunk in time,
by cutting it or by
rejecting it, so the robot does not move the way the policy meant.

A learned chunk breaks these checks by small amounts that are no part of its motion: a gripper target a
millimetre past its stroke, a first point a few centimetres off the measured arm (the error of one point
of a regression), a gripper told to shut faster than it can. ``shape_chunk`` makes the chunk meet the
same limits, computed by the same function the filter uses (``safety.limits.resolve_limits`` on the URDF
limits and the filter's configuration), with a margin (``fraction``), for a filter that sees the chunk
``latency_s`` after its stamp:

1. every target is clipped into the position limits (a gripper trained to open and shut at the ends of
   its stroke overshoots them in half its chunks);
2. with a ``table_lift`` (``policy.table_lift``), points whose links come within the filter's table
   clearance are raised straight up until they keep it;
3. with ``reach``, the first point is moved, joint by joint, no further from where the
   measured state will be then (the measured velocity carries it forward over the latency) than the
   tracking tolerance plus what the velocity limit covers in the time left, at the pace the rest of the
   chunk needs: a first point off the arm by one regression error is not motion to slow the chunk for;
4. with ``retime`` (off by default in the node: slowing chunks in the policy cost the shipped model
   held-out success, 0.88 -> 0.82, where the filter's own stretching did not), the chunk is slowed down
   by one time scale, the smallest that brings every segment's velocity and
   every point's acceleration within the limits, computed by the filter's own ``safety.timing``. One
   scale for all joints keeps the path: clamping joints one by one would bend it, towards the table or
   the cup the collision check then finds (measured on the shipped model: 285 chunks of 6,195 cut, against
   67 without shaping).

Where the policy's chunk is within the limits nothing changes. The filter stays the
independent check: it sees the shaped chunk and checks it as before, collisions included.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class ChunkLimits:
    """Per joint of the chunk (the model's joint order).

    Args:
        lower / upper: position range (URDF limits, tightened by the filter's configuration, minus margins).
        velocity / acceleration: the filter's limits (rad/s or m/s, rad/s^2 or m/s^2).
        tolerance: the filter's tracking tolerance (offsets between measured state and first point that
            are not motion).
        latency_s: the filter sees a chunk this long after its stamp (inference plus transport).
        fraction: share of the velocity, acceleration and tolerance the shaped chunk may use.
        reach: pull the first point within reach of the measured state (step 3 of the module docstring).
        retime: slow the chunk into the velocity and acceleration limits by one time scale (step 4).
        table_lift: a ``policy.table_lift.TableLift`` for the chunk's joints, or None (step 2 off).
    """

    joint_names: tuple[str, ...]
    lower: np.ndarray
    upper: np.ndarray
    velocity: np.ndarray
    acceleration: np.ndarray
    tolerance: np.ndarray
    latency_s: float = 0.05
    fraction: float = 0.9
    reach: bool = True
    retime: bool = True
    table_lift: object | None = None

    def __post_init__(self) -> None:
        n = len(self.joint_names)
        for name in ("lower", "upper", "velocity", "acceleration", "tolerance"):
            value = np.asarray(getattr(self, name), np.float64)
            if value.shape != (n,):
                raise ValueError(f"{name} must have one value per joint ({n}), got shape {value.shape}")
            object.__setattr__(self, name, value)
        if not (np.all(self.velocity > 0) and np.all(self.acceleration > 0) and np.all(self.tolerance >= 0)):
            raise ValueError("velocity and acceleration limits must be > 0 and tolerances >= 0")
        if not np.all(self.lower <= self.upper):
            raise ValueError("every lower limit must be <= its upper limit")
        if not (0.0 < self.fraction <= 1.0) or not (0.0 <= self.latency_s <= 1.0):
            raise ValueError(
                f"fraction must be in (0, 1] and latency_s in [0, 1], got {self.fraction}, {self.latency_s}"
            )


def chunk_limits(
    urdf,
    joint_names: Sequence[str],
    safety_config=None,
    latency_s: float = 0.05,
    fraction: float = 0.9,
    reach: bool = True,
    retime: bool = True,
    table_margin_m: float | None = None,
    package_paths: Sequence[str] = (),
    base_dir=None,
) -> ChunkLimits:
    """The filter's limits for ``joint_names``: ``urdf`` (path, XML text or element) read by
    ``urdf_limits``, resolved with ``safety_config`` (a ``SafetyConfig``; default: the filter's defaults)
    by the filter's own ``resolve_limits``. With ``table_margin_m`` (not None) also a table lift on the
    URDF's collision geometry (meshes resolved through ``package_paths``, as the filter does, and relative
    ones against ``base_dir``, default the URDF file's folder when ``urdf`` is a path). Raises
    ValueError (or ``LimitError``) saying what is wrong."""
    from vla_ros.safety.config import SafetyConfig
    from vla_ros.safety.limits import resolve_limits
    from vla_ros.urdf_limits import limits_for, robot_root

    cfg = safety_config or SafetyConfig()
    root, _, urdf_dir = robot_root(urdf)  # read once, for the limits and the collision model
    base_dir = base_dir if base_dir is not None else urdf_dir
    urdf_limits = limits_for(root, tuple(joint_names))
    table = resolve_limits(urdf_limits, cfg)
    prismatic = urdf_limits.prismatic
    lift = None
    if table_margin_m is not None and cfg.table_enabled:
        lift = _table_lift(root, base_dir, joint_names, cfg, table_margin_m, package_paths)
    return ChunkLimits(
        joint_names=tuple(joint_names),
        lower=table.lower,
        upper=table.upper,
        velocity=table.velocity,
        acceleration=table.acceleration,
        tolerance=np.where(prismatic, cfg.tracking_tolerance_m, cfg.tracking_tolerance_rad),
        latency_s=latency_s,
        fraction=fraction,
        reach=reach,
        retime=retime,
        table_lift=lift,
    )


def _table_lift(root, base_dir, joint_names, cfg, margin_m: float, package_paths):
    import xml.etree.ElementTree as ET

    from vla_ros.policy.table_lift import TableLift
    from vla_ros.safety.robot import RobotModelError, load_robot

    try:
        robot = load_robot(ET.tostring(root, encoding="unicode"), None, tuple(package_paths), base_dir=base_dir)
    except RobotModelError as err:
        raise ValueError(f"no collision model for the table lift: {err}") from err
    return TableLift(robot, cfg, joint_names, margin_m=margin_m)


def shape_chunk(
    time_from_start_s: np.ndarray,
    positions: np.ndarray,
    q_state: np.ndarray,
    v_state: np.ndarray | None,
    limits: ChunkLimits,
) -> tuple[np.ndarray, np.ndarray]:
    """(times (H,), positions (H, J)) within ``limits`` (module docstring). ``time_from_start_s`` (H,) from
    the stamp, strictly increasing and > 0; ``q_state`` / ``v_state`` (J,) the joint state at the stamp
    (velocities may be None: taken as zero)."""
    from vla_ros.safety.timing import limit_ratios, prefix_scales

    t = np.asarray(time_from_start_s, np.float64)
    p = np.clip(np.asarray(positions, np.float64), limits.lower, limits.upper)
    if limits.table_lift is not None:
        p = limits.table_lift.lift(p, limits.lower, limits.upper)
    if not (limits.reach or limits.retime):
        return t, p
    q_state = np.asarray(q_state, np.float64)
    fr = limits.fraction
    # Where the measured state will be when the filter looks. Every point counts as still ahead then: a
    # filter that sees the chunk sooner than latency_s checks the first point too (the policy's first
    # point is due about then).
    age = min(limits.latency_s, 0.5 * float(t[0]))
    v0 = (
        np.zeros_like(q_state)
        if v_state is None
        else np.clip(np.asarray(v_state, np.float64), -limits.velocity, limits.velocity)
    )
    q_then = q_state + v0 * age
    tau = t - age
    v_max, a_max, tol = limits.velocity * fr, limits.acceleration * fr, limits.tolerance * fr
    # The scale the rest of the chunk needs anyway (segments and points that do not touch the first
    # point): the first point may use it too.
    r_v, r_a = limit_ratios(tau, p, q_then, v_max, a_max, None, tol)
    rest = max([1.0, *r_v[2:], *np.sqrt(r_a[2:])])
    reach = tol + v_max * tau[0] * rest  # the tracking tolerance, plus what the limit covers by the first point
    p[0] = np.clip(p[0], q_then - reach, q_then + reach)
    if not limits.retime:
        return t, p
    # One time scale for the whole chunk, as the filter computes it (safety.timing): it keeps the path.
    r_v, r_a = limit_ratios(tau, p, q_then, v_max, a_max, None, tol)
    scale = max(1.0, float(prefix_scales(r_v, r_a)[-1]))
    if scale > 1.0:
        t = age + scale * tau
    return t, p

"""Chunks that leave the policy inside the robot's limits: the last post-processing step (no rclpy import).

The safety filter (``vla_ros.safety.filter``) checks a chunk against the measured joint state at the
instant it sees it: every target inside the position limits minus margins; the first segment, from the
measured state to the first point, within the velocity limits beyond the tracking tolerance; every later
segment within the velocity limits and every later point within the acceleration limits (second
differences). Anything outside is met by stretching the whole chunk in time, by cutting it or by
rejecting it, so the robot does not move the way the policy meant.

A learned chunk breaks these checks by small amounts that are no part of its motion: a gripper target a
millimetre past its stroke, a first point a few centimetres off the measured arm (the error of one point
of a regression), a gripper told to shut faster than it can. ``shape_chunk`` makes the chunk meet the
same limits, computed by the same function the filter uses (``safety.limits.resolve_limits`` on the URDF
limits and the filter's configuration), with a margin (``fraction``), for a filter that sees the chunk
``latency_s`` after its stamp:

1. every target is clipped into the position limits;
2. the first point is moved, joint by joint, no further from where the measured state will be than the
   tracking tolerance plus what the velocity limit covers in the time left (the measured velocity carries
   the state forward over the latency);
3. the later points follow the chunk within the velocity and acceleration limits, joint by joint (a
   second-order limiter: where the chunk is feasible it is reproduced, where not it is followed as
   closely as the limits allow);
4. the chunk comes to rest at its last point, braking within the acceleration limits over its tail. The
   filter also checks the stop after a chunk's last point (at the last segment's speed, all joints
   braking together, the slowest-braking joint setting the time): a chunk that ends while the arm
   still moves down towards the cup is cut where that stop would reach the table. A policy publishes a
   new chunk every tick, so the tail is almost never executed; where the chunks stop coming, the arm
   comes to rest along it.

Where the policy's chunk is within the limits and ends at rest nothing changes (to float rounding). The filter stays the
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
        end_at_rest: the chunk comes to rest at its last point (see the module docstring).
    """

    joint_names: tuple[str, ...]
    lower: np.ndarray
    upper: np.ndarray
    velocity: np.ndarray
    acceleration: np.ndarray
    tolerance: np.ndarray
    latency_s: float = 0.05
    fraction: float = 0.9
    end_at_rest: bool = True

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
            raise ValueError(f"fraction must be in (0, 1] and latency_s in [0, 1], got {self.fraction}, {self.latency_s}")


def chunk_limits(urdf, joint_names: Sequence[str], safety_config=None, latency_s: float = 0.05,
                 fraction: float = 0.9) -> ChunkLimits:
    """The filter's limits for ``joint_names``: ``urdf`` (path, XML text or element) read by
    ``urdf_limits``, resolved with ``safety_config`` (a ``SafetyConfig``; default: the filter's defaults)
    by the filter's own ``resolve_limits``. Raises ValueError (or ``LimitError``) saying what is wrong."""
    from vla_ros.safety.config import SafetyConfig
    from vla_ros.safety.limits import resolve_limits
    from vla_ros.urdf_limits import limits_for

    cfg = safety_config or SafetyConfig()
    table = resolve_limits(limits_for(urdf, tuple(joint_names)), cfg)
    prismatic = limits_for(urdf, tuple(joint_names)).prismatic
    return ChunkLimits(
        joint_names=tuple(joint_names), lower=table.lower, upper=table.upper, velocity=table.velocity,
        acceleration=table.acceleration,
        tolerance=np.where(prismatic, cfg.tracking_tolerance_m, cfg.tracking_tolerance_rad),
        latency_s=latency_s, fraction=fraction,
    )


def shape_chunk(time_from_start_s: np.ndarray, positions: np.ndarray, q_state: np.ndarray,
                v_state: np.ndarray | None, limits: ChunkLimits) -> np.ndarray:
    """(H, J) positions within ``limits`` (module docstring). ``time_from_start_s`` (H,) from the stamp,
    strictly increasing and > 0; ``q_state`` / ``v_state`` (J,) the joint state at the stamp (velocities
    may be None: taken as zero)."""
    t = np.asarray(time_from_start_s, np.float64)
    p = np.clip(np.asarray(positions, np.float64), limits.lower, limits.upper)
    q_state = np.asarray(q_state, np.float64)
    fr = limits.fraction
    v_max, a_max = limits.velocity * fr, limits.acceleration * fr
    # Where the measured state will be when the filter looks, and how far the first point may be from it.
    age = min(limits.latency_s, float(t[0]))
    v0 = np.zeros_like(q_state) if v_state is None else np.clip(np.asarray(v_state, np.float64), -limits.velocity, limits.velocity)
    q_then = q_state + v0 * age
    reach = limits.tolerance * fr + v_max * (float(t[0]) - age)
    out = np.empty_like(p)
    out[0] = np.clip(p[0], q_then - reach, q_then + reach)
    # Speed that still lets the chunk come to rest at its last point, braking at the acceleration limit
    # (the filter's own second difference, point by point from the end): cap[k] bounds segment k.
    H = len(t)
    dv = np.zeros(H)  # dv[k]: the most the speed may change at point k - 1 (between segments k - 1 and k)
    dv[2:] = 0.5 * (t[2:] - t[:-2])
    cap = np.zeros((H, len(q_state)))
    # At the last segment, a speed whose stop (a fraction of a millimetre or milliradian) is no motion.
    cap[H - 1] = a_max * 0.5 * (t[-1] - t[-2]) if H > 1 else 0.0
    for k in range(H - 2, 0, -1):
        cap[k] = cap[k + 1] + a_max * dv[k + 1]
    v = None  # the first interior segment's velocity is free (the filter checks no acceleration at point 0)
    for k in range(1, H):
        h = t[k] - t[k - 1]
        new_v = np.clip((p[k] - out[k - 1]) / h, -v_max, v_max)
        # Slow enough to brake ahead of a position limit (a gripper shutting) ...
        new_v = np.clip(new_v, -_braking_speed(out[k - 1] - limits.lower, a_max, h),
                        _braking_speed(limits.upper - out[k - 1], a_max, h))
        if v is not None:
            # ... a change of speed within the filter's second difference: 2 (v_k - v_{k-1}) / (h_{k-1} + h_k) <= a ...
            new_v = np.clip(new_v, v - a_max * dv[k], v + a_max * dv[k])
        if limits.end_at_rest:
            new_v = np.clip(new_v, -cap[k], cap[k])  # ... and slow enough to be at rest at the end
        out[k] = np.clip(out[k - 1] + new_v * h, limits.lower, limits.upper)
        v = (out[k] - out[k - 1]) / h
    return out


def _braking_speed(distance: np.ndarray, a_max: np.ndarray, h: float) -> np.ndarray:
    """Highest speed from which steps of ``h``, the speed falling by a h each, stop within ``distance``.

    From v = (m + r) a h (m whole, 0 <= r < 1) the steps cover a h^2 ((m + 1) r + m (m + 1) / 2), at most
    a h^2 / 8 more than v (v / (a h) + 1) h / 2; solving that for v on distance - a h^2 / 8 is safe."""
    ah = a_max * h
    d = np.maximum(distance - ah * h / 8.0, 0.0)
    return ah * (np.sqrt(0.25 + 2.0 * d / (ah * h)) - 0.5)

"""The action chunk: the one contract between policy, safety filter and controller (no rclpy import).

A chunk is H future joint-position targets for named joints. ``stamp_ns`` is the time of the newest
observation the policy used (the JointTrajectory ``header.stamp``); point k is meant to be reached at
``stamp_ns + time_from_start_s[k]``. Keeping the stamp as integer nanoseconds and the offsets as small
float64 seconds keeps full precision whether ROS time starts at 0 or at 1.7e9 s.
"""

from __future__ import annotations

import dataclasses

import numpy as np

# Joints the policy commands, in the canonical order of the sim's URDF (arm, then gripper).
ARM_JOINTS = (
    "shoulder_pan_joint",
    "shoulder_lift_joint",
    "elbow_joint",
    "forearm_roll_joint",
    "wrist_pitch_joint",
    "wrist_roll_joint",
)
GRIPPER_JOINT = "left_finger_joint"
COMMANDED_JOINTS = ARM_JOINTS + (GRIPPER_JOINT,)


class ChunkError(ValueError):
    """A message that cannot even be read as a chunk. ``code`` is a short reason for counters."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclasses.dataclass(frozen=True)
class ActionChunk:
    """H points for J joints. Values are not validated here: the safety filter does that, with reasons.

    Args:
        joint_names: J joint names, the column order of ``positions``.
        stamp_ns: time of the newest observation the chunk was computed from (ROS time, nanoseconds).
        time_from_start_s: (H,) offsets of the points from ``stamp_ns``, seconds.
        positions: (H, J) targets in rad (revolute) or m (prismatic).
        velocities: optional (H, J) rad/s or m/s; None when the sender gave none.
    """

    joint_names: tuple[str, ...]
    stamp_ns: int
    time_from_start_s: np.ndarray
    positions: np.ndarray
    velocities: np.ndarray | None = None

    @property
    def horizon(self) -> int:
        return int(self.positions.shape[0])

    def point_times_ns(self) -> np.ndarray:
        """(H,) absolute times of the points, integer nanoseconds."""
        return self.stamp_ns + np.round(self.time_from_start_s * 1e9).astype(np.int64)

    def replace(self, **changes) -> "ActionChunk":
        return dataclasses.replace(self, **changes)


def smoothing_matrix(time_from_start_s: np.ndarray, degree: int) -> np.ndarray | None:
    """(H, H) least-squares projection of a chunk's points onto polynomials in time of ``degree``.

    A learned chunk carries a little independent error on every point; second differences at 50 ms turn
    3 mrad of it into about 5 rad/s^2 of "acceleration", so the safety filter would stretch a chunk whose
    underlying motion is well inside the limits. Projecting each joint onto a low-order polynomial keeps
    the motion (a 0.8 s chunk of limited acceleration is close to a cubic) and drops that noise.
    None when degree <= 0 or the chunk has too few points for it to change anything.
    """
    t = np.asarray(time_from_start_s, np.float64)
    if degree <= 0 or t.size <= degree + 1:
        return None
    u = (t - t.mean()) / max(float(np.ptp(t)), 1e-9)  # centred and scaled: a well-conditioned basis
    basis = np.vander(u, degree + 1, increasing=True)  # (H, degree + 1)
    return basis @ np.linalg.pinv(basis)


def smooth_positions(time_from_start_s: np.ndarray, positions: np.ndarray, degree: int) -> np.ndarray:
    """``positions`` (H, J) projected per joint onto polynomials of ``degree`` (unchanged when degree <= 0)."""
    p = np.asarray(positions, np.float64)
    m = smoothing_matrix(time_from_start_s, degree)
    if m is None:
        return p
    out = m @ p
    still = np.ptp(p, axis=0) == 0.0  # a joint held still (a gripper at its stop) stays bit-exact, not off by rounding
    out[:, still] = p[:, still]
    return out

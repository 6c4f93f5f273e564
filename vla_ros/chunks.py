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

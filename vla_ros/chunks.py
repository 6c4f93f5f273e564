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

    def replace(self, **changes) -> ActionChunk:
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


class TemporalEnsemble:
    """Overlapping chunks averaged where they cover the same instants (ACT's temporal ensembling).

    A policy ticking at 10 Hz with 0.8 s chunks has planned every instant up to eight times. Executing only
    the newest plan follows each decode's independent error; averaging the plans that cover a point keeps
    the motion they agree on. ``__call__`` returns the newest chunk's points as the weighted mean of its own
    positions (weight 1) and those of the earlier chunks still covering each point, interpolated at the
    point's time, a chunk decoded ``a`` seconds earlier weighing ``exp(-a / time_constant_s)``. Earlier
    chunks enter with their raw positions, not their averaged ones, so an old error fades instead of
    circulating. Time going backwards (a new episode, a clock jump) forgets everything.
    """

    def __init__(self, time_constant_s: float, min_weight: float = 0.01) -> None:
        if not time_constant_s > 0:
            raise ValueError(f"time_constant_s must be > 0, got {time_constant_s}")
        self.time_constant_s = float(time_constant_s)
        self.max_age_s = -self.time_constant_s * float(np.log(min_weight))  # older plans weigh < min_weight
        self._past: list[tuple[int, np.ndarray, np.ndarray]] = []

    def reset(self) -> None:
        self._past = []

    def __call__(self, stamp_ns: int, time_from_start_s: np.ndarray, positions: np.ndarray) -> np.ndarray:
        t = np.asarray(time_from_start_s, np.float64)
        p = np.asarray(positions, np.float64)
        if self._past and stamp_ns < self._past[-1][0]:
            self._past = []
        total = p.copy()
        weight = np.ones(len(t))
        keep = []
        for old_stamp, old_t, old_p in self._past:
            age_s = (stamp_ns - old_stamp) * 1e-9
            if age_s > self.max_age_s or old_p.shape[1] != p.shape[1]:
                continue
            at = t + age_s  # the new points' times on the old chunk's axis
            covered = (at >= old_t[0]) & (at <= old_t[-1])
            if not covered.any():
                continue
            keep.append((old_stamp, old_t, old_p))
            w = float(np.exp(-age_s / self.time_constant_s))
            for j in range(p.shape[1]):
                total[covered, j] += w * np.interp(at[covered], old_t, old_p[:, j])
            weight[covered] += w
        keep.append((int(stamp_ns), t, p))
        self._past = keep
        return total / weight[:, None]

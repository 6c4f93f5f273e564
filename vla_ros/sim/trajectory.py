"""Position trajectories with joint_trajectory_controller semantics, for the simulated robot.

Like ros2_controllers' JTC without a velocity profile: the trajectory starts at its stamp (or on arrival
when the stamp is zero), the robot moves from where it is commanded to be towards the first point, then
interpolates linearly between points and holds the last one. Points whose time has already passed when
the trajectory starts are skipped by the interpolation, not replayed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from vla_ros.sim.commands import CommandError, JointLimits, validate_positions


class PositionTrajectory:
    """Canonical-order waypoints ``positions[k]`` at ``times_s[k]`` after ``stamp_s`` (0 = on arrival)."""

    def __init__(self, times_s: np.ndarray, positions: np.ndarray, stamp_s: float = 0.0) -> None:
        self.times_s = times_s
        self.positions = positions
        self.stamp_s = stamp_s
        self._t0_s = 0.0
        self._q_start = positions[0]

    @classmethod
    def from_points(
        cls,
        joint_names: Sequence[str],
        times_from_start_s: Sequence[float],
        points: Sequence[Sequence[float]],
        limits: JointLimits,
        stamp_s: float = 0.0,
    ) -> PositionTrajectory:
        """Validate a trajectory message's content; raises CommandError and nothing is followed."""
        if len(points) == 0:
            raise CommandError("empty_trajectory", "trajectory has no points")
        order = limits.index_of(joint_names)
        times = np.asarray(times_from_start_s, dtype=np.float64)
        if not np.all(np.isfinite(times)) or np.any(times < 0.0):
            raise CommandError("bad_time", f"time_from_start must be finite and >= 0, got {times.tolist()}")
        if np.any(np.diff(times) <= 0.0):
            raise CommandError("non_increasing_time", f"time_from_start must increase strictly, got {times.tolist()}")
        canonical = np.empty((len(points), len(limits.names)))
        for k, p in enumerate(points):
            values = np.asarray(p, dtype=np.float64).reshape(-1)
            if values.size != len(joint_names):
                raise CommandError("wrong_size", f"point {k} has {values.size} positions for {len(joint_names)} joints")
            row = np.empty(len(limits.names))
            row[order] = values
            try:
                canonical[k] = validate_positions(row, limits)
            except CommandError as err:
                raise CommandError(err.code, f"point {k}: {err}") from None
        return cls(times, canonical, float(stamp_s))

    def bind_start(self, now_s: float, q_now: np.ndarray) -> None:
        """Anchor the trajectory in time: at its stamp, or now when the stamp is zero."""
        self._t0_s = self.stamp_s if self.stamp_s > 0.0 else now_s
        self._q_start = np.asarray(q_now, dtype=np.float64).copy()

    def sample(self, t_s: float) -> np.ndarray:
        """Target positions at simulated time ``t_s``."""
        tau = t_s - self._t0_s
        times, pos = self.times_s, self.positions
        if tau <= 0.0:
            return self._q_start.copy()
        if tau < times[0]:
            # Approach the first point from where the robot was told to be when the trajectory started.
            return self._q_start + (pos[0] - self._q_start) * (tau / times[0])
        if tau >= times[-1]:
            return pos[-1].copy()
        k = int(np.searchsorted(times, tau, side="right"))  # times[k-1] <= tau < times[k]
        w = (tau - times[k - 1]) / (times[k] - times[k - 1])
        return pos[k - 1] + (pos[k] - pos[k - 1]) * w

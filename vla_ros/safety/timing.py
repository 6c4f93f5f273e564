"""Velocity and acceleration limits by uniform time scaling (no rclpy import).

The motion the controller executes starts at the measured state ``q0`` now (time 0) and passes through the
chunk's future points at ``tau[k]`` seconds from now. Stretching time about now by a factor ``s`` keeps the
path and divides every velocity by ``s`` and every acceleration by ``s**2``, so the smallest factor meeting
all limits is ``max(max_k r_v[k], sqrt(max_k r_a[k]))`` with the ratios below taken at ``s = 1``. Clamping
joints one by one would instead bend the path (and could bend it into an obstacle the collision check
cleared).

Velocities are finite differences of the segments; accelerations are second differences on the
non-uniform grid, ``a_k = 2 (v_{k+1} - v_k) / (h_k + h_{k+1})`` at the point between segments k and k+1.
Worked example: q0 = 0, points 0.1 and 0.3 rad at 0.1 s and 0.2 s: segment speeds 1 and 2 rad/s, the
acceleration at the first point 2 (2 - 1) / 0.2 = 10 rad/s^2; with limits 2 rad/s and 5 rad/s^2 the ratios
are r_v = [0.5, 1.0], r_a = [2.0] and s = max(1.0, sqrt(2.0)) = 1.414.
"""

from __future__ import annotations

import numpy as np


def limit_ratios(
    tau_s: np.ndarray,
    points: np.ndarray,
    q0: np.ndarray,
    v_max: np.ndarray,
    a_max: np.ndarray,
    given_velocities: np.ndarray | None = None,
    start_tolerance: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Ratios of required to allowed velocity and acceleration at ``s = 1``.

    Args:
        tau_s: (K,) times of the points from now, strictly increasing and > 0.
        points: (K, n) positions; q0: (n,) measured positions at time 0.
        given_velocities: optional (K, n) velocities the chunk carries (they scale with 1/s too).
        start_tolerance: optional (n,) offsets between q0 and the first point that are not motion (servo
            lag, a gripper closed on an object): the first segment only counts what exceeds them, and the
            acceleration at the first point is not checked (the arm's velocity there is unknown; the
            controller limits its own command's acceleration every cycle).

    Returns:
        r_v (K,): for the segment ending at point k (k = 0 starts at q0), max_j |v_j| / v_max_j.
        r_a (K - 1,): at point k between segments k and k+1, max_j |a_j| / a_max_j.
    """
    if start_tolerance is not None:
        q0 = q0 + np.clip(points[0] - q0, -start_tolerance, start_tolerance)
    pos = np.vstack([q0[None, :], points])  # (K+1, n)
    times = np.concatenate([[0.0], tau_s])  # (K+1,)
    h = np.diff(times)  # (K,)
    v = np.diff(pos, axis=0) / h[:, None]  # (K, n)
    r_v = np.max(np.abs(v) / v_max, axis=1)
    if given_velocities is not None:
        r_v = np.maximum(r_v, np.max(np.abs(given_velocities) / v_max, axis=1))
    if v.shape[0] < 2:
        return r_v, np.zeros(0)
    a = 2.0 * np.diff(v, axis=0) / (h[:-1] + h[1:])[:, None]  # (K-1, n)
    r_a = np.max(np.abs(a) / a_max, axis=1)
    if start_tolerance is not None:
        r_a[0] = 0.0
    return r_v, r_a


def prefix_scales(r_v: np.ndarray, r_a: np.ndarray) -> np.ndarray:
    """(K,) time scale a prefix ending at point k needs: its segments' speeds and its interior accelerations.

    Point k's acceleration only matters once point k+1 is kept (a chunk that ends at k stops there and
    the controller's hold decelerates), so prefix k includes r_a[0 .. k-1].
    """
    s = np.maximum.accumulate(r_v)
    if r_a.size:
        s[1:] = np.maximum(s[1:], np.sqrt(np.maximum.accumulate(r_a)))
    return s

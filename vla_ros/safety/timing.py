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

The measured state is not exactly where the arm's command is (servo lag; a gripper closed on an object), so
with a tracking tolerance ``tol`` an offset of the first point up to ``tol`` from ``q0`` is not motion: the
first segment's velocity counts from the start within the tolerance nearest the first point. The
acceleration at the first point counts per joint, only where that joint's first point lies within the
tolerance of ``q0`` (the arm stands where the chunk starts), and only by what no start within the tolerance
explains: the first segment's velocity may be anything in ``[(d - tol) / h0, (d + tol) / h0]`` with
``d = P0 - q0``, and what counts is how far the second segment's velocity lies outside that range. Where the
first point lies further (the arm trails its command by more than the tolerance, as a wrist does in a fast
move), the measured state says nothing about the command's velocity there, and the controller, which
blends from its own command within its limits, bounds that acceleration (over eight held-out episodes of
the shipped model every first-point acceleration above the limit was of this kind, on joints 0.06-0.1 rad
behind). With a tolerance of 0.05 rad the example above counts nothing at its first point (0.1 rad away):
r_v = [0.25, 1.0] (the first segment from 0.05), r_a = [0.0], s = 1. A chunk that sets off at 2 rad/s from
where the arm stands, points 0.02 and 0.22 rad at 0.1 s and 0.2 s: possible first-segment speeds -0.3 to
0.7 rad/s, 1.3 rad/s short of the second segment's 2 rad/s, so 2 x 1.3 / 0.2 = 13 rad/s^2 at the first
point: r_v = [0.0, 1.0], r_a = [2.6] and s = sqrt(2.6) = 1.61.
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
            acceleration at the first point only what no start within them of q0 explains, on the
            joints whose first point lies within them (module docstring).

    Returns:
        r_v (K,): for the segment ending at point k (k = 0 starts at q0), max_j |v_j| / v_max_j.
        r_a (K - 1,): at point k between segments k and k+1, max_j |a_j| / a_max_j.
    """
    measured = q0
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
    if start_tolerance is not None:
        # Any start within the tolerance of the measured state may be where the arm's command really is,
        # so the first segment's velocity may be anything in [(d - tol) / h0, (d + tol) / h0]: only the
        # change from the one nearest the second segment's counts, and only on joints whose first point
        # lies within the tolerance (module docstring). Both ends scale with 1/s like every velocity, so
        # this acceleration scales with 1/s^2 like the others.
        d = points[0] - measured
        nearest = np.minimum(np.maximum(v[1], (d - start_tolerance) / h[0]), (d + start_tolerance) / h[0])
        a[0] = np.where(np.abs(d) <= start_tolerance, (v[1] - nearest) * (2.0 / (h[0] + h[1])), 0.0)
    r_a = np.max(np.abs(a) / a_max, axis=1)
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

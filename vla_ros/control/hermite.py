"""Piecewise cubic Hermite plans: what the controller samples every period (no rclpy import).

A plan is a list of knots ``(t_i, q_i, v_i)``: time in seconds relative to the executor's epoch,
positions and velocities of J joints. Between two knots the path is the unique cubic with those end
positions and velocities, so position and velocity are continuous across knots by construction. Before
the first knot a plan holds the first knot, after the last one it holds the last position (every plan the
executor builds ends at rest, with a stop segment, so holding there is continuous too).

Chunks carry positions only (velocities are optional), so tangents come from monotone piecewise cubic
interpolation (PCHIP; F. N. Fritsch and J. Butland, "A method for constructing local monotone piecewise
cubic interpolants", SIAM J. Sci. Stat. Comput. 5(2), 1984): a slope is zero where the data turn, and a
weighted harmonic mean of the neighbouring secants elsewhere. The curve then never leaves the range of
two neighbouring waypoints, so it cannot overshoot a joint limit the safety filter checked at the
waypoints.

Worked example of one segment: knots (t=0, q=0, v=0) and (t=0.1, q=0.01, v=0); at t=0.05, s=0.5 and the
basis weights are h00=0.5, h10=0.0125 s, h01=0.5, h11=-0.0125 s, so q=0.005 and v=1.5*0.01/0.1=0.15.
"""

from __future__ import annotations

import bisect

import numpy as np


def pchip_slopes(t: np.ndarray, p: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Monotone slopes (H, J) for points ``p`` (H, J) at strictly increasing times ``t`` (H,), into ``out``."""
    n = t.shape[0]
    if n == 1:
        out[:] = 0.0
        return out
    h = np.diff(t)  # (H-1,)
    delta = np.diff(p, axis=0) / h[:, None]  # (H-1, J) secant slopes
    if n == 2:
        out[0] = delta[0]
        out[1] = delta[0]
        return out
    # Interior points: weighted harmonic mean of the two secants where they agree in sign, else 0.
    w1 = (2.0 * h[1:] + h[:-1])[:, None]  # (H-2, 1)
    w2 = (h[1:] + 2.0 * h[:-1])[:, None]
    d0, d1 = delta[:-1], delta[1:]
    same_sign = (d0 * d1) > 0.0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # masked by same_sign below
        hm = (w1 + w2) / (w1 / d0 + w2 / d1)
    out[1:-1] = np.where(same_sign, hm, 0.0)
    out[0] = _end_slope(h[0], h[1], delta[0], delta[1])
    out[-1] = _end_slope(h[-1], h[-2], delta[-1], delta[-2])
    return out


def _end_slope(h0: float, h1: float, d0: np.ndarray, d1: np.ndarray) -> np.ndarray:
    """Three-point one-sided slope, limited so the end segment stays monotone (Fritsch-Butland ends)."""
    m = ((2.0 * h0 + h1) * d0 - h0 * d1) / (h0 + h1)
    m = np.where(np.sign(m) != np.sign(d0), 0.0, m)
    too_steep = (np.sign(d0) != np.sign(d1)) & (np.abs(m) > 3.0 * np.abs(d0))
    return np.where(too_steep, 3.0 * d0, m)


class HermitePlan:
    """A preallocated knot buffer with an allocation-free single-time sample (the per-period path).

    Args:
        capacity: most knots the plan can hold.
        n_joints: J.
    """

    def __init__(self, capacity: int, n_joints: int) -> None:
        self.capacity = capacity
        self.t = np.zeros(capacity)
        # Knot i's position and velocity side by side: knots[i:i+2] reshaped to (4, J) is
        # [q_i, v_i, q_i+1, v_i+1], so one segment is two small matrix products (see sample()).
        self.knots = np.zeros((capacity, 2, n_joints))
        self.q = self.knots[:, 0, :]
        self.v = self.knots[:, 1, :]
        self.n = 0
        self._basis = np.zeros(4)
        self._dbasis = np.zeros(4)

    # ---- building --------------------------------------------------------------------------------
    def clear(self) -> None:
        self.n = 0

    def append(self, t: float, q: np.ndarray, v: np.ndarray) -> None:
        """Add a knot after the last one. Knots closer than 1 us to the previous one replace it."""
        if self.n and t <= self.t[self.n - 1] + 1e-6:
            self.n -= 1  # a blend's last sample can coincide with a chunk point; keep the newer
        if self.n >= self.capacity:
            raise IndexError(f"plan capacity {self.capacity} exceeded")  # a sizing bug, not bad input
        i = self.n
        self.t[i] = t
        self.q[i] = q
        self.v[i] = v
        self.n += 1

    def extend(self, ts: np.ndarray, q: np.ndarray, v: np.ndarray) -> None:
        """Add K knots (times (K,) increasing, after the last knot; q, v (K, J)) in one copy."""
        k = ts.shape[0]
        if k == 0:
            return
        if self.n and ts[0] <= self.t[self.n - 1] + 1e-6:
            self.n -= 1
        i = self.n
        if i + k > self.capacity:
            raise IndexError(f"plan capacity {self.capacity} exceeded")  # a sizing bug, not bad input
        self.t[i : i + k] = ts
        self.q[i : i + k] = q
        self.v[i : i + k] = v
        self.n += k

    def set_hold(self, t: float, q: np.ndarray) -> None:
        self.n = 0
        self.t[0] = t
        self.q[0] = q
        self.v[0] = 0.0
        self.n = 1

    @property
    def start_t(self) -> float:
        return float(self.t[0])

    @property
    def end_t(self) -> float:
        return float(self.t[self.n - 1])

    # ---- sampling --------------------------------------------------------------------------------
    def sample(self, t: float, out_q: np.ndarray, out_v: np.ndarray) -> None:
        """Position and velocity at time ``t`` into the (J,) arrays ``out_q`` and ``out_v``."""
        n = self.n
        if n == 1 or t <= self.t[0]:
            out_q[:] = self.q[0]
            out_v[:] = self.v[0] if n > 1 else 0.0
            return
        if t >= self.t[n - 1]:
            out_q[:] = self.q[n - 1]
            out_v[:] = 0.0
            return
        i = bisect.bisect_right(self.t, t, 0, n) - 1  # t[i] <= t < t[i+1]
        t0 = self.t[i]
        h = self.t[i + 1] - t0
        s = (t - t0) / h
        s2 = s * s
        s3 = s2 * s
        b, db = self._basis, self._dbasis
        b[0] = 2.0 * s3 - 3.0 * s2 + 1.0  # weight of q_i
        b[1] = (s3 - 2.0 * s2 + s) * h  # v_i
        b[2] = -2.0 * s3 + 3.0 * s2  # q_i+1
        b[3] = (s3 - s2) * h  # v_i+1
        db[0] = (6.0 * s2 - 6.0 * s) / h
        db[1] = 3.0 * s2 - 4.0 * s + 1.0
        db[2] = -db[0]
        db[3] = 3.0 * s2 - 2.0 * s
        seg = self.knots[i : i + 2].reshape(4, -1)  # (4, J): q_i, v_i, q_i+1, v_i+1 (a view)
        np.dot(b, seg, out=out_q)
        np.dot(db, seg, out=out_v)

    def sample_many(self, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Positions and velocities (K, J) at the K times ``ts`` (vectorised; used when building plans)."""
        n = self.n
        tk = self.t[:n]
        if n == 1:
            q = np.repeat(self.q[:1], len(ts), axis=0)
            return q, np.zeros_like(q)
        i = np.clip(np.searchsorted(tk, ts, side="right") - 1, 0, n - 2)  # (K,)
        h = tk[i + 1] - tk[i]
        s = np.clip((ts - tk[i]) / h, 0.0, 1.0)[:, None]  # (K, 1); clamped: hold outside the knots
        h = h[:, None]
        s2, s3 = s * s, s * s * s
        q0, v0, q1, v1 = self.q[i], self.v[i], self.q[i + 1], self.v[i + 1]  # (K, J) each
        q = (2 * s3 - 3 * s2 + 1) * q0 + (s3 - 2 * s2 + s) * h * v0 + (-2 * s3 + 3 * s2) * q1 + (s3 - s2) * h * v1
        v = (6 * s2 - 6 * s) / h * (q0 - q1) + (3 * s2 - 4 * s + 1) * v0 + (3 * s2 - 2 * s) * v1
        before, after = ts <= tk[0], ts >= tk[-1]
        v[before] = self.v[0]
        v[after] = 0.0
        return q, v

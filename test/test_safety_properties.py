"""Property tests of the safety filter on random and adversarial chunks (hypothesis, 6,000 on the sim arm).

For every chunk, whatever it contains: the output is finite, within the position, velocity and acceleration
limits (checked here with an independent finite-difference formula, the first point's acceleration
included), starts reachable from the measured state, keeps the clearances along its path and along the
stop after its last point (checked with Coal collision queries and security margins, not the distances and
certificates the filter uses, at configurations of the oracle's own choosing), is a piece of the input
path; filtering it again changes nothing; and a chunk that is safe as it stands comes back as the very same
object. Cases are drawn as a mode and a seed and built with numpy, so hypothesis spends its time on the
filter, and ``derandomize`` makes CI reproducible.
"""

import zlib

import numpy as np
import pinocchio as pin
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vla_ros.bench.safety_bench import FR3_DIR, FR3_READY, fr3_filter, sim_filter
from vla_ros.chunks import ActionChunk
from vla_ros.safety import REASONS, VERDICTS, JointStateSample
from vla_ros.safety.timing import limit_ratios
from vla_ros.sim import HOME_Q

pytestmark = pytest.mark.unit  # no ROS node, no DDS, no wall-clock timing: `make test` runs it beside others

NOW = 1_700_000_000_000_000_000
TOL = 1e-6  # relative tolerance on the limits (the filter itself keeps 1e-9)
MODES = (
    "smooth",
    "wander",
    "uniform",
    "dive",
    "fold",
    "edge",
    "fast",
    "special",
    "times",
    "names",
    "stamp",
    "graze",
    "hop",
)
# The oracle's own resolution along a segment, whatever the filter's max_joint_step: one configuration at a
# random fraction of every stretch this long (finer than the filter's default 0.05 rad / 0.01 m, and never on
# its grid).
ORACLE_STEP_RAD, ORACLE_STEP_M = 0.03, 0.006
# The filter keeps its clearances exactly at every waypoint and at its samples between them; between its
# samples a pair's distance can dip below what the samples saw by a second-order amount (a link sweeping
# past an obstacle): at most 0.84 mm on the sim arm and 0.61 mm on the FR3, measured over 5,000 random
# one-step segments near obstacles, and never below a clearance at 10x the filter's resolution on 4,300
# filter outputs (property cases, and chunks grazing obstacles on both arms). Between waypoints the oracle
# allows this much less than the clearance.
BETWEEN_SAMPLES_M = 0.002


class MarginOracle:
    """Clearance check of a path by Coal collision queries with security margins (not the distances and
    certificates the filter uses): every waypoint with the full clearance, and between waypoints one
    configuration at a random fraction of every ORACLE_STEP stretch, with BETWEEN_SAMPLES_M less. The
    fractions come from the path itself (a CRC of its bytes), so a run is reproducible."""

    def __init__(self, checker):
        self.robot = checker.robot
        self.model, self.geom_model = checker.robot.model, checker.geom_model
        self.data = self.model.createData()
        self.at_waypoints = pin.GeometryData(self.geom_model)
        self.between = pin.GeometryData(self.geom_model)
        for i, clearance in enumerate(checker.clearance):
            self.at_waypoints.collisionRequests[i].security_margin = float(clearance)
            self.between.collisionRequests[i].security_margin = float(clearance) - BETWEEN_SAMPLES_M
        self.step = np.where(self.robot.prismatic, ORACLE_STEP_M, ORACLE_STEP_RAD)

    def configuration_safe(self, q, between: bool = False) -> bool:
        gdata = self.between if between else self.at_waypoints
        return not pin.computeCollisions(self.model, self.data, self.geom_model, gdata, self.robot.full_q(q), True)

    def path_safe(self, path, look_first: int = -1) -> bool:
        """``path[0]`` (the measured state) itself is not checked; ``look_first``: a segment to check before
        the others (where the filter saw trouble)."""
        path = np.ascontiguousarray(path, dtype=np.float64)
        rng = np.random.default_rng(zlib.crc32(path.tobytes()))
        segments = list(range(len(path) - 1))
        if 0 <= look_first < len(segments):
            segments.insert(0, segments.pop(look_first))
        for k in segments:
            a, b = path[k], path[k + 1]
            if not self.configuration_safe(b):
                return False
            n = max(1, int(np.ceil(np.max(np.abs(b - a) / self.step))))
            for m, u in enumerate(rng.random(n)):
                if not self.configuration_safe(a + ((m + u) / n) * (b - a), between=True):
                    return False
        return True


class Rig:
    """A filter, an independent path oracle, and pools of safe and colliding configurations."""

    def __init__(self, filt, home, seed=0):
        self.f = filt
        lim = filt.limits
        checker = filt.checker
        self.oracle = MarginOracle(checker)
        rng = np.random.default_rng(seed)
        kinds = np.array(checker.kinds)
        self.safe, self.dive, self.fold, self.near = [np.asarray(home, dtype=np.float64)], [], [], []
        for _ in range(4000):
            q = rng.uniform(lim.lower, lim.upper)
            margin = checker.distances(q) - checker.clearance
            if margin.min() > 0.03 and len(self.safe) < 48:
                self.safe.append(q)
            elif 0.0 < margin.min() < 0.015 and len(self.near) < 24:
                self.near.append(q)  # safe, but within 15 mm of a clearance: a start to graze from
            elif (margin[kinds == "table_collision"] < -0.03).any() and len(self.dive) < 24:
                self.dive.append(q)
            elif (margin[kinds == "self_collision"] < -0.01).any() and len(self.fold) < 24:
                self.fold.append(q)
            if len(self.safe) == 48 and len(self.dive) == 24 and len(self.fold) == 24 and len(self.near) == 24:
                break
        # Straight segments between two safe configurations through a colliding one (a line through a dive
        # or fold configuration, followed both ways until it is clear): only what a check finds between
        # waypoints can tell them apart from safe ones.
        self.cross = []
        for c in self.dive + self.fold:
            d = np.where(filt.robot.prismatic, 0.0, rng.normal(0.0, 1.0, c.size))
            d /= np.abs(d).max()
            ends = []
            for sign in (-1.0, 1.0):
                for t in np.arange(0.05, 1.5, 0.05):
                    q = c + sign * t * d
                    if ((q < lim.lower) | (q > lim.upper)).any():
                        break
                    if (checker.distances(q) - checker.clearance).min() > 0.0:
                        ends.append(q)
                        break
            if len(ends) == 2:
                self.cross.append(tuple(ends))
        assert len(self.safe) > 10 and self.dive and self.fold and self.near and self.cross


@pytest.fixture(scope="module")
def sim_rig():
    return Rig(sim_filter(), HOME_Q)


@pytest.fixture(scope="module")
def fr3_rig():
    filt = fr3_filter()
    if filt is None:
        pytest.skip(f"{FR3_DIR} not present")
    return Rig(filt, FR3_READY)


def make_case(rig, mode, seed, H, si, age_ms):
    """(chunk, state) for one drawn case; arrays come from numpy seeded by ``seed``."""
    f = rig.f
    lim = f.limits
    n = len(f.joint_names)
    rng = np.random.default_rng(seed)
    starts = {"graze": rig.near, "hop": [a for a, _ in rig.cross]}.get(mode, rig.safe)
    q0 = starts[si % len(starts)]
    names = list(f.joint_names)
    dt = float(rng.choice([0.02, 0.05, 0.1, 0.2]))
    times = np.arange(1, H + 1) * dt
    stamp = NOW - age_ms * 1_000_000
    velocities = None
    span = lim.upper - lim.lower
    s = np.arange(1, H + 1) / H
    if mode == "smooth":
        goal = np.clip(q0 + rng.uniform(-0.15, 0.15, n) * np.minimum(span, 1.0), lim.lower, lim.upper)
        pts = q0 + (0.5 - 0.5 * np.cos(np.pi * s))[:, None] * (goal - q0)
    elif mode == "wander":
        pts = q0 + np.cumsum(rng.normal(0.0, 0.03, (H, n)) * np.minimum(span, 1.0), axis=0)
    elif mode == "graze":  # small steps from near an obstacle: outputs that run along a clearance
        pts = q0 + np.cumsum(rng.normal(0.0, 0.02, (H, n)) * np.minimum(span, 1.0), axis=0)
    elif mode == "hop":  # one straight segment from a safe state to a safe point, through a collision
        target = rig.cross[si % len(rig.cross)][1]
        pts = target[None, :]
        times = np.array([float(np.max(np.abs(target - q0) / lim.velocity)) * rng.uniform(1.1, 2.0)])
    elif mode == "uniform":
        pts = rng.uniform(lim.lower - 0.1 * span, lim.upper + 0.1 * span, (H, n))
    elif mode in ("dive", "fold"):
        pool = rig.dive if mode == "dive" else rig.fold
        target = pool[int(rng.integers(len(pool)))]
        pts = q0 + s[:, None] * (target - q0)
    elif mode == "edge":
        pts = q0 + s[:, None] * (np.where(rng.random(n) < 0.5, lim.lower, lim.upper) - q0)
        pts += rng.choice([-1e-12, 0.0, 1e-12, 1e-3], (H, n))
    elif mode == "fast":
        times = np.arange(1, H + 1) * float(rng.choice([1e-3, 1e-4, 1e-6]))
        pts = q0 + np.cumsum(rng.normal(0.0, 0.01, (H, n)), axis=0)
    else:
        pts = q0 + np.cumsum(rng.normal(0.0, 0.01, (H, n)), axis=0)
    if mode == "special":
        bad = rng.choice([np.nan, np.inf, -np.inf, 1e300, -1e300, 1e-300, -0.0, 1e15])
        where = rng.integers(3)
        if where == 0:
            pts[rng.integers(H), rng.integers(n)] = bad
        elif where == 1:
            times[rng.integers(H)] = bad
        else:
            velocities = rng.normal(0.0, 0.1, (H, n))
            velocities[rng.integers(H), rng.integers(n)] = bad
    elif mode == "times":
        kind = rng.integers(5)
        if kind == 0:
            times = rng.permutation(times)
        elif kind == 1:
            times = np.sort(rng.choice(times, H))  # duplicates
        elif kind == 2:
            times = times - float(rng.uniform(0.0, 0.5))  # some negative
        elif kind == 3:
            times = times * float(rng.choice([1e3, 1e6]))
        else:
            times = times[0] + np.arange(H) * 1e-10  # closer than a nanosecond
    elif mode == "names":
        kind = rng.integers(4)
        order = rng.permutation(n)
        pts = pts[:, order]
        names = [names[i] for i in order]
        if kind == 1:
            names[rng.integers(n)] = "not_a_joint"
        elif kind == 2:
            names[0] = names[-1]
        elif kind == 3:
            names, pts = names[1:], pts[:, 1:]
    elif mode == "stamp":
        stamp = NOW - int(rng.uniform(-0.2, 1.0) * 1e9)
    state_stamp = NOW - (int(rng.uniform(0.0, 0.5) * 1e9) if mode == "stamp" else 5_000_000)
    chunk = ActionChunk(tuple(names), stamp, np.asarray(times, dtype=np.float64), pts, velocities)
    return chunk, JointStateSample(f.joint_names, q0, state_stamp)


def tracking_tolerance(f):
    return np.where(f.robot.prismatic, f.config.tracking_tolerance_m, f.config.tracking_tolerance_rad)


def timing_start(f, q0, first):
    """The filter's documented rule: offsets within the tracking tolerance are not motion."""
    tol = tracking_tolerance(f)
    return q0 + np.clip(first - q0, -tol, tol)


def first_point_acceleration(f, q0, points, tau):
    """(n,) acceleration at the first point that no start within the tracking tolerance of the measured
    state ``q0`` explains (the arm's real command may be anywhere within it): from such starts the first
    segment's velocity ranges over (P0 - q0 -+ tol) / h0, and the change to the second segment's v1 is at
    least v1's distance from that range, over the mean of the two segments' durations. Counted on the
    joints standing within the tolerance of the first point; one further away trails its command, whose
    velocity the measured state does not tell (the filter's contract, safety.timing): 0 there."""
    tol = tracking_tolerance(f)
    h0, h1 = tau[0], tau[1] - tau[0]
    v1 = (points[1] - points[0]) / h1
    d = points[0] - q0
    nearest = np.clip(v1, (d - tol) / h0, (d + tol) / h0)
    return np.where(np.abs(d) <= tol, 2.0 * (v1 - nearest) / (h0 + h1), 0.0)


def stop_configuration(f, last, v_last):
    """Where the arm comes to rest after the last point, by the filter's documented rule: decelerating
    along the last segment's velocity, all joints together within their acceleration limits (t_stop =
    max_j |v_j| / a_j, every joint v_j t_stop / 2 further), clipped to the URDF limits; None when at rest."""
    lim = f.limits
    t_stop = float(np.max(np.abs(v_last) / lim.acceleration))
    if t_stop == 0.0:
        return None
    return np.clip(last + v_last * 0.5 * t_stop, lim.hard_lower, lim.hard_upper)


def rates(points, tau, q0):
    """Velocities and accelerations of the executed motion, written out independently of the filter."""
    P = np.vstack([q0, points])
    T = np.concatenate([[0.0], tau])
    v = (P[1:] - P[:-1]) / (T[1:] - T[:-1])[:, None]
    a = 2.0 * (v[1:] - v[:-1]) / ((T[1:] - T[:-1])[:-1] + (T[1:] - T[:-1])[1:])[:, None]
    return v, a


def safe_as_is(rig, chunk, st_, hint: int = -1):
    """The oracle's verdict on the input: every check passes without changing anything. ``hint``: the
    point the filter found unsafe, whose segment the oracle looks at first."""
    f = rig.f
    lim = f.limits
    names = f.joint_names
    if set(chunk.joint_names) != set(f.commanded_names) or len(chunk.joint_names) != len(names):
        return False
    if (
        not (np.isfinite(chunk.positions).all() and np.isfinite(chunk.time_from_start_s).all())
        or chunk.velocities is not None
    ):
        return False
    age = NOW - chunk.stamp_ns
    if not (0 <= age <= f.config.max_chunk_age_s * 1e9) or not (0 < chunk.time_from_start_s.min()):
        return False
    if chunk.time_from_start_s.max() > f.config.max_horizon_s:
        return False
    tau = np.round(chunk.time_from_start_s * 1e9).astype(np.int64) - age
    if (tau <= 0).any() or (np.diff(tau) <= 0).any():
        return False
    order = [names.index(n) for n in chunk.joint_names]
    Q = np.empty_like(chunk.positions)
    Q[:, order] = chunk.positions
    if ((Q < lim.lower) | (Q > lim.upper)).any():
        return False
    v, a = rates(Q, tau * 1e-9, timing_start(f, st_.positions, Q[0]))
    a = a[1:]  # interior points; the first point's is first_point_acceleration
    if (np.abs(v) > lim.velocity).any() or (np.abs(a) > lim.acceleration).any():
        return False
    if len(Q) > 1 and (np.abs(first_point_acceleration(f, st_.positions, Q, tau * 1e-9)) > lim.acceleration).any():
        return False
    if not rig.oracle.path_safe(np.vstack([st_.positions, Q]), look_first=hint):
        return False
    q_stop = stop_configuration(f, Q[-1], v[-1]) if f.config.check_stopping else None
    return q_stop is None or rig.oracle.path_safe(np.vstack([Q[-1], q_stop]))


def check_properties(rig, chunk, st_, out, report):
    f = rig.f
    lim = f.limits
    assert report.verdict in VERDICTS
    if out is None:
        assert report.verdict == "rejected" and report.reason in REASONS and report.detail
        return
    assert report.verdict != "rejected"
    if report.verdict == "pass":
        assert out is chunk
    assert out.joint_names == chunk.joint_names and out.stamp_ns == chunk.stamp_ns and out.horizon >= 1
    assert np.isfinite(out.positions).all() and np.isfinite(out.time_from_start_s).all()
    assert out.velocities is None or np.isfinite(out.velocities).all()
    # A contiguous piece of the input path, positions untouched except targets just past a limit, which
    # are clamped onto it (at most the clamp tolerance away).
    names0 = f.joint_names
    cols0 = [names0.index(n) for n in chunk.joint_names]
    tol = np.asarray(f._clamp_tol)[cols0]
    lo, hi = np.asarray(lim.lower)[cols0], np.asarray(lim.upper)[cols0]
    near = np.clip(chunk.positions, lo, hi)
    expected = np.where((np.abs(near - chunk.positions) <= tol), near, chunk.positions)
    k = int(np.flatnonzero((expected == out.positions[0]).all(axis=1))[0])
    assert np.array_equal(expected[k : k + out.horizon], out.positions)
    names = f.joint_names
    order = [names.index(n) for n in out.joint_names]
    Q = np.repeat(st_.positions[None, :], out.horizon, axis=0)
    Q[:, order] = out.positions
    assert (Q[:, order] >= lim.lower[order]).all() and (Q[:, order] <= lim.upper[order]).all()
    tau = np.round(out.time_from_start_s * 1e9).astype(np.int64) - (NOW - out.stamp_ns)
    assert (tau > 0).all() and (np.diff(tau) > 0).all()
    v, a = rates(
        Q, tau * 1e-9, timing_start(f, st_.positions, Q[0])
    )  # v[0]: the first point, from the measured state (tolerance off)
    assert (np.abs(v) <= lim.velocity * (1 + TOL)).all()
    assert (np.abs(a[1:]) <= lim.acceleration * (1 + TOL)).all()  # interior points
    if out.horizon > 1:  # the first point: what no start within the tracking tolerance explains
        a0 = first_point_acceleration(f, st_.positions, Q, tau * 1e-9)
        assert (np.abs(a0) <= lim.acceleration * (1 + TOL)).all(), (a0, report)
    if out.velocities is not None:
        assert (np.abs(out.velocities) <= np.asarray(lim.velocity)[order] * (1 + TOL)).all()
    assert rig.oracle.path_safe(np.vstack([st_.positions, Q])), report
    if f.config.check_stopping:  # and the stop after the last point, where a cut chunk leaves the arm
        q_stop = stop_configuration(f, Q[-1], v[-1])
        assert q_stop is None or rig.oracle.path_safe(np.vstack([Q[-1], q_stop])), ("stop", q_stop, report)
    again, report2 = f.filter(out, st_, NOW)
    assert again is out and report2.verdict == "pass", report2


# Two draws per case (hypothesis' own cost per draw is comparable to a filter call); the rest comes from
# numpy seeded by the second.
CASES = st.tuples(st.sampled_from(MODES), st.integers(0, 2**32 - 1))
PROPERTY_SETTINGS = dict(deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))


def run_case(rig, case, seen):
    mode, seed = case
    pick = np.random.default_rng(seed ^ 0x5EED)
    H = int(pick.integers(1, 25))
    si = int(pick.integers(len(rig.safe)))
    age_ms = int(pick.choice([0, 0, 0, 5, 30]))
    chunk, st_ = make_case(rig, mode, seed, H, si, age_ms)
    out, report = rig.f.filter(chunk, st_, NOW)
    check_properties(rig, chunk, st_, out, report)
    if report.verdict != "pass" and mode in ("smooth", "wander", "dive", "fold", "fast", "edge", "graze", "hop"):
        assert not safe_as_is(rig, chunk, st_, report.first_unsafe_index), f"a safe chunk was changed: {report}"
    elif report.verdict == "pass" and mode in ("smooth", "wander", "graze", "hop"):
        assert safe_as_is(rig, chunk, st_)
    seen.setdefault(mode, set()).add(report.reason or report.verdict)
    seen.setdefault("count", set()).add(case)


def test_the_first_points_acceleration_counts_what_no_start_within_the_tracking_tolerance_explains(sim_rig):
    """Hand-built cases with known answers: the arm's command may be anywhere within the tracking tolerance
    of the measured state, so a chunk that moves on at the speed it set off with is left alone however far
    its first point lies; one that sets off at full speed from where the arm stands is slowed for that
    start; and where the arm trails the first point by more than the tolerance, only the points after the
    first count (the arm's command, and so its velocity, is elsewhere)."""
    # safety.timing's worked examples (tolerance 0.05 rad, limits 2 rad/s and 5 rad/s^2).
    tol, v_max, a_max = np.array([0.05]), np.array([2.0]), np.array([5.0])
    r_v, r_a = limit_ratios(
        np.array([0.1, 0.2]), np.array([[0.1], [0.3]]), np.zeros(1), v_max, a_max, start_tolerance=tol
    )
    np.testing.assert_allclose(r_v, [0.25, 1.0])
    np.testing.assert_allclose(r_a, [0.0])  # 0.1 rad out: beyond the tolerance, nothing counts at the first point
    r_v, r_a = limit_ratios(
        np.array([0.1, 0.2]), np.array([[0.02], [0.22]]), np.zeros(1), v_max, a_max, start_tolerance=tol
    )
    np.testing.assert_allclose(r_v, [0.0, 1.0], atol=1e-12)
    np.testing.assert_allclose(r_a, [2.6])  # starts -0.3..0.7 rad/s, 1.3 short of 2: 13 rad/s^2
    f = sim_rig.f
    q0 = np.array(HOME_Q, dtype=np.float64)
    state = JointStateSample(f.joint_names, q0, NOW - 5_000_000)
    times = 0.05 * np.arange(1, 9)
    pan = np.where(np.arange(q0.size) == 0, 1.0, 0.0)
    # On at 1.5 rad/s from the arm: the first point lies 25 mrad beyond the 50 mrad tolerance, and counting
    # the first segment from the tolerance's edge (0.5 rad/s) would make it a 20 rad/s^2 start.
    steady = ActionChunk(f.joint_names, NOW, times, q0 + np.outer(0.075 * np.arange(1, 9), pan))
    out, report = f.filter(steady, state, NOW)
    assert out is steady and report.verdict == "pass", report
    # From where the arm stands (the first point on it) to 2 rad/s at once: the first segment may have run at
    # -1..1 rad/s, 1 rad/s short of 2, so 20 rad/s^2 at the first point, twice the pan's 10: time stretches
    # by sqrt(2) (the speed itself is at the limit, ratio 1).
    start = ActionChunk(f.joint_names, NOW, times, q0 + np.outer(0.1 * np.arange(0, 8), pan))
    out, report = f.filter(start, state, NOW)
    assert report.verdict == "modified" and report.time_scale == pytest.approx(np.sqrt(2.0), rel=1e-6), report
    # Out 75 mrad (25 beyond the tolerance: the arm trails) and straight back: the turn at the first point is
    # not counted, the stop at the second is: -1.5 rad/s to rest over 0.05 s, 30 rad/s^2, so sqrt(3).
    back = ActionChunk(f.joint_names, NOW, times, q0 + np.outer(0.075 * (np.arange(1, 9) == 1), pan))
    out, report = f.filter(back, state, NOW)
    assert report.verdict == "modified" and report.time_scale == pytest.approx(np.sqrt(3.0), rel=1e-6), report


def test_sim_arm_every_output_is_safe_and_every_kind_of_outcome_occurs(sim_rig):
    """6,000 cases, then the check that makes them meaningful: they hit passes, every family of rejection
    and truncation (one test, so it never depends on another having run first)."""
    seen = {}

    @settings(max_examples=6_000, **PROPERTY_SETTINGS)
    @given(case=CASES)
    def every_output_is_safe(case):
        run_case(sim_rig, case, seen)

    every_output_is_safe()
    assert len(seen["count"]) >= 6_000  # distinct chunks
    outcomes = set().union(*(v for k, v in seen.items() if k != "count"))
    for reason in (
        "pass",
        "modified",
        "non_finite",
        "non_increasing_time",
        "position_limit",
        "velocity_limit",
        "unreachable_first_point",
        "table_collision",
        "self_collision",
        "unknown_joint",
        "stale_chunk",
    ):
        assert reason in outcomes, (reason, outcomes)
    assert "pass" in seen["smooth"]
    assert "pass" in seen["graze"] and seen["hop"] & {"table_collision", "self_collision"}, (seen["graze"], seen["hop"])


@settings(max_examples=1_500, **PROPERTY_SETTINGS)
@given(case=CASES)
def test_fr3_every_output_is_safe(fr3_rig, case):
    run_case(fr3_rig, case, {})

"""Chunk shaping (policy.shaping): a chunk shaped into the filter's limits passes the real safety filter's
limit checks unmodified, a chunk already inside them is not changed, and bad limits are refused."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vla_ros.bench.safety_bench import SIM_CONFIG, sim_filter
from vla_ros.chunks import ActionChunk
from vla_ros.policy.shaping import ChunkLimits, chunk_limits, shape_chunk
from vla_ros.safety import POINT_REASONS, JointStateSample
from vla_ros.sim import HOME_Q, default_urdf_path

NOW = 1_700_000_000 * 1_000_000_000
HOME = np.array(HOME_Q)
LATENCY_S = 0.05
# What shaping answers for: every limit check. Collisions (along the chunk and in the stop after it) and the
# workspace stay the filter's own business.
LIMIT_CODES = {"unreachable_first_point", "position_limit", "velocity_limit", "acceleration_limit"}
assert LIMIT_CODES <= set(POINT_REASONS)


@pytest.fixture(scope="module")
def flt():
    return sim_filter()


@pytest.fixture(scope="module")
def limits(flt):
    return chunk_limits(default_urdf_path().read_text(), flt.joint_names, SIM_CONFIG, latency_s=LATENCY_S)


def _filter(flt, times, positions, q_at_filter):
    """The filter's verdict on a chunk stamped LATENCY_S before it looks, the arm measured at q_at_filter."""
    chunk = ActionChunk(flt.joint_names, NOW - int(LATENCY_S * 1e9), np.asarray(times), np.asarray(positions))
    return flt.filter(chunk, JointStateSample(flt.joint_names, np.asarray(q_at_filter), NOW - 2_000_000), NOW)


def test_limits_are_the_filters_own(flt, limits):
    np.testing.assert_allclose(limits.velocity, flt.limits.velocity)
    np.testing.assert_allclose(limits.acceleration, flt.limits.acceleration)
    np.testing.assert_allclose(limits.lower, flt.limits.lower)
    np.testing.assert_allclose(limits.upper, flt.limits.upper)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31 - 1), noise=st.floats(0.0, 0.2), offset=st.floats(0.0, 0.3),
       gripper_push=st.floats(0.0, 0.02), speed=st.floats(0.0, 1.0))
def test_a_shaped_chunk_passes_every_limit_check(flt, limits, seed, noise, offset, gripper_push, speed):
    """A regression-like chunk: a motion with point-to-point noise, a first point off the measured state and
    a gripper target past its stroke; the arm moving at up to the velocity limit. Shaped, the filter's limit
    checks find nothing (the shaped chunk may still come near the table: not shaping's business)."""
    rng = np.random.default_rng(seed)
    n, H = len(flt.joint_names), 20
    times = np.arange(1, H + 1) * 0.1
    q = HOME + rng.uniform(-0.3, 0.3, n) * np.where(flt.robot.prismatic, 0.0, 1.0)
    v = rng.uniform(-1.0, 1.0, n) * speed * limits.velocity * 0.9
    goal = q + rng.uniform(-0.6, 0.6, n) * np.where(flt.robot.prismatic, 0.05, 1.0)
    s = (0.5 - 0.5 * np.cos(np.pi * np.arange(1, H + 1) / H))[:, None]
    raw = q + offset * rng.uniform(-1, 1, n) + s * (goal - q) + noise * rng.normal(size=(H, n))
    raw[:, flt.robot.prismatic] = flt.limits.upper[flt.robot.prismatic] + gripper_push  # past the stroke
    shaped = shape_chunk(times + LATENCY_S, raw, q, v, limits)
    assert np.all(np.isfinite(shaped)) and shaped.shape == raw.shape
    out, report = _filter(flt, times, shaped, q + v * LATENCY_S)
    acted = {f.code for f in report.findings} & LIMIT_CODES
    assert not acted, (report.verdict, report.findings[:3])


def test_a_chunk_inside_the_limits_is_left_as_it_is(flt, limits):
    """The cosine-eased chunks the safety bench uses pass the filter as they are; shaping keeps them."""
    from vla_ros.bench.safety_bench import smooth_chunk

    rng = np.random.default_rng(4)
    kept = 0
    for _ in range(20):
        chunk = smooth_chunk(flt, HOME, rng, NOW, waypoints=25, reach_rad=0.2)
        times = chunk.time_from_start_s + LATENCY_S  # every point still ahead when the filter looks
        out, report = _filter(flt, times, chunk.positions, HOME)
        if report.verdict != "pass":
            continue
        kept += 1
        shaped = shape_chunk(times, chunk.positions, HOME, None, limits)
        np.testing.assert_allclose(shaped, chunk.positions, atol=1e-9)
    assert kept >= 10


def test_far_first_point_is_pulled_to_reach_and_the_rest_follows(limits):
    n = len(limits.joint_names)
    times = np.arange(1, 11) * 0.1
    raw = np.tile(HOME + 1.0, (10, 1))  # one radian (or metre) away from the start at once
    shaped = shape_chunk(times, raw, HOME, None, limits)
    step0 = np.abs(shaped[0] - HOME)
    assert np.all(step0 <= limits.tolerance * limits.fraction + limits.velocity * limits.fraction * (0.1 - limits.latency_s) + 1e-12)
    speeds = np.abs(np.diff(shaped, axis=0)) / 0.1
    assert np.all(speeds <= limits.velocity * limits.fraction + 1e-9)
    assert np.all(np.abs(shaped[-1] - HOME) > np.abs(shaped[0] - HOME) - 1e-12)  # still heading to the target
    assert shaped.shape == (10, n)


@pytest.mark.parametrize("change, message", [
    (dict(velocity=-1.0), "velocity and acceleration"),
    (dict(tolerance=-0.1), "tolerances"),
    (dict(fraction=0.0), "fraction"),
    (dict(latency_s=2.0), "latency_s"),
])
def test_bad_limits_are_refused(limits, change, message):
    import dataclasses

    values = {k: (np.full(len(limits.joint_names), v) if k in ("velocity", "tolerance") else v) for k, v in change.items()}
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(limits, **values)


def test_limits_of_the_wrong_size_or_order_are_refused(limits):
    with pytest.raises(ValueError, match="one value per joint"):
        ChunkLimits(joint_names=limits.joint_names, lower=limits.lower[:3], upper=limits.upper, velocity=limits.velocity,
                    acceleration=limits.acceleration, tolerance=limits.tolerance)
    with pytest.raises(ValueError, match="lower limit"):
        ChunkLimits(joint_names=limits.joint_names, lower=limits.upper + 1, upper=limits.upper, velocity=limits.velocity,
                    acceleration=limits.acceleration, tolerance=limits.tolerance)


def test_a_chunk_still_moving_at_its_end_is_brought_to_rest_within_the_limits(limits):
    """The filter checks the stop after a chunk's last point; a shaped chunk ends (nearly) at rest, braking
    within the acceleration limits, and keeps the policy's motion before its tail."""
    n = len(limits.joint_names)
    h = 0.05
    times = np.arange(1, 17) * h
    speed = 0.5 * limits.velocity * np.array(["finger" not in j for j in limits.joint_names])  # the arm; gripper open
    raw = HOME + np.outer(times, speed)  # constant speed, through the last point
    shaped = shape_chunk(times, raw, HOME, speed, ChunkLimits(**{**limits.__dict__, "latency_s": 0.0}))
    v = np.diff(np.vstack([HOME, shaped]), axis=0) / h
    a = np.abs(np.diff(v[1:], axis=0)) / h
    assert np.all(np.abs(v[-1]) <= limits.acceleration * limits.fraction * h / 2 + 1e-9), v[-1]
    assert np.all(a <= limits.acceleration * limits.fraction + 1e-6)
    np.testing.assert_allclose(shaped[:4], raw[:4], atol=1e-9)  # the start, where braking is not yet needed
    assert shaped.shape == (16, n)

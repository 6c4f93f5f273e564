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
    new_times, shaped = shape_chunk(times + LATENCY_S, raw, q, v, limits)
    assert np.all(np.isfinite(shaped)) and shaped.shape == raw.shape and np.all(np.diff(new_times) > 0)
    out, report = _filter(flt, new_times - LATENCY_S, shaped, q + v * LATENCY_S)
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
        new_times, shaped = shape_chunk(times, chunk.positions, HOME, None, limits)
        np.testing.assert_array_equal(shaped, chunk.positions)
        np.testing.assert_array_equal(new_times, times)
    assert kept >= 10


def test_a_fast_chunk_is_slowed_by_one_time_scale_and_keeps_its_path(limits):
    """Half again as fast as the velocity limits allow: the points stay where they are (the path), the
    times stretch by one factor, and the speeds come out at the margin's share of the limits."""
    n = len(limits.joint_names)
    times = np.arange(1, 9) * 0.05
    arm = np.array(["finger" not in j for j in limits.joint_names])
    start = np.where(arm, 0.5 * (limits.lower + limits.upper), limits.upper)  # mid-range; gripper open
    speed = 1.5 * limits.velocity * arm
    raw = start + np.outer(times, speed)
    new_times, shaped = shape_chunk(times, raw, start, speed, ChunkLimits(**{**limits.__dict__, "latency_s": 0.0}))
    np.testing.assert_array_equal(shaped, raw)
    scale = new_times / times
    np.testing.assert_allclose(scale, scale[0])
    assert 1.5 / limits.fraction * 0.99 <= scale[0] <= 1.5 / limits.fraction * 1.01, scale[0]
    assert shaped.shape == (8, n)


def test_a_first_point_off_the_arm_is_pulled_within_reach_and_only_it(limits):
    times = np.arange(1, 11) * 0.1
    raw = np.tile(HOME, (10, 1))
    raw[0] += 0.3  # one regression error on the first point, nothing after it moves
    new_times, shaped = shape_chunk(times, raw, HOME, None, limits)
    reach = limits.tolerance * limits.fraction + limits.velocity * limits.fraction * (times[0] - limits.latency_s)  # the rest stands still
    assert np.all(np.abs(shaped[0] - HOME) <= reach + 1e-12) and np.any(shaped[0] != raw[0])
    np.testing.assert_array_equal(shaped[1:], raw[1:])


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

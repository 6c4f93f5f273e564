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

pytestmark = pytest.mark.unit  # no ROS node, no DDS, no wall-clock timing: `make test` runs it beside others

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
@given(
    seed=st.integers(0, 2**31 - 1),
    noise=st.floats(0.0, 0.2),
    offset=st.floats(0.0, 0.3),
    gripper_push=st.floats(0.0, 0.02),
    speed=st.floats(0.0, 1.0),
)
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
    reach = limits.tolerance * limits.fraction + limits.velocity * limits.fraction * (
        times[0] - limits.latency_s
    )  # the rest stands still
    assert np.all(np.abs(shaped[0] - HOME) <= reach + 1e-12) and np.any(shaped[0] != raw[0])
    np.testing.assert_array_equal(shaped[1:], raw[1:])


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(velocity=-1.0), "velocity and acceleration"),
        (dict(tolerance=-0.1), "tolerances"),
        (dict(fraction=0.0), "fraction"),
        (dict(latency_s=2.0), "latency_s"),
    ],
)
def test_bad_limits_are_refused(limits, change, message):
    import dataclasses

    values = {
        k: (np.full(len(limits.joint_names), v) if k in ("velocity", "tolerance") else v) for k, v in change.items()
    }
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(limits, **values)


def test_limits_of_the_wrong_size_or_order_are_refused(limits):
    with pytest.raises(ValueError, match="one value per joint"):
        ChunkLimits(
            joint_names=limits.joint_names,
            lower=limits.lower[:3],
            upper=limits.upper,
            velocity=limits.velocity,
            acceleration=limits.acceleration,
            tolerance=limits.tolerance,
        )
    with pytest.raises(ValueError, match="lower limit"):
        ChunkLimits(
            joint_names=limits.joint_names,
            lower=limits.upper + 1,
            upper=limits.upper,
            velocity=limits.velocity,
            acceleration=limits.acceleration,
            tolerance=limits.tolerance,
        )


# ---- the table lift ------------------------------------------------------------------------------------
def _descent(z_from: float, z_to: float, n: int = 16) -> np.ndarray:
    """A top-down descent of the tool over the table (the sim's closed-form IK), the gripper open."""
    from vla_ros.sim.scripted import GRIPPER_OPEN_M, top_down_ik

    return np.stack([np.r_[top_down_ik([0.45, 0.1, z]), GRIPPER_OPEN_M] for z in np.linspace(z_from, z_to, n)])


def _table_distance(flt, q) -> float:
    d = flt.checker.distances(q)
    return float(min(d[i] for i, kind in enumerate(flt.checker.kinds) if kind == "table_collision"))


def _hand_pose(robot, q, frame: str = "hand_link"):
    """(position, rotation matrix) of ``frame`` in the world at actuated configuration ``q``."""
    import pinocchio as pin

    data = robot.model.createData()
    pin.framesForwardKinematics(robot.model, data, robot.full_q(q))
    placement = data.oMf[robot.model.getFrameId(frame)]
    return placement.translation.copy(), placement.rotation.copy()


@pytest.fixture(scope="module")
def lift_limits(flt):
    return chunk_limits(
        default_urdf_path().read_text(),
        flt.joint_names,
        SIM_CONFIG,
        latency_s=LATENCY_S,
        retime=False,
        table_margin_m=0.005,
    )


def test_a_grasp_reaching_into_the_table_is_lifted_straight_up_until_the_filter_passes_it(flt, lift_limits):
    """A descent that ends with the fingertips on the table: the filter cuts it for the table. Lifted, every
    point keeps the clearance plus the margin, the hand moves only up (not across, not turning), points
    that kept it already are untouched, and the filter passes the chunk without a table finding."""
    times = np.arange(1, 17) * 0.1
    raw = _descent(0.10, 0.025)
    _, before = _filter(flt, times, raw, raw[0])
    assert before.verdict in ("truncated", "rejected") and before.reason == "table_collision", before
    new_times, lifted = shape_chunk(times, raw, raw[0], None, lift_limits)
    np.testing.assert_array_equal(new_times, times)  # no retiming asked for
    target = SIM_CONFIG.clearance_m + 0.005
    clear = np.array([_table_distance(flt, q) >= target for q in raw])
    assert clear[:4].all() and not clear[-4:].all()
    np.testing.assert_array_equal(lifted[clear], raw[clear])
    for q_raw, q in zip(raw[~clear], lifted[~clear]):
        assert _table_distance(flt, q) >= target - 1e-4
        (p0, r0), (p1, r1) = _hand_pose(flt.robot, q_raw), _hand_pose(flt.robot, q)
        assert np.abs(p1[:2] - p0[:2]).max() < 1e-3 and 0.0 < p1[2] - p0[2] <= target + 1e-3, (p0, p1)
        assert np.abs(r1 - r0).max() < 1e-3
    np.testing.assert_array_equal(lifted[:, -1], raw[:, -1])  # the gripper is no lift
    _, after = _filter(flt, times, lifted, lifted[0])
    assert "table_collision" not in {f.code for f in after.findings} and after.verdict != "rejected", after


def test_without_retime_only_positions_change_and_without_a_table_there_is_no_lift(flt, limits, lift_limits):
    import dataclasses

    times = np.arange(1, 9) * 0.01  # 23 cm in 80 ms, far too fast for the limits: retime would stretch it
    raw = _descent(0.25, 0.02, 8)
    new_times, _ = shape_chunk(times, raw, raw[0], None, lift_limits)
    np.testing.assert_array_equal(new_times, times)
    assert shape_chunk(times, raw, raw[0], None, limits)[0][-1] > times[-1]  # the retiming default does stretch
    no_table = chunk_limits(
        default_urdf_path().read_text(),
        flt.joint_names,
        dataclasses.replace(SIM_CONFIG, table_enabled=False),
        retime=False,
        table_margin_m=0.005,
    )
    assert no_table.table_lift is None
    np.testing.assert_array_equal(shape_chunk(times, raw, raw[0], None, no_table)[1], raw)


def test_a_table_lift_for_joints_the_robot_lacks_is_refused(flt):
    from vla_ros.policy.table_lift import TableLift

    with pytest.raises(ValueError, match="not actuated joints"):
        TableLift(flt.robot, SIM_CONFIG, ("shoulder_pan_joint", "tail_joint"))
    with pytest.raises(ValueError, match="margin_m"):
        TableLift(flt.robot, SIM_CONFIG, flt.joint_names, margin_m=-0.01)


def _hand_down_ik(robot, frame: str, xyz, q0, iterations: int = 300) -> np.ndarray:
    """Arm joints putting ``frame`` at ``xyz`` pointing straight down (damped least squares on Pinocchio)."""
    import pinocchio as pin

    model, data = robot.model, robot.model.createData()
    fid = model.getFrameId(frame)
    target = pin.SE3(np.diag([1.0, -1.0, -1.0]), np.asarray(xyz, float))
    arm = ~robot.prismatic
    q = np.array(q0, float)
    for _ in range(iterations):
        qf = robot.full_q(q)
        pin.framesForwardKinematics(model, data, qf)
        err = pin.log6(data.oMf[fid].actInv(target)).vector
        if np.abs(err).max() < 1e-9:
            break
        jac = (pin.computeFrameJacobian(model, data, qf, fid, pin.ReferenceFrame.LOCAL) @ robot.actuation_matrix)[
            :, arm
        ]
        q[arm] += jac.T @ np.linalg.solve(jac @ jac.T + 1e-8 * np.eye(6), err)
        q = np.clip(q, robot.lower, robot.upper)
    return q


def test_the_table_lift_works_on_a_real_arms_meshes_with_a_redundant_arm():
    """Franka FR3 (7 arm joints, convex hulls of its collision meshes): the hand pointing down with its
    lowest link 3 mm above the table; the lift raises the pose until every link keeps the clearance plus
    the margin, the hand moving only up."""
    from vla_ros.bench.safety_bench import FR3_CONFIG, fr3_filter
    from vla_ros.policy.table_lift import TableLift

    flt = fr3_filter()
    if flt is None:
        pytest.skip("../shared/robots/fr3 is not here")
    robot = flt.robot
    ready = np.clip([0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785, 0.03], robot.lower, robot.upper)
    z, q = 0.15, ready
    for _ in range(4):  # bring the lowest link (a fingertip) to 3 mm above the table
        q = _hand_down_ik(robot, "fr3_hand", [0.5, 0.0, z], q)
        z -= _table_distance(flt, q) - 0.003
    assert _table_distance(flt, q) == pytest.approx(0.003, abs=2e-4)
    lift = TableLift(robot, FR3_CONFIG, robot.joint_names, margin_m=0.005)
    lifted = lift.lift(q[None], robot.lower, robot.upper)[0]
    assert _table_distance(flt, lifted) >= FR3_CONFIG.clearance_m + 0.005 - 1e-4
    (p0, r0), (p1, r1) = _hand_pose(robot, q, "fr3_hand"), _hand_pose(robot, lifted, "fr3_hand")
    assert np.abs(p1[:2] - p0[:2]).max() < 1e-3
    assert 0.0 < p1[2] - p0[2] < 0.02
    assert np.abs(r1 - r0).max() < 1e-3
    assert lift.lifted_points == 1 and lifted[-1] == q[-1]


def test_the_table_lift_finds_relative_mesh_paths_next_to_the_urdf(tmp_path):
    """A URDF whose collision meshes are relative paths (not package://), given as text the way the policy
    node reads robot_description_file: the meshes resolve against the folder passed with it; without it
    shaping says it has no collision model instead of guessing."""
    import os

    from vla_ros.bench.safety_bench import FR3_CONFIG
    from vla_ros.bench.safety_bench import FR3_DIR as fr3
    from vla_ros.safety.robot import load_robot_files

    if not (fr3 / "fr3.urdf").is_file():
        pytest.skip("../shared/robots/fr3 is not here")
    os.symlink(fr3 / "meshes", tmp_path / "meshes")
    text = (fr3 / "fr3.urdf").read_text().replace("package://fr3/meshes/", "meshes/")
    assert 'filename="meshes/collision/' in text
    names = load_robot_files(fr3 / "fr3.urdf", None, [str(fr3.parent)]).joint_names
    lifted = chunk_limits(text, names, FR3_CONFIG, retime=False, table_margin_m=0.005, base_dir=tmp_path)
    assert lifted.table_lift is not None and lifted.table_lift._pairs
    with pytest.raises(ValueError, match="no collision model"):
        chunk_limits(text, names, FR3_CONFIG, retime=False, table_margin_m=0.005)

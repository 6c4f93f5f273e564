"""Safety filter core, check by check: configuration, robot model, malformed input, limits, time scaling,
collisions, truncation, the stop check. No ROS; every case names the reason code it expects."""

import math
import struct

import numpy as np
import pytest

from vla_ros.bench.safety_bench import FR3_DIR, fr3_filter, sim_filter
from vla_ros.chunks import COMMANDED_JOINTS, ActionChunk
from vla_ros.safety import (
    REASONS,
    ConfigError,
    JointStateSample,
    LimitError,
    Obstacle,
    RobotModelError,
    SafetyConfig,
    SafetyFilter,
    load_robot,
    load_robot_files,
    resolve_limits,
)
from vla_ros.safety.robot import convex_hull
from vla_ros.safety.timing import limit_ratios, prefix_scales
from vla_ros.sim import HOME_Q, default_urdf_path

pytestmark = pytest.mark.unit  # no ROS node, no DDS, no wall-clock timing: `make test` runs it beside others

NOW = 1_700_000_000_123_456_789  # wall-clock-like ROS time, ns
HOME = np.array(HOME_Q)
needs_fr3 = pytest.mark.skipif(not (FR3_DIR / "fr3.urdf").is_file(), reason=f"{FR3_DIR} not present")


@pytest.fixture(scope="module")
def robot():
    return load_robot_files(default_urdf_path())


@pytest.fixture(scope="module")
def flt():
    return sim_filter()


def state(q=HOME, stamp_ns=NOW - 5_000_000, names=COMMANDED_JOINTS):
    return JointStateSample(tuple(names), np.asarray(q, dtype=np.float64), stamp_ns)


def chunk(points, dt=0.1, stamp_ns=NOW, names=COMMANDED_JOINTS, times=None, velocities=None):
    points = np.asarray(points, dtype=np.float64)
    t = np.arange(1, len(points) + 1) * dt if times is None else np.asarray(times, dtype=np.float64)
    return ActionChunk(tuple(names), stamp_ns, t, points, velocities)


def ramp(target, n=10, start=HOME):
    """n points moving linearly from ``start`` (excluded) to ``target``."""
    s = np.arange(1, n + 1) / n
    return np.asarray(start) + s[:, None] * (np.asarray(target) - np.asarray(start))


def small_move():
    return ramp(HOME + np.array([0.1, -0.05, 0.05, 0.1, -0.05, 0.1, -0.01]))


# ---- configuration -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("velocity_scale", 0.0, "velocity_scale"),
        ("velocity_scale", 1.5, "(0, 1]"),
        ("acceleration_scale", -0.1, "acceleration_scale"),
        ("clearance_m", -0.01, "clearance_m"),
        ("self_clearance_m", float("nan"), "self_clearance_m"),
        ("max_time_scale", 0.5, "max_time_scale"),
        ("on_unsafe", "clamp", "'clamp'"),
        ("max_points", 1, "max_points"),
        ("workspace_min_m", (1.0, 0.0, 0.0), "workspace_max_m"),
        ("joints", ("a", "a"), "repeat"),
        ("obstacles", ("cube center=0,0,0",), "'cube'"),
        ("obstacles", ("box center=0,0 size=1,1,1",), "center"),
        ("obstacles", ("box center=0,0,0 size=1,-1,1",), "positive"),
        ("obstacles", ("plane normal=0,0,0 offset=1",), "zero"),
        ("obstacles", ("sphere center=0,0,0 radius=inf",), "finite"),
        ("limit_overrides", ("elbow_joint upper=1",), "joint_name:"),
        ("limit_overrides", ("elbow_joint: lower=1 upper=0",), "below upper"),
        ("limit_overrides", ("elbow_joint: velocity=-1",), "positive"),
        ("limit_overrides", ("elbow_joint: speed=1",), "'speed'"),
    ],
)
def test_config_rejects_bad_values_naming_the_field(field, value, words):
    extra = {"workspace_max_m": (0.0, 1.0, 1.0)} if field == "workspace_min_m" else {}
    with pytest.raises(ConfigError) as err:
        SafetyConfig(**{field: value}, **extra)
    assert words in str(err.value), str(err.value)


def test_obstacles_parse_to_shapes():
    box = Obstacle.parse("box name=shelf center=0.5,0.3,0.2 size=0.2,0.3,0.4 rpy=0,0,0.5")
    assert (box.kind, box.name, box.center_m, box.size_m, box.rpy_rad) == (
        "box",
        "shelf",
        (0.5, 0.3, 0.2),
        (0.2, 0.3, 0.4),
        (0, 0, 0.5),
    )
    plane = Obstacle.parse("plane normal=0,0,2 offset=1", 3)
    assert plane.name == "obstacle_3" and plane.normal == (0, 0, 1) and plane.offset_m == 0.5  # normalised
    assert Obstacle.parse("sphere center=1,2,3 radius=0.1").radius_m == 0.1


def test_limits_can_only_tighten_the_urdf(robot):
    tight = resolve_limits(
        robot,
        SafetyConfig(
            limit_overrides=("elbow_joint: lower=-1.0 upper=1.0 velocity=1.0 acceleration=3",),
            velocity_scale=0.5,
            position_margin_rad=0.0,
        ),
    )
    i = robot.joint_names.index("elbow_joint")
    assert (tight.lower[i], tight.upper[i], tight.velocity[i], tight.acceleration[i]) == (-1.0, 1.0, 0.5, 3.0)
    assert tight.velocity[0] == robot.velocity[0] * 0.5
    for line, words in [
        ("elbow_joint: upper=3.0", "upper=3.0 would loosen the URDF upper limit 2.6"),
        ("elbow_joint: lower=-3.0", "lower=-3.0 would loosen the URDF lower limit -2.6"),
        ("elbow_joint: velocity=9", "velocity=9.0 would loosen the URDF velocity limit 2.5"),
        ("wrist_joint: upper=1", "'wrist_joint', not an actuated joint"),
    ]:
        with pytest.raises(LimitError) as err:
            resolve_limits(robot, SafetyConfig(limit_overrides=(line,)))
        assert words in str(err.value)
    with pytest.raises(LimitError, match="no range left"):
        resolve_limits(robot, SafetyConfig(position_margin_m=0.03))  # the 4 cm finger stroke minus 2 x 3 cm
    with pytest.raises(LimitError, match="not actuated joints"):
        resolve_limits(robot, SafetyConfig(joints=("right_finger_joint",)))


# ---- robot model -------------------------------------------------------------------------------------


def test_sim_robot_model_reads_the_urdf(robot):
    assert robot.joint_names == COMMANDED_JOINTS  # the mimic finger is not commanded
    assert robot.lower[2] == -2.6 and robot.upper[2] == 2.6 and robot.velocity[2] == 2.5
    assert robot.prismatic.tolist() == [False] * 6 + [True]
    q = robot.full_q(HOME)
    assert q[-1] == q[-2] == HOME[-1]  # right_finger_joint mimics left_finger_joint
    excluded = robot.excluded
    assert ("forearm_link", "upper_arm_link") in excluded["adjacent"]
    assert ("hand_link", "left_finger_link") in excluded["adjacent"]
    assert excluded["contact_at_reference"] == [("left_finger_link", "right_finger_link")]  # closed gripper at q = 0
    checked = {(p.link_a, p.link_b) for p in robot.self_pairs}
    assert ("base_link", "hand_link") in checked and ("wrist_link", "hand_link") in checked
    assert not checked & set(excluded["adjacent"])
    assert load_robot(default_urdf_path().read_text()) is load_robot(default_urdf_path().read_text())  # cached


def _stl_box(path, half):
    """Binary STL of an axis-aligned box with half-extents ``half`` (12 triangles)."""
    c = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)], dtype=float) * half
    faces = [
        (0, 1, 3),
        (0, 3, 2),
        (4, 6, 7),
        (4, 7, 5),
        (0, 4, 5),
        (0, 5, 1),
        (2, 3, 7),
        (2, 7, 6),
        (0, 2, 6),
        (0, 6, 4),
        (1, 5, 7),
        (1, 7, 3),
    ]
    data = b"\0" * 80 + struct.pack("<I", len(faces))
    for a, b, d in faces:
        data += struct.pack("<3f", 0, 0, 0) + b"".join(struct.pack("<3f", *c[i]) for i in (a, b, d)) + b"\0\0"
    path.write_bytes(data)


MESH_URDF = """<robot name="meshbot">
  <link name="base"/>
  <joint name="j1" type="revolute"><parent link="base"/><child link="arm"/><origin xyz="0 0 0.3"/><axis xyz="0 1 0"/>
    <limit lower="-1.5" upper="1.5" velocity="1.0" effort="1"/></joint>
  <link name="arm"><visual><geometry><mesh filename="package://nowhere/visual.dae"/></geometry></visual>
    <collision><origin xyz="0 0 -0.25"/><geometry><mesh filename="{uri}"/></geometry></collision></link>
</robot>"""
HALF = np.array([0.05, 0.05, 0.25])  # the box hangs 0.5 m down from the joint, 0.3 m above the table


def _table_distance(q):
    """Lowest point of the hanging box above the table: 0.3 - 0.05 |sin q| - 0.5 cos q."""
    return 0.3 - HALF[0] * abs(math.sin(q)) - 2 * HALF[2] * math.cos(q)


def test_package_uris_resolve_through_package_paths_and_meshes_become_hulls(tmp_path):
    pkg = tmp_path / "share" / "mypkg" / "meshes"
    pkg.mkdir(parents=True)
    _stl_box(pkg / "box.stl", HALF)
    urdf = MESH_URDF.format(uri="package://mypkg/meshes/box.stl")
    for paths in ([str(tmp_path / "share")], [f"mypkg={tmp_path / 'share' / 'mypkg'}"]):
        robot = load_robot(urdf, package_paths=paths)  # the visual's package://nowhere is never looked up
        assert robot.joint_names == ("j1",)
        checker = SafetyFilter(robot, SafetyConfig(clearance_m=0.0)).checker
        table = checker.kinds.index("table_collision")
        for q in (-1.2, 0.0, 0.7, 1.5):
            assert checker.distances(np.array([q]))[table] == pytest.approx(_table_distance(q), abs=1e-6)
    with pytest.raises(RobotModelError, match="cannot resolve package://mypkg/meshes/box.stl"):
        load_robot(urdf, package_paths=[str(tmp_path / "elsewhere")])
    with pytest.raises(RobotModelError, match="relative mesh path"):
        load_robot(MESH_URDF.format(uri="meshes/box.stl"))


def test_mesh_distance_matches_the_box_it_describes(tmp_path):
    """A box mesh (as its hull) and the same box primitive give the same distances."""
    _stl_box(tmp_path / "box.stl", HALF)
    mesh = SafetyFilter(load_robot(MESH_URDF.format(uri=str(tmp_path / "box.stl"))), SafetyConfig(clearance_m=0.0))
    box = MESH_URDF.replace('<mesh filename="{uri}"/>', '<box size="0.1 0.1 0.5"/>')
    prim = SafetyFilter(load_robot(box), SafetyConfig(clearance_m=0.0))
    for q in (-1.2, 0.0, 0.7, 1.5):
        assert mesh.checker.distances(np.array([q])) == pytest.approx(prim.checker.distances(np.array([q])), abs=1e-6)


def test_convex_hull_contains_every_vertex():
    rng = np.random.default_rng(3)
    pts = rng.normal(size=(300, 3)) * [0.1, 0.05, 0.2]
    hull, tris = convex_hull(pts)
    corners = hull[tris]
    n = np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])
    offset = np.einsum("fk,fk->f", n, corners[:, 0])
    assert (pts @ n.T - offset <= 1e-12).all()  # every point inside every face plane
    assert len(hull) < len(pts)


def test_unsupported_joints_are_refused():
    urdf = MESH_URDF.replace('type="revolute"', 'type="continuous"').replace(
        '<mesh filename="{uri}"/>', '<box size="0.1 0.1 0.5"/>'
    )
    with pytest.raises(RobotModelError, match="j1 .* is not supported"):
        load_robot(urdf)
    with pytest.raises(RobotModelError, match="not valid XML"):
        load_robot("<robot")


@pytest.mark.parametrize("which", ["sim", pytest.param("fr3", marks=needs_fr3)])
def test_lipschitz_weights_bound_every_distance_change(which):
    """The certificate the fast path relies on: |d(q1) - d(q2)| <= w . |q1 - q2| for every pair."""
    f = sim_filter() if which == "sim" else fr3_filter()
    c = f.checker
    rng = np.random.default_rng(11)
    worst = 0.0
    for _ in range(300):
        q1 = rng.uniform(f.limits.lower, f.limits.upper)
        q2 = np.clip(q1 + rng.normal(0.0, rng.choice([0.01, 0.1, 0.5]), q1.size), f.limits.lower, f.limits.upper)
        bound = c.weights @ np.abs(q1 - q2)
        change = np.abs(c.distances(q1) - c.distances(q2))
        both_apart = (c.distances(q1) > 0) & (c.distances(q2) > 0)  # penetration depth is an EPA estimate
        assert (change[both_apart] <= bound[both_apart] + 1e-9).all()
        worst = max(worst, float(np.max(change[both_apart] / np.maximum(bound[both_apart], 1e-12))))
    assert 0.05 < worst <= 1.0  # a bound, and not a vacuous one


@pytest.mark.parametrize("which", ["sim", pytest.param("fr3", marks=needs_fr3)])
def test_fast_path_check_equals_exhaustive_check(which):
    f = sim_filter() if which == "sim" else fr3_filter()
    c = f.checker
    rng = np.random.default_rng(5)
    unsafe = 0
    for trial in range(60 if which == "sim" else 25):
        q0 = rng.uniform(f.limits.lower, f.limits.upper)
        steps = rng.normal(0.0, rng.choice([0.02, 0.08, 0.3]), (rng.integers(1, 25), q0.size))
        path = np.vstack([q0, np.clip(q0 + np.cumsum(steps, axis=0), f.limits.lower, f.limits.upper)])
        if trial % 3 == 0:
            c.forget_references()
        fast, ref = c.check_path(path), c.check_path_exhaustive(path)
        assert (fast.first_unsafe, fast.t) == (ref.first_unsafe, ref.t), (trial, fast, ref)
        unsafe += not ref.safe
        if ref.safe:
            assert fast.exact_queries <= ref.exact_queries + c.n_pairs
    assert 5 < unsafe < (60 if which == "sim" else 25)  # both outcomes exercised


# ---- malformed input, table-driven ------------------------------------------------------------------


def _variant(kind):
    pts = small_move()
    names = list(COMMANDED_JOINTS)
    if kind == "empty":
        return chunk(np.zeros((0, 7)), times=[])
    if kind == "ragged_names":
        return chunk(pts, names=names[:6] + ["left_finger_joint", "extra"])
    if kind == "ragged_times":
        return chunk(pts, times=np.arange(1, 12) * 0.1)
    if kind == "ragged_velocities":
        return chunk(pts, velocities=np.zeros((10, 6)))
    if kind.startswith("value:"):
        _, where, value = kind.split(":")
        pts = pts.copy()
        if where == "pos":
            pts[3, 2] = float(value)
            return chunk(pts)
        if where == "time":
            t = np.arange(1, 11) * 0.1
            t[3] = float(value)
            return chunk(pts, times=t)
        v = np.zeros_like(pts)
        v[3, 1] = float(value)
        return chunk(pts, velocities=v)
    if kind == "unknown":
        return chunk(pts, names=["bogus"] + names[1:])
    if kind == "mimic":
        return chunk(pts, names=names[:6] + ["right_finger_joint"])
    if kind == "missing":
        return chunk(pts[:, :6], names=names[:6])
    if kind == "duplicate":
        return chunk(pts, names=names[:6] + ["elbow_joint"])
    if kind.startswith("times:"):
        return chunk(pts[:3], times=[float(v) for v in kind.split(":")[1].split(",")])
    if kind == "too_many":
        return chunk(ramp(HOME + 0.01, n=1001), dt=0.001)
    if kind == "stale":
        return chunk(pts, stamp_ns=NOW - 2 * 10**9)
    if kind == "all_past":
        return chunk(pts, stamp_ns=NOW - 4 * 10**8, times=np.arange(10) * 0.01)
    if kind == "future":
        return chunk(pts, stamp_ns=NOW + 10**9)
    raise AssertionError(kind)


@pytest.mark.parametrize(
    "kind, code, index",
    [
        ("empty", "empty_chunk", 0),
        ("ragged_names", "size_mismatch", 0),
        ("ragged_times", "size_mismatch", 0),
        ("ragged_velocities", "size_mismatch", 0),
        ("value:pos:nan", "non_finite", 3),
        ("value:pos:inf", "non_finite", 3),
        ("value:pos:-inf", "non_finite", 3),
        ("value:time:nan", "non_finite", 3),
        ("value:vel:nan", "non_finite", 3),
        ("value:time:1e300", "horizon_too_long", 3),
        ("value:time:-0.5", "negative_time", 3),
        ("unknown", "unknown_joint", 0),
        ("mimic", "unknown_joint", 0),
        ("missing", "missing_joint", 0),
        ("duplicate", "duplicate_joint", 0),
        ("times:0.3,0.2,0.4", "non_increasing_time", 1),  # time reversal
        ("times:0.1,0.2,0.2", "non_increasing_time", 2),
        ("times:0.1,0.1000000000001,0.2", "non_increasing_time", 1),  # equal at the message's 1 ns resolution
        ("too_many", "too_many_points", 0),
        ("stale", "stale_chunk", 0),
        ("all_past", "stale_chunk", 9),
        ("future", "future_stamp", 0),
    ],
)
def test_malformed_chunks_are_rejected_with_their_reason(flt, kind, code, index):
    out, report = flt.filter(_variant(kind), state(), NOW)
    assert out is None and report.verdict == "rejected"
    assert (report.reason, report.first_unsafe_index) == (code, index), report
    assert report.reason in REASONS and report.detail


def test_reasons_name_the_field(flt):
    assert "bogus" in flt.filter(_variant("unknown"), state(), NOW)[1].detail
    assert "mimic joint" in flt.filter(_variant("mimic"), state(), NOW)[1].detail
    assert "elbow_joint" in flt.filter(_variant("value:pos:nan"), state(), NOW)[1].detail
    assert "left_finger_joint" in flt.filter(_variant("missing"), state(), NOW)[1].detail


@pytest.mark.parametrize(
    "make_state, code",
    [
        (lambda: None, "no_joint_state"),
        (lambda: state(stamp_ns=NOW - 10**9), "stale_joint_state"),
        (lambda: state(stamp_ns=NOW + 10**9), "stale_joint_state"),
        (lambda: state(q=HOME[:6], names=COMMANDED_JOINTS[:6]), "joint_state_incomplete"),
        (lambda: state(q=np.r_[HOME[:6], np.nan]), "joint_state_incomplete"),
    ],
)
def test_no_usable_joint_state_nothing_passes(flt, make_state, code):
    out, report = flt.filter(chunk(small_move()), make_state(), NOW)
    assert out is None and report.reason == code


def test_joint_state_in_any_order_with_extra_joints(flt):
    names = ("right_finger_joint",) + tuple(reversed(COMMANDED_JOINTS))
    q = np.r_[HOME[-1], HOME[::-1]]
    ch = chunk(small_move())
    out, report = flt.filter(ch, JointStateSample(names, q, NOW), NOW)
    assert report.verdict == "pass" and out is ch


# ---- limits and time scaling ------------------------------------------------------------------------


def test_safe_chunk_passes_as_the_same_object(flt):
    ch = chunk(small_move())
    out, report = flt.filter(ch, state(), NOW)
    assert out is ch and report.verdict == "pass" and report.reason == "" and report.first_unsafe_index == -1


def test_chunk_columns_in_any_order(flt):
    order = [6, 2, 0, 5, 1, 4, 3]
    ch = chunk(small_move()[:, order], names=[COMMANDED_JOINTS[i] for i in order])
    out, report = flt.filter(ch, state(), NOW)
    assert out is ch and report.verdict == "pass"


@pytest.mark.parametrize("value", [1e300, -1e300, 1e308, 3.0])
def test_huge_or_out_of_range_positions_cut_at_the_first(flt, value):
    pts = small_move()
    pts[6, 0] = value
    out, report = flt.filter(chunk(pts), state(), NOW)
    assert report.verdict == "truncated" and report.reason == "position_limit" and report.first_unsafe_index == 6
    assert out.horizon == 6 and np.array_equal(out.positions, pts[:6])
    assert "shoulder_pan_joint" in report.detail


def test_position_margin_applies_to_revolute_joints_not_to_the_gripper(flt):
    pts = ramp(np.r_[HOME[:6], 0.04], n=4)  # gripper fully open: its URDF limit, no margin
    assert flt.filter(chunk(pts), state(), NOW)[1].verdict == "pass"
    pts = small_move()
    pts[4, 0] = 2.9 - 0.005  # inside the URDF range but within the 0.01 rad margin
    assert flt.filter(chunk(pts), state(), NOW)[1].reason == "position_limit"


def test_timing_worked_example():
    # The module docstring's example: q0 = 0, points 0.1 and 0.3 at 0.1 s and 0.2 s, limits 2 rad/s, 5 rad/s^2.
    r_v, r_a = limit_ratios(
        np.array([0.1, 0.2]), np.array([[0.1], [0.3]]), np.zeros(1), np.array([2.0]), np.array([5.0])
    )
    assert r_v == pytest.approx([0.5, 1.0]) and r_a == pytest.approx([2.0])
    assert prefix_scales(r_v, r_a) == pytest.approx([0.5, math.sqrt(2.0)])


def test_too_fast_chunk_is_stretched_in_time_and_keeps_its_path(flt):
    pts = np.repeat(HOME[None, :], 10, axis=0)
    pts[:, 2] = HOME[2] - 0.05 * np.arange(1, 11)  # 0.05 rad per 10 ms: 5 rad/s, twice the elbow's 2.5 rad/s
    fast = chunk(pts, dt=0.01)
    out, report = flt.filter(fast, state(), NOW)
    assert report.verdict == "modified" and report.time_scale == pytest.approx(2.0, rel=1e-6)
    assert np.array_equal(out.positions, fast.positions)  # the path is kept, no joint clamped
    assert out.time_from_start_s == pytest.approx(fast.time_from_start_s * report.time_scale, abs=2e-9)
    assert [f.code for f in report.findings] == ["time_scaled"]
    again, report2 = flt.filter(out, state(), NOW)
    assert again is out and report2.verdict == "pass"


def test_time_scaling_is_about_now_for_an_older_stamp(flt):
    pts = HOME + np.outer(np.arange(1, 11) * 0.05, np.r_[0, 0, -1.0, 0, 0, 0, 0])  # 0.05 rad a step
    age = 40_000_000  # computed from a state 40 ms old: point k lies 10 (k + 1) - 40 ms from now
    ch = chunk(pts, dt=0.01, stamp_ns=NOW - age)
    out, report = flt.filter(ch, state(pts[3]), NOW)  # the arm is at point 3 now; 0..3 lie in the past
    tau = out.time_from_start_s - age * 1e-9  # times from now
    assert report.verdict == "modified" and out.horizon == 6 and (tau > 0).all()
    assert report.time_scale == pytest.approx(2.0, rel=1e-6)  # 5 rad/s against 2.5, stretched about now
    assert tau == pytest.approx(2.0 * 0.01 * np.arange(1, 7), abs=2e-9)
    v = np.diff(np.vstack([pts[3], out.positions]), axis=0) / np.diff(np.r_[0.0, tau])[:, None]
    assert np.abs(v[:, 2]).max() <= 2.5 * (1 + 1e-6)


def test_acceleration_limit_stretches_by_its_square_root(flt):
    # Elbow: 0.2 rad/s then a reversal; with a 10 rad/s^2 limit the reversal's 40 rad/s^2 needs sqrt(4) = 2x.
    steps = np.r_[[0.002] * 5, [-0.002] * 5]  # 0.2 rad/s at dt = 0.01 s, then -0.2 rad/s
    pts = np.repeat(HOME[None, :], 10, axis=0)
    pts[:, 2] = HOME[2] + np.cumsum(steps)
    out, report = flt.filter(chunk(pts, dt=0.01), state(), NOW)
    assert report.verdict == "modified" and report.time_scale == pytest.approx(2.0, rel=1e-6)


def test_unreachable_first_point_rejects_and_a_later_jump_truncates(flt):
    jump = HOME + np.r_[0, 0, -1.0, 0, 0, 0, 0]
    pts = np.repeat(jump[None, :], 3, axis=0)
    out, report = flt.filter(chunk(pts, dt=0.05), state(), NOW)  # 1 rad in 50 ms: 8x the elbow's limit
    assert out is None and report.reason == "unreachable_first_point" and report.first_unsafe_index == 0
    pts = small_move()
    pts[5:] += np.r_[1.5, 0, 0, 0, 0, 0, 0]  # a 1.5 rad pan step between points 4 and 5: 7.5x
    out, report = flt.filter(chunk(pts, dt=0.1), state(), NOW)
    assert report.verdict == "truncated" and report.reason == "velocity_limit" and report.first_unsafe_index == 5
    assert out.horizon == 5


def test_past_points_are_dropped(flt):
    pts = small_move()
    ch = chunk(pts, stamp_ns=NOW - 250_000_000, dt=0.1)  # points 0 and 1 lie 150 and 50 ms in the past
    out, report = flt.filter(ch, state(pts[1]), NOW)
    assert report.verdict == "modified" and out.horizon == 8
    assert np.array_equal(out.positions, pts[2:]) and report.findings[0].code == "past_points"


def test_non_commanded_joints_are_held_at_their_measured_position(robot):
    arm = COMMANDED_JOINTS[:6]
    f = SafetyFilter(robot, SafetyConfig(joints=arm))
    ch = chunk(small_move()[:, :6], names=arm)
    out, report = f.filter(ch, state(), NOW)
    assert report.verdict == "pass"
    out, report = f.filter(chunk(small_move()), state(), NOW)
    assert report.reason == "unknown_joint" and "not a commanded joint" in report.detail


# ---- collisions, truncation, stopping ----------------------------------------------------------------

DIVE = np.array([0.0, 1.6, 1.4, 0.0, 0.8, 0.0, 0.04])  # shoulder and elbow down: the hand goes through the table
FOLD = np.array([0.42, -0.17, -2.54, 0.11, -1.49, -2.86, 0.03])  # forearm folded back: the hand hits the shoulder


def _min_margin(f, path):
    """Smallest (distance - clearance) over every checked configuration of a path (exhaustively)."""
    Qs = f.checker._samples(np.asarray(path))[0]
    return min(float(np.min(f.checker.distances(q) - f.checker.clearance)) for q in Qs)


@pytest.mark.parametrize("target, code", [(DIVE, "table_collision"), (FOLD, "self_collision")])
def test_collision_cuts_before_the_first_unsafe_point(flt, target, code):
    pts = ramp(target, n=30)
    assert _min_margin(flt, np.vstack([HOME, pts])) < 0  # unfiltered, it does collide
    out, report = flt.filter(chunk(pts, dt=0.2), state(), NOW)
    assert report.verdict == "truncated" and report.reason in (code, "stopping_distance")
    assert code in [f.code for f in report.findings]
    assert 0 < out.horizon == report.first_unsafe_index < 30
    assert _min_margin(flt, np.vstack([HOME, out.positions])) >= 0.0


def test_reject_mode_drops_the_whole_chunk(robot):
    f = SafetyFilter(robot, SafetyConfig(on_unsafe="reject"))
    out, report = f.filter(chunk(ramp(DIVE, n=30), dt=0.2), state(), NOW)
    assert out is None and report.verdict == "rejected" and report.first_unsafe_index > 0
    assert f.filter(chunk(small_move()), state(), NOW)[1].verdict == "pass"


def test_obstacles_and_workspace_bounds(robot):
    tcp_ahead = HOME + np.r_[0, 0.5, -0.4, 0, -0.1, 0, 0]  # reaches forward and down
    pts = ramp(tcp_ahead, n=20)
    free = SafetyFilter(robot, SafetyConfig())
    assert free.filter(chunk(pts, dt=0.2), state(), NOW)[1].verdict == "pass"
    boxed = SafetyFilter(robot, SafetyConfig(obstacles=("box name=crate center=0.6,0,0.1 size=0.3,0.6,0.2",)))
    out, report = boxed.filter(chunk(pts, dt=0.2), state(), NOW)
    assert "obstacle_collision" in [f.code for f in report.findings] and "crate" in report.detail + str(report.findings)
    walled = SafetyFilter(robot, SafetyConfig(workspace_min_m=(-0.6, -0.6, -0.1), workspace_max_m=(0.5, 0.6, 1.2)))
    out, report = walled.filter(chunk(pts, dt=0.2), state(), NOW)
    assert "workspace_bounds" in [f.code for f in report.findings] and "x_max" in str(report.findings)
    plane = SafetyFilter(robot, SafetyConfig(obstacles=("plane name=wall normal=-1,0,0 offset=-0.5",)))
    assert "obstacle_collision" in [f.code for f in plane.filter(chunk(pts, dt=0.2), state(), NOW)[1].findings]


def test_stop_after_the_last_point_must_be_clear(robot):
    """A chunk ending fast just above the table: the arm would coast into it while stopping."""
    with_stop = SafetyFilter(robot, SafetyConfig())
    without = SafetyFilter(robot, SafetyConfig(check_stopping=False))
    pts = ramp(DIVE, n=30)
    cut = without.filter(chunk(pts, dt=0.05), state(), NOW)[0]  # ends right before the table, moving
    out, report = with_stop.filter(cut, state(), NOW)
    assert report.reason == "stopping_distance" and out.horizon < cut.horizon
    again = with_stop.filter(out, state(), NOW)
    assert again[0] is out and again[1].verdict == "pass"


def test_config_file_matches_the_parameter_table_and_the_bench():
    from pathlib import Path

    import yaml

    from vla_ros.bench.safety_bench import SIM_CONFIG
    from vla_ros.params.safety_filter import PARAMS, config_from_params

    config = Path(__file__).resolve().parents[1] / "config"
    values = yaml.safe_load((config / "safety_filter.yaml").read_text())["/**/safety_filter"]["ros__parameters"]
    limits = yaml.safe_load((config / "limits.yaml").read_text())["/**"]["ros__parameters"]
    assert not set(values) & set(limits), "the joint limits are set in config/limits.yaml alone"
    values.update(limits)
    specs = {s.name: s for s in PARAMS}
    assert set(values) == set(specs), set(values) ^ set(specs)
    for name, value in values.items():
        assert specs[name].validate(value) is None, (name, value)
    assert config_from_params(values) == SIM_CONFIG  # the bench measures what the node runs
    assert config_from_params({s.name: s.default for s in PARAMS}) == SafetyConfig()  # table defaults = core defaults


def test_gripper_targets_just_past_the_stroke_are_clamped_further_ones_cut(flt):
    pts = small_move()
    pts[:, -1] = np.linspace(0.035, -0.006, len(pts))  # a learned "shut" command ends 6 mm past the stroke
    out, report = flt.filter(chunk(pts), state(), NOW)
    assert report.verdict == "modified" and out.horizon == len(pts)
    assert out.positions[:, -1].min() == 0.0 and np.array_equal(out.positions[:, :6], pts[:, :6])
    assert "position_clamped" in [f.code for f in report.findings]
    again, report2 = flt.filter(out, state(), NOW)  # filtering the output again changes nothing
    assert report2.verdict == "pass" and again is out
    pts[5:, -1] = -0.02  # 2 cm past: beyond the tolerance, the point is unsafe
    out, report = flt.filter(chunk(pts), state(), NOW)
    assert report.verdict == "truncated" and report.reason == "position_limit" and report.first_unsafe_index == 5
    elbow = small_move()
    elbow[3:, 2] = 3.5  # revolute joints are never clamped by default
    _, report = flt.filter(chunk(elbow), state(), NOW)
    assert report.reason == "position_limit" and report.first_unsafe_index == 3


def test_tracking_offset_within_tolerance_is_not_motion(flt):
    """A gripper closed on a cup measures its width while commanded shut, and a moving arm lags its
    command: neither makes a chunk 'unreachable' or slows it down; a real jump still does."""
    measured = HOME.copy()
    measured[-1] = 0.025  # fingers stopped by the cup
    measured[2] -= 0.04  # the elbow lags its command by 0.04 rad
    pts = np.repeat(HOME[None, :], 8, axis=0)
    pts[:, -1] = 0.0  # commanded shut
    pts[:, 0] += 0.01 * np.arange(1, 9)  # a slow pan: 0.2 rad/s
    out, report = flt.filter(chunk(pts, dt=0.05), state(measured), NOW)
    assert report.verdict == "pass", report
    far = measured.copy()
    far[2] -= 0.8  # 0.8 rad from the first point, 50 ms ahead: 15 rad/s past the tolerance, beyond max_time_scale
    _, report = flt.filter(chunk(pts, dt=0.05), state(far), NOW)
    assert report.verdict == "rejected" and report.reason == "unreachable_first_point"


def test_polynomial_smoothing_keeps_the_motion_and_removes_noise_the_filter_would_stretch(flt):
    """A chunk like the policy's: a smooth move well within the limits plus 5 mrad of noise per point."""
    from vla_ros.chunks import smooth_positions

    t = np.arange(1, 17) * 0.05  # 16 points at 20 Hz
    s = (t / t[-1]) ** 2 * (3 - 2 * t / t[-1])  # smoothstep: peak acceleration 6 * 0.15 / 0.8^2 = 1.4 rad/s^2
    motion = HOME + 0.15 * s[:, None] * np.array([1, -1, 1, 0, 1, 0, 0])
    motion[:, -1] = HOME[-1]
    noisy = motion + np.random.default_rng(0).normal(0.0, 0.005, motion.shape) * np.array([1, 1, 1, 1, 1, 1, 0])
    smoothed = smooth_positions(t, noisy, 3)
    rms = lambda x: float(np.sqrt(np.mean(np.square(x))))  # noqa: E731
    assert (
        rms(smoothed - motion) < 0.6 * rms(noisy - motion) and np.abs(smoothed - motion).max() < 0.01
    )  # the motion survives ...
    assert np.abs(smooth_positions(t, motion, 3) - motion).max() < 0.003  # ... and a smooth one barely changes
    assert np.array_equal(smooth_positions(t, noisy, 0), noisy)  # 0 = off
    raw_out, raw_report = flt.filter(chunk(noisy, times=t), state(), NOW)
    out, report = flt.filter(chunk(smoothed, times=t), state(), NOW)
    assert raw_report.verdict == "modified"  # the noise reads as acceleration past the limits: stretched
    assert report.verdict == "pass", report

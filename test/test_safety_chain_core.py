"""The safety chain's ROS-free parts: one URDF limits reader, the trusted-source gate, the runtime
tightening rules, the chunk size read from serialized bytes, the input watchdogs, per-reason log throttles.
Node-level behaviour is in test_controller_node.py, test_safety_node.py and test_sros2_policy.py."""

import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vla_ros.bench.safety_bench import FR3_DIR
from vla_ros.chunks import COMMANDED_JOINTS
from vla_ros.control import ControllerConfig, bundled_urdf_path, limits_from_urdf
from vla_ros.control.sources import UNNAMED_GRACE_S, Endpoint, SourceGate, fully_qualified, resolve_trusted
from vla_ros.params import controller as controller_params
from vla_ros.params import safety_filter as filter_params
from vla_ros.params.spec import default_values
from vla_ros.params.tightening import ParamChange, changes_between, loosenings
from vla_ros.ros.rejections import ReasonLog
from vla_ros.ros.trajectory_wire import WireError, trajectory_size
from vla_ros.ros.watchdog import InputWatch, Watchdog
from vla_ros.safety import load_robot, load_robot_files
from vla_ros.urdf_limits import limits_for, read_joint_limits

pytestmark = pytest.mark.unit  # no ROS node, no DDS, no wall-clock timing: `make test` runs it beside others

NS = 1_000_000_000


# ---- one reader for URDF limits --------------------------------------------------------------------------
def test_the_controller_and_the_filter_read_the_same_limits_from_one_reader(tmp_path):
    """Both take their position and velocity limits from vla_ros.urdf_limits: change a limit in the URDF
    and both see the same new value (the filter no longer uses Pinocchio's copy)."""
    text = bundled_urdf_path().read_text()
    changed = re.sub(
        r'(<joint name="elbow_joint".*?<limit )lower="[^"]*" upper="[^"]*" velocity="[^"]*"',
        r'\1lower="-1.234" upper="2.345" velocity="0.777"',
        text,
        count=1,
        flags=re.S,
    )
    assert changed != text
    for urdf_text in (text, changed):
        path = tmp_path / "arm.urdf"
        path.write_text(urdf_text)
        controller = ControllerConfig.from_urdf(path, COMMANDED_JOINTS)
        robot = load_robot(urdf_text)
        index = [robot.joint_names.index(j) for j in COMMANDED_JOINTS]
        np.testing.assert_array_equal(controller.position_lower, robot.lower[index])
        np.testing.assert_array_equal(controller.position_upper, robot.upper[index])
        np.testing.assert_array_equal(controller.velocity_limits, robot.velocity[index])
    assert ControllerConfig.from_urdf(path, COMMANDED_JOINTS).velocity_limits[2] == 0.777
    assert read_joint_limits(changed)["elbow_joint"].lower == -1.234


@pytest.mark.skipif(not (FR3_DIR / "fr3.urdf").is_file(), reason=f"{FR3_DIR} not present")
def test_the_fr3_limits_agree_between_controller_and_filter():
    robot = load_robot_files(FR3_DIR / "fr3.urdf", FR3_DIR / "fr3.srdf", [str(FR3_DIR.parent)])
    lim = limits_from_urdf(FR3_DIR / "fr3.urdf", robot.joint_names)
    np.testing.assert_array_equal(lim.lower, robot.lower)
    np.testing.assert_array_equal(lim.upper, robot.upper)
    np.testing.assert_array_equal(lim.velocity, robot.velocity)


def test_limits_reader_names_what_is_missing():
    with pytest.raises(ValueError, match="'bogus' is not in"):
        limits_for(bundled_urdf_path(), ["bogus"])
    urdf = '<robot name="r"><joint name="j" type="revolute"><limit lower="-1" upper="1"/></joint></robot>'
    with pytest.raises(ValueError, match="no <limit velocity"):
        limits_for(urdf, ["j"])
    continuous = '<robot name="r"><joint name="c" type="continuous"><limit velocity="2"/></joint></robot>'
    lim = limits_for(continuous, ["c"])
    assert lim.lower[0] == -math.inf and lim.upper[0] == math.inf and lim.velocity[0] == 2.0


# ---- who may feed the controller ----------------------------------------------------------------------
FILTER = Endpoint("/safety_filter", "01.aa")
STRANGER = Endpoint("/teleop_script", "01.bb")


def test_only_chunks_that_can_have_come_from_a_trusted_node_are_admitted():
    gate = SourceGate(resolve_trusted(["safety_filter"], "/"))
    assert gate.trusted == ("/safety_filter",)
    assert gate.admit([FILTER], 0) is None
    why = gate.admit([FILTER, STRANGER], 1 * NS)  # cannot tell who sent it: refused, and the stranger named
    assert why is not None and "/teleop_script publishes on the topic" in why
    # The stranger left, but a message of its may still be in the queue: refused for the quarantine.
    why = gate.admit([FILTER], int(1.5 * NS))
    assert why is not None and "/teleop_script published on the topic less than 1 s ago" in why
    assert gate.admit([FILTER], int(2.1 * NS)) is None
    assert "is gone" in gate.admit([], 3 * NS)  # no publisher left: the message came from a departed one
    unnamed = Endpoint(fully_qualified("_NODE_NAMESPACE_UNKNOWN_", "_NODE_NAME_UNKNOWN_"), "01.cc")
    assert "unnamed node (publisher gid 01.cc)" in gate.admit([FILTER, unnamed], 10 * NS)
    # An endpoint seen before its node's name arrived, which then turns out to be the filter, was never a stranger.
    gate2 = SourceGate(("/safety_filter",))
    assert gate2.admit([Endpoint("", FILTER.gid)], 0) is not None
    assert gate2.admit([FILTER], 1) is None
    # A node named like the filter in another namespace is someone else.
    assert gate.admit([Endpoint("/other/safety_filter", "01.dd")], 20 * NS) is not None


def test_a_publisher_not_named_yet_is_refused_at_once_but_reported_only_after_the_grace():
    """Issue 46: the filter's own publisher has no node name for a while after it appears (ROS names arrive
    after DDS discovery; seconds on a busy machine while the filter loads its URDF). Its messages are refused
    meanwhile, but it is not reported as a stranger unless it stays unnamed for the grace; a named stranger is
    reported at once."""
    gate = SourceGate(("/safety_filter",), unnamed_grace_s=UNNAMED_GRACE_S)
    assert UNNAMED_GRACE_S >= 20  # past the 10-20 s seen while a large URDF loaded
    unnamed = Endpoint("", FILTER.gid)
    assert gate.to_report(gate.observe([unnamed], 0)) == []
    late = int((UNNAMED_GRACE_S - 0.1) * NS)
    assert "unnamed node (publisher gid 01.aa)" in gate.admit([unnamed], late)  # refused all the same
    assert gate.to_report(gate.observe([unnamed], late)) == []
    assert gate.recent_untrusted(late, reported_only=True) == [] and gate.recent_untrusted(late) == [unnamed.label]
    assert gate.admit([FILTER], late + 1) is None  # its name arrived: the filter's, never a stranger
    assert gate.recent_untrusted(late + 1) == []
    # A named stranger is reported at once, beside an unnamed publisher that is not yet.
    other = Endpoint("", "01.cc")
    assert gate.to_report(gate.observe([FILTER, other, STRANGER], late + 2)) == [STRANGER]
    # Unnamed for the whole grace (a DDS writer outside ROS): reported, by its gid.
    after = late + 2 + int(UNNAMED_GRACE_S * NS)
    assert gate.to_report(gate.observe([FILTER, other], after)) == [other]
    assert gate.recent_untrusted(after, reported_only=True) == [other.label]
    # Gone before the grace was over: never reported, though refused for the quarantine like any stranger.
    brief = Endpoint("", "01.dd")
    gate.observe([FILTER, brief], after + NS)
    assert gate.admit([FILTER], after + 2 * NS) is not None
    assert brief.label not in gate.recent_untrusted(after + 2 * NS, reported_only=True)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(1, 20 * NS),  # time since the previous snapshot
            st.lists(st.sampled_from(["", "/safety_filter", "/teleop_script"]), min_size=3, max_size=3),
            st.lists(st.booleans(), min_size=3, max_size=3),  # which of the three endpoints are on the topic
        ),
        min_size=1,
        max_size=12,
    )
)
def test_reports_name_every_named_stranger_at_once_and_an_unnamed_publisher_only_after_the_grace(snapshots):
    gate = SourceGate(("/safety_filter",), unnamed_grace_s=30)
    now, first_unnamed = 0, {}
    for dt, names, present in snapshots:
        now += dt
        endpoints = [Endpoint(n, f"01.{i:02x}") for i, (n, p) in enumerate(zip(names, present)) if p]
        reported = gate.to_report(gate.observe(endpoints, now))
        for e in endpoints:
            if e.node:
                first_unnamed.pop(e.gid, None)
            else:
                first_unnamed.setdefault(e.gid, now)
        assert {e.gid for e in reported if e.node} == {e.gid for e in endpoints if e.node == "/teleop_script"}
        assert {e.gid for e in reported if not e.node} == {
            e.gid for e in endpoints if not e.node and now - first_unnamed[e.gid] >= 30 * NS
        }
        if any(e.node != "/safety_filter" for e in endpoints):  # whatever is reported, nothing unknown is admitted
            assert gate.admit(endpoints, now) is not None


def test_trusted_names_resolve_in_the_controllers_namespace():
    assert resolve_trusted(["safety_filter", "/tools/replay", ""], "/robot1") == (
        "/robot1/safety_filter",
        "/tools/replay",
    )
    assert fully_qualified("/", "safety_filter") == "/safety_filter"
    assert fully_qualified("/robot1", "safety_filter") == "/robot1/safety_filter"
    with pytest.raises(ValueError, match="trusted_publishers is empty"):
        SourceGate(())


# ---- runtime changes may only tighten -------------------------------------------------------------------
def _filter_values(**changes):
    values = default_values(filter_params.PARAMS)
    values.update(changes)
    return values


@pytest.mark.parametrize(
    "name, loose, tight",
    [
        ("table_enabled", False, None),
        ("workspace_enabled", False, None),
        ("check_stopping", False, None),
        ("clearance_m", 0.0, 0.02),
        ("self_clearance_m", 0.0, 0.01),
        ("position_margin_rad", 0.0, 0.05),
        ("velocity_scale", 1.0, 0.5),  # from a stricter 0.8 (see base below)
        ("acceleration_scale", 1.0, 0.5),
        ("default_acceleration_rad_s2", 1000.0, 5.0),
        ("max_time_scale", 50.0, 2.0),
        ("max_chunk_age_s", 2.0, 0.2),
        ("max_state_age_s", 1.0, 0.1),
        ("max_horizon_s", 300.0, 10.0),
        ("max_chunk_points", 5000, 500),
        ("tracking_tolerance_rad", 0.3, 0.01),
        ("table_height_m", -0.5, 0.01),
        ("chunk_timeout_s", 5.0, 0.3),
    ],
)
def test_every_loosening_of_the_filter_is_named_and_tightening_is_not(name, loose, tight):
    base = _filter_values(workspace_enabled=True, velocity_scale=0.8, acceleration_scale=0.8)
    rules = filter_params.tightening_rules()
    reasons = loosenings(rules, base, {**base, name: loose})
    assert list(reasons) == [name] and reasons[name].startswith(name)
    if tight is not None:
        assert loosenings(rules, base, {**base, name: tight}) == {}


def test_boxes_obstacles_and_limit_overrides_may_only_tighten():
    robot = load_robot_files(bundled_urdf_path())
    rules = filter_params.tightening_rules(robot)
    base = _filter_values(
        workspace_enabled=True,
        obstacles=["box name=shelf center=0.5,0.3,0.2 size=0.2,0.3,0.4"],
        limit_overrides=["elbow_joint: upper=2.0 velocity=1.5"],
    )
    assert "workspace_max_m" in loosenings(rules, base, {**base, "workspace_max_m": [0.9, 1.5, 1.3]})
    assert loosenings(rules, base, {**base, "workspace_min_m": [-0.5, -0.9, -0.1]}) == {}
    # Removing, moving or shrinking an obstacle loosens; adding one (or renaming) does not.
    assert "obstacles" in loosenings(rules, base, {**base, "obstacles": [""]})
    assert "obstacles" in loosenings(
        rules, base, {**base, "obstacles": ["box name=shelf center=0.6,0.3,0.2 size=0.2,0.3,0.4"]}
    )
    grown = base["obstacles"] + ["sphere center=0.4,-0.3,0.3 radius=0.05"]
    assert loosenings(rules, base, {**base, "obstacles": grown}) == {}
    assert loosenings(rules, base, {**base, "obstacles": ["box name=other center=0.5,0.3,0.2 size=0.2,0.3,0.4"]}) == {}
    # Overrides: dropping one, or raising it towards the URDF, loosens; a tighter value does not.
    why = loosenings(rules, base, {**base, "limit_overrides": [""]})["limit_overrides"]
    assert "elbow_joint upper 2 -> 2.6" in why and "elbow_joint velocity 1.5 -> 2.5" in why
    assert loosenings(rules, base, {**base, "limit_overrides": ["elbow_joint: upper=1.9 velocity=1.0"]}) == {}
    fast = {**base, "limit_overrides": base["limit_overrides"] + ["wrist_roll_joint: acceleration=40"]}
    assert "wrist_roll_joint acceleration 10 -> 40" in loosenings(rules, base, fast)["limit_overrides"]
    # Without a robot model yet the comparison is conservative: dropping an override still loosens.
    assert "limit_overrides" in loosenings(
        filter_params.tightening_rules(None), base, {**base, "limit_overrides": [""]}
    )


def test_the_controller_refuses_looser_limits_and_timeouts():
    rules = controller_params.TIGHTENING_RULES
    base = default_values(controller_params.PARAMS)
    for name, loose in (
        ("default_acceleration_rad_s2", 200.0),
        ("default_acceleration_m_s2", 5.0),
        ("chunk_timeout_s", 5.0),
        ("joint_state_timeout_s", 2.0),
        ("max_chunk_age_s", 10.0),
        ("path_tolerance_rad", 0.0),
        ("path_tolerance_rad", 1.0),
        ("use_chunk_velocities", True),
    ):
        assert list(loosenings(rules, base, {**base, name: loose})) == [name], name
    assert loosenings(rules, {**base, "velocity_scale": 0.5}, {**base, "velocity_scale": 0.9}) != {}
    for name, tight in (
        ("default_acceleration_rad_s2", 5.0),
        ("velocity_scale", 0.5),
        ("path_tolerance_rad", 0.1),
        ("blend_mode", "freeze"),
    ):
        assert loosenings(rules, base, {**base, name: tight}) == {}, name
    off = {**base, "path_tolerance_m": 0.0}
    assert loosenings(rules, off, {**off, "path_tolerance_m": 0.02}) == {}  # switching a check on tightens


def test_changes_are_recorded_old_to_new():
    changes = changes_between({"a": 1.0, "b": [1, 2]}, {"a": 2.0, "b": [1, 2]}, {"a"})
    assert changes == [ParamChange("a", 1.0, 2.0, True)] and str(changes[0]) == "a: 1 -> 2 (loosened)"


# ---- chunk size from the serialized bytes --------------------------------------------------------------
names_st = st.lists(st.text(min_size=0, max_size=12), min_size=0, max_size=9)


@settings(max_examples=60, deadline=None)
@given(
    frame=st.text(max_size=20), names=names_st, n_points=st.integers(0, 40), width=st.integers(0, 9), vel=st.booleans()
)
def test_the_size_read_from_the_bytes_equals_the_deserialized_message(frame, names, n_points, width, vel):
    from rclpy.serialization import serialize_message
    from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

    msg = JointTrajectory(joint_names=names)
    msg.header.frame_id = frame
    msg.header.stamp.sec = 123
    for k in range(n_points):
        msg.points.append(JointTrajectoryPoint(positions=[0.1 * k] * width, velocities=[0.0] * (width if vel else 0)))
    assert trajectory_size(serialize_message(msg)) == (len(names), n_points)


def test_a_huge_chunk_is_sized_without_deserializing_it_and_garbage_is_refused():
    from rclpy.serialization import serialize_message
    from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

    msg = JointTrajectory(joint_names=list(COMMANDED_JOINTS))
    msg.points = [JointTrajectoryPoint(positions=[0.0] * 7)] * 100_000
    data = serialize_message(msg)
    assert trajectory_size(data) == (7, 100_000)
    for bad in (b"", b"\x00\x07\x00\x00" + data[4:], data[:30], data[:4] + b"\xff" * 40):
        with pytest.raises(WireError):
            trajectory_size(bad)


# ---- watchdogs on a clock that moves -------------------------------------------------------------------
def test_an_input_stops_on_the_steady_clock_even_when_simulated_time_stands_still():
    watch = InputWatch("joint states", 0.5, b"\x02", "simulator dead?")
    dog = Watchdog({"js": watch})
    assert dog.check(0, 0) == ([], False) and watch.describe(0) == "no joint states yet"
    watch.seen(1 * NS, 10 * NS)
    assert dog.check(int(1.4 * NS), 10 * NS) == ([], False)
    stopped, changed = dog.check(int(1.6 * NS), 10 * NS)  # simulated time frozen at 10 s: wall time tells
    assert changed and [k for k, _ in stopped] == ["js"] and dog.stops == 1
    assert watch.describe(int(1.6 * NS), 10 * NS) == "no joint states for 0.6 s: simulator dead?"
    assert dog.check(int(1.7 * NS), 10 * NS)[1] is False  # reported once per stop
    watch.seen(2 * NS, int(10.01 * NS))
    assert dog.check(2 * NS, int(10.01 * NS)) == ([], True)
    # A simulator faster than real time: the ROS-time silence runs out first.
    watch.seen(3 * NS, 20 * NS)
    assert watch.stopped(int(3.1 * NS), 21 * NS)
    # Time restarting (a reset) restarts the ROS-time age instead of making it negative.
    assert not watch.stopped(int(3.1 * NS), 1 * NS)


def test_the_clock_counts_as_arriving_while_ros_time_moves_and_each_stop_is_reported_once():
    dog = Watchdog(
        {"clock": InputWatch("/clock", 0.5, b"\x02", "simulator dead?"), "chunks": InputWatch("chunks", 2.0, b"\x01")}
    )
    reports = []
    report = lambda line, key: reports.append(key)  # noqa: E731
    assert not dog.poll(0, 0, report) and dog["clock"].count == 0  # time 0: no /clock yet
    dog["chunks"].seen(0, None)
    assert not dog.poll(int(0.1 * NS), 5 * NS, report) and dog["clock"].count == 1  # time moves: /clock arrives
    assert not dog.poll(int(0.5 * NS), int(5.1 * NS), report) and dog["clock"].count == 2 and not reports
    assert dog.poll(int(1.2 * NS), int(5.1 * NS), report) and reports == ["input.clock"]  # frozen for 0.7 s wall
    assert not dog.poll(int(1.3 * NS), int(5.1 * NS), report) and reports == ["input.clock"]  # reported once
    assert dog.poll(int(2.5 * NS), int(5.1 * NS), report) and reports[1:] == [
        "input.clock",
        "input.chunks",
    ]  # the new set
    dog.set_timeouts({"clock_timeout_s": 5.0, "chunk_timeout_s": 0.1, "joint_state_timeout_s": 9.0})
    assert dog["clock"].timeout_s == 5.0 and dog["chunks"].timeout_s == 0.1


def test_each_rejection_reason_has_its_own_log_throttle():
    lines, now = [], [0.0]
    log = ReasonLog(lines.append, period_s=2.0, clock=lambda: now[0])
    for _ in range(50):
        log.reject("chunk", "unauthorized_source", "from /stranger")
    log.reject("joint state", "joint_state_non_finite", "NaN")  # a rare reason behind a frequent one: still logged
    assert lines == [
        "rejected chunk: unauthorized_source: from /stranger",
        "rejected joint state: joint_state_non_finite: NaN",
    ]
    now[0] = 2.5
    log.reject("chunk", "unauthorized_source", "from /stranger")
    assert lines[-1].endswith("(and 49 more like it since the last report)")
    assert log.counter == {"unauthorized_source": 51, "joint_state_non_finite": 1}


# ---- one source of joint limits --------------------------------------------------------------------------
def test_the_filter_the_controller_and_the_policys_shaping_read_the_same_limits_file(tmp_path):
    """config/limits.yaml (scales, default accelerations, per-joint overrides) is read by the filter, the
    controller and the policy's chunk shaping alike: an override there tightens all three the same way."""
    from pathlib import Path

    import yaml

    from vla_ros.params import policy as policy_params
    from vla_ros.params.spec import values_from_yaml
    from vla_ros.safety.limits import resolve_limits

    repo = Path(__file__).resolve().parents[1]
    limits = yaml.safe_load((repo / "config" / "limits.yaml").read_text())
    limits["/**"]["ros__parameters"].update(
        velocity_scale=0.5, limit_overrides=["elbow_joint: upper=2.0 velocity=1.5 acceleration=6.0"]
    )
    path = tmp_path / "limits.yaml"
    path.write_text(yaml.safe_dump(limits))
    filter_p = values_from_yaml(filter_params.PARAMS, [path, repo / "config" / "safety_filter.yaml"], "safety_filter")
    control_p = values_from_yaml(controller_params.PARAMS, [path, repo / "config" / "controller.yaml"], "controller")
    table = resolve_limits(load_robot_files(bundled_urdf_path()), filter_params.config_from_params(filter_p))
    ctrl = controller_params.config_from_params(control_p)
    elbow = list(COMMANDED_JOINTS).index("elbow_joint")
    i = list(table.names).index("elbow_joint")
    assert ctrl.velocity_limits[elbow] == table.velocity[i] == 0.75  # min(URDF, override) x scale
    assert ctrl.acceleration_limits[elbow] == table.acceleration[i] == 6.0
    assert ctrl.position_upper[elbow] == 2.0 and table.hard_upper[i] > 2.0  # the override, not the URDF
    assert ctrl.urdf_velocity_limits[elbow] == 2.5  # joint-state jumps are still judged by the robot's own
    policy_p = {**default_values(policy_params.PARAMS), "limits_file": str(path)}
    policy_p["safety_params_file"] = str(repo / "config" / "safety_filter.yaml")
    shaped = policy_params.shaping_limits_from_params(policy_p, bundled_urdf_path(), list(COMMANDED_JOINTS))
    assert shaped.velocity[elbow] == 0.75 and shaped.acceleration[elbow] == 6.0
    # An override that would loosen the URDF stops the controller as it stops the filter.
    with pytest.raises(ValueError, match="would loosen the URDF velocity limit"):
        controller_params.config_from_params({**control_p, "limit_overrides": ["elbow_joint: velocity=9.0"]})

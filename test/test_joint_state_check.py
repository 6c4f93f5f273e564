"""The joint-state check every node makes (vla_ros.joint_state_check): the refusals with their codes, and
the jump rule against hand-built and drawn sequences (a driver, a second publisher replaying an old pose,
an arm moved for real)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vla_ros.joint_state_check import (
    JUMP_SLACK,
    JUMP_TOL,
    REASONS,
    RESYNC_S,
    JointStateCheck,
    JointStateRefused,
    StateSources,
)

pytestmark = pytest.mark.unit  # no ROS node, no DDS, no wall-clock timing: `make test` runs it beside others

JOINTS = ("a", "b", "c")
VMAX = np.array([1.0, 2.0, 0.1])
MS = 1_000_000


def refused(check, names, q, stamp=5 * MS) -> str:
    with pytest.raises(JointStateRefused) as err:
        check.check(names, q, stamp)
    assert err.value.code in REASONS
    return err.value.code


def test_each_malformed_message_is_refused_with_its_code_and_a_good_one_is_reordered():
    check = JointStateCheck(JOINTS)
    assert refused(check, JOINTS, [0, 0, 0], stamp=0) == "joint_state_unstamped"
    assert refused(check, JOINTS, [0, 0]) == "joint_state_size"
    assert refused(check, ("a", "b", "c", "b"), [0, 0, 0, 0.8]) == "joint_state_duplicate_name"
    assert (
        refused(check, ("a", "x", "c", "x"), [0, 0, 0, 0]) == "joint_state_duplicate_name"
    )  # even of a joint not needed
    assert refused(check, ("a", "c"), [0, 0]) == "joint_state_missing_joint"
    assert refused(check, JOINTS, [0, np.nan, 0]) == "joint_state_non_finite"
    assert refused(check, JOINTS, [0, 0, -np.inf]) == "joint_state_non_finite"
    # extra joints are ignored, the order is the check's
    np.testing.assert_array_equal(
        check.check(("gripper", "c", "a", "b"), [9.0, 3.0, 1.0, 2.0], 5 * MS), [1.0, 2.0, 3.0]
    )
    # a refused name list stays refused (the cache keeps the verdict), a good one stays good
    assert refused(check, ("a", "b", "c", "b"), [0, 0, 0, 0.8]) == "joint_state_duplicate_name"
    assert refused(check, ("x", "y"), [0, 0]) == "joint_state_missing_joint"  # none of the node's joints
    np.testing.assert_array_equal(
        check.check(("gripper", "c", "a", "b"), [9.0, 6.0, 4.0, 5.0], 6 * MS), [4.0, 5.0, 6.0]
    )
    assert check.stamp_ns == 6 * MS


def test_disjoint_joint_sets_from_two_drivers_merge_by_name_and_the_state_is_as_old_as_its_oldest_part():
    """An arm driver names a and b, a gripper driver c: the state is refused (missing c) until c was named
    once, then every message updates its own joints; each part keeps its stamp."""
    check = JointStateCheck(JOINTS, VMAX)
    assert refused(check, ("b", "a"), [0.2, 0.1], 10 * MS) == "joint_state_missing_joint"
    np.testing.assert_array_equal(check.check(("c",), [0.03], 12 * MS), [0.1, 0.2, 0.03])
    assert check.stamp_ns == 10 * MS
    np.testing.assert_array_equal(check.check(("a", "b"), [0.11, 0.21], 20 * MS), [0.11, 0.21, 0.03])
    assert check.stamp_ns == 12 * MS  # c's part is the oldest now
    # the jump rule holds per part: a gripper value far off is refused, the arm's parts go on
    assert refused(check, ("c",), [0.5], 22 * MS) == "joint_state_jump"
    np.testing.assert_array_equal(check.check(("a", "b"), [0.12, 0.22], 30 * MS), [0.12, 0.22, 0.03])
    # a message naming none of the joints is another driver's (a camera mount) once the state is complete
    assert check.concerns(("pan",)) is False and check.concerns(("pan", "c")) is True
    assert check.concerns(("pan", "pan")) is True  # a repeated name is still refused, whoever sent it
    assert JointStateCheck(JOINTS).concerns(("pan",)) is True  # before: a driver naming none is refused
    # velocities merge the same way, where a node asks for them
    check.check(("a", "b"), [0.12, 0.22], 31 * MS, velocities=[1.0, 2.0])
    check.check(("c",), [0.03], 32 * MS, velocities=[0.5])
    np.testing.assert_array_equal(check.velocities, [1.0, 2.0, 0.5])
    with pytest.raises(JointStateRefused) as err:
        check.check(("a", "b"), [0.12, 0.22], 34 * MS, velocities=[1.0])
    assert err.value.code == "joint_state_size"


def test_a_state_source_that_names_a_joint_another_named_within_the_window_is_a_conflict():
    sources = StateSources(JOINTS, window_s=0.5)
    s = 1_000_000_000
    assert sources.observe("arm", ("a", "b", "x"), 1 * s) == ("arm",)
    assert sources.observe("gripper", ("c",), 1 * s) == ("gripper",)  # disjoint: a merge, not a conflict
    assert sources.conflicts(1 * s) == []
    assert sources.observe("replay", ("b",), 1 * s + 100 * MS) == ("replay", "arm")
    assert sources.conflicts(1 * s + 200 * MS) == [("arm", "replay")]
    sources.observe("arm", ("a", "b"), 1 * s + 550 * MS)
    assert sources.conflicts(1 * s + 601 * MS) == []  # the replay has been silent for the window: over
    assert sources.observe("arm", ("a", "b"), 1 * s + 700 * MS) == ("arm",)


def test_a_jump_beyond_the_limits_is_refused_and_a_move_within_them_taken():
    check = JointStateCheck(JOINTS, VMAX)
    check.check(JOINTS, [0.0, 0.0, 0.0], 100 * MS)
    # 10 ms later: b may move 2 rad/s x 0.01 s x 1.5 + 0.01 = 0.04
    assert JUMP_SLACK == 1.5 and JUMP_TOL == 0.01
    check.check(JOINTS, [0.0, 0.039, 0.0], 110 * MS)
    assert refused(check, JOINTS, [0.0, 0.039 + 0.042, 0.0], 120 * MS) == "joint_state_jump"
    # a refused state leaves the last accepted one in place: the next is measured against it (20 ms: 0.07)
    check.check(JOINTS, [0.0, 0.039 + 0.069, 0.0], 130 * MS)
    # the same stamp again (a repeated sample): only the tolerance
    assert refused(check, JOINTS, [0.0, 0.039 + 0.069 + 0.015, 0.0], 130 * MS) == "joint_state_jump"
    # an older stamp: no time, only the tolerance
    assert refused(check, JOINTS, [0.02, 0.039 + 0.069, 0.0], 10 * MS) == "joint_state_jump"
    check.forget()  # an announced reset: anything goes once
    check.check(JOINTS, [1.0, -1.0, 0.04], 10 * MS)


def test_a_second_publisher_replaying_an_old_pose_is_refused_however_long_it_lasts():
    """A driver at 100 Hz moving b at its limit; a second publisher sends a pose 0.35 rad away with fresh
    stamps, one message for every two of the driver's: none of its messages is taken, all of the driver's."""
    check = JointStateCheck(JOINTS, VMAX)
    stale = np.array([0.0, -0.35, 0.0])
    taken = stale_taken = 0
    for k in range(300):
        t = 1_000 * MS + k * 10 * MS
        driver = np.array([0.0, 2.0 * k * 0.01, 0.0])
        check.check(JOINTS, driver, t)
        taken += 1
        if k % 2:
            try:
                check.check(JOINTS, stale, t + 3 * MS)
                stale_taken += 1
            except JointStateRefused as err:
                assert err.code == "joint_state_jump"
    assert taken == 300 and stale_taken == 0 and check.resyncs == 0


def test_an_arm_really_moved_is_taken_once_states_that_agree_span_the_resync_time():
    check = JointStateCheck(JOINTS, VMAX)
    check.check(JOINTS, [0.0, 0.0, 0.0], 100 * MS)
    moved = np.array([0.5, 0.0, 0.02])  # a reset nobody announced
    steps = round(RESYNC_S * 1e3 / 10)  # states 10 ms apart
    for k in range(steps):
        assert refused(check, JOINTS, moved, (110 + 10 * k) * MS) == "joint_state_jump"
    np.testing.assert_array_equal(check.check(JOINTS, moved, (110 + 10 * steps) * MS), moved)
    assert check.resyncs == 1
    check.check(JOINTS, moved + [0.005, 0, 0], (120 + 10 * steps) * MS)  # and then as any driver


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(
        st.tuples(
            st.integers(0, 30),
            st.lists(st.floats(-3.0, 3.0), min_size=3, max_size=3),
            st.sampled_from(["driver", "driver", "driver", "impostor", "nan"]),
        ),
        min_size=1,
        max_size=80,
    ),
)
def test_every_accepted_state_is_within_the_limits_of_the_one_before_or_follows_agreeing_ones(steps):
    """Oracle from the sequence alone: a state is accepted only if it moves within JUMP_SLACK x limit x dt
    + JUMP_TOL of the last accepted one, or it ends a run of refused states in a row, each within that
    bound of the one before, spanning RESYNC_S of stamps; the first is always accepted; NaN never is."""
    check = JointStateCheck(JOINTS, VMAX)
    t = 1_000 * MS
    arm = np.zeros(3)
    last = None  # (stamp, q) accepted
    run: list[tuple[int, np.ndarray]] = []  # refused in a row that agree
    for dt_ms, offset, kind in steps:
        t += dt_ms * MS
        if kind == "driver":
            arm = arm + np.clip(np.array(offset) * 0.01, -VMAX * dt_ms * 1e-3, VMAX * dt_ms * 1e-3)
            q = arm
        elif kind == "impostor":
            q = np.array(offset)
        else:
            q = np.array([np.nan, 0.0, 0.0])

        def within(before):
            return np.all(np.abs(q - before[1]) <= VMAX * max(t - before[0], 0) * 1e-9 * JUMP_SLACK + JUMP_TOL)

        try:
            out = check.check(JOINTS, q, t)
        except JointStateRefused as err:
            if kind == "nan":
                assert err.code == "joint_state_non_finite"
                continue
            assert err.code == "joint_state_jump" and last is not None and not within(last)
            run = run + [(t, q)] if run and within(run[-1]) else [(t, q)]
            assert t - run[0][0] < RESYNC_S * 1e9
            continue
        assert kind != "nan"
        np.testing.assert_array_equal(out, q)
        if last is not None and not within(last):
            run = run + [(t, q)] if run and within(run[-1]) else [(t, q)]
            assert t - run[0][0] >= RESYNC_S * 1e9, (run, q, last)
        last, run = (t, q.copy()), []

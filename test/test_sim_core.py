"""The ROS-free simulation core: determinism, timing, commands, rendering, the scripted pick."""

import math

import numpy as np
import pytest
from image_checks import assert_cups_visible

from vla_ros.sim import CUP_COLORS, HOME_Q, ArmSim, CommandError, PositionTrajectory, SimConfig
from vla_ros.sim.scene import CUP_RADIUS_M, SceneConfig
from vla_ros.sim.scripted import pick_plan, top_down_ik

pytestmark = pytest.mark.unit  # no ROS node, no DDS, no wall-clock timing: `make test` runs it beside others


@pytest.fixture(scope="module")
def sim():
    s = ArmSim(SimConfig(), seed=0)
    yield s
    s.close()


def run(sim: ArmSim, seconds: float) -> None:
    for _ in range(int(round(seconds * sim.config.physics_rate_hz))):
        sim.step()


def start_scripted_pick(sim: ArmSim, target_m) -> float:
    """Command the scripted pick aimed at target_m; returns the simulated time its lift ends."""
    times, points = pick_plan(target_m, sim.command_joint_positions())
    sim.command_trajectory(PositionTrajectory.from_points(sim.command_joint_names, times, points, sim.limits))
    return float(times[-1])


def test_same_seed_same_cups_different_seed_different(sim):
    a = sim.reset(7)
    b = sim.reset(7)
    c = sim.reset(8)
    for color in CUP_COLORS:
        np.testing.assert_array_equal(a[color], b[color])
    assert max(np.linalg.norm(a[k] - c[k]) for k in CUP_COLORS) > 0.01


def test_cups_are_spread_and_inside_the_region(sim):
    x0, x1, y0, y1 = sim.config.cup_region_m
    for seed in range(30):
        cups = list(sim.reset(seed).values())
        for p in cups:
            assert x0 <= p[0] <= x1 and y0 <= p[1] <= y1
        for i in range(len(cups)):
            for j in range(i + 1, len(cups)):
                assert np.linalg.norm(cups[i][:2] - cups[j][:2]) >= sim.config.min_cup_spacing_m - 1e-9


def test_same_seed_and_commands_give_identical_trajectory():
    trajectories = []
    for _ in range(2):
        s = ArmSim(seed=4)
        target = np.array(HOME_Q) + np.array([0.3, -0.2, 0.2, 0.1, 0.1, -0.3, -0.02])
        s.command_positions(None, target)
        qs = []
        for _ in range(600):
            s.step()
            qs.append(s.joint_positions())
        trajectories.append(np.array(qs))
    np.testing.assert_array_equal(trajectories[0], trajectories[1])


def test_sample_schedule_is_exact(sim):
    sim.reset(0)
    t0 = sim.time_ns
    js, frames, stamps = 0, 0, []
    for _ in range(sim.config.physics_rate_hz * 10):
        sim.step()
        if sim.is_joint_state_step():
            js += 1
            stamps.append(sim.time_ns)
        if sim.is_frame_step():
            frames += 1
    assert js == 1000 and frames == 300
    assert np.all(np.diff(stamps) == 10_000_000)  # exactly 10 ms apart
    assert sim.time_ns - t0 == 10_000_000_000


def test_commanded_target_is_reached(sim):
    sim.reset(0)
    target = np.array([0.5, 0.4, 1.5, -0.3, 0.9, 0.6, 0.02])
    sim.command_positions(list(sim.command_joint_names), target)
    run(sim, 2.0)
    np.testing.assert_allclose(sim.command_joint_positions(), target, atol=0.01)
    # The mimic finger follows its leader.
    assert abs(sim.joint_positions()[sim.joint_names.index("right_finger_joint")] - target[-1]) < 0.002


@pytest.mark.parametrize(
    "names, values, code",
    [
        (None, [0.0] * 6, "wrong_size"),
        (None, [0.0, 0.3, 1.8, 0.0, 1.0, 0.0, float("nan")], "non_finite"),
        (None, [0.0, 0.3, float("inf"), 0.0, 1.0, 0.0, 0.02], "non_finite"),
        (None, [0.0, 0.3, 1.8, 0.0, 1.0, 0.0, 0.5], "outside_limits"),
        (None, [3.5, 0.3, 1.8, 0.0, 1.0, 0.0, 0.02], "outside_limits"),
        (
            [
                "shoulder_pan_joint",
                "nope",
                "elbow_joint",
                "forearm_roll_joint",
                "wrist_pitch_joint",
                "wrist_roll_joint",
                "left_finger_joint",
            ],
            [0.0] * 7,
            "unknown_joint",
        ),
        (
            [
                "shoulder_pan_joint",
                "shoulder_pan_joint",
                "elbow_joint",
                "forearm_roll_joint",
                "wrist_pitch_joint",
                "wrist_roll_joint",
                "left_finger_joint",
            ],
            [0.0] * 7,
            "duplicate_joint",
        ),
        (["shoulder_pan_joint", "elbow_joint"], [0.0, 0.0], "missing_joint"),
    ],
)
def test_bad_commands_are_rejected_and_nothing_moves(sim, names, values, code):
    sim.reset(0)
    run(sim, 0.2)
    q_before, ctrl_before = sim.joint_positions(), sim.commanded_positions()
    with pytest.raises(CommandError) as err:
        sim.command_positions(names, values)
    assert err.value.code == code
    np.testing.assert_array_equal(sim.commanded_positions(), ctrl_before)
    run(sim, 0.5)
    assert np.abs(sim.joint_positions() - q_before).max() < 1e-3


def test_bad_trajectories_are_rejected(sim):
    names = list(sim.command_joint_names)
    ok = [list(HOME_Q)] * 2
    cases = [
        ([], [], "empty_trajectory"),
        ([0.5, 0.5], ok, "non_increasing_time"),
        ([1.0, 0.5], ok, "non_increasing_time"),
        ([-1.0, 0.5], ok, "bad_time"),
        ([0.5, 1.0], [list(HOME_Q), list(HOME_Q[:-1])], "wrong_size"),
        ([0.5, 1.0], [list(HOME_Q), [float("nan")] * 7], "non_finite"),
    ]
    for times, points, code in cases:
        with pytest.raises(CommandError) as err:
            PositionTrajectory.from_points(names, times, points, sim.limits)
        assert err.value.code == code, (times, err.value)


def test_trajectory_interpolates_and_holds():
    s = ArmSim(seed=0)
    names = list(s.command_joint_names)
    start = np.array(HOME_Q)
    goal = start + np.array([0.4, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    traj = PositionTrajectory.from_points(names, [1.0, 2.0], [start + (goal - start) / 2, goal], s.limits)
    traj.bind_start(10.0, start)
    np.testing.assert_allclose(traj.sample(10.5), start + (goal - start) / 4)
    np.testing.assert_allclose(traj.sample(11.5), start + (goal - start) * 0.75)
    np.testing.assert_allclose(traj.sample(99.0), goal)


def test_render_shows_each_cup_where_it_projects():
    s = ArmSim(seed=2)
    img = s.render()
    assert img.shape == (240, 320, 3)
    assert_cups_visible(img, s, s.cup_positions())
    s.close()


def test_the_wrist_camera_looks_down_between_the_fingers_at_the_cup_below():
    """Gripper 12 cm above the green cup: in the hand camera's picture the cup is in the middle, between the
    fingers, in its colour (where it projects), and far bigger than in the fixed camera's picture."""
    s = ArmSim(seed=11)
    cup = s.cup_positions()["green"]
    s.command_positions(None, np.append(top_down_ik(cup + np.array([0.0, 0.0, 0.12])), 0.04))
    run(s, 2.0)
    wrist, front = s.render("wrist_camera").copy(), s.render().copy()
    assert wrist.shape == front.shape == (240, 320, 3)
    assert_cups_visible(wrist, s, {"green": cup}, camera="wrist_camera")
    u, v = s.project(cup[None], "wrist_camera")[0]
    assert abs(u - 160) < 40 and 60 < v < 200, (u, v)  # centred across the fingers' axis
    green = lambda img: np.mean(img[..., 1].astype(int) > img[..., [0, 2]].max(axis=-1).astype(int) + 40)  # noqa: E731
    assert green(wrist) > 5 * green(front) > 0
    k = s.camera_intrinsics("wrist_camera")
    assert (k.width, k.height) == (320, 240) and k.fy < s.camera_intrinsics().fy  # the wider lens
    with pytest.raises(ValueError, match="unknown camera 'side'"):
        s.render("side")
    s.close()


def test_scripted_pick_lifts_the_named_cup_only():
    s = ArmSim(seed=11)
    cups = s.cup_positions()
    end_s = start_scripted_pick(s, cups["green"])
    assert s.lifted_cup() is None
    run(s, end_s + 0.5)
    assert s.lifted_cup() == "green"
    after = s.cup_positions()
    for other in ("red", "blue"):
        np.testing.assert_allclose(after[other], cups[other], atol=0.005)
    assert s.robot_table_contacts() == 0


@pytest.mark.parametrize("offset_m", [0.012, -0.012])
def test_a_cup_grasped_off_the_pads_centre_along_them_stays_up_a_second_after_the_lift(offset_m):
    """The pads are 3 cm wide along the reach (the hand's x). A grasp 1.2 cm off the cup's axis along them,
    either way, still squeezes the 6 cm cup between two flat faces: lifted and still between the pads a
    second after the lift ends. (On 2 cm pads the cup met an edge and was pressed out: never lifted.)"""
    s = ArmSim(seed=0)
    cup = s.cup_positions()["red"]
    reach = np.array([cup[0], cup[1], 0.0]) / np.hypot(cup[0], cup[1])
    run(s, start_scripted_pick(s, cup + offset_m * reach) + 1.0)
    assert s.lifted_cup() == "red"
    hand_x = s.data.xmat[s.model.body(s.robot.hand_body).id].reshape(3, 3)[:, 0]
    assert abs(float(hand_x @ reach)) > 0.95  # the pads do lie along the reach
    along = float((s.cup_positions()["red"] - s.tcp_position()) @ reach)
    assert 0.008 < abs(along) < 0.015 and np.sign(along) == -np.sign(offset_m), along  # still off centre, on the pads
    s.close()


@pytest.mark.parametrize("timeconst_s, sink_mm", [(None, (1.2, 2.5)), (0.004, (0.0, 1.2))])
def test_the_cup_contact_stiffness_sets_how_far_the_closed_fingers_sink_into_a_lifted_cup(timeconst_s, sink_mm):
    """The closed fingers squeeze a lifted cup with their servos' force. With MuJoCo's default contact (the
    scene's default) the pads sink 1.6 mm into it in all; with a stiff one (0.004 s) under 1 mm."""
    scene = SceneConfig() if timeconst_s is None else SceneConfig(cup_contact_timeconst_s=timeconst_s)
    s = ArmSim(SimConfig(scene=scene), seed=0)
    cups = s.cup_positions()
    run(s, start_scripted_pick(s, cups["red"]) + 1.0)
    assert s.lifted_cup() == "red"
    opening = sum(float(s.data.qpos[s.model.joint(j).qposadr[0]]) for j in ("left_finger_joint", "right_finger_joint"))
    assert sink_mm[0] < 1e3 * (2 * CUP_RADIUS_M - opening) < sink_mm[1], opening
    with pytest.raises(ValueError, match="cup_contact_timeconst_s must be in"):
        SceneConfig(cup_contact_timeconst_s=0.0)


def test_top_down_ik_matches_simulated_forward_kinematics():
    s = ArmSim(seed=0)
    for target in ([0.35, 0.1, 0.15], [0.5, -0.2, 0.08], [0.3, 0.25, 0.25]):
        q = top_down_ik(target)
        s.command_positions(None, np.append(q, 0.04))
        run(s, 2.0)
        np.testing.assert_allclose(s.tcp_position(), target, atol=0.005)


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"camera_rate_hz": 7}, "camera_rate_hz=7 must be a positive divisor of physics_rate_hz=600"),
        ({"image_width": 8}, "image size 8x240"),
        ({"min_cup_spacing_m": 0.01}, "min_cup_spacing_m=0.01"),
        ({"cup_region_m": (0.5, 0.3, -0.2, 0.2)}, "cup_region_m"),
    ],
)
def test_config_errors_quote_the_values(kwargs, fragment):
    with pytest.raises(ValueError) as err:
        SimConfig(**kwargs)
    assert fragment in str(err.value)


def test_missing_urdf_is_a_clear_error(tmp_path):
    with pytest.warns(DeprecationWarning, match="pass profile="):
        with pytest.raises(FileNotFoundError, match="robot description not found"):
            ArmSim(urdf_path=tmp_path / "nope.urdf")


def test_monotonic_reset_starts_the_new_episode_strictly_after_every_old_sample(sim):
    """The episode-reset announcement's stamp: every sample of the old episode (even one on the very
    step before the reset) is stamped before it, every one of the new episode at or after it."""
    sim.reset(0)
    assert (sim.episode_start_ns, sim.time_ns) == (0, 0)
    for _ in range(math.lcm(sim.config.steps_per_frame, sim.config.steps_per_joint_state)):  # the last step: both
        sim.step()
    assert sim.is_joint_state_step() and sim.is_frame_step()
    last_old_ns, episode = sim.time_ns, sim.episode
    sim.reset(1, restart_clock=False)
    assert sim.episode == episode + 1
    assert sim.episode_start_ns == sim.time_ns > last_old_ns
    sim.step()
    assert sim.time_ns > sim.episode_start_ns
    sim.reset(2)  # the default restarts the clock (evaluation, data collection)
    assert (sim.episode_start_ns, sim.time_ns) == (0, 0)


def test_pacing_applies_a_new_factor_from_the_change_on():
    """Issue 14: lowering the factor 1.0 -> 0.5 after 160 s of paced simulation asked for a 160 s wait (the
    old anchor); from the change on, 0.5 means 0.5 simulated seconds per wall second, and 0 means none."""
    from vla_ros.sim.pacing import Pacing

    pacing = Pacing(1.0)
    assert pacing.delay_s(0.0, 1000.0) == 0.0  # first call anchors
    assert pacing.delay_s(160.0, 1159.99) == pytest.approx(0.01)
    pacing.set_factor(0.5)
    assert pacing.delay_s(160.0, 1160.0) == 0.0  # re-anchored at the change
    assert pacing.delay_s(160.5, 1160.0) == pytest.approx(1.0)  # 0.5 s simulated = 1 s wall at 0.5
    assert pacing.delay_s(161.0, 1162.0) == 0.0
    pacing.set_factor(0.0)  # as fast as possible: never waits
    assert [pacing.delay_s(161.0 + k, 1162.0) for k in range(3)] == [0.0, 0.0, 0.0]
    pacing.set_factor(2.0)
    assert pacing.delay_s(163.0, 1162.0) == 0.0
    assert pacing.delay_s(164.0, 1162.0) == pytest.approx(0.5)
    # a stall (more than max_lag_s behind) re-anchors instead of bursting; so does a clock restart
    assert pacing.delay_s(164.0, 1170.0) == 0.0 and pacing.reanchors == 1
    assert pacing.delay_s(165.0, 1170.0) == pytest.approx(0.5)
    assert pacing.delay_s(0.0, 1170.5) == 0.0 and pacing.reanchors == 2
    assert pacing.delay_s(0.2, 1170.5) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="-1"):
        pacing.set_factor(-1.0)


def test_reset_hold_refuses_commands_from_before_the_reset_until_one_starts_at_the_reset_pose(sim):
    """Commands still in flight when a ROS graph resets were computed for the old episode: applied, they
    would yank the arm from the reset pose back towards the old one. With a hold, far ones are refused
    until a command at the reset pose (a controller re-anchored there) arrives, or the hold ends."""
    from vla_ros.sim.arm_sim import RESET_HOLD_TOLERANCE

    home = np.array(HOME_Q)
    old = home + np.array([0.4, -0.2, 0.3, 0.5, -0.3, 0.6, -0.02])
    sim.reset(3, hold_s=0.5)
    with pytest.raises(CommandError) as err:
        sim.command_positions(None, old)
    assert err.value.code == "before_reset" and "wrist_roll_joint" in str(err.value)  # the farthest joint, named
    run(sim, 0.1)
    np.testing.assert_allclose(sim.commanded_positions(), home)  # nothing applied, the arm held
    assert np.abs(sim.command_joint_positions() - home).max() < 0.01
    near = home - RESET_HOLD_TOLERANCE / 2  # (the gripper is open at HOME: only closing is inside its limits)
    sim.command_positions(None, near)  # the re-anchored controller: accepted ...
    sim.command_positions(None, old)  # ... and from then on everything is
    np.testing.assert_allclose(sim.commanded_positions(), old)
    # the hold ends by itself after hold_s (a controller that never re-anchors behaves as without it)
    sim.reset(3, restart_clock=False, hold_s=0.5)
    run(sim, 0.5)
    sim.command_positions(None, old)
    # a trajectory stamped before the episode began is refused; stamp 0 (on arrival) is not
    sim.reset(4, restart_clock=False)
    start_s = sim.episode_start_ns * 1e-9
    stale = PositionTrajectory.from_points(sim.limits.names, [0.5], [old], sim.limits, stamp_s=start_s - 0.01)
    with pytest.raises(CommandError, match="before the episode began") as err:
        sim.command_trajectory(stale)
    assert err.value.code == "before_reset"
    sim.command_trajectory(PositionTrajectory.from_points(sim.limits.names, [0.5], [old], sim.limits))
    sim.reset(5)  # no hold: the default for in-process use (evaluation, data collection)
    sim.command_positions(None, old)

"""The closed-loop expert picks the named cup, recovers from pushes, and `vla-ros collect` records it."""

import json

import numpy as np
import pytest

from vla_ros.data.dataset import Topics, make_stream, replay, samples
from vla_ros.sim import ArmSim
from vla_ros.sim.expert import ExpertConfig, PickExpert
from vla_ros.sim.tasks import EVAL_SEED_START, HELDOUT_TEMPLATES, TRAIN_TEMPLATES, episode_task
from vla_ros.tokens import Kind, StreamConfig, TokenizerConfig
from vla_ros.tools import collect

pytestmark = pytest.mark.unit  # no ROS node, no DDS, no wall-clock timing: `make test` runs it beside others


@pytest.fixture(scope="module")
def sim():
    s = ArmSim()
    yield s
    s.close()


def run_expert(sim, seed, color, push=None, seconds=8.0, config=None, on_close=None):
    sim.reset(seed, arm_noise_rad=0.15)
    expert = PickExpert(config)
    while sim.time_s < seconds:
        if on_close is not None and expert.phase == "close":
            on_close(sim)
        if sim.is_joint_state_step():
            q = expert.command(sim.time_s, sim.tcp_position(), sim.cup_positions()[color], sim.joint_positions())
            if push is not None:
                q = np.clip(q + push(sim.time_s), sim.limits.lower, sim.limits.upper)
            sim.command_positions(None, q)
        sim.step()
        if sim.lifted_cup() is not None and expert.phase == "hold":
            break
    return sim.lifted_cup(), expert


@pytest.mark.parametrize("seed", range(6))
def test_expert_lifts_the_named_cup_and_not_another(sim, seed):
    color = ("red", "green", "blue")[seed % 3]
    lifted, expert = run_expert(sim, seed, color)
    assert lifted == color, (seed, color, lifted, expert.phase)
    assert sim.robot_table_contacts() == 0


@pytest.mark.parametrize("seed", [1, 2, 4])
def test_a_rolled_grasp_closes_its_fingers_along_the_reach_and_still_lifts_the_cup(sim, seed):
    """``wrist_roll_rad`` pi/2 (``vla-ros collect --grasp-roll``): the fingers close along the line from the
    base to the tool, roughly the fixed camera's line of sight, instead of across it; the pick still works."""
    color = ("red", "green", "blue")[seed % 3]
    for roll, expected_cos in ((0.0, 0.0), (np.pi / 2, 1.0)):
        closing = []

        def finger_axis(s):
            left, right = s.data.body("left_finger_link").xpos, s.data.body("right_finger_link").xpos
            reach = s.tcp_position()[:2] / np.linalg.norm(s.tcp_position()[:2])
            closing.append(abs(float(np.dot((left - right)[:2] / np.linalg.norm((left - right)[:2]), reach))))

        lifted, expert = run_expert(sim, seed, color, config=ExpertConfig(wrist_roll_rad=roll), on_close=finger_axis)
        assert lifted == color, (seed, roll, lifted, expert.phase)
        assert closing and np.allclose(closing, expected_cos, atol=0.02), (roll, min(closing), max(closing))
    with pytest.raises(ValueError, match="wrist_roll_rad"):
        ExpertConfig(wrist_roll_rad=float("nan"))
    with pytest.raises(ValueError, match="wrist_roll_rad"):
        ExpertConfig(wrist_roll_rad=3.5)


@pytest.mark.parametrize("seed", [0, 5])
def test_a_grasp_pause_keeps_the_hand_still_longer_before_closing_and_before_lifting(sim, seed):
    """``settle_s`` (``vla-ros collect --grasp-pause``): the hand arrives at grasp height, stays still with
    the fingers open, then closes; with ``close_s`` lengthened by the same pause it lifts that much later
    after the close. The cup is still lifted, and the collection option builds exactly that expert."""
    color = ("red", "green", "blue")[seed % 3]
    timelines = {}
    for pause in (0.0, 0.3):
        events = {}

        def watch(s, expert):
            events.setdefault(expert.phase, s.time_s)
            if expert.phase in ("settle", "close"):  # where the hand is while it waits and closes
                events.setdefault("tcp", []).append(s.tcp_position())

        sim.reset(seed, arm_noise_rad=0.15)
        config = collect.CollectConfig(grasp_pause_s=pause)
        expert = collect.make_expert(config)
        assert expert.config.settle_s == pause and expert.config.close_s == pytest.approx(0.9 + pause)
        while sim.time_s < 8.0 and not (sim.lifted_cup() is not None and expert.phase == "hold"):
            if sim.is_joint_state_step():
                q = expert.command(sim.time_s, sim.tcp_position(), sim.cup_positions()[color], sim.joint_positions())
                sim.command_positions(None, q)
                watch(sim, expert)
            sim.step()
        assert sim.lifted_cup() == color, (seed, pause, expert.phase)
        assert ("settle" in events) == (pause > 0)
        timelines[pause] = events
    plain, paused = timelines[0.0], timelines[0.3]
    # close begins settle_s after arrival; the lift close_s (0.9 + 0.3) after the close began
    assert paused["close"] - paused["settle"] == pytest.approx(0.3, abs=0.015)
    assert paused["lift"] - paused["close"] == pytest.approx(1.2, abs=0.015)
    assert plain["lift"] - plain["close"] == pytest.approx(0.9, abs=0.015)
    for events in (plain, paused):  # while it waits and closes the hand settles (the z tolerance) but does
        tcp = np.array(events["tcp"])  # not move sideways or rise
        assert np.ptp(tcp[:, :2], axis=0).max() < 0.003 and np.ptp(tcp[:, 2]) < ExpertConfig.z_tolerance_m
        assert np.diff(tcp[:, 2]).max() < 0.001
    with pytest.raises(ValueError, match="settle_s"):
        ExpertConfig(settle_s=-0.1)
    assert collect.main(["--grasp-pause", "-1", "--episodes", "1"]) == 2


def test_hold_after_lift_records_that_long_past_the_lift_with_the_cup_held(tmp_path):
    """`vla-ros collect --hold-after-lift S`: the recording goes on S seconds past the lift, labelled to the
    end, the expert's fingers shut on the cup; out of range refused. Seed 12 holds the cup off the pads'
    centre: the default hold aims at the cup and the hand creeps after it, `--still-hold` keeps it still."""
    for name, still in (("follows", []), ("still", ["--still-hold"])):
        assert (
            collect.main(
                [
                    "--episodes",
                    "1",
                    "--seed-start",
                    "12",
                    "--hold-after-lift",
                    "2.5",
                    *still,
                    "--out",
                    str(tmp_path / name),
                ]
            )
            == 0
        )
        summary = json.loads((tmp_path / name / "collect_summary.json").read_text())["episodes"][0]
        assert summary["success"] and summary["duration_s"] - summary["time_to_lift_s"] == pytest.approx(2.5, abs=0.011)
        ep = replay(tmp_path / name / "episode_0000012.mcap", make_stream(TokenizerConfig(), StreamConfig()))
        late = ep.command_t_s >= ep.command_t_s[-1] - 1.5  # the last 1.5 s: long after the rise has ended
        assert late.sum() > 100 and ep.command_positions[late, -1].max() < 0.01  # fingers shut throughout
        assert ep.command_t_s[-1] - ep.command_t_s[0] > summary["time_to_lift_s"] + 2.0  # labelled to the end
        arm_moved = np.abs(ep.command_positions[late, :6] - ep.command_positions[late, :6][-1]).max()  # rad
        assert arm_moved < 0.01 if still else arm_moved > 0.1
    for bad in ("-1", "nan", "11"):
        assert collect.main(["--episodes", "1", "--hold-after-lift", bad, "--out", str(tmp_path / "x")]) == 2
    assert not (tmp_path / "x").exists()


def test_grasp_tolerance_aims_off_the_cup_along_or_across_the_reach(sim, capsys):
    """``python -m vla_ros.evaluation.grasp_tolerance``: the offsets are split as the evaluation splits a
    close; on the cup the expert lifts it, 5 cm off along the reach (beyond a cup's radius) it cannot."""
    from vla_ros.evaluation import grasp_tolerance as gt
    from vla_ros.evaluation.closed_loop import grasp_offset

    cup = np.array([0.42, -0.17, 0.045])
    for axis in gt.AXES:
        d = grasp_offset(0.0, cup + gt.offset_vector(cup, axis, 0.02), cup)
        assert d[f"{axis}_m"] == pytest.approx(0.02, abs=1e-4)
        other = "across_reach_m" if axis == "along_reach" else "along_reach_m"
        assert d[other] == pytest.approx(0.0, abs=1e-4)
    assert gt.lifts(sim, 1, np.pi / 2, "along_reach", 0.0)
    assert not gt.lifts(sim, 1, np.pi / 2, "along_reach", 0.05)
    assert gt.main(["--roll", "4", "--seeds", "1"]) == 2 and gt.main(["--seeds", "0"]) == 2
    assert "--roll" in capsys.readouterr().err


def test_expert_commands_stay_inside_the_robots_velocity_and_acceleration_limits(sim):
    """Demonstrations a policy learns from must be executable as they are: no step the filter would stretch."""
    from vla_ros.chunks import COMMANDED_JOINTS
    from vla_ros.control.config import bundled_urdf_path, limits_from_urdf

    sim.reset(3, arm_noise_rad=0.15)
    expert, commands = PickExpert(), []
    while sim.time_s < 6.0 and expert.phase != "hold":
        if sim.is_joint_state_step():
            commands.append(
                expert.command(sim.time_s, sim.tcp_position(), sim.cup_positions()["red"], sim.joint_positions())
            )
            sim.command_positions(None, commands[-1])
        sim.step()
    assert expert.phase == "hold"
    q = np.array(commands)
    v = np.diff(q, axis=0) / 0.01
    a = np.diff(v, axis=0) / 0.01
    limits = limits_from_urdf(bundled_urdf_path(), COMMANDED_JOINTS)
    a_max = np.where(limits.prismatic, 1.0, 10.0)
    assert np.all(np.abs(v).max(0) <= 0.8 * limits.velocity + 1e-9)
    assert np.all(np.abs(a).max(0) <= 0.5 * a_max + 1e-6)
    assert np.abs(v[:, -1]).max() > 0.05  # the gripper did move (shut), at a feasible speed
    assert abs(q[0, 0] - sim.joint_positions()[0]) < 1.0  # starts from the measured joints, no jump


def test_expert_comes_back_after_a_push(sim):
    def push(t_s):  # shove the arm sideways while it descends
        return np.array([0.25, -0.1, 0.1, 0, 0, 0, 0]) if 1.2 <= t_s <= 1.6 else np.zeros(7)

    lifted, expert = run_expert(sim, 4, "green", push=push)
    assert lifted == "green"


def test_tasks_are_deterministic_and_splits_disjoint():
    assert episode_task(5) == episode_task(5)
    colors = {episode_task(s)[0] for s in range(30)}
    assert colors == {"red", "green", "blue"}
    heldout = {t.format(color="red") for t in HELDOUT_TEMPLATES}
    assert heldout.isdisjoint({t.format(color="red") for t in TRAIN_TEMPLATES})
    assert episode_task(EVAL_SEED_START, HELDOUT_TEMPLATES)[1] in {
        t.format(color=episode_task(EVAL_SEED_START, HELDOUT_TEMPLATES)[0]) for t in HELDOUT_TEMPLATES
    }


def test_collect_records_episodes_the_dataset_reader_turns_into_samples(tmp_path, capsys):
    assert collect.main(["--episodes", "2", "--seed-start", "10", "--out", str(tmp_path)]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["episodes"] == 2 and result["successes"] == 2 and result["kept"] == 2
    summary = json.loads((tmp_path / "collect_summary.json").read_text())
    path = tmp_path / "episode_0000010.mcap"
    episode = replay(path, make_stream(TokenizerConfig(), StreamConfig()))
    color, instruction = episode_task(10)
    assert episode.instruction.text == instruction == summary["episodes"][0]["instruction"]
    assert episode.success and episode.status["lifted"] == color
    assert episode.stats["rejected"] == 0 and episode.stats["reordered"] > 0  # frames arrive after newer joint states
    # targets come from the expert's commands (a closed gripper is commanded shut, measured at the cup's width)
    batch = list(samples(episode, chunk_length=10, chunk_rate_hz=10.0))
    assert len(batch) > 30
    gripper_cmd = np.concatenate([s.target_positions[:, -1] for s in batch])  # NaN past the end of the recording
    assert np.nanmin(gripper_cmd) == pytest.approx(0.0) and np.nanmax(gripper_cmd) == pytest.approx(0.04)
    assert episode.joint_positions[:, -1].min() > 0.02  # the fingers stop at the cup
    # the hand camera is recorded beside the fixed one, frame for frame: a model that reads it trains on it
    counts = episode.topic_counts
    assert counts["/camera/image_raw"] > 60 and "/wrist_camera/image_raw" not in counts  # not asked for: not read
    wrist = replay(
        path, make_stream(TokenizerConfig(), StreamConfig()), Topics().with_cameras(("camera", "wrist_camera"))
    )
    assert wrist.topic_counts["/wrist_camera/image_raw"] == counts["/camera/image_raw"]
    frames = [o for o in wrist.observations if o.kind == Kind.IMAGE]
    assert [o.camera for o in frames].count(1) == [o.camera for o in frames].count(0) > 20  # the last second: both
    assert wrist.stats["accepted.image"] == 2 * counts["/camera/image_raw"] and wrist.stats["rejected"] == 0
    assert len(wrist.windows) == len(episode.windows)  # samples are still taken at the main camera's frames


def test_collect_refuses_to_reach_into_the_evaluation_seeds(tmp_path):
    assert collect.main(["--episodes", "5", "--seed-start", str(EVAL_SEED_START - 2), "--out", str(tmp_path)]) == 2


@pytest.mark.parametrize("roll", ["3.2", "nan", "-inf"])
def test_collect_refuses_a_grasp_roll_outside_the_wrists_range(tmp_path, capsys, roll):
    assert collect.main(["--episodes", "1", f"--grasp-roll={roll}", "--out", str(tmp_path / "d")]) == 2
    assert "--grasp-roll" in capsys.readouterr().err and not (tmp_path / "d").exists()


def test_policy_rollouts_with_expert_takeovers_carry_targets_only_where_the_expert_drove(tmp_path):
    """`vla-ros collect --policy`: a (random, tiny) policy drives, the expert takes over now and then;
    commands are recorded only in the expert's segments, and training targets come only from those."""
    import torch

    from vla_ros.data.targets import chunk_targets
    from vla_ros.model.config import tiny_config
    from vla_ros.model.io import save_model
    from vla_ros.model.model import VLATransformer

    torch.manual_seed(0)
    save_model(VLATransformer(tiny_config(chunk_length=8, chunk_rate_hz=20.0, max_text_tokens=16)), tmp_path / "tiny")
    cfg = collect.TakeoverConfig(policy_s=(0.5, 0.8), expert_s=(0.6, 0.9), max_episode_s=3.0)
    summaries = collect.collect_rollouts(
        str(tmp_path / "tiny"), range(40, 42), tmp_path / "rollouts", cfg, progress=False
    )
    assert [s["seed"] for s in summaries] == [40, 41] and all(s["expert_segments"] >= 1 for s in summaries)
    ep = replay(tmp_path / "rollouts" / "rollout_0000040.mcap", make_stream(TokenizerConfig(), StreamConfig()))
    t = ep.command_t_s
    gaps = np.diff(t)
    assert len(t) > 50 and gaps.max() > 0.4  # commands stop while the policy drives (at least 0.5 s)
    assert ep.joint_t_s[-1] - ep.joint_t_s[0] > 2.5  # joint states and frames cover the whole episode
    # a chunk anchored in the policy's stretch has no targets there; one in the expert's stretch has them
    offsets = np.arange(1, 9) * 0.05
    policy_stretch = t[np.argmax(gaps)] + 0.05  # just after the expert's last command before the longest gap
    assert np.isnan(chunk_targets(t, ep.command_positions, policy_stretch, offsets)[:4]).all()
    assert np.isfinite(chunk_targets(t, ep.command_positions, t[5], offsets)[:2]).all()


def test_a_near_miss_goes_down_beside_the_cup_and_hands_over_before_tipping_it(sim):
    """The decoy of a near-miss episode drives (unlabelled) to a point 2-5 cm beside the named cup and
    hands over low over the table, with the cup where it was (or moved by at most a centimetre)."""
    config = collect.CollectConfig(near_miss_probability=1.0)
    handovers = []
    for seed in (3, 4, 5):
        color, _ = episode_task(seed)
        sim.reset(seed, arm_noise_rad=0.15)
        miss = collect.NearMiss(seed, config)
        assert miss.drawn and 0.02 <= np.linalg.norm(miss.offset_m) <= 0.05 and miss.offset_m[2] == 0.0
        cup0 = sim.cup_positions()[color].copy()
        while sim.time_s < 6.0:
            if sim.is_joint_state_step():
                q = miss.command(sim, sim.cup_positions()[color])
                if q is None:
                    break
                sim.command_positions(None, q)
            sim.step()
        assert sim.time_s < 6.0, "the decoy never handed over"
        tcp, cup = sim.tcp_position(), sim.cup_positions()[color]
        assert np.linalg.norm(cup - cup0) <= 0.012  # handed over before a finger could tip the cup
        handovers.append((np.linalg.norm(tcp[:2] - cup[:2]), tcp[2]))
    xy, z = np.array(handovers).T
    assert (xy > 0.008).all() and (xy < 0.065).all(), xy  # beside the cup, not on it and not far off
    assert (z < 0.16).all(), z  # on the way down or at grasp height, below the approach height (0.18 m)


def test_near_miss_episodes_label_only_the_experts_part_and_leave_other_seeds_unchanged(tmp_path, capsys, sim):
    from vla_ros.data.targets import chunk_targets, chunk_usable

    assert (
        collect.main(["--episodes", "1", "--seed-start", "12", "--near-miss", "1", "--out", str(tmp_path / "nm")]) == 0
    )
    summary = json.loads((tmp_path / "nm" / "collect_summary.json").read_text())["episodes"][0]
    assert summary["success"] and 0.02 <= summary["near_miss_m"] <= 0.05
    ep = replay(tmp_path / "nm" / "episode_0000012.mcap", make_stream(TokenizerConfig(), StreamConfig()))
    assert ep.command_t_s[0] - ep.joint_t_s[0] > 0.5  # the decoy's approach carries no command
    assert np.diff(ep.command_t_s).max() < 0.02  # from the hand-over on, every period is labelled
    offsets = np.arange(1, 9) * 0.1
    assert not chunk_usable(chunk_targets(ep.command_t_s, ep.command_positions, ep.joint_t_s[5], offsets))
    assert chunk_usable(chunk_targets(ep.command_t_s, ep.command_positions, ep.command_t_s[1], offsets))
    # a seed whose draw says "no near miss" records the same episode as without the option
    seed = next(
        s for s in range(20, 60) if not collect.NearMiss(s, collect.CollectConfig(near_miss_probability=0.5)).drawn
    )
    plain = collect.record_episode(sim, seed, tmp_path / "plain.mcap", collect.CollectConfig())
    mixed = collect.record_episode(sim, seed, tmp_path / "mixed.mcap", collect.CollectConfig(near_miss_probability=0.5))
    assert plain == mixed and plain["near_miss_m"] is None
    a, b = (replay(tmp_path / f, make_stream(TokenizerConfig(), StreamConfig())) for f in ("plain.mcap", "mixed.mcap"))
    np.testing.assert_array_equal(a.command_positions, b.command_positions)
    for bad in (["--near-miss", "1.5"], ["--near-miss", "nan"], ["--near-miss", "0.5", "--policy", "models/vla_cups"]):
        assert collect.main(["--episodes", "1", "--out", str(tmp_path / "bad"), *bad]) == 2
        assert "--near-miss" in capsys.readouterr().err


def test_a_takeover_over_the_cup_goes_on_down_only_with_resume_descent(sim):
    """`PickExpert.take_over(resume_descent=True)`: a hand coming down within the descent's give-up distance
    of the cup's axis goes on down; one further off, or above the approach height, goes back above the cup."""
    from vla_ros.sim.scripted import APPROACH_TCP_Z_M

    sim.reset(0, arm_noise_rad=0.0)
    q, cup = sim.joint_positions(), np.array([0.45, 0.05, 0.03])
    v = np.zeros(7)
    cases = [
        ((0.02, 0.10), True, "descend"),
        ((0.02, 0.10), False, "approach"),
        ((0.05, 0.10), True, "approach"),
        ((0.01, APPROACH_TCP_Z_M + 0.05), True, "approach"),
    ]
    for (off, z), resume, phase in cases:
        expert = PickExpert()
        expert.take_over(cup + [off, 0, 0] - [0, 0, cup[2] - z], cup, q, q, v, resume_descent=resume)
        assert expert.phase == phase, (off, z, resume)


def test_the_grasp_round_labels_the_last_centimetres_from_where_the_policy_brought_the_hand(tmp_path, capsys):
    """`vla-ros collect --policy M --takeover-near-cup 0.06`: the shipped policy drives with no command
    recorded until its tool comes down within 6 cm of the named cup (or it starts closing); from there the
    expert drives to the end, every step labelled, and lifts the cup."""
    from vla_ros.sim.scripted import GRIPPER_OPEN_M

    out = tmp_path / "grasp_round"
    assert (
        collect.main(
            [
                "--policy",
                "models/vla_cups",
                "--takeover-near-cup",
                "0.06",
                "--episodes",
                "2",
                "--seed-start",
                "7",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    summary = json.loads((out / "collect_summary.json").read_text())
    for s in summary["episodes"]:
        assert s["expert_segments"] == 1 and s["success"] and not s["wrong_cup"], s
        dx, dy, _ = s["takeover_offset_m"]
        assert np.hypot(dx, dy) < 0.06 or s["takeover_closing"], s
        ep = replay(out / f"rollout_{s['seed']:07d}.mcap", make_stream(TokenizerConfig(), StreamConfig()))
        t = ep.command_t_s
        assert t[0] > ep.joint_t_s[0] + 0.5  # the policy drove first, unlabelled
        assert np.diff(t).max() < 0.011  # then one unbroken labelled stretch at 100 Hz: no hand-back
        assert t[-1] > ep.joint_t_s[-1] - 0.05  # to the end of the episode
        assert ep.command_positions[-1, -1] < 0.5 * GRIPPER_OPEN_M  # and it ends holding the cup
    for bad in (["--takeover-near-cup", "0.06"], ["--policy", "models/vla_cups", "--takeover-near-cup", "nan"]):
        assert collect.main([*bad, "--episodes", "1", "--out", str(tmp_path / "x")]) == 2
        assert "--takeover-near-cup" in capsys.readouterr().err and not (tmp_path / "x").exists()

"""The closed-loop expert picks the named cup, recovers from pushes, and `vla-ros collect` records it."""

import json

import numpy as np
import pytest

from vla_ros.data.dataset import make_stream, replay, samples
from vla_ros.sim import ArmSim
from vla_ros.sim.expert import PickExpert
from vla_ros.sim.tasks import EVAL_SEED_START, HELDOUT_TEMPLATES, TRAIN_TEMPLATES, episode_task
from vla_ros.tokens import StreamConfig, TokenizerConfig
from vla_ros.tools import collect


@pytest.fixture(scope="module")
def sim():
    s = ArmSim()
    yield s
    s.close()


def run_expert(sim, seed, color, push=None, seconds=8.0):
    sim.reset(seed, arm_noise_rad=0.15)
    expert = PickExpert()
    while sim.time_s < seconds:
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
    assert episode_task(EVAL_SEED_START, HELDOUT_TEMPLATES)[1] in {t.format(color=episode_task(EVAL_SEED_START, HELDOUT_TEMPLATES)[0]) for t in HELDOUT_TEMPLATES}


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
    gripper_cmd = np.concatenate([s.target_positions[:, -1] for s in batch])
    assert gripper_cmd.min() == pytest.approx(0.0) and gripper_cmd.max() == pytest.approx(0.04)
    assert episode.joint_positions[:, -1].min() > 0.02  # the fingers stop at the cup


def test_collect_refuses_to_reach_into_the_evaluation_seeds(tmp_path):
    assert collect.main(["--episodes", "5", "--seed-start", str(EVAL_SEED_START - 2), "--out", str(tmp_path)]) == 2

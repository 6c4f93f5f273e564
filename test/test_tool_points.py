"""The tool-position loss (`vla-ros train --tool-loss`): its forward kinematics equals Pinocchio's on the sim
arm and on the Franka FR3 (origins with rotations, seven joints), its value is the geometry worked out by
hand, it weighs a shoulder error above the same wrist error, it refuses what it cannot compute, and a
training run with it reports the term without changing the action loss's meaning."""

import json
import math

import numpy as np
import pinocchio as pin
import pytest
import torch
from torch_threads import one_torch_thread  # noqa: F401

from vla_ros.bench.safety_bench import FR3_DIR
from vla_ros.model.config import tiny_config
from vla_ros.sim.scene import default_urdf_path
from vla_ros.training.tool_points import ToolPoints
from vla_ros.training.train import TrainConfig, main, tool_points, train

pytestmark = pytest.mark.unit  # no ROS node, no DDS, no wall-clock timing: `make test` runs it beside others

SIM_JOINTS = (
    "shoulder_pan_joint",
    "shoulder_lift_joint",
    "elbow_joint",
    "forearm_roll_joint",
    "wrist_pitch_joint",
    "wrist_roll_joint",
    "left_finger_joint",
)
# The sim arm standing straight up (every joint 0): the tool frame is the base frame, 1.035 m up.
TCP_HEIGHT_M = 0.10 + 0.15 + 0.35 + 0.20 + 0.10 + 0.06 + 0.075


def urdfs():
    yield default_urdf_path(), "tcp_link"
    if (FR3_DIR / "fr3.urdf").exists():
        yield FR3_DIR / "fr3.urdf", "fr3_hand_tcp"


@pytest.mark.parametrize("urdf,tool_link", list(urdfs()))
def test_forward_kinematics_equal_pinocchios(urdf, tool_link):
    model = pin.buildModelFromUrdf(str(urdf))
    data = model.createData()
    arm = [n for n in model.names[1:] if "finger" not in n]
    points = ToolPoints(urdf, [*arm, "gripper"], tool_link)  # a column off the chain is ignored
    np.random.seed(3)  # pin.randomConfiguration draws from numpy's global generator
    worst = 0.0
    for _ in range(25):
        q = pin.randomConfiguration(model)
        pin.framesForwardKinematics(model, data, q)
        pose = data.oMf[model.getFrameId(tool_link)]
        expected = np.vstack([pose.translation] + [pose.translation + 0.05 * pose.rotation[:, k] for k in range(3)])
        columns = [q[model.joints[model.getJointId(n)].idx_q] for n in arm] + [0.0]
        got = points.points(torch.tensor([columns], dtype=torch.float32))[0].numpy()
        worst = max(worst, float(np.abs(got - expected).max()))
    assert worst < 1e-5, worst


def test_the_loss_is_the_squared_distance_of_four_tool_points_in_units_of_5_cm():
    points = ToolPoints(default_urdf_path(), SIM_JOINTS, "tcp_link", weight=0.1)
    upright = torch.zeros(1, 7)
    h = TCP_HEIGHT_M
    assert points.points(upright)[0].numpy() == pytest.approx(
        np.array([[0, 0, h], [0.05, 0, h], [0, 0.05, h], [0, 0, h + 0.05]]), abs=1e-6
    )
    assert float(points(upright, upright)) == 0.0
    # Tilting at the shoulder (axis y, 0.25 m up) by d moves each point by 2 r sin(d/2), r its distance from the axis.
    d = 0.03
    lift = upright.clone()
    lift[0, 1] = d
    arm = h - 0.25
    radii = np.array(
        [arm, math.hypot(0.05, arm), arm, arm + 0.05]
    )  # origin, +x, +y (along the axis: as the origin), +z
    moved = 2 * radii * math.sin(d / 2)
    assert float(points(lift, upright)) == pytest.approx(0.1 * np.mean((moved / 0.05) ** 2), rel=1e-4)
    # The same error at the wrist roll turns the tool about its own axis: only the +x and +y points move, by 5 cm x d.
    roll = upright.clone()
    roll[0, 5] = d
    roll_moved = np.array([0.0, 2 * 0.05 * math.sin(d / 2), 2 * 0.05 * math.sin(d / 2), 0.0])
    assert float(points(roll, upright)) == pytest.approx(0.1 * np.mean((roll_moved / 0.05) ** 2), rel=1e-4)
    assert float(points(lift, upright)) > 100 * float(points(roll, upright))
    # The gripper column is not on the chain: it costs nothing here (the action loss covers it).
    grip = upright.clone()
    grip[0, 6] = 0.04
    assert float(points(grip, upright)) == 0.0


def test_the_gradient_reaches_the_prediction():
    points = ToolPoints(default_urdf_path(), SIM_JOINTS, "tcp_link")
    target = torch.tensor([[0.3, -0.4, 1.2, 0.1, 0.8, -0.2, 0.03]])
    pred = (target + torch.tensor([[0.0, 0.02, 0.0, 0.0, 0.0, 0.0, 0.0]])).requires_grad_(True)
    points(pred, target).backward()
    grad = pred.grad[0].numpy()
    assert grad[1] > 0  # the loss grows with the shoulder's error: the step goes back towards the target
    assert grad[6] == 0.0


def test_refusals(tmp_path, capsys):
    with pytest.raises(ValueError, match="tool link 'palm' is not in"):
        ToolPoints(default_urdf_path(), SIM_JOINTS, "palm")
    with pytest.raises(
        ValueError, match="joint 'elbow_joint' moves the tool link 'tcp_link' but is not one of the model's joints"
    ):
        ToolPoints(default_urdf_path(), [j for j in SIM_JOINTS if j != "elbow_joint"], "tcp_link")
    with pytest.raises(ValueError, match="no joint of the model moves the tool link 'base_link'"):
        ToolPoints(default_urdf_path(), SIM_JOINTS, "base_link")
    with pytest.raises(ValueError, match="must be > 0"):
        ToolPoints(default_urdf_path(), SIM_JOINTS, "tcp_link", weight=float("nan"))
    mimic = (
        default_urdf_path()
        .read_text()
        .replace(
            '<joint name="wrist_roll_joint" type="revolute">',
            '<joint name="wrist_roll_joint" type="revolute"><mimic joint="elbow_joint"/>',
        )
    )
    with pytest.raises(ValueError, match="mimics another"):
        ToolPoints(mimic, SIM_JOINTS, "tcp_link")
    no_axis = (
        default_urdf_path()
        .read_text()
        .replace('<origin xyz="0 0 0.35"/><axis xyz="0 1 0"/>', '<origin xyz="0 0 0.35"/><axis xyz="0 0 0"/>')
    )
    with pytest.raises(ValueError, match="joint 'elbow_joint' in the robot description has axis \\[0.0, 0.0, 0.0\\]"):
        ToolPoints(no_axis, SIM_JOINTS, "tcp_link")
    with pytest.raises(ValueError, match="tool_loss_weight must be >= 0"):
        TrainConfig(tool_loss_weight=-1.0)
    with pytest.raises(ValueError, match="a state-relative model"):
        tool_points(TrainConfig(tool_loss_weight=0.1), tiny_config(relative_actions=True))
    assert tool_points(TrainConfig(), tiny_config()) is None
    # The command line refuses a bad tool before replaying any bag (the data path does not exist).
    assert main(["--data", "nowhere", "--out", str(tmp_path / "m"), "--tool-loss", "0.1", "--tool-link", "palm"]) == 2
    assert "vla-ros train: tool link 'palm' is not in" in capsys.readouterr().err
    assert (
        main(
            [
                "--data",
                "nowhere",
                "--out",
                str(tmp_path / "m"),
                "--tool-loss",
                "0.1",
                "--robot-description",
                str(tmp_path / "missing.urdf"),
            ]
        )
        == 2
    )
    assert "missing.urdf" in capsys.readouterr().err
    # A fine-tune is checked against the model it starts from: the shipped model's chunks are positions, so only the
    # tool is wrong.
    assert (
        main(
            [
                "--data",
                "nowhere",
                "--out",
                str(tmp_path / "m"),
                "--tool-loss",
                "0.1",
                "--tool-link",
                "palm",
                "--init",
                "models/vla_cups",
            ]
        )
        == 2
    )
    assert "tool link 'palm' is not in" in capsys.readouterr().err
    assert (
        main(
            [
                "--data",
                "nowhere",
                "--out",
                str(tmp_path / "m"),
                "--tool-loss",
                "0.1",
                "--init",
                str(tmp_path / "no_model"),
            ]
        )
        == 2
    )
    assert "model folder not found" in capsys.readouterr().err


def test_a_run_with_the_tool_loss_reports_it_and_keeps_the_action_loss_comparable(tmp_path):
    from vla_ros.tools import collect

    demos = tmp_path / "demos"
    assert collect.main(["--episodes", "2", "--seed-start", "20", "--out", str(demos)]) == 0
    base = dict(
        task="cups",
        steps=8,
        warmup_steps=2,
        task_options=dict(views=8, view_batch=4, vision_warmup_steps=2),
        span_s=0.5,
        context_s=0.3,
        chunks=6,
        val_fraction=0.5,
        val_every=4,
        val_sequences=2,
        threads=1,
    )
    config = tiny_config(chunk_length=4, chunk_rate_hz=10.0)
    plain = train(demos, tmp_path / "plain", TrainConfig(**base), model_config=config, device="cpu", progress=False)
    tool = train(
        demos,
        tmp_path / "tool",
        TrainConfig(**base, tool_loss_weight=0.1),
        model_config=config,
        device="cpu",
        progress=False,
    )
    assert plain["final_val_tool_loss"] is None
    assert tool["final_val_tool_loss"] > 0
    history = lambda run: json.loads((tmp_path / run / "train_report.json").read_text())["history"]  # noqa: E731
    # The first step's action loss is the same (same seed, same weights): the term is reported beside it, not in it.
    assert history("tool")["loss"][0] == history("plain")["loss"][0]
    assert np.isfinite(history("tool")["tool_loss"]).all() and np.isnan(history("plain")["tool_loss"]).all()
    assert history("tool")["loss"][1:] != history("plain")["loss"][1:]  # and it does change the training

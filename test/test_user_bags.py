"""`vla-ros train` on another robot's bags: its joint names and topics are options, an instruction can be given
for the whole bag, and when nothing is usable the error says why (counts per reason, the joint names found)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from rclpy.serialization import serialize_message
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float64MultiArray

from vla_ros.cli import main as cli_main
from vla_ros.data.dataset import Topics
from vla_ros.data.mcap_io import BagWriter
from vla_ros.data.selection import BagSelection
from vla_ros.model.config import tiny_config
from vla_ros.training.train import TrainConfig, train

pytestmark = pytest.mark.unit  # no ROS node, no DDS, no wall-clock timing: `make test` runs it beside others

NS = 1_000_000_000
JOINTS = ("shoulder", "elbow", "wrist")  # another arm: none of the sim's joint names
STATES = 300  # 3 s of 100 Hz joint states


def stamp(msg, t_ns: int) -> None:
    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(t_ns, NS)


def other_arm_bag(
    folder: Path, joint_topic="/joint_states", camera="/camera/image_raw", commands="/arm/commands"
) -> Path:
    """What `ros2 bag record` of another arm gives: its joint names, its topics, no instruction."""
    rng = np.random.default_rng(0)
    with BagWriter(folder) as w:
        for i in range(STATES):
            t = NS + i * NS // 100
            q = [0.3 * np.sin(0.01 * i + k) for k in range(len(JOINTS))]
            js = JointState(name=list(JOINTS), position=q, velocity=[0.0] * len(JOINTS))
            stamp(js, t)
            w.write(joint_topic, "sensor_msgs/msg/JointState", serialize_message(js), t + 2_000_000)
            w.write(
                commands, "std_msgs/msg/Float64MultiArray", serialize_message(Float64MultiArray(data=q)), t + 1_000_000
            )
            if i % 10 == 0:
                img = Image(
                    height=24,
                    width=32,
                    encoding="rgb8",
                    step=96,
                    data=rng.integers(0, 255, 24 * 96, dtype=np.uint8).tobytes(),
                )
                stamp(img, t)
                w.write(camera, "sensor_msgs/msg/Image", serialize_message(img), t + 20_000_000)
    return folder


def train_cli(capsys, *args: str) -> subprocess.CompletedProcess:
    """`vla-ros train ARGS` in this process (the text encoder loads once): exit status and output."""
    code = cli_main(["train", *args])
    out = capsys.readouterr()
    return subprocess.CompletedProcess(args, code, out.out, out.err)


def test_nothing_usable_says_why_with_counts_and_the_joint_names_found(tmp_path, capsys):
    bag = other_arm_bag(tmp_path / "other_arm")
    proc = train_cli(capsys, "--data", str(bag), "--out", str(tmp_path / "model"), "--steps", "1")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    (message,) = [line for line in proc.stderr.splitlines() if line.startswith("vla-ros train:")]
    assert "no usable episodes in 1 bag(s)" in message and "'no_instruction': 1" in message
    assert f"joint_state_missing_joint {STATES}" in message  # every joint state was refused, and the error says so
    assert f"name {list(JOINTS)}" in message and "pass --joints" in message
    assert "--instruction" in message and f"/joint_states {STATES}" in message
    # with the instruction given, the next reason is the joint names
    proc = train_cli(
        capsys, "--data", str(bag), "--out", str(tmp_path / "model"), "--instruction", "wave", "--steps", "1"
    )
    assert proc.returncode == 2 and "'no_joint_states': 1" in proc.stderr and "pass --joints" in proc.stderr


def test_bad_paths_and_files_are_one_line_errors(tmp_path, capsys):
    (tmp_path / "notes.mcap").write_text("not a bag")
    for data, message in (
        (tmp_path / "missing", "no such file or folder"),
        (tmp_path / "notes.mcap", "not an MCAP file"),
    ):
        proc = train_cli(capsys, "--data", str(data), "--out", str(tmp_path / "model"))
        assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    proc = train_cli(capsys, "--data", str(tmp_path), "--out", str(tmp_path / "m"), "--joints", "a,a")
    assert proc.returncode == 2 and "must be non-empty and unique" in proc.stderr and "Traceback" not in proc.stderr


def test_the_options_select_another_robots_topics_joints_and_instruction(tmp_path):
    other_arm_bag(tmp_path / "bags" / "other_arm", joint_topic="/arm/joint_states", camera="/wrist/image")
    selection = BagSelection(
        Topics.for_robot(camera="/wrist/image", joint_states="/arm/joint_states", commands="/arm/commands"),
        instruction="wave hello",
    )
    torch.manual_seed(0)
    config = tiny_config(chunk_length=4, chunk_rate_hz=10.0, joint_names=JOINTS)
    tc = TrainConfig(
        minutes=1.0, steps=3, span_s=0.5, context_s=0.3, chunks=2, val_fraction=0.0, warmup_steps=1, threads=1
    )
    report = train(
        tmp_path / "bags",
        tmp_path / "model",
        tc,
        model_config=config,
        device="cpu",
        progress=False,
        selection=selection,
    )
    assert report["steps"] == 3 and report["data"]["episodes"] == 1 and report["data"]["instructions"] == ["wave hello"]
    saved = json.loads((tmp_path / "model" / "config.json").read_text())
    assert saved["joint_names"] == list(JOINTS) and len(saved["action_mean"]) == 3
    # the commands' mean is what the bag commanded on its own topic, in the joint order given
    q = np.array([[0.3 * np.sin(0.01 * i + k) for k in range(3)] for i in range(STATES)])
    np.testing.assert_allclose(saved["action_mean"], q.mean(0), atol=0.02)

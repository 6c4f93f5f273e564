"""Ctrl-C and SIGTERM stop every node cleanly: exit code 0 and no traceback, every time.

rclpy's own signal handlers shut the context down from another thread while the node is still spinning and
its threads are still publishing; sim_node then printed "physics thread failed: publisher's context is
invalid" in about half of its shutdowns, or an RCLError from the spinning main thread. ``run_node`` owns the
signals now (vla_ros/ros/node_main.py); these tests stop real processes at work, repeatedly.
"""

import signal
import sys

import pytest
import torch
from ros_helpers import LaunchedGraph, Probe, node_cmd, shutdown_problem, spin_until, start_process, stop, stop_cleanly
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory

from vla_ros.data.bag import info as bag_info
from vla_ros.model.config import tiny_config
from vla_ros.model.io import save_model
from vla_ros.model.model import VLATransformer

SIM_RUNS = 6  # the old race hit 6 of 13 shutdowns: six clean ones in a row would have been a 1-in-40 chance


@pytest.mark.parametrize("run", range(SIM_RUNS))
def test_sim_node_stops_cleanly_while_its_physics_thread_publishes(tmp_path, run):
    signum = (signal.SIGINT, signal.SIGTERM)[run % 2]
    log = tmp_path / "sim.log"
    proc = start_process(node_cmd("sim_node", "-p", "image_width:=64", "-p", "image_height:=48"), log)
    try:
        # The log line comes after the physics thread started: from here on it publishes /clock at 200 Hz.
        assert spin_until(lambda: "simulating" in log.read_text() or proc.poll() is not None, 120), log.read_text()
        assert proc.poll() is None, log.read_text()
    finally:
        problem = stop_cleanly(proc, log, signum)
    assert not problem, problem


# A node with nothing to do: no timer, no traffic, so its spin sits in rcl's wait until the stop wakes it.
QUIET_NODE = """
import os, signal, sys
from rclpy.node import Node
from vla_ros.ros.node_main import run_node

class QuietNode(Node):
    def __init__(self):
        super().__init__("quiet_node")
        if sys.argv[1] == "signal_while_building":
            os.kill(os.getpid(), signal.SIGINT)
        print("built", flush=True)

    def close(self):
        print("closed", flush=True)

sys.exit(run_node(QuietNode, []))
"""


@pytest.mark.parametrize(
    "when, signum", [("spinning", signal.SIGINT), ("spinning", signal.SIGTERM), ("signal_while_building", None)]
)
def test_run_node_stops_a_quiet_node_on_a_signal_at_any_moment(tmp_path, when, signum):
    script, log = tmp_path / "quiet_node.py", tmp_path / "quiet.log"
    script.write_text(QUIET_NODE)
    proc = start_process([sys.executable, str(script), when], log)
    try:
        assert spin_until(lambda: "built" in log.read_text() or proc.poll() is not None, 120), log.read_text()
        if signum is None:  # the signal came while the node was being built: it ends without spinning
            assert spin_until(lambda: proc.poll() is not None, 60), log.read_text()
    finally:
        problem = stop_cleanly(proc, log, signum or signal.SIGKILL)
    assert not problem, problem
    assert log.read_text().split() == ["built", "closed"]  # nothing else printed, close() ran


def test_the_full_graph_and_the_recorder_stop_cleanly_on_ctrl_c(tmp_path):
    """sim, policy (a tiny model), safety filter and controller through the launch runner, with `vla-ros record`
    beside them: Ctrl-C while chunks (a random model: the filter rejects them) and commands flow. Every node exits 0
    with no traceback (LaunchedGraph checks the
    runner's log on the way out) and the recorder closes a readable file."""
    torch.manual_seed(0)
    save_model(
        VLATransformer(tiny_config(chunk_length=8, chunk_rate_hz=20.0)), tmp_path / "tiny", onnx=True
    )  # the default backend
    log = tmp_path / "launch.log"
    with LaunchedGraph(
        "sim.launch.xml", "policy:=vla", f"model:={tmp_path / 'tiny'}", "instruction:=pick up the red cup", log_path=log
    ) as graph:
        record_log, bag = tmp_path / "record.log", tmp_path / "episode"
        recorder = start_process(
            [sys.executable, "-m", "vla_ros.cli", "record", "--use-sim-time", "--out", str(bag)], record_log
        )
        probe = Probe("shutdown_probe")
        try:
            flow = {"chunks": 0, "commands": 0}
            probe.node.create_subscription(
                JointTrajectory, "/vla/action_chunk", lambda m: flow.update(chunks=flow["chunks"] + 1), 10
            )
            probe.node.create_subscription(
                Float64MultiArray,
                "/forward_position_controller/commands",
                lambda m: flow.update(commands=flow["commands"] + 1),
                100,
            )
            assert probe.spin_until(lambda: flow["chunks"] >= 3 and flow["commands"] >= 100, 300), (
                flow,
                log.read_text()[-3000:],
            )
        finally:
            probe.close()
            record_problem = stop_cleanly(recorder, record_log)
    assert not record_problem, record_problem
    assert bag_info(bag)["messages"] > 0
    text = log.read_text()
    assert graph.proc.returncode == 0 and text.count("process has finished cleanly") == 4, text[-3000:]


# Prints a ready line once Ctrl-C raises KeyboardInterrupt in it (Python's own handler, installed explicitly:
# a process started with SIGINT ignored, as a background job is, would otherwise pass that on), then waits.
INTERRUPTIBLE = """
import signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)
print("ready", flush=True)
time.sleep(600)
"""


def test_shutdown_problem_reports_exit_codes_and_tracebacks(tmp_path):
    """The check the tests above rely on can fail. A plain Python process stopped by Ctrl-C once it is ready:
    KeyboardInterrupt is certain, so its traceback is in the log and the exit code is Python's for it (the
    process ends by the same SIGINT, since 3.8), and both are reported. Hand-built logs for the other cases:
    a clean exit is '', a non-zero code without a traceback is reported without one, and a traceback is
    reported under exit code 0 too."""
    log = tmp_path / "plain.log"
    proc = start_process([sys.executable, "-c", INTERRUPTIBLE], log)
    try:
        assert spin_until(lambda: "ready" in log.read_text() or proc.poll() is not None, 120), log.read_text()
        assert proc.poll() is None, log.read_text()
    finally:
        code = stop(proc)
    text = log.read_text()
    assert code == -signal.SIGINT, (code, text)
    assert "Traceback" in text and text.rstrip().endswith("KeyboardInterrupt"), text
    assert shutdown_problem(code, log) == f"plain.log: exit code {code}, a traceback:\n{text}"

    cases = {  # log text, exit code -> what is reported
        ("all good\n", 0): "",
        ("all good\n", 1): "plain.log: exit code 1:\nall good\n",
        ("killed\n", -9): "plain.log: exit code -9:\nkilled\n",
        (
            "Traceback (most recent call last):\nRuntimeError: x\n",
            0,
        ): "plain.log: exit code 0, a traceback:\nTraceback (most recent call last):\nRuntimeError: x\n",
    }
    for (content, exit_code), expected in cases.items():
        log.write_text(content)
        assert shutdown_problem(exit_code, log) == expected, (content, exit_code)
    log.write_text("x" * 5000 + "Traceback (most recent call last):\n")  # a long log: its end is reported
    assert shutdown_problem(2, log) == "plain.log: exit code 2, a traceback:\n" + log.read_text()[-3000:]

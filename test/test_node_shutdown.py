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
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory

from ros_helpers import LaunchedGraph, Probe, node_cmd, shutdown_problem, spin_until, start_process, stop, stop_cleanly
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


@pytest.mark.parametrize("when, signum", [("spinning", signal.SIGINT), ("spinning", signal.SIGTERM),
                                          ("signal_while_building", None)])
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
    beside them: Ctrl-C while chunks (a random model: the filter rejects them) and commands flow. Every node exits 0 with no traceback (LaunchedGraph checks the
    runner's log on the way out) and the recorder closes a readable file."""
    torch.manual_seed(0)
    save_model(VLATransformer(tiny_config(chunk_length=8, chunk_rate_hz=20.0)), tmp_path / "tiny", onnx=True)  # the default backend
    log = tmp_path / "launch.log"
    with LaunchedGraph("sim.launch.xml", "policy:=vla", f"model:={tmp_path / 'tiny'}", "instruction:=pick up the red cup",
                       log_path=log) as graph:
        record_log, bag = tmp_path / "record.log", tmp_path / "episode"
        recorder = start_process([sys.executable, "-m", "vla_ros.cli", "record", "--use-sim-time", "--out", str(bag)], record_log)
        probe = Probe("shutdown_probe")
        try:
            flow = {"chunks": 0, "commands": 0}
            probe.node.create_subscription(JointTrajectory, "/vla/action_chunk", lambda m: flow.update(chunks=flow["chunks"] + 1), 10)
            probe.node.create_subscription(Float64MultiArray, "/forward_position_controller/commands",
                                           lambda m: flow.update(commands=flow["commands"] + 1), 100)
            assert probe.spin_until(lambda: flow["chunks"] >= 3 and flow["commands"] >= 100, 300), (flow, log.read_text()[-3000:])
        finally:
            probe.close()
            record_problem = stop_cleanly(recorder, record_log)
    assert not record_problem, record_problem
    assert bag_info(bag)["messages"] > 0
    text = log.read_text()
    assert graph.proc.returncode == 0 and text.count("process has finished cleanly") == 4, text[-3000:]


def test_shutdown_problem_reports_exit_codes_and_tracebacks(tmp_path):
    """The check the tests above rely on can fail: a plain Python process stopped by Ctrl-C is reported."""
    log = tmp_path / "plain.log"
    proc = start_process([sys.executable, "-c", "import time; time.sleep(60)"], log)
    assert spin_until(lambda: proc.poll() is None, 5)
    code = stop(proc)  # KeyboardInterrupt: a traceback, and an exit code other than 0
    assert code != 0 and shutdown_problem(code, log).startswith("plain.log: exit code")
    assert "a traceback" in shutdown_problem(code, log) or "Traceback" not in log.read_text()
    log.write_text("all good\n")
    assert shutdown_problem(0, log) == "" and shutdown_problem(1, log) != ""

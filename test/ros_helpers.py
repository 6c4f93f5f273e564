"""Helpers for tests that run the real launch files as real processes and talk to them over DDS."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import rclpy
from rclpy.node import Node
from rclpy.parameter import Parameter

REPO = Path(__file__).resolve().parents[1]


class LaunchedGraph:
    """``vla-ros launch <file> args...`` in its own process group; stopped with SIGINT like Ctrl-C."""

    def __init__(self, launch_file: str, *args: str, log_path: Path | None = None) -> None:
        self.cmd = [sys.executable, "-m", "vla_ros.launch_runner", str(REPO / "launch" / launch_file), *args]
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "LaunchedGraph":
        log = open(self.log_path, "w") if self.log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=REPO)
        return self

    def __exit__(self, *exc) -> None:
        assert self.proc is not None
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


class Probe:
    """An rclpy node on simulated time with a spin-until helper that never sleeps blindly."""

    def __init__(self, name: str = "probe") -> None:
        if not rclpy.ok():
            rclpy.init()
        self.node = Node(name, parameter_overrides=[Parameter("use_sim_time", Parameter.Type.BOOL, True)])

    def now_s(self) -> float:
        return self.node.get_clock().now().nanoseconds * 1e-9

    def spin_until(self, predicate, wall_timeout_s: float = 60.0) -> bool:
        end = time.monotonic() + wall_timeout_s
        while time.monotonic() < end:
            rclpy.spin_once(self.node, timeout_sec=0.02)
            if predicate():
                return True
        return False

    def spin_for_sim(self, seconds: float, wall_timeout_s: float = 60.0) -> None:
        """Spin until ``seconds`` of simulated time have passed (needs /clock)."""
        assert self.spin_until(lambda: self.now_s() > 0.0, wall_timeout_s), "no /clock"
        t_end = self.now_s() + seconds
        assert self.spin_until(lambda: self.now_s() >= t_end, wall_timeout_s), f"simulated time stuck at {self.now_s()}"

    def call(self, client, request, wall_timeout_s: float = 20.0):
        assert client.wait_for_service(timeout_sec=wall_timeout_s), f"service {client.srv_name} not available"
        future = client.call_async(request)
        assert self.spin_until(future.done, wall_timeout_s), f"service {client.srv_name} did not answer"
        return future.result()

    def close(self) -> None:
        self.node.destroy_node()
        rclpy.try_shutdown()

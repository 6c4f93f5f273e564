"""Helpers for tests that run real processes and talk to them over DDS: one way to wait, one way to stop.

``spin_until`` is the only wait: it returns as soon as the condition holds, and its wall-clock timeout is
an upper bound for a slow machine, never a measurement. ``stop`` is the only way a test ends a process:
the signal a launcher or a user would send, then SIGKILL if the process does not end in time (its
exit code is then -9, which no test accepts).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def spin_until(
    predicate: Callable[[], object],
    wall_timeout_s: float = 60.0,
    step: Callable[[float], object] = time.sleep,
    step_s: float = 0.02,
) -> bool:
    """True once ``predicate()`` holds, False if it still does not after ``wall_timeout_s``. Between two checks
    ``step(step_s)`` runs: an executor's ``spin_once`` (so callbacks run) or, where no ROS is involved, a sleep."""
    end = time.monotonic() + wall_timeout_s
    while not predicate():
        if time.monotonic() >= end:
            return False
        step(step_s)
    return True


def start_process(cmd: list[str], log_path: Path | None = None, **kwargs) -> subprocess.Popen:
    """A process in its own session (so ``stop`` reaches its children too), output to ``log_path``."""
    log = open(log_path, "w") if log_path else subprocess.DEVNULL
    try:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=REPO, **kwargs)
    finally:
        if log_path:
            log.close()  # the child holds its own copy


def stop(proc: subprocess.Popen, signum: int = signal.SIGINT, wall_timeout_s: float = 30.0) -> int:
    """``signum`` to the process group (Ctrl-C by default; SIGTERM is what a launcher sends next); SIGKILL
    after ``wall_timeout_s``. Returns the exit code."""
    if proc.poll() is None:
        os.killpg(proc.pid, signum)
        try:
            proc.wait(timeout=wall_timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode


def shutdown_problem(code: int, log_path: Path) -> str:
    """'' when a process stopped by a signal ended cleanly (exit 0, no traceback in its output), else why not."""
    text = log_path.read_text(errors="replace")
    if code == 0 and "Traceback" not in text:
        return ""
    return f"{log_path.name}: exit code {code}{', a traceback' if 'Traceback' in text else ''}:\n{text[-3000:]}"


def stop_cleanly(proc: subprocess.Popen, log_path: Path, signum: int = signal.SIGINT) -> str:
    """``stop``, then ``shutdown_problem``: '' when the process ended cleanly."""
    return shutdown_problem(stop(proc, signum), log_path)


def node_cmd(module: str, *ros_args: str) -> list[str]:
    """``python -m vla_ros.nodes.<module> --ros-args ...``: a node process as a launch file starts it."""
    return [sys.executable, "-m", f"vla_ros.nodes.{module}", "--ros-args", *ros_args]


def override_params(path: Path, node: str, **params) -> str:
    """A parameter file that sets ``params`` for ``node``, to pass after a shipped one: a file's node-specific
    entry (``/**/controller`` in config/controller.yaml) beats a ``-p`` override (rclpy applies wildcard
    entries, where ``-p`` lands, first), so an override of such a parameter comes in a file of its own."""
    import copy

    import yaml

    entries = {key: {"ros__parameters": copy.deepcopy(params)} for key in (f"/**/{node}", "/**")}  # no YAML aliases
    path.write_text(yaml.safe_dump(entries, default_flow_style=None))
    return str(path)


def controller_trusts(inputs: list[dict], node: str, since: int = 0) -> bool:
    """Whether a "controller: inputs" report (value dicts, oldest first) after index ``since`` names ``node``
    among the chunk topic's publishers, with no unnamed publisher beside it and nobody in quarantine: its
    chunks are then admitted.

    DDS discovery lets a new publisher's messages through before the ROS graph knows its node's name, and
    the controller's source gate refuses chunks while an unnamed publisher is there (it is not reported as
    untrusted until it has been unnamed for a while: ``control.sources``). On a loaded machine the name can
    take seconds to arrive, so a test that sends chunks straight to the controller waits for this first;
    counting refusals would not do."""
    return any(
        node in v.get("chunk_publishers", "").split()
        and "an unnamed node" not in v.get("chunk_publishers", "")
        and "untrusted_publishers" not in v
        for v in inputs[since:]
    )


class LaunchedGraph:
    """``vla-ros launch <file> args...`` in its own process group; stopped with SIGINT like Ctrl-C.

    With a ``log_path``, leaving the block also checks that every node ended cleanly: the runner exits 0
    after a user shutdown whatever its children did, so its log is what tells (a node that exited non-zero
    is reported as "process has died", a traceback is printed as it is)."""

    # The runner escalates to SIGTERM after sigterm_timeout (5 s by default) of wall time: on a busy machine a
    # node may well need longer to finish its cleanup, so allow it 30 s (a node that hangs still gets killed).
    SIGTERM_TIMEOUT_S = 30

    def __init__(self, launch_file: str, *args: str, log_path: Path | None = None) -> None:
        self.cmd = [
            sys.executable,
            "-m",
            "vla_ros.launch_runner",
            str(REPO / "launch" / launch_file),
            f"sigterm_timeout:={self.SIGTERM_TIMEOUT_S}",
            *args,
        ]
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> LaunchedGraph:
        self.proc = start_process(self.cmd, self.log_path)
        return self

    def __exit__(self, exc_type, *exc) -> None:
        assert self.proc is not None
        code = stop(self.proc, wall_timeout_s=self.SIGTERM_TIMEOUT_S + 30)  # past the runner's own SIGTERM and SIGKILL
        if self.log_path is not None and exc_type is None:  # a failing test reports its own failure first
            problem = shutdown_problem(code, self.log_path)
            if not problem and "process has died" in self.log_path.read_text(errors="replace"):
                problem = f"{self.log_path.name}: a node died:\n{self.log_path.read_text(errors='replace')[-3000:]}"
            assert not problem, problem


class Probe:
    """An rclpy node on simulated time in the default context, spun by ``spin_until``.

    It has an executor of its own, added once: successive ``spin_once`` calls then work through one wait's
    ready callbacks without waiting again (``rclpy.spin_once(node)`` adds and removes the node each call),
    so on a busy machine the probe keeps up with the graph and its simulated clock does not fall behind."""

    def __init__(self, name: str = "probe") -> None:
        import rclpy
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.node import Node
        from rclpy.parameter import Parameter

        if not rclpy.ok():
            rclpy.init()
        self.node = Node(name, parameter_overrides=[Parameter("use_sim_time", Parameter.Type.BOOL, True)])
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(self.node)
        self._spin_once = lambda timeout_s: self.executor.spin_once(timeout_sec=timeout_s)

    def now_s(self) -> float:
        return self.node.get_clock().now().nanoseconds * 1e-9

    def spin_until(self, predicate, wall_timeout_s: float = 60.0) -> bool:
        return spin_until(predicate, wall_timeout_s, self._spin_once)

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
        import rclpy

        self.executor.shutdown()
        self.node.destroy_node()
        rclpy.try_shutdown()


class OutputLines:
    """The lines a child process writes to a pipe, read as they come by a thread of their own, so a test can
    wait for the line that says the process got somewhere (``spin_until(lambda: lines.seen(...))``) while it
    goes on talking to the process over DDS. ``text()`` is everything read so far; ``close()`` waits for the
    end of the pipe (the process has exited or closed it)."""

    def __init__(self, pipe) -> None:
        import threading

        self._pipe = pipe
        self._lines: list[str] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, name="output_lines", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in self._pipe:
            with self._lock:
                self._lines.append(line)

    def seen(self, text: str) -> bool:
        with self._lock:
            return any(text in line for line in self._lines)

    def text(self) -> str:
        with self._lock:
            return "".join(self._lines)

    def close(self, wall_timeout_s: float = 30.0) -> str:
        self._thread.join(wall_timeout_s)
        return self.text()

"""``vla-ros bench controller``: the controller node's 100 Hz loop on wall time, idle and under load.

What is measured is the real node: ``controller_node`` runs as its own process (on wall time, so with
``loop_mode`` auto one thread running the cycles and, between them, the callbacks) and reports its loop
statistics on ``/diagnostics``; the bench sets the statistics window to exactly the measured cycles and
reads the report that covers them.
The bench process plays the rest of the system on private topics: a perfect robot (joint states at
100 Hz echoing the last command) and a policy behind a safety filter (a 1 s chunk of 50 points every
0.2 s, stamped 30 ms in the past), so the controller samples, blends and publishes as it would in use.

Two phases of ``--seconds`` each, after a warm-up: ``idle`` (nothing else running) and ``loaded``, with
a load beside it; with ``--oversized`` a phase between them in which a trusted sender puts a
100,000-point chunk on the controller's input every second (the controller reads the size from the
message's bytes and refuses it before deserializing it), reporting also the largest gap between two
commands as the rig received them. ``--load policy`` (the default) is the real ``policy_node`` with the shipped model at
10 Hz on one thread, fed the rig's joint states and a synthetic 320x240 rgb8 camera at 30 Hz on private
topics, so it runs inference every tick (its chunks go to a private topic the bench counts, not to the
controller); ``--load torch`` is one Python process doing float32 matrix products with torch on one
thread; ``--load-cmd`` runs any command. Reported per phase: period error |period - 10 ms| p50/p99/max
in ms, overruns (cycles more than 1.5 periods after the previous one), mean period, compute time p99,
the controller process's CPU use (% of one core), the machine's steal time (% of CPU time a hypervisor
gave to others: on a VM the source of jitter no scheduling inside can remove) and the node's skipped
cycles and, inline, late callbacks over the window; for the loaded phase also the load's CPU use and,
with the policy, its chunks per second over the measured window. Goal: p99 period error under 1 ms idle
and under 2 ms loaded. The JSON object is the last line of output.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

GOAL_P99_MS = {"idle": 1.0, "loaded": 2.0}
NODE_NAME = "bench_controller"
POLICY_NODE_NAME = "bench_policy"
RIG_NODE_NAME = "bench_controller_rig"
BIG_NODE_NAME = "bench_big_chunks"
BIG_POINTS = 100_000  # issue 14: one such chunk froze the loop for 5 s before it was refused
BIG_PERIOD_S = 1.0
PREFIX = "/bench_controller"
HOME = (0.0, 0.25, 1.82, 0.0, 1.07, 0.0, 0.04)
LOADS = ("policy", "torch")
LOOP_MODES = ("auto", "inline", "thread", "timer")
POLICY_MODEL = "vla_cups"  # the shipped model (models/vla_cups)
POLICY_INSTRUCTION = "pick up the red cup"
CAMERA_SIZE = (320, 240)  # width, height of the synthetic rgb8 frames
CAMERA_RATE_HZ = 30.0

DEFAULT_LOAD = (
    "import torch\n"
    "torch.set_num_threads(1)\n"
    "torch.manual_seed(0)\n"
    "a = torch.randn(384, 384)\n"
    "b = torch.randn(384, 384) / 20.0\n"
    "while True:\n"
    "    a = torch.tanh(a @ b)\n"
)


def _policy_cmd() -> list[str]:
    """policy_node on the rig's private topics; its chunks go to a topic only the bench listens to."""
    return [
        sys.executable, "-m", "vla_ros.nodes.policy_node", "--ros-args",
        "-r", f"__node:={POLICY_NODE_NAME}",
        "-r", f"/joint_states:={PREFIX}/joint_states",
        "-r", f"/vla/action_chunk:={PREFIX}/action_chunk",
        "-r", f"/vla/instruction:={PREFIX}/instruction",
        "-p", f"model:={POLICY_MODEL}",
        "-p", "rate_hz:=10.0",
        "-p", "threads:=1",
        "-p", f"instruction:={POLICY_INSTRUCTION}",
        "-p", f"image_topic:={PREFIX}/camera/image_raw",
    ]  # fmt: skip


def _big_chunk_cmd() -> list[str]:
    """A trusted process that sends a 100,000-point chunk every second on the controller's input (trusted,
    so the chunk reaches the size check; its own process, so building and sending the message does not
    stall the rig that measures the command stream)."""
    script = (
        "import sys, time, rclpy\n"
        "from rclpy.node import Node\n"
        "from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint\n"
        "from vla_ros.chunks import COMMANDED_JOINTS\n"
        "rclpy.init()\n"
        f"node = Node({BIG_NODE_NAME!r})\n"
        f"pub = node.create_publisher(JointTrajectory, {PREFIX + '/safe_action_chunk'!r}, 1)\n"
        "msg = JointTrajectory(joint_names=list(COMMANDED_JOINTS))\n"
        f"msg.points = [JointTrajectoryPoint(positions=list({HOME!r}))] * {BIG_POINTS}\n"
        "while True:\n"
        "    msg.header.stamp = node.get_clock().now().to_msg()\n"
        "    pub.publish(msg)\n"
        "    print('sent', flush=True)\n"
        f"    time.sleep({BIG_PERIOD_S})\n"
    )
    return [sys.executable, "-c", script]


def _steal_ticks() -> tuple[int, int]:
    """(steal, total) CPU ticks of the whole machine so far (Linux /proc/stat): time a hypervisor ran
    something else while this VM's CPUs wanted to run, which no scheduling inside the VM can win back."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return (ticks[7] if len(ticks) > 7 else 0), sum(ticks[:8])


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc), seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


class _Rig:
    """The bench's side of the graph: robot, chunk source and diagnostics reader, spun in a thread."""

    def __init__(self, chunk_period_s: float = 0.2, camera: bool = False) -> None:
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.node import Node
        from sensor_msgs.msg import Image, JointState
        from std_msgs.msg import Float64MultiArray
        from trajectory_msgs.msg import JointTrajectory

        from vla_ros.chunks import COMMANDED_JOINTS, ActionChunk
        from vla_ros.ros.chunk_msgs import msg_from_chunk

        self._rclpy = rclpy
        self._context = rclpy.Context()
        rclpy.init(context=self._context)
        self.node = Node(RIG_NODE_NAME, context=self._context)
        self._joints = list(COMMANDED_JOINTS)
        self._q = np.array(HOME)
        self._v = np.zeros(len(HOME))
        self.commands = 0
        self.command_times: list[int] = []  # monotonic ns of each command, while recording
        self.recording = False
        self.state: dict[str, str] = {}
        self.policy_chunks = 0
        self.loop: dict[str, str] = {}
        self.loop_stamp_ns = 0  # the latest loop report's stamp (the node's wall clock)
        self.policy: dict[str, str] = {}
        self.loop_reports = 0
        self._lock = threading.Lock()
        self._js_pub = self.node.create_publisher(JointState, f"{PREFIX}/joint_states", 10)
        self._chunk_pub = self.node.create_publisher(JointTrajectory, f"{PREFIX}/safe_action_chunk", 10)
        self.node.create_subscription(Float64MultiArray, f"{PREFIX}_forward/commands", self._on_command, 10)
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag, 10)
        self.node.create_timer(0.01, self._publish_joint_state)
        self.node.create_timer(chunk_period_s, self._publish_chunk)
        if camera:  # for a policy node beside the controller: frames, and a count of its chunks
            rng = np.random.default_rng(0)
            width, height = CAMERA_SIZE
            self._image = Image(width=width, height=height, encoding="rgb8", step=3 * width)
            self._image.data = rng.integers(
                0, 256, (height, width, 3), dtype=np.uint8
            ).tobytes()  # a fixed random picture
            self._image_pub = self.node.create_publisher(Image, f"{PREFIX}/camera/image_raw", 10)
            self.node.create_timer(1.0 / CAMERA_RATE_HZ, self._publish_image)
            self.node.create_subscription(JointTrajectory, f"{PREFIX}/action_chunk", self._on_policy_chunk, 10)
        self._ActionChunk, self._msg_from_chunk, self._JointState = ActionChunk, msg_from_chunk, JointState
        self._executor = SingleThreadedExecutor(context=self._context)
        self._executor.add_node(self.node)
        self._thread = threading.Thread(target=self._spin, name="bench-rig", daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        try:
            self._executor.spin()
        except Exception:  # the context is shut down at the end of the bench
            pass

    def _on_command(self, msg) -> None:
        q = np.array(msg.data)  # a perfect robot: it is where it was told to be, moving as commanded
        self._v = (q - self._q) / 0.01
        self._q = q
        self.commands += 1
        if self.recording:
            self.command_times.append(time.monotonic_ns())

    def _on_policy_chunk(self, msg) -> None:
        self.policy_chunks += 1

    def _on_diag(self, msg) -> None:
        for status in msg.status:
            if status.name == f"{NODE_NAME}: loop":
                with self._lock:
                    self.loop = {kv.key: kv.value for kv in status.values}
                    self.loop_stamp_ns = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
                    self.loop_reports += 1
            elif status.name == f"{NODE_NAME}: state":
                with self._lock:
                    self.state = {kv.key: kv.value for kv in status.values}
            elif status.name == f"{POLICY_NODE_NAME}: policy":
                with self._lock:
                    self.policy = {kv.key: kv.value for kv in status.values} | {"_message": status.message}

    def _publish_joint_state(self) -> None:
        js = self._JointState(name=self._joints, position=self._q.tolist(), velocity=self._v.tolist())
        js.header.stamp = self.node.get_clock().now().to_msg()
        self._js_pub.publish(js)

    def _publish_image(self) -> None:
        self._image.header.stamp = self.node.get_clock().now().to_msg()
        self._image.data[0] = (
            self._image.data[0] + 1
        ) % 256  # a live camera's noise: one picture repeated is a frozen camera (no chunks)
        self._image_pub.publish(self._image)

    def _publish_chunk(self) -> None:
        now_ns = self.node.get_clock().now().nanoseconds
        stamp_ns = now_ns - 30_000_000  # observation 30 ms old when the chunk arrives
        t = stamp_ns * 1e-9 + 0.02 * np.arange(50)
        wave = np.sin(2.0 * np.pi * 0.25 * (t % 4.0))[:, None]  # (50, 1), a slow periodic reach
        points = np.array(HOME) + wave * np.array([0.3, -0.15, 0.2, 0.3, -0.25, 0.3, -0.01])
        chunk = self._ActionChunk(tuple(self._joints), stamp_ns, 0.02 * np.arange(50), points)
        self._chunk_pub.publish(self._msg_from_chunk(chunk))

    def report(self) -> tuple[int, dict[str, str]]:
        with self._lock:
            return self.loop_reports, dict(self.loop)

    def stamped_report(self) -> tuple[int, dict[str, str]]:
        """(stamp ns, values) of the latest loop report."""
        with self._lock:
            return self.loop_stamp_ns, dict(self.loop)

    def policy_report(self) -> dict[str, str]:
        with self._lock:
            return dict(self.policy)

    def close(self) -> None:
        self._executor.shutdown(timeout_sec=2.0)
        self.node.destroy_node()
        self._rclpy.try_shutdown(context=self._context)


def _wait(predicate, timeout_s: float, what: str) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.05)
    raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def _measure(rig: _Rig, pid: int, cycles: int, timeout_s: float, raw: dict | None = None) -> dict:
    """Wait for the loop report whose window holds only cycles run from now on, and read it: the window's
    ``cycles`` are counted from the first report stamped from now on (the node stamps them on the same
    wall clock), so none of them ran before now. ``raw``: filled with the two reports and the samples."""
    begin_ns = time.time_ns()
    cpu0, t0, steal0 = _cpu_seconds(pid), time.monotonic(), _steal_ticks()
    _wait(lambda: rig.stamped_report()[0] >= begin_ns, timeout_s, "a loop report from after the start")
    start_stamp_ns, start = rig.stamped_report()
    start_cycles = int(start["cycles"])
    _wait(lambda: int(rig.report()[1].get("cycles", 0)) >= start_cycles + cycles, timeout_s, "the loop report")
    cpu1, t1, steal1 = _cpu_seconds(pid), time.monotonic(), _steal_ticks()
    end_stamp_ns, loop = rig.stamped_report()
    if raw is not None:
        raw.update(
            begin_ns=begin_ns,
            start=start,
            start_stamp_ns=start_stamp_ns,
            end=loop,
            end_stamp_ns=end_stamp_ns,
            cpu_s=[cpu0, cpu1],
            wall_s=[t0, t1],
            steal_ticks=[list(steal0), list(steal1)],
        )
    # Counters that the node reports as totals: their growth over about the window (a report lags by up
    # to one diagnostics period).
    grown = {k: int(loop[k]) - int(start.get(k, 0)) for k in ("skipped_cycles", "late_callbacks") if k in loop}
    return grown | {
        "period_err_ms_p50": round(float(loop["period_err_ms.p50"]), 4),
        "period_err_ms_p99": round(float(loop["period_err_ms.p99"]), 4),
        "period_err_ms_max": round(float(loop["period_err_ms.max"]), 4),
        "overruns": int(loop["overruns_window"]),
        "period_ms_mean": round(float(loop["period_ms_mean"]), 4),
        "compute_ms_p99": round(float(loop["compute_ms.p99"]), 4),
        "cycles": int(loop["window"]),
        "cpu_pct": round(100.0 * (cpu1 - cpu0) / (t1 - t0), 1),
        "steal_pct": round(100.0 * (steal1[0] - steal0[0]) / max(1, steal1[1] - steal0[1]), 2),
    }


def _measure_oversized(rig: _Rig, pid: int, cycles: int, seconds: float, log, raw: dict | None = None) -> dict:
    """Idle rig plus a 100,000-point chunk every second: the loop's figures, the largest gap between two
    commands as the rig received them (wall time), and how many of the chunks the controller refused."""
    big_log = tempfile.TemporaryFile()
    big = subprocess.Popen(_big_chunk_cmd(), stdout=big_log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        log(f"oversized: measuring {cycles} cycles with a {BIG_POINTS}-point chunk every {BIG_PERIOD_S:g} s")
        _wait(lambda: "sent" in _log_tail(big_log) or big.poll() is not None, 120, "the first oversized chunk")
        if big.poll() is not None:
            raise RuntimeError(f"the oversized-chunk sender exited: {_log_tail(big_log)}")
        refused0 = int(rig.state.get("rejected.too_many_points", 0))
        rig.command_times, rig.recording = [], True
        figures = _measure(rig, pid, cycles, seconds * 3 + 30, raw)
        rig.recording = False
        gaps_ms = np.diff(np.array(rig.command_times)) * 1e-6 if len(rig.command_times) > 1 else np.zeros(1)
        figures["max_command_gap_ms"] = round(float(gaps_ms.max()), 3)
        figures["command_gaps_over_20ms"] = int((gaps_ms > 20.0).sum())
        _wait(
            lambda: int(rig.state.get("rejected.too_many_points", 0)) > refused0,
            10,
            "the controller's report of a refused chunk",
        )
        figures["oversized_refused"] = int(rig.state.get("rejected.too_many_points", 0)) - refused0
        return figures
    finally:
        _stop(big)


def _stop(proc: subprocess.Popen | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except (subprocess.TimeoutExpired, ProcessLookupError):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def _log_tail(log_file, n: int = 2000) -> str:
    log_file.seek(0)
    return log_file.read().decode(errors="replace")[-n:]


def run(
    seconds: float = 20.0,
    warmup_s: float = 3.0,
    load: str = "policy",
    load_cmd: str | None = None,
    rate_hz: float = 100.0,
    realtime_priority: int = 0,
    loop_mode: str = "auto",
    blend: bool = True,
    oversized: bool = False,
    log=print,
    raw: bool = False,
) -> dict:
    """``load``: policy or torch; a ``load_cmd`` replaces it with any command. With ``raw`` the result
    also holds, per phase, the loop reports the figures were read from and the samples (``"raw"``)."""
    if load not in LOADS or loop_mode not in LOOP_MODES:
        raise ValueError(
            f"load must be one of {LOADS} and loop_mode one of {LOOP_MODES}, got {load!r} and {loop_mode!r}"
        )
    # DDS stays on this machine unless the caller decided otherwise.
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    os.environ.setdefault("ROS_LOCALHOST_ONLY", "1")
    cycles = int(round(seconds * rate_hz))
    node_cmd = [
        sys.executable, "-m", "vla_ros.nodes.controller_node", "--ros-args",
        "-r", f"__node:={NODE_NAME}",
        "-r", f"/joint_states:={PREFIX}/joint_states",
        "-r", f"/vla/safe_action_chunk:={PREFIX}/safe_action_chunk",
        "-p", f"position_controller:={PREFIX.lstrip('/')}_forward",
        "-p", f"rate_hz:={rate_hz}",
        "-p", f"loop_stats_window:={cycles}",
        "-p", "diagnostics_period_s:=0.5",
        "-p", f"realtime_priority:={realtime_priority}",
        "-p", f"loop_mode:={loop_mode}",
        "-p", f"trusted_publishers:=[/{RIG_NODE_NAME},/{BIG_NODE_NAME}]",  # they play the safety filter
    ]  # fmt: skip
    use_policy = load_cmd is None and load == "policy"
    if load_cmd:
        load_argv = shlex.split(load_cmd)
    elif use_policy:
        load_argv = _policy_cmd()
    else:
        load_argv = [sys.executable, "-c", DEFAULT_LOAD]
    controller = load_proc = rig = None
    result: dict = {}
    samples: dict = {"idle": {}, "loaded": {}} | ({"oversized": {}} if oversized else {})
    try:
        node_log = tempfile.TemporaryFile()  # a file, not a pipe: nobody reads it while the node runs
        controller = subprocess.Popen(node_cmd, stdout=node_log, stderr=subprocess.STDOUT, start_new_session=True)
        rig = _Rig(camera=use_policy)
        _wait(lambda: rig.commands > 50 or controller.poll() is not None, 60, "the controller's first commands")
        if controller.poll() is not None:
            raise RuntimeError(f"controller_node exited: {_log_tail(node_log)}")
        log(f"controller running (pid {controller.pid}); warm-up {warmup_s:g} s")
        time.sleep(warmup_s)
        log(f"idle: measuring {cycles} cycles")
        result["idle"] = _measure(rig, controller.pid, cycles, seconds * 3 + 30, samples["idle"])
        result["loop_mode"] = rig.report()[1].get("loop_mode", "unknown")  # the node's resolved mode
        if oversized:
            result["oversized"] = _measure_oversized(rig, controller.pid, cycles, seconds, log, samples["oversized"])
        load_log = tempfile.TemporaryFile()
        load_proc = subprocess.Popen(load_argv, stdout=load_log, stderr=subprocess.STDOUT, start_new_session=True)
        if use_policy:  # loading torch and the model takes a while; measure only once chunks flow
            log("loaded: waiting for the policy node's first chunks")
            _wait(lambda: rig.policy_chunks > 5 or load_proc.poll() is not None, 180, "the policy node's first chunks")
        time.sleep(max(2.0, warmup_s))
        if load_proc.poll() is not None:
            raise RuntimeError(
                f"the load exited with status {load_proc.returncode}: {load_argv}\n{_log_tail(load_log)}"
            )
        log(f"loaded: measuring {cycles} cycles beside {' '.join(load_argv)[:80]!r}")
        chunks0, load_cpu0, t0 = rig.policy_chunks, _cpu_seconds(load_proc.pid), time.monotonic()
        result["loaded"] = _measure(rig, controller.pid, cycles, seconds * 3 + 30, samples["loaded"])
        chunks1, load_cpu1, t1 = rig.policy_chunks, _cpu_seconds(load_proc.pid), time.monotonic()
        result["load_cpu_pct"] = round(100.0 * (load_cpu1 - load_cpu0) / (t1 - t0), 1)  # over the measured window
        if use_policy:
            result["policy_chunks_per_s"] = round((chunks1 - chunks0) / (t1 - t0), 2)
            policy = rig.policy_report()
            result["policy_ticks"] = int(policy.get("ticks", 0))
            result["policy_inference_ms_p50"] = float(policy.get("inference_ms.p50", "nan"))
            result["policy_status"] = policy.get("_message", "no report")
            if chunks1 == chunks0:  # the loaded figures would be beside an idle policy
                raise RuntimeError(
                    f"the policy node published no chunk while measured ({result['policy_status']}): "
                    f"{_log_tail(load_log)}"
                )
        result["commands_received"] = rig.commands
    finally:
        _stop(load_proc)
        _stop(controller)
        if rig is not None:
            rig.close()
    result["rate_hz"] = rate_hz
    result["realtime_priority"] = realtime_priority
    result["seconds"] = seconds
    result["clock"] = "wall"
    result["load"] = "cmd" if load_cmd else load
    if load_cmd:
        result["load_cmd"] = load_cmd
    elif use_policy:
        result["load_cmd"] = (
            f"policy_node, model {POLICY_MODEL}, 10 Hz, 1 thread, {CAMERA_SIZE[0]}x{CAMERA_SIZE[1]} rgb8 camera at "
            f"{CAMERA_RATE_HZ:g} Hz and joint states at 100 Hz"
        )
    else:
        result["load_cmd"] = "python, torch float32 384x384 matmul + tanh loop, 1 thread"
    result["cpu_count"] = os.cpu_count()
    result["goal_p99_ms"] = GOAL_P99_MS
    result["meets_goal"] = all(result[k]["period_err_ms_p99"] < GOAL_P99_MS[k] for k in GOAL_P99_MS)
    if blend:
        from vla_ros.chunks import COMMANDED_JOINTS
        from vla_ros.control import ControllerConfig, bundled_urdf_path
        from vla_ros.control.blend_eval import compare

        result["blend"] = compare(ControllerConfig.from_urdf(bundled_urdf_path(), COMMANDED_JOINTS), seeds=range(10))
    if raw:
        result["raw"] = samples
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="vla-ros bench controller",
        description="Timing of controller_node's 100 Hz loop on wall time, idle and beside a load; the last line of "
        "output is a JSON object.",
        epilog="example: vla-ros bench controller --seconds 20 --json\n"
        "         vla-ros bench controller --load torch --json\n"
        "         vla-ros bench controller --oversized --load torch --json\n"
        "         vla-ros bench controller --load-cmd 'stress-ng --cpu 1' --json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured wall seconds per phase (default 20)")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds before each measurement (default 3)")
    parser.add_argument(
        "--load", choices=LOADS, default="policy",
        help="what runs beside the controller in the loaded phase: policy (policy_node with the shipped model, fed a "
        "synthetic camera; the default) or torch (a 1-thread torch matmul loop)",
    )  # fmt: skip
    parser.add_argument("--load-cmd", default=None, help="run this command as the load instead of --load")
    parser.add_argument(
        "--loop-mode",
        choices=LOOP_MODES,
        default="auto",
        help="the node's loop_mode parameter (auto = inline on wall time: cycles and callbacks in one thread)",
    )
    parser.add_argument(
        "--realtime-priority",
        type=int,
        default=0,
        help="the node's realtime_priority parameter (0 = normal scheduling, the default)",
    )
    parser.add_argument("--no-blend", action="store_true", help="skip the blend-mode comparison (crossfade vs freeze)")
    parser.add_argument(
        "--oversized",
        action="store_true",
        help=f"add a phase with a {BIG_POINTS}-point chunk every {BIG_PERIOD_S:g} s from a trusted sender: "
        "the loop's figures and the largest gap in the command stream",
    )
    parser.add_argument(
        "--raw",
        default=None,
        metavar="FILE",
        help="also write, per phase, the loop reports the figures come from and the samples to FILE (JSON)",
    )
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.warmup < 0:
        parser.error(f"--seconds must be > 0 and --warmup >= 0, got {args.seconds} and {args.warmup}")
    log = (lambda *_: None) if args.json else (lambda msg: print(msg, file=sys.stderr))
    result = run(
        seconds=args.seconds,
        warmup_s=args.warmup,
        load=args.load,
        load_cmd=args.load_cmd,
        realtime_priority=args.realtime_priority,
        loop_mode=args.loop_mode,
        blend=not args.no_blend,
        oversized=args.oversized,
        log=log,
        raw=bool(args.raw),
    )
    if args.raw:
        with open(args.raw, "w") as f:
            json.dump(result.pop("raw"), f)
    if not args.json:
        for phase in ("idle", "oversized", "loaded"):
            if phase not in result:
                continue
            print(f"{phase:>7}: " + ", ".join(f"{k} {v}" for k, v in result[phase].items()))
    print(json.dumps(result))
    return 0

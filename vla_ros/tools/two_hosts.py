"""``vla-ros demo-two-hosts``: the learned demo split over two computers, simulated by network namespaces.

Namespace ``gpu_host`` runs ``policy_node`` (``robot.launch.xml run_robot_side:=false``); namespace
``robot`` runs ``sim_node``, ``safety_filter_node`` and ``controller_node`` (``sim.launch.xml
run_policy:=false``). They share nothing but a veth link and DDS over it (``vla_ros.tools.netns``); the
policy runs on the sim's ``/clock``, which reaches it over the link. A watcher on the robot side
(``vla_ros.tools.robot_watch``) records what the controller receives. The same episode then runs on one
host (every node in the root namespace, DDS on loopback), so the summary compares the latency from the
observation stamp to the chunk's arrival at the controller on both. Exit 0 when the named cup was lifted
across the link (like ``vla-ros demo``).

``Run`` is also what the two-host tests drive: take the link down and up, power the GPU host off (link
down, every process in its namespace killed without a goodbye) and boot it again, while the watcher
records; ``analyse`` turns a record into figures.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from vla_ros.tools import netns

LOOPBACK_ENV = {"ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST", "ROS_LOCALHOST_ONLY": "1"}


def network_profile() -> str:
    """The shipped Fast DDS profile for hosts on a network (config/fastdds_network.xml)."""
    from vla_ros.launch_runner.packages import find_package_share

    return str(find_package_share("vla_ros") / "config" / "fastdds_network.xml")


def _launch_file(name: str) -> str:
    from vla_ros.launch_runner import find_launch_file

    return str(find_launch_file("vla_ros", name))


class Watch:
    """The robot_watch process: its newest state line, its events and, once stopped, its record."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.state: dict = {}
        self.events: queue.Queue[dict] = queue.Queue()
        self.record: dict | None = None
        self._done = threading.Event()
        threading.Thread(target=self._read, name="watch-reader", daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                continue  # a stray print of a library
            if "state" in msg:
                self.state = msg["state"]
            elif "event" in msg:
                self.events.put(msg)
            elif "record" in msg:
                self.record = msg["record"]
        self._done.set()

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def wait(self, predicate, wall_timeout_s: float, what: str, alive=()) -> dict:
        """The first state for which ``predicate`` holds; TimeoutError naming ``what`` otherwise. Every
        process in ``alive`` must keep running meanwhile (RuntimeError with its name if one exits)."""
        end = time.monotonic() + wall_timeout_s
        while time.monotonic() < end:
            state = self.state
            if state and predicate(state):
                return state
            if self._done.is_set():
                raise RuntimeError(f"the robot-side watcher exited while waiting for {what}")
            for name, proc in alive:
                if proc is not None and proc.poll() is not None:
                    raise RuntimeError(f"{name} exited (code {proc.returncode}) while waiting for {what}")
            time.sleep(0.02)
        raise TimeoutError(f"no {what} within {wall_timeout_s:.0f} s (last state: {self.state})")

    def wait_wall(self, seconds: float) -> dict:
        """The state ``seconds`` of wall time from now (e.g. for the next 1 Hz diagnostics, on wall time)."""
        mono = time.monotonic() + seconds
        return self.wait(lambda s: s["mono"] >= mono, seconds + 30.0, f"{seconds:.1f} s of wall time")

    def state_after(self, mono: float, wall_timeout_s: float = 30.0) -> dict:
        """The first state line written after the monotonic instant ``mono`` (its ``t`` is no earlier)."""
        return self.wait(lambda s: s["mono"] > mono, wall_timeout_s, "a fresh state line")

    def wait_sim(self, t_s: float, wall_timeout_s: float = 120.0) -> dict:
        return self.wait(lambda s: s["t"] >= t_s, wall_timeout_s, f"simulated time {t_s:.2f} s")

    def wait_event(self, name: str, wall_timeout_s: float) -> dict:
        end = time.monotonic() + wall_timeout_s
        while time.monotonic() < end:
            try:
                event = self.events.get(timeout=0.1)
            except queue.Empty:
                continue
            if event["event"] == name:
                return event
            if event["event"] == "error":
                raise RuntimeError(f"robot-side watcher: {event['detail']}")
        raise TimeoutError(f"no {name} event within {wall_timeout_s:.0f} s")

    def finish(self, wall_timeout_s: float = 30.0) -> dict:
        if self.proc.poll() is None:
            try:
                self.send("stop")
            except (BrokenPipeError, OSError):
                pass
        self._done.wait(wall_timeout_s)
        netns.stop(self.proc, timeout_s=10.0)
        if self.record is None:
            raise RuntimeError("the robot-side watcher ended without its record")
        return self.record


class Run:
    """One graph of the pick task: two hosts (``pair`` given) or one (``pair`` None, root namespace).

    ``start`` launches, waits for the first safe chunk at the controller, then restarts the episode and
    records it. Every link or host action is logged in ``events`` as (time.monotonic(), name).
    """

    def __init__(
        self,
        pair: netns.HostPair | None,
        out: Path,
        color: str = "red",
        seed: int = 0,
        model: str = "vla_cups",
        instruction: str = "",
        backend: str = "torch",
        device: str = "auto",
        discovery: str = "subnet",
        real_time_factor: float = 1.0,
        sensor_qos: str = "best_effort",
        dds_profile: str | None = "",
        policy_args: tuple[str, ...] = (),
        gpu_argv: list[str] | None = None,
        robot_args: tuple[str, ...] = (),
    ) -> None:
        from vla_ros.model.io import resolve_model_dir

        self.pair = pair
        self.out = out
        self.color = color
        self.seed = seed
        self.model = str(resolve_model_dir(model))
        self.instruction = instruction or f"pick up the {color} cup"
        self.backend, self.device, self.discovery = backend, device, discovery
        self.robot_args = robot_args  # more sim.launch.xml arguments for the robot's half
        self.real_time_factor = real_time_factor
        # The network choices (README "Running on two computers"), for two hosts only: the policy reads camera
        # and joint states best effort across the link, and Fast DDS gets socket buffers that hold a frame.
        self.sensor_qos = sensor_qos
        self.dds_profile = network_profile() if dds_profile == "" else dds_profile
        self.policy_args = tuple(policy_args)
        self.gpu_argv = gpu_argv  # what the GPU host runs instead of the policy's launch (tests)
        self.robot: subprocess.Popen | None = None
        self.gpu: subprocess.Popen | None = None
        self.watch: Watch | None = None
        self.events: list[tuple[float, str]] = []
        self.t0: float | None = None
        self._logs: list = []
        self._boots = 0
        out.mkdir(parents=True, exist_ok=True)

    # ---- processes -------------------------------------------------------------------------------
    def _log(self, name: str):
        fh = open(self.out / f"{name}.log", "a")
        self._logs.append(fh)
        return fh

    def _spawn(self, host: str | None, argv: list[str], log: str, **kwargs) -> subprocess.Popen:
        if "stdout" not in kwargs:
            kwargs["stdout"], kwargs["stderr"] = self._log(log), subprocess.STDOUT
        if host is None:  # the root namespace: DDS stays on loopback
            env = {**os.environ, **LOOPBACK_ENV}
            return subprocess.Popen(argv, env=env, start_new_session=True, **kwargs)
        env = dict(os.environ)
        if self.dds_profile:
            env["FASTDDS_DEFAULT_PROFILES_FILE"] = str(
                self.dds_profile
            )  # Humble's Fast DDS 2.6: FASTRTPS_DEFAULT_PROFILES_FILE
        return self.pair.popen(host, argv, discovery=self.discovery, env=env, **kwargs)

    def _policy_args(self) -> list[str]:
        return [
            f"model:={self.model}",
            f"instruction:={self.instruction}",
            f"backend:={self.backend}",
            *self.policy_args,
        ]

    def start_robot(self) -> None:
        launch = [
            sys.executable,
            "-m",
            "vla_ros.launch_runner",
            _launch_file("sim.launch.xml"),
            "policy:=vla",
            f"seed:={self.seed}",
            f"real_time_factor:={self.real_time_factor}",
            *self.robot_args,
        ]
        if self.pair is None:
            self.robot = self._spawn(None, [*launch, *self._policy_args()], "one_host")
        else:
            self.robot = self._spawn(self.pair.robot, [*launch, "run_policy:=false"], "robot")

    def start_gpu(self) -> None:
        """The GPU host's half: the policy alone, on the robot's /clock."""
        assert self.pair is not None
        self._boots += 1
        launch = [
            sys.executable,
            "-m",
            "vla_ros.launch_runner",
            _launch_file("robot.launch.xml"),
            "run_robot_side:=false",
            "use_sim_time:=true",
            f"device:={self.device}",
            f"sensor_qos:={self.sensor_qos}",
            *self._policy_args(),
        ]
        self.gpu = self._spawn(self.pair.gpu, self.gpu_argv or launch, "gpu_host")
        self.events.append((time.monotonic(), f"gpu_host boot {self._boots}"))

    def start_watch(self) -> None:
        argv = [sys.executable, "-m", "vla_ros.tools.robot_watch", "--color", self.color]
        host = None if self.pair is None else self.pair.robot
        proc = self._spawn(
            host,
            argv,
            "watch",
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log("watch"),
            text=True,
            bufsize=1,
        )
        self.watch = Watch(proc)

    def alive(self) -> list[tuple[str, subprocess.Popen | None]]:
        return [("the robot's launch" if self.pair else "the launch", self.robot), ("the GPU host's launch", self.gpu)]

    def start(self, wall_timeout_s: float = 240.0) -> float:
        """Launch everything, wait for the first safe chunk at the controller, restart the episode; returns
        the simulated time the recorded episode starts at."""
        self.start_robot()
        if self.pair is not None:
            self.start_gpu()
        self.start_watch()
        self.watch.wait(lambda s: s["safe_chunks"] > 0, wall_timeout_s, "safe chunk at the controller", self.alive())
        self.watch.send("reset")
        self.t0 = self.watch.wait_event("reset", 60.0)["t0"]
        return self.t0

    # ---- faults ----------------------------------------------------------------------------------
    def link_down(self) -> float:
        """Unplug; returns a simulated time no earlier than the moment it happened."""
        self.pair.link_down()
        mono = time.monotonic()
        self.events.append((mono, "link down"))
        return self.watch.state_after(mono)["t"]

    def link_up(self) -> dict:
        """Plug back in; returns the watcher's first state after it."""
        self.pair.link_up()
        mono = time.monotonic()
        self.events.append((mono, "link up"))
        return self.watch.state_after(mono)

    def power_off_gpu(self) -> float:
        """The GPU host vanishes: the cable goes dead and every process on it dies at once (SIGKILL, so
        no DDS goodbye: the robot learns nothing beyond the silence). Returns the time as ``link_down``."""
        t = self.link_down()
        self.pair.kill_processes(self.pair.gpu, signal.SIGKILL)
        if self.gpu is not None:
            self.gpu.wait(timeout=10)
        self.events.append((time.monotonic(), "gpu_host off"))
        return t

    def boot_gpu(self) -> None:
        """The GPU host comes back: link up, the policy's half launched afresh (a new DDS participant)."""
        self.link_up()
        self.start_gpu()

    # ---- end ---------------------------------------------------------------------------------------
    def finish(self) -> dict:
        """Stop the watcher (its record), then every process; returns the record with ``events``."""
        record = self.watch.finish() if self.watch is not None else {}
        if self.pair is not None:
            record["udp"] = {host: self.pair.udp_counters(host) for host in (self.pair.gpu, self.pair.robot)}
        for proc in (self.gpu, self.robot):
            netns.stop(proc)
        record["events"] = self.events
        (self.out / "record.json").write_text(json.dumps(record))
        return record

    def close(self) -> None:
        """Stop whatever still runs (idempotent; the namespaces are the caller's)."""
        if self.watch is not None and self.watch.proc.poll() is None:
            netns.stop(self.watch.proc, timeout_s=5.0)
        for proc in (self.gpu, self.robot):
            netns.stop(proc)
        for fh in self._logs:
            fh.close()
        self._logs.clear()

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ---- analysis ---------------------------------------------------------------------------------------
def sim_time_at(record: dict, mono: float) -> float:
    """Simulated time at a monotonic instant, from the watcher's rows (commands, 100 Hz)."""
    rows = np.asarray([r[:2] for r in record["commands"]]) if record["commands"] else np.zeros((0, 2))
    order = np.argsort(rows[:, 1]) if len(rows) else []
    if len(rows) < 2:
        raise ValueError("too few rows to place an instant on simulated time")
    return float(np.interp(mono, rows[order, 1], rows[order, 0]))


def percentiles(values, qs=(50, 99)) -> dict:
    values = list(values)
    if not values:
        return {f"p{q}": None for q in qs}
    return {f"p{q}": round(float(np.percentile(values, q)), 1) for q in qs}


def latest_diag(record: dict, name: str, before_mono: float | None = None) -> dict | None:
    """The newest /diagnostics status called ``name`` (e.g. "controller: state"), optionally before an instant."""
    found = None
    for entry in record["diag"]:
        if entry["name"] == name and (before_mono is None or entry["mono"] <= before_mono):
            found = entry
    return found


def analyse(record: dict, color: str) -> dict:
    """Figures of one recorded episode (from ``t0`` on)."""
    t0 = record["t0"]
    safe = [r for r in record["safe"] if r[0] >= t0]
    chunks = [r for r in record["chunks"] if r[0] >= t0]
    filt = latest_diag(record, "safety_filter: filter")
    ctrl = latest_diag(record, "controller: state")
    return {
        "lifted": color if record["lifted_at"] is not None else None,
        "time_to_lift_s": None if record["lifted_at"] is None else round(record["lifted_at"] - t0, 3),
        "safe_chunks_at_controller": len(safe),
        "latency_at_controller_ms": percentiles((r[0] - r[2]) * 1e3 for r in safe),
        "latency_policy_chunk_at_robot_ms": percentiles((r[0] - r[2]) * 1e3 for r in chunks),
        "filter_rejected": {
            k: int(v) for k, v in (filt or {"values": {}})["values"].items() if k.startswith("rejected.")
        },
        "controller_rejected": {
            k: int(v) for k, v in (ctrl or {"values": {}})["values"].items() if k.startswith("rejected.")
        },
        "commands": len([r for r in record["commands"] if r[0] >= t0]),
        "latency_stages_ms": stage_figures(r for r in record.get("timing", []) if r["stamp_ns"] * 1e-9 >= t0),
    }


def stage_figures(records) -> dict:
    """[p50, p99] per segment of a chunk's way and for the whole (``vla_ros.latency``), from the nodes' records."""
    from vla_ros.latency import LatencyTable, timing_from_dict

    table = LatencyTable()
    for r in records:
        table.add(timing_from_dict(r))
    return {name: [v["p50"], v["p99"]] for name, v in table.summary()["segments_ms"].items() if v}


def commands_within_limits(record: dict) -> bool:
    from vla_ros.chunks import COMMANDED_JOINTS
    from vla_ros.control.config import limits_from_urdf
    from vla_ros.sim import default_urdf_path

    lim = limits_from_urdf(default_urdf_path(), list(COMMANDED_JOINTS))
    q = np.asarray([r[2:] for r in record["commands"]])
    return bool(q.size and np.all(np.isfinite(q)) and np.all(q >= lim.lower - 1e-9) and np.all(q <= lim.upper + 1e-9))


# ---- the demo ---------------------------------------------------------------------------------------
def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="vla-ros demo-two-hosts",
        description="The learned pick demo with the policy on a simulated GPU host and sim, safety filter and "
        "controller on a simulated robot computer (network namespaces, needs root), then on one host for comparison.",
        epilog="example: sudo .venv/bin/vla-ros demo-two-hosts --color red --seed 0 --out runs/two-hosts",
    )
    parser.add_argument("--color", default="red", choices=["red", "green", "blue"], help="cup to pick")
    parser.add_argument("--seed", type=int, default=0, help="episode seed (cup positions)")
    parser.add_argument("--model", default="vla_cups", help="policy model (folder or name under models/)")
    parser.add_argument("--backend", default="torch", choices=["torch", "onnx"], help="policy inference backend")
    parser.add_argument("--device", default="auto", help="policy device on the GPU host (auto = CUDA when available)")
    parser.add_argument(
        "--real-time-factor",
        type=float,
        default=1.0,
        help="simulated seconds per wall second (below 1 gives a loaded machine's policy more time)",
    )
    parser.add_argument("--timeout", type=float, default=20.0, help="simulated seconds per episode before giving up")
    parser.add_argument("--wall-timeout", type=float, default=300.0, help="wall seconds per run before giving up")
    parser.add_argument(
        "--discovery",
        default="subnet",
        choices=["subnet", "static"],
        help="subnet: multicast discovery (ROS_AUTOMATIC_DISCOVERY_RANGE=SUBNET); static: ROS_STATIC_PEERS = the other "
        "host, no multicast",
    )
    parser.add_argument(
        "--sensor-qos",
        default="best_effort",
        choices=["best_effort", "reliable"],
        help="how the GPU host's policy subscribes camera and joint states across the link",
    )
    parser.add_argument(
        "--dds-profile",
        default="",
        help="Fast DDS XML profile for both hosts (default: config/fastdds_network.xml; 'none' for none)",
    )
    parser.add_argument("--no-one-host", action="store_true", help="skip the one-host run (no comparison)")
    parser.add_argument(
        "--ns-suffix", default="", help="suffix for the namespace names (gpu_host<suffix>, robot<suffix>)"
    )
    parser.add_argument("--out", type=Path, default=None, help="output folder (default runs/two-hosts-<date>)")
    return parser.parse_args(argv)


def _episode(run: Run, timeout_s: float, wall_timeout_s: float) -> dict:
    """Start ``run``, record until the cup is lifted (+1 s) or ``timeout_s`` of simulated time, return the record."""
    try:
        t0 = run.start(wall_timeout_s)

        def lifted_or_late(s: dict) -> bool:
            return (s["lifted_at"] is not None and s["t"] >= s["lifted_at"] + 1.0) or s["t"] >= t0 + timeout_s

        run.watch.wait(lifted_or_late, wall_timeout_s, "end of the episode", run.alive())
    finally:
        record = run.finish() if run.watch is not None else {}
    return record


def main(argv: list[str] | None = None) -> int:
    args = _parse(list(argv or []))
    ok, reason = netns.available()
    if not ok:
        print(f"vla-ros demo-two-hosts: cannot simulate two hosts here: {reason}", file=sys.stderr)
        return 2
    out = args.out or Path("runs") / datetime.datetime.now().strftime("two-hosts-%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    # SIGTERM (a CI timeout, kill) must still tear the namespaces down: turn it into SystemExit.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    common = dict(
        color=args.color,
        seed=args.seed,
        model=args.model,
        backend=args.backend,
        device=args.device,
        real_time_factor=args.real_time_factor,
    )
    pair = netns.HostPair(gpu=netns.GPU_HOST + args.ns_suffix, robot=netns.ROBOT + args.ns_suffix)
    print(
        f"vla-ros demo-two-hosts: {pair.gpu} ({pair.address(pair.gpu)}) runs the policy; {pair.robot} "
        f"({pair.address(pair.robot)}) runs sim, safety filter and controller; discovery {args.discovery}",
        flush=True,
    )
    try:
        with (
            pair,
            Run(
                pair,
                out / "two_hosts",
                discovery=args.discovery,
                sensor_qos=args.sensor_qos,
                dds_profile=None if args.dds_profile == "none" else args.dds_profile,
                **common,
            ) as run,
        ):
            two = _episode(run, args.timeout, args.wall_timeout)
    except (RuntimeError, TimeoutError, netns.NetnsError) as err:
        print(f"vla-ros demo-two-hosts: two-host run failed: {err} (logs in {out / 'two_hosts'})", file=sys.stderr)
        return 1
    one = None
    if not args.no_one_host:
        print("vla-ros demo-two-hosts: the same episode on one host, for comparison", flush=True)
        try:
            with Run(None, out / "one_host", **common) as run:
                one = _episode(run, args.timeout, args.wall_timeout)
        except (RuntimeError, TimeoutError) as err:
            print(f"vla-ros demo-two-hosts: one-host run failed: {err}", file=sys.stderr)
    summary = _summary(args, pair, two, one, out)
    print(json.dumps(summary))
    return 0 if summary["two_hosts"]["lifted"] == args.color else 1


def _summary(args, pair: netns.HostPair, two: dict, one: dict | None, out: Path) -> dict:
    a2 = analyse(two, args.color)
    a2["commands_within_limits"] = commands_within_limits(two)
    a2["udp_receive_buffer_drops"] = {host: c.get("RcvbufErrors") for host, c in two.get("udp", {}).items()}
    a1 = analyse(one, args.color) if one else None
    summary = {
        "motion": "learned policy",
        "instruction": f"pick up the {args.color} cup",
        "target": args.color,
        "seed": args.seed,
        "real_time_factor": args.real_time_factor,
        "hosts": {
            "gpu_host": {"namespace": pair.gpu, "address": pair.address(pair.gpu), "runs": ["policy_node"]},
            "robot": {
                "namespace": pair.robot,
                "address": pair.address(pair.robot),
                "runs": ["sim_node", "safety_filter_node", "controller_node"],
            },
            "discovery": args.discovery,
            "gpu_host_sensor_qos": args.sensor_qos,
            "fastdds_profile": args.dds_profile or "config/fastdds_network.xml",
        },
        "two_hosts": a2,
        "one_host": a1,
    }
    if a1 is not None:
        summary["latency_added_by_the_link_ms"] = {
            q: (
                None
                if a2["latency_at_controller_ms"][q] is None or a1["latency_at_controller_ms"][q] is None
                else round(a2["latency_at_controller_ms"][q] - a1["latency_at_controller_ms"][q], 1)
            )
            for q in ("p50", "p99")
        }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    _plot_latency(two, one, args.color, out / "latency.png")
    l2, l1 = a2["latency_at_controller_ms"], (a1 or {}).get("latency_at_controller_ms", {})
    print(
        f"\n  two hosts  : lifted {a2['lifted']} after {a2['time_to_lift_s']} s simulated; stamp -> controller "
        f"p50 {l2['p50']} ms, p99 {l2['p99']} ms over {a2['safe_chunks_at_controller']} chunks"
    )
    if a1 is not None:
        print(
            f"  one host   : lifted {a1['lifted']} after {a1['time_to_lift_s']} s simulated; stamp -> controller "
            f"p50 {l1['p50']} ms, p99 {l1['p99']} ms over {a1['safe_chunks_at_controller']} chunks"
        )
    print(f"  outputs    : {out / 'summary.json'}, {out / 'latency.png'}, logs in {out}/two_hosts, {out}/one_host\n")
    return summary


def _plot_latency(two: dict, one: dict | None, color: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.5))
    for label, record in (("two hosts (policy across the link)", two), ("one host", one)):
        if record:
            lat = [(r[0] - r[2]) * 1e3 for r in record["safe"] if r[0] >= record["t0"]]
            if lat:
                ax.hist(lat, bins=30, alpha=0.6, label=f"{label}: p50 {np.percentile(lat, 50):.0f} ms")
    ax.set_xlabel("observation stamp -> safe chunk at the controller [ms, simulated time]")
    ax.set_ylabel("chunks")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

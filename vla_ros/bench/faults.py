"""``vla-ros bench faults``: ordinary mistakes and failures injected into the launched graph, and what reached the arm.

Starts ``launch/sim.launch.xml`` with ``policy:=vla`` (the shipped model; sim, policy, safety filter and
controller as separate processes on simulated time) and runs one episode per fault: the instruction,
``/sim/reset``, ``LEAD_S`` of ordinary running (the arm moving), the fault for its duration, ``RECOVER_S``
after it. The faults are what users and their computers do:

- ``none``: no fault, the baseline the others are read against;
- ``stale_pose``: a second ``/joint_states`` publisher replays the pose of the fault's start, 0.35 rad off on
  the second joint, with fresh stamps at 100 Hz (a misconfigured ``joint_state_publisher``, a bag on the
  live graph);
- ``duplicate_name``: a publisher sends the current pose with the first joint named twice, the second copy
  0.8 rad off;
- ``bad_states``: a publisher sends states with a NaN, and states that lack two joints;
- ``controller_sigstop``: the controller process stopped (SIGSTOP) for 0.5 s, then continued;
- ``policy_sigstop``: the policy process stopped for 3 s;
- ``second_clock``: a second ``/clock`` publisher 5 s behind the simulator's.

Per fault, from the fault's start to the end of the recovery, measured by this process (an independent
subscriber) from the simulator's own messages (those the fault sends carry ``frame_id`` ``INJECTED`` and
are left out):

- ``max_velocity_ratio``: the largest |dq/dt| of the simulator's arm joint states (their stamps), over
  ``VELOCITY_WINDOW_S``, divided by the joint's URDF velocity limit (``/robot_description``), and the joint;
- ``max_gripper_velocity_ratio``: the same for the gripper's joints (the robot profile's, and the joints that
  mimic them). Reported, not a promise: a finger that meets a cup is pushed by it, faster than its limit while
  its command stands still (a run: commanded 37 mm open, pushed to 15 mm in 60 ms);
- ``max_command_ratio``: what the controller commanded, every joint: the largest change of its commands over
  ``VELOCITY_WINDOW_S`` of their arrival here (simulated time), over the limit times that time plus
  ``COMMAND_JITTER_S``, and the joint;
- ``max_command_gap_ms``: the longest wall time between two commands the controller sent (their source
  timestamps, where rclpy passes them);
- ``cause_named_s``: wall seconds from the fault's start to the first ``/diagnostics`` status at WARN or
  ERROR whose text names the cause (``CAUSES``), with that status (``cause``); None when none did.

Figures depend on the machine and on what runs beside it: the JSON says both.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# The fault's own messages carry this frame_id; the witness leaves them out of the measurements.
INJECTED = "vla_ros_bench_faults"
# Measured velocities are taken over this much simulated time (each command's own step is the controller's
# promise, checked exactly by the property tests of its core: here the time between two commands is not known). Position
# commands reach the simulator a DDS hop
# after they were computed, one or two periods late and unevenly on a loaded machine, and it applies each as
# it arrives: at full speed that reads as 10-20 % over the limit across 50 ms, under 5 % across 0.2 s; a
# grasp's contact chatter moves a finger faster than its limit for a few steps. A command beyond the limits
# (the stall catch-up: 2.4x over 170 ms; a re-anchor jump) still shows.
VELOCITY_WINDOW_S = 0.2
# Commands carry no stamp: they are timed by their arrival at the bench's node, which a DDS hop and this
# process's scheduling make uneven; the limit is granted this much more time per window.
COMMAND_JITTER_S = 0.05
LEAD_S = 1.0  # simulated seconds of ordinary running before the fault
RECOVER_S = 1.0  # ... and after it


@dataclass(frozen=True)
class Fault:
    duration_s: float  # wall seconds
    cause: str  # regular expression a /diagnostics status (name: message) matching the cause satisfies
    what: str


FAULTS: dict[str, Fault] = {
    "none": Fault(2.0, r"(?!)", "no fault (baseline)"),
    "stale_pose": Fault(
        2.0,
        r"publishers on /joint_states|joint_state_jump",
        "second /joint_states publisher replaying an old pose with fresh stamps",
    ),
    "duplicate_name": Fault(
        2.0, r"publishers on /joint_states|joint_state_duplicate_name", "joint named twice, the copy 0.8 rad off"
    ),
    "bad_states": Fault(
        2.0,
        r"joint_state_non_finite|joint_state_missing_joint|publishers on /joint_states",
        "NaN positions, missing joints",
    ),
    "controller_sigstop": Fault(0.5, r"heartbeat on \S*controller/heartbeat", "controller process stopped for 0.5 s"),
    "policy_sigstop": Fault(3.0, r"policy dead", "policy process stopped for 3 s"),
    "second_clock": Fault(2.0, r"publishers on /clock", "second /clock publisher 5 s behind"),
}


def _pids(graph_pid: int, exe: str) -> list[int]:
    """Processes under ``graph_pid`` (children and grandchildren) whose command line names ``exe``."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if exe not in cmd or "launch_runner" in cmd:
                continue
            pid, depth = int(entry), 0
            while pid > 1 and depth < 4:
                pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
                if pid == graph_pid:
                    out.append(int(entry))
                    break
                depth += 1
        except (OSError, ValueError, IndexError):
            continue
    return out


class Witness:
    """The bench's rclpy node on simulated time: drives episodes (live_eval's Driver), records what the
    simulator measured and commanded and every /diagnostics status, and sends the faults' messages."""

    def __init__(self) -> None:
        from diagnostic_msgs.msg import DiagnosticArray
        from rosgraph_msgs.msg import Clock
        from sensor_msgs.msg import JointState
        from std_msgs.msg import Float64MultiArray, String

        from vla_ros.evaluation.live_eval import Driver
        from vla_ros.ros.publishers import with_info
        from vla_ros.ros.qos import latched_qos

        self.driver = Driver()
        n = self.node = self.driver.node
        self.states: list[tuple[int, tuple[str, ...], np.ndarray]] = []  # (stamp ns, names, positions) from the sim
        self.commands: list[tuple[float, np.ndarray, int]] = []  # (wall sent, command, simulated ns at arrival)
        self.statuses: list[tuple[float, int, str]] = []  # (wall, level, "name: message")
        self.urdf: str | None = None
        # fault -> (start, recovery end: sim stamps; the same in wall s; its commands' slice of ``commands``)
        self.windows: dict[str, tuple[int, int, float, float, int, int]] = {}
        n.create_subscription(JointState, "/joint_states", self._on_state, 500)
        n.create_subscription(
            Float64MultiArray, "/forward_position_controller/commands", with_info(self._on_command), 500
        )
        n.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag, 200)
        latched = latched_qos()
        n.create_subscription(String, "/robot_description", lambda m: setattr(self, "urdf", m.data), latched)
        self.pub_state = n.create_publisher(JointState, "/joint_states", 10)
        self._JointState, self._Clock = JointState, Clock

    def _on_command(self, msg, info) -> None:
        # when the controller sent it (the publisher's clock, this machine's) where rclpy says it: the gaps
        # are the controller's, not this process's scheduling; else when it arrived here
        sent = info.get("source_timestamp") if info else None
        wall = time.monotonic() if not sent else time.monotonic() - (time.time_ns() - sent) * 1e-9
        self.commands.append((wall, np.array(msg.data), self.driver.now_ns()))

    def _on_state(self, msg) -> None:
        if msg.header.frame_id == INJECTED:
            return
        from vla_ros.ros.time import ns_from_time_msg

        self.states.append(
            (ns_from_time_msg(msg.header.stamp), tuple(msg.name), np.array(msg.position, dtype=np.float64))
        )

    def _on_diag(self, msg) -> None:
        wall = time.monotonic()
        for st in msg.status:
            level = st.level if isinstance(st.level, int) else int.from_bytes(st.level, "little")
            self.statuses.append((wall, level, f"{st.name}: {st.message}"))

    def spin_for(self, wall_s: float, each=None, period_s: float = 0.01) -> None:
        end, next_t = time.monotonic() + wall_s, time.monotonic()
        while time.monotonic() < end:
            self.driver._executor.spin_once(timeout_sec=max(0.0, min(period_s, next_t - time.monotonic())))
            if each is not None and time.monotonic() >= next_t:
                each()
                next_t += period_s

    def send_state(self, names, positions) -> None:
        from vla_ros.ros.time import time_msg_from_ns

        stamp_ns = self.states[-1][0] + 1_000_000 if self.states else self.driver.now_ns()
        msg = self._JointState(name=list(names), position=[float(v) for v in positions])
        msg.header.stamp = time_msg_from_ns(stamp_ns)
        msg.header.frame_id = INJECTED
        self.pub_state.publish(msg)

    def close(self) -> None:
        self.driver.close()


def velocity_ratio(states, limits: dict[str, float], t_from_ns: int, t_to_ns: int) -> tuple[float, str]:
    """(max |dq/dt| / limit, joint) over the states stamped in [t_from_ns, t_to_ns], each velocity taken
    over ``VELOCITY_WINDOW_S`` of stamps (from each state to the first one that much later). Joints without
    a limit in ``limits`` are left out."""
    rows = [(t, q) for t, names, q in states if t_from_ns <= t <= t_to_ns]
    if len(rows) < 2:
        return 0.0, ""
    names = next(n for t, n, _ in states if t_from_ns <= t <= t_to_ns)
    return window_ratio([r[0] for r in rows], [r[1] for r in rows], names, limits)


def command_ratio(commands, names, limits: dict[str, float], t_from_ns: int, t_to_ns: int) -> tuple[float, str]:
    """(max |dq| / (limit * (dt + COMMAND_JITTER_S)), joint) over the controller's ``commands`` (wall sent,
    positions in ``names`` order, simulated ns at arrival) that arrived in [t_from_ns, t_to_ns]."""
    rows = [(t, c) for _, c, t in commands if t_from_ns <= t <= t_to_ns]
    if len(rows) < 2:
        return 0.0, ""
    return window_ratio([r[0] for r in rows], [r[1] for r in rows], names, limits, COMMAND_JITTER_S)


def window_ratio(stamps_ns, positions, names, limits: dict[str, float], slack_s: float = 0.0) -> tuple[float, str]:
    """(max |q(t + w) - q(t)| / (limit * (w + slack_s)), joint): each row against the first one at least
    ``VELOCITY_WINDOW_S`` later (w: their stamps' difference); (0, "") when no pair is that far apart."""
    t = np.asarray(stamps_ns, dtype=np.int64)
    q = np.asarray(positions, dtype=np.float64)
    later = np.searchsorted(t, t + round(VELOCITY_WINDOW_S * 1e9))
    ok = later < len(t)
    i, j = np.flatnonzero(ok), later[ok]
    if not len(i):
        return 0.0, ""
    lim = np.array([limits.get(n, np.inf) for n in names])
    ratio = np.abs(q[j] - q[i]) / ((t[j] - t[i]) * 1e-9 + slack_s)[:, None] / lim
    k = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    return float(ratio[k]), names[k[1]]


@dataclass(frozen=True)
class JointSets:
    """The velocity limits of the arm's joints and of the gripper's (the profile's gripper joints and their
    mimics), and the order of the controller's commands (the profile's commanded joints)."""

    arm: dict[str, float]
    gripper: dict[str, float]
    commanded: tuple[str, ...]

    @classmethod
    def of(cls, urdf: str, profile) -> JointSets:
        from vla_ros.urdf_limits import read_joint_limits

        limits = {name: lim for name, lim in read_joint_limits(urdf).items() if math.isfinite(lim.velocity)}
        grip = set(profile.gripper_joints)
        is_grip = {name: name in grip or lim.mimic in grip for name, lim in limits.items()}
        return cls(
            {n: lim.velocity for n, lim in limits.items() if not is_grip[n]},
            {n: lim.velocity for n, lim in limits.items() if is_grip[n]},
            tuple(profile.commanded_joints),
        )


def run_faults(
    faults: list[str],
    model: str = "vla_cups",
    real_time_factor: float = 1.0,
    seed: int = 0,
    log_path: Path | None = None,
    progress: bool = True,
    startup_timeout_s: float = 240.0,
    raw: dict | None = None,
) -> dict:
    """Each fault in one episode of the launched graph; the per-fault figures (module docstring). ``raw``, a
    dict, receives what they were computed from: the simulator's ``states`` (stamp ns, names, positions),
    the controller's ``commands`` (wall s sent, positions, simulated ns at arrival), the ``statuses`` (wall s,
    level, "name: message") and per fault its ``windows`` entry (fault start and recovery end as simulator
    stamps, then as wall s, then the slice of ``commands`` its command figure was computed from)."""
    from tqdm import tqdm

    from vla_ros.evaluation.live_eval import LiveGraph, vla_launch_args
    from vla_ros.model.io import resolve_model_dir
    from vla_ros.robot_profile import profile_for_model
    from vla_ros.sim.tasks import EVAL_SEED_START, episode_task

    unknown = [f for f in faults if f not in FAULTS]
    if unknown:
        raise ValueError(f"unknown faults {unknown}; known: {list(FAULTS)}")
    load_start = os.getloadavg()
    args = [*vla_launch_args(model), f"real_time_factor:={real_time_factor}"]
    results: dict[str, dict] = {}
    with LiveGraph(args, log_path) as graph:
        w = Witness()
        d = w.driver
        try:
            d.wait_until_up(graph, startup_timeout_s, also=lambda: w.urdf is not None)
            limits = JointSets.of(w.urdf, profile_for_model(resolve_model_dir(model)))
            for i, name in enumerate(tqdm(faults, desc="faults", unit="fault", disable=not progress)):
                results[name] = _run_one(
                    w, graph.proc.pid, name, FAULTS[name], limits, EVAL_SEED_START + seed + i, episode_task
                )
            if raw is not None:
                raw.update(
                    states=list(w.states), statuses=list(w.statuses), windows=dict(w.windows), commands=list(w.commands)
                )
        finally:
            w.close()
    return {
        "faults": results,
        "model": model,
        "real_time_factor": real_time_factor,
        "load_avg_1min": [round(load_start[0], 2), round(os.getloadavg()[0], 2)],
        "cpus": os.cpu_count(),
    }


def _run_one(
    w: Witness, graph_pid: int, name: str, fault: Fault, limits: JointSets, ep_seed: int, episode_task
) -> dict:
    d = w.driver
    _, instruction = episode_task(ep_seed)
    d.start_episode(ep_seed, instruction)
    start_ns = d.now_ns()
    d.spin_until(lambda: d.now_ns() >= start_ns + LEAD_S * 1e9, 60.0)
    names, q0 = w.states[-1][1], w.states[-1][2].copy()
    k_status, k_cmd = len(w.statuses), len(w.commands)
    t_fault_ns = w.states[-1][0]
    t0 = time.monotonic()
    each = None
    stopped: list[int] = []
    clock_pub = None
    if name == "stale_pose":
        stale = q0.copy()
        stale[1] += 0.35
        each = lambda: w.send_state(names, stale)  # noqa: E731
    elif name == "duplicate_name":
        each = lambda: w.send_state(list(names) + [names[0]], list(w.states[-1][2]) + [w.states[-1][2][0] + 0.8])  # noqa: E731
    elif name == "bad_states":
        flip = [0]

        def each():
            flip[0] += 1
            q = w.states[-1][2].copy()
            if flip[0] % 2:
                q[2] = float("nan")
                w.send_state(names, q)
            else:
                w.send_state(names[:-2], q[:-2])
    elif name in ("controller_sigstop", "policy_sigstop"):
        exe = "controller_node" if name == "controller_sigstop" else "policy_node"
        stopped = _pids(graph_pid, exe)
        if not stopped:
            raise RuntimeError(f"no {exe} process under the launch (pid {graph_pid})")
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
    elif name == "second_clock":
        from vla_ros.ros.time import time_msg_from_ns

        clock_pub = w.node.create_publisher(w._Clock, "/clock", 10)
        each = lambda: clock_pub.publish(w._Clock(clock=time_msg_from_ns(max(w.states[-1][0] - 5_000_000_000, 1))))  # noqa: E731
    try:
        w.spin_for(fault.duration_s, each)
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
        if clock_pub is not None:
            w.node.destroy_publisher(clock_pub)
    t_end_ns = w.states[-1][0]
    d.spin_until(
        lambda: w.states[-1][0] >= t_end_ns + RECOVER_S * 1e9, 60.0
    )  # the simulator's stamps: /clock may have jumped
    t_to_ns = w.states[-1][0]
    # Commands are timed by this node's clock, which follows /clock a little behind the simulator's stamps:
    # wait until it has passed the window, so no command that arrives later counts as inside it.
    d.spin_until(lambda: d.now_ns() > t_to_ns, 10.0)
    ratio, joint = velocity_ratio(w.states, limits.arm, t_fault_ns, t_to_ns)
    gripper_ratio, _ = velocity_ratio(w.states, limits.gripper, t_fault_ns, t_to_ns)
    both = limits.arm | limits.gripper
    # This fault's commands, as they had arrived by now: one that arrives later is stamped by this node's clock
    # then, which a later fault (a second /clock 5 s behind) can set back into this window.
    k_end = len(w.commands)
    cmd_ratio, cmd_joint = command_ratio(w.commands[k_cmd:k_end], limits.commanded, both, t_fault_ns, t_to_ns)
    cmds = [(t, c) for t, c, _ in w.commands[k_cmd:] if t >= t0]
    gaps = np.diff([t0] + [t for t, _ in cmds]) if cmds else np.array([time.monotonic() - t0])
    w.windows[name] = (t_fault_ns, t_to_ns, t0, cmds[-1][0] if cmds else t0, k_cmd, k_end)
    cause = re.compile(fault.cause)
    named = next(
        ((wall, level, text) for wall, level, text in w.statuses[k_status:] if level >= 1 and cause.search(text)), None
    )
    return {
        "what": fault.what,
        "duration_s": fault.duration_s,
        "max_velocity_ratio": round(ratio, 3),
        "joint": joint,
        "max_gripper_velocity_ratio": round(gripper_ratio, 3),
        "max_command_ratio": round(cmd_ratio, 3),
        "command_joint": cmd_joint,
        "max_command_gap_ms": round(float(gaps.max()) * 1e3, 1),
        "cause_named_s": None if named is None else round(named[0] - t0, 3),
        "cause_level": None if named is None else ("WARN", "ERROR", "STALE")[min(named[1], 3) - 1],
        "cause": None if named is None else named[2][:300],
        "simulated_s": round((t_to_ns - t_fault_ns) * 1e-9, 3),
        "fault_simulated_s": round((t_end_ns - t_fault_ns) * 1e-9, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="vla-ros bench faults",
        description="Faults injected into the launched graph (sim, policy, safety filter, controller): per fault the "
        "largest measured joint velocity over its limit, the longest command gap and the seconds until /diagnostics "
        "named the cause; the last line of output is a JSON object.",
        epilog="example: ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST ROS_DOMAIN_ID=42 vla-ros bench faults --json",
    )
    parser.add_argument("--faults", default=",".join(FAULTS), help=f"comma-separated, from {','.join(FAULTS)}")
    parser.add_argument("--model", default="vla_cups")
    parser.add_argument("--real-time-factor", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log", type=Path, default=None, help="the launched graph's output goes here")
    parser.add_argument("--json", action="store_true", help="only the JSON line")
    args = parser.parse_args(argv)
    out = run_faults(
        [f for f in args.faults.split(",") if f],
        args.model,
        args.real_time_factor,
        args.seed,
        args.log,
        progress=not args.json,
    )
    if not args.json:
        head = f"{'fault':20s} {'v/limit':>8s} {'joint':>22s} {'grip':>6s} {'cmd':>6s} {'gap ms':>8s} {'named s':>8s}"
        print(f"{head}  cause")
        for name, r in out["faults"].items():
            named = "-" if r["cause_named_s"] is None else f"{r['cause_named_s']:.2f}"
            print(
                f"{name:20s} {r['max_velocity_ratio']:8.3f} {r['joint']:>22s} {r['max_gripper_velocity_ratio']:6.2f} "
                f"{r['max_command_ratio']:6.2f} {r['max_command_gap_ms']:8.1f} "
                f"{named:>8s}  "
                f"{r['cause_level'] or ''} {(r['cause'] or '')[:90]}"
            )
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

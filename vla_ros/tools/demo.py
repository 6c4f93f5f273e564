"""``vla-ros demo``: the simulated demo, end to end through the real launch file and real DDS.

Starts ``launch/sim.launch.xml`` with the launch runner (every node its own process: sim, policy, safety
filter, controller), tells the policy "pick up the <color> cup", watches the episode in simulated time
until the cup is lifted or the time runs out, then writes a video of the camera view, a plot of
commanded versus measured joints, a histogram of the policy's latency (sensor stamp to chunk publish)
and a summary into a dated folder. An instruction the policy refuses (``policy.grounding``: "do not pick up
the red cup", "pick up the yellow cup") is watched for ``REFUSED_WATCH_S`` to show that the arm holds; the
summary says why, and the exit status is 3. Exit status: 0 the named cup lifted, 1 not, 2 a usage or start-up
error, 3 the instruction refused. ``--policy scripted`` runs the privileged scripted pick instead (and
says so). ``--robot`` names the robot profile every node of the graph is given (``robot_profile:=``); by default
the robot the model folder records (``vla-ros train --robot``), else the bundled arm.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REFUSED_WATCH_S = 5.0  # simulated seconds an episode with a refused instruction is watched
EXIT_REFUSED = 3


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="vla-ros demo",
        description="Run the simulated pick demo and write video, plots and a summary.",
        epilog="example: vla-ros demo --color red --seed 3 --out runs/my-demo\n"
        "         vla-ros demo --robot fr3 --model runs/fr3_cups --color blue   # another arm's policy",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--color", default="red", choices=["red", "green", "blue"], help="cup to pick")
    parser.add_argument(
        "--policy", default="vla", choices=["vla", "scripted"], help="the learned pipeline or the scripted pick"
    )
    parser.add_argument(
        "--model",
        default="",
        help="policy model (folder or name under models/; default: the one the package ships for --robot, fr3_cups "
        "for fr3, else vla_cups)",
    )
    parser.add_argument(
        "--robot",
        default="",
        metavar="PROFILE",
        help="robot profile to simulate: a name (fr3) or a YAML file (docs/your_robot.md); default: the robot the "
        "model folder records, else the bundled arm. The scripted pick knows the bundled arm only",
    )
    parser.add_argument("--instruction", default="", help="what to say (default: 'pick up the <color> cup')")
    parser.add_argument("--seed", type=int, default=0, help="episode seed (cup positions)")
    parser.add_argument("--timeout", type=float, default=20.0, help="simulated seconds before giving up")
    parser.add_argument("--wall-timeout", type=float, default=180.0, help="wall seconds before giving up")
    parser.add_argument(
        "--real-time-factor",
        type=float,
        default=1.0,
        help="simulated seconds per wall second (below 1 gives a slow machine's policy more wall time per step)",
    )
    parser.add_argument("--out", type=Path, default=None, help="output folder (default runs/demo-<date>)")
    return parser.parse_args(argv)


def _launch_file() -> Path:
    from vla_ros.launch_runner import find_launch_file

    return find_launch_file("vla_ros", "sim.launch.xml")


def main(argv: list[str] | None = None) -> int:
    args = _parse(list(argv or []))
    out = args.out or Path("runs") / datetime.datetime.now().strftime("demo-%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    args.instruction = args.instruction or f"pick up the {args.color} cup"
    cmd = [
        sys.executable,
        "-m",
        "vla_ros.launch_runner",
        str(_launch_file()),
        f"seed:={args.seed}",
        f"real_time_factor:={args.real_time_factor}",
    ]
    from vla_ros.robot_profile import BUNDLED_PROFILE, ProfileError, load_profile, profile_for_model

    if args.policy == "scripted":
        try:
            profile = load_profile(args.robot or None)
        except ProfileError as err:
            print(f"vla_ros demo: {err}", file=sys.stderr)
            return 2
        if profile.name != BUNDLED_PROFILE:
            print(
                f"vla_ros demo: the scripted pick is the bundled arm's ({BUNDLED_PROFILE}: a closed-form pick), not "
                f"{profile.name}'s; run a policy trained for it (--policy vla --model ...)",
                file=sys.stderr,
            )
            return 2
        print(
            "vla_ros demo: the arm follows the SCRIPTED pick (privileged cup positions from the simulator), not the "
            "learned policy."
        )
        cmd += [f"target_color:={args.color}", "policy:=scripted"]
    else:
        from vla_ros.model.io import resolve_model_dir
        from vla_ros.robot_profile import shipped_model_name

        try:
            model = resolve_model_dir(args.model or shipped_model_name(args.robot or None))
        except ProfileError as err:
            print(f"vla_ros demo: {err}", file=sys.stderr)
            return 2
        if not (model / "config.json").is_file():
            print(f"vla_ros demo: no model at {model}; train one (README) or run --policy scripted", file=sys.stderr)
            return 2
        try:
            profile = profile_for_model(model, args.robot or None)
        except ProfileError as err:
            print(f"vla_ros demo: {err}", file=sys.stderr)
            return 2
        print(f"vla_ros demo: learned policy {model.name} on {profile.name}, instruction {args.instruction!r}")
        from vla_ros.evaluation.live_eval import vla_launch_args

        cmd += [*vla_launch_args(model, str(profile.source)), f"instruction:={args.instruction}"]
    launch = subprocess.Popen(cmd, start_new_session=True)
    try:
        record = _watch(args)
    finally:
        os.killpg(launch.pid, signal.SIGINT)
        try:
            launch.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(launch.pid, signal.SIGKILL)
    summary = _write_outputs(record, out, args, profile)
    print(json.dumps(summary))
    if summary.get("refused"):
        return EXIT_REFUSED
    return 0 if summary["lifted"] == summary["target"] else 1


def _watch(args) -> dict:
    """Record camera, joints and commands on simulated time until the cup is lifted (+1 s) or timeout."""
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from rclpy.parameter import Parameter
    from sensor_msgs.msg import Image, JointState
    from std_msgs.msg import Float64MultiArray, String
    from std_srvs.srv import Trigger
    from trajectory_msgs.msg import JointTrajectory

    from vla_ros.ros.instruction_status import POLICY_INSTRUCTION_STATUS_TOPIC, read_status
    from vla_ros.ros.qos import latched_qos
    from vla_ros.ros.time import ns_from_time_msg

    rclpy.init()
    node = Node("demo_recorder", parameter_overrides=[Parameter("use_sim_time", Parameter.Type.BOOL, True)])
    rec = {
        "frames": [],
        "t_js": [],
        "q": [],
        "names": None,
        "traj": None,
        "status": None,
        "lifted_at": None,
        "min_episode": 0,
        "t_start": 0.0,
        "t_cmd": [],
        "cmd": [],
        "latency_ms": [],
        "chunks": 0,
        "safety": {},
        "sim_rejected": 0,
        "tcp_cup": [],
        "instruction_status": None,
        "tcp0": None,
        "max_tcp_displacement_m": 0.0,
    }

    def refused() -> bool:
        return args.policy == "vla" and (rec["instruction_status"] or {}).get("status") == "refused"

    def on_instruction_status(msg: String) -> None:
        status = read_status(msg)
        if status is not None:
            rec["instruction_status"] = status
            if status.get("status") == "accepted" and status.get("target"):
                args.color = status["target"]  # the cup the policy took the words for

    def on_image(msg: Image) -> None:
        if len(rec["frames"]) < 2000:
            rec["frames"].append(np.frombuffer(bytes(msg.data), np.uint8).reshape(msg.height, msg.width, 3).copy())

    def on_joints(msg: JointState) -> None:
        rec["names"] = list(msg.name)
        rec["t_js"].append(ns_from_time_msg(msg.header.stamp) * 1e-9)
        rec["q"].append(list(msg.position))

    def on_status(msg: String) -> None:
        status = json.loads(msg.data)
        if status["episode"] < rec["min_episode"]:
            return  # a late status of the episode before the restart
        rec["status"] = status
        if rec["min_episode"] > 0:
            rec["tcp0"] = rec["tcp0"] or status["tcp"]
            rec["max_tcp_displacement_m"] = max(
                rec["max_tcp_displacement_m"], float(np.linalg.norm(np.subtract(status["tcp"], rec["tcp0"])))
            )
        if rec["min_episode"] > 0 and args.color in status["cups"]:
            rec["tcp_cup"].append(
                (status["time_s"], float(np.linalg.norm(np.subtract(status["tcp"], status["cups"][args.color]))))
            )
        if status["lifted"] == args.color and rec["lifted_at"] is None and rec["min_episode"] > 0:
            rec["lifted_at"] = status["time_s"]

    latched = latched_qos()
    node.create_subscription(Image, "/camera/image_raw", on_image, 10)
    node.create_subscription(JointState, "/joint_states", on_joints, 100)
    node.create_subscription(String, "/vla/episode_status", on_status, latched)
    node.create_subscription(String, POLICY_INSTRUCTION_STATUS_TOPIC, on_instruction_status, latched)
    node.create_subscription(
        JointTrajectory, "/joint_trajectory_controller/joint_trajectory", lambda m: rec.__setitem__("traj", m), 10
    )

    def now_s() -> float:
        return node.get_clock().now().nanoseconds * 1e-9

    def on_command(msg: Float64MultiArray) -> None:
        rec["t_cmd"].append(now_s())
        rec["cmd"].append(list(msg.data))

    def on_chunk(msg: JointTrajectory) -> None:
        rec["chunks"] += 1
        rec["latency_ms"].append((now_s() - ns_from_time_msg(msg.header.stamp) * 1e-9) * 1e3)

    def on_diagnostics(msg: DiagnosticArray) -> None:
        for st in msg.status:
            values = {kv.key: kv.value for kv in st.values}
            if st.name.startswith("safety_filter:") and "chunks.pass" in values:  # not its inputs or parameters status
                rec["safety"] = {k: int(v) for k, v in values.items() if k.startswith("chunks.")}
            if st.name.startswith("sim:") and "rejected.total" in values:
                rec["sim_rejected"] = int(values["rejected.total"])

    node.create_subscription(Float64MultiArray, "/forward_position_controller/commands", on_command, 100)
    node.create_subscription(JointTrajectory, "/vla/action_chunk", on_chunk, 10)
    node.create_subscription(DiagnosticArray, "/diagnostics", on_diagnostics, 50)
    wall_end = time.monotonic() + args.wall_timeout
    # One executor that keeps the node (rclpy.spin_once(node) rebuilds the wait set on every call).
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    try:
        # DDS discovery takes a moment, so the first episode's start would be missing from the video:
        # once camera and joints arrive here, restart the episode (same seed) and record it whole.
        while time.monotonic() < wall_end and not (rec["frames"] and rec["t_js"] and rec["status"]):
            executor.spin_once(timeout_sec=0.05)
        if args.policy == "vla":  # loading torch, MiniLM and the model takes seconds: start once it acts
            print("waiting for the policy's first chunk ...", flush=True)
            while time.monotonic() < wall_end and rec["chunks"] == 0 and not refused():
                executor.spin_once(timeout_sec=0.05)
            if refused():
                st = rec["instruction_status"]
                print(f"the policy refused the instruction ({st.get('reason')}): {st.get('detail')}", flush=True)
            elif rec["chunks"] == 0:
                raise RuntimeError("the policy published no chunk (see its /diagnostics)")
        reset = node.create_client(Trigger, "/sim/reset")
        if not reset.wait_for_service(timeout_sec=30.0):
            raise RuntimeError("/sim/reset is not available")
        episode_before = rec["status"]["episode"]
        rec["traj"] = None  # the new episode's trajectory may arrive before the reset's reply
        future = reset.call_async(Trigger.Request())
        while time.monotonic() < wall_end and not future.done():
            executor.spin_once(timeout_sec=0.05)
        t_reset = rec["t_js"][-1]
        rec["t_start"] = t_reset
        for key in ("frames", "t_js", "q", "t_cmd", "cmd", "latency_ms", "tcp_cup"):
            rec[key].clear()
        rec["lifted_at"], rec["min_episode"] = None, episode_before + 1
        rec["tcp0"], rec["max_tcp_displacement_m"] = None, 0.0
        deadline = t_reset + (min(args.timeout, REFUSED_WATCH_S) if refused() else args.timeout)
        while time.monotonic() < wall_end:
            executor.spin_once(timeout_sec=0.05)
            t = rec["t_js"][-1] if rec["t_js"] else 0.0
            if rec["lifted_at"] is not None and t >= rec["lifted_at"] + 1.0:
                break
            if t >= deadline:
                break
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
    return rec


def _write_outputs(rec: dict, out: Path, args, profile) -> dict:
    """The video, the joint plots (every measured joint; the controller's commands, in the robot ``profile``'s
    commanded order, over them), the latency histogram and the summary."""
    import imageio.v2 as imageio
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from vla_ros.ros.time import seconds_from_duration_msg

    commanded = list(profile.commanded_joints)  # the controller's output order: the profile's joints

    video = out / "camera.mp4"
    if rec["frames"]:
        imageio.mimwrite(video, rec["frames"], fps=30, macro_block_size=1)
        imageio.imwrite(out / "last_frame.png", rec["frames"][-1])
    if rec["q"]:
        t = np.asarray(rec["t_js"])
        q = np.asarray(rec["q"])
        names = rec["names"]
        rows = (len(names) + 1) // 2
        fig, axes = plt.subplots(rows, 2, figsize=(11, 2.25 * rows), sharex=True, squeeze=False)
        traj = rec["traj"]
        cmd = np.asarray(rec["cmd"]) if rec["cmd"] else None
        if len(names) % 2:  # an odd count: the last row's right plot is empty, the one above it shows the time
            axes[-1, 1].set_visible(False)
            axes[-2, 1].tick_params(labelbottom=True)
        for i, name in enumerate(names):
            ax = axes.flat[i]
            ax.plot(t, q[:, i], label="measured")
            if cmd is not None and name in commanded and cmd.shape[1] == len(commanded):
                ax.plot(rec["t_cmd"], cmd[:, commanded.index(name)], lw=1, label="commanded (controller, 100 Hz)")
            elif traj is not None and name in traj.joint_names:
                j = list(traj.joint_names).index(name)
                tp = [seconds_from_duration_msg(p.time_from_start) for p in traj.points]
                ax.plot(
                    np.asarray(tp) + t[0], [p.positions[j] for p in traj.points], "o", ms=3, label="commanded waypoints"
                )
            ax.set_title(name, fontsize=9)
        axes.flat[0].legend(fontsize=8)
        fig.supxlabel("simulated time [s]")
        fig.tight_layout()
        fig.savefig(out / "joints.png", dpi=90)
        plt.close(fig)
    if rec["latency_ms"]:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.hist(rec["latency_ms"], bins=30, color="C0")
        ax.set_xlabel("newest observation stamp -> chunk received [ms, simulated time]")
        ax.set_ylabel("chunks")
        ax.set_title(
            f"policy latency, p50 {np.percentile(rec['latency_ms'], 50):.0f} ms, {len(rec['latency_ms'])} chunks"
        )
        fig.tight_layout()
        fig.savefig(out / "latency.png", dpi=90)
        plt.close(fig)
    status = rec["status"] or {}
    dist = [d for _, d in rec["tcp_cup"]]
    within = None
    if rec["cmd"]:
        from vla_ros.control.config import limits_from_urdf

        lim = limits_from_urdf(profile.urdf, commanded)
        c = np.asarray(rec["cmd"])
        within = bool(
            c.shape[1] == len(commanded)
            and np.all(np.isfinite(c))
            and np.all(c >= lim.lower - 1e-9)
            and np.all(c <= lim.upper + 1e-9)
        )
    summary = {
        "motion": "learned policy" if args.policy == "vla" else "scripted (privileged cup positions)",
        "instruction": args.instruction if args.policy == "vla" else None,
        "robot": profile.name,
        "target": args.color,
        "seed": args.seed,
        "lifted": status.get("lifted"),
        "episode": status.get("episode"),
        "time_to_lift_s": None if rec["lifted_at"] is None else round(rec["lifted_at"] - rec["t_start"], 3),
        "episode_time_s": round(rec["t_js"][-1] - rec["t_start"], 3) if rec["t_js"] else None,
        "frames": len(rec["frames"]),
        "chunks": rec["chunks"],
        "latency_ms_p50": round(float(np.percentile(rec["latency_ms"], 50)), 1) if rec["latency_ms"] else None,
        "latency_ms_p99": round(float(np.percentile(rec["latency_ms"], 99)), 1) if rec["latency_ms"] else None,
        "gripper_cup_distance_m": {"start": round(dist[0], 3), "min": round(min(dist), 3)} if dist else None,
        "safety_filter": rec["safety"],
        "commands_rejected_by_sim": rec["sim_rejected"],
        "commands_within_limits": within,
        "commands": len(rec["cmd"]),
        "max_tcp_displacement_m": round(rec["max_tcp_displacement_m"], 4) if rec["tcp0"] is not None else None,
        "out": str(out),
    }
    st = rec["instruction_status"]
    if args.policy == "vla":
        summary["instruction_status"] = st
        summary["refused"] = bool(st and st.get("status") == "refused")
        if summary["refused"]:
            summary["target"] = None
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(f"\n  {summary['motion']}: {summary['instruction'] or ''}")
    if summary.get("refused"):
        print(f"  REFUSED         : {st.get('reason')}: {st.get('detail')} (score {st.get('score')})")
        print(f"  tool moved      : {summary['max_tcp_displacement_m']} m from its start (the arm holds)")
    print(f"  target cup      : {args.color} (seed {args.seed})")
    print(f"  lifted          : {summary['lifted']}  after {summary['time_to_lift_s']} s simulated")
    print(f"  gripper to cup  : {summary['gripper_cup_distance_m']}")
    print(
        f"  chunks          : {summary['chunks']} (latency p50 {summary['latency_ms_p50']} ms), safety filter "
        f"{summary['safety_filter']}"
    )
    print(f"  frames recorded : {summary['frames']}")
    print(f"  outputs         : {video}, {out / 'joints.png'}, {out / 'latency.png'}, {out / 'summary.json'}\n")
    return summary

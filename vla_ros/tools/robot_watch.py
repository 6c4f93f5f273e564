"""The robot side of a running sim graph, watched on simulated time: a process that records and streams.

Runs where the controller runs (on two hosts: inside the robot's namespace) and sees what the controller
sees: ``/vla/safe_action_chunk`` as it arrives (so its latency is the latency at the controller), the
controller's commands, the policy's chunks as they reach the robot, ``/diagnostics`` and the sim's
episode status. ``vla_ros.tools.two_hosts`` drives it through a pipe::

    python -m vla_ros.tools.robot_watch --color red

stdin, one command a line: ``reset`` restarts the episode (``/sim/reset``, same seed) and records from
there; ``stop`` prints the record and exits. stdout, JSON lines: ``{"state": ...}`` every ``--period``
wall seconds (``t``: simulated time on this process's /clock, as the controller's; episode, counts, the controller's and
the filter's latest reports);
``{"event": "reset", ...}`` once the new episode runs; ``{"record": ...}`` last. Every row of the record
carries the simulated time ``t`` and ``time.monotonic()``, which is shared by every namespace, so the
driver can place its own actions (a link going down) on simulated time afterwards.
"""

from __future__ import annotations

import argparse
import json
import queue
import sys
import threading
import time

import numpy as np


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m vla_ros.tools.robot_watch", description=__doc__.split("\n\n")[0])
    parser.add_argument("--color", default="red", help="the cup whose distance to the gripper is recorded")
    parser.add_argument("--period", type=float, default=0.05, help="wall seconds between state lines")
    return parser.parse_args(argv)


def _stdin_lines() -> queue.Queue[str]:
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in sys.stdin:
            lines.put(line.strip())
        lines.put("stop")  # the driver went away: finish

    threading.Thread(target=read, name="stdin", daemon=True).start()
    return lines


def _emit(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    args = _parse(list(sys.argv[1:] if argv is None else argv))
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from rclpy.parameter import Parameter
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray, String
    from std_srvs.srv import Trigger
    from trajectory_msgs.msg import JointTrajectory

    from vla_ros.latency import TimingError, parse_timing
    from vla_ros.ros.chunk_timing import CHUNK_TIMING_DEPTH, CHUNK_TIMING_TOPIC
    from vla_ros.ros.qos import latched_qos
    from vla_ros.ros.time import ns_from_time_msg, seconds_from_duration_msg

    rclpy.init()
    node = Node("robot_watch", parameter_overrides=[Parameter("use_sim_time", Parameter.Type.BOOL, True)])
    rec: dict = {
        "commands": [],
        "safe": [],
        "chunks": [],
        "diag": [],
        "status": [],
        "timing": [],  # the nodes' chunk-timing records (vla_ros.latency), as JSON objects
        "t0": None,
        "episode0": None,
        "lifted_at": None,
    }
    live = {
        "episode": None,
        "lifted": None,
        "distance_to_cup": None,
        "joint_states": 0,
        "controller": None,
        "filter": None,
        "policy": None,
    }
    last_cmd: list[list[float]] = []

    def now_s() -> float:
        return node.get_clock().now().nanoseconds * 1e-9

    def on_joints(msg: JointState) -> None:
        live["joint_states"] += 1

    def on_command(msg: Float64MultiArray) -> None:
        q = list(msg.data)
        last_cmd[:] = (last_cmd + [q])[-11:]  # the newest 11: the speed over the last ~0.1 s
        rec["commands"].append([now_s(), time.monotonic(), *q])

    def on_chunk(key: str):
        def callback(msg: JointTrajectory) -> None:
            span = seconds_from_duration_msg(msg.points[-1].time_from_start) if msg.points else 0.0
            rec[key].append(
                [now_s(), time.monotonic(), ns_from_time_msg(msg.header.stamp) * 1e-9, span, len(msg.points)]
            )

        return callback

    def on_status(msg: String) -> None:
        status = json.loads(msg.data)
        live["episode"], live["lifted"] = status.get("episode"), status.get("lifted")
        cup, tcp = status.get("cups", {}).get(args.color), status.get("tcp")
        dist = float(np.linalg.norm(np.subtract(tcp, cup))) if cup is not None and tcp is not None else None
        live["distance_to_cup"] = dist
        rec["status"].append(
            [status.get("time_s"), time.monotonic(), status.get("episode"), status.get("lifted"), dist]
        )
        if (
            rec["t0"] is not None
            and status.get("episode", -1) >= rec["episode0"]
            and status.get("lifted") == args.color
            and rec["lifted_at"] is None
        ):
            rec["lifted_at"] = status.get("time_s")

    def on_timing(msg: String) -> None:
        try:
            rec["timing"].append(parse_timing(msg.data).as_dict())
        except TimingError:
            pass  # not one of ours; the evaluation counts only what it can read

    def on_diagnostics(msg: DiagnosticArray) -> None:
        for st in msg.status:
            node_name, _, concern = st.name.partition(": ")
            entry = {
                "t": now_s(),
                "mono": time.monotonic(),
                "name": st.name,
                "level": int.from_bytes(st.level, "little") if isinstance(st.level, bytes) else int(st.level),
                "message": st.message,
                "values": {kv.key: kv.value for kv in st.values},
            }
            rec["diag"].append(entry)
            short = {"level": entry["level"], "message": st.message}
            for key in (
                "mode",
                "watchdog",
                "chunks.accepted",
                "rejected.total",
                "chunks.pass",
                "chunks.rejected",
                "chunks",
            ):
                if key in entry["values"]:
                    short[key] = entry["values"][key]
            if node_name == "controller" and concern == "state":
                live["controller"] = short
            elif node_name == "safety_filter" and concern == "filter":
                live["filter"] = short
            elif node_name == "policy":
                live["policy"] = short

    latched = latched_qos()
    node.create_subscription(JointState, "/joint_states", on_joints, 100)
    node.create_subscription(Float64MultiArray, "/forward_position_controller/commands", on_command, 100)
    node.create_subscription(JointTrajectory, "/vla/safe_action_chunk", on_chunk("safe"), 10)
    node.create_subscription(JointTrajectory, "/vla/action_chunk", on_chunk("chunks"), 10)
    node.create_subscription(String, "/vla/episode_status", on_status, latched)
    node.create_subscription(DiagnosticArray, "/diagnostics", on_diagnostics, 50)
    node.create_subscription(String, CHUNK_TIMING_TOPIC, on_timing, CHUNK_TIMING_DEPTH)
    reset = node.create_client(Trigger, "/sim/reset")
    commands = _stdin_lines()
    next_state = time.monotonic()
    pending_reset = None
    executor = SingleThreadedExecutor()  # kept: rclpy.spin_once(node) rebuilds the wait set on every call
    executor.add_node(node)
    try:
        while True:
            executor.spin_once(timeout_sec=0.01)
            try:
                command = commands.get_nowait()
            except queue.Empty:
                command = ""
            if command == "stop":
                break
            if command == "reset":
                episode_before = live["episode"] if live["episode"] is not None else -1
                if reset.wait_for_service(timeout_sec=10.0):
                    pending_reset = (reset.call_async(Trigger.Request()), episode_before)
                else:
                    _emit({"event": "error", "detail": "/sim/reset is not available"})
            if pending_reset is not None and pending_reset[0].done():
                # Keep what came before too (the driver may want it); the analysis starts at t0.
                rec["t0"], rec["episode0"], rec["lifted_at"] = now_s(), pending_reset[1] + 1, None
                _emit({"event": "reset", "t0": rec["t0"], "episode": rec["episode0"], "mono": time.monotonic()})
                pending_reset = None
            if time.monotonic() >= next_state:
                next_state += args.period
                speed = 0.0
                if len(last_cmd) >= 2:
                    speed = float(np.max(np.abs(np.subtract(last_cmd[-1], last_cmd[0])))) / (0.01 * (len(last_cmd) - 1))
                _emit(
                    {
                        "state": {
                            **live,
                            "t": now_s(),
                            "mono": time.monotonic(),
                            "commands": len(rec["commands"]),
                            "safe_chunks": len(rec["safe"]),
                            "chunks": len(rec["chunks"]),
                            "cmd_speed": speed,
                            "t0": rec["t0"],
                            "lifted_at": rec["lifted_at"],
                        }
                    }
                )
    finally:
        _emit({"record": rec})
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

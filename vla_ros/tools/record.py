"""``vla-ros record``: record topics to a rosbag2 bag folder (metadata.yaml + MCAP), as ``ros2 bag record -s mcap``.

Pip mode has no ``ros2 bag``; the folder this writes is what rosbag2 writes, so ``ros2 bag info/play`` and
other rosbag2 readers open it. Each topic is subscribed when its first publisher appears, with a QoS
adapted to the publishers (best-effort drivers are recorded; latched topics stay latched). Stops on
Ctrl-C, after ``--duration`` seconds of the node's clock (simulated time with ``--use-sim-time``), or,
with ``--until-lifted``, shortly after the sim's episode status reports a lifted cup. With
``--use-sim-time`` it subscribes to nothing before the first /clock, so every log time is simulated time.
"""

from __future__ import annotations

import argparse
import datetime
import json
import signal
import sys
import time
from pathlib import Path

EXAMPLE = (
    "example: vla-ros record --use-sim-time --duration 5 --instruction 'pick up the red cup' --out runs/record/episode"
)
_WAIT_NOTE_S = 5.0  # tell the user what is missing when nothing has started after this long (wall time)


def parse_args(argv: list[str] | None):
    from vla_ros.ros.recorder import DEFAULT_TOPICS

    parser = argparse.ArgumentParser(prog="vla-ros record", description=__doc__.splitlines()[0], epilog=EXAMPLE)
    parser.add_argument("--out", default="", help="bag folder to create (default runs/record-<date>)")
    parser.add_argument(
        "--topics",
        nargs="+",
        default=list(DEFAULT_TOPICS),
        help="topics; the type comes from the publishers (or give topic:pkg/msg/Type)",
    )
    parser.add_argument("--duration", type=float, default=0.0, help="seconds on the node's clock; 0 = until Ctrl-C")
    parser.add_argument(
        "--until-lifted", action="store_true", help="stop 1 s after /vla/episode_status says a cup is lifted"
    )
    parser.add_argument("--use-sim-time", action="store_true", help="stamp log times with /clock (simulated time)")
    parser.add_argument(
        "--instruction", default="", help="also publish this on /vla/instruction (latched) and record it"
    )
    parser.add_argument(
        "--wait-for",
        default="/joint_states",
        help="start the duration once this topic delivers (default /joint_states)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from vla_ros import __version__
    from vla_ros.data.bag import BagError, info
    from vla_ros.data.mcap_io import BagWriter

    out = Path(args.out or f"runs/record-{datetime.datetime.now():%Y%m%d-%H%M%S}")
    topics = list(args.topics)
    if args.instruction and "/vla/instruction" not in topics:
        topics.append("/vla/instruction")
    try:
        writer = BagWriter(
            out,
            metadata={
                "recorder": f"vla_ros {__version__}",
                "instruction": args.instruction,
                "topics": " ".join(topics),
            },
        )
    except (BagError, OSError) as exc:
        print(f"vla-ros record: {exc}", file=sys.stderr)
        return 2

    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from rclpy.parameter import Parameter
    from rclpy.serialization import deserialize_message
    from rclpy.signals import SignalHandlerOptions
    from std_msgs.msg import String

    from vla_ros.ros.qos import latched_qos
    from vla_ros.ros.recorder import Recorder

    # Ctrl-C and SIGTERM end the loop below, which then closes the bag; rclpy's handlers would shut the
    # context down under a running spin_once instead (see vla_ros.ros.node_main).
    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
    node = Node("vla_recorder", parameter_overrides=[Parameter("use_sim_time", Parameter.Type.BOOL, args.use_sim_time)])
    state = {"start_ns": None, "lifted_ns": None, "stop": False}

    def on_message(topic, type_name, cdr, now_ns):
        if state["start_ns"] is None and topic == args.wait_for:
            state["start_ns"] = now_ns
        if args.until_lifted and topic == "/vla/episode_status" and state["lifted_ns"] is None:
            status = json.loads(deserialize_message(cdr, String).data)
            if status.get("lifted"):
                state["lifted_ns"] = now_ns

    if args.instruction:  # before the recorder looks for publishers, so it finds this one too
        latched = latched_qos()
        pub = node.create_publisher(String, "/vla/instruction", latched)
    # On simulated time nothing is subscribed before the first /clock: a message taken earlier would be
    # logged at time 0, seconds before the rest (latched topics arrive again once subscribed).
    recorder = None
    # One executor that keeps the node: rclpy.spin_once(node) adds and removes the node on every call, which
    # rebuilds the wait set for each message; beside a busy graph that fell behind 100 Hz joint states
    # and 30 Hz frames (a 2 s recording under load held 176 joint states, not 200).
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    old_handlers = {
        signum: signal.signal(signum, lambda *_: state.update(stop=True)) for signum in (signal.SIGINT, signal.SIGTERM)
    }
    print(f"recording {len(topics)} topics to {out}/", file=sys.stderr)
    published, t_wall0, noted, last_poll, now = False, time.monotonic(), False, 0.0, 0
    try:
        while rclpy.ok() and not state["stop"]:
            executor.spin_once(timeout_sec=0.05)
            now = node.get_clock().now().nanoseconds
            clock_runs = now > 0 or not args.use_sim_time
            if recorder is None and clock_runs:
                recorder = Recorder(node, writer, topics, on_message)
                last_poll = time.monotonic()
            elif recorder is not None and time.monotonic() - last_poll > 0.1:  # new publishers (rosbag2 polls too)
                recorder.poll()
                last_poll = time.monotonic()
            if args.instruction and not published and state["start_ns"] is not None:
                pub.publish(String(data=args.instruction))  # after the graph is up, so everyone hears it
                published = True
            if args.duration and state["start_ns"] is not None and now - state["start_ns"] >= args.duration * 1e9:
                break
            if state["lifted_ns"] is not None and now - state["lifted_ns"] >= 1e9:
                break
            if not noted and state["start_ns"] is None and time.monotonic() - t_wall0 > _WAIT_NOTE_S:
                noted = True
                if recorder is None:
                    print(
                        "still waiting for /clock (--use-sim-time): nothing is recorded before simulated time runs",
                        file=sys.stderr,
                    )
                else:
                    waiting = recorder.waiting
                    print(
                        f"still waiting for the first message on {args.wait_for}"
                        + (f"; no publisher yet on: {' '.join(waiting)}" if waiting else ""),
                        file=sys.stderr,
                    )
    finally:
        executor.shutdown()
        writer.close()
        node.destroy_node()
        rclpy.try_shutdown()
        for signum, handler in old_handlers.items():
            signal.signal(signum, handler)
    summary = info(out)
    counts = ", ".join(f"{t['name']} {t['count']}" for t in summary["topics"] if t["count"])
    missing = recorder.waiting if recorder is not None else topics
    failed = recorder.failed if recorder is not None else {}
    print(
        f"wrote {out}/: {summary['messages']} messages over {summary['duration_s']:.2f} s ({counts})"
        + (
            "; /clock never ran, so nothing was subscribed"
            if recorder is None
            else f"; never published: {' '.join(missing)}"
            if missing
            else ""
        )
        + "".join(f"; {topic} not recorded: {why}" for topic, why in failed.items()),
        file=sys.stderr,
    )
    # ran_s: the node's clock at the stop minus at the first --wait-for message (what --duration counts)
    ran_s = None if state["start_ns"] is None else (now - state["start_ns"]) * 1e-9
    print(
        json.dumps(
            {
                "path": str(out),
                "messages": summary["messages"],
                "duration_s": summary["duration_s"],
                "ran_s": ran_s,
                "not_recorded": missing + list(failed),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``vla-ros record``: record topics to a rosbag2-compatible MCAP file (pip mode has no ``ros2 bag``).

Stops on Ctrl-C, after ``--duration`` seconds of the node's clock (simulated time with ``--use-sim-time``),
or, with ``--until-lifted``, shortly after the sim's episode status reports a lifted cup.
"""

from __future__ import annotations

import argparse
import datetime
import json
import signal
import sys
from pathlib import Path

EXAMPLE = (
    "example: vla-ros record --use-sim-time --duration 5 --instruction 'pick up the red cup' "
    "--out runs/record/episode.mcap"
)


def parse_args(argv: list[str] | None):
    from vla_ros.ros.recorder import DEFAULT_TOPICS

    parser = argparse.ArgumentParser(prog="vla-ros record", description=__doc__.splitlines()[0], epilog=EXAMPLE)
    parser.add_argument("--out", default="", help="output .mcap (default runs/record-<date>/episode.mcap)")
    parser.add_argument("--topics", nargs="+", default=list(DEFAULT_TOPICS), help="topics, or topic:pkg/msg/Type")
    parser.add_argument("--duration", type=float, default=0.0, help="seconds on the node's clock; 0 = until Ctrl-C")
    parser.add_argument("--until-lifted", action="store_true", help="stop 1 s after /vla/episode_status says a cup is lifted")
    parser.add_argument("--use-sim-time", action="store_true", help="stamp log times with /clock (simulated time)")
    parser.add_argument("--instruction", default="", help="also publish this on /vla/instruction (latched) and record it")
    parser.add_argument("--wait-for", default="/joint_states", help="start the duration once this topic delivers (default /joint_states)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import rclpy
    from rclpy.node import Node
    from rclpy.signals import SignalHandlerOptions
    from rclpy.parameter import Parameter
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from std_msgs.msg import String

    from vla_ros import __version__
    from vla_ros.data.mcap_io import McapEpisodeWriter, summary
    from vla_ros.ros.recorder import Recorder

    out = Path(args.out or f"runs/record-{datetime.datetime.now():%Y%m%d-%H%M%S}/episode.mcap")
    # Ctrl-C and SIGTERM end the loop below, which then closes the file; rclpy's handlers would shut the
    # context down under a running spin_once instead (see vla_ros.ros.node_main).
    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
    node = Node("vla_recorder", parameter_overrides=[Parameter("use_sim_time", Parameter.Type.BOOL, args.use_sim_time)])
    state = {"start_ns": None, "lifted_ns": None, "stop": False}

    def on_message(topic, type_name, cdr, now_ns):
        if state["start_ns"] is None and topic == args.wait_for:
            state["start_ns"] = now_ns
        if args.until_lifted and topic == "/vla/episode_status" and state["lifted_ns"] is None:
            from rclpy.serialization import deserialize_message

            status = json.loads(deserialize_message(cdr, String).data)
            if status.get("lifted"):
                state["lifted_ns"] = now_ns

    topics = list(args.topics)
    if args.instruction and "/vla/instruction" not in topics:
        topics.append("/vla/instruction")
    writer = McapEpisodeWriter(out, metadata={"recorder": f"vla_ros {__version__}", "instruction": args.instruction, "topics": " ".join(topics)})
    Recorder(node, writer, topics, on_message)
    if args.instruction:
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        pub = node.create_publisher(String, "/vla/instruction", latched)
    old_handlers = {signum: signal.signal(signum, lambda *_: state.update(stop=True)) for signum in (signal.SIGINT, signal.SIGTERM)}
    print(f"recording {len(topics)} topics to {out}", file=sys.stderr)
    published = False
    try:
        while rclpy.ok() and not state["stop"]:
            rclpy.spin_once(node, timeout_sec=0.05)
            now = node.get_clock().now().nanoseconds
            if args.instruction and not published and state["start_ns"] is not None:
                pub.publish(String(data=args.instruction))  # after the graph is up, so everyone hears it
                published = True
            if args.duration and state["start_ns"] is not None and now - state["start_ns"] >= args.duration * 1e9:
                break
            if state["lifted_ns"] is not None and now - state["lifted_ns"] >= 1e9:
                break
    finally:
        writer.close()
        node.destroy_node()
        rclpy.try_shutdown()
        for signum, handler in old_handlers.items():
            signal.signal(signum, handler)
    info = summary(out)
    counts = ", ".join(f"{t} {v['count']}" for t, v in info["topics"].items() if v["count"])
    print(f"wrote {out}: {info['messages']} messages over {info['duration_s']:.2f} s ({counts})", file=sys.stderr)
    print(json.dumps({"path": str(out), **{k: info[k] for k in ("messages", "duration_s")}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

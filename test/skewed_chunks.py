"""A GPU host whose clock is off: publishes action chunks whose stamps lie ahead (or behind) the robot's.

Run inside the GPU host's namespace by test_two_hosts.py. Each chunk holds the newest measured position
(so it is safe whatever its stamp) and is stamped with the newest joint state's stamp plus the offset
of its phase, 10 chunks a second on the robot's /clock:

    normal  (offset 0)        --count chunks
    skewed  (offset +skew)    --count chunks: the safety filter must refuse them (future_stamp)
    ahead   (offset +ahead)   --count chunks within the filter's bound (the test starts it with a wide one)
                              but beyond the controller's: the controller must refuse them (future_stamp)
    late    (offset -late)    --count chunks: stale on arrival, the filter must refuse them (stale_chunk)
    widen_refused (+skew)     asks the filter to raise max_future_stamp_s to --widen over the link (a
                              loosening: refused at run time), then --count chunks, still refused
    normal  (offset 0)        --count chunks: accepted again

Prints one JSON line per phase start ({"phase": name, "mono": ...}), the widening's answer ({"widen":
{"successful", "reason"}}) and {"done": counts} at the end.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rcl_interfaces.msg import Parameter as ParameterMsg
from rcl_interfaces.msg import ParameterType, ParameterValue
from rcl_interfaces.srv import SetParameters
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState
from trajectory_msgs.msg import JointTrajectory

from vla_ros.chunks import COMMANDED_JOINTS, ActionChunk
from vla_ros.ros.chunk_msgs import msg_from_chunk
from vla_ros.ros.time import ns_from_time_msg


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--skew", type=float, default=1.0, help="seconds the skewed stamps lie ahead")
    parser.add_argument("--ahead", type=float, default=1.0, help="seconds the stamps of the ahead phase lie ahead")
    parser.add_argument("--late", type=float, default=0.7, help="seconds the late chunks' stamps lie behind")
    parser.add_argument(
        "--widen", type=float, default=5.0, help="the max_future_stamp_s asked for in the widen_refused phase"
    )
    parser.add_argument("--count", type=int, default=15, help="chunks per phase")
    parser.add_argument(
        "--listeners",
        type=int,
        default=1,
        help="start once this many subscribers listen on /vla/safe_action_chunk (the controller, and a recorder)",
    )
    args = parser.parse_args()
    rclpy.init()
    node = Node("skewed_chunks", parameter_overrides=[Parameter("use_sim_time", Parameter.Type.BOOL, True)])
    pub = node.create_publisher(JointTrajectory, "/vla/action_chunk", 10)
    newest: dict = {}

    def on_joints(msg: JointState) -> None:
        newest["stamp_ns"] = ns_from_time_msg(msg.header.stamp)
        newest["q"] = dict(zip(msg.name, msg.position))

    # Depth 1: the newest joint state only. A deeper queue would hand a busy injector a backlog of older
    # ones, and its "normal" chunks would be stamped late enough to be refused as stale.
    node.create_subscription(JointState, "/joint_states", on_joints, 1)
    set_params = node.create_client(SetParameters, "/safety_filter/set_parameters")

    def spin_sim(seconds: float) -> None:
        end = None
        while True:
            rclpy.spin_once(node, timeout_sec=0.01)
            now = node.get_clock().now().nanoseconds
            if now == 0:
                continue
            end = end or now + int(seconds * 1e9)
            if now >= end:
                return

    def publish(offset_s: float) -> None:
        q = [newest["q"][j] for j in COMMANDED_JOINTS]
        times = 0.05 * np.arange(1, 17)  # (16,) like the policy's chunks: 0.8 s at 20 Hz
        chunk = ActionChunk(
            joint_names=tuple(COMMANDED_JOINTS),
            stamp_ns=newest["stamp_ns"] + int(offset_s * 1e9),
            time_from_start_s=times,
            positions=np.tile(q, (len(times), 1)),
        )
        pub.publish(msg_from_chunk(chunk))

    ready: dict = {}

    def on_diagnostics(msg: DiagnosticArray) -> None:
        for st in msg.status:  # start once the filter filters and the controller has joint states
            if st.name == "safety_filter: filter":
                ready[st.name] = st.level == DiagnosticStatus.OK
            elif st.name == "controller: state":
                ready[st.name] = {kv.key: kv.value for kv in st.values}.get("mode") in (
                    "holding",
                    "tracking",
                    "stopping",
                )

    node.create_subscription(DiagnosticArray, "/diagnostics", on_diagnostics, 10)
    # ... and once whoever must hear the filter's output listens: a recorder that starts after the first
    # phase would find its chunks missing, not refused
    while (
        "q" not in newest
        or len(ready) < 2
        or not all(ready.values())
        or node.count_subscribers("/vla/safe_action_chunk") < args.listeners
    ):
        rclpy.spin_once(node, timeout_sec=0.05)
    counts = {}
    try:
        for phase, offset in (
            ("normal", 0.0),
            ("skewed", args.skew),
            ("ahead", args.ahead),
            ("late", -args.late),
            ("widen_refused", args.skew),
            ("normal_again", 0.0),
        ):
            if phase == "widen_refused":  # loosening a safety bound over the link is refused at run time
                value = ParameterValue(type=ParameterType.PARAMETER_DOUBLE, double_value=args.widen)
                request = SetParameters.Request(parameters=[ParameterMsg(name="max_future_stamp_s", value=value)])
                assert set_params.wait_for_service(timeout_sec=30.0), "/safety_filter/set_parameters not available"
                future = set_params.call_async(request)
                while not future.done():
                    rclpy.spin_once(node, timeout_sec=0.05)
                result = future.result().results[0]
                print(json.dumps({"widen": {"successful": result.successful, "reason": result.reason}}), flush=True)
            print(json.dumps({"phase": phase, "mono": time.monotonic()}), flush=True)
            for _ in range(args.count):
                publish(offset)
                spin_sim(0.1)
            counts[phase] = args.count
            spin_sim(0.5)  # the last chunk of a phase is handled before the next phase starts
        print(json.dumps({"done": counts}), flush=True)
        while True:  # keep running: the test stops this host
            rclpy.spin_once(node, timeout_sec=0.1)
    except KeyboardInterrupt:
        pass
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())

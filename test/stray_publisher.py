"""A foreign node that publishes well-formed chunks straight on the controller's input, as in issue 15:
from the measured state, shoulder pan +0.8 rad over 2 s, stamped with the joint states' time, every 0.1 s.

    python test/stray_publisher.py NODE_NAME [TOPIC]

A real rclpy process on simulated time (run it with the test's ROS_DOMAIN_ID); it runs until SIGTERM/SIGINT.
"""

import sys

import numpy as np
import rclpy
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState
from trajectory_msgs.msg import JointTrajectory

from vla_ros.chunks import COMMANDED_JOINTS, ActionChunk
from vla_ros.ros.chunk_msgs import msg_from_chunk
from vla_ros.ros.time import ns_from_time_msg


def main() -> None:
    name = sys.argv[1]
    topic = sys.argv[2] if len(sys.argv) > 2 else "/vla/safe_action_chunk"
    rclpy.init()
    node = Node(name, parameter_overrides=[Parameter("use_sim_time", Parameter.Type.BOOL, True)])
    latest = {}

    def on_joint_state(msg: JointState) -> None:
        pos = dict(zip(msg.name, msg.position))
        if all(j in pos for j in COMMANDED_JOINTS):
            latest["q"] = np.array([pos[j] for j in COMMANDED_JOINTS])
            latest["stamp_ns"] = ns_from_time_msg(msg.header.stamp)

    pub = node.create_publisher(JointTrajectory, topic, 10)

    def publish() -> None:
        if "q" not in latest:
            return
        tfs = 0.02 * np.arange(1, 101)  # 2 s
        points = latest["q"] + np.outer(tfs / 2.0, [0.8, 0, 0, 0, 0, 0, 0])
        pub.publish(msg_from_chunk(ActionChunk(COMMANDED_JOINTS, latest["stamp_ns"], tfs, points)))

    node.create_subscription(JointState, "/joint_states", on_joint_state, 10)
    node.create_timer(0.1, publish)
    try:
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        node.destroy_node()
        rclpy.try_shutdown()


if __name__ == "__main__":
    main()

"""vla_ros: a vision-language-action policy for ROS 2 robot arms.

Functional core (``vla_ros.sim``, and later tokens, model, safety, control) with no rclpy import;
thin ROS 2 node shells in ``vla_ros.nodes``.
"""

__version__ = "0.1.0"

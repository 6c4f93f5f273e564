"""vla_ros: a vision-language-action policy for ROS 2 robot arms.

Functional core (``vla_ros.sim``, and later tokens, model, safety, control) with no rclpy import;
thin ROS 2 node shells in ``vla_ros.nodes``.
"""

import os

# Headless rendering: MuJoCo picks its OpenGL platform when it is first imported, so this must run
# before any ``import mujoco``. EGL works with Mesa's software renderer; set MUJOCO_GL=osmesa to override.
os.environ.setdefault("MUJOCO_GL", "egl")

__version__ = "0.1.0"

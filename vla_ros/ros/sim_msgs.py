"""The messages a robot driver and camera driver publish, built from the simulation core.

Shared by ``sim_node`` (live) and ``vla-ros collect`` (recorded straight to MCAP), so demonstrations
contain exactly the messages the robot graph carries.
"""

from __future__ import annotations

import numpy as np
from sensor_msgs.msg import CameraInfo, Image, JointState

from vla_ros.cameras import FRONT, optical_frame


def joint_state_msg(sim, stamp) -> JointState:
    js = JointState()
    js.header.stamp = stamp
    js.name = list(sim.joint_names)
    js.position = sim.joint_positions().tolist()
    js.velocity = sim.joint_velocities().tolist()
    js.effort = sim.joint_efforts().tolist()
    return js


def image_msg(rgb: np.ndarray, stamp, frame_id: str) -> Image:
    img = Image()
    img.header.stamp = stamp
    img.header.frame_id = frame_id
    img.height, img.width = int(rgb.shape[0]), int(rgb.shape[1])
    img.encoding = "rgb8"
    img.is_bigendian = 0
    img.step = int(rgb.shape[1]) * 3
    img.data = rgb.tobytes()
    return img


def camera_info_msg(k, stamp, frame_id: str) -> CameraInfo:
    """``k``: the sim's CameraInfo-like intrinsics (width, height, fx, fy, cx, cy); no distortion."""
    info = CameraInfo()
    info.header.stamp = stamp
    info.header.frame_id = frame_id
    info.width, info.height = k.width, k.height
    info.distortion_model = "plumb_bob"
    info.d = [0.0] * 5
    info.k = [k.fx, 0.0, k.cx, 0.0, k.fy, k.cy, 0.0, 0.0, 1.0]
    info.r = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    info.p = [k.fx, 0.0, k.cx, 0.0, 0.0, k.fy, k.cy, 0.0, 0.0, 0.0, 1.0, 0.0]
    return info


def sensor_messages(sim, cameras=(FRONT,)):
    """What the sim node publishes at the sim's current step, for in-process tools (evaluation, attention):
    (JointState or None, [(camera, RGB, Image) for each of ``cameras``] or [] when no frame is due)."""
    from vla_ros.ros.time import time_msg_from_ns

    stamp = time_msg_from_ns(sim.time_ns)
    js = joint_state_msg(sim, stamp) if sim.is_joint_state_step() else None
    if not sim.is_frame_step():
        return js, []
    frames = []
    for camera in cameras:
        rgb = sim.render(camera)
        frames.append((camera, rgb, image_msg(rgb, stamp, optical_frame(camera))))
    return js, frames

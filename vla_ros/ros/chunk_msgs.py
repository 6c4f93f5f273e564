"""ActionChunk <-> trajectory_msgs/JointTrajectory (the policy, filter and controller all use these two)."""

from __future__ import annotations

import numpy as np
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from vla_ros import reasons
from vla_ros.chunks import ActionChunk, ChunkError
from vla_ros.ros.time import duration_msg_from_s, ns_from_time_msg, seconds_from_duration_msg, time_msg_from_ns


def chunk_from_msg(msg: JointTrajectory) -> ActionChunk:
    """Raises ChunkError (``empty_chunk``, ``size_mismatch``) when the message has no array shape."""
    names = tuple(msg.joint_names)
    if not msg.points:
        raise ChunkError(reasons.EMPTY_CHUNK, "the trajectory has no points")
    if not names:
        raise ChunkError(reasons.SIZE_MISMATCH, "the trajectory names no joints")
    for k, p in enumerate(msg.points):
        if len(p.positions) != len(names):
            raise ChunkError(
                reasons.SIZE_MISMATCH, f"point {k} has {len(p.positions)} positions for {len(names)} joints"
            )
    has_vel = all(len(p.velocities) == len(names) for p in msg.points)
    if not has_vel and any(len(p.velocities) for p in msg.points):
        raise ChunkError(reasons.SIZE_MISMATCH, "velocities given for some points or joints but not all")
    return ActionChunk(
        joint_names=names,
        stamp_ns=ns_from_time_msg(msg.header.stamp),
        time_from_start_s=np.array(
            [seconds_from_duration_msg(p.time_from_start) for p in msg.points], dtype=np.float64
        ),
        positions=np.array([list(p.positions) for p in msg.points], dtype=np.float64),
        velocities=np.array([list(p.velocities) for p in msg.points], dtype=np.float64) if has_vel else None,
    )


def msg_from_chunk(chunk: ActionChunk, frame_id: str = "") -> JointTrajectory:
    msg = JointTrajectory()
    msg.header.stamp = time_msg_from_ns(chunk.stamp_ns)
    msg.header.frame_id = frame_id
    msg.joint_names = list(chunk.joint_names)
    for k in range(chunk.horizon):
        point = JointTrajectoryPoint()
        point.positions = [float(v) for v in chunk.positions[k]]
        if chunk.velocities is not None:
            point.velocities = [float(v) for v in chunk.velocities[k]]
        point.time_from_start = duration_msg_from_s(float(chunk.time_from_start_s[k]))
        msg.points.append(point)
    return msg

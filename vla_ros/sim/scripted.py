"""A scripted top-down pick for the simulated arm: closed-form inverse kinematics plus a waypoint plan.

This is the stand-in motion for the demo until a trained policy ships; the closed-loop expert that data
collection uses (``expert``) drives any robot profile's arm through the generic ``ik`` instead, which gives the
same joints on this arm (test_sim_profile). It reads the true cup position from the simulator, which a policy
never sees. The heights below are the expert's too, above the table top.

The arm is a pan joint followed by a planar shoulder-elbow-wrist chain (all pitch axes parallel), so a
gripper pointing straight down reduces to two-link planar IK for the wrist point plus
``wrist_pitch = pi - shoulder_lift - elbow`` (the pitches must sum to pi for the tool to point down).
"""

from __future__ import annotations

import numpy as np

# Kinematic constants of vla_arm.urdf (metres): shoulder height above the table, upper-arm and forearm
# lengths between pitch axes, and wrist-pitch axis to tool centre point.
SHOULDER_Z_M = 0.25
UPPER_ARM_M = 0.35
FOREARM_M = 0.30
WRIST_TO_TCP_M = 0.135

GRIPPER_OPEN_M = 0.04
GRIPPER_CLOSED_M = 0.0  # commanded past the cup's radius so the fingers squeeze it
GRASP_TCP_Z_M = 0.05
APPROACH_TCP_Z_M = 0.18
LIFT_TCP_Z_M = 0.20


class UnreachableError(ValueError):
    """No arm pose puts the tool centre point there pointing down (this closed form, or ``vla_ros.sim.ik``)."""


def top_down_ik(tcp_xyz_m, wrist_roll_rad: float = 0.0) -> np.ndarray:
    """Six arm joint angles that put the tool centre point at ``tcp_xyz_m`` with the gripper pointing down."""
    x, y, z = (float(v) for v in tcp_xyz_m)
    pan = np.arctan2(y, x)
    r = np.hypot(x, y)
    # Wrist-pitch axis sits straight above the tool centre point; solve the planar two-link chain for it.
    dx, dz = r, z + WRIST_TO_TCP_M - SHOULDER_Z_M
    d2 = dx * dx + dz * dz
    cos_elbow = (d2 - UPPER_ARM_M**2 - FOREARM_M**2) / (2.0 * UPPER_ARM_M * FOREARM_M)
    if not -1.0 <= cos_elbow <= 1.0:
        raise UnreachableError(f"tcp {tcp_xyz_m} is out of reach (wrist distance {np.sqrt(d2):.3f} m)")
    elbow = np.arccos(cos_elbow)  # positive: the forearm folds forward, elbow stays up
    lift = np.arctan2(dx, dz) - np.arctan2(FOREARM_M * np.sin(elbow), UPPER_ARM_M + FOREARM_M * np.cos(elbow))
    wrist_pitch = np.pi - lift - elbow
    return np.array([pan, lift, elbow, 0.0, wrist_pitch, wrist_roll_rad])


def pick_plan(cup_xyz_m, start_q: np.ndarray, speed_scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Waypoints (times_s [K], positions [K, 7]) for approach, descend, close, lift.

    Straight-line segments in Cartesian space are sampled every 2 cm so the joint-space interpolation
    between waypoints stays close to the straight line. ``speed_scale`` > 1 slows everything down.
    """
    cx, cy = float(cup_xyz_m[0]), float(cup_xyz_m[1])
    above = np.array([cx, cy, APPROACH_TCP_Z_M])
    grasp = np.array([cx, cy, GRASP_TCP_Z_M])
    lift = np.array([cx, cy, LIFT_TCP_Z_M])
    times: list[float] = []
    points: list[np.ndarray] = []

    def add(t: float, arm: np.ndarray, gripper: float) -> None:
        times.append(t * speed_scale)
        points.append(np.append(arm, gripper))

    def line(t0: float, t1: float, a: np.ndarray, b: np.ndarray, gripper: float) -> None:
        n = max(2, int(np.ceil(np.linalg.norm(b - a) / 0.02)))
        for k in range(1, n + 1):
            s = k / n
            add(t0 + (t1 - t0) * s, top_down_ik(a + (b - a) * s), gripper)

    q_above = top_down_ik(above)
    start = np.asarray(start_q, dtype=float)
    # Joint-space move from wherever the arm is to above the cup (no straight line needed in free space).
    for k in range(1, 6):
        s = k / 5
        add(0.4 * k, start[:6] + (q_above - start[:6]) * s, GRIPPER_OPEN_M)
    line(2.0, 3.6, above, grasp, GRIPPER_OPEN_M)
    add(4.4, top_down_ik(grasp), GRIPPER_CLOSED_M)
    add(5.0, top_down_ik(grasp), GRIPPER_CLOSED_M)
    line(5.0, 6.8, grasp, lift, GRIPPER_CLOSED_M)
    return np.asarray(times), np.vstack(points)

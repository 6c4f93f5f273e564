"""Chunk points kept off the table by the filter's own clearance: a chunk shaping step (no rclpy import).

The safety filter rejects or cuts a chunk whose path brings a link closer to the table than its
``clearance_m``. A learned chunk near a grasp does that by millimetres: a regression error in height,
not motion anyone meant (on the shipped model these were almost every rejection, fingertips 3-10 mm
above the table where the demonstrations kept 25 mm). ``TableLift.lift`` raises such a point: the link
nearest the table is moved straight up, without turning, by damped least-squares steps through its
Jacobian, until every link keeps the clearance plus ``margin_m``. The tool keeps its horizontal position
and orientation, so a grasp stays a grasp, only higher.

Only the table is handled; self-collision, the workspace bounds and obstacles stay the filter's to
refuse, and the filter checks every lifted chunk as before.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pinocchio as pin


class TableLift:
    """Raises chunk points whose links come within ``clearance_m + margin_m`` of the table.

    Args:
        robot: the filter's ``safety.robot.RobotModel`` (collision geometry from the URDF).
        config: the filter's ``SafetyConfig`` (table height, clearance, enabled).
        joint_names: the chunk's joints, all actuated joints of ``robot``; actuated joints the chunk does
            not name are taken at the robot's reference configuration.
        margin_m: clearance kept beyond the filter's, so that tracking and the filter's own sampling
            between points do not bring the link back within it.
        iterations: least-squares steps per point at most (each re-measures the distance).
    """

    def __init__(self, robot, config, joint_names: Sequence[str], margin_m: float = 0.005, iterations: int = 4) -> None:
        from vla_ros.safety.collision import TABLE, CollisionChecker

        if not (np.isfinite(margin_m) and margin_m >= 0.0) or iterations < 1:
            raise ValueError(f"margin_m must be >= 0 and iterations >= 1, got {margin_m}, {iterations}")
        unknown = [n for n in joint_names if n not in robot.joint_names]
        if unknown:
            raise ValueError(f"joints {unknown} are not actuated joints of the robot ({list(robot.joint_names)})")
        self.robot = robot
        self.enabled = bool(config.table_enabled)
        self.target_m = float(config.clearance_m) + float(margin_m)
        self.iterations = int(iterations)
        self._cols = np.array([robot.joint_names.index(n) for n in joint_names], dtype=np.intp)
        # Only joints that turn move a link up; a sliding finger does not, and must keep its grasp.
        self._movers = np.array([c for c in self._cols if not robot.prismatic[c]], dtype=np.intp)
        self._checker = CollisionChecker(
            robot,
            self_clearance_m=config.self_clearance_m,
            clearance_m=config.clearance_m,
            max_joint_step=np.ones(len(robot.joint_names)),
            table_height_m=config.table_height_m,
        )
        self._pairs = [p for p, kind in enumerate(self._checker.kinds) if kind == TABLE]
        self._data = robot.model.createData()
        self._q_full = np.zeros(robot.model.nq)
        self.lifted_points = 0  # points raised since construction (policy_node: shaping.lifted_points)

    def _nearest(self, q_act: np.ndarray) -> tuple[float, int, np.ndarray]:
        """(distance, robot geometry index, nearest point on it in the world) of the link nearest the table."""
        checker = self._checker
        best = (np.inf, -1, np.zeros(3))
        for p in self._pairs:
            result = checker.pair_result(q_act, p)
            if result.min_distance < best[0]:
                geom = checker.geom_model.collisionPairs[p].first
                best = (float(result.min_distance), int(geom), np.array(result.getNearestPoint1()))
        return best

    def _step(self, q_act: np.ndarray, geom: int, point: np.ndarray, rise_m: float) -> np.ndarray:
        """Joint step moving the link of ``geom`` up by ``rise_m`` at ``point``, without turning it."""
        model, data = self.robot.model, self._data
        self.robot.full_q(q_act, out=self._q_full)
        pin.computeJointJacobians(model, data, self._q_full)
        joint = self.robot.geom_joints[geom]
        jac = pin.getJointJacobian(model, data, int(joint), pin.ReferenceFrame.LOCAL_WORLD_ALIGNED)
        r = point - data.oMi[int(joint)].translation
        jac = jac.copy()
        jac[:3] -= pin.skew(r) @ jac[3:]  # linear velocity of the point, not of the joint origin
        jac = (jac @ self.robot.actuation_matrix)[:, self._movers]  # (6, movers)
        twist = np.array([0.0, 0.0, rise_m, 0.0, 0.0, 0.0])
        damping = 1e-4
        dq = jac.T @ np.linalg.solve(jac @ jac.T + damping * np.eye(6), twist)
        step = np.zeros_like(q_act)
        step[self._movers] = dq
        return step

    def lift(self, positions: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
        """(H, J) positions (the chunk's joint order) with every point clear of the table by the target
        where a lift within the position limits ``lower``/``upper`` (J,) reaches it; others as close as
        the steps got (the filter decides about them)."""
        positions = np.array(positions, dtype=np.float64)
        if not self.enabled or not self._pairs or not len(self._movers):
            return positions
        lo = self.robot.lower.copy()
        hi = self.robot.upper.copy()
        lo[self._cols], hi[self._cols] = lower, upper
        for k in range(positions.shape[0]):
            q = self.robot.reference_q.copy()
            q[self._cols] = positions[k]
            moved = False
            for _ in range(self.iterations):
                distance, geom, point = self._nearest(q)
                if distance >= self.target_m or geom < 0:
                    break
                q = np.clip(q + self._step(q, geom, point, self.target_m - distance), lo, hi)
                moved = True
            if moved:
                positions[k] = q[self._cols]
                self.lifted_points += 1
        return positions

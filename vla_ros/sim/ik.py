"""Top-down inverse kinematics for any serial arm with a TCP frame: damped least squares with Pinocchio.

The scripted expert asks for one kind of pose only: the tool centre point at a point, the tool pointing
straight down, turned about its own axis by a wrist roll. ``TopDownIK`` solves that for the arm joints a robot
profile names (``vla_ros.robot_profile``), from the URDF the safety filter reads too:

    e = [p* - p(q) ; log3(R* R(q)^T)]        position and orientation error, world frame
    dq = J^T (J J^T + lambda^2 I)^-1 e        damped least squares (Wampler 1986; Buss, "Introduction to
                                              inverse kinematics with Jacobian transpose, pseudoinverse and
                                              damped least squares methods", 2004)
    q <- clip(q + dq, lower, upper)

A joint sitting on a limit that the step would push further out is left out of the next solve (its Jacobian
column zeroed), so the others take up the motion and the limits are always respected. On an arm with more
joints than the task needs (a 7-joint arm), the spare motion pulls the posture gently towards home, so
repeated solves do not wander through the null space. Warm-started from the measured pose, a solve takes a
handful of iterations.

The orientation asked for: the TCP's orientation at home, made exactly top-down (its z axis straight down),
turned about the vertical by the target's azimuth (the arm's "pan", ``atan2(y, x)``) less the home TCP's, then
about the tool's own axis by the wrist roll. On the bundled arm this is the pose the closed form
(``vla_ros.sim.scripted.top_down_ik``) gives: pan, the pitches summing to pi, the wrist roll joint at the roll.
"""

from __future__ import annotations

import dataclasses
import math
import xml.etree.ElementTree as ET

import numpy as np
import pinocchio as pin

from vla_ros.robot_profile import ProfileError, RobotProfile
from vla_ros.sim.scripted import UnreachableError  # one error for "no top-down pose there", closed form or not
from vla_ros.urdf_limits import limits_for

__all__ = ["IKConfig", "IKResult", "TopDownIK", "UnreachableError"]


@dataclasses.dataclass(frozen=True)
class IKConfig:
    """Args:
    position_tolerance_m / angle_tolerance_rad: a solve stops once both errors are below these.
    reach_tolerance_m / reach_angle_rad: a solve that ends farther off raises UnreachableError.
    damping: lambda of damped least squares (m); larger is steadier near singular poses, slower near a solution.
    max_step_rad: the largest change of any joint in one iteration (rad or m), so a far target is approached
        along a path rather than jumped to.
    max_iterations: give up after this many.
    posture_gain: share of the way back to the home posture per iteration, in the null space of the task
        (only an arm with spare joints has one).
    """

    position_tolerance_m: float = 1e-4
    angle_tolerance_rad: float = 1e-3
    reach_tolerance_m: float = 2e-3
    reach_angle_rad: float = 0.02
    damping: float = 0.01
    max_step_rad: float = 0.3
    max_iterations: int = 100
    posture_gain: float = 0.05

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not (math.isfinite(value) and (value > 0 or (f.name == "posture_gain" and value == 0))):
                raise ValueError(f"{f.name} must be > 0, got {value}")


@dataclasses.dataclass(frozen=True)
class IKResult:
    q: np.ndarray  # (n_arm,) in the profile's arm_joints order
    position_error_m: float
    angle_error_rad: float
    iterations: int


def _rot_z(angle: float) -> np.ndarray:
    c, s = math.cos(angle), math.sin(angle)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def _top_down(rotation: np.ndarray) -> np.ndarray:
    """The rotation nearest ``rotation`` whose z axis points straight down, keeping its x axis' heading."""
    x = rotation[:, 0].copy()
    x[2] = 0.0
    if np.linalg.norm(x) < 1e-6:  # the tool's x axis is vertical: keep its y axis' heading instead
        y = rotation[:, 1].copy()
        y[2] = 0.0
        y /= np.linalg.norm(y)
        x = np.cross(y, [0.0, 0.0, -1.0])
    x /= np.linalg.norm(x)
    z = np.array([0.0, 0.0, -1.0])
    return np.column_stack([x, np.cross(z, x), z])


class TopDownIK:
    """``solve(tcp_xyz_m, wrist_roll_rad, q_start) -> IKResult`` for a profile's arm joints (see the module)."""

    def __init__(self, profile: RobotProfile, config: IKConfig | None = None) -> None:
        self.config = config or IKConfig()
        self.profile = profile
        root = ET.fromstring(profile.urdf_text())
        for link in root.findall("link"):  # kinematics only: meshes need not be found
            for element in link.findall("visual") + link.findall("collision"):
                link.remove(element)
        try:
            full = pin.buildModelFromXML(ET.tostring(root, encoding="unicode"))
        except (RuntimeError, ValueError) as err:
            raise ProfileError(f"robot profile {profile.name}: Pinocchio cannot load {profile.urdf}: {err}") from None
        arm = list(profile.arm_joints)
        missing = [j for j in arm if not full.existJointName(j)]
        if missing:
            raise ProfileError(f"robot profile {profile.name}: arm joints {missing} are not joints of {profile.urdf}")
        for name in arm:
            joint = full.joints[full.getJointId(name)]
            if joint.nq != 1:
                raise ProfileError(
                    f"robot profile {profile.name}: arm joint {name} ({joint.shortname()}) is not revolute or "
                    "prismatic with limits; the top-down IK handles those only"
                )
        if not full.existFrame(profile.tcp_link):
            raise ProfileError(f"robot profile {profile.name}: tcp_link {profile.tcp_link!r} is not a link of the URDF")
        # Every other joint (the fingers) is held at zero, clipped into its limits: it does not move the TCP.
        locked = [j for j in range(1, full.njoints) if full.names[j] not in arm]
        q_ref = np.clip(pin.neutral(full), full.lowerPositionLimit, full.upperPositionLimit)
        self.model = pin.buildReducedModel(full, locked, q_ref) if locked else full
        self.data = self.model.createData()
        self.frame = self.model.getFrameId(profile.tcp_link)
        # arm_joints order <-> the reduced model's configuration order
        self._q_index = np.array([self.model.joints[self.model.getJointId(j)].idx_q for j in arm], dtype=np.intp)
        self._v_index = np.array([self.model.joints[self.model.getJointId(j)].idx_v for j in arm], dtype=np.intp)
        # the reduced model's configuration is the arm's, in the same order: no copying in and out per iteration
        self._identity = self.model.nq == self.model.nv == len(arm) and np.array_equal(
            self._q_index, np.arange(len(arm))
        )
        self._damping_eye = self.config.damping**2 * np.eye(6)
        self._eye_n = np.eye(len(arm))
        limits = limits_for(profile.urdf, arm)
        self.lower, self.upper = limits.lower, limits.upper
        self.home = np.clip(np.asarray(profile.home, float), self.lower, self.upper)
        # A joint that does not move the TCP (a column of zeros) would make the problem singular everywhere.
        jac = self._jacobian(self.home)
        still = [arm[i] for i in range(len(arm)) if np.linalg.norm(jac[:, i]) < 1e-9]
        if still:
            raise ProfileError(
                f"robot profile {profile.name}: arm joints {still} do not move tcp_link {profile.tcp_link!r}"
            )
        p_home, r_home = self.forward(self.home)
        self._home_azimuth = math.atan2(p_home[1], p_home[0]) if np.hypot(p_home[0], p_home[1]) > 1e-6 else 0.0
        self._home_down = _top_down(r_home)

    # ---- kinematics --------------------------------------------------------------------------------
    def _full_q(self, q_arm: np.ndarray) -> np.ndarray:
        if self._identity:
            return q_arm
        q = pin.neutral(self.model)
        q[self._q_index] = q_arm
        return q

    def forward(self, q_arm) -> tuple[np.ndarray, np.ndarray]:
        """TCP position (3,) and rotation (3, 3) in the base frame for arm joints ``q_arm``."""
        pin.framesForwardKinematics(self.model, self.data, self._full_q(np.asarray(q_arm, float)))
        pose = self.data.oMf[self.frame]
        return pose.translation.copy(), pose.rotation.copy()

    def _jacobian(self, q_arm: np.ndarray) -> np.ndarray:
        """(6, n_arm) TCP Jacobian, world-aligned (linear velocity of the TCP, angular velocity); updates oMf."""
        full = pin.computeFrameJacobian(
            self.model, self.data, self._full_q(q_arm), self.frame, pin.ReferenceFrame.LOCAL_WORLD_ALIGNED
        )
        pin.updateFramePlacement(self.model, self.data, self.frame)
        return full[:, self._v_index]

    def orientation(self, tcp_xyz_m, wrist_roll_rad: float) -> np.ndarray:
        """The top-down TCP rotation asked for at ``tcp_xyz_m`` with ``wrist_roll_rad`` (see the module)."""
        x, y = float(tcp_xyz_m[0]), float(tcp_xyz_m[1])
        azimuth = math.atan2(y, x) if math.hypot(x, y) > 1e-6 else self._home_azimuth
        return _rot_z(azimuth - self._home_azimuth) @ self._home_down @ _rot_z(wrist_roll_rad)

    # ---- solve -------------------------------------------------------------------------------------
    def solve(self, tcp_xyz_m, wrist_roll_rad: float, q_start) -> IKResult:
        """Arm joints that put the TCP at ``tcp_xyz_m`` pointing down with the wrist roll, found from ``q_start``
        (the measured arm joints, profile order). Raises UnreachableError when the best found misses by more than
        the reach tolerances."""
        c = self.config
        target = np.asarray(tcp_xyz_m, float)
        r_target = self.orientation(target, wrist_roll_rad)
        lower, upper = self.lower, self.upper
        q = np.minimum(np.maximum(np.asarray(q_start, float), lower), upper)
        n = q.size
        redundant = c.posture_gain > 0 and n > 6
        for iteration in range(c.max_iterations + 1):
            full = pin.computeFrameJacobian(
                self.model, self.data, self._full_q(q), self.frame, pin.ReferenceFrame.LOCAL_WORLD_ALIGNED
            )
            pin.updateFramePlacement(self.model, self.data, self.frame)
            pose = self.data.oMf[self.frame]
            error = np.concatenate([target - pose.translation, pin.log3(r_target @ pose.rotation.T)])
            pos_err, rot_err = math.sqrt(error[:3] @ error[:3]), math.sqrt(error[3:] @ error[3:])
            if (pos_err < c.position_tolerance_m and rot_err < c.angle_tolerance_rad) or iteration == c.max_iterations:
                break
            jac = full if self._identity else full[:, self._v_index]
            free = None
            for _ in range(2):  # once more without the joints a limit stops
                j = jac if free is None else jac * free
                if redundant:
                    pinv = j.T @ np.linalg.inv(j @ j.T + self._damping_eye)
                    dq = pinv @ error + (self._eye_n - pinv @ j) @ (c.posture_gain * (self.home - q))
                else:
                    dq = j.T @ np.linalg.solve(j @ j.T + self._damping_eye, error)
                blocked = ((q <= lower) & (dq < 0)) | ((q >= upper) & (dq > 0))
                if not blocked.any():
                    break
                free = ~blocked if free is None else free & ~blocked
                if redundant:
                    dq[blocked] = 0.0  # the posture term may push a blocked joint too
            largest = float(np.abs(dq).max())
            if largest > c.max_step_rad:
                dq *= c.max_step_rad / largest
            q = np.minimum(np.maximum(q + dq, lower), upper)
        if pos_err > c.reach_tolerance_m or rot_err > c.reach_angle_rad:
            raise UnreachableError(
                f"tcp {np.round(target, 4).tolist()} with wrist roll {wrist_roll_rad:.3g} rad is out of reach of "
                f"{self.profile.name}: the closest pose found misses it by {pos_err * 1e3:.1f} mm and "
                f"{math.degrees(rot_err):.1f} deg"
            )
        return IKResult(q=q, position_error_m=pos_err, angle_error_rad=rot_err, iterations=iteration)

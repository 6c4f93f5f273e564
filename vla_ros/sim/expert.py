"""A closed-loop scripted expert that picks up the cup of a named colour (privileged state, no camera).

It is the demonstrator for training data. Unlike the open-loop ``pick_plan`` it decides every control
period from the *measured* state, so it recovers from perturbations (data collection injects some, so
the policy also sees how to come back to the path: the DART idea). Phases:

    approach -> above the cup;  descend -> grasp height;  [settle -> still];  close -> fingers shut;  lift -> up;  hold

A moving target point ("carrot") is advanced toward the phase's goal at a bounded Cartesian speed from
the measured tool position, and the arm follows it through a top-down IK (``vla_ros.sim.ik``: damped least
squares on the robot profile's TCP, warm-started from the measured pose), so it drives any arm a robot profile
describes. If the cup is not rising with the gripper during the lift, it opens and starts over.

Its commands are feasible for the robot: a joint-space limiter keeps every command's velocity and
acceleration well inside the URDF and safety-filter limits (the profile's joints, read from its URDF).
Demonstrations that jump (a gripper shut in one step, a carrot starting at full speed) teach a policy chunks
that the safety filter must stretch in time or truncate; the robot then never moves the way the policy
learned it would.
"""

from __future__ import annotations

import dataclasses
import math
import os

import numpy as np

from vla_ros.robot_profile import RobotProfile, load_profile
from vla_ros.sim.ik import TopDownIK, UnreachableError
from vla_ros.sim.scripted import APPROACH_TCP_Z_M, GRASP_TCP_Z_M, LIFT_TCP_Z_M

# A roll is an angle about the tool's axis; whether the wrist turns that far is the robot's (PickExpert checks).
WRIST_ROLL_LIMIT_RAD = math.pi


@dataclasses.dataclass(frozen=True)
class ExpertConfig:
    """Args:
    speed_m_s: tool speed in free space (approach, lift).
    descend_speed_m_s: tool speed near the cup, slower so the fingers do not push it away.
    lead_m: how far ahead of the measured tool the carrot may run (bounds the commanded jump).
    close_s: time to keep still while the fingers close.
    settle_s: time to keep still at grasp height, fingers open, before they start closing (0: close on
        arrival). With a pause on either side of the close (``vla-ros collect --grasp-pause``) a policy
        that imitates the timing only roughly still shuts the fingers on a still hand and lifts after
        they have closed; it does, but the cup policies trained on such data did worse on the whole
        (docs/training.md, "A pause around the grasp").
    xy_tolerance_m / z_tolerance_m: when a phase's goal counts as reached.
    velocity_fraction / acceleration_fraction: the commands' limits as a share of the URDF velocity
        limits and of the safety filter's default accelerations (10 rad/s^2, 1 m/s^2), leaving room
        for a learned policy's small errors before the filter has to intervene.
    wrist_roll_rad: the hand's roll about the vertical tool axis, relative to the arm's pan: 0 is the hand
        turned as at home (``vla_ros.sim.ik``). On the bundled arm the fingers then close across the arm's
        reach (world y in front of the base); at pi/2 along it (world x, the fixed camera's line of sight).
        Policies trained on pi/2 grasps did worse on the cup task (docs/training.md, "Fingers closing along
        the reach").
    still_hold: the lift goes straight up from where the fingers closed and the hold stays there. Off
        by default, the lift and the hold aim at the held cup's own position: a cup held off the pads'
        centre moves with the hand, so the hand creeps after it (a median 0.06 rad of pan over a 1 s
        hold's last 0.6 s, up to 0.3), and a policy learns to carry the cup off. Two pairs trained on still
        holds dropped a third as many cups but lifted fewer (docs/training.md, "After the lift").
    """

    speed_m_s: float = 0.30
    descend_speed_m_s: float = 0.15
    lead_m: float = 0.05
    close_s: float = 0.9  # the limited gripper needs about 0.65 s to shut
    settle_s: float = 0.0
    xy_tolerance_m: float = 0.012
    z_tolerance_m: float = 0.012
    velocity_fraction: float = 0.8
    acceleration_fraction: float = 0.5
    wrist_roll_rad: float = 0.0
    still_hold: bool = False

    def __post_init__(self) -> None:
        if not abs(self.wrist_roll_rad) <= WRIST_ROLL_LIMIT_RAD:  # NaN fails too
            raise ValueError(f"wrist_roll_rad must be within +-{WRIST_ROLL_LIMIT_RAD}, got {self.wrist_roll_rad}")
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "settle_s" and not value >= 0:
                raise ValueError(f"settle_s must be >= 0, got {value}")
            if f.name not in ("wrist_roll_rad", "settle_s", "still_hold") and not value > 0:
                raise ValueError(f"{f.name} must be > 0, got {value}")


class MotionLimiter:
    """Joint-space second-order limiter: the output follows a target with |v| <= v_max and |a| <= a_max.

    Each step it aims at the speed from which it can still brake to the target in whole steps, never
    more than reaches it within the step, and changes its velocity by at most a_max dt toward that speed.
    """

    def __init__(
        self, v_max: np.ndarray, a_max: np.ndarray, lower: np.ndarray | None = None, upper: np.ndarray | None = None
    ) -> None:
        self.v_max, self.a_max = np.asarray(v_max, float), np.asarray(a_max, float)
        # discrete braking can overshoot a target on a limit by a fraction of a step: clip to the range
        self.lower = np.full_like(self.v_max, -np.inf) if lower is None else np.asarray(lower, float)
        self.upper = np.full_like(self.v_max, np.inf) if upper is None else np.asarray(upper, float)
        self.q: np.ndarray | None = None
        self.v = np.zeros_like(self.v_max)

    def reset(self, q: np.ndarray | None = None) -> None:
        self.q = None if q is None else np.asarray(q, float).copy()
        self.v = np.zeros_like(self.v_max)

    def __call__(self, target: np.ndarray, dt_s: float) -> np.ndarray:
        if self.q is None:
            self.q = np.asarray(target, float).copy()
            return self.q.copy()
        e = np.asarray(target, float) - self.q
        ad = self.a_max * dt_s  # braking in whole steps from speed v covers v^2 / 2a + v dt / 2
        brake = ad * (np.sqrt(0.25 + 2.0 * np.abs(e) / (ad * dt_s)) - 0.5)
        speed = np.minimum.reduce([self.v_max, brake, np.abs(e) / dt_s])
        dv = np.clip(np.sign(e) * speed - self.v, -self.a_max * dt_s, self.a_max * dt_s)
        self.v = self.v + dv
        self.q = np.clip(self.q + self.v * dt_s, self.lower, self.upper)
        return self.q.copy()


def default_limiter(config: ExpertConfig, profile: RobotProfile | None = None) -> MotionLimiter:
    """Limits of the profile's commanded joints from its URDF (velocities) and the filter's acceleration defaults."""
    from vla_ros.control.config import limits_from_urdf

    profile = profile or load_profile(None)
    limits = limits_from_urdf(profile.urdf, profile.commanded_joints)
    accel = np.where(limits.prismatic, 1.0, 10.0)
    return MotionLimiter(
        limits.velocity * config.velocity_fraction, accel * config.acceleration_fraction, limits.lower, limits.upper
    )


class PickExpert:
    """``command(t_s, tcp_m, cup_m, q_meas) -> joint targets`` of the profile's commanded joints (the arm, then the
    gripper). ``q_meas``: the sim's joint positions (``ArmSim.joint_positions``: the commanded joints in the
    profile's order, then the mimic joints that follow them).

    ``profile``: a RobotProfile, or a profile's name or file (None: the bundled arm)."""

    def __init__(
        self, config: ExpertConfig | None = None, profile: RobotProfile | str | os.PathLike | None = None
    ) -> None:
        self.config = config or ExpertConfig()
        self.profile = profile if isinstance(profile, RobotProfile) else load_profile(profile)
        self.ik = TopDownIK(self.profile)
        self.n_arm = len(self.profile.arm_joints)
        self.n_commanded = len(self.profile.commanded_joints)
        self.gripper_open = np.array(self.profile.gripper_open)
        self.gripper_closed = np.array(self.profile.gripper_closed)
        self.table_z_m = self.profile.table_height_m
        self.limiter = default_limiter(self.config, self.profile)
        home_tcp = self.ik.forward(self.ik.home)[0]
        try:  # the roll asked for, above the table where the hand starts
            self.ik.solve(home_tcp, self.config.wrist_roll_rad, self.ik.home)
        except UnreachableError:
            raise ValueError(
                f"wrist_roll_rad {self.config.wrist_roll_rad:.3g} turns the hand of {self.profile.name} further than "
                "its wrist goes (no top-down pose with that roll at the home position)"
            ) from None
        self.reset()

    def closing_share(self, q_gripper: float) -> float:
        """How far a gripper command or measurement is from open (0) to closed (1), for its first joint."""
        return float((q_gripper - self.gripper_open[0]) / (self.gripper_closed[0] - self.gripper_open[0]))

    def reset(self) -> None:
        self.limiter.reset()  # starts from the measured joints at the next command
        self.phase = "approach"
        self._carrot: np.ndarray | None = None
        self._close_started_s: float | None = None
        self._settle_started_s: float | None = None
        self._lift_xy: np.ndarray | None = None  # where the fingers closed: a still hold's goal
        self.restarts = 0

    @property
    def give_up_xy_m(self) -> float:
        """How far off the cup's axis a descent may be before it goes back above the cup."""
        return 3 * self.config.xy_tolerance_m

    def take_over(self, tcp_m, cup_m, q_meas, q_cmd, v_cmd, resume_descent: bool = False) -> None:
        """Continue from where someone else left the arm: commanded ``q_cmd`` moving at ``v_cmd``.

        The commands go on smoothly from the last one given; the phase is read from the scene: a cup held
        between closed fingers is lifted on, anything else starts over from above the cup. With
        ``resume_descent`` a hand already coming down over the cup (below the approach height, within the
        descent's own give-up distance of the cup's axis) goes on down to it, correcting sideways on the way,
        as the expert's own descent does.
        """
        tcp_m, cup_m, q_meas = np.asarray(tcp_m, float), np.asarray(cup_m, float), np.asarray(q_meas, float)
        self.reset()
        self.limiter.reset(q_cmd)
        self.limiter.v = np.asarray(v_cmd, float).copy()
        # fingers an eighth of the way shut or more; on the bundled arm under 3.5 of its 4 cm open
        holding = (
            np.linalg.norm(tcp_m[:2] - cup_m[:2]) < 0.02
            and abs(tcp_m[2] - cup_m[2]) < 0.03
            and self.closing_share(q_meas[self.n_arm]) > 0.125
        )
        if holding and self.closing_share(np.asarray(q_cmd)[self.n_arm]) > 0.5:
            self.phase, self._lift_xy = "lift", tcp_m[:2].copy()
        elif (
            resume_descent
            and tcp_m[2] < self.table_z_m + APPROACH_TCP_Z_M + 2 * self.config.z_tolerance_m
            and np.linalg.norm(tcp_m[:2] - cup_m[:2]) < self.give_up_xy_m
        ):
            self.phase = "descend"

    def _goal(self, cup_m: np.ndarray) -> np.ndarray:
        if self.phase in ("lift", "hold") and self.config.still_hold:
            return np.array([self._lift_xy[0], self._lift_xy[1], self.table_z_m + LIFT_TCP_Z_M])
        z = {
            "approach": APPROACH_TCP_Z_M,
            "descend": GRASP_TCP_Z_M,
            "settle": GRASP_TCP_Z_M,
            "close": GRASP_TCP_Z_M,
        }.get(self.phase, LIFT_TCP_Z_M)
        return np.array([cup_m[0], cup_m[1], self.table_z_m + z])

    def _advance(self, tcp_m: np.ndarray, goal: np.ndarray, speed: float, dt_s: float) -> np.ndarray:
        carrot = tcp_m.copy() if self._carrot is None else self._carrot
        step = goal - carrot
        dist = float(np.linalg.norm(step))
        if dist > speed * dt_s:
            step *= speed * dt_s / dist
        carrot = carrot + step
        lead = carrot - tcp_m  # never run away from where the tool actually is
        if np.linalg.norm(lead) > self.config.lead_m:
            carrot = tcp_m + lead * (self.config.lead_m / np.linalg.norm(lead))
        self._carrot = carrot
        return carrot

    def command(self, t_s: float, tcp_m, cup_m, q_meas, dt_s: float = 0.01) -> np.ndarray:
        tcp_m, cup_m = np.asarray(tcp_m, float), np.asarray(cup_m, float)
        c = self.config
        goal = self._goal(cup_m)
        xy_err = float(np.linalg.norm(tcp_m[:2] - goal[:2]))
        z_err = abs(float(tcp_m[2] - goal[2]))
        gripper = self.gripper_open
        if self.phase == "approach" and xy_err < c.xy_tolerance_m and z_err < 2 * c.z_tolerance_m:
            self.phase = "descend"
        elif self.phase == "descend":
            if xy_err > self.give_up_xy_m and tcp_m[2] > self.table_z_m + GRASP_TCP_Z_M + 0.04:
                self.phase = "approach"  # the cup moved away: go back above it
            elif xy_err < c.xy_tolerance_m and z_err < c.z_tolerance_m:
                if c.settle_s > 0:
                    self.phase, self._settle_started_s = "settle", t_s
                else:
                    self.phase, self._close_started_s = "close", t_s
        elif self.phase == "settle" and t_s - self._settle_started_s >= c.settle_s:
            self.phase, self._close_started_s = "close", t_s
            gripper = self.gripper_closed
        elif self.phase == "close":
            gripper = self.gripper_closed
            if t_s - self._close_started_s >= c.close_s:
                self.phase, self._lift_xy = "lift", tcp_m[:2].copy()
        elif self.phase in ("lift", "hold"):
            gripper = self.gripper_closed
            cup_below_gripper = tcp_m[2] - cup_m[2]
            if cup_below_gripper > 0.06:  # the cup stayed behind: open and try again
                self.phase, self.restarts = "approach", self.restarts + 1
                gripper = self.gripper_open
            elif self.phase == "lift" and z_err < c.z_tolerance_m:
                self.phase = "hold"
        goal = self._goal(cup_m)
        speed = c.descend_speed_m_s if self.phase in ("descend", "settle", "close") else c.speed_m_s
        if self.phase in ("settle", "close"):
            target = goal  # keep still before and while the fingers close
            self._carrot = goal.copy()
        else:
            target = self._advance(tcp_m, goal, speed, dt_s)
        q = np.asarray(q_meas, float)
        try:
            arm = self.ik.solve(target, c.wrist_roll_rad, q[: self.n_arm]).q
        except UnreachableError:
            arm = q[: self.n_arm]  # hold the arm where it is
        if self.limiter.q is None:
            self.limiter.reset(q if q.size == self.n_commanded else np.append(q[: self.n_arm], self.gripper_open))
        return self.limiter(np.append(arm, gripper), dt_s)

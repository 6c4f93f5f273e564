"""A closed-loop scripted expert that picks up the cup of a named colour (privileged state, no camera).

It is the demonstrator for training data. Unlike the open-loop ``pick_plan`` it decides every control
period from the *measured* state, so it recovers from perturbations (data collection injects some, so
the policy also sees how to come back to the path: the DART idea). Phases:

    approach -> above the cup;  descend -> grasp height;  close -> fingers shut;  lift -> up;  hold

A moving target point ("carrot") is advanced toward the phase's goal at a bounded Cartesian speed from
the measured tool position, and the arm follows it through the closed-form top-down IK. If the cup is
not rising with the gripper during the lift, it opens and starts over.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from vla_ros.sim.scripted import (
    APPROACH_TCP_Z_M,
    GRASP_TCP_Z_M,
    GRIPPER_CLOSED_M,
    GRIPPER_OPEN_M,
    LIFT_TCP_Z_M,
    UnreachableError,
    top_down_ik,
)


@dataclasses.dataclass(frozen=True)
class ExpertConfig:
    """Args:
        speed_m_s: tool speed in free space (approach, lift).
        descend_speed_m_s: tool speed near the cup, slower so the fingers do not push it away.
        lead_m: how far ahead of the measured tool the carrot may run (bounds the commanded jump).
        close_s: time to keep still while the fingers close.
        xy_tolerance_m / z_tolerance_m: when a phase's goal counts as reached.
    """

    speed_m_s: float = 0.30
    descend_speed_m_s: float = 0.15
    lead_m: float = 0.05
    close_s: float = 0.5
    xy_tolerance_m: float = 0.012
    z_tolerance_m: float = 0.012

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            if getattr(self, f.name) <= 0:
                raise ValueError(f"{f.name} must be > 0, got {getattr(self, f.name)}")


class PickExpert:
    """``command(t_s, tcp_m, cup_m, q_meas) -> (7,) joint targets`` for the 6 arm joints and the gripper."""

    def __init__(self, config: ExpertConfig | None = None) -> None:
        self.config = config or ExpertConfig()
        self.reset()

    def reset(self) -> None:
        self.phase = "approach"
        self._carrot: np.ndarray | None = None
        self._close_started_s: float | None = None
        self.restarts = 0

    def _goal(self, cup_m: np.ndarray) -> np.ndarray:
        z = {"approach": APPROACH_TCP_Z_M, "descend": GRASP_TCP_Z_M, "close": GRASP_TCP_Z_M}.get(self.phase, LIFT_TCP_Z_M)
        return np.array([cup_m[0], cup_m[1], z])

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
        gripper = GRIPPER_OPEN_M
        if self.phase == "approach" and xy_err < c.xy_tolerance_m and z_err < 2 * c.z_tolerance_m:
            self.phase = "descend"
        elif self.phase == "descend":
            if xy_err > 3 * c.xy_tolerance_m and tcp_m[2] > GRASP_TCP_Z_M + 0.04:
                self.phase = "approach"  # the cup moved away: go back above it
            elif xy_err < c.xy_tolerance_m and z_err < c.z_tolerance_m:
                self.phase, self._close_started_s = "close", t_s
        elif self.phase == "close":
            gripper = GRIPPER_CLOSED_M
            if t_s - self._close_started_s >= c.close_s:
                self.phase = "lift"
        elif self.phase in ("lift", "hold"):
            gripper = GRIPPER_CLOSED_M
            cup_below_gripper = tcp_m[2] - cup_m[2]
            if cup_below_gripper > 0.06:  # the cup stayed behind: open and try again
                self.phase, self.restarts = "approach", self.restarts + 1
                gripper = GRIPPER_OPEN_M
            elif self.phase == "lift" and z_err < c.z_tolerance_m:
                self.phase = "hold"
        goal = self._goal(cup_m)
        speed = c.descend_speed_m_s if self.phase in ("descend", "close") else c.speed_m_s
        if self.phase == "close":
            target = goal  # keep still while the fingers close
            self._carrot = goal.copy()
        else:
            target = self._advance(tcp_m, goal, speed, dt_s)
        try:
            arm = top_down_ik(target)
        except UnreachableError:
            arm = np.asarray(q_meas, float)[:6]  # hold the arm where it is
        # Keep the wrist roll continuous with the measured one (the cup is round, any roll grasps it).
        return np.append(arm, gripper)

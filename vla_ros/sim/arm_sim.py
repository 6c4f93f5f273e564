"""The simulated arm: MuJoCo physics, cups, camera and episode bookkeeping, with no ROS in sight.

Any arm a robot profile describes (``vla_ros.robot_profile``; the bundled arm by default): its joints,
gripper, TCP, home pose, cameras and table height come from the profile.

``ArmSim`` follows dm_control's split of a fixed physics model and episodic state: ``reset(seed)`` writes
a new randomised state into the one compiled model, so the same seed always gives the same episode and
the same command sequence gives the same trajectory. Time is an integer count of physics steps; every
rate (joint states, camera, clock) is an integer divisor of the physics rate, so samples fall exactly on
steps and stamps never drift.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import warnings
from pathlib import Path

import mujoco
import numpy as np

from vla_ros import cameras
from vla_ros.robot_profile import ProfileError, RobotProfile, load_profile
from vla_ros.sim.commands import CommandError, JointLimits, validate_position_command
from vla_ros.sim.scene import (
    CUP_COLORS,
    CUP_HALF_HEIGHT_M,
    CUP_RADIUS_M,
    SceneConfig,
    build_spec,
)
from vla_ros.sim.trajectory import PositionTrajectory

log = logging.getLogger(__name__)

# The bundled arm's home (its profile's): above the table with the gripper pointing down and open
# (shoulder_pan, shoulder_lift, elbow, forearm_roll, wrist_pitch, wrist_roll, left_finger); another robot's
# is ``ArmSim.home_q``.
HOME_Q = load_profile(None).home_q
LIFT_HEIGHT_M = 0.05  # a cup counts as lifted when its bottom is this far above the table
# After a reset with a hold, the first position command must be this close (rad or m, every joint) to the
# pose the reset put the arm in: a controller that re-anchors there sends exactly that pose, while a command
# computed before the reset (still in flight) is wherever the old episode was.
RESET_HOLD_TOLERANCE = 0.05


@dataclasses.dataclass(frozen=True)
class SimConfig:
    """Timing and camera of the simulation.

    Args:
        physics_rate_hz: physics steps per simulated second; joint_state_rate_hz, camera_rate_hz and
            clock_rate_hz must divide it so that samples fall exactly on steps (600 serves 100 and 30).
        image_width / image_height: camera resolution in pixels.
        cup_region_m: (x_min, x_max, y_min, y_max) where cups are placed, inside the arm's reach.
        min_cup_spacing_m: centre distance between cups, so the gripper fits between them.
    """

    physics_rate_hz: int = 600
    joint_state_rate_hz: int = 100
    camera_rate_hz: int = 30
    clock_rate_hz: int = 200
    image_width: int = 320
    image_height: int = 240
    cup_region_m: tuple[float, float, float, float] = (0.30, 0.55, -0.22, 0.22)
    min_cup_spacing_m: float = 0.11
    scene: SceneConfig = dataclasses.field(default_factory=SceneConfig)

    def __post_init__(self) -> None:
        for name in ("joint_state_rate_hz", "camera_rate_hz", "clock_rate_hz"):
            rate = getattr(self, name)
            if rate <= 0 or self.physics_rate_hz % rate != 0:
                raise ValueError(f"{name}={rate} must be a positive divisor of physics_rate_hz={self.physics_rate_hz}")
        if not (16 <= self.image_width <= 1920 and 16 <= self.image_height <= 1080):
            raise ValueError(f"image size {self.image_width}x{self.image_height} outside 16x16 .. 1920x1080")
        x0, x1, y0, y1 = self.cup_region_m
        if not (x0 < x1 and y0 < y1):
            raise ValueError(f"cup_region_m must be (x_min < x_max, y_min < y_max), got {self.cup_region_m}")
        if self.min_cup_spacing_m < 2 * CUP_RADIUS_M:
            raise ValueError(
                f"min_cup_spacing_m={self.min_cup_spacing_m} is smaller than a cup diameter {2 * CUP_RADIUS_M}"
            )
        object.__setattr__(self, "scene", dataclasses.replace(self.scene, physics_dt_s=1.0 / self.physics_rate_hz))

    @property
    def steps_per_joint_state(self) -> int:
        return self.physics_rate_hz // self.joint_state_rate_hz

    @property
    def steps_per_frame(self) -> int:
        return self.physics_rate_hz // self.camera_rate_hz

    @property
    def steps_per_clock(self) -> int:
        return self.physics_rate_hz // self.clock_rate_hz


@dataclasses.dataclass(frozen=True)
class CameraIntrinsics:
    """Pinhole model of the rendered image (no distortion), as sensor_msgs/CameraInfo wants it."""

    width: int
    height: int
    fx: float
    fy: float
    cx: float
    cy: float


class ArmSim:
    """Physics, rendering and episode state of the arm-and-cups scene.

    Not thread-safe: the ROS node serialises access. The renderer is created on first use, in the
    calling thread, because an OpenGL context belongs to the thread that made it current.
    """

    def __init__(
        self,
        config: SimConfig | None = None,
        urdf_path: Path | str | None = None,
        seed: int = 0,
        profile: RobotProfile | str | os.PathLike | None = None,
    ) -> None:
        """``profile``: a RobotProfile, or a profile's name or file (None: the bundled arm). ``urdf_path``
        (deprecated) simulates another URDF with the bundled arm's profile (its joints, TCP and cameras)."""
        self.config = config or SimConfig()
        self.profile = profile if isinstance(profile, RobotProfile) else load_profile(profile)
        if urdf_path:
            warnings.warn("ArmSim(urdf_path=...) is deprecated: pass profile=", DeprecationWarning, stacklevel=2)
            if not Path(urdf_path).is_file():
                raise FileNotFoundError(f"robot description not found: {urdf_path}")
            self.profile = dataclasses.replace(self.profile, urdf=Path(urdf_path))
        self.urdf_path = self.profile.urdf
        self.urdf_xml = self.profile.urdf_text()
        spec, self.robot = build_spec(self.profile, self.config.scene)
        try:
            self.model = spec.compile()
        except ValueError as err:
            raise ProfileError(f"robot profile {self.profile.name}: MuJoCo cannot compile the scene: {err}") from None
        self.data = mujoco.MjData(self.model)
        self.command_joint_names = list(self.robot.commanded_joints)
        self.table_z_m = self.profile.table_height_m
        self.home_q = np.array(self.profile.home_q)
        self.n_arm = len(self.profile.arm_joints)

        # Named accessors resolved once; no magic indices further down. The joints: the commanded ones,
        # then those that follow them (a mimic finger).
        self.joint_names = self.command_joint_names + [m.joint for m in self.robot.mimics]
        self._qpos_adr = np.array([self.model.joint(n).qposadr[0] for n in self.joint_names], dtype=np.intp)
        self._dof_adr = np.array([self.model.joint(n).dofadr[0] for n in self.joint_names], dtype=np.intp)
        self._cmd_actuators = np.array(
            [self.model.actuator(f"{n}_position").id for n in self.command_joint_names], dtype=np.intp
        )
        self._cmd_qpos_adr = np.array([self.model.joint(n).qposadr[0] for n in self.command_joint_names], dtype=np.intp)
        self._mimic_qpos_adr = np.array(
            [self.model.joint(m.joint).qposadr[0] for m in self.robot.mimics], dtype=np.intp
        )
        self._mimic_leader = np.array(
            [self.command_joint_names.index(m.leader) for m in self.robot.mimics], dtype=np.intp
        )
        self._mimic_mult = np.array([m.multiplier for m in self.robot.mimics])
        self._mimic_offset = np.array([m.offset for m in self.robot.mimics])
        lower = np.array([self.model.joint(n).range[0] for n in self.command_joint_names])
        upper = np.array([self.model.joint(n).range[1] for n in self.command_joint_names])
        self.limits = JointLimits(names=tuple(self.command_joint_names), lower=lower, upper=upper)
        self._cup_qpos_adr = {c: self.model.joint(f"{c}_cup_free").qposadr[0] for c in CUP_COLORS}
        self._cup_body = {c: self.model.body(f"{c}_cup").id for c in CUP_COLORS}
        self._tcp_body = self.model.body(self.robot.tcp_body).id
        # Keyed by stream name (``vla_ros.cameras``): what the nodes publish and a model's ``cameras`` lists.
        self.camera_ids = {stream: self.model.camera(name).id for stream, name in self.robot.cameras.items()}
        self._table_geom = self.model.geom("table").id
        cup_geoms = {self.model.geom(f"{c}_cup_geom").id for c in CUP_COLORS}
        self._robot_geoms = {
            g
            for g in range(self.model.ngeom)
            if g not in cup_geoms and g != self._table_geom and self.model.geom_bodyid[g] != 0
        }

        self._renderer: mujoco.Renderer | None = None
        self._images = {
            name: np.zeros((self.config.image_height, self.config.image_width, 3), dtype=np.uint8)
            for name in self.camera_ids
        }  # one buffer per camera: a caller may hold both frames
        self.step_count = 0
        self.seed = 0
        self.episode = 0
        self._trajectory: PositionTrajectory | None = None
        self._hold: tuple[np.ndarray, int] | None = None  # (reset pose, until time_ns): see reset()
        self.reset(seed)

    # ---- episode -----------------------------------------------------------------------------------
    def reset(
        self, seed: int, arm_noise_rad: float = 0.0, restart_clock: bool = True, hold_s: float = 0.0
    ) -> dict[str, np.ndarray]:
        """Start a new episode: arm at home, cups at positions drawn from ``seed``. Returns cup positions.

        ``arm_noise_rad`` > 0 perturbs the arm's start pose (uniform, per arm joint) with draws taken after
        the cups', so the cup layout of a seed never depends on it (data collection varies the start).
        ``restart_clock`` False keeps time monotonic: the new episode begins one physics step after the
        last state of the one before, so every sample of the new episode is stamped strictly later than
        every sample of the old one, and ``episode_start_ns`` splits the two by stamp alone.
        ``hold_s`` > 0 guards the new episode against commands sent before it (a ROS graph has some in flight):
        for that long in simulated time, a position command farther than RESET_HOLD_TOLERANCE from the reset
        pose is refused (``before_reset``) until one within it arrives, and a trajectory stamped before the
        episode began is refused always.
        """
        next_step = self.step_count + 1 if self.episode > 0 else 0
        rng = np.random.default_rng(int(seed))
        mujoco.mj_resetData(self.model, self.data)
        cup_xy = self._sample_cup_xy(rng)
        start_q = self.home_q.copy()
        if arm_noise_rad > 0.0:
            start_q[: self.n_arm] += rng.uniform(-arm_noise_rad, arm_noise_rad, self.n_arm)
            start_q = np.clip(start_q, self.limits.lower, self.limits.upper)
        self._set_arm(start_q)
        for color, xy in zip(CUP_COLORS, cup_xy):
            adr = self._cup_qpos_adr[color]
            self.data.qpos[adr : adr + 7] = (xy[0], xy[1], self.table_z_m + CUP_HALF_HEIGHT_M, 1.0, 0.0, 0.0, 0.0)
        mujoco.mj_forward(self.model, self.data)
        self.step_count = 0 if restart_clock else next_step
        self.episode_start_ns = self.time_ns  # the new episode's first simulated time
        self._hold = (start_q.copy(), self.time_ns + round(hold_s * 1e9)) if hold_s > 0.0 else None
        self.seed = int(seed)
        self.episode += 1
        self._trajectory = None
        self._initial_cup_pos = self.cup_positions()
        return self._initial_cup_pos

    def place_arm(self, q: np.ndarray) -> None:
        """Put the commanded joints at ``q`` (clipped to the limits), kinematically: no physics step, for
        rendering a pose (the training views of ``tasks.cup_views``), not for control."""
        self._set_arm(np.clip(np.asarray(q, float), self.limits.lower, self.limits.upper))
        mujoco.mj_forward(self.model, self.data)

    def _set_arm(self, q: np.ndarray) -> None:
        """Joint positions and position targets of the commanded joints (no forward pass)."""
        self.data.qpos[self._cmd_qpos_adr] = q
        # A mimic finger sits where its leader puts it, so the equality constraint starts satisfied.
        self.data.qpos[self._mimic_qpos_adr] = self._mimic_mult * q[self._mimic_leader] + self._mimic_offset
        self.data.ctrl[self._cmd_actuators] = q

    def status(self) -> dict:
        """Episode status as the sim node publishes it on /vla/episode_status (JSON)."""
        return {
            "episode": self.episode,
            "seed": self.seed,
            "time_s": round(self.time_s, 6),
            "lifted": self.lifted_cup(),
            "cups": {c: [round(float(v), 5) for v in pos] for c, pos in self.cup_positions().items()},
            "tcp": [round(float(v), 5) for v in self.tcp_position()],
        }

    def _sample_cup_xy(self, rng: np.random.Generator) -> list[np.ndarray]:
        x0, x1, y0, y1 = self.config.cup_region_m
        placed: list[np.ndarray] = []
        for _ in range(10_000):  # rejection sampling; the region holds three cups with room to spare
            xy = np.array([rng.uniform(x0, x1), rng.uniform(y0, y1)])
            if all(np.linalg.norm(xy - p) >= self.config.min_cup_spacing_m for p in placed):
                placed.append(xy)
                if len(placed) == len(CUP_COLORS):
                    return placed
        raise RuntimeError(f"could not place {len(CUP_COLORS)} cups in {self.config.cup_region_m}")

    # ---- time --------------------------------------------------------------------------------------
    @property
    def time_ns(self) -> int:
        """Simulated time of the current state, exact integer nanoseconds (strictly increasing)."""
        return self.step_count * 1_000_000_000 // self.config.physics_rate_hz

    @property
    def time_s(self) -> float:
        return self.step_count / self.config.physics_rate_hz

    def step(self) -> None:
        """Advance one physics step, following the active trajectory if there is one."""
        if self._trajectory is not None:
            self.data.ctrl[self._cmd_actuators] = self._trajectory.sample(self.time_s)
        mujoco.mj_step(self.model, self.data)
        self.step_count += 1

    def is_joint_state_step(self) -> bool:
        return self.step_count % self.config.steps_per_joint_state == 0

    def is_frame_step(self) -> bool:
        return self.step_count % self.config.steps_per_frame == 0

    def is_clock_step(self) -> bool:
        return self.step_count % self.config.steps_per_clock == 0

    # ---- commands ----------------------------------------------------------------------------------
    def command_positions(self, names: list[str] | tuple[str, ...], positions) -> np.ndarray:
        """Set position targets (forward-controller semantics). Raises CommandError; then nothing moves."""
        q = validate_position_command(names, positions, self.limits)
        self._check_hold(q)
        self._trajectory = None
        self.data.ctrl[self._cmd_actuators] = q
        return q

    def command_trajectory(self, trajectory: PositionTrajectory) -> None:
        """Follow a validated trajectory (joint-trajectory-controller semantics), replacing any other.
        Raises CommandError for one stamped before the current episode began."""
        stamp_ns = round(trajectory.stamp_s * 1e9)
        if 0 < stamp_ns < self.episode_start_ns:
            raise CommandError(
                "before_reset",
                f"trajectory stamped {stamp_ns * 1e-9:.6f} s, before the episode began "
                f"at {self.episode_start_ns * 1e-9:.6f} s",
            )
        self._hold = None  # it starts from the commanded pose (the reset's): no jump
        trajectory.bind_start(self.time_s, self.commanded_positions())
        self._trajectory = trajectory

    def _check_hold(self, q: np.ndarray) -> None:
        """Refuse a position command far from the reset pose while the reset's hold lasts (see reset)."""
        if self._hold is None:
            return
        pose, until_ns = self._hold
        if self.time_ns >= until_ns:
            self._hold = None
            return
        offset = np.abs(q - pose)
        i = int(np.argmax(offset))
        if offset[i] > RESET_HOLD_TOLERANCE:
            raise CommandError(
                "before_reset",
                f"target for {self.limits.names[i]} is {offset[i]:.3g} from the pose the reset put it in (more than "
                f"{RESET_HOLD_TOLERANCE}): taken for a command sent before the reset; for "
                f"{(until_ns - self.time_ns) * 1e-9:.2f} s "
                "more the first command must start at that pose",
            )
        self._hold = None

    def commanded_positions(self) -> np.ndarray:
        return self.data.ctrl[self._cmd_actuators].copy()

    # ---- observations ------------------------------------------------------------------------------
    def joint_positions(self) -> np.ndarray:
        return self.data.qpos[self._qpos_adr].copy()

    def joint_velocities(self) -> np.ndarray:
        return self.data.qvel[self._dof_adr].copy()

    def joint_efforts(self) -> np.ndarray:
        return self.data.qfrc_actuator[self._dof_adr].copy()

    def command_joint_positions(self) -> np.ndarray:
        return self.data.qpos[self._cmd_qpos_adr].copy()

    def tcp_position(self) -> np.ndarray:
        return self.data.xpos[self._tcp_body].copy()

    def cup_positions(self) -> dict[str, np.ndarray]:
        return {c: self.data.xpos[b].copy() for c, b in self._cup_body.items()}

    def lifted_cup(self) -> str | None:
        """The colour of the cup whose bottom is at least LIFT_HEIGHT_M above the table, if any."""
        for color, pos in self.cup_positions().items():
            if pos[2] - CUP_HALF_HEIGHT_M - self.table_z_m >= LIFT_HEIGHT_M:
                return color
        return None

    def robot_table_contacts(self) -> int:
        """Number of active contacts between any robot geom and the table (for safety tests)."""
        n = 0
        for i in range(self.data.ncon):
            c = self.data.contact[i]
            pair = {int(c.geom1), int(c.geom2)}
            if self._table_geom in pair and pair & self._robot_geoms:
                n += 1
        return n

    # ---- camera ------------------------------------------------------------------------------------
    def _camera(self, camera: str) -> int:
        if camera not in self.camera_ids:
            raise ValueError(f"unknown camera {camera!r}; the scene has {sorted(self.camera_ids)}")
        return self.camera_ids[camera]

    def render(self, camera: str = cameras.FRONT) -> np.ndarray:
        """RGB image (height, width, 3) uint8 of a camera (the fixed scene camera by default, or
        ``cameras.WRIST``), reusing one buffer per camera."""
        cam_id = self._camera(camera)
        if self._renderer is None:
            self._renderer = mujoco.Renderer(self.model, self.config.image_height, self.config.image_width)
        self._renderer.update_scene(self.data, camera=cam_id)
        self._renderer.render(out=self._images[camera])
        return self._images[camera]

    def camera_intrinsics(self, camera: str = cameras.FRONT) -> CameraIntrinsics:
        w, h = self.config.image_width, self.config.image_height
        fovy = np.deg2rad(self.model.cam_fovy[self._camera(camera)])
        f = 0.5 * h / np.tan(0.5 * fovy)  # MuJoCo's fovy is vertical and pixels are square
        return CameraIntrinsics(width=w, height=h, fx=f, fy=f, cx=(w - 1) / 2.0, cy=(h - 1) / 2.0)

    def project(self, points_world: np.ndarray, camera: str = cameras.FRONT) -> np.ndarray:
        """Pixel coordinates (u, v) of world points in a camera's image; used by tests and labels."""
        cam_id = self._camera(camera)
        pos = self.data.cam_xpos[cam_id]
        rot = self.data.cam_xmat[cam_id].reshape(3, 3)  # columns: camera x (right), y (up), z (back)
        p_cam = (np.atleast_2d(points_world) - pos) @ rot  # (N, 3) in camera axes
        k = self.camera_intrinsics(camera)
        u = k.cx + k.fx * p_cam[:, 0] / -p_cam[:, 2]
        v = k.cy - k.fy * p_cam[:, 1] / -p_cam[:, 2]
        return np.stack([u, v], axis=1)

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None

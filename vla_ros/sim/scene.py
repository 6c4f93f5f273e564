"""Build the MuJoCo scene around the project's URDF with ``mujoco.MjSpec``.

The URDF stays the single robot description (the safety filter reads the same file): MuJoCo compiles it
and this module adds what a URDF cannot say: the table, the cups, lights, the camera, position actuators
and gravity compensation. Positions are randomised per episode in ``ArmSim.reset``, not here, so the model
is compiled once and every reset is a cheap state write (the dm_control pattern: fixed model, episodic state).
"""

from __future__ import annotations

import dataclasses
from importlib import resources
from pathlib import Path

import mujoco
import numpy as np

# Colours the policy has to tell apart; names are what instructions say ("pick up the red cup").
CUP_COLORS: dict[str, tuple[float, float, float, float]] = {
    "red": (0.85, 0.12, 0.10, 1.0),
    "green": (0.12, 0.68, 0.20, 1.0),
    "blue": (0.12, 0.25, 0.85, 1.0),
}
CUP_RADIUS_M = 0.03
CUP_HALF_HEIGHT_M = 0.045
TABLE_TOP_Z_M = 0.0  # base_link stands on the table top; z = 0 is the table surface
TABLE_HALF_SIZE_M = (0.45, 0.50, 0.02)
TABLE_CENTER_XY_M = (0.40, 0.0)
CAMERA_NAME = "scene_camera"
WRIST_CAMERA_NAME = "wrist_camera"
HAND_BODY = "hand_link"
TCP_BODY = "tcp_link"
FINGER_JOINT = "left_finger_joint"


def default_urdf_path() -> Path:
    """The URDF shipped inside the Python package (works in pip mode and in a colcon install)."""
    return Path(str(resources.files("vla_ros") / "description" / "vla_arm.urdf"))


@dataclasses.dataclass(frozen=True)
class SceneConfig:
    """What the scene looks like; the sim's timing lives in ``SimConfig``.

    Args:
        physics_dt_s: MuJoCo timestep. 1/600 s divides both the 100 Hz joint-state and the 30 Hz camera
            periods, so every sample is taken exactly on a physics step.
        camera_pos_m / camera_target_m: the fixed camera looks from the far side of the table back at
            the robot so that cups and gripper are both in view.
        camera_fovy_deg: vertical field of view.
        wrist_camera_pos_m / wrist_camera_target_m / wrist_camera_fovy_deg: the camera on the hand, in the
            hand's frame (z towards the fingertips): beside the palm, looking down between the fingers, so
            the last centimetres of a grasp are seen from above, across the front camera's line of sight.
        position_kp: stiffness of the position actuators per commanded joint (N m / rad or N / m).
        cup_contact_timeconst_s: time constant of the cups' contacts (MuJoCo ``solref``, averaged with the
            other geom's). The default is MuJoCo's own, 0.02 s: the fingers' servos squeeze 1.6 mm into a
            held cup. 0.004 s keeps a squeezed cup rigid (under 1 mm) and fewer off-centre grasps slip out
            after the lift, but a finger landing on a rim tips the cup instead of sinking in: the expert
            records fewer demonstrations, and a policy trained on them did worse (docs/training.md, "After
            the lift"). MuJoCo raises a value below twice the physics step to that.
    """

    physics_dt_s: float = 1.0 / 600.0
    camera_pos_m: tuple[float, float, float] = (1.10, 0.0, 0.80)
    camera_target_m: tuple[float, float, float] = (0.30, 0.0, 0.14)
    camera_fovy_deg: float = 58.0
    wrist_camera_pos_m: tuple[float, float, float] = (0.07, 0.0, 0.0)
    wrist_camera_target_m: tuple[float, float, float] = (0.0, 0.0, 0.16)
    wrist_camera_fovy_deg: float = 75.0
    position_kp: tuple[float, ...] = (900.0, 900.0, 600.0, 150.0, 150.0, 80.0, 300.0)
    cup_contact_timeconst_s: float = 0.02

    def __post_init__(self) -> None:
        if not 0.0 < self.physics_dt_s <= 0.01:
            raise ValueError(f"physics_dt_s must be in (0, 0.01], got {self.physics_dt_s}")
        if not 0.0 < self.cup_contact_timeconst_s <= 0.1:
            raise ValueError(f"cup_contact_timeconst_s must be in (0, 0.1], got {self.cup_contact_timeconst_s}")
        for name in ("camera_fovy_deg", "wrist_camera_fovy_deg"):
            if not 10.0 <= getattr(self, name) <= 120.0:
                raise ValueError(f"{name} must be in [10, 120], got {getattr(self, name)}")


def _look_at_xyaxes(pos: np.ndarray, target: np.ndarray, up_hint=(0.0, 0.0, 1.0)) -> np.ndarray:
    """MuJoCo camera frame (x right, y up, looking along -z) that looks from pos at target."""
    forward = target - pos
    forward /= np.linalg.norm(forward)
    right = np.cross(forward, np.asarray(up_hint, dtype=float))
    right /= np.linalg.norm(right)
    up = np.cross(right, forward)
    return np.concatenate([right, up])


def build_spec(urdf_path: Path, cfg: SceneConfig) -> tuple[mujoco.MjSpec, list[str]]:
    """Return the scene spec and the commanded joint names (arm joints + the driven finger joint).

    Commanded joints are the URDF's movable joints that are not mimics: the mimic finger follows its
    leader through the equality constraint MuJoCo creates from the URDF ``<mimic>`` tag.
    """
    spec = mujoco.MjSpec.from_file(str(urdf_path))
    spec.option.timestep = cfg.physics_dt_s
    spec.option.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    # Elliptic cones and a higher impratio keep a grasped cup from creeping out of the fingers.
    spec.option.cone = mujoco.mjtCone.mjCONE_ELLIPTIC
    spec.option.impratio = 10.0
    spec.visual.global_.offwidth = 1920
    spec.visual.global_.offheight = 1080
    # Shadows and multisampling cost 10-25x in Mesa's software renderer (measured: ~150 ms vs ~6 ms a
    # 320x240 frame) and the policy does not need them.
    spec.visual.quality.offsamples = 0

    mimic_joints = {eq.name1 for eq in spec.equalities if eq.type == mujoco.mjtEq.mjEQ_JOINT}
    commanded: list[str] = []
    for joint in spec.joints:
        if joint.type in (mujoco.mjtJoint.mjJNT_HINGE, mujoco.mjtJoint.mjJNT_SLIDE) and joint.name not in mimic_joints:
            commanded.append(joint.name)
        joint.armature = 0.02  # reflected rotor inertia; also steadies the stiff position servos
    if len(cfg.position_kp) != len(commanded):
        raise ValueError(
            f"position_kp has {len(cfg.position_kp)} gains but the URDF has {len(commanded)} commanded joints "
            f"({commanded})"
        )

    # The arm's own servos hold it against gravity on a real robot; gravcomp models that, so a position
    # target is reached without steady-state sag.
    for body in spec.bodies:
        if body.name not in ("world",):
            body.gravcomp = 1.0
    arm_rgba = (0.75, 0.76, 0.78, 1.0)
    dark_rgba = (0.20, 0.21, 0.23, 1.0)
    for geom in spec.geoms:
        geom.rgba = dark_rgba if ("finger" in geom.name or "hand" in geom.name) else arm_rgba
        geom.friction = (1.5, 0.01, 0.001)
    # The two fingers touch when closed; that contact would only fight the mimic constraint.
    spec.add_exclude(bodyname1="left_finger_link", bodyname2="right_finger_link")

    for name, kp in zip(commanded, cfg.position_kp):
        act = spec.add_actuator(name=f"{name}_position", target=name, trntype=mujoco.mjtTrn.mjTRN_JOINT)
        act.set_to_position(kp=kp, dampratio=1.0, inheritrange=1.0)

    world = spec.worldbody
    world.add_light(
        name="key_light", pos=(0.4, -0.6, 2.0), dir=(0.0, 0.3, -1.0), diffuse=(0.8, 0.8, 0.8), castshadow=False
    )
    world.add_light(
        name="fill_light", pos=(1.2, 0.8, 1.5), dir=(-0.5, -0.4, -1.0), diffuse=(0.35, 0.35, 0.35), castshadow=False
    )
    spec.visual.headlight.ambient = (0.35, 0.35, 0.35)
    world.add_geom(
        name="floor",
        type=mujoco.mjtGeom.mjGEOM_PLANE,
        size=(3.0, 3.0, 0.1),
        pos=(0.0, 0.0, -0.75),
        rgba=(0.35, 0.36, 0.38, 1.0),
    )
    world.add_geom(
        name="table",
        type=mujoco.mjtGeom.mjGEOM_BOX,
        size=TABLE_HALF_SIZE_M,
        pos=(TABLE_CENTER_XY_M[0], TABLE_CENTER_XY_M[1], TABLE_TOP_Z_M - TABLE_HALF_SIZE_M[2]),
        rgba=(0.62, 0.50, 0.38, 1.0),
        friction=(1.0, 0.01, 0.001),
    )
    for color, rgba in CUP_COLORS.items():
        cup = world.add_body(name=f"{color}_cup", pos=(0.0, 0.0, CUP_HALF_HEIGHT_M))
        cup.add_freejoint(name=f"{color}_cup_free")
        cup.add_geom(
            name=f"{color}_cup_geom",
            type=mujoco.mjtGeom.mjGEOM_CYLINDER,
            size=(CUP_RADIUS_M, CUP_HALF_HEIGHT_M, 0.0),
            rgba=rgba,
            mass=0.08,
            friction=(1.5, 0.01, 0.001),
            condim=4,  # torsional friction keeps a pinched cup from spinning out
            solref=(cfg.cup_contact_timeconst_s, 1.0),  # see SceneConfig
        )

    pos = np.asarray(cfg.camera_pos_m, dtype=float)
    xyaxes = _look_at_xyaxes(pos, np.asarray(cfg.camera_target_m, dtype=float))
    world.add_camera(name=CAMERA_NAME, pos=pos, xyaxes=xyaxes, fovy=cfg.camera_fovy_deg)
    wrist_pos = np.asarray(cfg.wrist_camera_pos_m, dtype=float)
    # Image "up" is the hand's x (away from the palm), so the fingers stand at the bottom of the picture.
    wrist_axes = _look_at_xyaxes(wrist_pos, np.asarray(cfg.wrist_camera_target_m, dtype=float), up_hint=(1.0, 0.0, 0.0))
    spec.body(HAND_BODY).add_camera(
        name=WRIST_CAMERA_NAME, pos=wrist_pos, xyaxes=wrist_axes, fovy=cfg.wrist_camera_fovy_deg
    )
    return spec, commanded

"""Build the MuJoCo scene around a robot profile's URDF with ``mujoco.MjSpec``.

The URDF stays the single robot description (the safety filter reads the same file) and the robot profile
(``vla_ros.robot_profile``) says what a URDF cannot: which joints are commanded, the gripper, the tool centre
point, the hand, the cameras and the table's height. MuJoCo compiles the URDF and this module adds the rest:
the table, the cups, lights, the cameras, position actuators and gravity compensation. Positions are
randomised per episode in ``ArmSim.reset``, not here, so the model is compiled once and every reset is a cheap
state write (the dm_control pattern: fixed model, episodic state).

MuJoCo cannot resolve ``package://`` URIs, so every mesh is resolved to an absolute path first
(``vla_ros.safety.robot.resolve_package_uri``, with the profile's ``package_paths``); a visual whose mesh
cannot be found or read is dropped, and a link left without visuals shows its collision geometry instead.
"""

from __future__ import annotations

import dataclasses
import logging
import xml.etree.ElementTree as ET
from importlib import resources
from pathlib import Path

import mujoco
import numpy as np

from vla_ros import cameras
from vla_ros.robot_profile import SCENE_CAMERA, WRIST_CAMERA, ProfileError, RobotProfile

log = logging.getLogger(__name__)

# Colours the policy has to tell apart; names are what instructions say ("pick up the red cup").
CUP_COLORS: dict[str, tuple[float, float, float, float]] = {
    "red": (0.85, 0.12, 0.10, 1.0),
    "green": (0.12, 0.68, 0.20, 1.0),
    "blue": (0.12, 0.25, 0.85, 1.0),
}
CUP_RADIUS_M = 0.03
CUP_HALF_HEIGHT_M = 0.045
TABLE_HALF_SIZE_M = (0.45, 0.50, 0.02)  # the table top's height is the profile's table_height_m
TABLE_CENTER_XY_M = (0.40, 0.0)
# The profile's camera names -> the streams the sim renders (vla_ros.cameras); other cameras keep their names.
STREAM_OF_CAMERA = {SCENE_CAMERA: cameras.FRONT, WRIST_CAMERA: cameras.WRIST}
ARM_RGBA = (0.75, 0.76, 0.78, 1.0)
MESH_FORMATS = (".stl", ".obj", ".msh")  # what MuJoCo reads; a visual in another format (.dae) is dropped
# Generic servo tuning (profiles without sim_position_kp): every commanded joint's position servo rings at
# this frequency at home. The bundled arm's hand-tuned gains come to 8-12 Hz by the same measure.
SERVO_FREQUENCY_HZ = 10.0
ARMATURE = 0.02  # reflected rotor inertia of every joint; also steadies the stiff position servos


def default_urdf_path() -> Path:
    """The URDF shipped inside the Python package (works in pip mode and in a colcon install)."""
    return Path(str(resources.files("vla_ros") / "description" / "vla_arm.urdf"))


@dataclasses.dataclass(frozen=True)
class SceneConfig:
    """What the scene looks like; the sim's timing lives in ``SimConfig``.

    Args:
        physics_dt_s: MuJoCo timestep. 1/600 s divides both the 100 Hz joint-state and the 30 Hz camera
            periods, so every sample is taken exactly on a physics step.
        position_kp: stiffness of the position actuators per commanded joint (N m / rad or N / m); empty:
            the profile's ``sim_position_kp``, else ``generic_position_kp``. The cameras are the profile's.
        hand_rgba: colour of the hand and the fingers (the profile's hand link and everything below it); None:
            the arm's colour, as the bundled arm has always been drawn (the shipped policy saw it so).
        cup_contact_timeconst_s: time constant of the cups' contacts (MuJoCo ``solref``, averaged with the
            other geom's). The default is MuJoCo's own, 0.02 s: the fingers' servos squeeze 1.6 mm into a
            held cup. 0.004 s keeps a squeezed cup rigid (under 1 mm) and fewer off-centre grasps slip out
            after the lift, but a finger landing on a rim tips the cup instead of sinking in: the expert
            records fewer demonstrations, and a policy trained on them did worse (docs/training.md, "After
            the lift"). MuJoCo raises a value below twice the physics step to that.
    """

    physics_dt_s: float = 1.0 / 600.0
    position_kp: tuple[float, ...] = ()
    hand_rgba: tuple[float, float, float, float] | None = None
    cup_contact_timeconst_s: float = 0.02

    def __post_init__(self) -> None:
        if not 0.0 < self.physics_dt_s <= 0.01:
            raise ValueError(f"physics_dt_s must be in (0, 0.01], got {self.physics_dt_s}")
        if not 0.0 < self.cup_contact_timeconst_s <= 0.1:
            raise ValueError(f"cup_contact_timeconst_s must be in (0, 0.1], got {self.cup_contact_timeconst_s}")
        if not all(np.isfinite(k) and k > 0 for k in self.position_kp):
            raise ValueError(f"position_kp gains must be finite and > 0, got {self.position_kp}")


def _look_at_xyaxes(pos: np.ndarray, target: np.ndarray, up_hint=(0.0, 0.0, 1.0)) -> np.ndarray:
    """MuJoCo camera frame (x right, y up, looking along -z) that looks from pos at target."""
    forward = target - pos
    forward /= np.linalg.norm(forward)
    right = np.cross(forward, np.asarray(up_hint, dtype=float))
    right /= np.linalg.norm(right)
    up = np.cross(right, forward)
    return np.concatenate([right, up])


@dataclasses.dataclass(frozen=True)
class Mimic:
    """A joint that follows another: ``q[joint] = multiplier * q[leader] + offset`` (URDF ``<mimic>``)."""

    joint: str
    leader: str
    multiplier: float = 1.0
    offset: float = 0.0


@dataclasses.dataclass(frozen=True)
class SceneRobot:
    """The robot as the compiled scene has it, named by the profile (MuJoCo bodies are the URDF's links).

    Args:
        commanded_joints: the actuated joints in the profile's order (arm, then gripper); actuator ``i`` drives
            joint ``i`` and is named ``<joint>_position``.
        mimics: the joints that follow a commanded one through an equality constraint.
        hand_body: the profile's hand link (default: the TCP's parent link), where the wrist camera sits.
        tcp_body: the tool centre point.
        gripper_bodies: the bodies the gripper joints and their mimics move (the fingers).
        cameras: stream name (``vla_ros.cameras``) -> MuJoCo camera name, one per profile camera.
    """

    commanded_joints: tuple[str, ...]
    mimics: tuple[Mimic, ...]
    hand_body: str
    tcp_body: str
    gripper_bodies: tuple[str, ...]
    cameras: dict[str, str]


def default_profile() -> RobotProfile:
    from vla_ros.robot_profile import load_profile

    return load_profile(None)


def _urdf_joints(root: ET.Element) -> dict[str, ET.Element]:
    return {j.get("name"): j for j in root.findall("joint")}


def _child_link(joint: ET.Element) -> str:
    child = joint.find("child")
    return child.get("link", "") if child is not None else ""


def _parent_link(joint: ET.Element) -> str:
    parent = joint.find("parent")
    return parent.get("link", "") if parent is not None else ""


def _mimics(root: ET.Element) -> tuple[Mimic, ...]:
    out = []
    for joint in root.findall("joint"):
        m = joint.find("mimic")
        if m is not None:
            out.append(
                Mimic(joint.get("name"), m.get("joint"), float(m.get("multiplier", 1.0)), float(m.get("offset", 0.0)))
            )
    return tuple(out)


def _subtree(root: ET.Element, link: str) -> set[str]:
    """``link`` and every link below it."""
    children: dict[str, list[str]] = {}
    for joint in root.findall("joint"):
        children.setdefault(_parent_link(joint), []).append(_child_link(joint))
    out, todo = set(), [link]
    while todo:
        name = todo.pop()
        if name not in out:
            out.add(name)
            todo.extend(children.get(name, ()))
    return out


def hand_link_of(profile: RobotProfile, root: ET.Element | None = None) -> str:
    """The profile's hand link, or (unset) the parent link of the joint that holds the TCP."""
    if profile.hand_link:
        return profile.hand_link
    root = ET.fromstring(profile.urdf_text()) if root is None else root
    for joint in root.findall("joint"):
        if _child_link(joint) == profile.tcp_link:
            return _parent_link(joint)
    raise ProfileError(
        f"robot profile {profile.name}: tcp_link {profile.tcp_link!r} is the URDF's root or not one of its links; "
        "set hand_link in the profile"
    )


def _resolve_meshes(root: ET.Element, profile: RobotProfile) -> set[str]:
    """Make every mesh filename absolute (MuJoCo reads no ``package://``); drop visuals it cannot load.
    Returns the links left with at least one visual. Raises ProfileError for a collision mesh that cannot be
    loaded: the sim would be missing part of the robot."""
    from vla_ros.safety.robot import RobotModelError, resolve_package_uri

    base = profile.urdf.parent
    with_visuals = set()
    for link in root.findall("link"):
        for kind in ("visual", "collision"):
            for element in link.findall(kind):
                problem = ""
                for mesh in element.findall("./geometry/mesh"):
                    uri = mesh.get("filename", "")
                    try:
                        path = resolve_package_uri(uri, profile.package_paths, base)
                    except RobotModelError as err:
                        problem = str(err)
                        break
                    if path.suffix.lower() not in MESH_FORMATS:
                        problem = f"{uri}: MuJoCo reads {', '.join(MESH_FORMATS)} meshes, not {path.suffix}"
                        break
                    mesh.set("filename", str(path))
                if not problem:
                    if kind == "visual":
                        with_visuals.add(link.get("name"))
                elif kind == "visual":
                    log.info(
                        "link %s: visual dropped (%s); its collision geometry is drawn instead",
                        link.get("name"),
                        problem,
                    )
                    link.remove(element)
                else:
                    raise ProfileError(
                        f"robot profile {profile.name}: link {link.get('name')}: collision mesh: {problem}. Add the "
                        "folder that holds the package to the profile's package_paths (name=folder), or convert the "
                        "mesh to STL"
                    )
    return with_visuals


def _mujoco_urdf(profile: RobotProfile) -> tuple[str, ET.Element, set[str]]:
    """The profile's URDF as MuJoCo should read it: meshes resolved, and compiler options that keep every
    link a body of its own (the TCP and the hand are bodies the sim looks up) and read absolute mesh paths.
    Options the URDF sets itself (``<mujoco><compiler>``) otherwise stand; visuals are kept unless it says."""
    text = profile.urdf_text()
    try:
        root = ET.fromstring(text)
    except ET.ParseError as err:
        raise ProfileError(f"robot profile {profile.name}: {profile.urdf} is not valid XML: {err}") from None
    ours = ET.fromstring(text)  # the tree to hand to MuJoCo; `root` stays the URDF as written
    with_visuals = _resolve_meshes(ours, profile)
    block = ours.find("mujoco")
    if block is None:
        block = ET.SubElement(ours, "mujoco")
    compiler = block.find("compiler")
    if compiler is None:
        compiler = ET.SubElement(block, "compiler")
    compiler.set("fusestatic", "false")
    compiler.set("strippath", "false")
    compiler.attrib.setdefault("discardvisual", "false")
    if compiler.get("discardvisual") == "true":
        with_visuals = set()
    return ET.tostring(ours, encoding="unicode"), root, with_visuals


def generic_position_kp(model: mujoco.MjModel, joints, home_qpos: np.ndarray) -> np.ndarray:
    """Position gains for a robot without hand-tuned ones: ``kp = M_jj (2 pi f)^2`` with ``M_jj`` the joint's
    entry on the diagonal of the joint-space inertia matrix at home (the links it carries and the rotor's
    armature) and ``f = SERVO_FREQUENCY_HZ``: every servo, from the shoulder carrying the whole arm to a finger,
    answers a position error in about the same time. Critically damped (``dampratio`` 1) like the bundled
    arm's. A mimic finger's mass is carried by its constraint, not counted here."""
    data = mujoco.MjData(model)
    data.qpos[:] = home_qpos
    mujoco.mj_forward(model, data)
    inertia = np.zeros((model.nv, model.nv))
    mujoco.mj_fullM(model, data, inertia)
    dofs = [int(model.joint(j).dofadr[0]) for j in joints]
    return np.diag(inertia)[dofs] * (2.0 * np.pi * SERVO_FREQUENCY_HZ) ** 2


def _home_qpos(model: mujoco.MjModel, profile: RobotProfile, mimics: tuple[Mimic, ...]) -> np.ndarray:
    qpos = model.qpos0.copy()
    home = dict(zip(profile.commanded_joints, profile.home_q))
    for name, q in home.items():
        qpos[model.joint(name).qposadr[0]] = q
    for m in mimics:
        if m.leader in home:
            qpos[model.joint(m.joint).qposadr[0]] = m.multiplier * home[m.leader] + m.offset
    return qpos


def build_spec(profile: RobotProfile | None, cfg: SceneConfig) -> tuple[mujoco.MjSpec, SceneRobot]:
    """The scene spec around ``profile``'s robot (None: the bundled arm) and what the sim needs to know of it.

    The commanded joints are the profile's; every other movable joint must mimic one of them (it follows its
    leader through the equality constraint MuJoCo creates from the URDF ``<mimic>`` tag). Raises ProfileError
    naming what does not fit.
    """
    profile = profile or default_profile()
    xml, root, with_visuals = _mujoco_urdf(profile)
    try:
        spec = mujoco.MjSpec.from_string(xml)
    except ValueError as err:
        raise ProfileError(f"robot profile {profile.name}: MuJoCo cannot read {profile.urdf}: {err}") from None
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

    commanded = tuple(profile.commanded_joints)
    mimics = tuple(m for m in _mimics(root) if m.leader in commanded)
    movable = (mujoco.mjtJoint.mjJNT_HINGE, mujoco.mjtJoint.mjJNT_SLIDE)
    kinds = {joint.name: joint.type for joint in spec.joints}
    for name in commanded:
        if kinds.get(name) not in movable:
            raise ProfileError(
                f"robot profile {profile.name}: commanded joint {name!r} is not a revolute or prismatic joint of "
                f"{profile.urdf} as MuJoCo reads it (its joints: {sorted(kinds)})"
            )
    passive = sorted(n for n, k in kinds.items() if n not in commanded and n not in {m.joint for m in mimics})
    if passive:
        raise ProfileError(
            f"robot profile {profile.name}: joint(s) {passive} move but are neither commanded (arm_joints, "
            "gripper.joints) nor mimic a commanded joint; list them in the profile"
        )
    for joint in spec.joints:
        joint.armature = ARMATURE
    hand = hand_link_of(profile, root)
    joints = _urdf_joints(root)
    gripper_set = set(profile.gripper_joints)
    gripper_bodies = tuple(_child_link(joints[j]) for j in profile.gripper_joints) + tuple(
        _child_link(joints[m.joint]) for m in mimics if m.leader in gripper_set
    )
    for body in (hand, profile.tcp_link, *gripper_bodies):
        if spec.body(body) is None:
            raise ProfileError(f"robot profile {profile.name}: link {body!r} is not a body of the compiled robot")

    # The arm's own servos hold it against gravity on a real robot; gravcomp models that, so a position
    # target is reached without steady-state sag.
    for body in spec.bodies:
        if body.name not in ("world",):
            body.gravcomp = 1.0
    hand_links = _subtree(root, hand)
    hand_rgba = cfg.hand_rgba or ARM_RGBA
    for geom in spec.geoms:
        link = geom.parent.name
        geom.rgba = hand_rgba if link in hand_links else ARM_RGBA
        geom.friction = (1.5, 0.01, 0.001)
        if link in with_visuals and geom.contype != 0:
            geom.group = 3  # the link's visual shows; its collision geometry stays hidden (not drawn by default)
    # The fingers touch when closed; that contact would only fight the mimic constraint.
    for i, body1 in enumerate(gripper_bodies):
        for body2 in gripper_bodies[i + 1 :]:
            spec.add_exclude(bodyname1=body1, bodyname2=body2)

    kp = cfg.position_kp or profile.sim_position_kp
    if not kp:
        model = spec.compile()
        kp = tuple(generic_position_kp(model, commanded, _home_qpos(model, profile, mimics)))
    if len(kp) != len(commanded):
        raise ValueError(f"position_kp has {len(kp)} gains for {len(commanded)} commanded joints ({list(commanded)})")
    for name, gain in zip(commanded, kp):
        act = spec.add_actuator(name=f"{name}_position", target=name, trntype=mujoco.mjtTrn.mjTRN_JOINT)
        act.set_to_position(kp=gain, dampratio=1.0, inheritrange=1.0)

    table_z = profile.table_height_m
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
        pos=(0.0, 0.0, table_z - 0.75),
        rgba=(0.35, 0.36, 0.38, 1.0),
    )
    world.add_geom(
        name="table",
        type=mujoco.mjtGeom.mjGEOM_BOX,
        size=TABLE_HALF_SIZE_M,
        pos=(TABLE_CENTER_XY_M[0], TABLE_CENTER_XY_M[1], table_z - TABLE_HALF_SIZE_M[2]),
        rgba=(0.62, 0.50, 0.38, 1.0),
        friction=(1.0, 0.01, 0.001),
    )
    for color, rgba in CUP_COLORS.items():
        cup = world.add_body(name=f"{color}_cup", pos=(0.0, 0.0, table_z + CUP_HALF_HEIGHT_M))
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

    streams = {}
    for cam in profile.cameras:
        mount = world if cam.mount == "world" else spec.body(cam.mount)
        if mount is None:
            raise ProfileError(
                f"robot profile {profile.name}: camera {cam.name} is mounted on {cam.mount!r}, not a link"
            )
        pos = np.asarray(cam.pos, dtype=float)
        target = np.asarray(cam.target, dtype=float)
        if np.linalg.norm(target - pos) < 1e-6 or np.linalg.norm(np.cross(target - pos, cam.up)) < 1e-6:
            raise ProfileError(
                f"robot profile {profile.name}: camera {cam.name}: target must differ from pos and not lie along up"
            )
        # xyaxes: image right and up; e.g. the wrist camera's up is the hand's x, so the fingers stand at the
        # bottom of its picture.
        mount.add_camera(name=cam.name, pos=pos, xyaxes=_look_at_xyaxes(pos, target, cam.up), fovy=cam.fovy_deg)
        streams[STREAM_OF_CAMERA.get(cam.name, cam.name)] = cam.name
    if cameras.FRONT not in streams:
        raise ProfileError(f"robot profile {profile.name}: no camera named {SCENE_CAMERA} (the sim's main view)")
    robot = SceneRobot(
        commanded_joints=commanded,
        mimics=mimics,
        hand_body=hand,
        tcp_body=profile.tcp_link,
        gripper_bodies=gripper_bodies,
        cameras=streams,
    )
    return spec, robot

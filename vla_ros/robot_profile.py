"""Robot profiles: one small YAML per robot, the one place its joints, gripper, TCP, home pose and cameras live.

Every node, the sim, ``collect``, ``train``, ``eval`` and ``demo`` read the robot through a profile; the bundled
arm is the default (``vla_ros/description/vla_arm.yaml``). No rclpy import.

A profile (paths relative to the profile file; ``package://`` URIs resolve as in the URDF)::

    name: fr3
    urdf: fr3.urdf
    srdf: fr3.srdf                      # optional: collision pairs to leave out
    package_paths: []                   # optional: extra roots for package:// URIs
    arm_joints: [fr3_joint1, ..., fr3_joint7]
    gripper:
      joints: [fr3_finger_joint1]       # commanded; mimic joints follow their leader
      open: [0.04]
      closed: [0.0]
    tcp_link: fr3_hand_tcp              # the point between the fingertips
    hand_link: fr3_hand                 # optional: the wrist camera's mount (default: the TCP's parent link)
    home: {fr3_joint1: 0.0, ...}        # every arm joint; the gripper starts open
    table_height_m: 0.0                 # the table top's height in the base frame
    cameras:                            # optional; default: the scene camera and a wrist camera
      - {name: scene_camera, mount: world, pos: [1.1, 0, 0.8], target: [0.3, 0, 0.14], fovy_deg: 58}
    sim_position_kp: {fr3_joint1: 2000, ...}  # optional: the sim's servo stiffness per commanded joint
                                        # (N m/rad, N/m); default: vla_ros.sim.scene.generic_position_kp

Where a profile is asked for by name (``--robot fr3``), it is looked up as ``NAME.yaml`` in
``$VLA_ROS_ROBOT_PATH`` (colon-separated folders), then in the package's ``description/`` folder.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path

import yaml

BUNDLED_PROFILE = "vla_arm"
ROBOT_PATH_ENV = "VLA_ROS_ROBOT_PATH"
SCENE_CAMERA = "scene_camera"
WRIST_CAMERA = "wrist_camera"


class ProfileError(ValueError):
    """A profile that cannot be used; the message names the file, the field and what to write instead."""


@dataclasses.dataclass(frozen=True)
class CameraMount:
    """A camera looking from ``pos`` at ``target`` (metres, in the mount's frame: ``world`` or a link).

    ``up`` is the direction that appears upwards in the image (in the mount's frame)."""

    name: str
    mount: str = "world"
    pos: tuple[float, float, float] = (1.10, 0.0, 0.80)
    target: tuple[float, float, float] = (0.30, 0.0, 0.14)
    fovy_deg: float = 58.0
    up: tuple[float, float, float] = (0.0, 0.0, 1.0)


@dataclasses.dataclass(frozen=True)
class RobotProfile:
    """One robot: its description files and what the sim, the expert and the nodes need to know of it."""

    name: str
    urdf: Path
    arm_joints: tuple[str, ...]
    gripper_joints: tuple[str, ...]
    gripper_open: tuple[float, ...]
    gripper_closed: tuple[float, ...]
    tcp_link: str
    home: tuple[float, ...]  # arm joints, in arm_joints order
    hand_link: str = ""
    srdf: Path | None = None
    package_paths: tuple[str, ...] = ()
    table_height_m: float = 0.0
    cameras: tuple[CameraMount, ...] = ()
    sim_position_kp: tuple[float, ...] = ()  # commanded joints' order; empty: the sim's generic rule
    source: Path | None = None  # the YAML file it was read from

    @property
    def commanded_joints(self) -> tuple[str, ...]:
        """The joints a chunk commands, in order: the arm, then the gripper."""
        return self.arm_joints + self.gripper_joints

    @property
    def home_q(self) -> tuple[float, ...]:
        """The commanded joints at home: the arm's home pose, the gripper open."""
        return self.home + self.gripper_open

    def camera(self, name: str) -> CameraMount | None:
        return next((c for c in self.cameras if c.name == name), None)

    def urdf_text(self) -> str:
        try:
            return self.urdf.read_text(encoding="utf-8")
        except OSError as err:
            raise ProfileError(f"robot profile {self.name}: cannot read its URDF {self.urdf}: {err}") from None

    def srdf_text(self) -> str | None:
        if self.srdf is None:
            return None
        try:
            return self.srdf.read_text(encoding="utf-8")
        except OSError as err:
            raise ProfileError(f"robot profile {self.name}: cannot read its SRDF {self.srdf}: {err}") from None

    def to_yaml(self) -> str:
        """The profile as YAML, paths relative to where ``source`` is (absolute where it is unset)."""
        base = self.source.parent if self.source else None

        def rel(p: Path | None) -> str:
            if p is None:
                return ""
            if base is not None:
                try:
                    return os.path.relpath(p, base)
                except ValueError:
                    pass
            return str(p)

        data = {
            "name": self.name,
            "urdf": rel(self.urdf),
            "srdf": rel(self.srdf),
            "package_paths": list(self.package_paths),
            "arm_joints": list(self.arm_joints),
            "gripper": {
                "joints": list(self.gripper_joints),
                "open": list(self.gripper_open),
                "closed": list(self.gripper_closed),
            },
            "tcp_link": self.tcp_link,
            "hand_link": self.hand_link,
            "home": {j: float(v) for j, v in zip(self.arm_joints, self.home)},
            "table_height_m": self.table_height_m,
            "cameras": [
                {
                    "name": c.name,
                    "mount": c.mount,
                    "pos": list(c.pos),
                    "target": list(c.target),
                    "fovy_deg": c.fovy_deg,
                    "up": list(c.up),
                }
                for c in self.cameras
            ],
        }
        if self.sim_position_kp:
            data["sim_position_kp"] = {j: float(k) for j, k in zip(self.commanded_joints, self.sim_position_kp)}
        text = yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=120)
        return "# vla_ros robot profile (docs/your_robot.md explains every field)\n" + text


def bundled_profile_path() -> Path:
    return Path(str(resources.files("vla_ros") / "description" / f"{BUNDLED_PROFILE}.yaml"))


def profile_search_path() -> list[Path]:
    """Folders searched for ``NAME.yaml``: ``$VLA_ROS_ROBOT_PATH``, then the package's description folder."""
    folders = [Path(p).expanduser() for p in os.environ.get(ROBOT_PATH_ENV, "").split(os.pathsep) if p]
    return folders + [bundled_profile_path().parent]


def find_profile(name_or_path: str | os.PathLike | None) -> Path:
    """The profile file for a path or a name (empty or None: the bundled arm)."""
    text = str(name_or_path or "").strip()
    if not text:
        return bundled_profile_path()
    path = Path(text).expanduser()
    if path.suffix.lower() in (".yaml", ".yml") or path.is_file():
        if not path.is_file():
            raise ProfileError(f"robot profile {path} does not exist")
        return path
    for folder in profile_search_path():
        candidate = folder / f"{text}.yaml"
        if candidate.is_file():
            return candidate
    searched = ", ".join(str(f) for f in profile_search_path())
    raise ProfileError(
        f"no robot profile named {text!r} (looked for {text}.yaml in {searched}); pass a profile file, or write "
        f"one with `vla-ros robot check URDF --write-profile {text}.yaml`"
    )


def load_profile(name_or_path: str | os.PathLike | None = None) -> RobotProfile:
    """Read and check a profile (by path or name; None: the bundled arm). Raises ProfileError naming what is wrong."""
    path = find_profile(name_or_path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as err:
        raise ProfileError(f"robot profile {path}: cannot read it: {err}") from None
    return profile_from_dict(data, path)


def _names(value, field: str, where: str, allow_empty: bool = False) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence) or not all(isinstance(v, str) and v for v in value):
        raise ProfileError(f"{where}: {field} must be a list of joint names, got {value!r}")
    if not value and not allow_empty:
        raise ProfileError(f"{where}: {field} is empty")
    if len(set(value)) != len(value):
        raise ProfileError(f"{where}: {field} repeats a name: {list(value)}")
    return tuple(value)


def _numbers(value, n: int, field: str, where: str) -> tuple[float, ...]:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = [value]
    try:
        out = tuple(float(v) for v in value)
    except (TypeError, ValueError):
        raise ProfileError(f"{where}: {field} must be {n} numbers, got {value!r}") from None
    if len(out) != n or not all(math.isfinite(v) for v in out):
        raise ProfileError(f"{where}: {field} must be {n} finite numbers, got {value!r}")
    return out


def _camera(item, where: str) -> CameraMount:
    if not isinstance(item, Mapping) or not item.get("name"):
        raise ProfileError(f"{where}: each camera needs at least a name, got {item!r}")
    known = {f.name for f in dataclasses.fields(CameraMount)}
    unknown = sorted(set(item) - known)
    if unknown:
        raise ProfileError(f"{where}: camera {item['name']}: unknown field(s) {unknown} (known: {sorted(known)})")
    kwargs = {"name": str(item["name"]), "mount": str(item.get("mount", "world"))}
    for key in ("pos", "target", "up"):
        if key in item:
            kwargs[key] = _numbers(item[key], 3, f"camera {item['name']}.{key}", where)
    if "fovy_deg" in item:
        fovy = _numbers(item["fovy_deg"], 1, f"camera {item['name']}.fovy_deg", where)[0]
        if not 10.0 <= fovy <= 120.0:
            raise ProfileError(f"{where}: camera {item['name']}.fovy_deg must be in [10, 120], got {fovy}")
        kwargs["fovy_deg"] = fovy
    return CameraMount(**kwargs)


PROFILE_FIELDS = (
    "name",
    "urdf",
    "srdf",
    "package_paths",
    "arm_joints",
    "gripper",
    "tcp_link",
    "hand_link",
    "home",
    "table_height_m",
    "cameras",
    "sim_position_kp",
)


def _resolve(base: Path, text: str) -> Path:
    if text.startswith("package://") or text.startswith("file://"):
        from vla_ros.safety.robot import resolve_package_uri

        return resolve_package_uri(text, (), base)
    expanded = os.path.expandvars(text)
    unset = re.findall(r"\$\{?(\w+)", expanded)
    if unset:
        raise ProfileError(f"robot profile in {base}: {text!r} needs the environment variable {unset[0]} (not set)")
    path = Path(expanded).expanduser()
    return Path(os.path.normpath(path if path.is_absolute() else base / path))


def _package_path(base: Path, entry: str) -> str:
    """A package_paths entry (``folder`` or ``name=folder``) with its folder resolved against ``base``."""
    name, sep, folder = entry.partition("=")
    return f"{name}={_resolve(base, folder)}" if sep else str(_resolve(base, entry))


def profile_from_dict(data, path: Path) -> RobotProfile:
    """A profile from parsed YAML (``path``: where it came from, for relative paths and messages)."""
    where = f"robot profile {path}"
    if not isinstance(data, Mapping):
        raise ProfileError(f"{where}: expected a mapping of fields, got {type(data).__name__}")
    unknown = sorted(set(data) - set(PROFILE_FIELDS))
    if unknown:
        raise ProfileError(f"{where}: unknown field(s) {unknown} (known: {list(PROFILE_FIELDS)})")
    for field in ("urdf", "arm_joints", "gripper", "tcp_link", "home"):
        if data.get(field) in (None, "", [], {}):
            raise ProfileError(f"{where}: {field} is missing (docs/your_robot.md lists every field)")
    base = path.parent
    urdf = _resolve(base, str(data["urdf"]))
    srdf = _resolve(base, str(data["srdf"])) if data.get("srdf") else None
    arm = _names(data["arm_joints"], "arm_joints", where)
    gripper = data["gripper"]
    if not isinstance(gripper, Mapping):
        raise ProfileError(f"{where}: gripper must be a mapping with joints, open and closed, got {gripper!r}")
    g_joints = _names(gripper.get("joints", []), "gripper.joints", where)
    if set(g_joints) & set(arm):
        raise ProfileError(f"{where}: {sorted(set(g_joints) & set(arm))} are both arm and gripper joints")
    g_open = _numbers(gripper.get("open"), len(g_joints), "gripper.open", where)
    g_closed = _numbers(gripper.get("closed"), len(g_joints), "gripper.closed", where)
    if g_open == g_closed:
        raise ProfileError(f"{where}: gripper.open and gripper.closed are the same ({list(g_open)})")
    home = data["home"]
    if isinstance(home, Mapping):
        missing = [j for j in arm if j not in home]
        extra = sorted(set(home) - set(arm))
        if missing or extra:
            raise ProfileError(f"{where}: home must give every arm joint, no other (missing {missing}, extra {extra})")
        home_q = _numbers([home[j] for j in arm], len(arm), "home", where)
    else:
        home_q = _numbers(home, len(arm), "home", where)
    cameras = data.get("cameras")
    if cameras is None:
        cams = default_cameras(str(data.get("hand_link") or ""))
    elif isinstance(cameras, Sequence) and not isinstance(cameras, str):
        cams = tuple(_camera(c, where) for c in cameras)
        names = [c.name for c in cams]
        if len(set(names)) != len(names):
            raise ProfileError(f"{where}: camera names repeat: {names}")
    else:
        raise ProfileError(f"{where}: cameras must be a list, got {cameras!r}")
    package_paths = data.get("package_paths") or []
    if isinstance(package_paths, str) or not isinstance(package_paths, Sequence):
        raise ProfileError(f"{where}: package_paths must be a list of folders, got {package_paths!r}")
    table = _numbers(data.get("table_height_m", 0.0), 1, "table_height_m", where)[0]
    kp = _position_kp(data.get("sim_position_kp"), arm + g_joints, where)
    return RobotProfile(
        name=str(data.get("name") or path.stem),
        urdf=urdf,
        srdf=srdf,
        package_paths=tuple(_package_path(base, str(p)) for p in package_paths),
        arm_joints=arm,
        gripper_joints=g_joints,
        gripper_open=g_open,
        gripper_closed=g_closed,
        tcp_link=str(data["tcp_link"]),
        hand_link=str(data.get("hand_link") or ""),
        home=home_q,
        table_height_m=table,
        cameras=cams,
        sim_position_kp=kp,
        source=path,
    )


def _position_kp(value, joints: tuple[str, ...], where: str) -> tuple[float, ...]:
    """``sim_position_kp``: a gain for every commanded joint, by name (empty when the field is absent)."""
    if value in (None, "", {}):
        return ()
    if not isinstance(value, Mapping):
        raise ProfileError(f"{where}: sim_position_kp must map every commanded joint to a gain, got {value!r}")
    missing = [j for j in joints if j not in value]
    extra = sorted(set(value) - set(joints))
    if missing or extra:
        raise ProfileError(
            f"{where}: sim_position_kp must give every commanded joint, no other (missing {missing}, extra {extra})"
        )
    kp = _numbers([value[j] for j in joints], len(joints), "sim_position_kp", where)
    if not all(k > 0 for k in kp):
        raise ProfileError(f"{where}: sim_position_kp gains must be > 0, got {dict(zip(joints, kp))}")
    return kp


def default_cameras(hand_link: str) -> tuple[CameraMount, ...]:
    """The scene camera across the table, and (with a hand link) a camera beside the palm looking between the
    fingers (the hand's z towards the fingertips, image up along the hand's x)."""
    scene = CameraMount(name=SCENE_CAMERA)
    if not hand_link:
        return (scene,)
    wrist = CameraMount(
        name=WRIST_CAMERA,
        mount=hand_link,
        pos=(0.07, 0.0, 0.0),
        target=(0.0, 0.0, 0.16),
        fovy_deg=75.0,
        up=(1.0, 0.0, 0.0),
    )
    return (scene, wrist)


def check_against_urdf(profile: RobotProfile) -> list[str]:
    """Problems between the profile and its URDF (joints or links it names that the URDF lacks, a home pose or
    gripper value outside the limits, a mimic joint commanded); empty when they agree."""
    import xml.etree.ElementTree as ET

    from vla_ros.urdf_limits import limits_for

    try:
        root = ET.fromstring(profile.urdf_text())
    except ET.ParseError as err:
        return [f"URDF {profile.urdf}: not valid XML: {err}"]
    joints = {j.get("name"): j for j in root.iter("joint")}
    links = {link.get("name") for link in root.iter("link")}
    problems = []
    for name in profile.commanded_joints:
        joint = joints.get(name)
        if joint is None:
            problems.append(f"joint {name!r} is not in {profile.urdf} (its joints: {sorted(joints)})")
        elif joint.get("type") in ("fixed", "floating", "planar"):
            problems.append(f"joint {name!r} is {joint.get('type')}; commanded joints move (revolute, prismatic)")
        elif joint.find("mimic") is not None:
            problems.append(f"joint {name!r} mimics {joint.find('mimic').get('joint')}; command its leader instead")
    for field, link in (("tcp_link", profile.tcp_link), ("hand_link", profile.hand_link)):
        if link and link not in links:
            problems.append(f"{field} {link!r} is not a link of {profile.urdf}")
    for cam in profile.cameras:
        if cam.mount != "world" and cam.mount not in links:
            problems.append(f"camera {cam.name}: mount {cam.mount!r} is neither world nor a link of {profile.urdf}")
    if problems:
        return problems
    try:
        limits = limits_for(profile.urdf, profile.commanded_joints)
    except (ValueError, OSError) as err:
        return [str(err)]
    for i, name in enumerate(profile.commanded_joints):
        lo, hi = float(limits.lower[i]), float(limits.upper[i])
        values = (
            [("home", profile.home[i])]
            if i < len(profile.arm_joints)
            else [
                ("gripper.open", profile.gripper_open[i - len(profile.arm_joints)]),
                ("gripper.closed", profile.gripper_closed[i - len(profile.arm_joints)]),
            ]
        )
        for what, v in values:
            if not lo - 1e-9 <= v <= hi + 1e-9:
                problems.append(f"{what} of {name} is {v:g}, outside its URDF limits [{lo:g}, {hi:g}]")
    return problems


# A trained model folder records the robot it was trained for in its config.json metadata (``vla-ros train
# --robot``): the profile's name, and the profile as it was asked for (a name, looked up again where the model
# is used; a file, by its absolute path). ``eval``, ``select``, ``demo`` and ``collect --policy`` default to it.
MODEL_ROBOT_KEY = "robot"
MODEL_PROFILE_KEY = "robot_profile"


def profile_reference(name_or_path: str | os.PathLike | None) -> str:
    """How a model folder records the profile ``name_or_path`` asked for: a name as it is, a file by its absolute
    path, nothing (the bundled arm) by the bundled profile's name."""
    text = str(name_or_path or "").strip()
    if not text:
        return BUNDLED_PROFILE
    if find_profile(text) == Path(text).expanduser():  # given as a file
        return str(Path(text).expanduser().resolve())
    return text


def model_metadata(name_or_path: str | os.PathLike | None, profile: RobotProfile) -> dict[str, str]:
    """The metadata entries of a model trained for ``profile`` (asked for as ``name_or_path``)."""
    return {MODEL_ROBOT_KEY: profile.name, MODEL_PROFILE_KEY: profile_reference(name_or_path)}


def _model_fields(model_dir: str | os.PathLike) -> tuple[tuple[str, ...], dict]:
    """(joint_names, metadata) of a model folder's config.json (read as JSON: no torch). FileNotFoundError where the
    folder or the file is missing, as ``vla_ros.model.io`` says it."""
    import json

    path = Path(model_dir) / "config.json"
    if not Path(model_dir).is_dir():
        raise FileNotFoundError(f"model folder not found: {model_dir} (expected {path})")
    if not path.is_file():
        raise FileNotFoundError(f"model config not found: {path}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ProfileError(f"model {model_dir}: cannot read {path}: {err}") from None
    if not isinstance(data, Mapping):
        raise ProfileError(f"model {model_dir}: {path} is not a JSON object")
    metadata = data.get("metadata")
    return tuple(data.get("joint_names") or ()), dict(metadata) if isinstance(metadata, Mapping) else {}


def shipped_model_name(robot: str | os.PathLike | None = None) -> str:
    """The model under the package's ``models/`` for ``robot`` (a profile's name or file; None: the bundled arm):
    ``<profile name>_cups`` where the package ships one (``fr3_cups``), else the default model (the bundled
    arm's, ``vla_cups``). Raises ProfileError where the profile does not load."""
    from vla_ros.launch_runner.packages import find_package_share
    from vla_ros.params.policy import DEFAULT_MODEL

    if not str(robot or "").strip():
        return DEFAULT_MODEL
    name = f"{load_profile(robot).name}_cups"
    return name if (find_package_share("vla_ros") / "models" / name / "config.json").is_file() else DEFAULT_MODEL


def profile_for_model(model_dir: str | os.PathLike, robot: str | os.PathLike | None = None) -> RobotProfile:
    """The robot a model drives in the sim: ``robot`` (a profile's name or file) where given, else the one its folder
    records (``vla-ros train --robot``), else the bundled arm. Raises ProfileError where the profile does not load
    or its commanded joints are not the model's, naming both lists; FileNotFoundError without the model's
    config.json."""
    joints, metadata = _model_fields(model_dir)
    recorded = str(metadata.get(MODEL_PROFILE_KEY) or "")
    recorded_name = str(metadata.get(MODEL_ROBOT_KEY) or "")
    if str(robot or "").strip():
        profile = load_profile(robot)
        asked = f"--robot {robot}"
    elif recorded or recorded_name:
        errors = []
        # as it was asked for in training; then by its name (a profile file that moved)
        for ref in dict.fromkeys(r for r in (recorded, recorded_name) if r):
            try:
                profile = load_profile(ref)
                break
            except ProfileError as err:
                errors.append(str(err))
        else:
            raise ProfileError(
                f"model {model_dir} was trained for robot {recorded_name or recorded!r}, whose profile does not load "
                f"here: {errors[0]}; pass the robot's profile (--robot NAME|FILE)"
            )
        asked = f"the robot its folder records ({recorded_name or recorded})"
    else:
        profile = load_profile(None)
        asked = f"the bundled arm ({profile.name}; the model records no robot)"
    if joints and tuple(joints) != profile.commanded_joints:
        trained = f" (trained for {recorded_name})" if recorded_name else ""
        raise ProfileError(
            f"model {model_dir}{trained} commands joints {list(joints)}, but {asked} commands "
            f"{list(profile.commanded_joints)}: run it on the robot it was trained for"
            + (f" (--robot {recorded_name})" if recorded_name and recorded_name != profile.name else "")
        )
    return profile

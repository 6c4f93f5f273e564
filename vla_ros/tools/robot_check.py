"""``vla-ros robot check URDF|PROFILE``: will this robot run with vla_ros, and if not, what to change.

Loads the description as the safety filter does (``safety.robot.load_robot_files``: ``package://`` resolution,
convex hulls of the collision meshes, the SRDF's disabled pairs; its per-mesh lines go to stderr as progress) and
reports the joints (actuated, mimic, fixed) with their URDF limits, the collision pairs checked and those left
out with the rule that left each out, every collision mesh's vertices and load time, and every problem with its
fix, as a blocker (the nodes cannot run) or a warning. Problems found by reading the files (an unresolved
``package://`` mesh, a zero-width limit, a profile naming joints the URDF lacks) are all listed before the load,
which stops at its first error.

Given a URDF, ``--write-profile`` writes a starter robot profile (``vla_ros.robot_profile``) guessed from the
kinematic tree and the SRDF, then loads it back and checks it against the URDF. ``--write-controller-config``
writes the controller's ``joints`` and ``robot_description_file`` for ``robot.launch.xml controller_config:=``.

Exit status: 0 without blockers, 1 with blockers, 2 for a usage error. ``--json``: one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import sys
import textwrap
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from pathlib import Path

import yaml

from vla_ros.robot_profile import (
    ProfileError,
    RobotProfile,
    check_against_urdf,
    default_cameras,
    find_profile,
    load_profile,
)
from vla_ros.urdf_limits import JointLimit, read_joint_limits

BLOCKER, WARNING = "blocker", "warning"
# Link or joint names that say "part of the gripper".
GRIPPER_WORDS = re.compile(r"finger|gripper|jaw", re.IGNORECASE)
# TCP link names, best first: the point between the fingertips, a tool flange, an end-effector frame.
TCP_NAMES = (
    re.compile(r"tcp", re.IGNORECASE),
    re.compile(r"tool0", re.IGNORECASE),
    re.compile(r"(^|_)(ee|eef|end_effector)($|_)", re.IGNORECASE),
)
HOME_STATES = ("ready", "home")  # SRDF group_state names taken as the home pose, in this order
# What each of RobotModel.excluded's reasons means (see safety.robot.RobotModel._select_pairs).
EXCLUSION_SOURCES = {
    "srdf": "the SRDF disables the pair (<disable_collisions>)",
    "adjacent": "no SRDF, so links joined by a joint are left out (links without collision geometry skipped)",
    "contact_at_reference": "no SRDF, so links touching (within 0.1 mm) at the reference pose (zeros clipped into the "
    "limits) are left out",
    "rigid": "no movable joint between the links: their distance cannot change",
}


class UsageError(ValueError):
    """Bad arguments: exit status 2 with the message."""


@dataclasses.dataclass(frozen=True)
class Problem:
    severity: str  # BLOCKER (the nodes cannot run) or WARNING
    code: str
    message: str
    fix: str


@dataclasses.dataclass(frozen=True)
class JointRow:
    name: str
    type: str
    role: str  # actuated, mimic, fixed or unsupported
    parent: str
    child: str
    lower: float | None = None
    upper: float | None = None
    velocity: float | None = None
    mimic: str | None = None

    @property
    def unit(self) -> str:
        return "m" if self.type == "prismatic" else "rad"


@dataclasses.dataclass
class Report:
    """Everything the check found; ``to_dict`` is the ``--json`` object, ``text`` the human report."""

    target: str
    kind: str  # "urdf" or "profile"
    urdf: Path | None = None
    srdf: Path | None = None
    package_paths: tuple[str, ...] = ()
    profile: RobotProfile | None = None
    robot_name: str = ""
    joints: list[JointRow] = dataclasses.field(default_factory=list)
    collision: dict | None = None
    meshes: list[dict] = dataclasses.field(default_factory=list)
    load_s: float | None = None
    problems: list[Problem] = dataclasses.field(default_factory=list)
    starter: RobotProfile | None = None
    starter_notes: list[str] = dataclasses.field(default_factory=list)
    found_package_paths: list[str] = dataclasses.field(default_factory=list)  # entries that would resolve meshes
    written: dict[str, str] = dataclasses.field(default_factory=dict)

    def add(self, severity: str, code: str, message: str, fix: str) -> None:
        self.problems.append(Problem(severity, code, message, fix))

    @property
    def blockers(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == BLOCKER]

    def to_dict(self) -> dict:
        def num(x):
            return x if x is None or math.isfinite(x) else None  # JSON has no infinity (continuous joints)

        return {
            "target": self.target,
            "kind": self.kind,
            "robot": self.robot_name,
            "urdf": str(self.urdf) if self.urdf else None,
            "srdf": str(self.srdf) if self.srdf else None,
            "package_paths": list(self.package_paths),
            "ok": not self.blockers,
            "blockers": len(self.blockers),
            "warnings": len(self.problems) - len(self.blockers),
            "problems": [dataclasses.asdict(p) for p in self.problems],
            "joints": [
                {**dataclasses.asdict(j), "lower": num(j.lower), "upper": num(j.upper), "unit": j.unit}
                for j in self.joints
            ],
            "collision": self.collision,
            "meshes": self.meshes,
            "load_s": self.load_s,
            "profile": _profile_dict(self.profile),
            "starter_profile": _profile_dict(self.starter),
            "starter_notes": self.starter_notes,
            "written": self.written,
        }


def _profile_dict(profile: RobotProfile | None) -> dict | None:
    if profile is None:
        return None
    return {
        "name": profile.name,
        "source": str(profile.source) if profile.source else None,
        "arm_joints": list(profile.arm_joints),
        "gripper_joints": list(profile.gripper_joints),
        "gripper_open": list(profile.gripper_open),
        "gripper_closed": list(profile.gripper_closed),
        "tcp_link": profile.tcp_link,
        "hand_link": profile.hand_link,
        "home": dict(zip(profile.arm_joints, profile.home)),
        "commanded_joints": list(profile.commanded_joints),
    }


# ---- reading the URDF --------------------------------------------------------------------------------


def joint_rows(root: ET.Element) -> list[JointRow]:
    """Every joint of the URDF, limits through ``urdf_limits`` (the reader the nodes use)."""
    limits = read_joint_limits(root)
    rows = []
    for joint in root.findall("joint"):
        name, kind = joint.get("name", ""), joint.get("type", "")
        parent = joint.find("parent").get("link", "") if joint.find("parent") is not None else ""
        child = joint.find("child").get("link", "") if joint.find("child") is not None else ""
        lim: JointLimit | None = limits.get(name)
        if kind == "fixed":
            role = "fixed"
        elif kind not in ("revolute", "prismatic"):
            role = "unsupported"  # continuous, floating, planar: the filter needs one coordinate with limits
        else:
            role = "mimic" if lim is not None and lim.mimic else "actuated"
        rows.append(
            JointRow(
                name,
                kind,
                role,
                parent,
                child,
                lim.lower if lim else None,
                lim.upper if lim else None,
                lim.velocity if lim else None,
                lim.mimic if lim else None,
            )
        )
    return rows


def _joint_problems(root: ET.Element, rows: list[JointRow], report: Report) -> None:
    elements = {j.get("name"): j for j in root.findall("joint")}
    actuated = {r.name for r in rows if r.role == "actuated"}
    for row in rows:
        if row.role == "unsupported":
            fix = (
                'make it revolute with <limit lower=".." upper=".." velocity=".." effort=".."/>'
                if row.type == "continuous"
                else "make it fixed (a mounted base) or remove it"
            )
            report.add(
                BLOCKER,
                "unsupported_joint",
                f"joint {row.name} is {row.type}: the safety filter handles revolute and prismatic joints with "
                "position limits",
                fix,
            )
            continue
        if row.role == "mimic" and row.mimic not in actuated:
            report.add(
                BLOCKER,
                "mimic_leader",
                f"joint {row.name} mimics {row.mimic!r}, which is not an actuated joint of the URDF",
                f'point <mimic joint=".."> of {row.name} at an actuated joint',
            )
        if row.role != "actuated":
            continue  # mimic joints follow their leader; the filter reads no limits of theirs
        limit = elements[row.name].find("limit")
        unit = row.unit
        add_limit = (
            f'add <limit lower=".." upper=".." velocity=".." effort=".."/> ({unit}, {unit}/s) to joint {row.name}'
        )
        if limit is None:
            report.add(BLOCKER, "missing_limits", f"joint {row.name} ({row.type}) has no <limit>", add_limit)
            continue
        missing = [k for k in ("lower", "upper") if limit.get(k) is None]
        if not (math.isfinite(row.lower) and math.isfinite(row.upper)) or row.lower >= row.upper:
            what = "zero-width" if row.lower == row.upper else "inverted or not finite"
            unset = f" ({' and '.join(missing)} unset, which URDF reads as 0)" if missing else ""
            report.add(
                BLOCKER,
                "bad_position_limits",
                f"joint {row.name}: position limits [{row.lower:g}, {row.upper:g}] {unit} are {what}{unset}",
                f"set lower < upper in the <limit> of joint {row.name} (its travel in {unit}), or make it fixed",
            )
        if not (row.velocity is not None and math.isfinite(row.velocity) and row.velocity > 0):
            report.add(
                BLOCKER,
                "missing_velocity_limit",
                f"joint {row.name}: no positive velocity limit (<limit velocity=...>, got {limit.get('velocity')!r})",
                f'set velocity=".." ({unit}/s) in the <limit> of joint {row.name}',
            )
    if not actuated and not any(r.role == "unsupported" for r in rows):
        report.add(BLOCKER, "no_joints", "the URDF has no revolute or prismatic joint", "is it the robot's URDF?")


def _package_folders(package: str, package_paths: Sequence[str]) -> list[Path]:
    """Folders where the package is found, as ``resolve_package_uri`` looks (entries, then the ament index)."""
    from vla_ros.safety.robot import _ament_share, package_roots

    found = [root for root in package_roots(package, package_paths) if root.is_dir()]
    share, _ = _ament_share(package)
    return found + ([share] if share is not None and share.is_dir() else [])


def suggest_package_path(package: str, rests: Sequence[str], base_dir: Path | None) -> str | None:
    """A ``name=FOLDER`` entry under which every mesh ``rest`` exists, FOLDER being the URDF's folder, a
    folder above it (three levels) or a folder named like the package in one of those; None if none fits."""
    if base_dir is None:
        return None
    for folder in [base_dir, *list(_absolute(base_dir).parents)[:3]]:
        for candidate in (folder, folder / package):
            if all((candidate / r).is_file() for r in rests):
                return f"{package}={_absolute(candidate)}"
    return None


def _mesh_problems(root: ET.Element, base_dir: Path | None, package_paths: Sequence[str], report: Report) -> None:
    from vla_ros.safety.robot import RobotModelError, resolve_package_uri

    unresolved: dict[str, list[tuple[str, str]]] = {}  # package -> (link, path in the package)
    for link in root.findall("link"):
        for mesh in link.findall("./collision/geometry/mesh"):
            uri = mesh.get("filename", "")
            try:
                resolve_package_uri(uri, package_paths, base_dir)
                continue
            except RobotModelError as err:
                reason = str(err)
            if uri.startswith("package://"):
                package, _, rest = uri[len("package://") :].partition("/")
                folders = _package_folders(package, package_paths)
                if not folders:
                    unresolved.setdefault(package, []).append((link.get("name", ""), rest))
                    continue
                reason = f"{uri}: package {package} is at {', '.join(map(str, folders))}, without {rest}"
            report.add(
                BLOCKER,
                "missing_mesh",
                f"link {link.get('name')}: collision mesh not found: {reason}",
                "put the mesh file there, or correct <mesh filename=...> in the URDF",
            )
    for package, meshes in unresolved.items():
        rests = [rest for _, rest in meshes]
        suggestion = suggest_package_path(package, rests, base_dir)
        if suggestion:
            report.found_package_paths.append(suggestion)
        where = "the profile's package_paths" if report.kind == "profile" else "a profile's package_paths"
        fix = (
            f"pass --package-path {suggestion} (the nodes: add it to {where} or the filter's package_paths parameter)"
            if suggestion
            else f"pass --package-path {package}=FOLDER where FOLDER/{rests[0]} exists (and add it to {where}), "
            f"or source the workspace that installs {package} so the ament index finds it"
        )
        report.add(
            BLOCKER,
            "unresolved_package",
            f"package://{package} is not found for {len(meshes)} collision mesh(es) "
            f"(e.g. link {meshes[0][0]}: package://{package}/{meshes[0][1]}); searched "
            f"package_paths={list(package_paths)} and the ament index",
            fix,
        )


def _is_frame(link: ET.Element, parent_joint: ET.Element | None) -> bool:
    """A link that is only a frame (no geometry or mass, attached rigidly): a TCP, a flange."""
    bare = all(link.find(tag) is None for tag in ("visual", "collision", "inertial"))
    return bare and (parent_joint is None or parent_joint.get("type") == "fixed")


def _gripper_collision_problems(root: ET.Element, report: Report) -> None:
    """Finger, gripper or jaw links (by name, or moved by the profile's gripper joints) without collision geometry."""
    joint_of = {j.find("child").get("link"): j for j in root.findall("joint") if j.find("child") is not None}
    named = {link.get("name") for link in root.findall("link") if GRIPPER_WORDS.search(link.get("name", ""))}
    if report.profile is not None:
        gripper = set(report.profile.gripper_joints)
        for joint in root.findall("joint"):
            mimic = joint.find("mimic")
            moved = joint.get("name") in gripper or (mimic is not None and mimic.get("joint") in gripper)
            if moved and joint.find("child") is not None:
                named.add(joint.find("child").get("link"))
    bare = [
        link.get("name")
        for link in root.findall("link")
        if link.get("name") in named
        and link.find("collision") is None
        and not _is_frame(link, joint_of.get(link.get("name")))
    ]
    if bare:
        report.add(
            WARNING,
            "gripper_without_collision",
            f"gripper link(s) {bare} have no collision geometry: the filter cannot keep them off the table or the arm",
            "add a <collision> to each (a box around the finger is enough)",
        )


def _srdf_problems(srdf_text: str, links: set[str], report: Report) -> None:
    try:
        root = ET.fromstring(srdf_text)
    except ET.ParseError as err:
        report.add(BLOCKER, "srdf_invalid", f"SRDF {report.srdf} is not valid XML: {err}", "fix or regenerate it")
        return
    unknown = sorted(
        {n for el in root.iter("disable_collisions") for n in (el.get("link1"), el.get("link2")) if n not in links}
    )
    if unknown:
        report.add(
            WARNING,
            "srdf_unknown_links",
            f"SRDF {report.srdf} disables pairs of links the URDF lacks: {unknown}",
            "is it this robot's SRDF? (MoveIt Setup Assistant writes one for a URDF)",
        )


# ---- loading as the nodes do -------------------------------------------------------------------------


def _load(report: Report, root: ET.Element, progress: Callable[[str], None]) -> None:
    """Load with ``load_robot_files`` and fill the collision pairs and the meshes' figures (``root``: the URDF as
    ``_read_urdf`` parsed it, for the links each mesh belongs to)."""
    from vla_ros.safety.robot import RobotModelError, load_robot_files, resolve_package_uri

    started = time.perf_counter()
    try:
        robot = load_robot_files(report.urdf, report.srdf, report.package_paths, progress=progress)
    except (RobotModelError, OSError) as err:
        report.add(
            BLOCKER,
            "load_failed",
            f"the safety filter cannot load the robot: {err}",
            "fix what it names; the nodes load it the same way",
        )
        return
    report.load_s = round(time.perf_counter() - started, 4)
    links = {}
    for link in root.findall("link"):
        for mesh in link.findall("./collision/geometry/mesh"):
            path = resolve_package_uri(mesh.get("filename", ""), report.package_paths, report.urdf.parent)
            links.setdefault(str(path), []).append(link.get("name"))
    for m in robot.mesh_reports:  # as the robot was first loaded (a cached model keeps its reports)
        report.meshes.append(
            {
                "file": m.path,
                "links": links.get(m.path, []),
                "bytes": Path(m.path).stat().st_size,
                "vertices": m.vertices,
                "hull_vertices": m.hull_vertices,
                "hull_padding": m.padding,
                "seconds": round(m.seconds, 4),
                "cached": m.cached,
            }
        )
    pairs = sorted({(p.link_a, p.link_b) for p in robot.self_pairs})
    report.collision = {
        "geometries": len(robot.geom_links),
        "links_with_geometry": sorted(set(robot.geom_links)),
        "geometry_pairs_checked": len(robot.self_pairs),
        "link_pairs_checked": [list(p) for p in pairs],
        "excluded": {
            reason: {"source": EXCLUSION_SOURCES.get(reason, reason), "pairs": [list(p) for p in links_]}
            for reason, links_ in robot.excluded.items()
        },
    }


# ---- the starter profile -----------------------------------------------------------------------------


def _srdf_home(srdf_text: str | None, arm: Sequence[str]) -> tuple[dict[str, float], str]:
    """Arm joint values of the SRDF's ready (or home) group_state, and its name; empty if none."""
    if not srdf_text:
        return {}, ""
    try:
        root = ET.fromstring(srdf_text)
    except ET.ParseError:
        return {}, ""
    states = {s.get("name", "").lower(): s for s in root.iter("group_state")}
    for name in HOME_STATES:
        state = states.get(name)
        if state is None:
            continue
        values = {}
        for j in state.findall("joint"):
            try:
                values[j.get("name")] = float(j.get("value", ""))
            except ValueError:
                continue
        values = {j: v for j, v in values.items() if j in arm}
        if values:
            return values, state.get("name", name)
    return {}, ""


def starter_profile(
    urdf: Path, srdf: Path | None, package_paths: Sequence[str], out: Path
) -> tuple[RobotProfile, list[str]]:
    """A profile guessed from the URDF (and SRDF), to be written at ``out``, and notes on what it guessed.

    Arm: the actuated revolute joints (not named finger/gripper/jaw) on the path from the root to the link
    with the most of them. Gripper: actuated prismatic joints below the arm's last link, or joints there whose
    name or child link says finger/gripper/jaw; open is the limit farther from 0, closed the other. TCP: a link
    rigidly below the arm named *tcp*, *tool0* or *ee*, else the end of the chain of fixed joints below the arm.
    Hand: the gripper joints' parent link. Home: the SRDF's ready (or home) pose, else 0 or, where 0 is outside
    the limits, the middle of the limits.
    """
    root = ET.parse(urdf).getroot()
    joints = [j for j in root.findall("joint") if j.find("parent") is not None and j.find("child") is not None]
    limits = read_joint_limits(root)
    below: dict[str, list[ET.Element]] = {}
    above: dict[str, ET.Element] = {}
    for j in joints:
        below.setdefault(j.find("parent").get("link"), []).append(j)
        above[j.find("child").get("link")] = j
    links = [link.get("name") for link in root.findall("link")]
    base = next((n for n in links if n not in above), links[0] if links else "")

    def gripperish(j: ET.Element) -> bool:
        return bool(GRIPPER_WORDS.search(j.get("name", "") + " " + j.find("child").get("link", "")))

    def actuated(j: ET.Element) -> bool:
        return j.get("name") in limits and limits[j.get("name")].mimic is None

    def arm_kind(j: ET.Element) -> bool:
        return j.get("type") in ("revolute", "continuous") and actuated(j) and not gripperish(j)

    # depth-first from the root: the path of arm joints to every link; keep the longest (first found on ties)
    best: list[ET.Element] = []
    stack = [(base, [])]
    while stack:
        link, path = stack.pop()
        if len(path) > len(best):
            best = path
        for j in reversed(below.get(link, [])):
            stack.append((j.find("child").get("link"), path + [j] if arm_kind(j) else path))
    arm = [j.get("name") for j in best]
    tip = best[-1].find("child").get("link") if best else base
    notes = [f"arm: {len(arm)} revolute joints from {base} to {tip}"]

    rigid, beyond, todo = [tip], [], [tip]  # links fixed to the tip; every joint below it
    while todo:
        link = todo.pop(0)
        for j in below.get(link, []):
            beyond.append(j)
            todo.append(j.find("child").get("link"))
            if j.get("type") == "fixed" and link in rigid:
                rigid.append(j.find("child").get("link"))
    gripper = [j for j in beyond if actuated(j) and (j.get("type") == "prismatic" or gripperish(j))]
    g_names = [j.get("name") for j in gripper]
    g_open, g_closed = [], []
    for name in g_names:
        lo, hi = limits[name].lower, limits[name].upper
        g_open.append(hi if abs(hi) >= abs(lo) else lo)
        g_closed.append(lo if abs(hi) >= abs(lo) else hi)
    notes.append(
        f"gripper: {g_names}, open at the limit farther from 0, closed at the other"
        if g_names
        else "gripper: none found below the arm (a profile needs one: fill gripper by hand)"
    )
    hand = gripper[0].find("parent").get("link") if gripper else ""

    tcp = next((n for pattern in TCP_NAMES for n in rigid if pattern.search(n)), "")
    if tcp:
        notes.append(f"tcp: {tcp} (by its name)")
    else:
        tcp = tip
        while len(fixed := [j for j in below.get(tcp, []) if j.get("type") == "fixed"]) == 1:
            tcp = fixed[0].find("child").get("link")
        notes.append(f"tcp: {tcp} (the end of the chain; no link named *tcp*, *tool0* or *ee*)")

    srdf_text = srdf.read_text(encoding="utf-8") if srdf else None
    from_srdf, state = _srdf_home(srdf_text, arm)
    home = []
    for name in arm:
        lo, hi = limits[name].lower, limits[name].upper
        default = 0.0 if lo <= 0.0 <= hi else (lo + hi) / 2.0
        home.append(float(min(max(from_srdf.get(name, default), lo), hi)))
    if state:
        rest = [n for n in arm if n not in from_srdf]
        notes.append(f"home: the SRDF's {state!r} pose" + (f" (0 or mid-limits for {rest})" if rest else ""))
    else:
        notes.append("home: 0, or the middle of the limits where 0 is outside them (no SRDF ready/home pose)")

    def rel(entry: str) -> str:  # package_paths entries relative to the profile where near, as it resolves them
        name, sep, folder = entry.partition("=")
        folder = _near(Path(folder if sep else entry), out)
        return f"{name}={folder}" if sep else folder

    profile = RobotProfile(
        name=root.get("name") or urdf.stem,
        urdf=_absolute(urdf),
        srdf=_absolute(srdf) if srdf else None,
        package_paths=tuple(rel(p) for p in package_paths),
        arm_joints=tuple(arm),
        gripper_joints=tuple(g_names),
        gripper_open=tuple(g_open),
        gripper_closed=tuple(g_closed),
        tcp_link=tcp,
        hand_link=hand,
        home=tuple(home),
        cameras=default_cameras(hand),
        source=_absolute(out),
    )
    return profile, notes


def _absolute(path: Path) -> Path:
    """Absolute, without resolving symbolic links (paths stay as the user wrote them)."""
    return Path(os.path.abspath(path.expanduser()))


def _near(path: Path, profile_file: Path) -> str:
    """``path`` relative to the profile's folder where that climbs at most one folder below the filesystem's
    root (``fr3/fr3.urdf``, ``../fr3/fr3.urdf``), else absolute."""
    target, folder = _absolute(path), _absolute(profile_file).parent
    relative = os.path.relpath(target, folder)
    common = Path(os.path.commonpath([target, folder]))
    far = relative.startswith(os.pardir + os.sep + os.pardir) or common == Path(common.anchor)
    return str(target) if far else relative


def _write_starter(report: Report, out: Path) -> None:
    extra = report.found_package_paths
    profile, notes = starter_profile(report.urdf, report.srdf, list(report.package_paths) + extra, out)
    if extra:
        notes.append(f"package_paths: {extra} found next to the URDF (see problems)")
    near = not Path(_near(profile.urdf, out)).is_absolute()  # to_yaml writes every path relative to source, or none
    out.write_text((profile if near else dataclasses.replace(profile, source=None)).to_yaml(), encoding="utf-8")
    report.starter, report.starter_notes = profile, notes
    report.written["profile"] = str(out)
    try:
        problems = check_against_urdf(load_profile(out))
    except ProfileError as err:
        problems = [str(err)]
    for message in problems:
        report.add(
            BLOCKER,
            "starter_profile",
            f"the starter profile {out} does not pass: {message}",
            f"edit {out} (docs/your_robot.md explains every field), then run vla-ros robot check {out}",
        )


def controller_config_yaml(profile: RobotProfile, path: Path) -> str:
    """controller_node parameters for ``profile``: its commanded joints and its URDF; the rest keep their defaults."""
    urdf = str(_absolute(profile.urdf))
    params = {"joints": list(profile.commanded_joints), "robot_description_file": urdf}
    data = {"/**/controller": {"ros__parameters": params}}
    return (
        f"# controller_node parameters for robot {profile.name}, written by `vla-ros robot check`; every other\n"
        "# parameter keeps its default (config/controller.yaml). robot.launch.xml's robot_description_file argument\n"
        "# overrides the value here, so pass both:\n"
        f"#   controller_config:={path} robot_description_file:={urdf}\n"
        + yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=120)
    )


def _write_controller_config(report: Report, out: Path) -> None:
    profile = report.profile or report.starter
    if profile is None:
        profile, _notes = starter_profile(report.urdf, report.srdf, report.package_paths, out)
    out.write_text(controller_config_yaml(profile, out), encoding="utf-8")
    report.written["controller_config"] = str(out)
    from vla_ros.params import controller
    from vla_ros.params.spec import values_from_yaml

    try:
        controller.config_from_params(values_from_yaml(controller.PARAMS, [out], "controller"))
    except (ValueError, OSError) as err:
        report.add(
            BLOCKER,
            "controller_config",
            f"the controller would refuse {out}: {err}",
            "fix the joints or the URDF it names",
        )


# ---- the check ---------------------------------------------------------------------------------------


def _resolve_target(target: str, srdf: str | None, package_paths: Sequence[str]) -> Report:
    """The report's inputs; a profile that does not load is a blocker, a missing file a usage error."""
    path = Path(target).expanduser()
    cli_paths = []
    for entry in package_paths:
        name, sep, folder = entry.partition("=")
        folder_path = Path(folder if sep else entry).expanduser()
        if not folder_path.is_dir():
            raise UsageError(f"--package-path {entry}: {folder_path} is not a folder")
        cli_paths.append(f"{name}={_absolute(folder_path)}" if sep else str(_absolute(folder_path)))
    srdf_path = _absolute(Path(srdf)) if srdf else None
    if srdf_path is not None and not srdf_path.is_file():
        raise UsageError(f"--srdf {srdf}: no such file")
    if path.is_file() and path.suffix.lower() not in (".yaml", ".yml"):
        return Report(target, "urdf", urdf=_absolute(path), srdf=srdf_path, package_paths=tuple(cli_paths))
    if path.suffix.lower() in (".urdf", ".xml", ".xacro"):
        raise UsageError(f"URDF {target}: no such file")
    try:
        profile_path = find_profile(target)
    except ProfileError as err:
        raise UsageError(str(err)) from None
    report = Report(target, "profile", package_paths=tuple(cli_paths))
    try:
        report.profile = load_profile(profile_path)
    except ProfileError as err:
        unset = re.search(r"environment variable (\w+) \(not set\)", str(err))
        fix = f"edit {profile_path} (docs/your_robot.md explains each field)"
        if unset:
            fix = f"export {unset[1]}=FOLDER (the folder it names), or {fix}"
        report.add(BLOCKER, "profile_invalid", str(err), fix)
        return report
    report.urdf = _absolute(report.profile.urdf)
    report.srdf = srdf_path or (_absolute(report.profile.srdf) if report.profile.srdf else None)
    report.package_paths = tuple(cli_paths) + report.profile.package_paths
    return report


def check(
    target: str,
    srdf: str | None = None,
    package_paths: Sequence[str] = (),
    progress: Callable[[str], None] | None = None,
    write_profile: str | None = None,
    write_controller_config: str | None = None,
) -> Report:
    """Check a URDF or a profile (path or name). Raises UsageError for arguments that cannot be used."""
    report = _resolve_target(target, srdf, package_paths)
    if write_profile and report.kind != "urdf":
        raise UsageError("--write-profile needs a URDF (a profile exists already: edit it)")
    for flag, out in (("--write-profile", write_profile), ("--write-controller-config", write_controller_config)):
        if out and not Path(out).expanduser().resolve().parent.is_dir():
            raise UsageError(f"{flag} {out}: the folder {Path(out).parent} does not exist")
    root = _read_urdf(report)
    if root is not None:
        _inspect(root, report)
        if not report.blockers:
            _load(report, root, progress or (lambda _m: None))
    for flag, out, write in (
        ("--write-profile", write_profile, _write_starter),
        ("--write-controller-config", write_controller_config, _write_controller_config),
    ):
        if out and root is None:
            report.add(WARNING, "not_written", f"{flag} {out}: not written", "fix the blockers above first")
        elif out:
            write(report, Path(out).expanduser())
    return report


def _read_urdf(report: Report) -> ET.Element | None:
    """The URDF's <robot> element, or None with a blocker saying why it cannot be read."""
    if report.urdf is None:
        return None  # the profile did not load
    if not report.urdf.is_file():
        report.add(BLOCKER, "urdf_missing", f"URDF {report.urdf} does not exist", "fix the profile's urdf field")
        return None
    if report.srdf is not None and not report.srdf.is_file():
        report.add(BLOCKER, "srdf_missing", f"SRDF {report.srdf} does not exist", "fix the profile's srdf field")
        return None
    text = report.urdf.read_text(encoding="utf-8", errors="replace")
    if report.urdf.suffix.lower() == ".xacro" or "xmlns:xacro" in text:
        report.add(
            BLOCKER,
            "xacro",
            f"{report.urdf} is a xacro file, not a URDF",
            f"expand it first: ros2 run xacro xacro {report.urdf} -o robot.urdf",
        )
        return None
    try:
        root = ET.fromstring(text)
        report.joints = joint_rows(root)
    except (ET.ParseError, ValueError) as err:  # not XML, or a <limit> value that is not a number
        report.add(BLOCKER, "urdf_invalid", f"URDF {report.urdf} cannot be read: {err}", "fix or regenerate it")
        return None
    if root.tag != "robot":
        report.add(BLOCKER, "urdf_invalid", f"URDF {report.urdf}: root element <{root.tag}>, not <robot>", "")
        return None
    report.robot_name = root.get("name", "")
    return root


def _inspect(root: ET.Element, report: Report) -> None:
    """Every problem found by reading the files, before the load (which stops at its first error)."""
    _joint_problems(root, report.joints, report)
    _mesh_problems(root, report.urdf.parent, report.package_paths, report)
    _gripper_collision_problems(root, report)
    if report.srdf is not None:
        _srdf_problems(report.srdf.read_text(encoding="utf-8"), {n.get("name") for n in root.findall("link")}, report)
    if report.profile is not None:
        for message in check_against_urdf(report.profile):
            report.add(BLOCKER, "profile_mismatch", message, f"edit {report.profile.source}")


# ---- output ------------------------------------------------------------------------------------------


def _limits_text(j: JointRow) -> str:
    if j.role == "fixed" or j.lower is None:
        return ""
    return f"[{j.lower:g}, {j.upper:g}] {j.unit}, {j.velocity:g} {j.unit}/s"


def _pairs_text(pairs: Sequence[Sequence[str]]) -> str:
    body = ", ".join(f"{a}<->{b}" for a, b in pairs) or "none"
    return textwrap.fill(body, width=116, initial_indent="    ", subsequent_indent="    ", break_on_hyphens=False)


def text(report: Report) -> str:
    """The human report."""
    out = [f"robot {report.robot_name or '?'} ({report.kind} {report.target})"]
    out += [f"  URDF {report.urdf}", f"  SRDF {report.srdf or '(none)'}"]
    out.append(f"  package_paths {list(report.package_paths)}")
    if report.joints:
        counts = {r: sum(j.role == r for j in report.joints) for r in ("actuated", "mimic", "fixed", "unsupported")}
        out.append("joints: " + ", ".join(f"{n} {r}" for r, n in counts.items() if n))
        width = max(len(j.name) for j in report.joints)
        for j in report.joints:
            extra = f" follows {j.mimic}" if j.mimic else f" {j.parent} -> {j.child}" if j.role == "fixed" else ""
            out.append(f"  {j.role:<9} {j.name:<{width}} {j.type:<10} {_limits_text(j)}{extra}".rstrip())
    if report.collision is not None:
        c = report.collision
        excluded = {k: len(v["pairs"]) for k, v in c["excluded"].items()}
        out.append(
            f"collision: {c['geometries']} geometries on {len(c['links_with_geometry'])} links; "
            f"{len(c['link_pairs_checked'])} link pairs checked ({c['geometry_pairs_checked']} geometry pairs); "
            f"excluded {sum(excluded.values())} {excluded}"
        )
        out += ["  checked:", _pairs_text(c["link_pairs_checked"])]
        for reason, item in c["excluded"].items():
            out += [f"  excluded as {reason}: {item['source']}:", _pairs_text(item["pairs"])]
    if report.collision is None and report.urdf is not None:
        out.append("not loaded: the nodes would fail on the blockers below; fix them first")
    if report.meshes or report.load_s is not None:
        out.append(f"collision meshes: {len(report.meshes) or 'none'}; robot loaded in {report.load_s:.2f} s")
        for m in report.meshes:
            how = "hull from the cache" if m["cached"] else "hull computed"
            if m["hull_padding"] > 0.0:
                how += f", bounded: at most {m['hull_padding']:.3g} (mesh units) beyond the exact hull"
            out.append(
                f"  {m['file']} ({', '.join(m['links'])}): {m['vertices']} vertices, hull {m['hull_vertices']}, "
                f"{m['seconds']:.3f} s ({how})"
            )
    for label, profile in (("profile", report.profile), ("starter profile", report.starter)):
        if profile is not None:
            out.append(f"{label} {profile.name} ({profile.source}):")
            out.append(f"  arm {list(profile.arm_joints)}")
            out.append(
                f"  gripper {list(profile.gripper_joints)} open {list(profile.gripper_open)} "
                f"closed {list(profile.gripper_closed)}"
            )
            out.append(f"  tcp {profile.tcp_link}, hand {profile.hand_link or '(none)'}")
            out.append("  home " + ", ".join(f"{j}={v:g}" for j, v in zip(profile.arm_joints, profile.home)))
    out += [f"  guessed {n}" for n in report.starter_notes]
    out += [f"wrote {what}: {path}" for what, path in report.written.items()]
    if report.problems:
        warnings = len(report.problems) - len(report.blockers)
        out.append(f"problems: {len(report.blockers)} blocker(s), {warnings} warning(s)")
        for p in report.problems:
            out.append(f"  {p.severity.upper()} [{p.code}] {p.message}")
            out.append(f"    fix: {p.fix}")
    else:
        out.append("problems: none")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="vla-ros robot check",
        description="Check a URDF or a robot profile the way the nodes load it: joints and limits, collision pairs, "
        "meshes and load time, and every problem with its fix. Exit 0: no blockers; 1: blockers; 2: usage error.",
        epilog="example: vla-ros robot check fr3.urdf --srdf fr3.srdf --package-path fr3=. --write-profile fr3.yaml",
    )
    parser.add_argument("target", metavar="URDF|PROFILE", help="a URDF file, a profile file or a profile name")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the report")
    parser.add_argument("--srdf", help="SRDF whose disabled collision pairs to use (default: the profile's)")
    parser.add_argument(
        "--package-path",
        action="append",
        default=[],
        metavar="[NAME=]FOLDER",
        help="where package:// URIs resolve (NAME=FOLDER maps one package; FOLDER holds packages); repeatable",
    )
    parser.add_argument("--write-profile", metavar="FILE", help="write a starter robot profile (URDF only)")
    parser.add_argument("--write-controller-config", metavar="FILE", help="write controller joints and URDF")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help (0) or a bad argument (2), already printed
        return int(exit_.code or 0)
    try:
        report = check(
            args.target,
            args.srdf,
            args.package_path,
            progress=lambda line: print(line, file=sys.stderr, flush=True),
            write_profile=args.write_profile,
            write_controller_config=args.write_controller_config,
        )
    except UsageError as err:
        print(f"vla-ros robot check: {err}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as err:  # e.g. an output file that cannot be written
        print(f"vla-ros robot check: {err}", file=sys.stderr)
        return 1
    print(json.dumps(report.to_dict()) if args.json else text(report))
    return 1 if report.blockers else 0


if __name__ == "__main__":
    raise SystemExit(main())

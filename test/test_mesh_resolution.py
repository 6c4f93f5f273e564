"""Meshes of real robots: ``package://`` through the ament index (``AMENT_PREFIX_PATH``) as on a ROS install,
``file://``, and errors that say which form failed. The node test gives a real safety_filter_node process a
temporary ament prefix holding a description package and publishes a URDF that names its mesh with
``package://``, as robot_state_publisher does for a real arm."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from ros_helpers import REPO

from vla_ros.safety.robot import RobotModelError, load_robot, load_robot_files, resolve_package_uri

SHARED_FR3 = REPO.parent / "shared" / "robots" / "fr3"


def write_box_stl(path, half=(0.03, 0.03, 0.1)) -> None:
    """An ASCII STL box (12 triangles) centred on its frame."""
    hx, hy, hz = half
    v = np.array([[sx * hx, sy * hy, sz * hz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)])
    faces = [
        (0, 1, 3),
        (0, 3, 2),
        (4, 6, 7),
        (4, 7, 5),
        (0, 4, 5),
        (0, 5, 1),
        (2, 3, 7),
        (2, 7, 6),
        (0, 2, 6),
        (0, 6, 4),
        (1, 5, 7),
        (1, 7, 3),
    ]
    lines = ["solid box"]
    for a, b, c in faces:
        n = np.cross(v[b] - v[a], v[c] - v[a])
        lines += [
            f"facet normal {n[0]:g} {n[1]:g} {n[2]:g}",
            "outer loop",
            *(f"vertex {x:g} {y:g} {z:g}" for x, y, z in v[[a, b, c]]),
            "endloop",
            "endfacet",
        ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines + ["endsolid box"]) + "\n")


def ament_prefix(root, package: str):
    """A minimal install prefix: the ament index marker and share/<package>/meshes/link.stl."""
    (root / "share" / "ament_index" / "resource_index" / "packages").mkdir(parents=True)
    (root / "share" / "ament_index" / "resource_index" / "packages" / package).write_text("")
    write_box_stl(root / "share" / package / "meshes" / "link.stl")
    return root


def urdf_with_mesh(filename: str, name: str = "meshbot") -> str:
    return f"""<?xml version="1.0"?>
<robot name="{name}">
  <link name="base_link"><collision><geometry><box size="0.1 0.1 0.1"/></geometry></collision></link>
  <link name="arm_link">
    <collision><origin xyz="0 0 0.15"/><geometry><mesh filename="{filename}"/></geometry></collision>
  </link>
  <joint name="pan_joint" type="revolute">
    <parent link="base_link"/><child link="arm_link"/><origin xyz="0 0 0.1"/><axis xyz="0 0 1"/>
    <limit lower="-2.0" upper="2.0" velocity="1.0" effort="10"/>
  </joint>
</robot>
"""


@pytest.fixture
def prefix(tmp_path, monkeypatch):
    root = ament_prefix(tmp_path / "install", "meshbot_description")
    monkeypatch.setenv("AMENT_PREFIX_PATH", os.pathsep.join([str(tmp_path / "elsewhere"), str(root)]))
    return root


def test_package_uri_resolves_through_the_ament_index(prefix, tmp_path):
    mesh = prefix / "share" / "meshbot_description" / "meshes" / "link.stl"
    assert resolve_package_uri("package://meshbot_description/meshes/link.stl", [], None) == mesh.resolve()
    # An explicit package_paths entry wins over the index.
    other = tmp_path / "override" / "meshes" / "link.stl"
    write_box_stl(other)
    assert (
        resolve_package_uri(
            "package://meshbot_description/meshes/link.stl", [f"meshbot_description={other.parent.parent}"], None
        )
        == other.resolve()
    )
    robot = load_robot(urdf_with_mesh("package://meshbot_description/meshes/link.stl"))
    assert (
        robot.name == "meshbot"
        and list(robot.joint_names) == ["pan_joint"]
        and sorted(robot.geom_links) == ["arm_link", "base_link"]
    )


def test_each_form_says_what_failed(prefix, tmp_path):
    with pytest.raises(
        RobotModelError,
        match=r"cannot resolve package://no_such_description/meshes/link.stl \(a package:// "
        r"mesh\).*/opt/nowhere.*not in the ament index",
    ):
        resolve_package_uri("package://no_such_description/meshes/link.stl", ["/opt/nowhere"], None)
    with pytest.raises(RobotModelError, match=r"ament index has meshbot_description at .* without meshes/missing.stl"):
        resolve_package_uri("package://meshbot_description/meshes/missing.stl", [], None)
    with pytest.raises(
        RobotModelError, match=r"file:// mesh 'file:///no/such.stl' not found \(looked at /no/such.stl\)"
    ):
        resolve_package_uri("file:///no/such.stl", [], None)
    with pytest.raises(RobotModelError, match=r"relative mesh path 'meshes/link.stl' in a URDF given as a string"):
        resolve_package_uri("meshes/link.stl", [], None)
    mesh = prefix / "share" / "meshbot_description" / "meshes" / "link.stl"
    assert resolve_package_uri(f"file://{mesh}", [], None) == mesh.resolve()
    assert (
        resolve_package_uri("file://meshes/link.stl", [], mesh.parent.parent) == mesh.resolve()
    )  # relative to the URDF
    spaced = tmp_path / "with space" / "link.stl"
    write_box_stl(spaced)
    assert resolve_package_uri(f"file://{str(spaced).replace(' ', '%20')}", [], None) == spaced.resolve()


@pytest.mark.skipif(not (SHARED_FR3 / "fr3.urdf").is_file(), reason="the FR3 description is not next to this checkout")
def test_a_real_arms_urdf_string_finds_its_meshes_through_the_index(tmp_path, monkeypatch):
    """fr3.urdf as robot_state_publisher would publish it (package://fr3/meshes/...), with fr3 installed in a prefix."""
    index = tmp_path / "install" / "share" / "ament_index" / "resource_index" / "packages"
    index.mkdir(parents=True)
    (index / "fr3").write_text("")
    (tmp_path / "install" / "share" / "fr3").symlink_to(SHARED_FR3)
    monkeypatch.setenv("AMENT_PREFIX_PATH", str(tmp_path / "install"))
    robot = load_robot((SHARED_FR3 / "fr3.urdf").read_text(), (SHARED_FR3 / "fr3.srdf").read_text())
    # the same robot as loaded from the files with the package's folder given outright: same joints, same
    # meshes (their vertex counts), the same self-collision pairs left after the SRDF's exclusions
    direct = load_robot_files(SHARED_FR3 / "fr3.urdf", SHARED_FR3 / "fr3.srdf", [str(SHARED_FR3.parent)])
    assert (
        robot.joint_names == direct.joint_names and len(robot.joint_names) == 8
    )  # 7 arm joints and a finger (its twin mimics it)
    assert robot.self_pairs == direct.self_pairs and len(robot.self_pairs) > 0

    def vertices(r):
        return [
            g.geometry.num_points if hasattr(g.geometry, "num_points") else -1 for g in r.geom_model.geometryObjects
        ]

    assert vertices(robot) == vertices(direct)


def test_the_filter_node_loads_a_package_uri_description_from_the_ament_index(tmp_path):
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from std_msgs.msg import String

    root = ament_prefix(tmp_path / "install", "meshbot_description")
    env = dict(os.environ, AMENT_PREFIX_PATH=str(root))
    log = tmp_path / "filter.log"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vla_ros.nodes.safety_filter_node",
            "--ros-args",
            "-r",
            "__node:=mesh_filter",
            "-r",
            "/robot_description:=/mesh_test/robot_description",
            "-r",
            "/joint_states:=/mesh_test/joint_states",
            "-r",
            "/vla/action_chunk:=/mesh_test/action_chunk",
            "-p",
            "diagnostics_period_s:=0.2",
        ],
        stdout=open(log, "w"),
        stderr=subprocess.STDOUT,
        cwd=REPO,
        env=env,
        start_new_session=True,
    )
    context = rclpy.Context()
    rclpy.init(context=context)
    node = Node("mesh_test_probe", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    statuses = []
    node.create_subscription(
        DiagnosticArray,
        "/diagnostics",
        lambda m: statuses.extend(
            (s.message, {kv.key: kv.value for kv in s.values}) for s in m.status if s.name == "mesh_filter: filter"
        ),
        50,
    )
    latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL, reliability=ReliabilityPolicy.RELIABLE)
    node.create_publisher(String, "/mesh_test/robot_description", latched).publish(
        String(data=urdf_with_mesh("package://meshbot_description/meshes/link.stl"))
    )
    try:
        end = time.monotonic() + 60
        while time.monotonic() < end and not (statuses and statuses[-1][1].get("robot") == "meshbot"):
            executor.spin_once(timeout_sec=0.05)
        assert statuses and statuses[-1][1].get("robot") == "meshbot", (statuses[-1:], log.read_text()[-2000:])
        assert "no joint state" in statuses[-1][0]  # the model is in; only the joint state is missing
        assert "cannot use /robot_description" not in log.read_text()
        mesh = (root / "share" / "meshbot_description" / "meshes" / "link.stl").resolve()
        assert f"collision mesh {mesh}" in log.read_text()  # the node logs a line before each mesh
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown(context=context)

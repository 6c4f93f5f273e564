"""The package's launch files resolve to the intended graph (what each preset starts, with which
parameters and remappings), checked with the launch runner's --print, without starting anything."""

import re
import subprocess
import sys

import pytest
import yaml
from ros_helpers import REPO

pytestmark = pytest.mark.unit  # no ROS node, no DDS, no wall-clock timing: `make test` runs it beside others

RUNNER = [sys.executable, "-m", "vla_ros.launch_runner", "--print"]


def resolve(launch_file: str, *args: str) -> dict[str, dict]:
    """{executable: {"params": merged params from its files, "remaps": {...}}} from --print."""
    proc = subprocess.run(
        [*RUNNER, str(REPO / "launch" / launch_file), *args], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    nodes = {}
    for line in proc.stdout.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        parts = line.split()
        exe = parts[0].rsplit("/", 1)[-1]
        params, remaps = {}, {}
        for i, tok in enumerate(parts):
            if tok == "--params-file":
                for block in (yaml.safe_load(open(parts[i + 1])) or {}).values():
                    params.update(block.get("ros__parameters", {}))
            if tok == "-r" and ":=" in parts[i + 1] and not parts[i + 1].startswith("__node"):
                src, dst = parts[i + 1].split(":=")
                remaps[src] = dst
        nodes[exe] = {"params": params, "remaps": remaps}
    return nodes


def test_sim_launch_runs_the_learned_pipeline_on_sim_time_by_default():
    nodes = resolve("sim.launch.xml", "instruction:=pick up the red cup")
    assert set(nodes) == {"sim_node", "policy_node", "safety_filter_node", "controller_node"}
    for exe in ("policy_node", "safety_filter_node", "controller_node"):
        assert nodes[exe]["params"]["use_sim_time"] is True
    assert nodes["policy_node"]["params"]["instruction"] == "pick up the red cup"
    assert nodes["controller_node"]["params"]["output_interface"] == "forward_position"
    assert nodes["controller_node"]["params"]["controller_check"] == "disabled"  # the sim is no ros2_control controller
    assert set(resolve("sim.launch.xml", "policy:=scripted")) == {"sim_node", "scripted_motion_node"}
    assert set(resolve("sim.launch.xml", "policy:=none")) == {"sim_node"}


def test_sim_launch_passes_the_robot_profile_to_the_sim_and_the_pipeline_it_includes():
    for args, profile in (((), ""), (("robot_profile:=fr3",), "fr3")):  # "": the bundled arm
        assert resolve("sim.launch.xml", "policy:=none", *args)["sim_node"]["params"]["robot_profile"] == profile
        nodes = resolve("sim.launch.xml", *args)  # policy:=vla: robot.launch.xml's three nodes on the same robot
        assert {exe: n["params"]["robot_profile"] for exe, n in nodes.items()} == {
            exe: profile for exe in ("sim_node", "policy_node", "safety_filter_node", "controller_node")
        }


def test_robot_launch_remaps_topics_and_selects_the_output_interface():
    nodes = resolve(
        "robot.launch.xml",
        "camera_topic:=/wrist/image",
        "joint_states_topic:=/arm/joint_states",
        "controller_interface:=joint_trajectory",
        "trajectory_controller:=arm_controller",
        "image_transport:=compressed",
        "controller_realtime_priority:=50",
    )
    assert set(nodes) == {"policy_node", "safety_filter_node", "controller_node"}
    assert nodes["policy_node"]["params"]["image_topic"] == "/wrist/image"
    assert nodes["policy_node"]["params"]["image_transport"] == "compressed"
    for exe in nodes:
        assert nodes[exe]["remaps"]["/joint_states"] == "/arm/joint_states"
        assert nodes[exe]["params"]["use_sim_time"] is False
    c = nodes["controller_node"]["params"]
    assert c["output_interface"] == "joint_trajectory" and c["trajectory_controller"] == "arm_controller"
    assert c["realtime_priority"] == 50  # typed like launch_ros: an int, as the node's descriptor wants


def test_isaac_preset_sends_joint_commands_to_isaac():
    nodes = resolve("isaac_sim.launch.xml", "robot_description_file:=/robots/arm.urdf")
    c = nodes["controller_node"]["params"]
    assert c["output_interface"] == "isaac" and c["isaac_topic"] == "/joint_command" and c["use_sim_time"] is True
    assert nodes["policy_node"]["params"]["image_topic"] == "/rgb"
    assert nodes["safety_filter_node"]["params"]["robot_description_file"] == "/robots/arm.urdf"


def test_gazebo_preset_needs_ros_gz_bridge_and_its_config_is_well_formed():
    proc = subprocess.run(
        [*RUNNER, str(REPO / "launch" / "gazebo.launch.xml")], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert proc.returncode != 0 and re.search(r"parameter_bridge.*ros_gz_bridge.*not found", proc.stdout + proc.stderr)
    bridges = yaml.safe_load((REPO / "config" / "gz_bridge.yaml").read_text())
    keys = {"ros_topic_name", "gz_topic_name", "ros_type_name", "gz_type_name", "direction"}
    assert all(set(b) == keys and b["direction"] == "GZ_TO_ROS" for b in bridges)
    assert {b["ros_topic_name"] for b in bridges} == {"/clock", "/camera/image_raw", "/camera/camera_info"}


def test_sensor_qos_reaches_every_joint_state_subscriber_and_the_controller_check_is_passed_on():
    nodes = resolve("robot.launch.xml", "sensor_qos:=best_effort", "controller_check:=require")
    assert {exe: n["params"]["sensor_qos"] for exe, n in nodes.items()} == dict.fromkeys(nodes, "best_effort")
    assert nodes["controller_node"]["params"]["controller_check"] == "require"
    isaac = resolve("isaac_sim.launch.xml", "sensor_qos:=best_effort")
    assert all(n["params"]["sensor_qos"] == "best_effort" for n in isaac.values())
    assert all(n["params"]["sensor_qos"] == "reliable" for n in resolve("robot.launch.xml").values())


def test_the_filter_the_controller_and_the_policy_read_one_joint_limits_file(tmp_path):
    """robot.launch.xml gives the filter and the controller the same limits file (after their own, so that the
    launch file's named parameters, a later /** section, still win over the node's own section: rcl applies
    sections in the order their keys first appear), and points the policy's chunk shaping at it;
    limits_config swaps it."""
    limits = tmp_path / "limits.yaml"
    limits.write_text((REPO / "config" / "limits.yaml").read_text())
    for args, expected in (((), REPO / "config" / "limits.yaml"), ((f"limits_config:={limits}",), limits)):
        proc = subprocess.run(
            [*RUNNER, str(REPO / "launch" / "robot.launch.xml"), *args],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        files = {}
        for line in proc.stdout.splitlines():
            if line.startswith("/"):
                parts = line.split()
                files[parts[0].rsplit("/", 1)[-1]] = [parts[i + 1] for i, t in enumerate(parts) if t == "--params-file"]
        for exe, own in (("safety_filter_node", "safety_filter.yaml"), ("controller_node", "controller.yaml")):
            paths = [p.rsplit("/", 1)[-1] for p in files[exe]]
            assert files[exe][paths.index("limits.yaml")] == str(expected), files[exe]
            assert paths.index(own) < paths.index("limits.yaml")
        assert resolve("robot.launch.xml", *args)["policy_node"]["params"]["limits_file"] == str(expected)

"""``vla-ros robot check``: real description files, loaded as the nodes load them; every problem has a fix."""

import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from ros_helpers import REPO

from vla_ros.bench.mesh_bench import cube_sphere, write_binary_stl
from vla_ros.chunks import ARM_JOINTS
from vla_ros.robot_profile import bundled_profile_path, check_against_urdf, load_profile
from vla_ros.tools.robot_check import EXCLUSION_SOURCES, main, starter_profile

pytestmark = pytest.mark.unit  # no ROS node, no DDS, no wall-clock timing: `make test` runs it beside others

SHARED_FR3 = REPO.parent / "shared" / "robots" / "fr3"
VLA_ARM_ARM = ARM_JOINTS


def run_json(capsys, *args: str) -> tuple[int, dict, str]:
    """(exit status, the --json object, stderr) of the tool's main."""
    status = main([*map(str, args), "--json"])
    out, err = capsys.readouterr()
    return status, json.loads(out.strip().splitlines()[-1]), err


def codes(report: dict, severity: str = "blocker") -> list[str]:
    return [p["code"] for p in report["problems"] if p["severity"] == severity]


def small_arm(collision: str = "<box size='0.05 0.05 0.1'/>", limit: str = "lower='-1' upper='1' velocity='1'") -> str:
    """Two revolute joints (the second with ``limit``), a fixed flange, and a prismatic jaw without a TCP name."""
    return f"""<robot name="small">
  <link name="base"><collision><geometry><box size="0.1 0.1 0.1"/></geometry></collision></link>
  <joint name="j1" type="revolute"><parent link="base"/><child link="l1"/><origin xyz="0 0 0.1"/>
    <axis xyz="0 0 1"/><limit lower="-2" upper="2" velocity="1" effort="1"/></joint>
  <link name="l1"><collision><origin xyz="0 0 0.15"/><geometry>{collision}</geometry></collision></link>
  <joint name="j2" type="revolute"><parent link="l1"/><child link="l2"/><origin xyz="0 0 0.4"/>
    <axis xyz="0 1 0"/><limit {limit} effort="1"/></joint>
  <link name="l2"><collision><origin xyz="0 0 0.15"/><geometry><box size="0.05 0.05 0.1"/></geometry></collision></link>
  <joint name="flange_joint" type="fixed"><parent link="l2"/><child link="flange"/><origin xyz="0 0 0.3"/></joint>
  <link name="flange"/>
  <joint name="jaw_joint" type="prismatic"><parent link="l2"/><child link="left_jaw"/><origin xyz="0 0 0.3"/>
    <axis xyz="0 1 0"/><limit lower="-0.03" upper="0.01" velocity="0.1" effort="1"/></joint>
  <link name="left_jaw"><visual><geometry><box size="0.01 0.01 0.04"/></geometry></visual></link>
</robot>
"""


def test_the_bundled_profile_passes_through_the_cli_with_its_joints_and_exclusion_sources():
    result = subprocess.run(
        [sys.executable, "-m", "vla_ros.cli", "robot", "check", str(bundled_profile_path()), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["ok"] and report["problems"] == [] and report["kind"] == "profile"
    roles = {j["name"]: j["role"] for j in report["joints"]}
    assert [n for n, r in roles.items() if r == "actuated"] == [*VLA_ARM_ARM, "left_finger_joint"]
    assert roles["right_finger_joint"] == "mimic" and roles["tcp_joint"] == "fixed"
    finger = next(j for j in report["joints"] if j["name"] == "left_finger_joint")
    assert (finger["lower"], finger["upper"], finger["velocity"], finger["unit"]) == (0.0, 0.04, 0.1, "m")
    assert report["profile"]["commanded_joints"] == [*VLA_ARM_ARM, "left_finger_joint"]
    excluded = report["collision"]["excluded"]
    assert {"adjacent", "contact_at_reference"} <= set(excluded)  # no SRDF: MoveIt's Adjacent and Default rules
    assert excluded["contact_at_reference"]["pairs"] == [["left_finger_link", "right_finger_link"]]
    assert ["base_link", "shoulder_link"] in excluded["adjacent"]["pairs"]
    assert all(item["source"] == EXCLUSION_SOURCES[reason] for reason, item in excluded.items())
    assert report["collision"]["geometry_pairs_checked"] == 27 and report["meshes"] == []
    assert "Traceback" not in result.stderr


def test_the_bundled_urdf_gives_a_starter_profile_that_loads_back(tmp_path, capsys):
    urdf = bundled_profile_path().parent / "vla_arm.urdf"
    out, controller = tmp_path / "arm.yaml", tmp_path / "controller.yaml"
    status, report, _ = run_json(capsys, urdf, "--write-profile", out, "--write-controller-config", controller)
    assert status == 0, report["problems"]
    profile = load_profile(out)
    assert profile.arm_joints == VLA_ARM_ARM
    assert profile.gripper_joints == ("left_finger_joint",)
    assert (profile.gripper_open, profile.gripper_closed) == ((0.04,), (0.0,))
    assert (profile.tcp_link, profile.hand_link) == ("tcp_link", "hand_link")
    assert profile.home == (0.0,) * 6  # no SRDF, and 0 is inside every limit
    assert check_against_urdf(profile) == []
    params = yaml.safe_load(controller.read_text())["/**/controller"]["ros__parameters"]
    assert params == {"joints": [*VLA_ARM_ARM, "left_finger_joint"], "robot_description_file": str(urdf)}
    assert report["written"] == {"profile": str(out), "controller_config": str(controller)}


def test_an_unresolved_package_names_the_package_path_that_fixes_it_and_then_loads(tmp_path, capsys):
    package = tmp_path / "my_robot_description"
    (package / "meshes").mkdir(parents=True)
    vertices, triangles = cube_sphere(12, radius_m=0.04)
    write_binary_stl(package / "meshes" / "link.stl", vertices, triangles)
    urdf = tmp_path / "robot.urdf"
    urdf.write_text(small_arm(collision="<mesh filename='package://my_robot_description/meshes/link.stl'/>"))
    status, report, _ = run_json(capsys, urdf)
    assert status == 1 and codes(report) == ["unresolved_package"]
    assert f"--package-path my_robot_description={package}" in report["problems"][0]["fix"]
    assert report["collision"] is None  # not loaded: the filter would stop at the first error

    status, report, progress = run_json(capsys, urdf, "--package-path", f"my_robot_description={package}")
    assert status == 0, report["problems"]
    [mesh] = report["meshes"]
    assert mesh["links"] == ["l1"] and mesh["vertices"] == len(vertices) == 6 * 12**2 - 12 * 12 + 8
    assert mesh["hull_vertices"] == len(vertices)  # every vertex of a sphere is on its hull
    assert mesh["seconds"] > 0 and report["load_s"] >= mesh["seconds"]
    assert "link.stl" in progress  # load_robot's per-mesh lines, on stderr


def test_a_missing_mesh_file_is_a_blocker_with_where_it_looked(tmp_path, capsys):
    package = tmp_path / "desc"
    package.mkdir()
    urdf = tmp_path / "robot.urdf"
    text = small_arm(collision="<mesh filename='meshes/gone.stl'/>")
    urdf.write_text(text.replace('<box size="0.1 0.1 0.1"/>', "<mesh filename='package://desc/meshes/base.stl'/>"))
    status, report, _ = run_json(capsys, urdf, "--package-path", f"desc={package}")
    assert status == 1 and codes(report) == ["missing_mesh", "missing_mesh"]
    messages = " ".join(p["message"] for p in report["problems"])
    assert str(tmp_path / "meshes" / "gone.stl") in messages and f"desc is at {package}" in messages


@pytest.mark.parametrize(
    ("limit", "code", "words"),
    [
        ("lower='0.5' upper='0.5' velocity='1'", "bad_position_limits", "zero-width"),
        ("velocity='1'", "bad_position_limits", "lower and upper unset"),
        ("lower='1' upper='-1' velocity='1'", "bad_position_limits", "inverted"),
        ("lower='-1' upper='1'", "missing_velocity_limit", "no positive velocity limit"),
    ],
)
def test_a_joint_without_usable_limits_is_a_blocker_naming_the_joint(tmp_path, capsys, limit, code, words):
    urdf = tmp_path / "robot.urdf"
    urdf.write_text(small_arm(limit=limit))
    status, report, _ = run_json(capsys, urdf)
    assert status == 1 and codes(report) == [code]
    problem = report["problems"][0]
    assert problem["message"].startswith("joint j2") and words in problem["message"] and "j2" in problem["fix"]


def test_a_joint_without_a_limit_element_is_a_blocker(tmp_path, capsys):
    urdf = tmp_path / "robot.urdf"
    urdf.write_text(small_arm().replace("<limit lower='-1' upper='1' velocity='1' effort=\"1\"/>", ""))
    assert "<limit lower='-1'" not in urdf.read_text()
    status, report, _ = run_json(capsys, urdf)
    assert status == 1 and codes(report) == ["missing_limits"] and "<limit lower=" in report["problems"][0]["fix"]


def test_the_starter_guesses_the_chain_end_as_tcp_and_mid_limits_home_and_warns_of_a_bare_jaw(tmp_path, capsys):
    urdf = tmp_path / "robot.urdf"
    urdf.write_text(small_arm(limit="lower='0.2' upper='1.0' velocity='1'"))
    status, report, _ = run_json(capsys, urdf, "--write-profile", tmp_path / "small.yaml")
    assert status == 0 and codes(report, "warning") == ["gripper_without_collision"]
    assert "left_jaw" in report["problems"][0]["message"]
    profile = load_profile(tmp_path / "small.yaml")
    assert profile.arm_joints == ("j1", "j2") and profile.gripper_joints == ("jaw_joint",)
    assert (profile.gripper_open, profile.gripper_closed) == ((-0.03,), (0.01,))  # open: the limit farther from 0
    assert (profile.tcp_link, profile.hand_link) == ("flange", "l2")
    assert profile.home == (0.0, 0.6)  # 0 is outside j2's [0.2, 1.0]: its middle
    assert profile.urdf == urdf and check_against_urdf(profile) == []


limit_value = st.floats(-3.0, 3.0, allow_nan=False).map(lambda x: round(x, 3))


@settings(max_examples=60, deadline=None)
@given(lo=limit_value, width=st.floats(0.01, 3.0), jaw_lo=limit_value, jaw_width=st.floats(0.001, 0.1))
def test_every_starter_profile_home_and_gripper_lie_in_the_limits_and_it_loads_back(
    tmp_path_factory, lo, width, jaw_lo, jaw_width
):
    folder = tmp_path_factory.mktemp("starter")
    urdf = folder / "robot.urdf"
    hi = round(lo + width, 3) + 0.001
    text = small_arm(limit=f"lower='{lo}' upper='{hi}' velocity='1'")
    urdf.write_text(text.replace('lower="-0.03" upper="0.01"', f"lower='{jaw_lo}' upper='{jaw_lo + jaw_width}'"))
    profile, _notes = starter_profile(urdf, None, (), folder / "p.yaml")
    (folder / "p.yaml").write_text(profile.to_yaml())
    again = load_profile(folder / "p.yaml")
    assert check_against_urdf(again) == [] and again.home == profile.home
    assert again.home[1] == (0.0 if lo <= 0.0 <= hi else (lo + hi) / 2)  # 0 where inside, else mid-limits
    jaw = (jaw_lo, jaw_lo + jaw_width)
    assert {again.gripper_open[0], again.gripper_closed[0]} == set(jaw)
    assert abs(again.gripper_open[0]) >= abs(again.gripper_closed[0])  # open: the limit farther from 0


def test_a_profile_naming_joints_the_urdf_lacks_is_a_blocker(tmp_path, capsys):
    data = yaml.safe_load(bundled_profile_path().read_text())
    data["urdf"] = str(bundled_profile_path().parent / "vla_arm.urdf")
    data["arm_joints"] = [*VLA_ARM_ARM[:-1], "wrist_yaw_joint"]
    data["home"] = {j: 0.0 for j in data["arm_joints"]}
    data.pop("sim_position_kp")  # the sim's gains name the joints too
    (tmp_path / "wrong.yaml").write_text(yaml.safe_dump(data))
    status, report, _ = run_json(capsys, tmp_path / "wrong.yaml")
    assert status == 1 and codes(report) == ["profile_mismatch"]
    assert "'wrist_yaw_joint' is not in" in report["problems"][0]["message"]


def test_a_profile_that_does_not_load_is_a_blocker_with_its_reason(tmp_path, capsys):
    (tmp_path / "bad.yaml").write_text("name: bad\nurdf: x.urdf\narm_joints: [a]\n")
    status, report, _ = run_json(capsys, tmp_path / "bad.yaml")
    assert status == 1 and codes(report) == ["profile_invalid"]
    assert "gripper is missing" in report["problems"][0]["message"]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["no_such_robot.urdf"], "no such file"),
        (["no_such_robot"], "no robot profile named"),
        ([str(bundled_profile_path()), "--write-profile", "x.yaml"], "needs a URDF"),
        ([str(bundled_profile_path()), "--srdf", "no_such.srdf"], "no such file"),
        ([str(bundled_profile_path()), "--package-path", "x=/no/such/folder"], "is not a folder"),
        ([str(bundled_profile_path()), "--no-such-flag"], "unrecognized arguments"),
    ],
)
def test_usage_errors_exit_2_with_a_message_and_no_traceback(capsys, args, words):
    assert main(args) == 2
    out, err = capsys.readouterr()
    assert words in err and "Traceback" not in out + err and out == ""


def test_text_report_lists_the_problem_and_its_fix(tmp_path, capsys):
    urdf = tmp_path / "robot.urdf"
    urdf.write_text(small_arm(limit="lower='0.5' upper='0.5' velocity='1'"))
    assert main([str(urdf)]) == 1
    out = capsys.readouterr().out
    assert "BLOCKER [bad_position_limits] joint j2" in out and "fix: set lower < upper" in out


@pytest.mark.skipif(not (SHARED_FR3 / "fr3.urdf").is_file(), reason=f"the FR3 description is not at {SHARED_FR3}")
def test_the_fr3_starter_profile_takes_the_srdf_ready_pose_and_loads_back(tmp_path, capsys):
    out, controller = tmp_path / "fr3.yaml", tmp_path / "controller.yaml"
    status, report, progress = run_json(
        capsys,
        SHARED_FR3 / "fr3.urdf",
        "--srdf",
        SHARED_FR3 / "fr3.srdf",
        "--package-path",
        f"fr3={SHARED_FR3}",
        "--write-profile",
        out,
        "--write-controller-config",
        controller,
    )
    assert status == 0, report["problems"]
    profile = load_profile(out)
    assert profile.arm_joints == tuple(f"fr3_joint{i}" for i in range(1, 8))
    assert profile.gripper_joints == ("fr3_finger_joint1",)
    assert (profile.gripper_open, profile.gripper_closed) == ((0.04,), (0.0,))
    assert (profile.tcp_link, profile.hand_link) == ("fr3_hand_tcp", "fr3_hand")
    ready = ET.parse(SHARED_FR3 / "fr3.srdf").getroot().find("group_state[@name='ready']")
    assert profile.home == tuple(float(j.get("value")) for j in ready.findall("joint"))
    assert check_against_urdf(profile) == []
    assert set(report["collision"]["excluded"]) == {"srdf", "rigid"}
    assert len(report["collision"]["excluded"]["srdf"]["pairs"]) == 34
    assert len(report["meshes"]) == 9 and all(m["vertices"] >= m["hull_vertices"] > 3 for m in report["meshes"])
    assert yaml.safe_load(controller.read_text())["/**/controller"]["ros__parameters"]["joints"] == list(
        profile.commanded_joints
    )
    # the profile written checks clean too, by path
    status, again, _ = run_json(capsys, out)
    assert status == 0 and again["profile"]["home"] == dict(zip(profile.arm_joints, profile.home))

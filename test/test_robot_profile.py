"""Robot profiles: the bundled arm's and the FR3's load and agree with their URDFs, every mistake a user can make in
one is named with the field, and the nodes' parameters take their robot files and joints from a profile."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vla_ros.chunks import COMMANDED_JOINTS
from vla_ros.params.controller import PARAMS as CONTROLLER_PARAMS
from vla_ros.params.controller import config_from_params
from vla_ros.params.robot import robot_files
from vla_ros.robot_profile import (
    CameraMount,
    ProfileError,
    bundled_profile_path,
    check_against_urdf,
    load_profile,
    profile_from_dict,
)
from vla_ros.sim import HOME_Q

pytestmark = pytest.mark.unit  # no ROS node, no DDS, no wall-clock timing: `make test` runs it beside others

REPO = Path(__file__).resolve().parents[1]
FR3_DIR = REPO.parent / "shared" / "robots" / "fr3"
needs_fr3 = pytest.mark.skipif(not (FR3_DIR / "fr3.urdf").is_file(), reason=f"no FR3 description at {FR3_DIR}")


@pytest.fixture
def fr3_env(monkeypatch):
    monkeypatch.setenv("VLA_ROS_FR3_DIR", str(FR3_DIR))


def bundled_dict() -> dict:
    return yaml.safe_load(bundled_profile_path().read_text())


def test_the_bundled_profile_is_the_default_and_agrees_with_the_code_and_its_urdf():
    profile = load_profile()
    assert profile.name == "vla_arm" and profile.commanded_joints == COMMANDED_JOINTS
    assert profile.home_q == tuple(HOME_Q)
    assert profile.urdf.name == "vla_arm.urdf" and profile.urdf.is_file()
    assert [c.name for c in profile.cameras] == ["scene_camera", "wrist_camera"]
    assert check_against_urdf(profile) == []
    assert load_profile("vla_arm") == profile == load_profile(str(bundled_profile_path()))


@needs_fr3
def test_the_fr3_profile_loads_from_the_shared_description(fr3_env):
    profile = load_profile("fr3")
    assert profile.arm_joints == tuple(f"fr3_joint{i}" for i in range(1, 8))
    assert profile.gripper_joints == ("fr3_finger_joint1",)
    assert profile.urdf == FR3_DIR / "fr3.urdf" and profile.srdf == FR3_DIR / "fr3.srdf"
    assert profile.package_paths == (f"fr3={FR3_DIR}",)
    assert check_against_urdf(profile) == []


def test_an_unset_variable_and_an_unknown_name_say_what_to_do(monkeypatch, tmp_path):
    monkeypatch.delenv("VLA_ROS_FR3_DIR", raising=False)
    with pytest.raises(ProfileError, match="needs the environment variable VLA_ROS_FR3_DIR"):
        load_profile("fr3")
    monkeypatch.setenv("VLA_ROS_ROBOT_PATH", str(tmp_path))
    with pytest.raises(ProfileError, match=r"no robot profile named 'ur5'.*vla-ros robot check URDF --write-profile"):
        load_profile("ur5")
    (tmp_path / "ur5.yaml").write_text(bundled_profile_path().read_text().replace("urdf: vla_arm.urdf", "urdf: x.urdf"))
    assert load_profile("ur5").urdf == tmp_path / "x.urdf"  # found on the search path, relative to its file
    with pytest.raises(ProfileError, match="does not exist"):
        load_profile(tmp_path / "missing.yaml")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.update(colour="red"), r"unknown field\(s\) \['colour'\]"),
        (lambda d: d.pop("tcp_link"), "tcp_link is missing"),
        (lambda d: d["home"].pop("elbow_joint"), r"missing \['elbow_joint'\]"),
        (lambda d: d["home"].update(extra_joint=0.0), r"extra \['extra_joint'\]"),
        (lambda d: d.update(home=[0.0, 1.0]), "home must be 6 finite numbers"),
        (lambda d: d["gripper"].update(closed=[0.04]), "open and gripper.closed are the same"),
        (lambda d: d["gripper"].update(open=[0.04, 0.0]), "gripper.open must be 1 finite numbers"),
        (lambda d: d["gripper"].update(joints=["elbow_joint"]), r"\['elbow_joint'\] are both arm and gripper joints"),
        (lambda d: d.update(arm_joints=["a", "a"]), "arm_joints repeats a name"),
        (lambda d: d["cameras"][0].update(fovy_deg=170), r"fovy_deg must be in \[10, 120\]"),
        (lambda d: d["cameras"][0].update(zoom=2), r"unknown field\(s\) \['zoom'\]"),
        (lambda d: d["cameras"].append(dict(d["cameras"][0])), "camera names repeat"),
        (lambda d: d.update(table_height_m=float("nan")), "table_height_m must be 1 finite numbers"),
    ],
)
def test_every_mistake_in_a_profile_is_named(edit, message):
    data = bundled_dict()
    edit(data)
    with pytest.raises(ProfileError, match=message):
        profile_from_dict(data, bundled_profile_path())


def test_a_profile_that_disagrees_with_its_urdf_is_reported():
    profile = load_profile()
    wrong = dataclasses.replace(
        profile,
        arm_joints=("shoulder_pan_joint", "no_such_joint"),
        gripper_joints=("right_finger_joint",),  # a mimic: it follows the left finger
        home=(0.0, 0.0),
        tcp_link="no_such_link",
        cameras=(CameraMount(name="c", mount="nowhere"),),
    )
    problems = check_against_urdf(wrong)
    assert any("'no_such_joint' is not in" in p for p in problems), problems
    assert any("'right_finger_joint' mimics left_finger_joint" in p for p in problems), problems
    assert any("tcp_link 'no_such_link'" in p for p in problems), problems
    assert any("mount 'nowhere'" in p for p in problems), problems
    far = dataclasses.replace(profile, home=(0.0, 0.25, 9.0, 0.0, 1.07, 0.0))
    assert [p for p in check_against_urdf(far) if "home of elbow_joint is 9" in p], check_against_urdf(far)


finite = st.floats(-3.0, 3.0, allow_nan=False)
triples = st.tuples(finite, finite, finite)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    home=st.lists(finite, min_size=6, max_size=6),
    closed=st.floats(0.0, 0.039),
    table=finite,
    cams=st.lists(st.tuples(triples, triples, st.floats(10.0, 120.0)), min_size=0, max_size=3),
)
def test_a_profile_written_as_yaml_reads_back_the_same(tmp_path, home, closed, table, cams):
    profile = dataclasses.replace(
        load_profile(),
        home=tuple(home),
        gripper_closed=(closed,),
        table_height_m=table,
        cameras=tuple(CameraMount(f"cam{i}", "world", p, t, f) for i, (p, t, f) in enumerate(cams)),
    )
    path = tmp_path / "copy.yaml"
    written = dataclasses.replace(profile, source=path)
    path.write_text(written.to_yaml())
    # paths are written relative to the new file, so the copy points at the same URDF
    assert load_profile(path) == written


def test_node_parameters_take_the_profile_where_their_own_are_empty(tmp_path):
    base = {"robot_profile": "", "robot_description_file": "", "srdf_file": "", "package_paths": [""]}
    assert robot_files(base).urdf == "" and robot_files(base).joints == ()
    bundled = robot_files({**base, "robot_profile": "vla_arm"})
    assert bundled.urdf == str(load_profile().urdf) and bundled.joints == COMMANDED_JOINTS
    own = robot_files({**base, "robot_profile": "vla_arm", "robot_description_file": "/x.urdf", "srdf_file": "/x.srdf"})
    assert (own.urdf, own.srdf) == ("/x.urdf", "/x.srdf")  # explicit parameters win
    with pytest.raises(ValueError, match=r"robot_profile: no robot profile named 'nope'"):
        robot_files({**base, "robot_profile": "nope"})


def controller_params(**values) -> dict:
    return {**{s.name: s.default for s in CONTROLLER_PARAMS}, **values}


def test_the_controller_takes_its_joints_from_the_profile_else_from_the_urdf(tmp_path):
    assert config_from_params(controller_params()).joint_names == COMMANDED_JOINTS  # the bundled URDF's own
    assert config_from_params(controller_params(robot_profile="vla_arm")).joint_names == COMMANDED_JOINTS
    two = config_from_params(controller_params(joints=["elbow_joint", "shoulder_pan_joint"]))
    assert two.joint_names == ("elbow_joint", "shoulder_pan_joint")  # named joints win, in their order


@needs_fr3
def test_the_controller_runs_the_fr3_from_its_profile_or_its_urdf_alone(fr3_env):
    from_profile = config_from_params(controller_params(robot_profile="fr3"))
    assert from_profile.joint_names == load_profile("fr3").commanded_joints
    assert from_profile.position_upper[-1] == pytest.approx(0.04)  # the finger's limit, from the FR3 URDF
    from_urdf = config_from_params(controller_params(robot_description_file=str(FR3_DIR / "fr3.urdf")))
    assert from_urdf.joint_names == from_profile.joint_names  # the finger's mimic is left out


def test_the_safety_filter_takes_its_joints_from_the_profile_as_the_controller_does(tmp_path):
    from vla_ros.params import safety_filter

    # A profile commanding five of the bundled arm's six revolute joints (the wrist roll stays where it is).
    path = tmp_path / "five.yaml"
    five = dataclasses.replace(
        load_profile(), arm_joints=COMMANDED_JOINTS[:5], home=(0.0, 0.25, 1.82, 0.0, 1.07), source=path
    )
    path.write_text(five.to_yaml())
    assert check_against_urdf(load_profile(path)) == []
    filter_params = {**{s.name: s.default for s in safety_filter.PARAMS}, "robot_profile": str(path)}
    expected = load_profile(path).commanded_joints
    assert safety_filter.config_from_params(filter_params).joints == expected
    assert config_from_params(controller_params(robot_profile=str(path))).joint_names == expected
    named = safety_filter.config_from_params({**filter_params, "joints": ["shoulder_pan_joint"]})
    assert named.joints == ("shoulder_pan_joint",)  # named joints win
    assert safety_filter.config_from_params({**filter_params, "robot_profile": ""}).joints == ()  # the URDF's all


@needs_fr3
def test_the_policys_table_lift_finds_the_profiles_meshes(fr3_env):
    from vla_ros.params import policy
    from vla_ros.params.spec import default_values

    fr3 = load_profile("fr3")  # its meshes are package://fr3/..., found through the profile's package_paths
    p = {**default_values(policy.PARAMS), "robot_profile": "fr3", "shaping_table_lift": True}
    limits = policy.shaping_limits_from_params(p, fr3.urdf, fr3.commanded_joints, share_dir=REPO, base_dir=FR3_DIR)
    assert limits.joint_names == fr3.commanded_joints and limits.table_lift is not None


def test_the_filter_keeps_clear_of_the_table_where_the_profile_puts_it(tmp_path):
    from vla_ros.params.safety_filter import PARAMS as FILTER_PARAMS
    from vla_ros.params.safety_filter import config_from_params as filter_config

    data = bundled_dict()
    data["table_height_m"] = -0.05
    data["urdf"] = str(load_profile().urdf)
    path = tmp_path / "low_table.yaml"
    path.write_text(yaml.safe_dump(data))
    defaults = {s.name: s.default for s in FILTER_PARAMS}
    assert filter_config(defaults).table_height_m == 0.0
    config = filter_config({**defaults, "robot_profile": str(path), "table_height_m": 0.3})
    assert config.table_height_m == -0.05 and config.joints == COMMANDED_JOINTS


@needs_fr3
def test_without_a_model_demo_and_eval_take_the_one_the_package_ships_for_the_robot(fr3_env):
    from vla_ros.robot_profile import shipped_model_name

    assert shipped_model_name(None) == shipped_model_name("") == shipped_model_name("vla_arm") == "vla_cups"
    ships_fr3 = (REPO / "models" / "fr3_cups" / "config.json").is_file()
    assert shipped_model_name("fr3") == ("fr3_cups" if ships_fr3 else "vla_cups")
    with pytest.raises(ProfileError, match="no robot profile named 'no_such_arm'"):
        shipped_model_name("no_such_arm")

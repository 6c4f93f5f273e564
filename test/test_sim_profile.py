"""The sim and the scripted expert for any arm a robot profile describes (vla_ros.robot_profile).

The bundled arm's compiled scene is compared with a golden copy taken before the sim learned profiles: the
shipped policy was trained on that scene, so building it from the profile must not move a single number.
Regenerate the golden copy only when the bundled scene changes on purpose (and the policy is retrained):

    PYTHONPATH=$PWD python test/test_sim_profile.py --regenerate-golden
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import mujoco
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.unit  # no ROS node, no DDS, no wall-clock timing: `make test` runs it beside others

GOLDEN = Path(__file__).parent / "data" / "bundled_scene.npz"
FR3_DIR = Path(os.environ.get("VLA_ROS_FR3_DIR", Path(__file__).resolve().parents[2] / "shared" / "robots" / "fr3"))
needs_fr3 = pytest.mark.skipif(
    not (FR3_DIR / "fr3.urdf").is_file(), reason=f"the FR3 description is not at {FR3_DIR} (set VLA_ROS_FR3_DIR)"
)
# The expert's workspace: the cups' region (SimConfig.cup_region_m) from the grasp height to the lift height.
WORKSPACE = {"x": (0.30, 0.55), "y": (-0.22, 0.22), "z": (0.05, 0.20), "roll": (-1.5, 1.5)}


def scene_fingerprint(sim) -> dict[str, np.ndarray]:
    """Every array of the compiled MjModel, its options, and what ArmSim makes of it (commanded joints, home)."""
    model = sim.model
    out: dict[str, np.ndarray] = {}
    for name in dir(model):
        if name.startswith("_"):
            continue
        try:
            value = getattr(model, name)
        except Exception:  # noqa: BLE001 - a property MuJoCo refuses to read here is no part of the model's numbers
            continue
        if isinstance(value, np.ndarray):
            out[f"model.{name}"] = np.array(value)
    for name in dir(model.opt):
        value = getattr(model.opt, name)
        if not name.startswith("_") and isinstance(value, (int, float, np.ndarray)):
            out[f"opt.{name}"] = np.array(value)
    out["sim.command_joint_names"] = np.array(sim.command_joint_names)
    out["sim.joint_names"] = np.array(sim.joint_names)
    out["sim.limits.lower"] = np.array(sim.limits.lower)
    out["sim.limits.upper"] = np.array(sim.limits.upper)
    out["sim.home"] = np.array(sim.commanded_positions())
    return out


def test_the_bundled_arms_scene_is_the_one_the_shipped_policy_was_trained_on():
    """Built from the bundled profile, the compiled model equals, array by array, the golden copy taken when the
    sim still read the bundled URDF directly (every body, geom, joint, actuator gain, camera, option)."""
    from vla_ros.sim import ArmSim

    golden = np.load(GOLDEN)
    sim = ArmSim(seed=0)
    now = scene_fingerprint(sim)
    sim.close()
    differ = []
    for key in golden.files:
        if key not in now:
            continue  # a field a newer MuJoCo dropped: nothing to compare
        a, b = golden[key], now[key]
        if a.shape != b.shape or a.dtype != b.dtype or not np.array_equal(a, b, equal_nan=a.dtype.kind == "f"):
            differ.append(key)
    assert not differ, f"the bundled scene changed in {differ}"
    assert len(set(golden.files) & set(now)) > 400  # the comparison covered the model, not a handful of fields


@pytest.fixture(scope="module")
def fr3(monkeypatch_module):
    from vla_ros.robot_profile import load_profile

    monkeypatch_module.setenv("VLA_ROS_FR3_DIR", str(FR3_DIR))
    return load_profile("fr3")


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


@pytest.fixture(scope="module")
def fr3_sim(fr3):
    from vla_ros.sim import ArmSim

    sim = ArmSim(profile=fr3, seed=0)
    yield sim
    sim.close()


@needs_fr3
def test_the_fr3_scene_commands_the_profiles_joints_and_its_mimic_finger_follows(fr3, fr3_sim):
    sim = fr3_sim
    sim.reset(0)  # the module's other tests move the shared sim's arm, in any order
    assert sim.command_joint_names == list(fr3.commanded_joints)
    assert sim.joint_names == list(fr3.commanded_joints) + ["fr3_finger_joint2"]
    assert [sim.model.actuator(i).name for i in range(sim.model.nu)] == [f"{j}_position" for j in fr3.commanded_joints]
    np.testing.assert_allclose(sim.commanded_positions(), fr3.home_q)
    np.testing.assert_allclose(sim.command_joint_positions(), fr3.home_q)
    # generic gains (no sim_position_kp in the profile): every servo at SERVO_FREQUENCY_HZ, the shoulder stiffest
    kp = sim.model.actuator_gainprm[:, 0]
    assert np.all(kp > 0) and kp[1] == kp.max() and kp[-1] < kp[:4].min()
    # the fingers close to 1 cm: the mimic finger goes along, and both stay put within a tenth of a millimetre
    target = sim.commanded_positions()
    target[-1] = 0.01
    sim.command_positions(None, target)
    for _ in range(sim.config.physics_rate_hz):
        sim.step()
    q = sim.joint_positions()
    assert abs(q[-2] - 0.01) < 1e-4 and abs(q[-1] - q[-2]) < 1e-4, q[-2:]
    assert sim.robot_table_contacts() == 0
    # the two fingers never collide with each other (excluded); the hand's frame is the profile's
    pair = {sim.model.body("fr3_leftfinger").id, sim.model.body("fr3_rightfinger").id}
    excluded = {(int(s) >> 16, int(s) & 0xFFFF) for s in sim.model.exclude_signature}
    assert tuple(sorted(pair)) in excluded
    assert sim.robot.hand_body == "fr3_hand" and sim.robot.tcp_body == "fr3_hand_tcp"


def _robot_hidden_render(sim, camera: str) -> np.ndarray:
    """The same camera with every robot geom transparent: what the picture would be without the arm."""
    rgba = sim.model.geom_rgba.copy()
    robot = sorted(sim._robot_geoms)
    sim.model.geom_rgba[robot, 3] = 0.0
    try:
        return sim.render(camera).copy()
    finally:
        sim.model.geom_rgba[:] = rgba


@needs_fr3
def test_the_fr3_cameras_see_the_arm_and_the_cups(fr3_sim):
    from vla_ros import cameras

    sim = fr3_sim
    sim.reset(3)
    arm_pixels = {}
    for camera in (cameras.FRONT, cameras.WRIST):
        image = sim.render(camera).copy()
        assert image.std() > 10  # a picture, not a blank
        arm_pixels[camera] = np.any(image != _robot_hidden_render(sim, camera), axis=2)
        assert arm_pixels[camera].mean() > 0.005, camera  # the arm is drawn: its collision meshes stand in for visuals
    h, w = sim.config.image_height, sim.config.image_width
    for point in sim.cup_positions().values():
        u, v = sim.project(point)[0]
        assert 0 <= u < w and 0 <= v < h, point  # every cup is in the scene camera's picture
    rows, cols = np.nonzero(arm_pixels[cameras.FRONT])
    u, v = sim.project(sim.tcp_position())[0]
    assert cols.min() <= u <= cols.max() and rows.min() <= v <= rows.max()  # the hand among the arm's pixels


def _ik_case(ik, sim, target, roll):
    """Solve from home, then check the pose in MuJoCo (an independent forward kinematics)."""
    result = ik.solve(target, roll, ik.home)
    assert np.all(result.q >= ik.lower) and np.all(result.q <= ik.upper)
    sim.place_arm(np.append(result.q, sim.profile.gripper_open))
    tcp = sim.tcp_position()
    rotation = sim.data.xmat[sim.model.body(sim.robot.tcp_body).id].reshape(3, 3)
    assert np.linalg.norm(tcp - target) < 1e-3, (target, tcp)
    assert rotation[:, 2] @ np.array([0.0, 0.0, -1.0]) > np.cos(0.01)  # the tool points straight down
    want = ik.orientation(target, roll)
    assert np.arccos(np.clip((np.trace(want.T @ rotation) - 1) / 2, -1, 1)) < 0.01  # and is turned by the roll
    return result


_targets = st.tuples(*(st.floats(*WORKSPACE[k]) for k in ("x", "y", "z", "roll")))


@pytest.fixture(scope="module")
def bundled_sim():
    from vla_ros.sim import ArmSim

    sim = ArmSim(seed=0)
    yield sim
    sim.close()


@settings(max_examples=25, deadline=None)
@given(case=_targets)
def test_the_generic_ik_reaches_top_down_poses_of_the_bundled_arm_as_its_closed_form_does(bundled_sim, case):
    from vla_ros.sim.ik import TopDownIK
    from vla_ros.sim.scripted import top_down_ik

    x, y, z, roll = case
    ik = TopDownIK(bundled_sim.profile)
    result = _ik_case(ik, bundled_sim, np.array([x, y, z]), roll)
    # the closed form's own solution (the bundled arm's fast path until now): the same joints
    np.testing.assert_allclose(result.q, top_down_ik([x, y, z], roll), atol=2e-3)


@needs_fr3
@settings(max_examples=25, deadline=None)
@given(case=_targets)
def test_the_generic_ik_reaches_top_down_poses_of_the_fr3(fr3_sim, case):
    from vla_ros.sim.ik import TopDownIK

    x, y, z, roll = case
    _ik_case(TopDownIK(fr3_sim.profile), fr3_sim, np.array([x, y, z]), roll)


def test_the_generic_ik_says_when_a_pose_is_out_of_reach(bundled_sim):
    from vla_ros.sim.ik import TopDownIK, UnreachableError

    ik = TopDownIK(bundled_sim.profile)
    with pytest.raises(UnreachableError, match=r"out of reach of vla_arm: the closest pose found misses it by"):
        ik.solve([1.5, 0.0, 0.1], 0.0, ik.home)


@needs_fr3
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_expert_lifts_the_named_cup_with_the_fr3(fr3_sim, seed):
    from vla_ros.sim.expert import PickExpert
    from vla_ros.sim.tasks import episode_task

    sim = fr3_sim
    color, _ = episode_task(seed)
    sim.reset(seed, arm_noise_rad=0.15)
    expert = PickExpert(profile=sim.profile)
    while sim.time_s < 8.0 and not (sim.lifted_cup() is not None and expert.phase == "hold"):
        if sim.is_joint_state_step():
            q = expert.command(sim.time_s, sim.tcp_position(), sim.cup_positions()[color], sim.joint_positions())
            assert q.shape == (8,)
            sim.command_positions(None, q)
        sim.step()
    assert sim.lifted_cup() == color, (seed, color, expert.phase)
    assert sim.robot_table_contacts() == 0


@needs_fr3
def test_collect_records_fr3_demonstrations_with_its_joint_names(tmp_path, capsys, fr3):
    from vla_ros.data.mcap_io import read_messages
    from vla_ros.tools import collect

    assert collect.main(["--robot", "fr3", "--episodes", "1", "--seed-start", "4", "--out", str(tmp_path)]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["robot"] == "fr3" and result["successes"] == 1
    path = tmp_path / "episode_0000004.mcap"
    states = [m.message for m in read_messages(path, ["/joint_states"])]
    commands = [m.message for m in read_messages(path, ["/forward_position_controller/commands"])]
    assert len(states) > 100 and all(list(s.name) == list(fr3.commanded_joints) + ["fr3_finger_joint2"] for s in states)
    assert len(commands) > 100 and all(len(c.data) == len(fr3.commanded_joints) for c in commands)
    assert min(c.data[-1] for c in commands) == pytest.approx(fr3.gripper_closed[0])


def test_a_profile_the_sim_cannot_build_is_refused_with_the_reason(tmp_path):
    import dataclasses

    from vla_ros.robot_profile import ProfileError, load_profile
    from vla_ros.sim import ArmSim

    bundled = load_profile(None)
    urdf = tmp_path / "arm.urdf"
    urdf.write_text(
        bundled.urdf.read_text().replace(
            '<link name="base_link">',
            '<link name="base_link"><collision><geometry><mesh filename="package://nowhere/base.stl"/></geometry>'
            "</collision>",
        )
    )
    with pytest.raises(
        ProfileError, match=r"link base_link: collision mesh: cannot resolve package://nowhere/base.stl"
    ):
        ArmSim(profile=dataclasses.replace(bundled, urdf=urdf))
    five = dataclasses.replace(
        bundled, arm_joints=bundled.arm_joints[:5], home=bundled.home[:5], sim_position_kp=()
    )  # wrist_roll_joint left out
    with pytest.raises(ProfileError, match=r"\['wrist_roll_joint'\] move but are neither commanded"):
        ArmSim(profile=five)


def test_a_visual_mesh_the_sim_can_read_is_drawn_and_one_it_cannot_is_replaced_by_the_collision_geometry(tmp_path):
    """A link with a readable visual shows it and hides its collision geometry; a visual whose mesh is missing is
    dropped and the link's collision geometry is drawn instead."""
    import dataclasses

    from vla_ros.robot_profile import load_profile
    from vla_ros.sim.scene import SceneConfig, build_spec

    bundled = load_profile(None)
    stl = tmp_path / "box.stl"
    _write_box_stl(stl, 0.05)
    text = re.sub(r"<visual>.*?</visual>", "", bundled.urdf.read_text(), flags=re.S)  # its primitives' copies
    text = text.replace('discardvisual="true" ', "")
    text = text.replace(
        '<link name="shoulder_link">',
        f'<link name="shoulder_link"><visual><geometry><mesh filename="file://{stl}"/></geometry></visual>',
    ).replace(
        '<link name="forearm_link">',
        '<link name="forearm_link"><visual><geometry><mesh filename="missing/forearm.stl"/></geometry></visual>',
    )
    urdf = tmp_path / "arm.urdf"
    urdf.write_text(text)
    spec, _ = build_spec(dataclasses.replace(bundled, urdf=urdf), SceneConfig())
    model = spec.compile()
    groups = {}
    for g in range(model.ngeom):
        body = model.body(model.geom_bodyid[g]).name
        kind = "visual" if model.geom_contype[g] == 0 and model.geom_conaffinity[g] == 0 else "collision"
        groups.setdefault((body, kind), set()).add(int(model.geom_group[g]))
    assert groups[("shoulder_link", "collision")] == {3}  # hidden: the mesh visual stands for it
    assert 3 not in groups[("shoulder_link", "visual")]
    assert groups[("forearm_link", "collision")] == {0}  # drawn: its visual could not be read
    assert model.nmesh == 1 and model.mesh_vertnum[0] == 8


def _write_box_stl(path: Path, half: float) -> None:
    """A binary STL (what MuJoCo reads) of a cube of side 2 ``half``."""
    corners = np.array([[x, y, z] for x in (-half, half) for y in (-half, half) for z in (-half, half)])
    faces = [(0, 1, 3), (0, 3, 2), (4, 6, 7), (4, 7, 5), (0, 4, 5), (0, 5, 1)]
    faces += [(2, 3, 7), (2, 7, 6), (0, 2, 6), (0, 6, 4), (1, 5, 7), (1, 7, 3)]
    record = np.dtype([("normal", "<f4", 3), ("vertices", "<f4", (3, 3)), ("attribute", "<u2")])
    triangles = np.zeros(len(faces), dtype=record)
    triangles["vertices"] = corners[np.array(faces)]
    path.write_bytes(b"\0" * 80 + np.uint32(len(faces)).tobytes() + triangles.tobytes())


def _regenerate() -> None:
    from vla_ros.sim import ArmSim

    sim = ArmSim(seed=0)
    GOLDEN.parent.mkdir(exist_ok=True)
    np.savez_compressed(GOLDEN, **scene_fingerprint(sim))
    print(f"wrote {GOLDEN} (mujoco {mujoco.__version__})")


if __name__ == "__main__":
    if sys.argv[1:] == ["--regenerate-golden"]:
        _regenerate()
    else:
        raise SystemExit(f"usage: python {sys.argv[0]} --regenerate-golden")

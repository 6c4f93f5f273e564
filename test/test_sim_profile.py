"""The sim and the scripted expert for any arm a robot profile describes (vla_ros.robot_profile).

The bundled arm's compiled scene is compared with a golden copy taken before the sim learned profiles: the
shipped policy was trained on that scene, so building it from the profile must not move a single number.
Regenerate the golden copy only when the bundled scene changes on purpose (and the policy is retrained):

    PYTHONPATH=$PWD python test/test_sim_profile.py --regenerate-golden
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import mujoco
import numpy as np
import pytest

GOLDEN = Path(__file__).parent / "data" / "bundled_scene.npz"
FR3_DIR = Path(os.environ.get("VLA_ROS_FR3_DIR", Path(__file__).resolve().parents[2] / "shared" / "robots" / "fr3"))
needs_fr3 = pytest.mark.skipif(
    not (FR3_DIR / "fr3.urdf").is_file(), reason=f"the FR3 description is not at {FR3_DIR} (set VLA_ROS_FR3_DIR)"
)


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
    assert sim.command_joint_names == list(fr3.commanded_joints)
    assert sim.joint_names == list(fr3.commanded_joints) + ["fr3_finger_joint2"]
    assert [sim.model.actuator(i).name for i in range(sim.model.nu)] == [f"{j}_position" for j in fr3.commanded_joints]
    np.testing.assert_allclose(sim.commanded_positions(), fr3.home_q)
    np.testing.assert_allclose(sim.command_joint_positions(), fr3.home_q)
    # generic gains (no sim_position_kp in the profile): every servo at SERVO_FREQUENCY_HZ, the shoulder stiffest
    kp = sim.model.actuator_gainprm[:, 0]
    assert np.all(kp > 0) and kp[1] == kp.max() and kp[-1] < kp[:4].min()
    # the fingers close to 1 cm: the mimic finger goes along, and both stay put within a tenth of a millimetre
    sim.reset(0)
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

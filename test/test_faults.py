"""Issue 44 on the launched graph (sim, policy, safety filter, controller): the faults of ``vla-ros bench
faults``, one episode each, with the arm moving under the shipped model. Whatever the fault, the arm never
moves faster than its limits, the controller never commands a joint faster than its limit, and the cause is
named on ``/diagnostics`` at WARN or ERROR. The gripper's measured velocity is no promise: a finger that meets
a cup is pushed by it (a run: commanded 37 mm open and still, pushed to 15 mm in 60 ms); its commands are.

The figures are recomputed here from what the bench's witness recorded (the simulator's own joint states,
every /diagnostics status), against the velocity limits read by this test from the bundled URDF: the
bench's own arithmetic is checked, not trusted. Velocities are the simulator's measurements over the bench's
VELOCITY_WINDOW_S (commands reach it a DDS hop late and unevenly on a loaded machine; each command's own
step is checked exactly by the property tests of the controller's core). Half real time, so the policy keeps up on a
loaded machine
(the arm moves in every episode); the seconds to the diagnostic are the bench's to print, not asserted here.
"""

import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from vla_ros.bench.faults import COMMAND_JITTER_S, FAULTS, VELOCITY_WINDOW_S, run_faults
from vla_ros.control import bundled_urdf_path
from vla_ros.robot_profile import load_profile

LIMIT_RATIO = 1.05  # issue 44: the measured velocity stays within 1.05x the limit
# The faults issue 44 asks the launched tests for, and the baseline (the bench also runs bad_states)
TESTED = ("none", "stale_pose", "duplicate_name", "controller_sigstop", "policy_sigstop", "second_clock")


@pytest.fixture(scope="module")
def faults(tmp_path_factory):
    log = tmp_path_factory.mktemp("faults") / "graph.log"
    raw: dict = {}
    try:
        out = run_faults(list(TESTED), real_time_factor=0.5, log_path=log, progress=False, raw=raw)
    except Exception:
        print(log.read_text()[-4000:] if log.is_file() else "(no graph log)")
        raise
    return out, raw


def urdf_velocity_limits() -> dict[str, float]:
    root = ET.parse(bundled_urdf_path()).getroot()
    return {
        j.get("name"): float(j.find("limit").get("velocity"))
        for j in root.iter("joint")
        if j.get("type") in ("revolute", "prismatic") and j.find("limit") is not None
    }


def gripper_joints() -> set[str]:
    """The bundled profile's gripper joints and the URDF joints that mimic them."""
    grip = set(load_profile(None).gripper_joints)
    root = ET.parse(bundled_urdf_path()).getroot()
    mimics = {j.get("name"): j.find("mimic") for j in root.iter("joint")}
    return grip | {name for name, m in mimics.items() if m is not None and m.get("joint") in grip}


def worst_ratio(rows, names, limits, slack_s=0.0) -> float:
    """Each (stamp ns, positions) row against the first one VELOCITY_WINDOW_S later: the largest
    |dq| / (limit * (dt + slack_s)) over the joints in ``limits``."""
    worst = 0.0
    for a, (t0, q0) in enumerate(rows):
        b = next((b for b in range(a + 1, len(rows)) if rows[b][0] - t0 >= VELOCITY_WINDOW_S * 1e9), None)
        if b is None:
            break
        t1, q1 = rows[b]
        v = np.abs(np.asarray(q1) - np.asarray(q0)) / ((t1 - t0) * 1e-9 + slack_s)
        worst = max(worst, max(v[j] / limits[n] for j, n in enumerate(names) if n in limits))
    return worst


@pytest.mark.parametrize("name", TESTED)
def test_no_fault_moves_a_joint_faster_than_its_limit_and_each_is_named(faults, name):
    out, raw = faults
    limits, grip = urdf_velocity_limits(), gripper_joints()
    assert grip and grip < set(limits)
    t_from, t_to, wall0, _, k_from, k_to = raw["windows"][name]
    rows = [(t, names, q) for t, names, q in raw["states"] if t_from <= t <= t_to]
    assert len(rows) > 50, (name, len(rows))  # the simulator's states of the window were seen
    names, states = rows[0][1], [(t, q) for t, _, q in rows]
    worst = worst_ratio(states, names, {n: v for n, v in limits.items() if n not in grip})
    r = out["faults"][name]
    assert worst <= LIMIT_RATIO, (name, worst, r)
    assert abs(worst - r["max_velocity_ratio"]) < 1e-3, (worst, r)  # the bench reports what happened
    gripper = worst_ratio(states, names, {n: v for n, v in limits.items() if n in grip})
    assert abs(gripper - r["max_gripper_velocity_ratio"]) < 1e-3, (gripper, r)
    # The fault's own commands, as they had arrived when the bench computed its figure: a command that arrives
    # later is stamped by the bench's clock then, which a later fault (a second /clock 5 s behind) can set back
    # into this window, beside commands of another moment.
    commands = [(t, c) for _, c, t in raw["commands"][k_from:k_to] if t_from <= t <= t_to]
    assert len(commands) > 20, (name, len(commands))  # the controller's commands of the window were seen
    commanded = worst_ratio(commands, load_profile(None).commanded_joints, limits, COMMAND_JITTER_S)
    assert commanded <= LIMIT_RATIO, (name, commanded, r)
    assert abs(commanded - r["max_command_ratio"]) < 1e-3, (commanded, r)
    cause = re.compile(FAULTS[name].cause)
    named = [
        (wall - wall0, level, text)
        for wall, level, text in raw["statuses"]
        if wall >= wall0 and level in (1, 2) and cause.search(text)
    ]
    if name == "none":
        assert r["cause_named_s"] is None
        return
    assert named, (name, [s for s in raw["statuses"] if s[0] >= wall0][-5:])
    assert r["cause_named_s"] == pytest.approx(named[0][0], abs=1e-3) and r["cause"] == named[0][2][:300]


def test_the_arm_moved_in_the_baseline(faults):
    """Without a fault the shipped model moves the arm: a ratio of 0 everywhere would prove nothing."""
    out, raw = faults
    t_from, t_to = raw["windows"]["none"][:2]
    q = np.array([q for t, _, q in raw["states"] if t_from <= t <= t_to])
    assert np.abs(q[-1] - q[0]).max() > 0.02 and out["faults"]["none"]["max_velocity_ratio"] > 0.01, out["faults"][
        "none"
    ]

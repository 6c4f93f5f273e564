"""Issue 44 on the launched graph (sim, policy, safety filter, controller): the faults of ``vla-ros bench
faults``, one episode each, with the arm moving under the shipped model. Whatever the fault, the arm never
moves faster than its limits, and the cause is named on ``/diagnostics`` at WARN or ERROR.

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

from vla_ros.bench.faults import FAULTS, VELOCITY_WINDOW_S, run_faults
from vla_ros.control import bundled_urdf_path

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


@pytest.mark.parametrize("name", TESTED)
def test_no_fault_moves_a_joint_faster_than_its_limit_and_each_is_named(faults, name):
    out, raw = faults
    limits = urdf_velocity_limits()
    t_from, t_to, wall0, _ = raw["windows"][name]
    rows = [(t, names, q) for t, names, q in raw["states"] if t_from <= t <= t_to]
    assert len(rows) > 50, (name, len(rows))  # the simulator's states of the window were seen
    worst = 0.0
    for a, (t0, n0, q0) in enumerate(rows):  # each state against the first one VELOCITY_WINDOW_S later
        b = next((b for b in range(a + 1, len(rows)) if rows[b][0] - t0 >= VELOCITY_WINDOW_S * 1e9), None)
        if b is None:
            break
        t1, _, q1 = rows[b]
        v = np.abs(np.asarray(q1) - np.asarray(q0)) / ((t1 - t0) * 1e-9)
        worst = max(worst, max(v[j] / limits[n] for j, n in enumerate(n0) if n in limits))
    r = out["faults"][name]
    assert worst <= LIMIT_RATIO, (name, worst, r)
    assert abs(worst - r["max_velocity_ratio"]) < 1e-3, (worst, r)  # the bench reports what happened
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
    t_from, t_to, _, _ = raw["windows"]["none"]
    q = np.array([q for t, _, q in raw["states"] if t_from <= t <= t_to])
    assert np.abs(q[-1] - q[0]).max() > 0.02 and out["faults"]["none"]["max_velocity_ratio"] > 0.01, out["faults"][
        "none"
    ]

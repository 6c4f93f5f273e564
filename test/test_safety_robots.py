"""The safety filter on real robot descriptions: the project's sim arm (primitives, no SRDF) and the Franka
FR3 (mesh collision geometry plus SRDF, from ../shared/robots/fr3 when present), and in the MuJoCo sim.

Benign chunks pass unchanged; a chunk that folds the arm into itself or drives it through the table is cut
before contact. The "before contact" claims are checked against what the unfiltered chunk does (it does
collide), so each test can fail.
"""

import numpy as np
import pytest

from vla_ros.bench.safety_bench import FR3_DIR, FR3_READY, fr3_filter, sim_filter, smooth_chunk
from vla_ros.chunks import COMMANDED_JOINTS, ActionChunk
from vla_ros.safety import JointStateSample
from vla_ros.sim import HOME_Q, ArmSim, PositionTrajectory

pytestmark = pytest.mark.unit  # no ROS node, no DDS, no wall-clock timing: `make test` runs it beside others

NOW = 1_700_000_000_000_000_000


@pytest.fixture(scope="module", params=["sim", "fr3"])
def rig(request):
    if request.param == "sim":
        return request.param, sim_filter(), np.array(HOME_Q)
    filt = fr3_filter()
    if filt is None:
        pytest.skip(f"{FR3_DIR} not present")
    return request.param, filt, np.array(FR3_READY)


def _first_contact(filt, path):
    """(index of the first waypoint whose approach touches something, what it touches), exhaustively."""
    c = filt.checker
    Qs, seg, _, _ = c._samples(np.asarray(path))
    for q, s in zip(Qs, seg):
        d = c.distances(q)
        if d.min() <= 0.0:
            return int(s) + 1, c.kinds[int(np.argmin(d))]
    return None, None


def _straight(home, target, n=40):
    return home + np.linspace(0.0, 1.0, n + 1)[1:, None] * (target - home)  # (n, joints)


def _target(filt, home, kind, seed=2):
    """A configuration inside the limits that the straight path from ``home`` reaches by first touching
    ``kind``: the arm folding into itself (self_collision) or going through the table (table_collision)."""
    rng = np.random.default_rng(seed)
    for _ in range(5000):
        q = rng.uniform(filt.limits.lower, filt.limits.upper)
        if filt.checker.distances(q).min() > -0.01:
            continue  # not deep enough into something
        if _first_contact(filt, np.vstack([home, _straight(home, q)]))[1] == kind:
            return q
    raise AssertionError(f"no configuration found whose path first touches {kind}")


def test_benign_chunks_pass_unchanged(rig):
    _, filt, home = rig
    rng = np.random.default_rng(7)
    q, passed = home, 0
    for _ in range(15):
        chunk = smooth_chunk(filt, q, rng, NOW, waypoints=30, reach_rad=0.25, home=home)
        out, report = filt.filter(chunk, JointStateSample(filt.joint_names, q, NOW), NOW)
        assert report.verdict == "pass" and out is chunk, report
        passed += 1
        q = chunk.positions[9]
    assert passed == 15


@pytest.mark.parametrize("kind", ["self_collision", "table_collision"])
def test_folding_or_diving_chunk_is_cut_before_contact(rig, kind):
    name, filt, home = rig
    points = _straight(home, _target(filt, home, kind))  # (40, n) straight at the target
    chunk = ActionChunk(filt.joint_names, NOW, np.arange(1, 41) * 0.1, points)
    contact, touched = _first_contact(filt, np.vstack([home, points]))
    assert touched == kind  # unfiltered, the chunk does hit
    out, report = filt.filter(chunk, JointStateSample(filt.joint_names, home, NOW), NOW)
    assert report.verdict == "truncated" and kind in [f.code for f in report.findings], report
    assert out.horizon < contact  # cut before the first point whose approach makes contact
    margin = min(
        float(np.min(filt.checker.distances(q) - filt.checker.clearance))
        for q in filt.checker._samples(np.vstack([home, out.positions]))[0]
    )
    assert margin >= 0.0  # and the kept part keeps every clearance


def test_robot_summaries(rig):
    name, filt, _ = rig
    kinds = filt.checker.count_by_kind()
    assert kinds["self_collision"] > 20 and kinds["table_collision"] >= 8
    if name == "fr3":
        assert "srdf" in filt.robot.excluded and len(filt.robot.joint_names) == 8  # 7 arm joints + finger_joint1
        assert filt.robot.full_q(np.array(FR3_READY))[-1] == FR3_READY[-1]  # finger_joint2 mimics joint1


# ---- in the MuJoCo simulation -------------------------------------------------------------------------


def _run(sim: ArmSim, chunk: ActionChunk, seconds: float) -> int:
    """Follow ``chunk`` (joint-trajectory-controller semantics) and count steps with robot-table contact."""
    traj = PositionTrajectory.from_points(
        chunk.joint_names,
        chunk.time_from_start_s.tolist(),
        chunk.positions.tolist(),
        sim.limits,
        stamp_s=chunk.stamp_ns * 1e-9,
    )
    sim.command_trajectory(traj)
    touching = 0
    for _ in range(int(seconds * sim.config.physics_rate_hz)):
        sim.step()
        touching += sim.robot_table_contacts() > 0
    return touching


def test_in_simulation_filtered_adversarial_chunks_never_touch_the_table():
    filt = sim_filter()
    table = [i for i, k in enumerate(filt.checker.kinds) if k == "table_collision"]
    rng = np.random.default_rng(4)
    sim = ArmSim(seed=0)
    hits_unfiltered = 0
    for trial in range(4):
        sim.reset(trial)
        sim.step_count = 600 * (trial + 1)  # a non-zero stamp, as in a running system
        q0 = sim.command_joint_positions()
        # Down and forward, with noise: the policy gone wrong. The target lies 3+ cm inside the table.
        while True:
            target = np.array(
                [
                    rng.uniform(-0.8, 0.8),
                    rng.uniform(1.2, 1.8),
                    rng.uniform(0.8, 1.9),
                    0.0,
                    rng.uniform(0.0, 1.5),
                    0.0,
                    0.04,
                ]
            )
            if filt.checker.distances(target)[table].min() < -0.03:
                break
        n = 30
        pts = (
            q0
            + np.linspace(0.0, 1.0, n + 1)[1:, None] * (target - q0)
            + rng.normal(0.0, 0.01, (n, 7)) * [1, 1, 1, 1, 1, 1, 0]
        )
        pts[:, 6] = 0.04
        chunk = ActionChunk(COMMANDED_JOINTS, sim.time_ns, np.arange(1, n + 1) * 0.08, pts)
        state = JointStateSample(tuple(sim.joint_names), sim.joint_positions(), sim.time_ns)
        out, report = filt.filter(chunk, state, sim.time_ns)
        assert out is not None and report.verdict == "truncated", report
        start = sim.step_count
        assert _run(sim, out, 4.0) == 0, f"trial {trial}: the filtered chunk touched the table ({report.detail})"
        sim.reset(trial)
        sim.step_count = start
        hits_unfiltered += _run(sim, chunk, 4.0) > 0
    sim.close()
    assert hits_unfiltered >= 3  # the same chunks unfiltered do drive the arm into the table

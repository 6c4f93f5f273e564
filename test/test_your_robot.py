"""Your arm, end to end (issue 46's acceptance): a URDF the package has never seen goes through
``vla-ros robot check`` to a running ``robot.launch.xml`` without editing any file of the package.

As a user would, with real processes: ``python -m vla_ros.cli robot check`` on the FR3's URDF (from
``../shared/robots/fr3``, read in place) writes a starter profile into a folder of the test's own; robot.launch.xml
runs the safety filter and the controller from that profile (``run_policy:=false``, the controller on a forward
controller name and a joint state topic of this test's own). An independent rclpy probe on wall time publishes the
FR3's joint states (every actuated joint and the mimic finger, ~100 Hz) at the profile's home pose, sends action
chunks on /vla/action_chunk and reads what comes out: the filtered chunk, the controller's commands and the two
nodes' /diagnostics. Waits are upper bounds for a loaded machine; the assertions are on values.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import rclpy
from builtin_interfaces.msg import Duration
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from ros_helpers import REPO, LaunchedGraph, controller_trusts, spin_until
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from vla_ros import reasons
from vla_ros.robot_profile import load_profile

FR3_DIR = REPO.parent / "shared" / "robots" / "fr3"
pytestmark = pytest.mark.skipif(not (FR3_DIR / "fr3.urdf").is_file(), reason=f"no FR3 description at {FR3_DIR}")

JOINT_STATES = "/your_robot/joint_states"
FORWARD = "your_robot_forward"  # the controller's commands go to /your_robot_forward/commands
MIMIC_FINGER = "fr3_finger_joint2"  # follows fr3_finger_joint1; a driver publishes it, no chunk commands it
STEP_RAD = 0.1  # joint1 moves this far in 10 points 0.1 s apart
SPEED_RAD_S = STEP_RAD / 1.0  # (its URDF limit: 2.62 rad/s)


def robot_check(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vla_ros.cli", "robot", "check", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )


class Probe:
    """The robot's side of the wire as a driver and a user's script see it, on wall time."""

    def __init__(self, joint_names: list[str], joint_q: list[float]) -> None:
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = Node("your_robot_probe", context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.statuses: dict[str, DiagnosticStatus] = {}  # status name -> its newest report
        self.rejections: list[DiagnosticStatus] = []  # the filter's "chunk rejected" events
        self.controller_inputs: list[dict[str, str]] = []  # the values of every "controller: inputs" report
        self.safe: list[JointTrajectory] = []
        self.commands: list[list[float]] = []
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, 100)
        self.node.create_subscription(JointTrajectory, "/vla/safe_action_chunk", self.safe.append, 10)
        self.node.create_subscription(
            Float64MultiArray, f"/{FORWARD}/commands", lambda m: self.commands.append(list(m.data)), 100
        )
        self.chunks = self.node.create_publisher(JointTrajectory, "/vla/action_chunk", 10)
        states = self.node.create_publisher(JointState, JOINT_STATES, 10)

        def publish_state() -> None:
            msg = JointState(name=joint_names, position=joint_q)
            msg.header.stamp = self.node.get_clock().now().to_msg()
            states.publish(msg)

        self.node.create_timer(0.01, publish_state)

    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        for status in msg.status:
            self.statuses[status.name] = status
            if status.name == "safety_filter: chunk rejected":
                self.rejections.append(status)
            elif status.name == "controller: inputs":
                self.controller_inputs.append({kv.key: kv.value for kv in status.values})

    def values(self, name: str) -> dict[str, str]:
        status = self.statuses.get(name)
        return {kv.key: kv.value for kv in status.values} if status else {}

    def spin_until(self, predicate, wall_timeout_s: float) -> bool:
        return spin_until(predicate, wall_timeout_s, lambda s: self.executor.spin_once(timeout_sec=s), 0.01)

    def send(self, joints: list[str], targets: np.ndarray) -> JointTrajectory:
        """A chunk stamped now: point k (1-based) at k * 0.1 s, positions ``targets[k - 1]``."""
        msg = JointTrajectory(joint_names=joints)
        msg.header.stamp = self.node.get_clock().now().to_msg()
        for k, q in enumerate(targets, start=1):
            msg.points.append(
                JointTrajectoryPoint(
                    positions=[float(v) for v in q], time_from_start=Duration(sec=0, nanosec=k * 100_000_000)
                )
            )
        self.chunks.publish(msg)
        return msg

    def close(self) -> None:
        self.executor.shutdown()
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.context)


def node_statuses(probe: Probe) -> dict[str, DiagnosticStatus]:
    """The newest report of each standing status of the filter and the controller (not the per-chunk events)."""
    return {
        name: s
        for name, s in probe.statuses.items()
        if name.split(":")[0] in ("safety_filter", "controller") and not name.startswith("safety_filter: chunk ")
    }


def test_a_new_urdf_goes_through_robot_check_to_a_running_robot_launch(tmp_path):
    # 1. The check, as a user runs it on a URDF the package has never seen: exit 0, a starter profile written.
    profile_file = tmp_path / "fr3.yaml"
    check = robot_check(
        str(FR3_DIR / "fr3.urdf"),
        "--srdf",
        str(FR3_DIR / "fr3.srdf"),
        "--package-path",
        f"fr3={FR3_DIR}",
        "--write-profile",
        str(profile_file),
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "problems: none" in check.stdout and f"wrote profile: {profile_file}" in check.stdout
    profile = load_profile(profile_file)
    joints = list(profile.commanded_joints)
    assert joints == [f"fr3_joint{i}" for i in range(1, 8)] + ["fr3_finger_joint1"]
    home = np.array(profile.home_q)  # the SRDF's ready pose, the gripper open
    assert home[3] == pytest.approx(-2.356194, abs=1e-5) and home[-1] == pytest.approx(0.04)

    # 2. The driver's joint states: every actuated joint and the mimic finger, at home.
    probe = Probe(joints + [MIMIC_FINGER], home.tolist() + [home[-1]])
    try:
        log = tmp_path / "robot.log"
        with LaunchedGraph(
            "robot.launch.xml",
            "run_policy:=false",
            f"robot_profile:={profile_file}",
            f"joint_states_topic:={JOINT_STATES}",
            f"position_controller:={FORWARD}",
            log_path=log,
        ):
            # 3. Both nodes up on the FR3: the filter filtering, the controller holding at the measured home pose
            # and knowing the filter by name (before that it refuses its chunks, see controller_trusts).
            def ready() -> bool:
                return (
                    probe.values("safety_filter: filter").get("robot") == "fr3"
                    and probe.statuses["safety_filter: filter"].message == "filtering"
                    and len(probe.commands) > 10
                    and controller_trusts(probe.controller_inputs, "/safety_filter")
                )

            assert probe.spin_until(ready, 240), (
                {n: (s.level, s.message) for n, s in probe.statuses.items()},
                len(probe.commands),
                log.read_text()[-4000:],
            )
            assert len(probe.commands[-1]) == len(joints) == 8
            np.testing.assert_allclose(probe.commands[-1], home, atol=1e-6)  # it starts where the arm is

            # 4. A chunk moving joint1 by STEP_RAD at 0.1 rad/s passes the filter with the FR3's joint names and
            # the controller's commands go there. Sent again (stamped anew) only once the filter has refused the
            # last one (a busy machine let it go stale), so the controller never gets two.
            targets = np.repeat(home[None, :], 10, axis=0)  # (10, 8)
            targets[:, 0] += STEP_RAD * np.arange(1, 11) / 10
            sent = []  # (refusals seen when sent, stamp)

            def passed() -> bool:
                if not sent or len(probe.rejections) > sent[-1][0]:
                    sent.append((len(probe.rejections), probe.send(joints, targets).header.stamp))
                return any(m.header.stamp in [s for _, s in sent] for m in probe.safe)

            assert probe.spin_until(passed, 120), (
                [(s.message, [(kv.key, kv.value) for kv in s.values][:8]) for s in probe.rejections[-3:]],
                log.read_text()[-4000:],
            )
            safe = next(m for m in probe.safe if m.header.stamp in [s for _, s in sent])
            assert list(safe.joint_names) == joints
            np.testing.assert_allclose(safe.points[-1].positions, targets[-1], atol=1e-9)  # unchanged where it ends

            # The plan ends with a stop from the chunk's last velocity (0.1 rad/s) at the acceleration limit
            # (limits.yaml: 10 rad/s^2): the arm comes to rest at most v^2 / 2a = 0.5 mrad past the last point.
            overshoot = SPEED_RAD_S**2 / (2 * 10.0)

            def at_rest_past_target() -> bool:
                tail = [c[0] for c in probe.commands[-20:]]
                return len(tail) == 20 and tail[0] >= targets[-1][0] - 1e-9 and max(tail) == min(tail)

            assert probe.spin_until(at_rest_past_target, 60), [c[0] for c in probe.commands[-30:]]
            q = np.array(probe.commands)  # (N, 8)
            assert q.shape[1] == 8
            assert (q[:, 0] >= home[0] - 1e-9).all() and (np.diff(q[:, 0]) >= -1e-12).all()  # toward the target only
            assert targets[-1][0] <= q[-1, 0] <= targets[-1][0] + overshoot + 1e-9, q[-1, 0]
            np.testing.assert_allclose(q[:, 1:], np.broadcast_to(home[1:], q[:, 1:].shape), atol=1e-9)

            # 5. /diagnostics: the filter and the controller report no error and name the FR3 (the filter its
            # robot, the controller its joints in output order).
            def healthy() -> bool:
                statuses = node_statuses(probe)
                return (
                    {"safety_filter: filter", "safety_filter: inputs", "controller: state", "controller: output"}
                    <= set(statuses)
                    and all(s.level != DiagnosticStatus.ERROR for s in statuses.values())
                    and probe.values("safety_filter: filter").get("robot") == "fr3"
                    and probe.values("controller: output").get("joints") == ",".join(joints)
                )

            assert probe.spin_until(healthy, 60), {n: (s.level, s.message) for n, s in node_statuses(probe).items()}
            assert probe.values("safety_filter: filter")["rejected.total"] == "0"

            # 6. A chunk naming a joint the FR3 lacks is refused by the filter, the reason naming that joint.
            alien = joints[:-1] + ["shoulder_pan_joint"]  # the bundled arm's first joint for the FR3's gripper
            before = len(probe.rejections)
            probe.send(alien, targets)
            assert probe.spin_until(lambda: len(probe.rejections) > before, 60), log.read_text()[-3000:]
            refusal = {kv.key: kv.value for kv in probe.rejections[-1].values}
            assert refusal["reason"] == reasons.UNKNOWN_JOINT
            assert "shoulder_pan_joint" in refusal["detail"] and "fr3_finger_joint1" in refusal["detail"]
            assert probe.rejections[-1].level != DiagnosticStatus.ERROR  # a refused chunk is a warning, not a fault
    finally:
        probe.close()
    assert "safety filter up: robot 'fr3'" in log.read_text()


def test_a_policy_for_another_arm_is_refused_at_load_with_both_joint_lists(tmp_path, monkeypatch):
    """policy_node with robot_profile:=fr3 and a model of the bundled arm: no chunk, an ERROR naming both joint
    lists (not a stream of chunks the filter would refuse one by one)."""
    import os

    import torch
    from ros_helpers import node_cmd, start_process, stop_cleanly

    from vla_ros.model.config import tiny_config
    from vla_ros.model.io import save_model
    from vla_ros.model.model import VLATransformer

    torch.manual_seed(0)
    save_model(VLATransformer(tiny_config()), tmp_path / "bundled_tiny")
    env = dict(os.environ, VLA_ROS_FR3_DIR=str(FR3_DIR))
    log = tmp_path / "policy.log"
    args = ["-r", "__node:=other_arm_policy", "-r", "/vla/action_chunk:=/other_arm/action_chunk"]
    for param in ("backend:=torch", f"model:={tmp_path / 'bundled_tiny'}", "robot_profile:=fr3", "instruction:=lift"):
        args += ["-p", param]
    proc = start_process(node_cmd("policy_node", *args), log, env=env)
    context = rclpy.Context()
    rclpy.init(context=context)
    node = Node("other_arm_probe", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    statuses, chunks = [], []
    node.create_subscription(
        DiagnosticArray,
        "/diagnostics",
        lambda m: statuses.extend(s for s in m.status if s.name == "other_arm_policy: policy"),
        50,
    )
    node.create_subscription(JointTrajectory, "/other_arm/action_chunk", chunks.append, 10)
    try:
        refused = lambda: [s for s in statuses if s.level == DiagnosticStatus.ERROR and "commands joints" in s.message]  # noqa: E731
        assert spin_until(refused, 300, lambda t: executor.spin_once(timeout_sec=t)), log.read_text()[-3000:]
        message = refused()[-1].message
        assert "shoulder_pan_joint" in message and "fr3_joint1" in message, message
        assert chunks == [] and proc.poll() is None  # it runs on, saying why
    finally:
        problem = stop_cleanly(proc, log)
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown(context=context)
    assert problem == "", problem

"""sim_node: the embedded MuJoCo simulation behind the usual ROS 2 robot interfaces.

Publishes what a robot driver plus camera driver publish (``/clock`` in simulated time, ``/joint_states``
at 100 Hz, ``/camera/image_raw`` + ``/camera/camera_info`` at 30 Hz, the same from the camera on the hand on
``/wrist_camera/...`` (parameter ``wrist_camera``), ``/robot_description`` transient
local) and accepts the two ros2_control command interfaces: a forward position controller
(``/<position_controller>/commands``, Float64MultiArray) and a joint trajectory controller
(``/<trajectory_controller>/joint_trajectory``, JointTrajectory). Physics runs in its own thread, paced by
``real_time_factor`` (0 = as fast as possible; a change applies at once); ROS callbacks only validate and
hand over commands.

``~/reset`` (std_srvs/Trigger) starts a new episode and announces it on ``/vla/episode_reset``
(``vla_ros.ros.episode``; also once at start-up): the stamp is the new episode's first simulated time,
taken under the same lock the physics thread builds its messages under, so every sensor message of the
new episode is stamped at or after it and every message of the old one before it. Commands still in
flight from before the reset do not yank the arm back (``reset_hold_s``, ``ArmSim.reset``).
"""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import rclpy
from rclpy.node import Node
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import CameraInfo, Image, JointState
from std_msgs.msg import Float64MultiArray, Header, String
from std_srvs.srv import Trigger
from trajectory_msgs.msg import JointTrajectory

from vla_ros import cameras
from vla_ros.params.sim import PARAMS
from vla_ros.ros.diagnostics import ERROR, OK, WARN, Diagnostics
from vla_ros.ros.episode import EPISODE_RESET_TOPIC, episode_reset_msg, episode_reset_qos
from vla_ros.ros.node_main import run_node
from vla_ros.ros.params import declare_parameters
from vla_ros.ros.qos import latched_qos
from vla_ros.ros.sim_msgs import camera_info_msg, image_msg, joint_state_msg
from vla_ros.ros.time import ns_from_time_msg, seconds_from_duration_msg, time_msg_from_ns
from vla_ros.sim import ArmSim, CommandError, PositionTrajectory, SimConfig
from vla_ros.sim.pacing import Pacing


class SimNode(Node):
    def __init__(self, **kwargs) -> None:
        super().__init__("sim", **kwargs)
        self.failed = False
        p = declare_parameters(self, PARAMS, on_change=self._on_param_change)
        self.sim = ArmSim(
            SimConfig(
                physics_rate_hz=p["physics_rate_hz"],
                joint_state_rate_hz=p["joint_state_rate_hz"],
                camera_rate_hz=p["camera_rate_hz"],
                clock_rate_hz=p["clock_rate_hz"],
                image_width=p["image_width"],
                image_height=p["image_height"],
            ),
            urdf_path=p["robot_description_file"] or None,
            seed=p["seed"],
            profile=p["robot_profile"] or None,
        )
        self._rtf = p["real_time_factor"]  # as requested; the physics thread applies it through _pacing
        self._pacing = Pacing(self._rtf)
        self._wake = threading.Event()  # ends the physics thread's pacing wait early when the factor changes
        self._publish_clock = p["publish_clock"]
        self._status_every = max(1, round(self.sim.config.physics_rate_hz / p["episode_status_rate_hz"]))
        self.diag = Diagnostics(self, hardware_id="mujoco")
        self._lock = threading.Lock()  # serialises the physics thread and ROS callbacks
        self._stop = threading.Event()
        self._stats = {
            "render_ms": [],
            "step_us": [],
            "commands_accepted": 0,
            "trajectories_accepted": 0,
            "last_rejection": "",
            "commands_before_reset": 0,
        }
        self._last_log: dict[str, float] = {}  # reason -> monotonic time of its last log line

        latched = latched_qos()
        self.pub_description = self.create_publisher(String, "/robot_description", latched)
        self.pub_clock = self.create_publisher(Clock, "/clock", 10)
        self.pub_joints = self.create_publisher(JointState, "/joint_states", 10)
        # Per published camera: (name, frame_id, image publisher, camera_info publisher); the hand camera
        # only when it is on (one more render per frame).
        published = [(cameras.FRONT, p["camera_frame_id"])]
        if p["wrist_camera"]:
            published.append((cameras.WRIST, cameras.optical_frame(cameras.WRIST)))
        self._cameras = [
            (
                name,
                frame_id,
                self.create_publisher(Image, cameras.image_topic(name), 5),
                self.create_publisher(CameraInfo, cameras.info_topic(name), 5),
            )
            for name, frame_id in published
        ]
        self.pub_status = self.create_publisher(String, "/vla/episode_status", latched)
        self.pub_reset = self.create_publisher(Header, EPISODE_RESET_TOPIC, episode_reset_qos())
        self.create_subscription(Float64MultiArray, f"/{p['position_controller']}/commands", self._on_commands, 10)
        self.create_subscription(
            JointTrajectory, f"/{p['trajectory_controller']}/joint_trajectory", self._on_trajectory, 10
        )
        self.create_service(Trigger, "~/reset", self._on_reset)

        self.pub_description.publish(String(data=self.sim.urdf_xml))
        self.pub_reset.publish(episode_reset_msg(self.sim.episode_start_ns, self.sim.episode))
        self.pub_status.publish(self._status_msg())
        self._thread = threading.Thread(target=self._run, name="physics", daemon=True)
        self._thread.start()
        self.get_logger().info(
            f"simulating {self.sim.profile.name}: {len(self.sim.command_joint_names)} joints, "
            f"{' + '.join(c[0] for c in self._cameras)} "
            f"{p['image_width']}x{p['image_height']} "
            f"@ {p['camera_rate_hz']} Hz, real_time_factor {self._rtf}, seed {self.sim.seed}"
        )

    # ---- parameters ------------------------------------------------------------------------------
    def _on_param_change(self, name: str, value) -> None:
        if name == "real_time_factor":
            self._rtf = float(value)
            self._pacing.set_factor(self._rtf)  # re-anchored at the change, not measured from the old anchor
            self._wake.set()  # a wait computed at the old factor (seconds at a low one) must not hold it up

    # ---- commands --------------------------------------------------------------------------------
    def _reject(self, source: str, err: CommandError) -> None:
        """Count, log (throttled per reason) and report a refused command. Commands sent before a reset
        (``before_reset``) are expected at every reset: counted apart, as dropped, not as bad input."""
        dropped = err.code == "before_reset"
        if dropped:
            self._stats["commands_before_reset"] += 1
        else:
            self.diag.count_rejection(err.code)
            self._stats["last_rejection"] = f"{source}: {err}"
        now = time.monotonic()
        if now - self._last_log.get(err.code, -1e9) >= 1.0:  # one throttled stream per reason
            self._last_log[err.code] = now
            if dropped:  # (two call sites: rclpy refuses one call site logging at two severities)
                self.get_logger().info(f"dropped {source}: {err}")
            else:
                self.get_logger().warning(f"rejected {source}: {err}")
        values = {"source": source, "reason": err.code, "detail": str(err)}
        values.update(self.diag.rejection_values())
        values["commands.before_reset"] = self._stats["commands_before_reset"]
        status = ("command dropped", OK) if dropped else ("command rejected", WARN)
        self.diag.publish(time_msg_from_ns(self.sim.time_ns), [(status[0], status[1], str(err), values)])

    def _on_commands(self, msg: Float64MultiArray) -> None:
        try:
            with self._lock:
                self.sim.command_positions(None, list(msg.data))
            self._stats["commands_accepted"] += 1
        except CommandError as err:
            self._reject("commands", err)

    def _on_trajectory(self, msg: JointTrajectory) -> None:
        try:
            traj = PositionTrajectory.from_points(
                list(msg.joint_names),
                [seconds_from_duration_msg(p.time_from_start) for p in msg.points],
                [list(p.positions) for p in msg.points],
                self.sim.limits,
                stamp_s=ns_from_time_msg(msg.header.stamp) * 1e-9,
            )
            with self._lock:
                self.sim.command_trajectory(traj)
            self._stats["trajectories_accepted"] += 1
        except CommandError as err:
            self._reject("joint_trajectory", err)

    def _on_reset(self, request, response):
        seed = self.get_parameter("seed").value
        restart = self.get_parameter("reset_clock_on_reset").value
        hold_s = float(self.get_parameter("reset_hold_s").value)
        with self._lock:
            cups = self.sim.reset(seed, restart_clock=restart, hold_s=hold_s)
            start_ns, episode = self.sim.episode_start_ns, self.sim.episode
            # Published under the lock: before any message of the new episode is even built (the physics
            # thread builds them under this lock), so it is out before all of them.
            self.pub_reset.publish(episode_reset_msg(start_ns, episode))
            self.pub_status.publish(self._status_msg())
        response.success = True
        response.message = json.dumps(
            {
                "seed": seed,
                "episode": episode,
                "start_ns": start_ns,
                "cups": {c: [round(float(v), 4) for v in p] for c, p in cups.items()},
            }
        )
        self.get_logger().info(f"episode {episode} reset with seed {seed}, starts at {start_ns * 1e-9:.6f} s")
        return response

    # ---- physics thread --------------------------------------------------------------------------
    def _run(self) -> None:
        cfg = self.sim.config
        window_wall, window_sim = time.perf_counter(), self.sim.time_s
        try:
            while not self._stop.is_set():
                with self._lock:
                    t0 = time.perf_counter()
                    self.sim.step()
                    self._stats["step_us"].append((time.perf_counter() - t0) * 1e6)
                    outputs = self._collect_outputs()
                for publish in outputs:
                    publish()
                if self.sim.step_count % cfg.steps_per_clock:
                    continue
                # Pace simulated time against wall time (vla_ros.sim.pacing). Cleared before the delay is
                # computed, so a factor change after this point ends the wait at once.
                self._wake.clear()
                delay_s = self._pacing.delay_s(self.sim.time_s, time.perf_counter())
                if delay_s > 0.0:
                    self._wake.wait(delay_s)
                if self.sim.step_count % cfg.physics_rate_hz == 0:  # once per simulated second
                    elapsed = time.perf_counter() - window_wall
                    self._publish_diagnostics((self.sim.time_s - window_sim) / max(elapsed, 1e-9))
                    window_wall, window_sim = time.perf_counter(), self.sim.time_s
        except Exception as err:  # never die silently: report, then stop the node
            self.failed = True  # first: whatever fails below, main() exits non-zero and the launcher says so
            self.get_logger().error(f"physics thread failed: {err!r}")
            try:
                self.diag.publish(
                    time_msg_from_ns(self.sim.time_ns), [("simulation", ERROR, f"physics thread failed: {err!r}", {})]
                )
            except Exception:  # noqa: BLE001 - publishing may be what failed; the log line has the reason
                pass
            rclpy.try_shutdown()  # ends spin() in the main thread; main() then exits non-zero
            raise
        finally:
            self.sim.close()  # the GL context is current in this thread, so it is released here

    def _collect_outputs(self) -> list:
        """Build the messages due at this step (under the lock); sensor messages are published outside it."""
        out = []
        sim = self.sim
        stamp = time_msg_from_ns(sim.time_ns)
        if self._publish_clock and sim.is_clock_step():
            clock = Clock(clock=stamp)
            out.append(lambda m=clock: self.pub_clock.publish(m))
        if sim.is_joint_state_step() and sim.time_ns > 0:  # a stamp of 0 reads as unstamped (joint_state_check)
            js = joint_state_msg(sim, stamp)
            out.append(lambda m=js: self.pub_joints.publish(m))
        if sim.is_frame_step():
            for name, frame_id, pub_image, pub_info in self._cameras:
                t0 = time.perf_counter()
                rgb = sim.render(name)
                self._stats["render_ms"].append((time.perf_counter() - t0) * 1e3)
                img = image_msg(rgb, stamp, frame_id)
                info = camera_info_msg(sim.camera_intrinsics(name), stamp, frame_id)
                out.append(lambda m=img, i=info, pi=pub_image, pc=pub_info: (pi.publish(m), pc.publish(i)))
        if sim.step_count % self._status_every == 0:
            # Published here, under the lock, like the reset's: the topic is latched, and an old episode's
            # status published after the new episode's would be what a late subscriber gets.
            self.pub_status.publish(self._status_msg())
        return out

    def _status_msg(self) -> String:
        """/vla/episode_status of the current state (call under the lock: one consistent state)."""
        return String(data=json.dumps(self.sim.status()))

    def _publish_diagnostics(self, achieved_rtf: float) -> None:
        render = self._stats["render_ms"] or [0.0]
        step = self._stats["step_us"] or [0.0]
        values = {
            "real_time_factor.target": self._rtf,
            "real_time_factor.achieved": achieved_rtf,
            "render_ms.p50": float(np.median(render)),
            "physics_step_us.p50": float(np.median(step)),
            "sim_time_s": self.sim.time_s,
            "episode": self.sim.episode,
            "episode_start_s": self.sim.episode_start_ns * 1e-9,
            "pacing.reanchors": self._pacing.reanchors,
            "seed": self.sim.seed,
            "commands.accepted": self._stats["commands_accepted"],
            "trajectories.accepted": self._stats["trajectories_accepted"],
            "commands.before_reset": self._stats["commands_before_reset"],
            "last_rejection": self._stats["last_rejection"],
        }
        values.update(self.diag.rejection_values())
        level, message = OK, "running"
        if self._rtf > 0 and achieved_rtf < 0.8 * self._rtf:
            level, message = WARN, f"slower than requested: real_time_factor {achieved_rtf:.2f} < {self._rtf:.2f}"
        self._stats["render_ms"].clear()
        self._stats["step_us"].clear()
        self.diag.publish(time_msg_from_ns(self.sim.time_ns), [("simulation", level, message, values)])

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5.0)


def main(args: list[str] | None = None) -> int:
    return run_node(SimNode, args)


if __name__ == "__main__":
    raise SystemExit(main())

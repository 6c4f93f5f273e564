"""sim_node: the embedded MuJoCo simulation behind the usual ROS 2 robot interfaces.

Publishes what a robot driver plus camera driver publish (``/clock`` in simulated time, ``/joint_states``
at 100 Hz, ``/camera/image_raw`` + ``/camera/camera_info`` at 30 Hz, ``/robot_description`` transient
local) and accepts the two ros2_control command interfaces: a forward position controller
(``/<position_controller>/commands``, Float64MultiArray) and a joint trajectory controller
(``/<trajectory_controller>/joint_trajectory``, JointTrajectory). Physics runs in its own thread, paced by
``real_time_factor`` (0 = as fast as possible); ROS callbacks only validate and hand over commands.
"""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import rclpy
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import CameraInfo, Image, JointState
from std_msgs.msg import Float64MultiArray, String
from std_srvs.srv import Trigger
from trajectory_msgs.msg import JointTrajectory

from vla_ros.ros.diagnostics import ERROR, OK, WARN, Diagnostics
from vla_ros.ros.node_main import run_node
from vla_ros.ros.params import ParamSpec, declare_parameters
from vla_ros.ros.sim_msgs import camera_info_msg, image_msg, joint_state_msg
from vla_ros.ros.time import ns_from_time_msg, seconds_from_duration_msg, time_msg_from_ns
from vla_ros.sim import ArmSim, CommandError, PositionTrajectory, SimConfig

PARAMS = [
    ParamSpec("robot_description_file", "", "URDF to simulate; empty = the bundled vla_arm.urdf", read_only=True),
    ParamSpec("seed", 0, "episode seed used by the initial episode and by ~/reset (cup positions)", min_value=0, max_value=2**31 - 1),
    ParamSpec("real_time_factor", 1.0, "simulated seconds per wall second; 0 = as fast as possible", min_value=0.0, max_value=100.0),
    ParamSpec("physics_rate_hz", 600, "physics steps per simulated second", read_only=True, min_value=100, max_value=10000),
    ParamSpec("joint_state_rate_hz", 100, "/joint_states rate in simulated time (divides physics_rate_hz)", read_only=True, min_value=1, max_value=1000),
    ParamSpec("camera_rate_hz", 30, "camera rate in simulated time (divides physics_rate_hz)", read_only=True, min_value=1, max_value=120),
    ParamSpec("clock_rate_hz", 200, "/clock rate in simulated time (divides physics_rate_hz)", read_only=True, min_value=1, max_value=10000),
    ParamSpec("image_width", 320, "camera image width in pixels", read_only=True, min_value=16, max_value=1920),
    ParamSpec("image_height", 240, "camera image height in pixels", read_only=True, min_value=16, max_value=1080),
    ParamSpec("camera_frame_id", "camera_optical_frame", "frame_id of images and camera_info", read_only=True),
    ParamSpec("publish_clock", True, "publish /clock (turn off when another node owns simulated time)", read_only=True),
    ParamSpec("reset_clock_on_reset", False, "restart simulated time at 0 on ~/reset (as Gazebo does); default keeps time monotonic"),
    ParamSpec("position_controller", "forward_position_controller", "forward controller name: commands on /<name>/commands", read_only=True),
    ParamSpec("trajectory_controller", "joint_trajectory_controller", "trajectory controller name: /<name>/joint_trajectory", read_only=True),
    ParamSpec("episode_status_rate_hz", 10.0, "rate of /vla/episode_status in simulated time", read_only=True, min_value=0.1, max_value=100.0),
]


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
        )
        self._rtf = p["real_time_factor"]
        self._frame_id = p["camera_frame_id"]
        self._publish_clock = p["publish_clock"]
        self._status_every = max(1, round(self.sim.config.physics_rate_hz / p["episode_status_rate_hz"]))
        self.diag = Diagnostics(self, hardware_id="mujoco")
        self._lock = threading.Lock()  # serialises the physics thread and ROS callbacks
        self._stop = threading.Event()
        self._stats = {"render_ms": [], "step_us": [], "commands_accepted": 0, "trajectories_accepted": 0, "last_rejection": ""}

        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL, reliability=ReliabilityPolicy.RELIABLE)
        self.pub_description = self.create_publisher(String, "/robot_description", latched)
        self.pub_clock = self.create_publisher(Clock, "/clock", 10)
        self.pub_joints = self.create_publisher(JointState, "/joint_states", 10)
        self.pub_image = self.create_publisher(Image, "/camera/image_raw", 5)
        self.pub_info = self.create_publisher(CameraInfo, "/camera/camera_info", 5)
        self.pub_status = self.create_publisher(String, "/vla/episode_status", latched)
        self.create_subscription(Float64MultiArray, f"/{p['position_controller']}/commands", self._on_commands, 10)
        self.create_subscription(JointTrajectory, f"/{p['trajectory_controller']}/joint_trajectory", self._on_trajectory, 10)
        self.create_service(Trigger, "~/reset", self._on_reset)

        self.pub_description.publish(String(data=self.sim.urdf_xml))
        self._publish_status()
        self._thread = threading.Thread(target=self._run, name="physics", daemon=True)
        self._thread.start()
        self.get_logger().info(
            f"simulating {len(self.sim.command_joint_names)} joints, camera {p['image_width']}x{p['image_height']} "
            f"@ {p['camera_rate_hz']} Hz, real_time_factor {self._rtf}, seed {self.sim.seed}"
        )

    # ---- parameters ------------------------------------------------------------------------------
    def _on_param_change(self, name: str, value) -> None:
        if name == "real_time_factor":
            self._rtf = float(value)

    # ---- commands --------------------------------------------------------------------------------
    def _reject(self, source: str, err: CommandError) -> None:
        self.diag.count_rejection(err.code)
        self._stats["last_rejection"] = f"{source}: {err}"
        self.get_logger().warning(f"rejected {source}: {err}", throttle_duration_sec=1.0)
        values = {"source": source, "reason": err.code, "detail": str(err)}
        values.update(self.diag.rejection_values())
        self.diag.publish(time_msg_from_ns(self.sim.time_ns), [("command rejected", WARN, str(err), values)])

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
        with self._lock:
            step_before = self.sim.step_count
            cups = self.sim.reset(seed)
            if not restart:
                self.sim.step_count = step_before  # keep simulated time monotonic across episodes
        self._publish_status()
        response.success = True
        response.message = json.dumps({"seed": seed, "cups": {c: [round(float(v), 4) for v in p] for c, p in cups.items()}})
        self.get_logger().info(f"episode {self.sim.episode} reset with seed {seed}")
        return response

    # ---- physics thread --------------------------------------------------------------------------
    def _run(self) -> None:
        cfg = self.sim.config
        wall_anchor, sim_anchor = time.perf_counter(), self.sim.time_s
        window_wall, window_sim = wall_anchor, sim_anchor
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
                # Pace simulated time against wall time; re-anchor after a stall instead of bursting.
                now = time.perf_counter()
                rtf = self._rtf
                if rtf > 0.0:
                    ahead_s = (self.sim.time_s - sim_anchor) / rtf - (now - wall_anchor)
                    if ahead_s > 0.0:
                        time.sleep(ahead_s)
                    elif ahead_s < -0.25:
                        wall_anchor, sim_anchor = now, self.sim.time_s
                else:
                    wall_anchor, sim_anchor = now, self.sim.time_s
                if self.sim.step_count % cfg.physics_rate_hz == 0:  # once per simulated second
                    elapsed = time.perf_counter() - window_wall
                    self._publish_diagnostics((self.sim.time_s - window_sim) / max(elapsed, 1e-9))
                    window_wall, window_sim = time.perf_counter(), self.sim.time_s
        except Exception as err:  # never die silently: report, then stop the node
            self.failed = True  # first: whatever fails below, main() exits non-zero and the launcher says so
            self.get_logger().error(f"physics thread failed: {err!r}")
            try:
                self.diag.publish(time_msg_from_ns(self.sim.time_ns), [("simulation", ERROR, f"physics thread failed: {err!r}", {})])
            except Exception:  # noqa: BLE001 - publishing may be what failed; the log line has the reason
                pass
            rclpy.try_shutdown()  # ends spin() in the main thread; main() then exits non-zero
            raise
        finally:
            self.sim.close()  # the GL context is current in this thread, so it is released here

    def _collect_outputs(self) -> list:
        """Build the messages due at this step (under the lock); publishing happens outside it."""
        out = []
        sim = self.sim
        stamp = time_msg_from_ns(sim.time_ns)
        if self._publish_clock and sim.is_clock_step():
            clock = Clock(clock=stamp)
            out.append(lambda m=clock: self.pub_clock.publish(m))
        if sim.is_joint_state_step():
            js = joint_state_msg(sim, stamp)
            out.append(lambda m=js: self.pub_joints.publish(m))
        if sim.is_frame_step():
            t0 = time.perf_counter()
            rgb = sim.render()
            self._stats["render_ms"].append((time.perf_counter() - t0) * 1e3)
            img = image_msg(rgb, stamp, self._frame_id)
            info = camera_info_msg(sim.camera_intrinsics(), stamp, self._frame_id)
            out.append(lambda m=img, i=info: (self.pub_image.publish(m), self.pub_info.publish(i)))
        if sim.step_count % self._status_every == 0:
            out.append(self._publish_status)
        return out

    def _publish_status(self) -> None:
        self.pub_status.publish(String(data=json.dumps(self.sim.status())))

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
            "seed": self.sim.seed,
            "commands.accepted": self._stats["commands_accepted"],
            "trajectories.accepted": self._stats["trajectories_accepted"],
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

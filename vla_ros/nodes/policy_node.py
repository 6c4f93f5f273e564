"""policy_node: camera + joint states + instruction -> timed tokens -> streaming Transformer -> action chunks.

A thin shell around ``vla_ros.policy.PolicySession`` (the same object the in-process evaluation drives):

* intake: subscription callbacks hand each message to the session (converted and admitted in well under a
  millisecond, counted per source: received, lost in transport as the stamps show, rejected by reason);
* ticks: a timer (``rate_hz``, node clock) and/or each accepted frame (``tick_on_frame``) wakes the tick
  thread, which runs inference and publishes the chunk (JointTrajectory stamped with the newest
  observation). Intake never waits behind inference, and the node's clock keeps moving while a tick runs
  (the executor thread keeps taking ``/clock``), so the ages the node reports are real;
* instructions (``/vla/instruction``, the ``instruction`` parameter): bounded before any work
  (``max_instruction_bytes``, then one taken per ``min_instruction_interval_s``, the newest winning:
  ``policy.input_checks.InstructionGate``) and encoded on their own thread, so neither the intake nor a
  tick waits for the text encoder; then the instruction check (``policy.grounding``): one the model cannot
  ground is refused (WARN with the text and the score) and no chunk goes out until an accepted one arrives.
  Every outcome is published on ``~/instruction_status`` (latched JSON: accepted or refused, why, the
  target, the score);
* ``/vla/episode_reset``: the window and the KV cache forget the previous episode;
* watchdogs on the wall clock: a source silent for ``source_timeout_s`` is reported at ERROR at once (also
  when simulated time stands still because the simulator died); ``/diagnostics`` is published on wall time.

No model, no instruction (or a refused one), no recent joint state, no recent camera frame or a frozen camera
(one picture repeated over ``frozen_camera_s`` of stamps): no chunk, and ``/diagnostics`` says which. Its
``inputs`` status is WARN while inputs are refused for what they are (an encoding the model does not take, a
camera's size or encoding changed, a bad joint state, an instruction too long, replaced in a flood or refused by
the instruction check: within the last second, wall) or a camera is frozen; refusals for timing (late,
duplicate, ...) are counted only.

With ``debug_attention``, right after a chunk (at most ``debug_attention_rate_hz``) the newest frame is
published on ``~/attention_overlay`` with the heat map of its patches' attention to the instruction's
colour word, as ``vla-ros attention`` draws it.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_msgs.msg import Header, String
from trajectory_msgs.msg import JointTrajectory

from vla_ros.latency import StageTime
from vla_ros.model.io import resolve_model_dir
from vla_ros.params.policy import PARAMS, session_config_from_params, shaping_limits_from_params
from vla_ros.params.robot import robot_files
from vla_ros.params.tightening import ParamChange
from vla_ros.policy.input_checks import InstructionGate, instruction_size_error
from vla_ros.reasons import INSTRUCTION_TOO_LONG, MODEL_INPUT_ERROR, NON_FINITE_OUTPUT, TICK_ERROR
from vla_ros.robot_profile import profile_for_model
from vla_ros.ros.chunk_msgs import msg_from_chunk
from vla_ros.ros.chunk_timing import ChunkTimingPublisher
from vla_ros.ros.diagnostics import ERROR, OK, WARN, Diagnostics
from vla_ros.ros.episode import EPISODE_RESET_TOPIC, episode_reset_qos, reset_from_msg
from vla_ros.ros.instruction_status import INSTRUCTION_STATUS
from vla_ros.ros.node_main import run_node
from vla_ros.ros.param_guard import ParamGuard
from vla_ros.ros.params import declare_parameters
from vla_ros.ros.qos import incompatible_qos_events, latched_qos, sensor_qos
from vla_ros.ros.rejections import ReasonLog
from vla_ros.ros.time import time_msg_from_ns
from vla_ros.ros.watchdog import CHECK_RATE_HZ, NS, InputWatch, Watchdog
from vla_ros.tokens.stream import TIMING_REJECTIONS
from vla_ros.urdf_limits import limits_for

# Subscription queues hold this much of each input at its nominal rate: the executor thread only converts
# messages (well under a millisecond each), so only a stall of the whole process (a model change, a CPU
# taken by other work) needs a queue at all; at 100 Hz joints and 30 Hz frames that is 50 and 15 messages.
# A deeper queue would not save anything: a message held longer is older than the shipped model's window
# (0.5 s + 0.1 s lateness) when it comes out, and is dropped as late instead of by DDS.
INTAKE_SLACK_S = 0.5
REFUSAL_HOLD_S = 1.0  # wall clock: the inputs status is WARN while inputs were refused this recently
INSTRUCTION_PARAM = "parameter instruction"  # the source named for refusals of the instruction parameter
SWITCH_INTERVAL_S = 0.0005  # see main
MAX_ALIGN_WAIT_S = 0.02  # a tick waits at most this long for the joint state of its instant


class _Series:
    """Figures of the ticks since the last diagnostics report (written by the tick thread, read by the
    executor thread)."""

    NAMES = (
        "inference_ms",
        "inference_cpu_ms",
        "observation_age_ms",
        "arrival_age_ms",
        "in_node_wall_ms",
        "tick_delay_ms",
        "wait_for_tick_ms",
        "shaping_ms",
        "publish_ms",
        "debug_attention.ms",
    )

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data = {name: [] for name in self.NAMES}

    def add(self, name: str, value: float) -> None:
        with self._lock:
            self._data[name].append(value)

    def take(self) -> dict[str, list[float]]:
        with self._lock:
            data, self._data = self._data, {name: [] for name in self.NAMES}
        return data


class PolicyNode(Node):
    def __init__(self, **kwargs) -> None:
        super().__init__("policy", **kwargs)
        self.failed = False
        # The policy guards no safety check: no change is a loosening. Its build loads and checks a new model
        # before anything changes, so one that fails is refused with the reason and the running one stays.
        self.guard = ParamGuard(self, PARAMS, {})
        p = declare_parameters(self, PARAMS, on_change=self._on_param_change)
        self._p = p
        self.guard.install(p, build=self._build_params, apply=self._apply_params, allow_loosening=False)
        self.diag = Diagnostics(self, hardware_id="policy")
        self.session = None
        self._model_error = ""
        self._instruction_text = ""  # kept for a model loaded later
        self._counts: dict[str, int] = {}  # node-level events (no model, incompatible QoS, tick errors)
        self._series = _Series()
        self._status = ("starting", "starting")  # (code, message) of the last tick
        self._reported = None  # ((level, message), inputs key) last published, to publish at once on a change
        self.watchdog = Watchdog({})  # the session's sources, silent on the wall clock (_check_inputs)
        # Refused inputs: logged per reason; those refused for what they are (not their timing) are noted
        # for the inputs status (their counts are the session's and the gate's).
        self.rejections = ReasonLog(self.get_logger().warning, recent_s=REFUSAL_HOLD_S)
        self._gate = InstructionGate(p["max_instruction_bytes"], p["min_instruction_interval_s"])
        self._attention = {"published": 0, "errors": 0, "last_ns": None, "model": None}
        self._frame = None  # (stamp_ns, type name, message) of the newest camera frame, only for debug_attention
        self._last_chunk: tuple[int, float] | None = None  # (stamp ns, observation age ms at publish)
        self.pub_attention = None
        # Chunk shaping (shape_chunks): the URDF the filter's limits come from, and limits per joint list.
        self._urdf: str | None = None
        self._urdf_dir: Path | None = None  # relative mesh paths of robot_description_file resolve here
        self._shaping_cache: dict[tuple[str, ...], tuple[object, str]] = {}
        self._shaping_problem = "waiting for /robot_description"
        try:
            urdf_file = robot_files(p).urdf
        except ValueError as err:  # a profile that does not load: shaping says why, the node runs on
            urdf_file, self._shaping_problem = "", str(err)
        if urdf_file:
            try:
                self._urdf = Path(urdf_file).read_text(encoding="utf-8")
                self._urdf_dir = Path(urdf_file).parent
            except OSError as err:
                self._shaping_problem = f"cannot read robot_description_file: {err}"
        self.session = self._load(p["model"], raise_on_error=False)

        mc = self.session.policy.config if self.session is not None else None
        camera_hz, state_hz = (mc.camera_rate_hz, mc.state_rate_hz) if mc is not None else (30.0, 100.0)
        self.pub_chunk = self.create_publisher(JointTrajectory, "/vla/action_chunk", 10)
        self.timing = ChunkTimingPublisher(self, "policy")
        # the newest instruction's outcome (accepted or refused, why, the target, the score) as JSON, latched
        self.pub_instruction_status = self.create_publisher(String, INSTRUCTION_STATUS, latched_qos())
        if p["debug_attention"]:
            self._set_attention_publisher(True)
        self._image_qos = sensor_qos(p["sensor_qos"], math.ceil(camera_hz * INTAKE_SLACK_S))
        # further cameras of the model (a wrist camera): topic -> subscription
        self._camera_subs: dict[str, object] = {}
        if p["image_transport"] == "compressed":
            self._subscribe_sensor(CompressedImage, p["image_topic"] + "/compressed", self._on_compressed)
        else:
            self._subscribe_sensor(Image, p["image_topic"], self._on_image)
        self._sync_camera_subscriptions(self.session)
        self._subscribe_sensor(
            JointState,
            "/joint_states",
            self._on_joints,
            sensor_qos(p["sensor_qos"], math.ceil(state_hz * INTAKE_SLACK_S)),
        )
        self.create_subscription(String, "/vla/instruction", self._on_instruction, latched_qos())
        self.create_subscription(Header, EPISODE_RESET_TOPIC, self._on_episode_reset, episode_reset_qos())
        if self._urdf is None and self._shaping_problem == "waiting for /robot_description":
            self.create_subscription(String, "/robot_description", self._on_description, latched_qos())

        self._due = threading.Event()  # a tick is due
        self._due_ns = 0  # node clock when it fell due
        self._due_wall_s = 0.0  # wall clock when it fell due (tick_delay_ms)
        self._wake = threading.Event()  # the tick thread has work
        self._instruction_wake = threading.Event()  # an instruction waits at the gate
        self._stop = threading.Event()
        self._worker = threading.Thread(target=self._tick_loop, name="policy_tick", daemon=True)
        self._worker.start()
        self._encoder = threading.Thread(target=self._instruction_loop, name="policy_instruction", daemon=True)
        self._encoder.start()
        if p["rate_hz"] > 0:
            self.create_timer(1.0 / p["rate_hz"], self._request_tick)  # node clock: simulated time in the sim
        wall = Clock(clock_type=ClockType.STEADY_TIME)
        self.create_timer(p["diagnostics_period_s"], self._publish_diagnostics, clock=wall)
        self.create_timer(min(1.0 / CHECK_RATE_HZ, p["source_timeout_s"] / 2), self._check_inputs, clock=wall)
        if p["instruction"]:
            self._request_instruction(p["instruction"], INSTRUCTION_PARAM)

    # ---- model -------------------------------------------------------------------------------------
    def _load(self, model: str, raise_on_error: bool):
        """A new session for ``model``, checked; on failure None and the reason in ``_model_error`` (or
        raised as ValueError with ``raise_on_error``)."""
        from vla_ros.policy import PolicySession

        folder = resolve_model_dir(model)
        p = self._p
        try:
            if p["robot_profile"].strip():  # a model for another arm: refused here, not chunk by chunk at the filter
                profile_for_model(folder, p["robot_profile"])
            session = PolicySession.from_pretrained(
                folder,
                backend=p["backend"],
                device=p["device"],
                threads=p["threads"] or None,
                config=session_config_from_params(p),
            )
        except (FileNotFoundError, ValueError, OSError, RuntimeError) as err:
            reason = f"cannot load model {folder}: {err}"
            if raise_on_error:
                raise ValueError(reason) from err
            self._model_error = reason
            self.get_logger().error(reason)
            return None
        if self._instruction_text:  # checked by the new model's own instruction check, reported once it runs
            session.set_instruction(self._instruction_text)
        session.set_camera_topics(self._camera_topics(session))
        self._apply_session_config(session)
        cfg = session.policy.config
        self.get_logger().info(
            f"model {folder.name}: {cfg.num_hidden_layers} layers, window {cfg.window_seconds} s, chunk "
            f"{cfg.chunk_length} @ {cfg.chunk_rate_hz} Hz, backend {p['backend']} ({session.policy.backend.describe()})"
        )
        return session

    # ---- parameters (ParamGuard: a request is built whole before anything changes) ---------------------
    def _build_params(self, values: dict):
        """The new session a request's model change loads and checks (None: the model stays); raises
        ValueError with the reason, so the request is refused and nothing changes. A new instruction that is
        too long is refused here, so the parameter keeps the one in force."""
        text = values["instruction"]
        if text and text != self._p["instruction"]:
            reason = instruction_size_error(text, values["max_instruction_bytes"])
            if reason is not None:
                self.rejections.reject(INSTRUCTION_PARAM, INSTRUCTION_TOO_LONG, reason)
                raise ValueError(reason)
        if values["model"] == self._p["model"]:
            return None
        try:
            return self._load(values["model"], raise_on_error=True)
        except ValueError as err:
            self.get_logger().error(f"model change refused: {err}; keeping {self._p['model']}")
            raise

    def _apply_params(self, session, values: dict, changes: list[ParamChange]) -> None:
        """A request the guard accepted: the node follows the new values (a new model's session included)."""
        self._p = dict(values)
        if session is not None:
            self.session, self._model_error = session, ""
            self._attention["model"] = None
            self._sync_camera_subscriptions(session)
            if session.instruction_status:  # the instruction in force, as the new model's check judged it
                self._report_instruction(session, None if session.instruction_refused else session.instruction)
        self._gate.max_bytes = int(values["max_instruction_bytes"])
        self._gate.min_interval_s = float(values["min_instruction_interval_s"])
        self._instruction_wake.set()  # a shorter interval may let a waiting instruction through now
        self._set_attention_publisher(bool(values["debug_attention"]))
        if any(change.name.startswith("shaping_") for change in changes):
            self._shaping_cache.clear()
        self._apply_session_config(self.session)

    def _on_param_change(self, name: str, value) -> None:
        self.guard.on_change(name, value)  # the whole request, once
        if name == "instruction" and value:  # also the same text again: the parameter's instruction wins anew
            self._request_instruction(value, INSTRUCTION_PARAM)

    # ---- cameras -------------------------------------------------------------------------------------
    def _subscribe_sensor(self, msg_type, topic: str, callback, qos=None):
        """A camera (``qos`` None: the image QoS) or joint-state subscription: ``sensor_qos``, and a publisher
        whose QoS cannot match is counted (``events.incompatible_qos``) and logged with the fix."""
        events = incompatible_qos_events(self, topic, self._count)
        return self.create_subscription(
            msg_type, topic, callback, self._image_qos if qos is None else qos, event_callbacks=events
        )

    def _camera_topics(self, session) -> list[str]:
        """Image topic of each of the model's cameras: ``image_topic`` for the first (main) one, then
        ``/<name>/image_raw`` (``vla_ros.cameras``; remap it for another driver's name)."""
        from vla_ros.cameras import image_topic

        return [self._p["image_topic"]] + [image_topic(name) for name in session.cameras[1:]]

    def _sync_camera_subscriptions(self, session) -> None:
        """Subscribe to the further cameras the model reads and drop those it no longer does (a model change)."""
        wanted = self._camera_topics(session)[1:] if session is not None else []
        for topic in [t for t in self._camera_subs if t not in wanted]:
            self.destroy_subscription(self._camera_subs.pop(topic))
        compressed = self._p["image_transport"] == "compressed"
        for topic in [t for t in wanted if t not in self._camera_subs]:
            if compressed:
                callback = lambda msg, t=topic: self._on_frame(  # noqa: E731
                    "sensor_msgs/msg/CompressedImage", msg, t + "/compressed"
                )
                sub = self._subscribe_sensor(CompressedImage, topic + "/compressed", callback)
            else:
                callback = lambda msg, t=topic: self._on_frame("sensor_msgs/msg/Image", msg, t)  # noqa: E731
                sub = self._subscribe_sensor(Image, topic, callback)
            self._camera_subs[topic] = sub
            self.get_logger().info(
                f"the model reads a further camera: subscribed to {topic}{'/compressed' if compressed else ''}"
            )

    # ---- chunk shaping -------------------------------------------------------------------------------
    def _on_description(self, msg: String) -> None:
        self._urdf = msg.data
        self._shaping_cache.clear()
        self._apply_session_config(self.session)

    def _chunk_limits(self, session):
        """The safety filter's limits for ``session``'s joints (``policy.shaping``), or None: shaping off, or
        not possible (the reason in ``_shaping_problem``)."""
        if not self._p["shape_chunks"] or session is None:
            return None
        if self._urdf is None:
            return None
        names = tuple(session.policy.config.joint_names)
        if names not in self._shaping_cache:
            try:
                self._shaping_cache[names] = (
                    shaping_limits_from_params(self._p, self._urdf, names, base_dir=self._urdf_dir),
                    "",
                )
            except ValueError as err:
                self._shaping_cache[names] = (None, f"cannot shape chunks: {err}")
                self.get_logger().error(
                    f"cannot shape chunks into the safety filter's limits: {err}; chunks go out as decoded"
                )
        limits, self._shaping_problem = self._shaping_cache[names]
        return limits

    def _apply_session_config(self, session) -> None:
        """The parameters' session configuration, shaping limits included (the session reads it once per tick)."""
        if session is not None:
            session.config = session_config_from_params(self._p, self._chunk_limits(session))
            if self._urdf is not None:
                # joint states that jump beyond the robot's own limits are refused, as by the filter and the controller
                try:
                    session.set_state_velocity_limits(limits_for(self._urdf, session.tokenizer.joint_names).velocity)
                except ValueError as err:
                    self.get_logger().warning(f"joint-state jump check off: {err}")

    def _shaping_state(self) -> str:
        """'on', 'off', or why chunks are not shaped although shape_chunks asks for it."""
        session = self.session
        if not self._p["shape_chunks"]:
            return "off"
        if session is not None and session.config.chunk_limits is not None:
            return "on"
        return self._shaping_problem

    # ---- inputs (executor thread) --------------------------------------------------------------------
    def _now_ns(self) -> int:
        return self.get_clock().now().nanoseconds

    def _count(self, event: str) -> None:
        self._counts[event] = self._counts.get(event, 0) + 1

    def _admit(self, type_name: str, msg, source: str):
        session = self.session
        if session is None:
            self._count("input_without_model")
            return None
        obs, rejection = session.add_message(type_name, msg, self._now_ns(), source)
        if obs is None and rejection:
            code, _, detail = rejection.partition(": ")
            detail = detail.removeprefix(f"{source}: ")  # the stream names the source; the status does
            if code in TIMING_REJECTIONS:  # late, duplicate, ...: a loaded machine or a reset, counted only
                self.rejections.reject(source, code, detail, log_only=True)
            else:  # what was sent is wrong (encoding, size, a joint state): WARN while it goes on
                self.rejections.reject(source, code, detail)
        return obs

    def _on_image(self, msg: Image) -> None:
        self._on_frame("sensor_msgs/msg/Image", msg, self._p["image_topic"])

    def _on_compressed(self, msg: CompressedImage) -> None:
        self._on_frame("sensor_msgs/msg/CompressedImage", msg, self._p["image_topic"] + "/compressed")

    def _on_frame(self, type_name: str, msg, source: str) -> None:
        obs = self._admit(type_name, msg, source)
        if obs is None:
            return
        if self._p["debug_attention"] and obs.camera == 0:  # the overlay is drawn on the main view
            self._frame = (obs.stamp_ns, type_name, msg)  # a reference: decoded again only for an overlay
        if self._p["tick_on_frame"]:
            self._request_tick()

    def _on_joints(self, msg: JointState) -> None:
        self._admit("sensor_msgs/msg/JointState", msg, "/joint_states")

    def _on_instruction(self, msg: String) -> None:
        self._request_instruction(msg.data, "/vla/instruction")

    def _request_instruction(self, text: str, source: str) -> None:
        """Through the gate (size, then rate: ``InstructionGate``); the instruction thread encodes what it lets
        through (MiniLM: tens of milliseconds, seconds on a loaded machine), so neither the intake nor a tick
        waits for the text encoder."""
        for code, detail in self._gate.offer(text, time.monotonic()):
            self.rejections.reject(source, code, detail)
        self._instruction_wake.set()

    def _request_tick(self) -> None:
        self._due_ns = self._now_ns()
        if not self._due.is_set():
            self._due_wall_s = time.monotonic()
        self._due.set()
        self._wake.set()

    # ---- instructions (instruction thread) ----------------------------------------------------------
    def _instruction_loop(self) -> None:
        """Encode what the gate lets through, when its turn comes (``min_instruction_interval_s``)."""
        while not self._stop.is_set():
            self._instruction_wake.clear()
            text = self._gate.take(time.monotonic())
            if text is None:
                wait = self._gate.wait_s(time.monotonic())
                self._instruction_wake.wait(timeout=0.2 if wait is None else min(wait, 0.2))
                continue
            self._instruction_text = text  # kept for a model loaded later
            try:
                self._apply_instruction(text)
            except Exception as err:  # noqa: BLE001 - the thread must outlive one bad instruction; say why
                self._count("instruction_errors")
                self.get_logger().error(f"instruction failed: {type(err).__name__}: {err}", throttle_duration_sec=2.0)

    def _apply_instruction(self, text: str) -> None:
        session = self.session
        if session is None:
            return
        t0 = time.perf_counter()
        instruction = session.set_instruction(text, self._now_ns())
        self._report_instruction(session, instruction, (time.perf_counter() - t0) * 1e3)

    def _report_instruction(self, session, instruction, ms: float | None = None) -> None:
        """Log the newest instruction's outcome (a refusal counted and named on /diagnostics) and publish it
        on ``~/instruction_status``."""
        if instruction is None:
            code, _, detail = session.instruction_rejection.partition(": ")
            self.rejections.reject("instruction", code, detail)
        else:
            took = "" if ms is None else f", {ms:.0f} ms to encode and check"
            g = session.grounding
            self.get_logger().info(
                f"instruction: {instruction.text!r} -> {len(instruction.tokens)} tokens{took}"
                + (f"; {g.summary()}" if g is not None else "")
            )
        status = dict(session.instruction_status, stamp_s=round(self._now_ns() * 1e-9, 9))
        if self.context.ok():
            self.pub_instruction_status.publish(String(data=json.dumps(status)))

    def _on_episode_reset(self, msg: Header) -> None:
        start_ns, episode = reset_from_msg(msg)
        session = self.session
        if session is not None and session.begin_episode(start_ns):
            self._frame = None
            self.get_logger().info(f"episode {episode} begins at {start_ns * 1e-9:.3f} s: window and cache cleared")

    # ---- ticks (tick thread) --------------------------------------------------------------------------
    def _tick_loop(self) -> None:
        while not self._stop.is_set():
            if not self._wake.wait(timeout=0.2):
                continue
            self._wake.clear()
            if self._stop.is_set():
                break
            if not self._due.is_set():
                continue
            due_wall_s = self._due_wall_s  # read before clearing: a new request may set it after
            self._due.clear()
            self._series.add("tick_delay_ms", (time.monotonic() - due_wall_s) * 1e3)
            try:
                self._tick()
            except Exception as err:  # noqa: BLE001 - the tick thread must outlive one bad tick; say why
                self._count("tick_errors")
                self._status = (TICK_ERROR, f"tick failed: {type(err).__name__}: {err}")
                self.get_logger().error(self._status[1], throttle_duration_sec=2.0)

    def _tick(self) -> None:
        session = self.session
        if session is None:
            self._status = ("no_model", self._model_error or "no model")
            return
        # Anchor on the joint state of the tick's own instant: in the sim it is published right behind the
        # /clock message that fired the timer, so a tick that starts first would use the one before (a
        # period older). Wait for it, at most one joint-state period (wall).
        period = session.state_period_s()
        if period is not None:
            session.wait_for_state(self._due_ns, min(period, MAX_ALIGN_WAIT_S))
        tick_ns = self._now_ns()
        result = session.tick(tick_ns)
        if result.chunk is None:
            if result.skip == MODEL_INPUT_ERROR:
                self.get_logger().error(f"tick failed: {result.detail}", throttle_duration_sec=2.0)
            self._status = (result.skip, result.detail)
            self._report_if_changed()
            return
        if self._stop.is_set():
            return  # shutting down: the publisher may be gone
        now_ns = self._now_ns()  # the clock at publish, read first: the reported age is never ahead of the sending
        msg = msg_from_chunk(result.chunk)
        # timed as it is handed to DDS: a subscriber on this host may have it before publish() returns
        published_ns = time.monotonic_ns()
        self.pub_chunk.publish(msg)
        wall_s = time.monotonic()
        stamp = result.chunk.stamp_ns
        self._time_stages(result, tick_ns, StageTime(published_ns, now_ns))
        self._series.add("inference_ms", result.infer_ms)
        self._series.add("inference_cpu_ms", result.infer_cpu_ms)
        self._series.add("observation_age_ms", (now_ns - stamp) * 1e-6)
        self._last_chunk = (stamp, (now_ns - stamp) * 1e-6)
        if result.anchor_arrival is not None:
            arrival_wall_s, arrival_ns = result.anchor_arrival
            self._series.add("in_node_wall_ms", (wall_s - arrival_wall_s) * 1e3)
            if arrival_ns is not None:
                self._series.add("arrival_age_ms", (arrival_ns - stamp) * 1e-6)
        self._status = ("publishing", "publishing chunks")
        self._report_if_changed()
        if self._p["debug_attention"]:
            self._publish_attention(session)

    def _time_stages(self, result, tick_ns: int, published: StageTime) -> None:
        """The chunk's stages in this node (``vla_ros.latency``) on /vla/chunk_timing and in the series."""
        marks = result.marks
        stages = {
            "tick_start": StageTime(marks["tick_start"], tick_ns),
            "inferred": StageTime(marks["inferred"]),
            "shaped": StageTime(marks["shaped"]),
            "published": published,
        }
        if result.anchor_arrival is not None:
            arrival_wall_s, arrival_ns = result.anchor_arrival
            stages = {"received": StageTime(round(arrival_wall_s * 1e9), arrival_ns), **stages}
            self._series.add("wait_for_tick_ms", (marks["tick_start"] - stages["received"].mono_ns) * 1e-6)
        self._series.add("shaping_ms", (marks["shaped"] - marks["inferred"]) * 1e-6)
        self._series.add("publish_ms", (published.mono_ns - marks["shaped"]) * 1e-6)
        self.timing.publish(result.chunk.stamp_ns, stages)

    # ---- debug: attention overlay --------------------------------------------------------------------
    def _set_attention_publisher(self, on: bool) -> None:
        """The overlay topic exists only while debug_attention is true."""
        if on and self.pub_attention is None:
            self.pub_attention = self.create_publisher(Image, "~/attention_overlay", 1)
        elif not on and self.pub_attention is not None:
            pub, self.pub_attention, self._frame = self.pub_attention, None, None
            self.destroy_publisher(pub)

    def _publish_attention(self, session) -> None:
        """The newest frame with its patches' attention to the colour word, after the chunk is out (its
        latency is untouched; the next tick waits). Failures are counted and logged, never raised."""
        from vla_ros.evaluation.attention import live_overlay
        from vla_ros.ros.sim_msgs import image_msg
        from vla_ros.tokens import Kind
        from vla_ros.tokens.convert import rgb_from_compressed_msg, rgb_from_image_msg

        pub, frame, state = self.pub_attention, self._frame, self._attention
        now, last = self._now_ns(), state["last_ns"]
        if pub is None or (last is not None and last <= now < last + 1e9 / self._p["debug_attention_rate_hz"]):
            return  # (a clock that jumped back starts over)
        window = session.window()
        frames = [o for o in window if o.kind == Kind.IMAGE and o.camera == 0]
        if not frames or frame is None or frame[0] != frames[-1].stamp_ns:
            return  # the kept frame is not the window's newest (none yet, or one arrived out of order)
        state["last_ns"] = now  # set before trying: a failing overlay is retried at the same rate
        t0 = time.perf_counter()
        try:
            _, type_name, msg = frame
            rgb = rgb_from_compressed_msg(msg) if type_name.endswith("CompressedImage") else rgb_from_image_msg(msg)
            image = live_overlay(
                self._attention_torch_model(session),
                session.policy.config,
                window,
                session.instruction,
                rgb,
                session.policy.pinned,
            )
            out = image_msg(np.ascontiguousarray(image), msg.header.stamp, msg.header.frame_id)
            pub.publish(out)
        except Exception as err:  # noqa: BLE001 - a debug view must never stop the chunks
            state["errors"] += 1
            self.get_logger().error(
                f"attention overlay failed: {type(err).__name__}: {err}", throttle_duration_sec=10.0
            )
            return
        state["published"] += 1
        self._series.add("debug_attention.ms", (time.perf_counter() - t0) * 1e3)

    def _attention_torch_model(self, session):
        """The torch backend's own model; for onnx, the same folder's torch weights, loaded once."""
        model = getattr(session.policy.backend, "model", None)
        if model is None:
            if self._attention["model"] is None:
                from vla_ros.model.io import load_model

                self._attention["model"] = load_model(session.model_dir).eval()
            model = self._attention["model"]
        return model

    # ---- watchdog and diagnostics (executor thread, wall clock) -----------------------------------------
    def _check_inputs(self) -> None:
        """Sources that went silent (wall time), reported at once, and their return; also when simulated time
        stopped. Refused inputs and a frozen camera are reported at once too, and so is their end."""
        session = self.session
        if session is not None:
            mono_ns, timeout = time.monotonic_ns(), self._p["source_timeout_s"]
            # the session keeps when each of its sources (its cameras, the joint states) last arrived
            self.watchdog.watches = {
                name: InputWatch(
                    f"{name} message", timeout, ERROR, last_mono_ns=None if age is None else mono_ns - round(age * NS)
                )
                for name, age in session.arrival_ages_s(mono_ns / NS).items()
            }
            before = self.watchdog.stopped_keys
            self.watchdog.check(mono_ns)
            for name in sorted(self.watchdog.stopped_keys - before):
                self.get_logger().error(
                    f"no {name} message for more than {timeout} s (wall time): is the source running?"
                )
            for name in sorted(before - self.watchdog.stopped_keys):
                self.get_logger().info(f"{name} messages arrive again")
        self._report_if_changed()

    def _level(self) -> tuple[bytes, str]:
        if self.session is None:
            return ERROR, self._model_error or "no model"
        dead = sorted(self.watchdog.stopped_keys)
        if dead:
            return ERROR, "no " + " and no ".join(dead) + f" for more than {self._p['source_timeout_s']} s (wall time)"
        code, message = self._status
        if code == "publishing":
            shaping = self._shaping_state()
            if shaping not in ("on", "off"):
                return WARN, f"publishing chunks as decoded, not shaped into the filter's limits: {shaping}"
            return OK, message
        return (ERROR if code in (TICK_ERROR, MODEL_INPUT_ERROR, NON_FINITE_OUTPUT) else WARN), message

    def _inputs_status(self) -> tuple[bytes, str, dict, tuple]:
        """The inputs' own content: WARN while inputs were refused in the last REFUSAL_HOLD_S (wall) or a camera
        is frozen; with the instruction gate's counts. Also the key whose change is reported at once."""
        session = self.session
        frozen = session.frozen_cameras() if session is not None else []
        recent = self.rejections.recent.recent(time.monotonic())
        problems = frozen + [
            f"{source} refused: {code} x{n} in the last {REFUSAL_HOLD_S:g} s ({detail})"
            for source, code, n, detail in recent
        ]
        instruction = session.instruction if session is not None else None
        values = {"instruction": "" if instruction is None else instruction.text}
        status = session.instruction_status if session is not None else {}
        for key in ("status", "reason", "target", "score", "threshold"):
            if status:
                values[f"instruction.{key}"] = "" if status.get(key) is None else status[key]
        values.update({f"instruction.{k}": v for k, v in self._gate.values().items()})
        values.update({f"refused_last_s.{source}.{code}": n for source, code, n, _ in recent})
        key = (
            tuple(f.partition("camera frozen")[0] for f in frozen),
            tuple((source, code) for source, code, _, _ in recent),
        )
        if not problems:
            return OK, "all inputs accepted", values, key
        return WARN, "; ".join(problems), values, key

    def _report_if_changed(self) -> None:
        if (self._level(), self._inputs_status()[3]) != self._reported:
            self._publish_diagnostics()

    def _publish_diagnostics(self) -> None:
        if not self.context.ok():
            return
        level, message = self._level()
        inputs = self._inputs_status()
        self._reported = ((level, message), inputs[3])
        session = self.session
        values = {
            "model": str(session.model_dir if session is not None else ""),
            "backend": self._p["backend"],
            "status": self._status[0],
        }
        if session is not None:
            values.update(ticks=session.ticks, chunks=session.chunks)
        for name, series in self._series.take().items():
            if series:
                values[f"{name}.p50"] = float(np.percentile(series, 50))
                values[f"{name}.p99"] = float(np.percentile(series, 99))
                values[f"{name}.max"] = float(np.max(series))
                values[f"{name}.n"] = len(series)
        values["shaping"] = self._shaping_state()
        limits = session.config.chunk_limits if session is not None else None
        if limits is not None and limits.table_lift is not None:
            values["shaping.lifted_points"] = limits.table_lift.lifted_points
        values["clock"] = "sim" if self.get_parameter("use_sim_time").value else "wall"
        if self._last_chunk is not None:  # one chunk's own figure: a subscriber can check it against its own
            values["last_chunk.stamp_ns"], values["last_chunk.observation_age_ms"] = self._last_chunk
        values.update({f"events.{k}": v for k, v in sorted(self._counts.items())})
        values["debug_attention.published"] = self._attention["published"]
        values["debug_attention.errors"] = self._attention["errors"]
        if session is not None:
            values.update({f"skipped.{k}": v for k, v in sorted(session.skipped.items())})
            values["tokens_in_cache"] = session.policy.cached_tokens
            values["cache_mb"] = round(session.policy.cache_mb, 3)
            if session.policy.config.pin_first_frame:  # which frame every chunk of this episode also sees
                pin = session.policy.pinned
                values["pinned_frame.stamp_ns"] = "" if pin is None else int(pin.stamp_ns)
            values.update(session.source_values())
            for name, lags in session.take_arrival_lags().items():
                if lags:
                    values[f"{name}.arrival_lag_ms.p50"] = float(np.percentile(lags, 50))
                    values[f"{name}.arrival_lag_ms.p99"] = float(np.percentile(lags, 99))
            values.update({f"tokens.{k}": v for k, v in session.stream.stats.as_dict().items()})
            values["tokens.last_rejection"] = session.stream.last_rejection
            start = session.stream.episode_start_ns
            values["episode_start_s"] = "none" if start is None else f"{start * 1e-9:.9f}"
            values["policy.dropped_late"] = session.policy.total_dropped_late
        self.diag.publish(
            time_msg_from_ns(self._now_ns()), [("policy", level, message, values), ("inputs", *inputs[:3])]
        )

    def close(self) -> None:
        """Stop the tick and instruction threads (run_node calls this before destroy_node); safe to call twice."""
        self._stop.set()
        self._wake.set()
        self._instruction_wake.set()
        for thread in (self._worker, self._encoder):
            if thread.is_alive() and thread is not threading.current_thread():
                thread.join(timeout=2.0)


def main(args: list[str] | None = None) -> int:
    # Two threads share the interpreter: the executor (intake, /clock, timers) and the tick (inference,
    # mostly Python between ONNX Runtime calls). A thread that wants the GIL waits up to the switch interval
    # (5 ms by default) whenever the other runs Python; the executor takes the GIL several times per message,
    # so at 5 ms it falls behind 100 Hz joint states while a tick runs. 0.5 ms bounds that wait.
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    # freeze: the model, torch and MiniLM live as long as the process: out of the collector's view, so a full
    # collection never walks them in the middle of the intake (and the exit does not either).
    code = run_node(PolicyNode, args, freeze_gc=True)
    # Everything the node owns is closed; skip the interpreter's teardown of torch, which
    # takes seconds on a loaded machine (a launcher escalates to SIGTERM after 5 s).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    raise SystemExit(main())

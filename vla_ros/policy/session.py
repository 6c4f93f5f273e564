"""The policy session: messages in, action chunks out, the same for the node and every offline tool.

One object owns what turns sensor messages into a published chunk, so the running node (``policy_node``),
the in-process closed-loop evaluation and ``vla-ros attention`` cannot drift apart (LeRobot's small runtime
API, with ROS messages at the edge):

* intake (``add_message``, ``set_instruction``, ``begin_episode``): the token stream with the model's window
  (W + lateness, ``stream_config``), per-source counts, losses read from the stamps, rejections with reasons;
  every instruction through the instruction check (``policy.grounding``): a refused one stops the chunks;
* ``tick(now_ns)``: a new generation (clock jump, new episode) restarts the policy from the window; a new
  instruction rebuilds its cache; the new observations run through the rolling KV cache; no chunk without an
  instruction, without a joint state newer than ``max_state_age_s``, without a camera frame newer than
  ``max_image_age_s`` or while a camera repeats one picture (``frozen_camera_s``); the chunk is decoded
  after the newest observation and stamped with its time, smoothed, cut to the publish horizon and checked
  for finite values.

Threads: intake and ticks may run in different threads (the node takes messages while a tick runs). They
meet under one lock that is held only to admit a message or to take the new observations; inference runs
outside it. Ticks must not overlap each other (one tick thread). No rclpy import; time is passed in.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

import numpy as np

from vla_ros import reasons
from vla_ros.cameras import image_topic
from vla_ros.chunks import ActionChunk, TemporalEnsemble, smooth_positions
from vla_ros.policy.input_checks import RepeatedFrames
from vla_ros.policy.intake import SourceStats
from vla_ros.policy.shaping import ChunkLimits, shape_chunk
from vla_ros.tokens import (
    Instruction,
    Kind,
    Observation,
    StreamConfig,
    TokenError,
    TokenizerConfig,
    TokenStream,
    stamp_ns,
)

# ROS type name -> the kind of observation it becomes (None: the instruction).
KIND_OF_TYPE = {
    "sensor_msgs/msg/Image": Kind.IMAGE,
    "sensor_msgs/msg/CompressedImage": Kind.IMAGE,
    "sensor_msgs/msg/JointState": Kind.STATE,
}
HOLD_ALL = -(1 << 62)  # drain(upto_ns=...) before any joint state: every frame waits
# A camera is frozen only if some joint moved this far (rad, or m for a gripper's fingers) while its picture
# stayed the same: 0.02 rad of a shoulder moves the hand ~1.5 cm, pixels in any camera that sees the arm or
# rides on it, far above encoder noise. A still arm in a noise-free simulator rightly gives one picture, and
# refusing chunks then would keep the arm still for good.
FROZEN_MIN_MOTION = 0.02


def source_name(kind: Kind, camera: int, cameras: tuple[str, ...]) -> str:
    """Name of an intake source in the figures: ``joint_states``, ``image`` (the main camera) and
    ``image_<name>`` for a model's further cameras (``image_wrist_camera``)."""
    if kind == Kind.STATE:
        return "joint_states"
    return "image" if camera == 0 else f"image_{cameras[camera]}"


def _frame_signature(msg) -> tuple:
    """What besides the bytes two frames must share to be the same picture."""
    if hasattr(msg, "encoding"):  # sensor_msgs/Image
        return (str(msg.encoding), int(msg.width), int(msg.height), int(msg.step))
    return (str(msg.format),)  # CompressedImage


def unchecked_status(text: str, status: str, code: str, detail: str, in_force: Instruction | None = None) -> dict:
    """An instruction's outcome in ``Grounding.as_dict``'s keys where the instruction check did not decide:
    refused by the stream (empty, too long, control characters: the instruction in force stays) or taken
    with the check off."""
    out = {"text": str(text)[:200], "status": status, "reason": code, "detail": detail, "target": None}
    out |= {"score": None, "threshold": None, "policy_text": str(text)[:200] if status == "accepted" else ""}
    if status == "refused":
        out["in_force"] = None if in_force is None else in_force.text
    return out


def stream_config(model_config) -> StreamConfig:
    """The token window the runtime needs: the model's W plus the lateness it tolerates (the one place)."""
    return StreamConfig(
        window_s=model_config.window_seconds + model_config.max_lateness_s,
        lateness_s=model_config.max_lateness_s,
        min_frame_interval_s=getattr(model_config, "min_frame_interval_s", 0.0),
    )


@dataclasses.dataclass(frozen=True)
class SessionConfig:
    """Args:
    publish_horizon: chunk points to publish (0 = the model's whole chunk).
    chunk_smoothing_degree: polynomial fit per joint before publishing (0 = off; see ``smooth_positions``).
    max_state_age_s: no chunk when the newest joint state is older than this at the tick.
    max_image_age_s: no chunk when the newest frame of any of the model's cameras is older than this at
        the tick (a blind policy must not move the arm on joint states alone).
    input_width / input_height: required camera size (0 = any); max_input_pixels: larger frames are
        refused before decoding.
    chunk_limits: shape every chunk into these limits (the safety filter's, ``policy.shaping``) from
        the joint state it is anchored on, after the smoothing fit; None = publish it as decoded.
    temporal_ensemble_s: average each chunk with the earlier ones covering its points, a chunk decoded
        a seconds earlier weighing exp(-a / this) (``chunks.TemporalEnsemble``); 0 = the newest alone.
    frozen_camera_s: no chunk while a camera's newest frames are one picture repeated byte for byte over
        this long of their stamps while the arm moved (``FROZEN_MIN_MOTION``): a frozen camera with fresh
        stamps is as blind as a stale one. The frames are still accepted, and the first different frame
        ends it. 0 = off (the default here: synthetic feeds repeat one picture; the node turns it on).
    check_instructions: every instruction goes through the instruction check (``policy.grounding``); a
        refused one gives no chunk until an accepted one arrives (False: every instruction is taken unchecked).
    instruction_threshold: the learned score's threshold (negative: the one the model folder's check keeps).
    policy_instruction: "grounded" (the policy reads the task's own wording of the target the check found,
        the default) or "as_given" (the words as given). Without the check, or for a task without its own
        wording, the words as given.
    """

    publish_horizon: int = 0
    chunk_smoothing_degree: int = 3
    max_state_age_s: float = 0.5
    max_image_age_s: float = 0.3  # 9 camera periods at 30 Hz: a late frame is no outage, a paused camera is
    input_width: int = 0
    input_height: int = 0
    max_input_pixels: int = TokenizerConfig.max_input_pixels
    chunk_limits: ChunkLimits | None = None
    temporal_ensemble_s: float = 0.0
    frozen_camera_s: float = 0.0
    check_instructions: bool = True
    instruction_threshold: float = -1.0
    policy_instruction: str = "grounded"

    def __post_init__(self) -> None:
        from vla_ros.policy.grounding import POLICY_TEXT

        if self.policy_instruction not in POLICY_TEXT:
            raise ValueError(f"policy_instruction must be one of {POLICY_TEXT}, got {self.policy_instruction!r}")
        if not (self.instruction_threshold <= 1.0 and np.isfinite(self.instruction_threshold)):
            raise ValueError(
                "instruction_threshold must be in [0, 1] (or negative: the model's own), got "
                f"{self.instruction_threshold}"
            )
        if not (self.frozen_camera_s >= 0 and np.isfinite(self.frozen_camera_s)):
            raise ValueError(f"frozen_camera_s must be a finite value >= 0 (0 = off), got {self.frozen_camera_s}")
        if not (self.temporal_ensemble_s >= 0 and np.isfinite(self.temporal_ensemble_s)):
            raise ValueError(f"temporal_ensemble_s must be a finite value >= 0, got {self.temporal_ensemble_s}")
        if self.publish_horizon < 0 or self.chunk_smoothing_degree < 0:
            raise ValueError(
                f"publish_horizon ({self.publish_horizon}) and chunk_smoothing_degree "
                f"({self.chunk_smoothing_degree}) must be >= 0"
            )
        if not (self.max_state_age_s > 0 and self.max_image_age_s > 0):
            raise ValueError(
                f"max_state_age_s ({self.max_state_age_s}) and max_image_age_s ({self.max_image_age_s}) must be > 0"
            )


@dataclasses.dataclass
class TickResult:
    """What one tick did. ``chunk`` is what to publish, else ``skip`` is the reason code and ``detail`` says
    more. ``anchor_arrival``: (monotonic wall s, receive clock ns) at which the observation the chunk is
    stamped with arrived, when known."""

    chunk: ActionChunk | None = None
    skip: str = ""
    detail: str = ""
    infer_ms: float = 0.0
    infer_cpu_ms: float = 0.0  # CPU time of this thread in the same span: much less than infer_ms = waiting
    observed: int = 0
    restarted: bool = False
    anchor_arrival: tuple[float, int | None] | None = None
    # monotonic ns of the tick's stages (``vla_ros.latency``): tick_start, inferred, shaped
    marks: dict[str, int] = dataclasses.field(default_factory=dict)


class PolicySession:
    """Token intake + streaming policy + chunk post-processing. See the module docstring."""

    def __init__(self, policy, encoder, config: SessionConfig | None = None, model_dir: str | Path = "") -> None:
        self.policy = policy
        self.config = config or SessionConfig()
        self.model_dir = Path(model_dir) if model_dir else None
        mc = policy.config
        c = self.config
        self.tokenizer = TokenizerConfig.from_model_config(
            mc.to_dict() if hasattr(mc, "to_dict") else vars(mc),
            input_width=c.input_width,
            input_height=c.input_height,
            max_input_pixels=c.max_input_pixels,
        )
        self._encoder = encoder
        self.cameras = tuple(getattr(mc, "cameras", ("camera",)))
        self.camera_topics = tuple(image_topic(c) for c in self.cameras)
        self._check_limits(self.config)
        self.grounder = self._load_grounder()
        self._state_vmax = None  # the robot's velocity limits of the state's joints, once known: jumps refused
        self._lock = threading.Lock()
        self._state_arrived = threading.Condition(self._lock)
        self.reset()

    def _check_limits(self, config: SessionConfig) -> None:
        limits = config.chunk_limits
        names = tuple(self.policy.config.joint_names)
        if limits is not None and tuple(limits.joint_names) != names:
            raise ValueError(
                f"chunk_limits are for joints {list(limits.joint_names)}, the model commands {list(names)}"
            )

    def reset(self) -> None:
        """Forget everything but the model: a fresh window (no instruction), fresh counts; the next tick
        restarts the policy. The in-process evaluation starts every episode with it."""
        with self._lock:
            self.stream = TokenStream(
                self.tokenizer,
                stream_config(self.policy.config),
                self._encoder,
                consumer_paced=True,
                cameras=self._camera_sources(),
            )
            if self._state_vmax is not None:
                self.stream.set_state_velocity_limits(self._state_vmax)
            self.sources = {source_name(Kind.IMAGE, c, self.cameras): SourceStats() for c in range(len(self.cameras))}
            self.sources["joint_states"] = SourceStats()
            self._repeats = [RepeatedFrames() for _ in self.cameras]  # per camera: the run of identical frames
            self._arrival: dict[tuple, tuple] = {}  # observation key -> (wall s, now_ns) of its arrival (newest few)
            self._ensemble: TemporalEnsemble | None = (
                None  # built at the tick from the config (it may change at run time)
            )
            self._seen = (-1, -1)  # (stream generation, instruction generation) the policy last caught up with
            self.ticks = self.chunks = 0
            self.skipped: dict[str, int] = {}
            self.grounding = None  # the instruction check's newest decision (``policy.grounding.Grounding``)
            self.instruction_rejection = ""  # "code: detail" of the newest instruction refused
            # the newest instruction's outcome, as ``~/instruction_status`` publishes it (``Grounding.as_dict``)
            self.instruction_status: dict = {}

    def _load_grounder(self):
        """The instruction check of the model's task, with the model folder's learned score where it has one."""
        from vla_ros.policy.grounding import Grounder, GroundingModel
        from vla_ros.tasks import task_of

        model = GroundingModel.load(self.model_dir) if self.model_dir is not None else None
        return Grounder(task_of(self.policy.config), model, self._encoder)

    def _camera_sources(self) -> dict[str, int]:
        return {topic: c for c, topic in enumerate(self.camera_topics)}

    def set_camera_topics(self, topics) -> None:
        """The image topic of each of the model's cameras, in its order (a node's remapped names; by default
        ``/<camera>/image_raw``); ``<topic>/compressed`` is the same camera."""
        topics = tuple(topics)
        if len(topics) != len(self.cameras) or len(set(topics)) != len(topics):
            raise ValueError(
                f"need {len(self.cameras)} distinct image topics for cameras {list(self.cameras)}, got {list(topics)}"
            )
        with self._lock:
            self.camera_topics = topics
            self.stream.set_cameras(self._camera_sources())

    def topic_of(self, camera: str) -> str:
        """The image topic the session takes ``camera``'s frames from."""
        return self.camera_topics[self.cameras.index(camera)]

    @classmethod
    def from_pretrained(
        cls,
        folder: str | Path,
        backend: str = "onnx",
        device: str = "auto",
        threads: int | None = None,
        config: SessionConfig | None = None,
        encoder=None,
    ) -> PolicySession:
        """Load and check ``models/<name>`` (raises FileNotFoundError, ValueError, OSError or RuntimeError
        saying why) and build a session around it; ``encoder`` defaults to the process's shared MiniLM.
        ``threads`` also sets torch's threads with either backend: the text encoder runs on torch, and two
        OpenMP threads on a busy 2-core machine turn a 60 ms instruction encoding into seconds."""
        from vla_ros.model.runtime import StreamingPolicy
        from vla_ros.tokens.text import shared_encoder

        if threads:
            import torch

            torch.set_num_threads(threads)
        policy = StreamingPolicy.from_pretrained(folder, backend=backend, device=device, threads=threads)
        return cls(policy, encoder or shared_encoder(policy.config.max_text_tokens), config, folder)

    # ---- intake (any thread; short lock) ------------------------------------------------------------
    def add_message(
        self, type_name: str, msg, now_ns: int | None, source: str, wall_s: float | None = None
    ) -> tuple[Observation | Instruction | None, str]:
        """Admit one message received at ``now_ns`` (node clock; None offline). Returns the observation (or
        instruction) and "" when it was taken, else None and the rejection as "code: detail" (None and ""
        for a frame thinned to the model's ``max_frame_rate_hz``)."""
        kind = KIND_OF_TYPE.get(type_name)
        if kind is None:
            return self._add_other(type_name, msg, now_ns, source)
        wall_s = time.monotonic() if wall_s is None else wall_s
        try:
            stamp = stamp_ns(msg)
        except TokenError:
            stamp = None
        with self._lock:
            camera = self.stream.camera_of(source) if kind == Kind.IMAGE else 0
            src = self.sources[
                source_name(kind, camera or 0, self.cameras)
            ]  # an unknown camera: counted on the main one
            src.received += 1
            src.last_arrival_wall_s = wall_s
            if stamp is not None:
                src.gaps.add(stamp)
                if now_ns is not None and len(src.arrival_lag_ms) < 10_000:
                    src.arrival_lag_ms.append((now_ns - stamp) * 1e-6)
            thinned = self.stream.stats.thinned
            obs = self.stream.add_message(type_name, msg, now_ns, source)
            if self.stream.stats.thinned != thinned:
                src.thinned += 1  # the model's frame rate, not a fault: no rejection to report
                return None, ""
            if obs is None:
                src.rejected[self.stream.last_rejection_code] += 1
                return None, self.stream.last_rejection
            src.accepted += 1
            if kind == Kind.STATE:
                self._state_arrived.notify_all()
                if self.config.frozen_camera_s > 0:
                    q = obs.data[: len(self.tokenizer.joint_names)]
                    for run in self._repeats:
                        run.observe_state(q)
            elif self.config.frozen_camera_s > 0:
                self._repeats[obs.camera].add(_frame_signature(msg), msg.data, obs.stamp_ns)
            self._arrival[obs.key] = (wall_s, now_ns)
            if len(self._arrival) > 64:  # only the newest matter (a chunk is stamped with the newest)
                for key in sorted(self._arrival)[:32]:
                    del self._arrival[key]
            return obs, ""

    def _add_other(self, type_name, msg, now_ns, source):
        if type_name.replace("/msg/", "/") == "std_msgs/String":
            instruction = self.set_instruction(msg.data, now_ns)
            return instruction, "" if instruction is not None else self.instruction_rejection
        with self._lock:
            self.stream.add_message(type_name, msg, now_ns, source)  # counted as unsupported_type
            return None, self.stream.last_rejection

    def set_instruction(self, text: str, now_ns: int | None = None) -> Instruction | None:
        """Check and pin a new instruction; None when it is refused, with "code: detail" in
        ``instruction_rejection``. A text the stream cannot take (empty, too long, control characters) is
        refused and the instruction in force stays; one the instruction check refuses (``grounding``) stops
        the chunks until an accepted one arrives: the arm holds. The text is encoded and checked before taking
        the lock (MiniLM takes milliseconds; the encoder caches the result)."""
        from vla_ros.tokens.convert import instruction_text

        c = self.config
        grounding = None
        try:
            cleaned = instruction_text(text)
            self._encoder(cleaned)
        except TokenError:
            cleaned = None  # the stream counts and reports it below
        if cleaned is not None and c.check_instructions:
            threshold = c.instruction_threshold if c.instruction_threshold >= 0 else None
            grounding = self.grounder(cleaned, threshold, c.policy_instruction)
        with self._lock:
            if grounding is not None:
                self.grounding = grounding
                self.instruction_status = grounding.as_dict()
                if not grounding.accepted:
                    self.instruction_rejection = f"{grounding.code}: {grounding.summary()}"
                    return None
            instruction = self.stream.set_instruction(text if grounding is None else grounding.policy_text, now_ns)
            if instruction is None:
                self.instruction_rejection = self.stream.last_rejection
                code, _, detail = self.instruction_rejection.partition(": ")
                in_force = self.stream.instruction
                self.instruction_status = unchecked_status(text, "refused", code, detail, in_force)
            elif grounding is None:
                self.grounding = None
                self.instruction_status = unchecked_status(
                    text, "accepted", "", "taken unchecked (check_instructions off)"
                )
            return instruction

    @property
    def instruction_refused(self) -> bool:
        """Whether the newest instruction was refused by the check (no chunk until an accepted one)."""
        g = self.grounding
        return g is not None and not g.accepted

    def wait_for_state(self, stamp_ns: int, timeout_s: float) -> bool:
        """Wait (another thread admitting messages) until a joint state stamped at or after ``stamp_ns`` is
        in the window, at most ``timeout_s``; True when one is."""

        def arrived() -> bool:
            newest = self.stream.newest_stamp(Kind.STATE)
            return newest is not None and newest >= stamp_ns

        with self._lock:
            return self._state_arrived.wait_for(arrived, timeout_s)

    def state_period_s(self) -> float | None:
        """The joint states' period learned from their stamps (None until it is known)."""
        period = self.sources["joint_states"].gaps.period_ns
        return None if period is None else period * 1e-9

    def set_state_velocity_limits(self, velocity) -> None:
        """The robot's velocity limits (``tokenizer.joint_names`` order): from now on a joint state that
        jumps further than they allow is refused (``joint_state_jump``), as the filter and the controller do."""
        with self._lock:
            self._state_vmax = np.asarray(velocity, dtype=np.float64)
            self.stream.set_state_velocity_limits(self._state_vmax)

    def begin_episode(self, start_ns: int) -> bool:
        """A new episode starts at ``start_ns`` (``/vla/episode_reset``): the window and, at the next tick,
        the policy's cache forget the previous episode; older stamps are refused (``before_reset``)."""
        with self._lock:
            return self.stream.begin_episode(start_ns)

    @property
    def instruction(self) -> Instruction | None:
        return self.stream.instruction

    def window(self) -> list[Observation]:
        with self._lock:
            return self.stream.window()

    # ---- tick (one thread) --------------------------------------------------------------------------
    def _skip(self, result: TickResult, code: str, detail: str) -> TickResult:
        self.skipped[code] = self.skipped.get(code, 0) + 1
        result.skip, result.detail = code, detail
        if self._ensemble is not None:
            # No chunk went out: the arm stops following the earlier plans (the controller holds), and a
            # non-finite decode must not be averaged into the next ones. Start the average over.
            self._ensemble.reset()
        return result

    def tick(self, now_ns: int) -> TickResult:
        """Catch the policy up with what arrived and decode a chunk at ``now_ns`` (node clock) if allowed."""
        self.ticks += 1
        result = TickResult()
        result.marks["tick_start"] = time.monotonic_ns()
        with self._lock:
            stream = self.stream
            seen = (stream.generation, stream.instruction_generation)
            restart = seen[0] != self._seen[0]
            # A clock jump or a new episode: start over from what the window holds now. Only observations
            # up to the newest joint state run: a frame newer than every joint state waits for the next tick,
            # so joint states that arrive behind frames (a busy executor takes one message per topic per
            # round) are never late, and the chunk is anchored where the policy knows the arm's state.
            newest_state = stream.newest_stamp(Kind.STATE)
            new = stream.drain(restart=restart, upto_ns=HOLD_ALL if newest_state is None else newest_state)
            state = stream.newest(Kind.STATE)
            instruction = stream.instruction
            newest = {c: stream.newest_stamp(Kind.IMAGE, c) for c in range(len(self.cameras))}
            newest[Kind.STATE] = newest_state
            frozen = self._frozen()
        ages = {key: None if stamp is None else (now_ns - stamp) * 1e-9 for key, stamp in newest.items()}
        policy = self.policy
        if restart:
            policy.reset()
            result.restarted = True
        tau = self.config.temporal_ensemble_s
        if (self._ensemble.time_constant_s if self._ensemble else 0.0) != tau:
            self._ensemble = TemporalEnsemble(tau) if tau > 0 else None
        elif (restart or seen[1] != self._seen[1]) and self._ensemble is not None:
            self._ensemble.reset()  # plans for another episode or another request are not averaged in
        if seen[1] != self._seen[1]:
            policy.set_instruction(instruction)
        self._seen = seen
        result.observed = len(new)
        from vla_ros.model.runtime import PolicyNotReady  # loaded with the policy; this module stays torch-free

        t0, cpu0 = time.perf_counter(), time.thread_time()
        c = self.config
        try:
            reason = self._blocker(instruction, ages, new, frozen)
            if reason is not None:
                if new:
                    policy.observe(new)  # keep the cache current: the next chunk costs one tick, not a rebuild
                return self._skip(result, *reason)
            chunk = policy.select_action(new)
        except ValueError as err:  # an observation the model cannot take: no chunk, say why
            return self._skip(result, reasons.MODEL_INPUT_ERROR, str(err))
        except PolicyNotReady as err:  # a state-relative model with no joint state in its window
            return self._skip(result, reasons.NO_JOINT_STATE, str(err))
        result.infer_ms = (time.perf_counter() - t0) * 1e3
        result.infer_cpu_ms = (time.thread_time() - cpu0) * 1e3
        result.marks["inferred"] = time.monotonic_ns()
        horizon = c.publish_horizon or len(chunk.time_from_start_s)
        positions = chunk.positions
        if self._ensemble is not None:
            positions = self._ensemble(chunk.stamp_ns, chunk.time_from_start_s, positions)
        positions = smooth_positions(chunk.time_from_start_s, positions, c.chunk_smoothing_degree)
        times = chunk.time_from_start_s
        if c.chunk_limits is not None and state is not None:
            times, positions = self._shape(chunk, positions[:horizon], state, c.chunk_limits)
        out = ActionChunk(
            joint_names=tuple(chunk.joint_names),
            stamp_ns=chunk.stamp_ns,
            time_from_start_s=times[:horizon],
            positions=positions[:horizon],
        )
        if not np.all(np.isfinite(out.positions)):
            return self._skip(result, reasons.NON_FINITE_OUTPUT, "the model produced NaN/Inf: no chunk")
        result.marks["shaped"] = time.monotonic_ns()
        with self._lock:
            result.anchor_arrival = self._arrival.get(policy.newest_key)
        result.chunk = out
        self.chunks += 1
        return result

    def _shape(
        self, chunk, positions: np.ndarray, state: Observation, limits: ChunkLimits
    ) -> tuple[np.ndarray, np.ndarray]:
        """(times, positions) of the published points shaped into ``limits`` from ``state`` (the joint
        state the chunk is anchored on; when a frame is newer, the points' times count from the state's
        stamp for the shaping, and from the chunk's stamp again after it)."""
        n = len(limits.joint_names)
        since_state_s = (chunk.stamp_ns - state.stamp_ns) * 1e-9
        velocities = state.data[n : 2 * n] if self.policy.config.state_velocities else None
        times = chunk.time_from_start_s[: len(positions)] + since_state_s
        times, positions = shape_chunk(times, positions, state.data[:n], velocities, limits)
        return times - since_state_s, positions

    def _blocker(self, instruction, ages: dict, new: list, frozen: list) -> tuple[str, str] | None:
        """Why no chunk may be decoded now (code, detail), or None."""
        c = self.config
        if self.instruction_refused:
            return reasons.INSTRUCTION_REFUSED, f"instruction {self.grounding.summary()}: no chunk, the arm holds"
        if instruction is None:
            return reasons.NO_INSTRUCTION, "no instruction: no chunk"
        if not new and not self.policy.ready:
            return reasons.NO_OBSERVATIONS, "no observations yet: no chunk"
        state_age = ages[Kind.STATE]
        if state_age is None:
            return reasons.NO_JOINT_STATE, "no joint state in the window: no chunk"
        if state_age > c.max_state_age_s:
            return (
                reasons.STALE_JOINT_STATE,
                f"newest joint state is {state_age:.3f} s old (max_state_age_s {c.max_state_age_s}): no chunk",
            )
        for camera, name in enumerate(self.cameras):
            image_age = ages[camera]
            which = "camera frame" if len(self.cameras) == 1 else f"{name} frame ({self.camera_topics[camera]})"
            if image_age is None:
                return reasons.NO_IMAGE, f"no {which} in the window: no chunk"
            if image_age > c.max_image_age_s:
                return (
                    reasons.STALE_IMAGE,
                    f"newest {which} is {image_age:.3f} s old (max_image_age_s {c.max_image_age_s}): no chunk",
                )
        if frozen:
            return reasons.FROZEN_CAMERA, "; ".join(frozen) + f" (frozen_camera_s {c.frozen_camera_s}): no chunk"
        return None

    def _frozen(self) -> list[str]:
        """'camera frozen: N identical frames over X s' for each camera whose newest frames are one picture
        repeated for frozen_camera_s or more of stamps while the arm moved (the lock held)."""
        threshold = self.config.frozen_camera_s
        out = []
        for c, run in enumerate(self._repeats):
            if run.frozen(threshold, FROZEN_MIN_MOTION):
                name = "" if len(self.cameras) == 1 else f"{self.cameras[c]} ({self.camera_topics[c]}): "
                out.append(
                    f"{name}camera frozen: {run.count} identical frames over {run.span_s:.2f} s "
                    f"while the joints moved up to {run.motion:.2f}"
                )
        return out

    def frozen_cameras(self) -> list[str]:
        """What ``tick`` refuses a chunk for as ``frozen_camera``, as of the newest frames (empty: none)."""
        with self._lock:
            return self._frozen()

    # ---- figures ----------------------------------------------------------------------------------
    def source_values(self) -> dict:
        """Per source (``image``, ``joint_states``, ``image_<camera>`` for further cameras): received,
        accepted, lost, rejected by reason, unused, dropped and dropped_pct, as diagnostic key/values."""
        with self._lock:
            unused = self.stream.stats.unused
            keys = {
                source_name(Kind.IMAGE, c, self.cameras): "image" + (f"_{c}" if c else "")
                for c in range(len(self.cameras))
            }
            keys["joint_states"] = "state"
            values = {}
            for name, src in self.sources.items():
                values.update({f"{name}.{k}": v for k, v in src.as_dict(unused[keys[name]]).items()})
            return values

    def take_arrival_lags(self) -> dict[str, list[float]]:
        """Per source, receive clock minus stamp (ms) of every message since the last call: how far behind
        its sensor the intake runs."""
        with self._lock:
            out = {name: s.arrival_lag_ms for name, s in self.sources.items()}
            for s in self.sources.values():
                s.arrival_lag_ms = []
            return out

    def arrival_ages_s(self, wall_now_s: float) -> dict[str, float | None]:
        """Wall seconds since a message of each source last arrived (None: never)."""
        with self._lock:
            return {
                name: None if s.last_arrival_wall_s is None else wall_now_s - s.last_arrival_wall_s
                for name, s in self.sources.items()
            }

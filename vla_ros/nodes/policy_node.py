"""policy_node: camera + joint states + instruction -> timed tokens -> streaming Transformer -> action chunks.

Subscriptions only convert and admit messages (``TokenStream.add_message``, the path the offline dataset
reader shares); a timer (``rate_hz``) and/or each new frame (``tick_on_frame``) runs a tick: new
observations go through the rolling KV cache, a chunk is decoded after the newest observation and
published as a JointTrajectory stamped with that observation's time. No model, no instruction or stale
observations: no chunk, and ``/diagnostics`` says which. With ``debug_attention``, right after a chunk
(at most ``debug_attention_rate_hz``) the newest frame is published on ``~/attention_overlay`` with the heat
map of its patches' attention to the instruction's colour word, as ``vla-ros attention`` draws it.
"""

from __future__ import annotations

import time

import numpy as np
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_msgs.msg import String
from trajectory_msgs.msg import JointTrajectory

from vla_ros.chunks import ActionChunk, smooth_positions
from vla_ros.model.io import resolve_model_dir
from vla_ros.params.policy import PARAMS
from vla_ros.ros.chunk_msgs import msg_from_chunk
from vla_ros.ros.diagnostics import ERROR, OK, WARN, Diagnostics
from vla_ros.ros.node_main import run_node
from vla_ros.ros.params import declare_parameters
from vla_ros.ros.time import time_msg_from_ns


def _incompatible_qos_callbacks(node):
    """Say so when a publisher's QoS cannot match ours (a best-effort camera and a reliable subscriber
    never connect, and nothing else would tell)."""
    try:
        from rclpy.event_handler import SubscriptionEventCallbacks  # Iron and later
    except ImportError:  # Humble
        from rclpy.qos_event import SubscriptionEventCallbacks

    def on_incompatible(event) -> None:
        node._count_skip("incompatible_qos")
        node.get_logger().error(
            f"a publisher's QoS is incompatible with this subscription ({event.last_policy_kind}); "
            "for best-effort drivers set sensor_qos:=best_effort", throttle_duration_sec=5.0)

    return SubscriptionEventCallbacks(incompatible_qos=on_incompatible)


class PolicyNode(Node):
    def __init__(self, **kwargs) -> None:
        super().__init__("policy", **kwargs)
        self.failed = False
        p = declare_parameters(self, PARAMS, on_change=self._on_param_change)
        self._p = p
        self.diag = Diagnostics(self, hardware_id="policy")
        self.policy = None
        self.stream = None
        self._encoder = None
        self._status = "starting"
        self._stats = {"ticks": 0, "chunks": 0, "infer_ms": [], "age_ms": [], "skipped": {},
                       "attention_published": 0, "attention_errors": 0, "attention_ms": []}
        self._last_tick_generation = (-1, -1)
        self._model_error = ""
        self._instruction_text = ""  # kept for a model loaded later
        self._frame = None  # (stamp_ns, type name, message) of the newest camera frame, only for debug_attention
        self._attention_model = None  # backend onnx: the torch model the overlay needs, loaded on first use
        self._attention_last_ns = None
        self._load(p["model"])

        self.pub_chunk = self.create_publisher(JointTrajectory, "/vla/action_chunk", 10)
        self.pub_attention = self.create_publisher(Image, "~/attention_overlay", 1)
        reliability = ReliabilityPolicy.RELIABLE if p["sensor_qos"] == "reliable" else ReliabilityPolicy.BEST_EFFORT
        events = _incompatible_qos_callbacks(self)
        if p["image_transport"] == "compressed":
            self.create_subscription(CompressedImage, p["image_topic"] + "/compressed", self._on_compressed, QoSProfile(depth=10, reliability=reliability), event_callbacks=events)
        else:
            self.create_subscription(Image, p["image_topic"], self._on_image, QoSProfile(depth=10, reliability=reliability), event_callbacks=events)
        self.create_subscription(JointState, "/joint_states", self._on_joints, QoSProfile(depth=50, reliability=reliability), event_callbacks=events)
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL, reliability=ReliabilityPolicy.RELIABLE)
        self.create_subscription(String, "/vla/instruction", self._on_instruction, latched)
        if p["rate_hz"] > 0:
            self.create_timer(1.0 / p["rate_hz"], self._tick)
        self.create_timer(p["diagnostics_period_s"], self._publish_diagnostics)
        if p["instruction"]:
            self._set_instruction(p["instruction"])

    # ---- model -------------------------------------------------------------------------------------
    def _load(self, model: str) -> bool:
        """Load and check a model; on failure keep running without one and say why."""
        from vla_ros.model.runtime import StreamingPolicy
        from vla_ros.tokens import StreamConfig, TokenizerConfig, TokenStream
        from vla_ros.tokens.text import shared_encoder

        folder = resolve_model_dir(model)
        try:
            if self._p["threads"]:
                import torch

                torch.set_num_threads(self._p["threads"])
            policy = StreamingPolicy.from_pretrained(folder, backend=self._p["backend"], device=self._p["device"], threads=self._p["threads"] or None)
        except (FileNotFoundError, ValueError, OSError, RuntimeError) as err:
            self._model_error = f"cannot load model {folder}: {err}"
            self.get_logger().error(self._model_error)
            return False
        cfg = policy.config
        tokenizer = TokenizerConfig.from_model_config(
            cfg.to_dict() if hasattr(cfg, "to_dict") else vars(cfg),
            input_width=self._p["input_width"], input_height=self._p["input_height"],
        )
        if self._encoder is None:
            self._encoder = shared_encoder(cfg.max_text_tokens)
        # The stream keeps what the runtime may still need: the window plus the allowed lateness.
        stream = TokenStream(tokenizer, StreamConfig(window_s=cfg.window_seconds + cfg.max_lateness_s, lateness_s=cfg.max_lateness_s), self._encoder)
        if self._instruction_text:
            stream.set_instruction(self._instruction_text)
        self.policy, self.stream, self._model_error = policy, stream, ""
        self._model_dir = folder
        self._attention_model = None
        self._last_tick_generation = (-1, -1)
        self.get_logger().info(
            f"model {folder.name}: {cfg.num_hidden_layers} layers, window {cfg.window_seconds} s, chunk "
            f"{cfg.chunk_length} @ {cfg.chunk_rate_hz} Hz, backend {self._p['backend']} ({policy.backend.describe()})"
        )
        return True

    def _on_param_change(self, name: str, value) -> None:
        self._p[name] = value
        if name == "instruction" and value:
            self._set_instruction(value)
        elif name == "model":  # a model that fails to load leaves the node without one, saying why
            if not self._load(value):
                self.policy = self.stream = None
        elif name == "debug_attention" and not value:
            self._frame = None

    # ---- inputs ------------------------------------------------------------------------------------
    def _now_ns(self) -> int:
        return self.get_clock().now().nanoseconds

    def _admit(self, type_name: str, msg, source: str):
        if self.stream is None:
            self._count_skip("no_model_input_dropped")
            return None
        before = sum(self.stream.stats.rejected.values())
        result = self.stream.add_message(type_name, msg, self._now_ns(), source)
        if sum(self.stream.stats.rejected.values()) != before:
            self.get_logger().warning(f"rejected {source}: {self.stream.last_rejection}", throttle_duration_sec=2.0)
        return result

    def _on_image(self, msg: Image) -> None:
        self._on_frame("sensor_msgs/msg/Image", msg, self._p["image_topic"])

    def _on_compressed(self, msg: CompressedImage) -> None:
        self._on_frame("sensor_msgs/msg/CompressedImage", msg, self._p["image_topic"] + "/compressed")

    def _on_frame(self, type_name: str, msg, source: str) -> None:
        obs = self._admit(type_name, msg, source)
        if obs is None:
            return
        if self._p["debug_attention"]:
            self._frame = (obs.stamp_ns, type_name, msg)  # a reference: decoded again only for an overlay
        if self._p["tick_on_frame"]:
            self._tick()

    def _on_joints(self, msg: JointState) -> None:
        self._admit("sensor_msgs/msg/JointState", msg, "/joint_states")

    def _on_instruction(self, msg: String) -> None:
        self._set_instruction(msg.data)

    def _set_instruction(self, text: str) -> None:
        self._instruction_text = text
        if self.stream is None:
            return
        if self.stream.set_instruction(text, self._now_ns()) is not None:
            self.get_logger().info(f"instruction: {self.stream.instruction.text!r} -> {len(self.stream.instruction.tokens)} tokens")

    # ---- tick --------------------------------------------------------------------------------------
    def _count_skip(self, reason: str) -> None:
        self._stats["skipped"][reason] = self._stats["skipped"].get(reason, 0) + 1
        self._status = reason

    def _tick(self) -> None:
        self._stats["ticks"] += 1
        if self.policy is None or self.stream is None:
            return self._count_skip("no_model")
        stream, policy = self.stream, self.policy
        generation = (stream.generation, stream.instruction_generation)
        if generation[0] != self._last_tick_generation[0]:
            policy.reset()  # clock jumped back: a new timeline
        if generation[1] != self._last_tick_generation[1]:
            policy.set_instruction(stream.instruction)
        self._last_tick_generation = generation
        t0 = time.perf_counter()
        try:
            new = stream.drain()
            if new:
                policy.observe(new)
            if stream.instruction is None:
                return self._count_skip("no_instruction")
            if not policy.ready:
                return self._count_skip("no_observations")
            age_s = (self._now_ns() - policy.newest_key[0]) * 1e-9
            if age_s > self._p["max_observation_age_s"]:
                return self._count_skip("stale_observations")
            chunk = policy.predict_action_chunk()
        except ValueError as err:  # an observation the model cannot take: drop the tick, say why
            self.get_logger().error(f"tick failed: {err}", throttle_duration_sec=2.0)
            return self._count_skip("model_input_error")
        infer_ms = (time.perf_counter() - t0) * 1e3
        horizon = self._p["publish_horizon"] or len(chunk.time_from_start_s)
        positions = smooth_positions(chunk.time_from_start_s, chunk.positions, self._p["chunk_smoothing_degree"])
        out = ActionChunk(
            joint_names=tuple(chunk.joint_names), stamp_ns=chunk.stamp_ns,
            time_from_start_s=chunk.time_from_start_s[:horizon], positions=positions[:horizon],
        )
        if not np.all(np.isfinite(out.positions)):
            return self._count_skip("non_finite_output")
        self.pub_chunk.publish(msg_from_chunk(out))
        self._stats["chunks"] += 1
        self._stats["infer_ms"].append(infer_ms)
        self._stats["age_ms"].append((self._now_ns() - chunk.stamp_ns) * 1e-6)
        self._status = "publishing"
        if self._p["debug_attention"]:
            self._publish_attention()

    # ---- debug: attention overlay ------------------------------------------------------------------
    def _publish_attention(self) -> None:
        """The newest frame with its patches' attention to the colour word, after the chunk is out (its
        latency is untouched; the next tick waits). Failures are counted and logged, never raised."""
        from vla_ros.evaluation.attention import live_overlay
        from vla_ros.ros.sim_msgs import image_msg
        from vla_ros.tokens import Kind
        from vla_ros.tokens.convert import rgb_from_compressed_msg, rgb_from_image_msg

        now, last = self._now_ns(), self._attention_last_ns
        if last is not None and last <= now < last + 1e9 / self._p["debug_attention_rate_hz"]:
            return  # (a clock that jumped back starts over)
        window = self.stream.window()
        frames = [o for o in window if o.kind == Kind.IMAGE]
        if not frames or self._frame is None or self._frame[0] != frames[-1].stamp_ns:
            return  # the kept frame is not the window's newest (none yet, or one arrived out of order)
        self._attention_last_ns = now  # set before trying: a failing overlay is retried at the same rate
        t0 = time.perf_counter()
        try:
            _, type_name, msg = self._frame
            rgb = rgb_from_compressed_msg(msg) if type_name.endswith("CompressedImage") else rgb_from_image_msg(msg)
            image = live_overlay(self._attention_torch_model(), self.policy.config, window, self.stream.instruction, rgb)
            out = image_msg(np.ascontiguousarray(image), msg.header.stamp, msg.header.frame_id)
        except Exception as err:  # noqa: BLE001 - a debug view must never stop the chunks
            self._stats["attention_errors"] += 1
            self.get_logger().error(f"attention overlay failed: {type(err).__name__}: {err}", throttle_duration_sec=10.0)
            return
        self.pub_attention.publish(out)
        self._stats["attention_published"] += 1
        self._stats["attention_ms"].append((time.perf_counter() - t0) * 1e3)

    def _attention_torch_model(self):
        """The torch backend's own model; for onnx, the same folder's torch weights, loaded once."""
        model = getattr(self.policy.backend, "model", None)
        if model is None:
            if self._attention_model is None:
                from vla_ros.model.io import load_model

                self._attention_model = load_model(self._model_dir).eval()
            model = self._attention_model
        return model

    # ---- diagnostics -------------------------------------------------------------------------------
    def _publish_diagnostics(self) -> None:
        s = self._stats
        values = {"ticks": s["ticks"], "chunks": s["chunks"], "model": str(getattr(self, "_model_dir", ""))}
        for name, series in (("inference_ms", s["infer_ms"]), ("observation_age_ms", s["age_ms"]), ("debug_attention.ms", s["attention_ms"])):
            if series:
                values[f"{name}.p50"] = float(np.percentile(series, 50))
                values[f"{name}.max"] = float(np.max(series))
        values.update({f"skipped.{k}": v for k, v in sorted(s["skipped"].items())})
        values["debug_attention.published"] = s["attention_published"]
        values["debug_attention.errors"] = s["attention_errors"]
        if self.policy is not None:
            values["tokens_in_cache"] = self.policy.cached_tokens
            values["cache_mb"] = round(self.policy.cache_mb, 3)
        if self.stream is not None:
            values.update({f"tokens.{k}": v for k, v in self.stream.stats.as_dict().items()})
            values["tokens.last_rejection"] = self.stream.last_rejection
        if self._model_error:
            level, message = ERROR, self._model_error
        elif self._status == "publishing":
            level, message = OK, "publishing chunks"
        else:
            level, message = WARN, {"no_instruction": "no instruction: no chunk", "stale_observations": "observations are stale: no chunk",
                                    "no_observations": "no observations yet: no chunk"}.get(self._status, self._status)
        s["infer_ms"], s["age_ms"], s["attention_ms"] = [], [], []
        self.diag.publish(time_msg_from_ns(self._now_ns()), [("policy", level, message, values)])


def main(args: list[str] | None = None) -> int:
    return run_node(PolicyNode, args)


if __name__ == "__main__":
    raise SystemExit(main())

"""Configuration of the streaming vision-language-action Transformer (no torch import).

One frozen dataclass holds everything ``config.json`` says about a model: architecture, time handling
(continuous-time RoPE periods, attention window, allowed lateness), inputs (image size and
normalisation, joint order, state layout, text embedding width), the action chunk, and the
state/action normalisation statistics. The defaults are the shipped model's: sized so that a full-window
training step is cheap on a 2-core CPU (a few hundred tokens per window) while a streaming tick touches
only the tokens that arrived since the last one.

Token budget of the defaults (30 Hz camera, 100 Hz joint states): a window of W = 0.5 s holds about
15 frames x 24 patch tokens + 50 state tokens = 410 tokens; a camera period brings 24 + 3.3 new tokens,
so a streaming tick does ~1/15 of a full recompute's work.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from vla_ros.chunks import COMMANDED_JOINTS

# Keys written into config.json that are derived from the fields (for readers such as the tokenizer);
# on load they are checked against the fields rather than taken as input.
DERIVED_KEYS = ("num_visual_tokens", "head_dim", "state_dim", "action_dim")


ACTION_LOSSES = ("mse", "l1")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Architecture, time handling, inputs and chunk of the policy.

    Args:
        hidden_size: token width D. 128 keeps a full-window training step cheap on 2 CPU cores.
        num_hidden_layers: Transformer blocks; 4 gives a receptive field of 4 windows through the cache.
        num_attention_heads: query heads; head_dim = hidden_size / num_attention_heads (32 by default).
        num_key_value_heads: key/value heads (grouped-query attention); 2 halves the KV cache vs 4.
        intermediate_size: SwiGLU hidden width; ~8/3 x hidden_size, rounded to a multiple of 8.
        rms_norm_eps: epsilon of every RMSNorm (pre-norm blocks and the final norm).
        initializer_range: std of the normal init of linear and embedding weights.
        rope_min_period_s / rope_max_period_s: periods of the fastest and slowest time-RoPE rotation,
            spaced geometrically over head_dim / 4 frequencies (half of each head is rotated). 0.02 s separates two 100
            Hz joint states
            by half a turn; 10 s stays monotonic over the window plus the chunk horizon.
        window_seconds: W; a token sees earlier tokens at most W seconds older than itself (plus the
            pinned instruction). Sets the per-token cost and the cache size.
        max_lateness_s: how far behind the newest observation a late observation may be and still be
            inserted exactly (the cache keeps W + this much, and newer tokens are replayed). Camera
            frames typically arrive after joint states stamped later than them.
        image_height / image_width: size of the frames the tokenizer hands over (3, H, W); 72x96 keeps
            the camera's 4:3 aspect.
        image_mean / image_std: per-channel normalisation the tokenizer applies (RGB in [0, 1]); the
            tokenizer's defaults.
        crop: (top, bottom, left, right) fractions the tokenizer cuts off before resizing; recorded so a
            model folder says how its frames were made.
        patch_grid: (rows, cols) of patch tokens per frame; must divide (H/2, W/2), because the stem
            halves the image before a non-overlapping patch convolution.
        stem_channels: channels of the two 3x3 stem convolutions.
        joint_names: commanded joints, the column order of states and actions.
        state_velocities: whether a state token carries velocities after the positions.
        text_embedding_dim: width of the frozen MiniLM token embeddings (384).
        max_text_tokens: longest instruction accepted, in word pieces; reserved in the cache.
        chunk_length: H, points per action chunk.
        chunk_rate_hz: rate of the chunk's points; point k is at t_newest + (k + 1) / chunk_rate_hz.
        cameras: the camera streams the model reads (``vla_ros.cameras``: ``/<name>/image_raw``), in the
            order of ``Observation.camera``; the first is the main view (the one the auxiliary frame head and
            rendered views train on). With more than one, every frame's patches get a learned per-camera
            embedding, and each camera is its own stream of timed tokens.
        camera_rate_hz / state_rate_hz: nominal input rates (per camera), used only to size the KV cache.
        max_frame_rate_hz: 0 = the model takes every frame; else each camera's frames are thinned to at most
            this rate before they become tokens (``min_frame_interval_s``): a frame stamped within 0.75
            periods of a frame already taken from the same camera is left out and counted as ``thinned``, so a
            30 Hz camera feeds a 15 Hz model every other frame. Training replays bags through the same rule.
            Two cameras at 15 Hz cost the tokens of one at 30 Hz.
        max_cache_tokens: cache capacity in tokens; 0 derives it from the rates with a 50% margin.
        state_mean / state_std: normalisation of state tokens (len state_dim); None = identity.
        action_mean / action_std: normalisation of action targets (len action_dim); None = identity.
        aux_dim: width of the auxiliary target a task's heads predict beside the actions (0 = none). A config
            with one is the cup task's (``vla_ros.tasks.cups``: where the named cup is, from every action
            token, which teaches the policy to ground the colour word in the image long before the action
            loss alone would); it is not used online.
        aux_loss_weight: weight of the auxiliary loss next to the action loss.
        frame_aux_loss_weight: weight of a second auxiliary loss, per camera frame: a small head on the
            frame's instruction-conditioned keypoints (``PatchEncoder``) predicts the same aux target (0 =
            no such head). The gradient reaches the vision stem in two layers instead of through the
            whole Transformer, so the stem learns to find what the target names; not used online either.
        relative_actions: False = a chunk's points are joint positions; True = offsets from the joint
            positions of the newest joint state at or before the chunk's anchor (``state_reference``), added
            back when the chunk is decoded. Offsets span a fraction of the positions' range, so the same
            error in normalised units is a smaller error in radians; a state-relative model needs a joint
            state before its first chunk.
        pin_first_frame: False = the model sees W seconds back and no further; True = the first frame of the
            main camera after a reset (``StreamingPolicy.reset``; in training the episode's first frame) is
            kept for the whole episode as a *pinned* frame: every later observation and chunk sees it beside
            its window, as it sees the instruction. Its patches get their own learned embedding (one more
            ``camera_embedding`` row), so the model tells the scene as it was from the scene now. What it is
            for: near the grasp the hand hides the cup from the main camera, and the pinned frame still
            shows it.
        action_loss: the training loss on the action points, in normalised units: "mse" (mean squared
            error) or "l1" (mean absolute error, as ACT trains its chunks: small errors keep their full
            gradient where a square makes them vanish). Training only; recorded so a model says how it learned.
    """

    hidden_size: int = 128
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    intermediate_size: int = 344
    rms_norm_eps: float = 1e-5
    initializer_range: float = 0.02
    rope_min_period_s: float = 0.02
    rope_max_period_s: float = 10.0
    window_seconds: float = 0.5
    max_lateness_s: float = 0.1
    image_height: int = 72
    image_width: int = 96
    image_mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    image_std: tuple[float, float, float] = (0.25, 0.25, 0.25)
    crop: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    patch_grid: tuple[int, int] = (4, 6)
    stem_channels: tuple[int, int] = (16, 32)
    joint_names: tuple[str, ...] = COMMANDED_JOINTS
    state_velocities: bool = True
    text_embedding_dim: int = 384
    max_text_tokens: int = 32
    chunk_length: int = 16
    chunk_rate_hz: float = 20.0
    cameras: tuple[str, ...] = ("camera",)
    camera_rate_hz: float = 30.0
    max_frame_rate_hz: float = 0.0
    state_rate_hz: float = 100.0
    max_cache_tokens: int = 0
    state_mean: tuple[float, ...] | None = None
    state_std: tuple[float, ...] | None = None
    action_mean: tuple[float, ...] | None = None
    action_std: tuple[float, ...] | None = None
    aux_dim: int = 0
    aux_loss_weight: float = 1.0
    frame_aux_loss_weight: float = 0.0
    relative_actions: bool = False
    action_loss: str = "mse"
    pin_first_frame: bool = False

    def __post_init__(self) -> None:
        for name in ("image_mean", "image_std", "crop", "patch_grid", "stem_channels", "joint_names", "cameras"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        for name in ("state_mean", "state_std", "action_mean", "action_std"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, tuple(float(v) for v in value))
        positive_ints = (
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "intermediate_size",
            "image_height",
            "image_width",
            "text_embedding_dim",
            "max_text_tokens",
            "chunk_length",
        )
        for name in positive_ints:
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be a positive integer")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size={self.hidden_size} is not divisible by num_attention_heads={self.num_attention_heads}"
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads={self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads={self.num_key_value_heads}"
            )
        if self.head_dim % 4:
            raise ValueError(
                f"head_dim={self.head_dim} (hidden_size / num_attention_heads) must be a multiple of 4: "
                f"half of each head is rotated, in pairs"
            )
        if not (0 < self.rope_min_period_s < self.rope_max_period_s):
            raise ValueError(
                f"need 0 < rope_min_period_s={self.rope_min_period_s} < rope_max_period_s={self.rope_max_period_s}"
            )
        if self.rope_min_period_s < 1e-6:
            raise ValueError(f"rope_min_period_s={self.rope_min_period_s} is below 1 us: time is integer ns")
        if self.aux_dim < 0 or self.aux_loss_weight < 0 or self.frame_aux_loss_weight < 0:
            raise ValueError(
                f"aux_dim={self.aux_dim}, aux_loss_weight={self.aux_loss_weight} and "
                f"frame_aux_loss_weight={self.frame_aux_loss_weight} must be >= 0"
            )
        if not isinstance(self.relative_actions, bool):
            raise ValueError(f"relative_actions={self.relative_actions!r} must be true or false")
        if not isinstance(self.pin_first_frame, bool):
            raise ValueError(f"pin_first_frame={self.pin_first_frame!r} must be true or false")
        if self.action_loss not in ACTION_LOSSES:
            raise ValueError(f"action_loss={self.action_loss!r} must be one of {', '.join(ACTION_LOSSES)}")
        if self.frame_aux_loss_weight > 0 and self.aux_dim == 0:
            raise ValueError(f"frame_aux_loss_weight={self.frame_aux_loss_weight} needs aux_dim > 0 (the target)")
        if self.window_seconds <= 0:
            raise ValueError(f"window_seconds={self.window_seconds} must be > 0")
        if self.max_lateness_s < 0:
            raise ValueError(f"max_lateness_s={self.max_lateness_s} must be >= 0")
        if self.rms_norm_eps <= 0:
            raise ValueError(f"rms_norm_eps={self.rms_norm_eps} must be > 0")
        if len(self.image_mean) != 3 or len(self.image_std) != 3:
            raise ValueError(f"image_mean={self.image_mean} and image_std={self.image_std} need 3 values each")
        if min(self.image_std) <= 0:
            raise ValueError(f"image_std={self.image_std} must be > 0")
        top, bottom, left, right = self.crop if len(self.crop) == 4 else (-1.0,) * 4
        if min(top, bottom, left, right) < 0 or top + bottom >= 1 or left + right >= 1:
            raise ValueError(f"crop={self.crop} must be 4 fractions >= 0 leaving part of the image")
        if len(self.patch_grid) != 2 or min(self.patch_grid) < 1:
            raise ValueError(f"patch_grid={self.patch_grid} must be (rows, cols) >= 1")
        if self.image_height % 2 or self.image_width % 2:
            raise ValueError(f"image size {self.image_height}x{self.image_width} must be even (stride-2 stem)")
        rows, cols = self.patch_grid
        if (self.image_height // 2) % rows or (self.image_width // 2) % cols:
            raise ValueError(
                f"patch_grid={self.patch_grid} must divide the stem output "
                f"{self.image_height // 2}x{self.image_width // 2} (image {self.image_height}x"
                f"{self.image_width} halved)"
            )
        if len(self.stem_channels) != 2 or min(self.stem_channels) < 1:
            raise ValueError(f"stem_channels={self.stem_channels} must be two positive ints")
        if not self.joint_names or len(set(self.joint_names)) != len(self.joint_names):
            raise ValueError(f"joint_names={self.joint_names} must be non-empty and unique")
        if (
            not self.cameras
            or len(set(self.cameras)) != len(self.cameras)
            or not all(isinstance(c, str) and c and "/" not in c for c in self.cameras)
        ):
            raise ValueError(f"cameras={self.cameras} must be non-empty, unique stream names (no '/')")
        for name in ("chunk_rate_hz", "camera_rate_hz", "state_rate_hz"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}={getattr(self, name)} must be > 0")
        if not (math.isfinite(self.max_frame_rate_hz) and self.max_frame_rate_hz >= 0):
            raise ValueError(f"max_frame_rate_hz={self.max_frame_rate_hz} must be >= 0 (0 = every frame)")
        if self.max_cache_tokens < 0:
            raise ValueError(f"max_cache_tokens={self.max_cache_tokens} must be >= 0 (0 = derive from rates)")
        if self.max_cache_tokens and self.max_cache_tokens < self.prefix_tokens + 4 * self.num_visual_tokens:
            raise ValueError(
                f"max_cache_tokens={self.max_cache_tokens} is below max_text_tokens (+ the pinned "
                f"frame) + 4 frames = {self.prefix_tokens + 4 * self.num_visual_tokens}"
            )
        for name, size in (
            ("state_mean", self.state_dim),
            ("state_std", self.state_dim),
            ("action_mean", self.action_dim),
            ("action_std", self.action_dim),
        ):
            value = getattr(self, name)
            if value is None:
                continue
            if len(value) != size:
                raise ValueError(f"{name} has {len(value)} values, expected {size}")
            if not all(math.isfinite(v) for v in value):
                raise ValueError(f"{name}={value} has non-finite values")
            if name.endswith("std") and min(value) <= 0:
                raise ValueError(f"{name}={value} must be > 0")

    # ----- derived sizes -----
    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def num_visual_tokens(self) -> int:
        return self.patch_grid[0] * self.patch_grid[1]

    @property
    def state_dim(self) -> int:
        return len(self.joint_names) * (2 if self.state_velocities else 1)

    @property
    def action_dim(self) -> int:
        return len(self.joint_names)

    # ----- time, integer nanoseconds (exact masks and exact RoPE reduction) -----
    @property
    def window_ns(self) -> int:
        return int(round(self.window_seconds * 1e9))

    @property
    def max_lateness_ns(self) -> int:
        return int(round(self.max_lateness_s * 1e9))

    @property
    def rope_periods_ns(self) -> tuple[int, ...]:
        """head_dim / 4 rotation periods (half the head is rotated, in pairs), fastest first, geometric
        from min to max period."""
        n = self.head_dim // 4
        if n == 1:
            return (int(round(self.rope_min_period_s * 1e9)),)
        ratio = self.rope_max_period_s / self.rope_min_period_s
        return tuple(int(round(self.rope_min_period_s * ratio ** (i / (n - 1)) * 1e9)) for i in range(n))

    @property
    def chunk_offsets_ns(self) -> tuple[int, ...]:
        """(H,) offsets of the chunk's points after the newest observation: (k + 1) / chunk_rate_hz."""
        return tuple(int(round((k + 1) * 1e9 / self.chunk_rate_hz)) for k in range(self.chunk_length))

    @property
    def min_frame_interval_s(self) -> float:
        """Frames of one camera closer than this to a frame already taken are thinned (0: none are)."""
        return 0.75 / self.max_frame_rate_hz if self.max_frame_rate_hz else 0.0

    @property
    def frame_rate_hz(self) -> float:
        """Frames per second per camera the model takes at the nominal camera rate."""
        return min(self.camera_rate_hz, self.max_frame_rate_hz) if self.max_frame_rate_hz else self.camera_rate_hz

    @property
    def frame_embeddings(self) -> int:
        """Rows of the per-frame embedding: one per camera, one more for the pinned frame (0 for a
        one-camera model without a pin: its frames need none, and its step graph has no ``image_camera``)."""
        n = len(self.cameras) + (1 if self.pin_first_frame else 0)
        return n if n > 1 else 0

    @property
    def pinned_camera(self) -> int:
        """The ``image_camera`` index that marks the pinned frame's patches (after the cameras')."""
        return len(self.cameras)

    @property
    def prefix_tokens(self) -> int:
        """Cache slots reserved before the window: the instruction, and the pinned frame's patches."""
        return self.max_text_tokens + (self.num_visual_tokens if self.pin_first_frame else 0)

    @property
    def cache_capacity(self) -> int:
        """Tokens the KV cache holds: instruction (and pinned frame) + the W + lateness window at the
        nominal rates, +50%."""
        if self.max_cache_tokens:
            return self.max_cache_tokens
        span_s = self.window_seconds + self.max_lateness_s
        frames = (math.floor(span_s * self.frame_rate_hz) + 2) * len(self.cameras)
        states = math.floor(span_s * self.state_rate_hz) + 2
        return self.prefix_tokens + int(math.ceil(1.5 * (frames * self.num_visual_tokens + states)))

    # ----- JSON -----
    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            out[field.name] = list(value) if isinstance(value, tuple) else value
        for key in DERIVED_KEYS:
            out[key] = getattr(self, key)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "config") -> ModelConfig:
        """Build from a config.json dict; keys that are not fields (file metadata) are ignored.

        Derived keys (num_visual_tokens, head_dim, ...) must agree with the fields when present.
        """
        names = {f.name for f in dataclasses.fields(cls)}
        config = cls(**{k: v for k, v in data.items() if k in names})
        for key in DERIVED_KEYS:
            if key in data and data[key] != getattr(config, key):
                raise ValueError(
                    f"{source}: {key}={data[key]} disagrees with the other fields (they give {getattr(config, key)})"
                )
        return config

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def replace(self, **changes: Any) -> ModelConfig:
        return dataclasses.replace(self, **changes)


def tiny_config(**changes: Any) -> ModelConfig:
    """A model small enough for unit tests: a few thousand parameters, runs in milliseconds on a CPU."""
    base = dict(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        image_height=16,
        image_width=24,
        patch_grid=(2, 3),
        stem_channels=(8, 8),
        chunk_length=4,
        chunk_rate_hz=10.0,
        window_seconds=0.1,
        max_lateness_s=0.05,
        rope_min_period_s=0.02,
        rope_max_period_s=2.0,
        max_text_tokens=8,
        text_embedding_dim=384,
    )
    base.update(changes)
    return ModelConfig(**base)

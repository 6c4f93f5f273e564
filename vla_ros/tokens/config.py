"""Configuration of the timed-token pipeline: what a message must look like and how time is handled."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from vla_ros.chunks import COMMANDED_JOINTS


@dataclasses.dataclass(frozen=True)
class TokenizerConfig:
    """How messages become model inputs. The image fields follow the model's config.json.

    Args:
        joint_names: state order; a JointState must name every one of them (extra joints are ignored).
        state_velocities: append joint velocities to the state (the JointState must carry them).
        image_height / image_width: model input size after crop and resize.
        image_mean / image_std: per-channel (RGB) normalisation of pixels scaled to [0, 1].
        crop: (top, bottom, left, right) fractions of the input image cut away before resizing; zeros keep
            the whole frame.
        input_height / input_width: size a camera frame must have (0 = any size). A different size usually
            means a different camera or driver setting than the model was trained on, so it is rejected.
        max_text_tokens: word pieces kept from the instruction, [CLS] and [SEP] included.
        max_input_pixels: a camera frame with more pixels is refused before any per-pixel work (a corrupt
            or hostile header must not make the policy decode, copy or resize a huge buffer).
    """

    joint_names: tuple[str, ...] = COMMANDED_JOINTS
    state_velocities: bool = True
    image_height: int = 72  # 320x240 camera at 0.3 scale: small enough for CPU training, cups ~5 px wide
    image_width: int = 96
    image_mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    image_std: tuple[float, float, float] = (0.25, 0.25, 0.25)
    crop: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    input_height: int = 0
    input_width: int = 0
    max_text_tokens: int = 32
    max_input_pixels: int = 3840 * 2160  # 4K UHD: far above any camera this policy's input size needs

    def __post_init__(self) -> None:
        object.__setattr__(self, "joint_names", tuple(self.joint_names))
        for name in ("image_mean", "image_std", "crop"):
            object.__setattr__(self, name, tuple(float(v) for v in getattr(self, name)))
        if not self.joint_names or len(set(self.joint_names)) != len(self.joint_names):
            raise ValueError(f"joint_names must be non-empty and unique, got {self.joint_names}")
        if self.image_height < 8 or self.image_width < 8:
            raise ValueError(f"image size must be at least 8x8, got {self.image_height}x{self.image_width}")
        if len(self.image_mean) != 3 or len(self.image_std) != 3 or min(self.image_std) <= 0:
            raise ValueError(
                f"image_mean/image_std need 3 values with std > 0, got {self.image_mean} / {self.image_std}"
            )
        top, bottom, left, right = self.crop if len(self.crop) == 4 else (-1, -1, -1, -1)
        if min(top, bottom, left, right) < 0 or top + bottom >= 1 or left + right >= 1:
            raise ValueError(f"crop must be 4 fractions >= 0 leaving part of the image, got {self.crop}")
        if self.input_height < 0 or self.input_width < 0:
            raise ValueError(f"input size must be >= 0, got {self.input_height}x{self.input_width}")
        if self.max_input_pixels < 64:
            raise ValueError(f"max_input_pixels must be >= 64 (8x8), got {self.max_input_pixels}")
        if self.max_text_tokens < 3:
            raise ValueError(f"max_text_tokens must be >= 3 ([CLS] word [SEP]), got {self.max_text_tokens}")

    @property
    def state_size(self) -> int:
        return len(self.joint_names) * (2 if self.state_velocities else 1)

    @classmethod
    def from_model_config(cls, model_config: dict[str, Any], **overrides) -> TokenizerConfig:
        """The fields a model's config.json fixes; node parameters may add input size and crop."""
        keys = ("joint_names", "state_velocities", "image_height", "image_width", "image_mean", "image_std", "crop")
        values = {k: model_config[k] for k in keys if k in model_config}
        values.update(overrides)
        return cls(**values)


@dataclasses.dataclass(frozen=True)
class StreamConfig:
    """Time handling of the token window.

    Args:
        window_s: tokens older than the newest stamp minus this leave the window (the model's W).
        lateness_s: a message may arrive this much older than the newest stamp and is still inserted in
            time order; older ones are dropped as ``late``. Must be below ``window_s``.
        max_future_s: a stamp more than this ahead of the receive clock is dropped as ``future`` (a driver
            with a wrong clock); checked only when the receive time is known.
        clock_jump_s: the receive clock going back by more than this is a clock jump (a simulator reset):
            the window is cleared and the jump reported. Without receive times a stamp this much older than
            the newest one counts as the jump.
        min_frame_interval_s: 0 = every frame; else a frame stamped closer than this to a frame of the
            same camera already in the window is dropped and counted as ``thinned`` (not an error: the
            model reads fewer frames than the camera sends, ``ModelConfig.max_frame_rate_hz``).
    """

    window_s: float = 1.0
    lateness_s: float = 0.1  # camera pipelines deliver frames tens of ms after joint states of the same instant
    max_future_s: float = 0.5
    clock_jump_s: float = 1.0
    min_frame_interval_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ("window_s", "lateness_s", "max_future_s", "clock_jump_s", "min_frame_interval_s"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        if self.window_s <= 0:
            raise ValueError(f"window_s must be > 0, got {self.window_s}")
        if self.lateness_s >= self.window_s:
            raise ValueError(f"lateness_s ({self.lateness_s}) must be below window_s ({self.window_s})")
        if self.clock_jump_s <= self.lateness_s:
            raise ValueError(f"clock_jump_s ({self.clock_jump_s}) must exceed lateness_s ({self.lateness_s})")

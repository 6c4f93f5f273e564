"""Message -> array converters (no rclpy import: they read message fields by name).

They accept rclpy messages and the messages decoded from MCAP files alike (both have the same field
names), which is what lets the live node and the offline dataset reader share one code path. Every
problem raises ``TokenError`` with a reason code that the stream counts.
"""

from __future__ import annotations

import math
import re

import numpy as np

from vla_ros.joint_state_check import JointStateCheck, JointStateRefused
from vla_ros.tokens.config import TokenizerConfig

# Raw encodings accepted from sensor_msgs/Image: channels and how to reach RGB. Colour only: the model reads
# colour words, and a grey frame (mono8) copied into three channels would be a different picture to it.
IMAGE_ENCODINGS = {"rgb8": 3, "bgr8": 3, "rgba8": 4, "bgra8": 4}
COMPRESSED_FORMATS = ("jpeg", "jpg", "png")


class TokenError(ValueError):
    """A message the pipeline will not use. ``code`` names the reason (counted and reported)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def _buffer(data) -> np.ndarray:
    """uint8 view of a message's byte array (bytes, array.array, list or ndarray) without copying when possible."""
    if isinstance(data, np.ndarray):
        return data.astype(np.uint8, copy=False).reshape(-1)
    if isinstance(data, (list, tuple)):
        return np.asarray(data, dtype=np.uint8)
    return np.frombuffer(data, dtype=np.uint8)


def check_image_size(width: int, height: int, config: TokenizerConfig) -> None:
    """Refuse a frame by its header alone, before any per-pixel work: more than ``max_input_pixels`` or
    not the required input size."""
    if width * height > config.max_input_pixels:
        raise TokenError(
            "image_too_large",
            f"image is {width}x{height} = {width * height} pixels, more than "
            f"max_input_pixels={config.max_input_pixels}",
        )
    if (config.input_height and height != config.input_height) or (config.input_width and width != config.input_width):
        raise TokenError(
            "wrong_image_size",
            f"image is {width}x{height}, the pipeline expects "
            f"{config.input_width or 'any'}x{config.input_height or 'any'}",
        )


def compressed_image_size(data: np.ndarray) -> tuple[int, int]:
    """(width, height) from a PNG or JPEG header without decoding the pixels; TokenError when the header
    cannot be read (the frame could not be decoded either)."""
    raw = memoryview(np.ascontiguousarray(data))  # no copy: only header bytes are read
    if bytes(raw[:8]) == b"\x89PNG\r\n\x1a\n":
        if len(raw) < 24 or bytes(raw[12:16]) != b"IHDR":
            raise TokenError("corrupt_image", "PNG without an IHDR header")
        return int.from_bytes(raw[16:20], "big"), int.from_bytes(raw[20:24], "big")
    if bytes(raw[:2]) == b"\xff\xd8":
        # Walk the JPEG segments to the first start-of-frame marker (SOF0..SOF15 less DHT, JPG, DAC).
        i = 2
        while i + 9 < len(raw):
            if raw[i] != 0xFF:
                raise TokenError("corrupt_image", f"JPEG header broken at byte {i}")
            marker = raw[i + 1]
            if marker == 0xFF:  # fill byte
                i += 1
                continue
            if marker == 0x01 or 0xD0 <= marker <= 0xD7:  # markers without a length
                i += 2
                continue
            if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
                return int.from_bytes(raw[i + 7 : i + 9], "big"), int.from_bytes(raw[i + 5 : i + 7], "big")
            i += 2 + int.from_bytes(raw[i + 2 : i + 4], "big")
        raise TokenError("corrupt_image", "JPEG without a frame header")
    raise TokenError("corrupt_image", "compressed data is neither PNG nor JPEG")


def rgb_from_image_msg(msg, config: TokenizerConfig | None = None) -> np.ndarray:
    """sensor_msgs/Image -> (H, W, 3) uint8 RGB. Honours ``step`` (row padding). With ``config`` the size
    is checked (``check_image_size``) before any per-pixel work."""
    encoding = str(msg.encoding).lower()
    if encoding not in IMAGE_ENCODINGS:
        raise TokenError(
            "unknown_encoding", f"image encoding {msg.encoding!r} is not one the model takes: {sorted(IMAGE_ENCODINGS)}"
        )
    height, width, step = int(msg.height), int(msg.width), int(msg.step)
    data = _buffer(msg.data)
    if height == 0 or width == 0 or data.size == 0:
        raise TokenError("empty_image", f"image is empty ({width}x{height}, {data.size} bytes)")
    if config is not None:
        check_image_size(width, height, config)
    channels = IMAGE_ENCODINGS[encoding]
    if step < width * channels:
        raise TokenError("corrupt_image", f"step {step} is shorter than a row of {width} x {channels} bytes")
    if data.size < step * height:
        raise TokenError("corrupt_image", f"image has {data.size} bytes, {step} x {height} = {step * height} expected")
    rows = data[: step * height].reshape(height, step)[:, : width * channels]  # drop row padding
    pixels = rows.reshape(height, width, channels)
    if encoding == "rgb8":
        return pixels
    if encoding == "bgr8":
        return pixels[:, :, ::-1]
    if encoding == "rgba8":
        return pixels[:, :, :3]
    return pixels[:, :, 2::-1]  # bgra8


def rgb_from_compressed_msg(msg, config: TokenizerConfig | None = None) -> np.ndarray:
    """sensor_msgs/CompressedImage (jpeg or png, as image_transport writes the format) -> (H, W, 3) RGB.
    With ``config`` the size in the header is checked (``check_image_size``) before decoding."""
    import cv2

    fmt = str(msg.format).lower()
    # image_transport writes e.g. "rgb8; jpeg compressed bgr8"; plain "jpeg"/"png" is common too.
    if not any(f in fmt for f in COMPRESSED_FORMATS):
        raise TokenError("unknown_encoding", f"compressed format {msg.format!r} is neither jpeg nor png")
    data = _buffer(msg.data)
    if data.size == 0:
        raise TokenError("empty_image", "compressed image has no data")
    if config is not None:
        check_image_size(*compressed_image_size(data), config)
    decoded = cv2.imdecode(data, cv2.IMREAD_UNCHANGED)
    if decoded is None or decoded.size == 0:
        raise TokenError("corrupt_image", f"could not decode {data.size} bytes as {msg.format!r}")
    if decoded.dtype != np.uint8:
        raise TokenError("unknown_encoding", f"compressed image decodes to {decoded.dtype}, 8-bit expected")
    if decoded.ndim == 2 or decoded.shape[2] < 3:
        raise TokenError("unknown_encoding", f"{msg.format!r} decodes to a grey picture: the model takes colour frames")
    if decoded.shape[2] == 4:
        return cv2.cvtColor(decoded, cv2.COLOR_BGRA2RGB)
    return cv2.cvtColor(decoded, cv2.COLOR_BGR2RGB)  # OpenCV decodes to BGR


def preprocess_image(rgb: np.ndarray, config: TokenizerConfig) -> np.ndarray:
    """(H, W, 3) uint8 -> (3, h, w) float32: check size, crop, resize (area), scale, normalise."""
    import cv2

    height, width = rgb.shape[:2]
    check_image_size(width, height, config)
    top, bottom, left, right = config.crop
    y0, y1 = round(top * height), height - round(bottom * height)
    x0, x1 = round(left * width), width - round(right * width)
    if y1 - y0 < 1 or x1 - x0 < 1:
        raise TokenError("wrong_image_size", f"image {width}x{height} is too small for crop {config.crop}")
    cropped = rgb[y0:y1, x0:x1]
    resized = cv2.resize(
        np.ascontiguousarray(cropped), (config.image_width, config.image_height), interpolation=cv2.INTER_AREA
    )
    scale = np.float32(1.0 / 255.0)
    mean = np.asarray(config.image_mean, dtype=np.float32)
    inv_std = np.float32(1.0) / np.asarray(config.image_std, dtype=np.float32)
    out = (resized.astype(np.float32) * scale - mean) * inv_std  # (h, w, 3)
    return np.ascontiguousarray(out.transpose(2, 0, 1))  # (3, h, w)


class JointStateConverter:
    """sensor_msgs/JointState -> state vector in the configured joint order (positions, then velocities).

    Names and values are checked as every node checks them (``vla_ros.joint_state_check``: the same reason
    codes); the name -> index map is cached per distinct name list, so the common case (a driver always
    sending the same names in the same order) costs one tuple lookup.
    """

    def __init__(self, config: TokenizerConfig) -> None:
        self.joint_names = config.joint_names
        self.velocities = config.state_velocities
        self._check = JointStateCheck(config.joint_names)

    def set_velocity_limits(self, limits) -> None:
        """The robot's velocity limits (configured joint order), once known: states that jump are refused."""
        self._check.set_velocity_limits(limits)

    def forget(self) -> None:
        """An announced reset: the next state may be anywhere."""
        self._check.forget()

    def concerns(self, names) -> bool:
        """Whether a message with these names is this state's (``JointStateCheck.concerns``)."""
        return self._check.concerns(names)

    def __call__(self, msg, stamp_ns: int) -> np.ndarray:
        """The merged state after ``msg`` (stamped ``stamp_ns``): several drivers naming disjoint joints merge."""
        if self.velocities and len(msg.velocity) == 0:
            raise TokenError("missing_velocities", "the state uses joint velocities but the message has none")
        try:
            q = self._check.check(msg.name, msg.position, stamp_ns, msg.velocity if self.velocities else None)
        except JointStateRefused as err:
            raise TokenError(err.code, err.detail) from None
        parts = (q, self._check.velocities) if self.velocities else (q,)
        return np.concatenate(parts).astype(np.float32)


# Unicode's control characters (category Cc: U+0000-U+001F, U+007F-U+009F) less those str.isspace() takes for
# whitespace (\t \n \v \f \r, the separators U+001C-U+001F, NEL U+0085); one regular expression scans a
# long text a hundred times faster than a loop over unicodedata.category (test_policy_input_checks).
CONTROL_CHARACTERS = re.compile("[\x00-\x08\x0e-\x1b\x7f-\x84\x86-\x9f]")


def instruction_text(text: str, max_chars: int = 500) -> str:
    """Normalise an instruction string; empty, absurdly long text or control characters (an embedded NUL
    would cut the text wherever it passes through C) are an error, not a silent truncation."""
    text = str(text)
    control = CONTROL_CHARACTERS.search(text)
    if control is not None:
        i = control.start()
        raise TokenError(
            "control_character",
            f"instruction has control character U+{ord(text[i]):04X} at position {i}: ...{text[max(0, i - 40) : i]!r}",
        )
    cleaned = " ".join(str(text).split())
    if not cleaned:
        raise TokenError("empty_instruction", "instruction is empty")
    if len(cleaned) > max_chars:
        raise TokenError("instruction_too_long", f"instruction has {len(cleaned)} characters (max {max_chars})")
    return cleaned


def finite_or_error(value: float, what: str) -> float:
    if not math.isfinite(value):
        raise TokenError("non_finite", f"{what} is {value}")
    return value

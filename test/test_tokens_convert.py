"""Converters against hand-built messages of every supported encoding, and every kind of bad input."""

import cv2
import numpy as np
import pytest
from sensor_msgs.msg import CompressedImage, Image, JointState

from vla_ros.chunks import COMMANDED_JOINTS
from vla_ros.tokens import Kind, StreamConfig, TokenizerConfig, TokenStream
from vla_ros.tokens.convert import (
    JointStateConverter,
    TokenError,
    preprocess_image,
    rgb_from_compressed_msg,
    rgb_from_image_msg,
)

pytestmark = pytest.mark.unit  # no ROS node, no DDS, no wall-clock timing: `make test` runs it beside others

RNG = np.random.default_rng(0)
RGB = RNG.integers(0, 256, size=(6, 5, 3), dtype=np.uint8)  # H=6, W=5


def image_msg(encoding: str, rgb: np.ndarray = RGB, pad: int = 0) -> Image:
    """Hand-built Image with ``pad`` bytes of row padding."""
    pixels = {
        "rgb8": rgb,
        "bgr8": rgb[:, :, ::-1],
        "rgba8": np.concatenate([rgb, np.full(rgb.shape[:2] + (1,), 7, np.uint8)], axis=2),
        "bgra8": np.concatenate([rgb[:, :, ::-1], np.full(rgb.shape[:2] + (1,), 7, np.uint8)], axis=2),
        "mono8": rgb[:, :, :1],
    }[encoding]
    h, w, c = pixels.shape
    rows = np.concatenate([pixels.reshape(h, w * c), np.full((h, pad), 255, np.uint8)], axis=1)
    return Image(height=h, width=w, encoding=encoding, step=w * c + pad, data=rows.tobytes())


@pytest.mark.parametrize("encoding", ["rgb8", "bgr8", "rgba8", "bgra8"])
@pytest.mark.parametrize("pad", [0, 3])
def test_every_raw_encoding_gives_the_same_rgb(encoding, pad):
    out = rgb_from_image_msg(image_msg(encoding, pad=pad))
    assert out.shape == (6, 5, 3) and out.dtype == np.uint8
    np.testing.assert_array_equal(out, RGB)  # bgr8 and bgra8 too: the channels come back in RGB order


def test_a_grey_frame_is_refused_not_copied_into_three_channels():
    """The model reads colour: mono8 (or a PNG that decodes to grey) is refused, as unknown_encoding."""
    with pytest.raises(TokenError) as err:
        rgb_from_image_msg(image_msg("mono8"))
    assert err.value.code == "unknown_encoding" and "'mono8'" in str(err.value)
    ok, grey = cv2.imencode(".png", RGB[:, :, 0])
    with pytest.raises(TokenError) as err:
        rgb_from_compressed_msg(CompressedImage(format="png", data=grey.tobytes()))
    assert err.value.code == "unknown_encoding" and "grey" in str(err.value)


def test_png_is_lossless_and_jpeg_close():
    big = cv2.resize(RGB, (40, 48), interpolation=cv2.INTER_NEAREST)
    ok, png = cv2.imencode(".png", big[:, :, ::-1])
    assert ok
    np.testing.assert_array_equal(rgb_from_compressed_msg(CompressedImage(format="png", data=png.tobytes())), big)
    ok, jpg = cv2.imencode(".jpg", big[:, :, ::-1], [cv2.IMWRITE_JPEG_QUALITY, 100])
    out = rgb_from_compressed_msg(CompressedImage(format="rgb8; jpeg compressed bgr8", data=jpg.tobytes()))
    err = np.abs(out.astype(int) - big).mean()
    swapped = np.abs(out[:, :, ::-1].astype(int) - big).mean()
    assert out.shape == big.shape and err < 15 and swapped > 3 * err  # lossy, but the colour order is right


@pytest.mark.parametrize(
    "msg, code",
    [
        (Image(height=2, width=2, encoding="16UC1", step=4, data=bytes(8)), "unknown_encoding"),
        (Image(height=2, width=2, encoding="yuv422", step=4, data=bytes(8)), "unknown_encoding"),
        (Image(height=0, width=0, encoding="rgb8", step=0, data=b""), "empty_image"),
        (Image(height=2, width=2, encoding="rgb8", step=6, data=b""), "empty_image"),
        (Image(height=2, width=2, encoding="rgb8", step=6, data=bytes(11)), "corrupt_image"),  # one byte short
        (Image(height=2, width=2, encoding="rgb8", step=5, data=bytes(12)), "corrupt_image"),  # step < row
    ],
)
def test_bad_raw_images_are_rejected_with_a_reason(msg, code):
    with pytest.raises(TokenError) as err:
        rgb_from_image_msg(msg)
    assert err.value.code == code


@pytest.mark.parametrize(
    "msg, code",
    [
        (CompressedImage(format="tiff", data=bytes(10)), "unknown_encoding"),
        (CompressedImage(format="jpeg", data=b""), "empty_image"),
        (CompressedImage(format="jpeg", data=b"\xff\xd8 this is not a jpeg"), "corrupt_image"),
        (CompressedImage(format="png", data=bytes(range(64))), "corrupt_image"),
    ],
)
def test_bad_compressed_images_are_rejected_with_a_reason(msg, code):
    with pytest.raises(TokenError) as err:
        rgb_from_compressed_msg(msg)
    assert err.value.code == code


def test_preprocess_crops_resizes_and_normalises_per_config():
    config = TokenizerConfig(image_height=8, image_width=10, image_mean=(0.5, 0.25, 0.0), image_std=(0.5, 0.25, 1.0))
    rgb = np.zeros((24, 30, 3), np.uint8)
    rgb[:, :, 0], rgb[:, :, 1], rgb[:, :, 2] = 255, 0, 51
    out = preprocess_image(rgb, config)
    assert out.shape == (3, 8, 10) and out.dtype == np.float32
    np.testing.assert_allclose(out[0], 1.0, atol=1e-6)  # (1 - 0.5) / 0.5
    np.testing.assert_allclose(out[1], -1.0, atol=1e-6)  # (0 - 0.25) / 0.25
    np.testing.assert_allclose(out[2], 0.2, atol=1e-6)
    # crop: the left half is red, the right half blue; cropping away the right half leaves only red
    rgb[:, 15:] = (0, 0, 255)
    cropped = preprocess_image(rgb, TokenizerConfig(image_height=8, image_width=10, crop=(0, 0, 0, 0.5)))
    np.testing.assert_allclose(cropped[0], (1.0 - 0.5) / 0.25, atol=1e-6)  # no blue half blended in
    np.testing.assert_allclose(cropped[2], (0.2 - 0.5) / 0.25, atol=1e-6)


def test_wrong_image_size_is_rejected_when_an_input_size_is_configured():
    config = TokenizerConfig(input_height=240, input_width=320)
    with pytest.raises(TokenError) as err:
        preprocess_image(np.zeros((480, 640, 3), np.uint8), config)
    assert err.value.code == "wrong_image_size" and "640x480" in str(err.value)
    assert preprocess_image(np.zeros((240, 320, 3), np.uint8), config).shape == (3, 72, 96)


def joint_msg(names, positions, velocities=None) -> JointState:
    return JointState(
        name=list(names),
        position=[float(v) for v in positions],
        velocity=[float(v) for v in ([] if velocities is None else velocities)],
    )


def test_joint_state_is_reordered_to_the_configured_names_and_extra_joints_ignored():
    convert = JointStateConverter(TokenizerConfig())
    names = list(reversed(COMMANDED_JOINTS)) + ["right_finger_joint"]
    q = np.arange(len(names), dtype=float)
    state = convert(joint_msg(names, q, q * 10), 1_000)
    expected_q = [q[names.index(n)] for n in COMMANDED_JOINTS]
    np.testing.assert_array_equal(state, np.array(expected_q + [v * 10 for v in expected_q], np.float32))
    no_vel = JointStateConverter(TokenizerConfig(state_velocities=False))(joint_msg(names, q), 1_000)
    np.testing.assert_array_equal(no_vel, np.array(expected_q, np.float32))


N = len(COMMANDED_JOINTS)


@pytest.mark.parametrize(
    "msg, code",
    [
        (joint_msg(COMMANDED_JOINTS[:-1], np.zeros(N - 1), np.zeros(N - 1)), "joint_state_missing_joint"),
        (joint_msg(COMMANDED_JOINTS[:-1] + ("elbow_jiont",), np.zeros(N), np.zeros(N)), "joint_state_missing_joint"),
        (
            joint_msg(COMMANDED_JOINTS + ("elbow_joint",), np.zeros(N + 1), np.zeros(N + 1)),
            "joint_state_duplicate_name",
        ),
        (joint_msg(COMMANDED_JOINTS, np.zeros(N - 2), np.zeros(N)), "joint_state_size"),
        (joint_msg(COMMANDED_JOINTS, np.zeros(N), np.zeros(N - 1)), "joint_state_size"),
        (joint_msg(COMMANDED_JOINTS, np.zeros(N)), "missing_velocities"),
        (joint_msg(COMMANDED_JOINTS, [0, 0, float("nan"), 0, 0, 0, 0], np.zeros(N)), "joint_state_non_finite"),
        (joint_msg(COMMANDED_JOINTS, np.zeros(N), [0, 0, 0, float("inf"), 0, 0, 0]), "joint_state_non_finite"),
    ],
)
def test_bad_joint_states_are_rejected_with_a_reason(msg, code):
    with pytest.raises(TokenError) as err:
        JointStateConverter(TokenizerConfig())(msg, 1_000)
    assert err.value.code == code


def test_the_stream_counts_every_rejection_by_reason_and_keeps_going():
    stream = TokenStream(TokenizerConfig(image_height=8, image_width=8), StreamConfig())
    good_img = image_msg("rgb8", RNG.integers(0, 256, (16, 16, 3), dtype=np.uint8))
    bad_img = Image(height=2, width=2, encoding="32FC1", step=8, data=bytes(16))
    nan_js = joint_msg(COMMANDED_JOINTS, [float("nan")] * N, np.zeros(N))
    bad_stamp = joint_msg(COMMANDED_JOINTS, np.zeros(N), np.zeros(N))
    bad_stamp.header.stamp.nanosec = 999_999_999
    for i, msg in enumerate([good_img, bad_img, nan_js]):
        msg.header.stamp.sec = i + 1
    assert stream.add_image(good_img, now_ns=1_000_000_000).kind == Kind.IMAGE
    assert stream.add_image(bad_img, now_ns=2_000_000_000) is None
    assert stream.add_joint_state(nan_js, now_ns=3_000_000_000) is None
    assert stream.add_message("sensor_msgs/msg/Imu", object(), 3_000_000_000, "/imu") is None
    assert stream.set_instruction("   ", 3_000_000_000) is None
    assert dict(stream.stats.rejected) == {
        "unknown_encoding": 1,
        "joint_state_non_finite": 1,
        "unsupported_type": 1,
        "empty_instruction": 1,
    }
    assert stream.counts_add_up() and len(stream) == 1
    assert "joint_state_non_finite" in stream.last_rejection or "empty_instruction" in stream.last_rejection


def test_a_camera_keeps_the_encoding_and_size_of_its_first_frame():
    """A relabelled (bgr8 after rgb8) or resized (half size) camera is refused, not reinterpreted or rescaled;
    each camera has its own; nothing is locked by a frame that was refused."""
    stream = TokenStream(TokenizerConfig(image_height=8, image_width=8), StreamConfig(), cameras={"/a": 0, "/b": 1})
    pixels = RNG.integers(0, 256, (16, 16, 3), dtype=np.uint8)

    def frame(k: int, encoding: str = "rgb8", rgb: np.ndarray = pixels):
        msg = image_msg(encoding, rgb)
        msg.header.stamp.nanosec = k * 10_000_000
        return msg

    assert stream.add_image(frame(1, "mono8"), source="/a") is None  # refused: locks nothing
    assert stream.add_image(frame(2), source="/a") is not None  # the first accepted frame: rgb8, 16x16
    assert stream.add_image(frame(3, "bgr8"), source="/a") is None
    assert stream.last_rejection_code == "wrong_image_encoding" and "'rgb8'" in stream.last_rejection
    assert stream.add_image(frame(4, rgb=pixels[::2, ::2]), source="/a") is None
    assert (
        stream.last_rejection_code == "wrong_image_size"
        and "8x8" in stream.last_rejection
        and "16x16" in stream.last_rejection
    )
    assert stream.add_image(frame(5, "bgr8", pixels[::2, ::2]), source="/b") is not None  # another camera, its own
    assert (
        stream.add_image(frame(6), source="/a") is not None
        and stream.add_image(frame(7, "bgr8", pixels[::2, ::2]), source="/b") is not None
    )
    assert dict(stream.stats.rejected) == {"unknown_encoding": 1, "wrong_image_encoding": 1, "wrong_image_size": 1}
    assert stream.counts_add_up()


def test_config_errors_quote_the_values():
    with pytest.raises(ValueError, match="lateness_s .0.5. must be below window_s .0.4."):
        StreamConfig(window_s=0.4, lateness_s=0.5)
    with pytest.raises(ValueError, match="std > 0"):
        TokenizerConfig(image_std=(1.0, 0.0, 1.0))
    with pytest.raises(ValueError, match="window_s must be a finite number"):
        StreamConfig(window_s=float("nan"))

"""The policy's input checks without ROS (``vla_ros.policy.input_checks``, the session's frozen camera): an
instruction bounded by its UTF-8 size before any work, a flood of instructions costing one encoding per
interval with the newest winning, runs of byte-identical frames found cheaply and only when every byte
matches, refusals held for a second, and a session that stops its chunks while its camera is frozen."""

import time
import unicodedata

import numpy as np
import pytest
import torch
from sensor_msgs.msg import Image, JointState

from vla_ros.chunks import COMMANDED_JOINTS
from vla_ros.model.config import tiny_config
from vla_ros.model.model import VLATransformer
from vla_ros.model.runtime import StreamingPolicy
from vla_ros.params.policy import PARAMS
from vla_ros.params.spec import default_values
from vla_ros.policy import PolicySession
from vla_ros.policy.input_checks import InstructionGate, RepeatedFrames, instruction_size_error
from vla_ros.policy.session import SessionConfig
from vla_ros.ros.rejections import RecentRefusals
from vla_ros.ros.time import time_msg_from_ns
from vla_ros.tokens.convert import CONTROL_CHARACTERS, TokenError, instruction_text
from vla_ros.tokens.text import minilm_path, shared_encoder

pytestmark = pytest.mark.unit  # no ROS node, no DDS, no wall-clock timing: `make test` runs it beside others

MS = 1_000_000
DEFAULT_MAX_BYTES = default_values(PARAMS)["max_instruction_bytes"]


# ---- instructions ------------------------------------------------------------------------------------
def test_an_instruction_is_measured_in_utf8_bytes_and_a_huge_one_costs_nothing_to_refuse():
    assert instruction_size_error("é" * 512, 1024) is None  # 1,024 bytes: at the bound
    assert "1026 bytes" in instruction_size_error("é" * 513, 1024)  # 513 characters, 1,026 bytes
    huge = "pick up the red cup " * 52_429  # 1 MB
    t0 = time.perf_counter()
    reason = instruction_size_error(huge, 1024)
    assert (time.perf_counter() - t0) < 1e-3 and "1048580 characters" in reason  # its length alone says so
    gate = InstructionGate(1024, 0.5)
    assert gate.offer("pick up the red cup", 0.0) == [] and gate.take(0.0) == "pick up the red cup"
    [(code, detail)] = gate.offer(huge, 0.1)
    assert code == "instruction_too_long" and "the instruction in force stays" in detail
    assert gate.take(10.0) is None and gate.values()["refused.instruction_too_long"] == 1


def test_the_default_size_bound_refuses_no_instruction_the_encoder_reads_whole():
    """The encoder reads 30 word pieces (32 less [CLS] and [SEP]); 30 of the longest whole words of its
    vocabulary, which it reads whole, fit in the default bound with room to spare."""
    import json

    vocab = json.loads((minilm_path() / "tokenizer.json").read_text())["model"]["vocab"]
    longest = sorted((w for w in vocab if w.isalpha() and w.isascii()), key=len, reverse=True)[:30]
    text = " ".join(longest)
    encoder = shared_encoder(32)
    assert len(encoder._tokenizer.encode(text).tokens) <= 32 + 30  # the longest words may split, never vanish
    assert len(text.encode()) <= DEFAULT_MAX_BYTES / 1.5, len(text.encode())
    assert instruction_size_error(text, DEFAULT_MAX_BYTES) is None


def test_a_flood_costs_one_encoding_per_interval_and_the_newest_instruction_wins():
    """200 different instructions in 1 s (every 5 ms), an encoder free to take one whenever the gate lets it:
    one taken per 0.5 s, each the newest at the time, the last one the flood's last; every other one is
    counted as instruction_flood (received = taken + flood)."""
    gate = InstructionGate(1024, 0.5)
    taken = []
    for i in range(200):
        now = i * 0.005
        gate.offer(f"pick up cup number {i}", now)
        text = gate.take(now)
        if text is not None:
            taken.append((now, text))
    end = 0.995
    while gate.wait_s(end) is not None:  # the encoder takes the last one when its turn comes
        end += gate.wait_s(end)
        taken.append((end, gate.take(end)))
    assert [t for t, _ in taken] == pytest.approx([0.0, 0.5, 1.0])
    assert taken[-1][1] == "pick up cup number 199"
    assert taken[1][1] == "pick up cup number 100"  # the newest when its turn came
    v = gate.values()
    assert v["received"] == 200 and v["encoded"] == 3 and v["refused.instruction_flood"] == 197 and v["waiting"] == 0


def test_the_same_instruction_again_is_no_flood_and_no_work():
    gate = InstructionGate(1024, 0.5)
    gate.offer("pick up the red cup", 0.0)
    assert gate.take(0.0) == "pick up the red cup"
    for k in range(50):  # a GUI repeating it, a latched topic delivered again
        assert gate.offer("pick up the red cup", 0.01 * k) == []
    assert gate.wait_s(0.6) is None  # nothing to encode
    gate.offer("pick up the blue cup", 0.6)
    assert gate.offer("pick up the blue cup", 0.61) == []  # the waiting one again: still one to encode
    assert gate.take(0.7) == "pick up the blue cup" and "refused.instruction_flood" not in gate.values()


def test_control_characters_are_found_by_one_regular_expression_as_unicodedata_finds_them():
    expected = {c for c in range(0x110000) if unicodedata.category(chr(c)) == "Cc" and not chr(c).isspace()}
    found = {c for c in range(0x110000) if CONTROL_CHARACTERS.match(chr(c))}
    assert found == expected
    text = "pick up the red cup " * 5000 + "\x00"  # 100 kB with a NUL at the end
    t0 = time.perf_counter()
    with pytest.raises(TokenError) as err:
        instruction_text(text)
    assert time.perf_counter() - t0 < 0.05 and "U+0000 at position 100000" in str(err.value)
    assert len(str(err.value)) < 200  # the message quotes what comes before it, not all of it


# ---- frames --------------------------------------------------------------------------------------------
def test_a_run_of_identical_frames_is_told_from_frames_that_differ_in_one_byte():
    rng = np.random.default_rng(0)
    picture = rng.integers(0, 256, 480 * 640 * 3, dtype=np.uint8)
    run = RepeatedFrames()
    signature = ("rgb8", 640, 480, 1920)
    assert not run.add(signature, picture.tobytes(), 0)
    for k in range(1, 31):  # 30 copies over 1 s (each a new buffer, as each message has its own)
        assert run.add(signature, picture.tobytes(), k * 100 * MS // 3)
    assert run.count == 31 and run.span_s == pytest.approx(1.0) and run.frozen(1.0) and not run.frozen(1.1)
    run.observe_state(np.array([0.5, 0.0]))  # the first state of the run: where the arm was
    run.observe_state(np.array([0.51, -0.015]))
    assert run.motion == pytest.approx(0.015) and not run.frozen(
        1.0, min_motion=0.02
    )  # a still arm may give one picture
    run.observe_state(np.array([0.53, 0.0]))
    assert run.motion == pytest.approx(0.03) and run.frozen(1.0, min_motion=0.02)
    other = picture.copy()
    other[1] ^= 1  # one byte off the sampled words
    assert not run.add(signature, other, 1100 * MS) and run.count == 1 and not run.frozen(0.1) and run.motion == 0.0
    assert run.add(signature, other.copy(), 1133 * MS) and run.count == 2
    assert not run.add(("bgr8", 640, 480, 1920), other, 1166 * MS)  # the same bytes, another encoding
    tail = np.concatenate([other, [7]])  # a size that is no multiple of 8: the last bytes count too
    run.add(signature, tail, 1200 * MS)
    tail2 = tail.copy()
    tail2[-1] = 8
    assert not run.add(signature, tail2, 1233 * MS)


def test_comparing_a_640x480_frame_with_the_one_before_takes_well_under_a_millisecond():
    """The figures the module docstring quotes: median over 200 frames, a repeated and a changed picture."""
    rng = np.random.default_rng(1)
    frames = [rng.integers(0, 256, 480 * 640 * 3, dtype=np.uint8).tobytes() for _ in range(2)]
    signature = ("rgb8", 640, 480, 1920)

    def median_us(pictures) -> float:
        run, times = RepeatedFrames(), []
        for k in range(200):
            data = pictures[k % len(pictures)]
            t0 = time.perf_counter()
            run.add(signature, data, k)
            times.append(time.perf_counter() - t0)
        return float(np.median(times[1:])) * 1e6

    same, changed = median_us([frames[0], bytes(frames[0])]), median_us(frames)
    print(f"repeated frame {same:.0f} us, changed frame {changed:.0f} us")
    assert same < 500 and changed < 500, (same, changed)


def test_refusals_are_held_for_a_second_and_counted_within_it():
    refusals = RecentRefusals(1.0)
    for k in range(30):
        refusals.note("/camera/image_raw", "unknown_encoding", f"frame {k}", 10.0 + k / 30)
    refusals.note("/joint_states", "joint_state_non_finite", "NaN", 10.5)
    assert refusals.recent(11.0) == [
        ("/camera/image_raw", "unknown_encoding", 30, "frame 29"),
        ("/joint_states", "joint_state_non_finite", 1, "NaN"),
    ]
    assert refusals.recent(11.65) == [("/camera/image_raw", "unknown_encoding", 10, "frame 29")]  # frames 20-29
    assert refusals.recent(12.0) == []


# ---- the session: a frozen camera stops the chunks ---------------------------------------------------
def joints(t_ns: int, speed: float) -> JointState:
    """Every joint at 0.1 + speed * t (rad/s)."""
    names = list(COMMANDED_JOINTS) + ["right_finger_joint"]
    msg = JointState(name=names, position=[0.1 + speed * t_ns * 1e-9] * 8, velocity=[speed] * 8, effort=[0.0] * 8)
    msg.header.stamp = time_msg_from_ns(t_ns)
    return msg


def frame(t_ns: int, picture: bytes) -> Image:
    msg = Image(height=24, width=32, encoding="rgb8", step=96, data=picture)
    msg.header.stamp = time_msg_from_ns(t_ns)
    return msg


@pytest.mark.parametrize("frozen_camera_s, speed", [(1.0, 0.1), (0.0, 0.1), (1.0, 0.0)])
def test_a_session_publishes_no_chunk_while_its_camera_repeats_one_picture_as_the_arm_moves(frozen_camera_s, speed):
    """Fresh stamps, one picture, the arm moving at 0.1 rad/s: the frames are accepted, the chunks stop once
    the picture has been the same for frozen_camera_s of stamps (the reason says how many frames over how
    long), and start again with the first different frame. With 0 (off) they never stop; nor while the
    arm stands still (a noise-free simulator renders a still scene byte for byte the same)."""
    torch.manual_seed(0)
    model = VLATransformer(
        tiny_config(chunk_length=8, chunk_rate_hz=20.0, window_seconds=0.3, max_lateness_s=0.1)
    ).eval()
    torch.set_num_threads(1)
    session = PolicySession(
        StreamingPolicy.from_model(model, device="cpu"),
        shared_encoder(model.config.max_text_tokens),
        SessionConfig(frozen_camera_s=frozen_camera_s),
    )
    session.set_instruction("pick up the red cup", 0)
    rng = np.random.default_rng(0)
    still = rng.integers(0, 256, 24 * 96, dtype=np.uint8).tobytes()
    results = []
    for t in range(0, 2500 * MS, 10 * MS):  # 100 Hz joint states, a frame every 30 ms, a tick every 100 ms
        session.add_message("sensor_msgs/msg/JointState", joints(t, speed), t, "/joint_states")
        if t % (30 * MS) == 0:
            moving = t >= 2000 * MS  # the camera comes back to life at 2 s
            picture = rng.integers(0, 256, 24 * 96, dtype=np.uint8).tobytes() if moving else bytes(still)
            obs, rejection = session.add_message("sensor_msgs/msg/Image", frame(t, picture), t, "/camera/image_raw")
            assert obs is not None, rejection  # frozen frames are still accepted
        if t % (100 * MS) == 0 and t:
            results.append((t, session.tick(t)))
    published = [t for t, r in results if r.chunk is not None]
    if frozen_camera_s == 0 or speed == 0:
        assert len(published) == len(results) and session.frozen_cameras() == []
        return
    frozen = [(t, r.detail) for t, r in results if r.skip == "frozen_camera"]
    # frames at 0, 30, ..., 990 ms span 0.99 s (the tick at 1 s publishes); at 1.1 s the 37 up to 1080 ms span 1.08 s
    assert (
        frozen[0][0] == 1100 * MS
        and "camera frozen: 37 identical frames over 1.08 s while the joints moved up to 0.11" in frozen[0][1]
    ), frozen[0]
    assert [t for t, _ in frozen] == list(range(1100 * MS, 2000 * MS + 1, 100 * MS))
    assert (
        max(t for t in published if t < 2000 * MS) == 1000 * MS
        and min(t for t in published if t > 1000 * MS) == 2100 * MS
    )
    assert session.frozen_cameras() == [] and session.sources["image"].accepted == 84

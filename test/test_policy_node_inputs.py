"""policy_node's inputs against a probe that plays the robot (``sensor_feed``, ``Player``: the probe owns
``/clock``, so a tick happens exactly when a step moves it): what is wrong with an input is refused, counted
and raises the node's ``inputs`` status to WARN within a second of wall time, and no tick waits for it.

* a 1 MB instruction is refused from its size before any work; the instruction in force stays;
* a flood of 200 instructions in a second costs one encoding per ``min_instruction_interval_s``, the newest
  wins, and every tick meanwhile publishes its chunk on time;
* grey (mono8) and half-size frames, and a joint state with a NaN, are refused at WARN; OK once they stop;
* a frozen camera (one picture, fresh stamps) is WARN ("camera frozen: N identical frames over X s") and
  no chunk goes out once the picture has been the same for ``frozen_camera_s``; a new picture ends it.

Every wait is on the node's own reports (``/diagnostics``) or chunks, never a fixed sleep.
"""

import threading
import time

import numpy as np
import pytest
from sensor_feed import MS, camera_frame, joint_state
from sensor_msgs.msg import Image
from std_msgs.msg import String
from test_policy_node_contracts import INSTRUCTION, PARAMS_SET, tiny_policy

from vla_ros.ros.time import ns_from_time_msg

OK, WARN = b"\x00", b"\x01"
INPUTS = "policy: inputs"
INTERVAL_S = 0.5  # min_instruction_interval_s, the default
FROZEN_S = 1.0  # frozen_camera_s, the default


@pytest.fixture(scope="module")
def robot(tmp_path_factory):
    with tiny_policy(tmp_path_factory.mktemp("policy_inputs"), "inputs_probe", PARAMS_SET) as feed:
        assert feed.spin_until(lambda: (feed.latest(INPUTS) or {}).get("instruction") == INSTRUCTION, 60), feed.latest(
            INPUTS
        )
        yield feed


@pytest.fixture(autouse=True)
def good_frames(robot):
    """Each test starts and ends with the camera sending new pictures of the size it started with."""
    robot.player.frame = camera_frame
    yield
    robot.player.frame = camera_frame


def first_report(robot, since: float, predicate, name: str = INPUTS, wall_timeout_s: float = 30.0):
    """(receive time, level, message, values) of the node's first report after ``since`` that ``predicate``
    (level, message, values) holds for, waiting for it."""

    def found():
        return next(
            (
                (t, st)
                for t, st in robot.diag
                if t > since
                and st.name == name
                and predicate(st.level, st.message, {kv.key: kv.value for kv in st.values})
            ),
            None,
        )

    assert robot.spin_until(lambda: found() is not None, wall_timeout_s), robot.statuses(name, since)[-3:]
    t, st = found()
    return t, st.level, st.message, {kv.key: kv.value for kv in st.values}


def steps_with_chunks(player, n: int) -> list[int]:
    """``n`` steps, each of which must publish a chunk; their stamps."""
    chunks = [player.step() for _ in range(n)]
    assert all(c is not None for c in chunks), player.feed.latest()
    return [ns_from_time_msg(c.header.stamp) for c in chunks]


def test_a_1mb_instruction_is_refused_from_its_size_and_no_tick_waits_for_it(robot):
    player = robot.player
    steps_with_chunks(player, 2)
    in_force = robot.latest(INPUTS)["instruction"]  # whatever an earlier test left
    sent = time.monotonic()
    robot.pub_instruction.publish(String(data="pick up the blue cup " * 49_933))  # 1 MB
    t, level, message, values = first_report(robot, sent, lambda lv, m, v: "instruction_too_long" in m)
    assert level == WARN, (t - sent, message)  # how soon: printed by the test output, not asserted (any load)
    assert (
        "/vla/instruction refused: instruction_too_long" in message
        and "more than max_instruction_bytes=1024" in message
    )
    stamps = steps_with_chunks(player, 5)  # every tick on time, on the instruction that was in force
    assert np.diff(stamps).tolist() == [100 * MS] * 4
    v = robot.latest(INPUTS)
    assert v["instruction"] == in_force and int(v["instruction.refused.instruction_too_long"]) == 1
    assert "instruction_too_long" in robot.log_path.read_text()


def test_a_flood_of_200_instructions_in_a_second_delays_no_tick_and_the_newest_wins(robot):
    """200 different instructions 5 ms apart while the robot plays on: each step still publishes its chunk
    with the step's stamp, no tick waits, the node encodes at most one per min_instruction_interval_s, and
    the last one sent is the one in force."""
    player = robot.player
    steps_with_chunks(player, 1)
    before = robot.latest(INPUTS)
    texts = [f"pick up cup {k} of the {('red', 'green', 'blue')[k % 3]} ones" for k in range(199)] + [
        "pick up the green cup"
    ]

    def flood():
        for k, text in enumerate(texts):
            robot.pub_instruction.publish(String(data=text))
            time.sleep(max(0.0, started + 0.005 * (k + 1) - time.monotonic()))  # pacing the stimulus, not a wait

    started = time.monotonic()
    thread = threading.Thread(target=flood)
    thread.start()
    stamps = []
    while thread.is_alive():
        stamps += steps_with_chunks(player, 1)
    thread.join()
    flood_s = time.monotonic() - started
    stamps += steps_with_chunks(player, 2)
    assert np.diff(stamps).tolist() == [100 * MS] * (len(stamps) - 1)
    t, level, message, _ = first_report(robot, started, lambda lv, m, v: "instruction_flood" in m)
    assert level == WARN and "/vla/instruction refused: instruction_flood" in message
    _, _, _, v = first_report(
        robot, started, lambda lv, m, v: v.get("instruction") == texts[-1] and v.get("instruction.waiting") == "0"
    )
    encoded = int(v["instruction.encoded"]) - int(before["instruction.encoded"])
    assert 1 <= encoded <= 2 + flood_s / INTERVAL_S, (encoded, flood_s, v)
    received = int(v["instruction.received"]) - int(before["instruction.received"])
    flooded = int(v["instruction.refused.instruction_flood"]) - int(
        before.get("instruction.refused.instruction_flood", 0)
    )
    assert received == encoded + flooded and received > 20, v  # DDS may merge some (a depth-1 latched topic)


def grey_frame(t_ns: int) -> Image:
    msg = camera_frame(t_ns)
    msg.encoding, msg.step, msg.data = "mono8", msg.width, bytes(msg.data)[: msg.width * msg.height]
    return msg


def half_size_frame(t_ns: int) -> Image:
    return camera_frame(t_ns, width=24, height=18)


@pytest.mark.parametrize(
    "bad, source, code",
    [
        (grey_frame, "/camera/image_raw", "unknown_encoding"),
        (half_size_frame, "/camera/image_raw", "wrong_image_size"),
        ("nan_joint_state", "/joint_states", "joint_state_non_finite"),
    ],
)
def test_refused_frames_and_joint_states_raise_the_inputs_status_to_warn_while_they_come(robot, bad, source, code):
    player = robot.player
    steps_with_chunks(player, 2)  # the camera's first frames set its size and encoding long before
    before = int(
        (robot.latest() or {}).get(f"{'image' if source.startswith('/camera') else 'joint_states'}.rejected.{code}", 0)
    )
    sent = time.monotonic()
    if bad == "nan_joint_state":
        msg = joint_state(player.t + 5 * MS, 0.1)
        msg.position[2] = float("nan")
        robot.pub_joints.publish(msg)
        player.sent["joints"] += 1
    else:
        player.frame = bad
    player.step()
    t, level, message, values = first_report(robot, sent, lambda lv, m, v: f"{source} refused: {code}" in m)
    assert level == WARN, (t - sent, message)
    assert int(values[f"refused_last_s.{source}.{code}"]) >= 1
    counted = robot.latest()[f"{'image' if source.startswith('/camera') else 'joint_states'}.rejected.{code}"]
    assert int(counted) > before
    player.frame = camera_frame
    stopped = time.monotonic()
    first_report(robot, stopped, lambda lv, m, v: lv == OK and m == "all inputs accepted")  # a second after the last
    steps_with_chunks(player, 2)


def test_a_frozen_camera_is_warned_within_a_second_and_sends_no_chunk(robot):
    player = robot.player
    steps_with_chunks(player, 1)
    still = bytes(camera_frame(0).data)

    def frozen(t_ns: int) -> Image:
        msg = camera_frame(t_ns)
        msg.data = still
        return msg

    player.frame = frozen
    period = 100 * MS // 3  # the Player's frames are stamped at multiples of this
    first = -(-(player.t + 1) // period) * period  # the first frozen frame's stamp
    accepted, sent = int(robot.latest()["image.accepted"]), player.sent["images"]
    results, crossed = [], None
    while len(results) < 16:
        if crossed is None and (player.t + 100 * MS) // period * period - first >= FROZEN_S * 1e9:
            crossed = time.monotonic()  # this step sends the frame that makes the run frozen_camera_s long
        chunk = player.step()  # its newest frame is the last one stamped up to player.t (the step's end)
        results.append(((player.t // period * period - first) * 1e-9, chunk, robot.latest()["status"]))
    for frozen_for_s, chunk, status in results:
        if frozen_for_s >= FROZEN_S:
            assert chunk is None and status == "frozen_camera", (frozen_for_s, status)
        else:
            assert chunk is not None, (frozen_for_s, status)
    assert sum(chunk is None for _, chunk, _ in results) >= 4
    t, level, message, _ = first_report(robot, crossed, lambda lv, m, v: "camera frozen" in m)
    assert level == WARN, (t - crossed, message)
    assert message.startswith("camera frozen: ") and " identical frames over 1." in message
    assert robot.spin_until(
        lambda: int(robot.latest()["image.accepted"]) - accepted == player.sent["images"] - sent, 30
    )  # all taken in
    player.frame = camera_frame  # a new picture: chunks again, the warning gone
    moving = time.monotonic()
    assert player.step() is not None
    first_report(robot, moving, lambda lv, m, v: lv == OK and m == "all inputs accepted")

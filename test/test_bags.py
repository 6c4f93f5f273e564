"""Bags as rosbag2 writes and reads them: folders with metadata.yaml, offered QoS per topic, readers that take a
file or a folder, a second reader (the PyPI ``rosbags`` package) that opens what we write, ``vla-ros bag
info``, one-line errors for bad paths and broken files, and ``vla-ros record`` against best-effort and latched
publishers over real DDS."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml
from rclpy.serialization import serialize_message
from sensor_msgs.msg import JointState
from std_msgs.msg import String

from vla_ros.data.bag import BagError, OfferedQos, bag_files, find_bags, info, parse_qos, qos_yaml
from vla_ros.data.mcap_io import BagWriter, McapEpisodeWriter, read_messages
from vla_ros.data.msgdefs import full_definition, type_hash

REPO = Path(__file__).resolve().parents[1]
NS = 1_000_000_000


def joint_state(i: int) -> bytes:
    msg = JointState(name=["a", "b"], position=[0.1 * i, -0.1 * i])
    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(NS + i * NS // 100, NS)
    return serialize_message(msg)


WRITTEN: dict[Path, list[bytes]] = {}  # the joint states each write_bag wrote (rclpy's padding bytes vary)


def write_bag(folder: Path) -> Path:
    WRITTEN[folder] = [joint_state(i) for i in range(50)]
    with BagWriter(folder, metadata={"recorder": "test"}) as w:
        w.add_channel("/robot_description", "std_msgs/msg/String", [OfferedQos(durability="transient_local")])
        w.add_channel("/joint_states", "sensor_msgs/msg/JointState", [OfferedQos(reliability="best_effort")])
        w.write("/robot_description", "std_msgs/msg/String", serialize_message(String(data="<robot/>")), NS)
        for i, cdr in enumerate(WRITTEN[folder]):
            w.write("/joint_states", "sensor_msgs/msg/JointState", cdr, NS + i * NS // 100)
    return folder


def test_a_bag_folder_has_rosbag2_metadata(tmp_path):
    folder = write_bag(tmp_path / "ep")
    assert sorted(p.name for p in folder.iterdir()) == ["ep_0.mcap", "metadata.yaml"]
    meta = yaml.safe_load((folder / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    assert meta["version"] == 8 and meta["storage_identifier"] == "mcap"
    assert meta["relative_file_paths"] == ["ep_0.mcap"] and meta["message_count"] == 51
    assert meta["starting_time"] == {"nanoseconds_since_epoch": NS} and meta["duration"] == {
        "nanoseconds": 49 * NS // 100
    }
    assert meta["files"] == [
        {
            "path": "ep_0.mcap",
            "starting_time": {"nanoseconds_since_epoch": NS},
            "duration": {"nanoseconds": 49 * NS // 100},
            "message_count": 51,
        }
    ]
    topics = {t["topic_metadata"]["name"]: t for t in meta["topics_with_message_count"]}
    assert topics["/joint_states"]["message_count"] == 50
    js = topics["/joint_states"]["topic_metadata"]
    assert js["type"] == "sensor_msgs/msg/JointState" and js["serialization_format"] == "cdr"
    assert js["type_description_hash"] == type_hash("sensor_msgs/msg/JointState") != ""
    # offered QoS as rosbag2 (<= 8) writes it: a YAML string, numeric policies; latched stays latched
    assert isinstance(js["offered_qos_profiles"], str) and "reliability: 2" in js["offered_qos_profiles"]
    latched = yaml.safe_load(topics["/robot_description"]["topic_metadata"]["offered_qos_profiles"])
    assert latched[0]["durability"] == 1 and latched[0]["reliability"] == 1 and latched[0]["history"] == 3
    assert latched[0]["deadline"] == {"sec": 9223372036, "nsec": 854775807}
    assert meta["custom_data"] == {"recorder": "test"}


def test_rosbags_opens_what_we_write(tmp_path):
    """A second, independent rosbag2 reader (PyPI rosbags) reads the folder, its QoS and its messages."""
    from rosbags.rosbag2 import Reader
    from rosbags.typesys import Stores, get_typestore

    folder = write_bag(tmp_path / "ep")
    typestore = get_typestore(Stores.ROS2_JAZZY)
    with Reader(folder) as reader:
        counts = {c.topic: c.msgcount for c in reader.connections}
        assert counts == {"/robot_description": 1, "/joint_states": 50}
        assert reader.duration == 49 * NS // 100 + 1 and reader.message_count == 51
        qos = {c.topic: c.ext.offered_qos_profiles for c in reader.connections}
        assert qos["/robot_description"][0].durability.name.lower() == "transient_local"
        assert qos["/joint_states"][0].reliability.name.lower() == "best_effort"
        raws = {c.topic: [] for c in reader.connections}
        for connection, _t, raw in reader.messages():
            raws[connection.topic].append(bytes(raw))
    assert raws["/joint_states"] == WRITTEN[folder]  # byte for byte what was written
    # (rclpy's CDR carries trailing padding rosbags' strict size check refuses, so decode a String)
    assert typestore.deserialize_cdr(raws["/robot_description"][0], "std_msgs/msg/String").data == "<robot/>"


def test_readers_take_a_folder_or_a_file_and_find_bags_in_a_tree(tmp_path):
    folder = write_bag(tmp_path / "runs" / "ep")
    single = tmp_path / "runs" / "loose.mcap"
    with McapEpisodeWriter(single) as w:
        w.write("/joint_states", "sensor_msgs/msg/JointState", joint_state(0), NS)
    assert bag_files(folder) == [folder / "ep_0.mcap"] and bag_files(single) == [single]
    assert len(list(read_messages(folder, ["/joint_states"]))) == 50
    assert len(list(read_messages(folder / "ep_0.mcap", ["/joint_states"]))) == 50
    assert find_bags(tmp_path / "runs") == [folder, single]  # a bag folder is one bag, not a folder of files
    assert find_bags(folder) == [folder]


def test_a_topic_without_schema_is_skipped_and_counted(tmp_path):
    """One broken topic must not cost the rest of the file."""
    from mcap.writer import Writer

    path = tmp_path / "foreign.mcap"
    with open(path, "wb") as f:
        w = Writer(f)
        w.start(profile="ros2", library="test")
        js = w.register_schema(
            "sensor_msgs/msg/JointState", "ros2msg", full_definition("sensor_msgs/msg/JointState").encode()
        )
        good = w.register_channel("/joint_states", "cdr", js)
        no_schema = w.register_channel("/custom/thing", "cdr", 0)
        broken = w.register_channel(
            "/broken", "cdr", w.register_schema("pkg/msg/Broken", "ros2msg", b"notatype field\n")
        )
        for i in range(10):
            for channel, data in (
                (good, joint_state(i)),
                (no_schema, b"\x00\x01\x00\x00"),
                (broken, b"\x00\x01\x00\x00"),
            ):
                w.add_message(channel, log_time=NS + i, publish_time=NS + i, data=data)
        w.finish()
    skipped: Counter = Counter()
    messages = list(read_messages(path, skipped=skipped))
    assert [m.topic for m in messages] == ["/joint_states"] * 10
    assert skipped["/custom/thing: no schema"] == 10
    assert sum(v for k, v in skipped.items() if k.startswith("/broken:")) == 10


def test_qos_yaml_round_trips_and_reads_named_policies():
    profiles = [OfferedQos(reliability="best_effort", durability="transient_local", deadline_ns=2 * NS + 5)]
    assert parse_qos(qos_yaml(profiles)) == profiles
    named = [
        {
            "history": "unknown",
            "depth": 0,
            "reliability": "reliable",
            "durability": "transient_local",
            "deadline": {"sec": 9223372036, "nsec": 854775807},
            "lifespan": {"sec": 0, "nsec": 0},
            "liveliness": "automatic",
            "liveliness_lease_duration": {"sec": 1, "nsec": 0},
            "avoid_ros_namespace_conventions": False,
        }
    ]  # metadata version 9 writes a list with names
    (q,) = parse_qos(named)
    assert q.latched and q.reliability == "reliable" and q.deadline_ns is None and q.liveliness_lease_ns == NS


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vla_ros.cli", *args], capture_output=True, text=True, timeout=120, cwd=REPO
    )


def test_bag_info_json(tmp_path):
    folder = write_bag(tmp_path / "ep")
    proc = cli("bag", "info", str(folder), "--json")
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stdout.splitlines()
    result = json.loads(line)
    assert result["duration_s"] == pytest.approx(0.49) and result["messages"] == 51 and result["metadata_yaml"]
    topics = {t["name"]: t for t in result["topics"]}
    assert topics["/joint_states"]["type"] == "sensor_msgs/msg/JointState" and topics["/joint_states"]["count"] == 50
    assert topics["/joint_states"]["rate_hz"] == pytest.approx(100.0)
    assert topics["/robot_description"]["offered_qos"][0]["durability"] == "transient_local"
    table = cli("bag", "info", str(folder / "ep_0.mcap")).stdout
    assert "/joint_states" in table and "100.0 Hz" in table and "best_effort, volatile" in table


def test_bag_info_reads_each_topics_qos_once(tmp_path, monkeypatch):
    """info() parsed a topic's offered-QoS YAML for every message: 10 s for a 30 s episode (8,611 messages)
    on an idle core, past the 30 s a stopped `vla-ros record` is given under load, since it prints info()."""
    import vla_ros.data.bag as bag

    folder = write_bag(tmp_path / "ep")
    calls = Counter()
    real = bag.parse_qos
    monkeypatch.setattr(bag, "parse_qos", lambda value: calls.update([value]) or real(value))
    topics = {t["name"]: t for t in info(folder)["topics"]}
    assert topics["/joint_states"]["count"] == 50 and topics["/joint_states"]["offered_qos"]
    assert sum(calls.values()) == len(topics) == 2  # once per topic, not once per message


def test_bad_paths_and_broken_files_get_one_line_errors(tmp_path):
    folder = write_bag(tmp_path / "ep")
    (tmp_path / "text.mcap").write_text("not a bag")
    (tmp_path / "truncated.mcap").write_bytes((folder / "ep_0.mcap").read_bytes()[:400])
    (tmp_path / "empty").mkdir()
    (tmp_path / "sqlite").mkdir()
    (tmp_path / "sqlite" / "metadata.yaml").write_text("rosbag2_bagfile_information:\n  storage_identifier: sqlite3\n")
    cases = {
        tmp_path / "missing": "no such file or folder",
        tmp_path / "text.mcap": "not an MCAP file",
        tmp_path / "truncated.mcap": "cannot read the MCAP file",
        tmp_path / "empty": "no bag here",
        tmp_path / "sqlite": "storage 'sqlite3' is not supported",
        folder / "metadata.yaml": "not a rosbag2 metadata file (give its folder)",
    }
    for path, message in cases.items():
        proc = cli("bag", "info", str(path))
        assert proc.returncode == 2, (path, proc.stdout, proc.stderr)
        assert proc.stderr.count("\n") == 1 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
        with pytest.raises(BagError):
            info(path)


def test_writing_into_an_existing_bag_folder_is_refused(tmp_path):
    write_bag(tmp_path / "ep")
    with pytest.raises(BagError, match="already exists"):
        BagWriter(tmp_path / "ep")


@pytest.fixture
def ros_node():
    import rclpy

    rclpy.init()
    node = rclpy.create_node("bag_test_publisher")
    yield node
    node.destroy_node()
    rclpy.try_shutdown()


def test_record_adapts_to_best_effort_and_latched_publishers(tmp_path, ros_node):
    """A SensorDataQoS-style (best-effort) joint-state publisher and a latched robot description published
    before the recorder starts: both are recorded, and the bag says how they were offered.

    The recording lasts 1 s of the recorder's clock (wall time here), so how many joint states fit in it
    depends on how fast this machine lets the test publish: the bag is checked against what the test sent
    instead. Every joint state is numbered and stamped when sent; the bag holds a run of them with none
    missing, in the order sent, each logged after it was sent and within the time the recorder says it ran,
    which is at least its second."""
    import rclpy
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data

    states = ros_node.create_publisher(JointState, "/joint_states", qos_profile_sensor_data)
    latched = ros_node.create_publisher(
        String,
        "/robot_description",
        QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL, reliability=ReliabilityPolicy.RELIABLE),
    )
    latched.publish(String(data="<robot name='x'/>"))
    out = tmp_path / "rec"
    recorder = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vla_ros.cli",
            "record",
            "--topics",
            "/joint_states",
            "/robot_description",
            "/not/published",
            "--duration",
            "1.0",
            "--out",
            str(out),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    i, deadline = 0, time.monotonic() + 90
    try:
        while recorder.poll() is None and time.monotonic() < deadline:
            msg = JointState(name=["a"], position=[float(i)])
            msg.header.stamp = ros_node.get_clock().now().to_msg()
            states.publish(msg)
            i += 1
            rclpy.spin_once(ros_node, timeout_sec=0.01)
    finally:
        if recorder.poll() is None:
            recorder.kill()
        out_text, err_text = recorder.communicate(timeout=30)
    assert recorder.returncode == 0, err_text
    result = json.loads(out_text.strip().splitlines()[-1])
    assert result["not_recorded"] == ["/not/published"]
    summary = {t["name"]: t for t in info(out)["topics"]}
    recorded = [(m.log_time_ns, m.message) for m in read_messages(out, ["/joint_states"])]
    numbers = [int(msg.position[0]) for _, msg in recorded]
    assert len(numbers) >= 2 and numbers == list(range(numbers[0], numbers[0] + len(numbers))), numbers
    assert summary["/joint_states"]["count"] == len(numbers) <= i, summary
    # One clock for both (the machine's): a message is logged after the test stamped it. The recorder ran its
    # second on that clock from the first joint state (ran_s, what it says it ran) and logged every message
    # within it.
    log_ns = [t for t, _ in recorded]
    sent_ns = [msg.header.stamp.sec * NS + msg.header.stamp.nanosec for _, msg in recorded]
    assert all(t >= stamp for t, stamp in zip(log_ns, sent_ns)), list(zip(log_ns, sent_ns))
    assert result["ran_s"] >= 1.0, result
    assert all(t - log_ns[0] <= result["ran_s"] * NS + 1 for t in log_ns), ([t - log_ns[0] for t in log_ns], result)
    assert summary["/joint_states"]["offered_qos"][0]["reliability"] == "best_effort"
    assert summary["/robot_description"]["count"] == 1  # the latched message, published before recording began
    assert summary["/robot_description"]["offered_qos"][0]["durability"] == "transient_local"
    meta = yaml.safe_load((out / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    assert {t["topic_metadata"]["name"] for t in meta["topics_with_message_count"]} == {
        "/joint_states",
        "/robot_description",
    }
    assert os.path.isfile(out / "rec_0.mcap")

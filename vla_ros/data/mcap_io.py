"""rosbag2-compatible MCAP: writing serialized ROS 2 messages, reading them back as messages.

Files use the ``ros2`` profile, ``cdr`` message encoding and ``ros2msg`` schemas (complete definitions),
like ``ros2 bag record -s mcap`` writes them, so standard MCAP tools (Foxglove, ``mcap`` CLI,
``ros2 bag info/play``) open them and a user's own bags read here. No rclpy import: the recorder node
hands in CDR bytes; reading decodes with mcap_ros2's dynamic decoder into objects with the usual field
names, which the token converters accept like rclpy messages.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vla_ros.data.msgdefs import full_definition

# What rosbag2 records per channel; a reliable, volatile, keep-last subscription like the recorder's.
_QOS_YAML = (
    "- history: 1\n  depth: 10\n  reliability: 1\n  durability: 2\n"
    "  deadline:\n    sec: 9223372036\n    nsec: 854775807\n"
    "  lifespan:\n    sec: 9223372036\n    nsec: 854775807\n"
    "  liveliness: 1\n  liveliness_lease_duration:\n    sec: 9223372036\n    nsec: 854775807\n"
    "  avoid_ros_namespace_conventions: false\n"
)


class McapEpisodeWriter:
    """Appends CDR-serialized messages to one MCAP file; channels and schemas are registered on first use."""

    def __init__(self, path: str | Path, metadata: dict[str, str] | None = None) -> None:
        from mcap.writer import CompressionType, Writer

        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "wb")
        self._writer = Writer(self._file, compression=CompressionType.ZSTD)
        self._writer.start(profile="ros2", library="vla_ros")
        self._schemas: dict[str, int] = {}
        self._channels: dict[str, int] = {}
        self._sequence: dict[str, int] = {}
        self.counts: dict[str, int] = {}
        if metadata:
            self._writer.add_metadata("vla_ros", {k: str(v) for k, v in metadata.items()})

    def add_channel(self, topic: str, type_name: str) -> None:
        if topic in self._channels:
            return
        if type_name not in self._schemas:
            self._schemas[type_name] = self._writer.register_schema(
                name=type_name, encoding="ros2msg", data=full_definition(type_name).encode()
            )
        self._channels[topic] = self._writer.register_channel(
            topic=topic, message_encoding="cdr", schema_id=self._schemas[type_name],
            metadata={"offered_qos_profiles": _QOS_YAML},
        )
        self._sequence[topic] = 0
        self.counts[topic] = 0

    def write(self, topic: str, type_name: str, cdr: bytes, log_time_ns: int, publish_time_ns: int | None = None) -> None:
        """``cdr``: the serialized message as DDS delivers it (4-byte encapsulation header included)."""
        self.add_channel(topic, type_name)
        self._sequence[topic] += 1
        self.counts[topic] += 1
        self._writer.add_message(
            channel_id=self._channels[topic], log_time=int(log_time_ns),
            publish_time=int(log_time_ns if publish_time_ns is None else publish_time_ns),
            data=bytes(cdr), sequence=self._sequence[topic],
        )

    def add_metadata(self, name: str, values: dict[str, Any]) -> None:
        self._writer.add_metadata(name, {k: str(v) for k, v in values.items()})

    def close(self) -> None:
        if self._file.closed:
            return
        self._writer.finish()
        self._file.close()

    def __enter__(self) -> "McapEpisodeWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass(frozen=True)
class BagMessage:
    topic: str
    type_name: str
    log_time_ns: int
    message: Any  # decoded message: fields by name, like an rclpy message


def read_messages(path: str | Path, topics: Iterable[str] | None = None, log_time_order: bool = False) -> Iterator[BagMessage]:
    """Messages of ``topics`` (all when None), decoded from CDR with their own schemas.

    Default order is the file's: the order the recorder received them, which is what the online path saw.
    (Sorting by log time would interleave two timelines when the clock jumped back during a recording.)
    """
    from mcap.reader import make_reader
    from mcap_ros2.decoder import DecoderFactory

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no MCAP file at {path}")
    with open(path, "rb") as f:
        reader = make_reader(f, decoder_factories=[DecoderFactory()])
        for schema, channel, message, decoded in reader.iter_decoded_messages(
            topics=list(topics) if topics is not None else None, log_time_order=log_time_order
        ):
            yield BagMessage(channel.topic, schema.name if schema else "", message.log_time, decoded)


def read_metadata(path: str | Path) -> dict[str, dict[str, str]]:
    from mcap.reader import make_reader

    with open(path, "rb") as f:
        return {m.name: dict(m.metadata) for m in make_reader(f).iter_metadata()}


def summary(path: str | Path) -> dict[str, Any]:
    """Topics with type and count, duration and profile: what ``ros2 bag info`` shows."""
    from mcap.reader import make_reader

    with open(path, "rb") as f:
        reader = make_reader(f)
        header = reader.get_header()
        s = reader.get_summary()
    stats = s.statistics if s else None
    topics = {}
    if s:
        for cid, ch in s.channels.items():
            topics[ch.topic] = {
                "type": s.schemas[ch.schema_id].name if ch.schema_id in s.schemas else "",
                "count": stats.channel_message_counts.get(cid, 0) if stats else 0,
                "encoding": ch.message_encoding,
            }
    duration = (stats.message_end_time - stats.message_start_time) * 1e-9 if stats and stats.message_count else 0.0
    return {"profile": header.profile, "topics": topics, "duration_s": duration, "messages": stats.message_count if stats else 0}


def dumps_summary(path: str | Path) -> str:
    return json.dumps(summary(path), indent=2)

"""rosbag2-compatible MCAP: writing serialized ROS 2 messages, reading them back as messages.

Files use the ``ros2`` profile, ``cdr`` message encoding and ``ros2msg`` schemas (complete definitions),
like ``ros2 bag record -s mcap`` writes them; each channel carries the offered QoS of its publishers and
its type hash as rosbag2 writes them, so standard MCAP tools (Foxglove, ``mcap`` CLI, ``ros2 bag
info/play``) open them and a user's own bags read here. :class:`BagWriter` writes a bag folder
(``metadata.yaml`` + ``<name>_0.mcap``); :class:`McapEpisodeWriter` a single file. No rclpy import: the
recorder hands in CDR bytes; reading decodes with mcap_ros2's dynamic decoder into objects with the
usual field names, which the token converters accept like rclpy messages. Readers take a bag folder or
an MCAP file (:func:`vla_ros.data.bag.bag_files`).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vla_ros.data.bag import (
    BagError,
    FileRecord,
    OfferedQos,
    TopicRecord,
    bag_files,
    project_qos,
    qos_yaml,
    write_metadata,
)
from vla_ros.data.msgdefs import full_definition, type_hash

log = logging.getLogger(__name__)


class McapEpisodeWriter:
    """Appends CDR-serialized messages to one MCAP file; channels and schemas are registered on first use.

    A channel's offered QoS is what its publishers offered (the recorder passes what discovery reports);
    by default, what the project's own publishers offer (:func:`vla_ros.data.bag.project_qos`).
    """

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
        self.topics: dict[str, TopicRecord] = {}
        self.start_ns: int | None = None
        self.end_ns: int | None = None
        if metadata:
            self._writer.add_metadata("vla_ros", {k: str(v) for k, v in metadata.items()})

    @property
    def counts(self) -> dict[str, int]:
        return {name: t.count for name, t in self.topics.items()}

    def add_channel(self, topic: str, type_name: str, offered_qos: list[OfferedQos] | None = None) -> None:
        if topic in self._channels:
            return
        if type_name not in self._schemas:
            self._schemas[type_name] = self._writer.register_schema(
                name=type_name, encoding="ros2msg", data=full_definition(type_name).encode()
            )
        qos = list(offered_qos) if offered_qos else [project_qos(topic)]
        record = TopicRecord(topic, type_name, qos, type_hash(type_name))
        self._channels[topic] = self._writer.register_channel(
            topic=topic,
            message_encoding="cdr",
            schema_id=self._schemas[type_name],
            metadata={"offered_qos_profiles": qos_yaml(qos), "topic_type_hash": record.type_description_hash},
        )
        self._sequence[topic] = 0
        self.topics[topic] = record

    def write(
        self, topic: str, type_name: str, cdr: bytes, log_time_ns: int, publish_time_ns: int | None = None
    ) -> None:
        """``cdr``: the serialized message as DDS delivers it (4-byte encapsulation header included)."""
        self.add_channel(topic, type_name)
        self._sequence[topic] += 1
        self.topics[topic].count += 1
        log_time_ns = int(log_time_ns)
        self.start_ns = log_time_ns if self.start_ns is None else min(self.start_ns, log_time_ns)
        self.end_ns = log_time_ns if self.end_ns is None else max(self.end_ns, log_time_ns)
        self._writer.add_message(
            channel_id=self._channels[topic],
            log_time=log_time_ns,
            publish_time=int(log_time_ns if publish_time_ns is None else publish_time_ns),
            data=bytes(cdr),
            sequence=self._sequence[topic],
        )

    def add_metadata(self, name: str, values: dict[str, Any]) -> None:
        self._writer.add_metadata(name, {k: str(v) for k, v in values.items()})

    def close(self) -> None:
        if self._file.closed:
            return
        self._writer.finish()
        self._file.close()

    def __enter__(self) -> McapEpisodeWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class BagWriter(McapEpisodeWriter):
    """A rosbag2 bag folder: ``<folder>/<folder name>_0.mcap`` and, on close, ``metadata.yaml``."""

    def __init__(self, folder: str | Path, metadata: dict[str, str] | None = None) -> None:
        self.folder = Path(folder)
        if self.folder.exists() and (not self.folder.is_dir() or any(self.folder.iterdir())):
            raise BagError(f"{self.folder}: already exists (a bag is written to a new folder, as ros2 bag record -o)")
        self.custom = {k: str(v) for k, v in (metadata or {}).items()}
        super().__init__(self.folder / f"{self.folder.name}_0.mcap", metadata)

    def close(self) -> None:
        if self._file.closed:
            return
        super().close()
        count = sum(t.count for t in self.topics.values())
        file = FileRecord(self.path.name, self.start_ns or 0, self.end_ns or 0, count)
        write_metadata(self.folder, self.topics.values(), [file], self.custom)


@dataclass(frozen=True)
class BagMessage:
    topic: str
    type_name: str
    log_time_ns: int
    message: Any  # decoded message: fields by name, like an rclpy message


class _Decoders:
    """One decoder per channel; a channel whose schema is missing or unreadable is skipped and counted."""

    def __init__(self, skipped: Counter | None) -> None:
        from mcap_ros2.decoder import DecoderFactory

        self.factory = DecoderFactory()
        self.by_channel: dict[tuple[str, int], Any] = {}
        self.skipped = skipped if skipped is not None else Counter()

    def decoder(self, file: Path, schema, channel):
        key = (str(file), channel.id)
        if key not in self.by_channel:
            reason, decoder = None, None
            if schema is None or not schema.data:
                reason = "no schema"
            elif schema.encoding != "ros2msg" or channel.message_encoding != "cdr":
                reason = f"unsupported encoding {schema.encoding}/{channel.message_encoding}"
            else:
                try:
                    decoder = self.factory.decoder_for(channel.message_encoding, schema)
                except Exception as exc:  # mcap_ros2 raises several types for a schema it cannot parse
                    reason = f"unreadable schema ({exc.__class__.__name__})"
                if decoder is None and reason is None:
                    reason = "no decoder"
            if reason:
                log.warning("%s: topic %s skipped: %s", file.name, channel.topic, reason)
            self.by_channel[key] = (decoder, reason)
        return self.by_channel[key]


def read_messages(
    path: str | Path, topics: Iterable[str] | None = None, log_time_order: bool = False, skipped: Counter | None = None
) -> Iterator[BagMessage]:
    """Messages of ``topics`` (all when None) from a bag folder or an MCAP file, decoded with their own schemas.

    Default order is the file's: the order the recorder received them, which is what the online path saw.
    (Sorting by log time would interleave two timelines when the clock jumped back during a recording.)
    A topic whose schema is missing or unreadable is skipped, not fatal: ``skipped`` counts its messages
    under "<topic>: <reason>". BagError for a path that is not a bag or a file that cannot be read.
    """
    from mcap.exceptions import McapError
    from mcap.reader import make_reader

    wanted = set(topics) if topics is not None else None
    decoders = _Decoders(skipped)
    for file in bag_files(path):
        try:
            with open(file, "rb") as f:
                reader = make_reader(f)
                for schema, channel, message in reader.iter_messages(
                    topics=list(wanted) if wanted is not None else None, log_time_order=log_time_order
                ):
                    decoder, reason = decoders.decoder(file, schema, channel)
                    if decoder is None:
                        decoders.skipped[f"{channel.topic}: {reason}"] += 1
                        continue
                    try:
                        decoded = decoder(message.data)
                    except Exception:  # a message its own schema cannot decode: counted, not fatal
                        decoders.skipped[f"{channel.topic}: undecodable message"] += 1
                        continue
                    yield BagMessage(channel.topic, schema.name, message.log_time, decoded)
        except (McapError, EOFError, OSError) as exc:
            raise BagError(f"{file}: cannot read the MCAP file ({exc.__class__.__name__}: {exc})") from None


def read_metadata(path: str | Path) -> dict[str, dict[str, str]]:
    """MCAP metadata records (name -> key/values) of a bag folder or file."""
    from mcap.reader import make_reader

    out: dict[str, dict[str, str]] = {}
    for file in bag_files(path):
        with open(file, "rb") as f:
            out.update({m.name: dict(m.metadata) for m in make_reader(f).iter_metadata()})
    return out

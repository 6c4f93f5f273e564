"""rosbag2 bags: a bag folder (``metadata.yaml`` + MCAP files, what ``ros2 bag record`` writes) or one MCAP file.

* :func:`bag_files` resolves either form to its MCAP files, with a one-line :class:`BagError` for
  anything else (a missing path, a folder without a bag, a file that is not MCAP, a sqlite3 bag);
* :func:`find_bags` finds the bags under a folder of recordings (each bag folder is one bag);
* :func:`write_metadata` writes ``metadata.yaml`` in rosbag2's layout (version 8, the newest whose
  QoS block every distro from Humble on reads: offered QoS as a YAML string with numeric policies);
* :class:`OfferedQos` is one publisher's offered QoS as rosbag2 records it (discovery reports no
  history or depth: ``history: 3`` (unknown), ``depth: 0``);
* :func:`info` is ``ros2 bag info``: topics, types, counts, rates, duration.

Layout and QoS encoding follow rosbag2_storage (``yaml.hpp``, ``qos.cpp``) and its test bags.
No rclpy: the recorder converts rclpy's QoS into :class:`OfferedQos`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

MCAP_MAGIC = b"\x89MCAP0\r\n"
METADATA = "metadata.yaml"
METADATA_VERSION = 8
INFINITE = (9223372036, 854775807)  # RMW_DURATION_INFINITE as rosbag2 writes it (sec, nsec)
# rmw enum values (rmw/types.h), the numeric form of metadata version <= 8.
_RELIABILITY = {"system_default": 0, "reliable": 1, "best_effort": 2, "unknown": 3, "best_available": 4}
_DURABILITY = {"system_default": 0, "transient_local": 1, "volatile": 2, "unknown": 3, "best_available": 4}
_HISTORY = {"system_default": 0, "keep_last": 1, "keep_all": 2, "unknown": 3}
_LIVELINESS = {
    "system_default": 0,
    "automatic": 1,
    "manual_by_node": 2,
    "manual_by_topic": 3,
    "unknown": 4,
    "best_available": 5,
}


class BagError(ValueError):
    """A path that is not a readable bag; the message is one line for the user."""


@dataclasses.dataclass(frozen=True)
class OfferedQos:
    """One publisher's QoS as discovery reports it (and rosbag2 stores it). Durations in ns; None = infinite."""

    reliability: str = "reliable"
    durability: str = "volatile"
    history: str = "unknown"
    depth: int = 0
    deadline_ns: int | None = None
    lifespan_ns: int | None = None
    liveliness: str = "automatic"
    liveliness_lease_ns: int | None = None

    def __post_init__(self) -> None:
        for name, table in (
            ("reliability", _RELIABILITY),
            ("durability", _DURABILITY),
            ("history", _HISTORY),
            ("liveliness", _LIVELINESS),
        ):
            if getattr(self, name) not in table:
                raise ValueError(f"{name} must be one of {sorted(table)}, got {getattr(self, name)!r}")

    @property
    def latched(self) -> bool:
        return self.durability == "transient_local"


# What the project's publishers offer (the sim, the nodes, vla-ros record's instruction publisher):
# reliable; latched (transient local) for the topics a late subscriber must still get.
LATCHED_TOPICS = frozenset({"/vla/episode_status", "/robot_description", "/vla/instruction"})


def project_qos(topic: str) -> OfferedQos:
    return OfferedQos(durability="transient_local" if topic in LATCHED_TOPICS else "volatile")


def _duration(ns: int | None) -> str:
    sec, nsec = INFINITE if ns is None else divmod(int(ns), 1_000_000_000)
    return f"    sec: {sec}\n    nsec: {nsec}"


def qos_yaml(profiles: Iterable[OfferedQos]) -> str:
    """rosbag2's ``offered_qos_profiles`` string (metadata version <= 8): a YAML list, numeric policies."""
    blocks = []
    for q in profiles:
        blocks.append(
            f"- history: {_HISTORY[q.history]}\n  depth: {q.depth}\n  reliability: {_RELIABILITY[q.reliability]}\n"
            f"  durability: {_DURABILITY[q.durability]}\n  deadline:\n{_duration(q.deadline_ns)}\n"
            f"  lifespan:\n{_duration(q.lifespan_ns)}\n  liveliness: {_LIVELINESS[q.liveliness]}\n"
            f"  liveliness_lease_duration:\n{_duration(q.liveliness_lease_ns)}\n  avoid_ros_namespace_conventions: "
            "false"
        )
    return "\n".join(blocks)


def parse_qos(value: Any) -> list[OfferedQos]:
    """``offered_qos_profiles`` as written by any rosbag2 version: a YAML string (<= 8) or a list (9), with
    numeric or named policies."""
    items = yaml.safe_load(value) if isinstance(value, str) else value
    out = []
    for item in items or []:

        def policy(key: str, table: dict) -> str:
            v = item.get(key, "unknown")
            if isinstance(v, int):
                return next((name for name, number in table.items() if number == v), "unknown")
            return str(v).lower() if str(v).lower() in table else "unknown"

        def duration(key: str) -> int | None:
            d = item.get(key) or {}
            sec, nsec = int(d.get("sec", 0)), int(d.get("nsec", 0))
            return None if (sec, nsec) == INFINITE or sec >= 0x7FFFFFFF else sec * 1_000_000_000 + nsec

        out.append(
            OfferedQos(
                reliability=policy("reliability", _RELIABILITY),
                durability=policy("durability", _DURABILITY),
                history=policy("history", _HISTORY),
                depth=int(item.get("depth", 0)),
                deadline_ns=duration("deadline"),
                lifespan_ns=duration("lifespan"),
                liveliness=policy("liveliness", _LIVELINESS),
                liveliness_lease_ns=duration("liveliness_lease_duration"),
            )
        )
    return out


# ------------------------------------------------------------------------------------------ paths


def is_mcap_file(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(MCAP_MAGIC)) == MCAP_MAGIC
    except OSError:
        return False


def read_metadata_yaml(folder: Path) -> dict:
    """The ``rosbag2_bagfile_information`` mapping of a bag folder; BagError when unreadable."""
    try:
        data = yaml.safe_load((folder / METADATA).read_text())
        info = data["rosbag2_bagfile_information"]
        if not isinstance(info, dict):
            raise TypeError("not a mapping")
        return info
    except (OSError, yaml.YAMLError, KeyError, TypeError) as exc:
        raise BagError(f"{folder / METADATA}: not a rosbag2 metadata file ({exc.__class__.__name__}: {exc})") from None


def bag_files(path: str | Path) -> list[Path]:
    """The MCAP files of a bag: the file itself, or those a bag folder's metadata.yaml lists (else the
    ``*.mcap`` files in it). BagError with a one-line reason for anything else."""
    path = Path(path)
    if not path.exists():
        raise BagError(f"{path}: no such file or folder")
    if path.is_file():
        if not is_mcap_file(path):
            kind = "a rosbag2 metadata file (give its folder)" if path.name == METADATA else "an MCAP file"
            raise BagError(f"{path}: not {kind}" + ("" if path.name == METADATA else " (no MCAP magic bytes)"))
        return [path]
    if (path / METADATA).is_file():
        meta = read_metadata_yaml(path)
        storage = meta.get("storage_identifier", "")
        if storage != "mcap":
            raise BagError(
                f"{path}: storage '{storage}' is not supported (MCAP only; convert with "
                "`ros2 bag convert` to storage_id mcap)"
            )
        files = [path / rel for rel in meta.get("relative_file_paths") or []]
        missing = [str(f) for f in files if not f.is_file()]
        if missing:
            raise BagError(f"{path}: metadata.yaml lists missing files: {', '.join(missing)}")
        if files:
            return files
    files = sorted(p for p in path.glob("*.mcap") if p.is_file())
    if not files:
        raise BagError(f"{path}: no bag here (no metadata.yaml and no .mcap file)")
    bad = [str(f) for f in files if not is_mcap_file(f)]
    if bad:
        raise BagError(f"{bad[0]}: not an MCAP file (no MCAP magic bytes)")
    return files


def find_bags(path: str | Path) -> list[Path]:
    """Bags under ``path`` (itself when it is one): bag folders (one bag each, however many files they hold)
    and loose ``.mcap`` files. BagError when there is none."""
    path = Path(path)
    if not path.exists():
        raise BagError(f"{path}: no such file or folder")
    if path.is_file():
        bag_files(path)
        return [path]
    if (path / METADATA).is_file():
        return [path]
    found: list[Path] = []
    for root, dirs, files in os.walk(path):
        root_path = Path(root)
        if METADATA in files and root_path != path:
            found.append(root_path)
            dirs[:] = []
            continue
        dirs.sort()
        found.extend(root_path / f for f in sorted(files) if f.endswith(".mcap"))
    if not found:
        raise BagError(f"{path}: no bags under it (no metadata.yaml folders and no .mcap files)")
    return sorted(found)


# ------------------------------------------------------------------------------------------ metadata


@dataclasses.dataclass
class TopicRecord:
    """What a writer knows about one topic, for metadata.yaml."""

    name: str
    type: str
    offered_qos: list[OfferedQos]
    type_description_hash: str = ""
    count: int = 0


@dataclasses.dataclass
class FileRecord:
    path: str  # relative to the bag folder
    start_ns: int
    end_ns: int
    count: int


def write_metadata(
    folder: Path, topics: Iterable[TopicRecord], files: list[FileRecord], custom: dict[str, str] | None = None
) -> Path:
    """metadata.yaml of a bag folder, as rosbag2 (version 8) writes it."""
    topics = list(topics)
    counted = [f for f in files if f.count]
    start = min((f.start_ns for f in counted), default=0)
    end = max((f.end_ns for f in counted), default=start)
    info = {
        "version": METADATA_VERSION,
        "storage_identifier": "mcap",
        "duration": {"nanoseconds": end - start},
        "starting_time": {"nanoseconds_since_epoch": start},
        "message_count": sum(f.count for f in files),
        "topics_with_message_count": [
            {
                "topic_metadata": {
                    "name": t.name,
                    "type": t.type,
                    "serialization_format": "cdr",
                    "offered_qos_profiles": qos_yaml(t.offered_qos),
                    "type_description_hash": t.type_description_hash,
                },
                "message_count": t.count,
            }
            for t in topics
        ],
        "compression_format": "",
        "compression_mode": "",
        "relative_file_paths": [f.path for f in files],
        "files": [
            {
                "path": f.path,
                "starting_time": {"nanoseconds_since_epoch": f.start_ns},
                "duration": {"nanoseconds": f.end_ns - f.start_ns},
                "message_count": f.count,
            }
            for f in files
        ],
        "custom_data": {str(k): str(v) for k, v in (custom or {}).items()} or None,
        "ros_distro": os.environ.get("ROS_DISTRO", ""),
    }
    out = folder / METADATA
    out.write_text(
        yaml.safe_dump({"rosbag2_bagfile_information": info}, sort_keys=False, default_flow_style=False, width=1000)
    )
    return out


# ------------------------------------------------------------------------------------------ info


def info(path: str | Path) -> dict[str, Any]:
    """``ros2 bag info`` for a bag folder or an MCAP file: per topic the type, count, rate and offered QoS,
    and the bag's duration. Reads every message's log time (no decoding). BagError when unreadable."""
    from mcap.exceptions import McapError
    from mcap.reader import make_reader

    path = Path(path)
    files = bag_files(path)
    topics: dict[str, dict[str, Any]] = {}
    first_ns, last_ns, total = None, None, 0
    for file in files:
        try:
            with open(file, "rb") as f:
                reader = make_reader(f)
                header = reader.get_header()
                for schema, channel, message in reader.iter_messages(log_time_order=False):
                    t = topics.get(channel.topic)
                    if t is None:  # once per topic: the QoS YAML took ~1 ms a message (10 s for a 30 s episode)
                        t = topics[channel.topic] = {
                            "name": channel.topic,
                            "type": schema.name if schema else "",
                            "count": 0,
                            "first_ns": message.log_time,
                            "last_ns": message.log_time,
                            "encoding": channel.message_encoding,
                            "offered_qos": [
                                dataclasses.asdict(q)
                                for q in parse_qos(channel.metadata.get("offered_qos_profiles", ""))
                            ],
                        }
                    t["count"] += 1
                    t["first_ns"] = min(t["first_ns"], message.log_time)
                    t["last_ns"] = max(t["last_ns"], message.log_time)
                    total += 1
                summary = reader.get_summary()
                for channel in summary.channels.values() if summary else []:  # topics without messages
                    if channel.topic in topics:
                        continue
                    schema = summary.schemas.get(channel.schema_id)
                    topics.setdefault(
                        channel.topic,
                        {
                            "name": channel.topic,
                            "type": schema.name if schema else "",
                            "count": 0,
                            "first_ns": None,
                            "last_ns": None,
                            "encoding": channel.message_encoding,
                            "offered_qos": [
                                dataclasses.asdict(q)
                                for q in parse_qos(channel.metadata.get("offered_qos_profiles", ""))
                            ],
                        },
                    )
        except (McapError, OSError, ValueError, EOFError, yaml.YAMLError) as exc:
            raise BagError(f"{file}: cannot read the MCAP file ({exc.__class__.__name__}: {exc})") from None
        if header.profile and header.profile != "ros2":
            raise BagError(f"{file}: MCAP profile '{header.profile}' is not a ROS 2 bag (profile 'ros2')")
    for t in topics.values():
        if t["first_ns"] is not None:
            first_ns = t["first_ns"] if first_ns is None else min(first_ns, t["first_ns"])
            last_ns = t["last_ns"] if last_ns is None else max(last_ns, t["last_ns"])
        span = (t["last_ns"] - t["first_ns"]) * 1e-9 if t["count"] > 1 else 0.0
        t["rate_hz"] = round((t["count"] - 1) / span, 3) if span > 0 else 0.0
        t.pop("first_ns"), t.pop("last_ns")
    duration = (last_ns - first_ns) * 1e-9 if first_ns is not None else 0.0
    return {
        "path": str(path),
        "storage": "mcap",
        "files": [str(f) for f in files],
        "metadata_yaml": path.is_dir() and (path / METADATA).is_file(),
        "bytes": sum(f.stat().st_size for f in files),
        "messages": total,
        "duration_s": round(duration, 6),
        "start_ns": first_ns,
        "end_ns": last_ns,
        "topics": sorted(topics.values(), key=lambda t: t["name"]),
    }


def format_info(summary: dict[str, Any]) -> str:
    """Human-readable :func:`info`, laid out like ``ros2 bag info``."""
    lines = [
        f"Files:             {', '.join(Path(f).name for f in summary['files'])}",
        f"Bag size:          {summary['bytes'] / 2**20:.1f} MiB",
        f"Storage id:        {summary['storage']}" + ("" if summary["metadata_yaml"] else " (no metadata.yaml)"),
        f"Duration:          {summary['duration_s']:.3f} s",
        f"Messages:          {summary['messages']}",
        "Topic information:",
    ]
    width = max((len(t["name"]) for t in summary["topics"]), default=0)
    for t in summary["topics"]:
        qos = t["offered_qos"][0] if t["offered_qos"] else None
        qos_text = f"{qos['reliability']}, {qos['durability']}" if qos else "QoS not recorded"
        lines.append(f"  {t['name']:<{width}} | {t['type']} | {t['count']} msgs | {t['rate_hz']:.1f} Hz | {qos_text}")
    return "\n".join(lines)

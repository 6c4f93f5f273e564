"""Where a chunk's milliseconds go: the stages from the observation a chunk is stamped with to the first
command the controller sends from it, as the nodes time them. No rclpy here: the nodes time their stages and
publish what they measured (``vla_ros.ros.chunk_timing``); ``vla-ros bench latency`` and the live evaluation
join the records of one chunk by its stamp.

Each node times its own stages of every chunk it handles in two clocks:

- the monotonic clock (``time.monotonic_ns``: CLOCK_MONOTONIC, one clock for every process of a host), exact
  between the stages of one host whatever the ROS clock does;
- the node's ROS clock (simulated time in the sim, where it moves in steps of the ``/clock`` period; wall time
  on a robot, shared by hosts whose clocks are synchronised), where a stage begins or ends the node's part;
  between hosts this is the only clock they share.

A segment of the chain (``SEGMENTS``) is the time from one stage to the next one the chunk reached: on the
monotonic clock when both stages were timed on one host (the records carry the host's boot id), else on the
ROS clock. The first segment, from the observation's stamp to its arrival at the policy, is on the ROS
clock: the stamp is a ROS time (the sensor's, or the sim's at rendering).
"""

from __future__ import annotations

import json
import math
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# (stage, node that times it, what happened there), in the order a chunk passes them.
STAGES: tuple[tuple[str, str, str], ...] = (
    ("received", "policy", "the newest observation the chunk is stamped with arrived at the policy"),
    ("tick_start", "policy", "the tick that decoded the chunk began"),
    ("inferred", "policy", "the model's chunk was decoded"),
    ("shaped", "policy", "the chunk was averaged, smoothed and shaped into the filter's limits"),
    ("published", "policy", "the chunk was handed to DDS on /vla/action_chunk"),
    ("filter_in", "safety_filter", "the safety filter took the chunk"),
    ("filter_out", "safety_filter", "the filter's chunk was handed to DDS on /vla/safe_action_chunk"),
    ("accepted", "controller", "the controller took the chunk into its plan"),
    ("first_command", "controller", "the controller sent the first command sampled from the chunk"),
)
STAGE_NAMES = tuple(s for s, _, _ in STAGES)
STAGE_NODE = {s: node for s, node, _ in STAGES}
# (segment, the stage it ends at, what it holds): each segment runs from the stage before it (the stamp for the first)
SEGMENTS: tuple[tuple[str, str, str], ...] = (
    ("sensor_to_policy", "received", "the stamp to the policy's intake: sensor, rendering, transport and queue"),
    ("wait_for_tick", "tick_start", "waiting in the window for the next tick"),
    ("inference", "inferred", "the model's forward pass"),
    ("shaping", "shaped", "ensemble, smoothing and shaping"),
    ("publish", "published", "the message built"),
    ("to_filter", "filter_in", "DDS to the filter (the publish call included), and its queue"),
    ("filter", "filter_out", "the safety check and the message"),
    ("to_controller", "accepted", "DDS to the controller (the publish call included), its queue and checks"),
    ("to_first_command", "first_command", "waiting for the controller's next cycle"),
)
SEGMENT_NAMES = tuple(s for s, _, _ in SEGMENTS)
WHOLE = "whole"  # the stamp to the first command: a chunk that reached every stage
# the largest record a node publishes; a bigger one is not read (it is no record of ours)
MAX_RECORD_BYTES = 4096


class TimingError(ValueError):
    """A chunk-timing record that cannot be read."""


@dataclass(frozen=True)
class StageTime:
    mono_ns: int  # monotonic clock of the timing host
    clock_ns: int | None = None  # the node's ROS clock, where the stage begins or ends the node's part


@dataclass
class ChunkTiming:
    """One node's stages of one chunk (the chunk's stamp: the newest observation it is decoded from)."""

    node: str
    stamp_ns: int
    boot_id: str
    stages: dict[str, StageTime] = field(default_factory=dict)

    def as_dict(self) -> dict:
        """The record as the JSON object it is sent as."""
        return {
            "node": self.node,
            "stamp_ns": self.stamp_ns,
            "boot_id": self.boot_id,
            "stages": {k: [v.mono_ns, v.clock_ns] for k, v in self.stages.items()},
        }

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), separators=(",", ":"))


def parse_timing(text: str) -> ChunkTiming:
    """A record from its JSON text; TimingError for anything that is not one (unknown stages, stages of
    another node, non-integer times, oversized text)."""
    if len(text) > MAX_RECORD_BYTES:
        raise TimingError(f"record of {len(text)} bytes > {MAX_RECORD_BYTES}")
    try:
        raw = json.loads(text)
    except ValueError as err:
        raise TimingError(f"not a chunk-timing record: {err}") from None
    return timing_from_dict(raw)


def timing_from_dict(raw) -> ChunkTiming:
    """A record from its JSON object (``ChunkTiming.as_dict``), checked as ``parse_timing`` checks the text."""
    try:
        node, stamp, boot, stages = raw["node"], raw["stamp_ns"], raw["boot_id"], raw["stages"]
    except (TypeError, KeyError) as err:
        raise TimingError(f"not a chunk-timing record: {err}") from None
    if not (isinstance(node, str) and isinstance(boot, str) and isinstance(stages, dict) and _is_int(stamp)):
        raise TimingError("not a chunk-timing record: node, stamp_ns, boot_id or stages of the wrong type")
    out = ChunkTiming(node, stamp, boot)
    for name, value in stages.items():
        if STAGE_NODE.get(name) != node:
            raise TimingError(f"stage {name!r} is not one the {node} node times")
        if not (isinstance(value, list) and len(value) == 2 and _is_int(value[0])):
            raise TimingError(f"stage {name!r}: expected [monotonic ns, clock ns or null], got {value!r}")
        if value[1] is not None and not _is_int(value[1]):
            raise TimingError(f"stage {name!r}: clock ns {value[1]!r} is not an integer")
        out.stages[name] = StageTime(value[0], value[1])
    return out


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def read_boot_id() -> str:
    """This host's boot id (Linux; "" elsewhere): records with the same non-empty id share a monotonic clock."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def segments(records: list[ChunkTiming]) -> dict[str, float]:
    """One chunk's segments in ms, from the records the nodes published for it (same stamp). A segment
    needs both of its stages (its start: the stage before it that the chunk reached); ``WHOLE`` is the
    stamp to the first command, the sum of every segment, when the chunk reached every stage."""
    stamp = records[0].stamp_ns if records else 0
    timed: dict[str, tuple[StageTime, str]] = {}
    for r in records:
        if r.stamp_ns != stamp:
            raise ValueError(f"records of two chunks: stamps {stamp} and {r.stamp_ns}")
        for name, t in r.stages.items():
            timed[name] = (t, r.boot_id)
    out: dict[str, float] = {}
    previous = None  # (StageTime, boot id) of the stage before, or None: the stamp
    complete = True
    for segment, stage in ((s, e) for s, e, _ in SEGMENTS):
        if stage not in timed:
            complete = False
            previous = None
            continue
        t, boot = timed[stage]
        if segment == SEGMENT_NAMES[0]:
            if t.clock_ns is not None:
                out[segment] = (t.clock_ns - stamp) * 1e-6
            else:
                complete = False
        elif previous is not None:
            ms = _between(previous, (t, boot))
            if ms is None:
                complete = False
            else:
                out[segment] = ms
        previous = (t, boot)
    if complete and len(out) == len(SEGMENTS):
        out[WHOLE] = float(sum(out[s] for s in SEGMENT_NAMES))
    return out


def _between(a: tuple[StageTime, str], b: tuple[StageTime, str]) -> float | None:
    (ta, boot_a), (tb, boot_b) = a, b
    if boot_a and boot_a == boot_b:
        return (tb.mono_ns - ta.mono_ns) * 1e-6
    if ta.clock_ns is not None and tb.clock_ns is not None:
        return (tb.clock_ns - ta.clock_ns) * 1e-6
    return None


class SplitStages:
    """A node's two stages of a chunk timed in two threads (the controller: ``first`` when a callback takes the
    chunk, ``last`` in the control cycle that sends its first command), handed out together by ``flush`` (the
    node publishes them from a timer, so the control cycle itself only appends to a list). A chunk that never
    reaches ``last`` (superseded within a period) comes out with ``first`` alone once a newer chunk has reached
    it; one refused after ``begin`` is ``discard``ed."""

    def __init__(self, first: str, last: str, keep: int = 64) -> None:
        self._first, self._last, self._keep = first, last, keep
        self._lock = threading.Lock()
        self._begun: dict[int, StageTime] = {}  # stamp -> its first stage, awaiting the last
        self._ended: list[tuple[int, StageTime]] = []

    def begin(self, stamp_ns: int, t: StageTime) -> None:
        with self._lock:
            self._begun[stamp_ns] = t
            if len(self._begun) > self._keep:  # never ended and never flushed: the oldest go
                for stamp in sorted(self._begun)[: len(self._begun) - self._keep]:
                    del self._begun[stamp]

    def discard(self, stamp_ns: int) -> None:
        """The chunk begun was refused: it has no stages here."""
        with self._lock:
            self._begun.pop(stamp_ns, None)

    def end(self, stamp_ns: int, t: StageTime) -> None:
        with self._lock:
            self._ended.append((stamp_ns, t))

    def flush(self) -> list[tuple[int, dict[str, StageTime]]]:
        """The records complete since the last call, (stamp, stages) in the order of the stamps."""
        with self._lock:
            ended, self._ended = self._ended, []
            records = []
            for stamp, t in ended:
                first = self._begun.pop(stamp, None)
                records.append((stamp, {self._first: first, self._last: t} if first else {self._last: t}))
            newest = max((stamp for stamp, _ in ended), default=None)
            if newest is not None:
                for stamp in [s for s in self._begun if s < newest]:
                    records.append((stamp, {self._first: self._begun.pop(stamp)}))
        return sorted(records, key=lambda r: r[0])


class LatencyTable:
    """The records of a run, joined per chunk; ``summary`` gives each segment's and the whole's figures."""

    def __init__(self) -> None:
        self.records: dict[int, dict[str, ChunkTiming]] = {}  # stamp -> node -> its record (the newest)
        self.unreadable = 0

    def add_text(self, text: str) -> None:
        try:
            record = parse_timing(text)
        except TimingError:
            self.unreadable += 1
            return
        self.add(record)

    def add(self, record: ChunkTiming) -> None:
        self.records.setdefault(record.stamp_ns, {})[record.node] = record

    def raw(self) -> list[dict]:
        """Every record kept, as its JSON object (for results files that a reader recomputes from)."""
        return [r.as_dict() for _, by_node in sorted(self.records.items()) for r in by_node.values()]

    def chunks(self) -> list[dict[str, float]]:
        return [segments(list(by_node.values())) for _, by_node in sorted(self.records.items())]

    def summary(self) -> dict:
        """Per segment (and ``WHOLE``): p50, p99, mean and max in ms over the chunks that have it, and their
        count. ``chunks``: chunks with any record; ``complete``: those that reached the first command."""
        per = self.chunks()
        out: dict = {"chunks": len(per), "complete": sum(WHOLE in c for c in per), "unreadable": self.unreadable}
        stages = {}
        for name in (*SEGMENT_NAMES, WHOLE):
            values = np.array([c[name] for c in per if name in c], dtype=float)
            stages[name] = (
                {
                    "p50": round(float(np.percentile(values, 50)), 2),
                    "p99": round(float(np.percentile(values, 99)), 2),
                    "mean": round(float(values.mean()), 2),
                    "max": round(float(values.max()), 2),
                    "n": int(values.size),
                }
                if values.size
                else None
            )
        out["segments_ms"] = stages
        return out


def plot_budget(summaries: dict[str, dict], path: Path, title: str = "") -> Path:
    """A stacked bar per run (``summaries``: label -> ``LatencyTable.summary()``): each segment's mean, so the
    bar's height is the mean of the whole; the p50 and p99 of the whole are marked beside it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(summaries)
    fig, ax = plt.subplots(figsize=(2.2 + 1.6 * len(labels), 5.0))
    colors = plt.get_cmap("tab10").colors
    bottoms = np.zeros(len(labels))
    for i, name in enumerate(SEGMENT_NAMES):
        heights = np.array([(s["segments_ms"].get(name) or {}).get("mean", 0.0) for s in summaries.values()])
        ax.bar(labels, heights, bottom=bottoms, color=colors[i % len(colors)], label=name, width=0.5)
        bottoms += heights
    for x, s in enumerate(summaries.values()):
        whole = s["segments_ms"].get(WHOLE)
        if whole:
            ax.plot([x + 0.3], [whole["p50"]], marker="_", markersize=14, color="black")
            ax.plot([x + 0.3], [whole["p99"]], marker="_", markersize=14, color="red")
            ax.annotate(f"p50 {whole['p50']:.0f}\np99 {whole['p99']:.0f}", (x + 0.34, whole["p50"]), fontsize=8)
    ax.set_ylabel("ms from the observation's stamp (segment means, stacked)")
    ax.set_title(title or "latency budget per chunk")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    top = max(
        [float(bottoms.max())] + [(s["segments_ms"].get(WHOLE) or {}).get("p99", 0.0) for s in summaries.values()]
    )
    ax.set_ylim(0, max(1.0, top) * 1.15 if math.isfinite(top) else 1.0)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

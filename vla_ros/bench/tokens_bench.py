"""``vla-ros bench tokens``: timed tokens versus nearest-neighbour pairing on the same sensor streams.

A 30 Hz camera and 100 Hz joint states with realistic timing (frames reach the consumer 15-45 ms after
their stamp, joint states 1-3 ms; small stamp jitter) are fed, in arrival order, to

* the token stream (every message becomes a token with its own stamp), and
* ApproximateTimeSynchronizer pairing (one joint message per frame, slop 1/60 s): ``message_filters``
  itself when it is importable, else a re-implementation of its policy (emit the first pair whose
  stamps are within the slop, closest first, and remove both from the queues).

Reported: the share of joint messages each approach uses, the age of the newest joint information at
the moment a frame's observation is formed (p50), and the cost of turning a message into a token.

The arrivals are modelled: this compares two pairing policies on the same streams, it does not measure
the running system. What the launched graph actually drops (DDS queues, late, rejected) is
``joint_msgs_dropped_pct`` / ``image_msgs_dropped_pct`` of ``vla-ros eval --live``.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from vla_ros.cli import print_result

NS = 1_000_000_000


def make_arrivals(seconds: float, seed: int) -> list[tuple[int, int, str]]:
    """(arrival_ns, stamp_ns, 'image'|'joints'), sorted by arrival."""
    rng = np.random.default_rng(seed)
    events = []
    for rate, kind, latency_s, spread_s, jitter_s in (
        (30, "image", 0.030, 0.015, 0.002),
        (100, "joints", 0.002, 0.001, 0.0005),
    ):
        n = int(seconds * rate)
        stamps = (np.arange(n) / rate + rng.uniform(-jitter_s, jitter_s, n)) * NS + NS
        arrivals = stamps + rng.uniform(latency_s - spread_s, latency_s + spread_s, n) * NS
        events += [(int(a), int(s), kind) for a, s in zip(arrivals, stamps)]
    events.sort()
    return events


class NearestPairing:
    """ApproximateTimeSynchronizer's policy for two topics, written here for machines without message_filters."""

    def __init__(self, slop_ns: int, queue_size: int = 10) -> None:
        self.slop_ns = slop_ns
        self.queue_size = queue_size
        self.queues: dict[str, dict[int, object]] = {"image": {}, "joints": {}}

    def add(self, kind: str, stamp: int, msg) -> tuple[object, object] | None:
        mine = self.queues[kind]
        mine[stamp] = msg
        while len(mine) > self.queue_size:
            del mine[min(mine)]
        other_kind = "joints" if kind == "image" else "image"
        other = self.queues[other_kind]
        candidates = sorted((abs(s - stamp), s) for s in other if abs(s - stamp) <= self.slop_ns)
        if not candidates:
            return None
        _, s = candidates[0]
        pair = {kind: mine.pop(stamp), other_kind: other.pop(s)}
        return pair["image"], pair["joints"]


def run(seconds: float = 60.0, seed: int = 0, width: int = 320, height: int = 240, raw: bool = False) -> dict:
    """The figures; with ``raw`` also the samples they summarise (``"raw"``: per-message tokenize times in
    microseconds, per-frame staleness in ms, in arrival order), for a check that recomputes them."""
    from sensor_msgs.msg import Image, JointState

    from vla_ros.chunks import COMMANDED_JOINTS
    from vla_ros.tokens import Kind, StreamConfig, TokenizerConfig, TokenStream

    rng = np.random.default_rng(seed)
    frames = [rng.integers(0, 256, width * height * 3, dtype=np.uint8).tobytes() for _ in range(4)]
    names = list(COMMANDED_JOINTS) + ["right_finger_joint"]
    stream = TokenStream(TokenizerConfig(), StreamConfig())

    def message(kind: str, stamp: int, i: int):
        if kind == "image":
            msg = Image(height=height, width=width, encoding="rgb8", step=width * 3, data=frames[i % len(frames)])
        else:
            q = list(rng.normal(size=len(names)))
            msg = JointState(name=names, position=q, velocity=q, effort=[])
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp, NS)
        return msg

    slop_ns = NS // 60
    try:  # the real thing when it is installed (a ROS workspace)
        import message_filters
        from rclpy.time import Time

        pairs: list = []
        inputs = {"image": message_filters.SimpleFilter(), "joints": message_filters.SimpleFilter()}
        sync = message_filters.ApproximateTimeSynchronizer([inputs["image"], inputs["joints"]], 10, 1.0 / 60)
        sync.registerCallback(lambda img, js: pairs.append((img, js)))
        implementation = "message_filters.ApproximateTimeSynchronizer"

        def pair(kind, stamp, msg):
            n = len(pairs)
            inputs[kind].signalMessage(msg)
            return pairs[-1] if len(pairs) > n else None

        del Time
    except ImportError:
        nearest = NearestPairing(slop_ns)
        implementation = "NearestPairing (ApproximateTimeSynchronizer policy; message_filters not installed)"

        def pair(kind, stamp, msg):
            return nearest.add(kind, stamp, msg)

    events = make_arrivals(seconds, seed)
    warmup = make_arrivals(1.0, seed + 1)
    warm = TokenStream(TokenizerConfig(), StreamConfig())
    for arrival, stamp, kind in warmup:  # first calls load OpenCV paths and warm caches
        m = message(kind, stamp, 0)
        warm.add_message("sensor_msgs/msg/Image" if kind == "image" else "sensor_msgs/msg/JointState", m, arrival, kind)

    cost_us = {"image": [], "joints": []}
    joint_total = sum(1 for e in events if e[2] == "joints")
    joints_used_nearest = 0
    stale_tokens_ms, stale_nearest_ms = [], []
    newest_joint_stamp = None
    for i, (arrival, stamp, kind) in enumerate(events):
        msg = message(kind, stamp, i)
        type_name = "sensor_msgs/msg/Image" if kind == "image" else "sensor_msgs/msg/JointState"
        t0 = time.perf_counter()
        obs = stream.add_message(type_name, msg, arrival, "/camera/image_raw" if kind == "image" else "/joint_states")
        cost_us[kind].append((time.perf_counter() - t0) * 1e6)
        if obs is not None and obs.kind == Kind.STATE:
            newest_joint_stamp = max(newest_joint_stamp or 0, obs.stamp_ns)
        if obs is not None and obs.kind == Kind.IMAGE and newest_joint_stamp is not None:
            stale_tokens_ms.append((arrival - newest_joint_stamp) / 1e6)
        matched = pair(kind, stamp, msg)
        if matched is not None:
            joints_used_nearest += 1
            js = matched[1]
            stale_nearest_ms.append((arrival - (js.header.stamp.sec * NS + js.header.stamp.nanosec)) / 1e6)
    result = {
        "joint_msgs_used_pct_tokens": round(100.0 * stream.stats.accepted["state"] / joint_total, 2),
        "joint_msgs_used_pct_nearest": round(100.0 * joints_used_nearest / joint_total, 2),
        "staleness_ms_p50_tokens": round(float(np.percentile(stale_tokens_ms, 50)), 2),
        "staleness_ms_p50_nearest": round(float(np.percentile(stale_nearest_ms, 50)), 2),
        "tokenize_us_per_msg_p50_image": round(float(np.percentile(cost_us["image"], 50)), 1),
        "tokenize_us_per_msg_p50_joints": round(float(np.percentile(cost_us["joints"], 50)), 1),
        "tokenize_us_per_msg_p99_image": round(float(np.percentile(cost_us["image"], 99)), 1),
        "tokenize_us_per_msg_p99_joints": round(float(np.percentile(cost_us["joints"], 99)), 1),
        "frames": len(cost_us["image"]),
        "joint_msgs": joint_total,
        "tokens_rejected": sum(stream.stats.rejected.values()),
        "image": f"{width}x{height} rgb8 -> {stream.tokenizer.image_width}x{stream.tokenizer.image_height}",
        "seconds": seconds,
        "nearest_implementation": implementation,
        "arrivals": "modelled; the running graph's drops: vla-ros eval --live",
    }
    if raw:
        result["raw"] = {
            "tokenize_us": cost_us,
            "staleness_ms": {"tokens": stale_tokens_ms, "nearest": stale_nearest_ms},
        }
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="vla-ros bench tokens",
        description="Timed tokens vs nearest-neighbour pairing on the same 30 Hz + 100 Hz streams; JSON last line.",
        epilog="example: vla-ros bench tokens --seconds 60 --json",
    )
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    parser.add_argument("--seconds", type=float, default=60.0, help="stream length (default 60)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--raw", default=None, metavar="FILE", help="also write the samples behind the figures to FILE (JSON)"
    )
    args = parser.parse_args(argv)
    result = run(seconds=args.seconds, seed=args.seed, raw=bool(args.raw))
    if args.raw:
        with open(args.raw, "w") as f:
            json.dump(result.pop("raw"), f)
    print_result(result, args.json, 32)
    return 0

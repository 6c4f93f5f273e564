"""Conversions between builtin_interfaces/Time and integer nanoseconds (exact, no float rounding)."""

from __future__ import annotations

from builtin_interfaces.msg import Time


def time_msg_from_ns(ns: int) -> Time:
    return Time(sec=int(ns // 1_000_000_000), nanosec=int(ns % 1_000_000_000))


def ns_from_time_msg(t: Time) -> int:
    return int(t.sec) * 1_000_000_000 + int(t.nanosec)

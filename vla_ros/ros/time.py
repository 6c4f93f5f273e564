"""Conversions between builtin_interfaces Time/Duration messages and numbers (Time: exact integer nanoseconds)."""

from __future__ import annotations

from builtin_interfaces.msg import Duration, Time


def time_msg_from_ns(ns: int) -> Time:
    return Time(sec=int(ns // 1_000_000_000), nanosec=int(ns % 1_000_000_000))


def ns_from_time_msg(t: Time) -> int:
    return int(t.sec) * 1_000_000_000 + int(t.nanosec)


def duration_msg_from_s(seconds: float) -> Duration:
    """Rounded to whole nanoseconds first, so 0.9999999999 s becomes 1 s, never nanosec = 1e9."""
    sec, nanosec = divmod(int(round(seconds * 1e9)), 1_000_000_000)
    return Duration(sec=sec, nanosec=nanosec)


def seconds_from_duration_msg(d: Duration) -> float:
    return d.sec + d.nanosec * 1e-9

"""A JointTrajectory's size read from its serialized bytes, before anything is deserialized (no rclpy import).

Turning a message into Python objects costs time in proportion to its size (a 100,000-point chunk takes
seconds), and in the controller that time is spent in the thread that runs the control loop. The filter and
the controller therefore take chunks raw (``raw=True``), read the joint and point counts from the CDR
bytes here, and deserialize only chunks within their limits.

Wire layout (OMG CDR, as rmw_fastrtps and rmw_cyclonedds send ROS messages): a 4-byte encapsulation
header (``00 00`` big endian, ``00 01`` little endian, then two option bytes), then the fields in order,
each aligned to its size counted from the end of the header. For a JointTrajectory::

    header.stamp.sec (int32), header.stamp.nanosec (uint32)
    header.frame_id: uint32 length (with the NUL), the bytes
    joint_names: uint32 count, then per name a uint32 length and the bytes (4-aligned)
    points: uint32 count, then the points

Example: frame_id "x", names ["ab", "cde"], one point: ``00010000 00000000 00000000 02000000 78000000
02000000 03000000 61620000 04000000 63646500 01000000 ...``: the point count sits at byte 4 + 36.
"""

from __future__ import annotations

import struct

CDR_BE = b"\x00\x00"
CDR_LE = b"\x00\x01"


class WireError(ValueError):
    """The bytes are not a plain-CDR JointTrajectory (other encapsulations are not read here)."""


def trajectory_size(data: bytes) -> tuple[int, int]:
    """(joint names, points) of a serialized trajectory_msgs/JointTrajectory. Raises WireError."""
    if len(data) < 4 or data[:2] not in (CDR_BE, CDR_LE):
        raise WireError(f"not plain CDR (encapsulation {data[:2].hex() or 'missing'})")
    u32 = struct.Struct("<I" if data[:2] == CDR_LE else ">I")
    end = len(data)
    pos = 4 + 8  # header.stamp

    def read_u32(at: int) -> tuple[int, int]:
        at = 4 + ((at - 4 + 3) & ~3)  # align to 4 from the start of the payload
        if at + 4 > end:
            raise WireError(f"truncated at byte {at}")
        return u32.unpack_from(data, at)[0], at + 4

    def skip_string(at: int) -> int:
        n, at = read_u32(at)
        if at + n > end:
            raise WireError(f"a string of {n} bytes runs past the end ({end} bytes)")
        return at + n

    pos = skip_string(pos)  # header.frame_id
    n_names, pos = read_u32(pos)
    if n_names * 4 > end - pos:  # each name takes at least its 4-byte length
        raise WireError(f"{n_names} joint names cannot fit in {end} bytes")
    for _ in range(n_names):
        pos = skip_string(pos)
    n_points, pos = read_u32(pos)
    if n_points * 24 > end - pos:  # a point takes at least four sequence lengths and a duration
        raise WireError(f"{n_points} points cannot fit in {end} bytes")
    return n_names, n_points

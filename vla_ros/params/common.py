"""What more than one node's parameter table says: the reasons behind shared lower bounds, and the parameters
the nodes declare alike. No rclpy import."""

from __future__ import annotations

from vla_ros.params.spec import ParamSpec
from vla_ros.params.tightening import LOWER

# Why the lower bounds: values below them mean nothing.
STATE_PERIODS_REASON = (
    "joint states come at 100 Hz (ros2_control, the sim): under two of their periods a fresh one is refused"
)
JOINT_STATE_TIMEOUT_REASON = (
    "joint states come at 100 Hz (ros2_control, the sim): under two of their periods a live source times out"
)
CHUNK_TIMEOUT_REASON = (
    "chunks come at the policy's rate (10 Hz shipped): under two of its periods the watchdog warns between any two "
    "chunks"
)
CLOCK_SYNC_REASON = "the clocks of two hosts agree to a millisecond at best (NTP, PTP)"


def diagnostics_period(max_value: float = 60.0, min_value: float = 0.1, **extra) -> ParamSpec:
    """``diagnostics_period_s``, as every node with a periodic status declares it (``extra``: e.g. old names)."""
    return ParamSpec(
        "diagnostics_period_s",
        1.0,
        "period of the status on /diagnostics (wall time: it also speaks when simulated time stands still)",
        read_only=True,
        min_value=min_value,
        max_value=max_value,
        min_reason=f"more often than {1 / min_value:g} Hz the status floods /diagnostics",
        **extra,
    )


# The clock watchdog of the filter and the controller.
CLOCK_TIMEOUT = ParamSpec(
    "clock_timeout_s",
    0.5,
    "on simulated time: /clock silent for this long (wall time) is reported at ERROR (simulator dead?)",
    min_value=0.05,
    max_value=60.0,
    min_reason="/clock comes every few ms in simulation (the sim: 200 Hz; Isaac: each rendered frame): under 50 ms a "
    "busy simulator reads as dead",
    tighten=LOWER,
)

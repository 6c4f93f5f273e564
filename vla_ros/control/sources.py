"""Who may feed the controller: chunks are accepted only when they can have come from a trusted publisher.

The controller executes what arrives on ``/vla/safe_action_chunk``; only the safety filter may put it there.
The ideal check reads the publisher of each message (DDS knows it: ``rmw_message_info_t.publisher_gid``),
but rclpy does not hand it over on any supported distribution: Humble's subscription callbacks get the
message alone, and the ``MessageInfo`` that Jazzy and Kilted can pass holds only timestamps and sequence
numbers. What every distribution has is the ROS graph: ``get_publishers_info_by_topic`` lists each
publisher on the topic with its endpoint GID and its node's name. So, per message, the controller asks the
graph who publishes on its input right now, and ``SourceGate`` admits the message only if it cannot have
come from anyone untrusted:

- every publisher on the topic is a trusted node (an endpoint whose node the graph does not know yet, as
  happens after discovery, is not trusted);
- no untrusted publisher was seen in the last ``quarantine_s`` (one that published and left may still have
  a message in the queue; the node also looks at the graph on a timer, so short-lived publishers are seen);
- at least one trusted publisher is present (otherwise the message came from a publisher that is gone).

While an untrusted publisher is on the topic, the trusted one's chunks are refused too: the gate cannot
tell them apart, so it fails safe (the arm holds) and says which node is in the way. This protects against
mistakes: a misrouted remapping, a test script, ``ros2 topic pub`` or a bag replayed on the wrong topic. It
does not protect against a hostile host on the DDS domain, which can claim any node name: that is what
DDS Security (SROS2, ``config/sros2/policy.xml``) is for.

Reports (the log, diagnostics) name a stranger at once, with one exception: a publisher whose node the graph
has not named yet. ROS names arrive after DDS discovery, a moment later as a rule, but seconds later on a
busy machine, and the safety filter's own publisher is such an endpoint while it starts (it loads its URDF
after creating its publisher). Such an endpoint is reported only once it has stayed unnamed for the grace
(the controller's ``unnamed_publisher_grace_s``, ``UNNAMED_GRACE_S`` by default; a DDS writer outside ROS
never gets a name). Its messages are refused all the same, and each refused message is reported as it comes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

# What rmw reports for an endpoint whose node's ROS name has not arrived yet (ros_discovery_info lags DDS
# discovery by a moment).
UNKNOWN_NODE_NAME = "_NODE_NAME_UNKNOWN_"
# How long a publisher may stay unnamed before it is reported as a stranger: longer than a filter loading a large
# URDF on a busy machine (10-20 s were seen while the name did not arrive).
UNNAMED_GRACE_S = 30.0
NS = 1_000_000_000


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """A publisher on the topic: its node's fully qualified name ("" when unknown) and its endpoint GID."""

    node: str
    gid: str

    @property
    def label(self) -> str:
        return self.node or f"an unnamed node (publisher gid {self.gid})"


def fully_qualified(namespace: str, name: str) -> str:
    """'/ns' + 'node' -> '/ns/node'; '' for the graph's placeholder of an unknown node."""
    if not name or name == UNKNOWN_NODE_NAME:
        return ""
    return namespace.rstrip("/") + "/" + name if namespace.startswith("/") else "/" + name


def resolve_trusted(entries: Iterable[str], own_namespace: str) -> tuple[str, ...]:
    """Fully qualified names of the trusted nodes; a relative entry ('safety_filter') is taken in the
    controller's own namespace, so the default trusts the filter of the same launch."""
    out = []
    for entry in entries:
        entry = entry.strip()
        if not entry:
            continue
        out.append(entry if entry.startswith("/") else own_namespace.rstrip("/") + "/" + entry)
    return tuple(dict.fromkeys(out))


def gid_text(gid: Sequence[int]) -> str:
    return ".".join(f"{b:02x}" for b in gid)


class SourceGate:
    """Per-message decision from graph snapshots (``observe`` between messages, ``admit`` per message).

    Args:
        trusted: fully qualified names of the nodes allowed to publish on the topic.
        quarantine_s: how long after an untrusted publisher was last seen messages are still refused.
        unnamed_grace_s: how long a publisher whose node the graph does not name is not reported (see above).
    """

    def __init__(
        self, trusted: Sequence[str], quarantine_s: float = 1.0, unnamed_grace_s: float = UNNAMED_GRACE_S
    ) -> None:
        if not trusted:
            raise ValueError("trusted_publishers is empty: the controller would execute no chunk at all")
        self.trusted = tuple(trusted)
        self.quarantine_ns = int(quarantine_s * NS)
        self.unnamed_grace_ns = int(unnamed_grace_s * NS)
        self.untrusted_seen: dict[str, tuple[str, int]] = {}  # endpoint gid -> (label, when last seen, steady ns)
        self.unnamed_since: dict[str, int] = {}  # endpoint gid -> when first seen, while seen without a node name
        self.present: tuple[Endpoint, ...] = ()

    def observe(self, endpoints: Sequence[Endpoint], now_ns: int) -> list[Endpoint]:
        """Record a graph snapshot; returns the untrusted publishers in it."""
        self.present = tuple(endpoints)
        foreign = []
        for e in endpoints:
            if e.node in self.trusted:
                # An endpoint seen for a moment without its node's name (ROS names arrive after DDS
                # discovery) that turns out to be a trusted node's was never a stranger.
                self.untrusted_seen.pop(e.gid, None)
                self.unnamed_since.pop(e.gid, None)
            else:
                foreign.append(e)
                self.untrusted_seen[e.gid] = (e.label, now_ns)
                if e.node:
                    self.unnamed_since.pop(e.gid, None)
                else:
                    self.unnamed_since.setdefault(e.gid, now_ns)
        return foreign

    def awaiting_name(self, gid: str) -> bool:
        """True for a publisher the graph has not named since it was first seen, less than the grace ago."""
        since = self.unnamed_since.get(gid)
        return since is not None and self.untrusted_seen[gid][1] - since < self.unnamed_grace_ns

    def to_report(self, foreign: Sequence[Endpoint]) -> list[Endpoint]:
        """The untrusted publishers (``observe``'s) to report now: all but those awaiting their name."""
        return [e for e in foreign if not self.awaiting_name(e.gid)]

    def recent_untrusted(self, now_ns: int, reported_only: bool = False) -> list[str]:
        """Untrusted publishers seen within the quarantine, newest first; ``reported_only``: those to report."""
        recent = [
            (t, label)
            for gid, (label, t) in self.untrusted_seen.items()
            if now_ns - t <= self.quarantine_ns and not (reported_only and self.awaiting_name(gid))
        ]
        return list(dict.fromkeys(label for _, label in sorted(recent, reverse=True)))

    def admit(self, endpoints: Sequence[Endpoint], now_ns: int) -> str | None:
        """None when a message taken now can only have come from a trusted publisher, else why not."""
        foreign = self.observe(endpoints, now_ns)
        trusted = " or ".join(self.trusted)
        if foreign:
            names = ", ".join(e.label for e in foreign)
            return (
                f"{names} publishes on the topic (only {trusted} may): the sender cannot be told apart, so "
                "nothing is executed"
            )
        recent = self.recent_untrusted(now_ns)
        if recent:
            return (
                f"{', '.join(recent)} published on the topic less than {self.quarantine_ns / NS:g} s ago: its "
                "messages may still be arriving"
            )
        if not endpoints:
            return f"its publisher is gone and was not {trusted}"
        return None

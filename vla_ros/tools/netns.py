"""Two computers on one Linux machine: two network namespaces joined by a veth pair (needs root).

Each namespace is a host with its own network stack: ``lo`` and one end of a veth pair, addresses on a
private /24, and a multicast route on the veth so DDS discovery (SPDP multicast) crosses it::

    namespace gpu_host                       namespace robot
      lo 127.0.0.1                             lo 127.0.0.1
      veth0 10.213.20.1/24  <--- veth --->     veth0 10.213.20.2/24
      224.0.0.0/4 dev veth0                    224.0.0.0/4 dev veth0

The machine's real interfaces are not in the namespaces, so DDS traffic of the processes started with
``HostPair.popen`` crosses the veth and nothing else: ``ROS_AUTOMATIC_DISCOVERY_RANGE=SUBNET`` is set for
them only, never for a process outside the namespaces. Taking the link down (``link_down``) is an
unplugged cable: both ends lose carrier and packets stop (the machine has no netem to drop them
instead). The kernel drops the routes of a device that goes down, so ``link_up`` puts the multicast
route back, or the next discovery announcement could not leave.

Names: the demo uses ``gpu_host`` and ``robot``; tests add a suffix (``HostPair.unique``) so parallel
runs never share a namespace. ``create`` is idempotent (it rebuilds a pair left behind by a killed run)
and refuses namespaces that processes still use (another run); ``destroy`` removes both, and the pair is
a context manager that destroys them on any exit, including SIGTERM turned into SystemExit by the
caller (``vla-ros demo-two-hosts`` does).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass

IFACE = "veth0"
MULTICAST = "224.0.0.0/4"
GPU_HOST = "gpu_host"
ROBOT = "robot"


class NetnsError(RuntimeError):
    """A namespace operation failed; the message quotes the command and what ``ip`` said."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def available() -> tuple[bool, str]:
    """(True, "") where namespaces can be created here, else (False, the reason)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return False, "network namespaces need root (ip netns add); run as root or in a privileged container"
    if shutil.which("ip") is None:
        return False, "the ip command (iproute2) is not installed"
    probe = f"vla_probe_{uuid.uuid4().hex[:8]}"
    proc = _ip("netns", "add", probe, check=False)
    if proc.returncode != 0:
        return False, f"ip netns add failed: {proc.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return True, ""


def namespaces() -> set[str]:
    """Names of the existing named network namespaces."""
    out = _ip("netns", "list", check=False).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def pids_in(ns: str) -> list[int]:
    """Processes running in namespace ``ns`` (empty when it does not exist)."""
    proc = _ip("netns", "pids", ns, check=False)
    return [int(p) for p in proc.stdout.split()] if proc.returncode == 0 else []


def dds_env(base: dict[str, str] | None = None, discovery: str = "subnet", peer: str = "") -> dict[str, str]:
    """The environment of a process inside a namespace: DDS discovery across the veth.

    ``discovery``: ``subnet`` (multicast discovery, ``ROS_AUTOMATIC_DISCOVERY_RANGE=SUBNET``) or ``static``
    (no multicast: ``LOCALHOST`` plus ``ROS_STATIC_PEERS`` = the other host's address, what a network
    that blocks multicast, e.g. most Wi-Fi, needs). ``ROS_LOCALHOST_ONLY`` (Humble) is removed either way.
    """
    env = dict(os.environ if base is None else base)
    env.pop("ROS_LOCALHOST_ONLY", None)
    env.pop("ROS_STATIC_PEERS", None)
    if discovery == "subnet":
        env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "SUBNET"
    elif discovery == "static":
        if not peer:
            raise ValueError("discovery=static needs the peer's address")
        env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
        env["ROS_STATIC_PEERS"] = peer
    else:
        raise ValueError(f"discovery must be 'subnet' or 'static', got {discovery!r}")
    return env


@dataclass
class HostPair:
    """Namespaces ``gpu`` and ``robot`` joined by a veth; addresses ``<prefix>.1`` and ``<prefix>.2`` /24."""

    gpu: str = GPU_HOST
    robot: str = ROBOT
    prefix: str = "10.213.20"

    @classmethod
    def unique(cls, tag: str = "") -> HostPair:
        """A pair whose names no other run uses: ``gpu_host_<tag><random>``, ``robot_<tag><random>``."""
        suffix = f"{tag}{uuid.uuid4().hex[:6]}"
        return cls(gpu=f"{GPU_HOST}_{suffix}", robot=f"{ROBOT}_{suffix}")

    def address(self, host: str) -> str:
        return f"{self.prefix}.1" if host == self.gpu else f"{self.prefix}.2"

    def peer_of(self, host: str) -> str:
        return self.address(self.robot if host == self.gpu else self.gpu)

    # ---- set-up and teardown ---------------------------------------------------------------------
    def create(self) -> HostPair:
        """Build both namespaces and the link (rebuilding a pair an earlier run left behind)."""
        existing = namespaces()
        for ns in (self.gpu, self.robot):
            if ns in existing:
                busy = pids_in(ns)
                if busy:
                    raise NetnsError(
                        f"namespace {ns} is in use by processes {busy} (another run?); "
                        "pick other names or stop that run"
                    )
                _ip("netns", "del", ns)
        try:
            for ns in (self.gpu, self.robot):
                _ip("netns", "add", ns)
            # Both ends are created inside their namespaces: no name is ever taken in the root namespace.
            _ip("link", "add", IFACE, "netns", self.gpu, "type", "veth", "peer", "name", IFACE, "netns", self.robot)
            for ns in (self.gpu, self.robot):
                _ip("-n", ns, "addr", "add", f"{self.address(ns)}/24", "dev", IFACE)
                _ip("-n", ns, "link", "set", "lo", "up")
                _ip("-n", ns, "link", "set", IFACE, "up")
                _ip("-n", ns, "route", "replace", MULTICAST, "dev", IFACE)
        except NetnsError:
            self.destroy()
            raise
        return self

    def destroy(self) -> None:
        """Remove both namespaces (the veth goes with them); missing ones are fine. Processes still in
        them (this run's: ``create`` refuses namespaces in use) get SIGTERM, then SIGKILL."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if not any(self.kill_processes(ns, sig) for ns in (self.gpu, self.robot)):
                break
            end = time.monotonic() + 3.0
            while time.monotonic() < end and (pids_in(self.gpu) or pids_in(self.robot)):
                time.sleep(0.1)
        for ns in (self.gpu, self.robot):
            _ip("netns", "del", ns, check=False)

    def kill_processes(self, host: str, sig: int = signal.SIGKILL) -> list[int]:
        """Signal every process inside ``host`` (all started by this pair's user: see ``create``)."""
        pids = pids_in(host)
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        return pids

    def __enter__(self) -> HostPair:
        return self.create()

    def __exit__(self, *exc) -> None:
        self.destroy()

    # ---- the link --------------------------------------------------------------------------------
    def link_down(self) -> None:
        """Unplug: the gpu end goes down, so neither end has carrier and nothing crosses."""
        _ip("-n", self.gpu, "link", "set", IFACE, "down")

    def link_up(self) -> None:
        """Plug back in and restore the multicast route the kernel dropped with the device."""
        _ip("-n", self.gpu, "link", "set", IFACE, "up")
        for ns in (self.gpu, self.robot):
            _ip("-n", ns, "route", "replace", MULTICAST, "dev", IFACE)

    def link_is_up(self) -> bool:
        out = _ip("-n", self.gpu, "link", "show", IFACE).stdout
        return "state UP" in out or ("LOWER_UP" in out and ",UP" in out)

    def udp_counters(self, host: str) -> dict[str, int]:
        """The kernel's UDP counters inside ``host`` (``Udp:`` of /proc/net/snmp, per namespace):
        ``RcvbufErrors`` counts datagrams dropped because a receiving socket's buffer was full."""
        text = subprocess.run(self.command(host, ["cat", "/proc/net/snmp"]), capture_output=True, text=True).stdout
        rows = [line.split()[1:] for line in text.splitlines() if line.startswith("Udp:")]
        return {k: int(v) for k, v in zip(rows[0], rows[1])} if len(rows) >= 2 else {}

    # ---- processes -------------------------------------------------------------------------------
    def command(self, host: str, argv: list[str]) -> list[str]:
        if host not in (self.gpu, self.robot):
            raise ValueError(f"host must be {self.gpu!r} or {self.robot!r}, got {host!r}")
        return ["ip", "netns", "exec", host, *argv]

    def popen(
        self, host: str, argv: list[str], discovery: str = "subnet", env: dict[str, str] | None = None, **kwargs
    ) -> subprocess.Popen:
        """Start ``argv`` inside ``host`` in a new process group (stop it with ``stop``)."""
        full_env = dds_env(env, discovery, self.peer_of(host))
        return subprocess.Popen(self.command(host, argv), env=full_env, start_new_session=True, **kwargs)


def stop(proc: subprocess.Popen | None, sig: int = signal.SIGINT, timeout_s: float = 20.0) -> int | None:
    """Stop a process group started with ``start_new_session`` (SIGINT like Ctrl-C, then SIGKILL)."""
    if proc is None:
        return None
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        except ProcessLookupError:
            pass
    return proc.returncode

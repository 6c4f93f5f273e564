"""config/sros2/policy.xml stays in sync with the graph it secures.

DDS Security cannot run here (the PyPI Fast DDS build has security compiled out), so what is checked is the
policy itself: the launch files start every node in its own enclave; each node's enclave names exactly the
topics the running graph shows it publishing and subscribing and the services it serves (so a new topic
fails this test until the policy says who may use it); only the safety filter may publish
/vla/safe_action_chunk and only the controller subscribe it; the operator enclave asks only for services
that exist. Both launch variants that start nodes are launched for real (policy:=scripted, policy:=vla).
"""

import subprocess
import sys
import time
import xml.etree.ElementTree as ET

import pytest
from ros_helpers import REPO, LaunchedGraph

POLICY = REPO / "config" / "sros2" / "policy.xml"
# Served by rclpy on Jazzy and later only; allowed for every node so one policy serves all three distros.
DISTRO_SERVICES = {"get_type_description"}
ROS2CLI_PREFIX = "_ros2cli"
# Allowed because a parameter turns them on (debug_attention:=true advertises the overlay); absent by default.
OPTIONAL_TOPICS = {"/policy/attention_overlay"}


def expand(name: str, ns: str, node: str) -> str:
    """A policy name as ROS resolves it: ~/x is the node's private name, a relative name is in ns."""
    base = ns.rstrip("/")
    if name.startswith("~"):
        return f"{base}/{node}{name[1:]}"
    return name if name.startswith("/") else f"{base}/{name}"


def load_policy() -> dict[str, dict]:
    """enclave path -> {"node": fully qualified node, "publish"/"subscribe"/"reply"/"request": set of names}."""
    out = {}
    for enclave in ET.parse(POLICY).getroot().iter("enclave"):
        (profile,) = enclave.iter("profile")  # one node per enclave: permissions are per process
        ns, node = profile.get("ns"), profile.get("node")
        entry = {
            "node": f"{ns.rstrip('/')}/{node}",
            "publish": set(),
            "subscribe": set(),
            "reply": set(),
            "request": set(),
        }
        for group in profile:
            for mode in ("publish", "subscribe", "reply", "request"):
                if group.get(mode) == "ALLOW":
                    entry[mode] |= {expand(e.text.strip(), ns, node) for e in group}
                assert group.get(mode) in (None, "ALLOW"), f"{enclave.get('path')}: only ALLOW rules are used"
        out[enclave.get("path")] = entry
    return out


def test_the_policy_is_well_formed_and_guards_the_safe_chunk_topic():
    policy = load_policy()
    assert set(policy) == {
        f"/vla_ros/{n}" for n in ("sim", "policy", "safety_filter", "controller", "scripted_motion", "operator")
    }
    safe = "/vla/safe_action_chunk"
    assert [e["node"] for e in policy.values() if safe in e["publish"]] == ["/safety_filter"]
    assert [e["node"] for e in policy.values() if safe in e["subscribe"]] == ["/controller"]
    for path, entry in policy.items():
        assert path == f"/vla_ros{entry['node']}", (path, entry["node"])  # the enclave is named after its node
    root = ET.parse(POLICY).getroot()
    assert root.tag == "policy" and root.get("version") == "0.2.0"  # sros2's policy.xsd


def test_the_launch_files_start_every_node_in_its_enclave():
    policy = load_policy()
    for args in (["policy:=vla"], ["policy:=scripted"]):
        out = subprocess.run(
            [sys.executable, "-m", "vla_ros.launch_runner", "--print", str(REPO / "launch" / "sim.launch.xml"), *args],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
        )
        assert out.returncode == 0, out.stderr
        for line in out.stdout.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            words = line.split()
            name = next(w.split(":=")[1] for w in words if w.startswith("__node:="))
            enclave = words[words.index("--enclave") + 1]
            assert enclave == f"/vla_ros/{name}" and enclave in policy, line


class GraphProbe:
    """A plain rclpy node (wall time) that reads the ROS graph."""

    def __init__(self) -> None:
        import rclpy
        from rclpy.node import Node

        self._rclpy = rclpy
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = Node("sros2_policy_probe", context=self.context)

    def snapshot(self, nodes) -> dict[str, dict]:
        """fully qualified node -> its published / subscribed topics and served services."""
        n = self.node
        out = {}
        for fq in nodes:
            ns, name = fq.rsplit("/", 1)
            ns = ns or "/"
            try:
                out[fq] = {
                    "publish": {t for t, _ in n.get_publisher_names_and_types_by_node(name, ns)},
                    "subscribe": {t for t, _ in n.get_subscriber_names_and_types_by_node(name, ns)},
                    "reply": {s for s, _ in n.get_service_names_and_types_by_node(name, ns)},
                }
            except Exception:  # the node is not (yet) in the graph
                out[fq] = None
        return out

    def other_nodes(self, expected) -> set[str]:
        names = {f"{ns.rstrip('/')}/{name}" for name, ns in self.node.get_node_names_and_namespaces()}
        return {
            n
            for n in names - set(expected) - {"/sros2_policy_probe"}
            if not n.rsplit("/", 1)[-1].startswith(ROS2CLI_PREFIX)
        }

    def close(self) -> None:
        self.node.destroy_node()
        self._rclpy.try_shutdown(context=self.context)


def _wanted(entry: dict, graph: dict) -> dict:
    """What the graph must show for a node: the policy's sets, less the services only newer distros serve and
    the topics a parameter turns on."""
    distro = {s for s in entry["reply"] if s.rsplit("/", 1)[-1] in DISTRO_SERVICES and s not in graph["reply"]}
    off = {
        kind: {t for t in entry[kind] if t in OPTIONAL_TOPICS and t not in graph[kind]}
        for kind in ("publish", "subscribe")
    }
    return {
        "publish": entry["publish"] - off["publish"],
        "subscribe": entry["subscribe"] - off["subscribe"],
        "reply": entry["reply"] - distro,
    }


@pytest.mark.parametrize(
    "variant, nodes",
    [
        ("policy:=scripted", ("sim", "scripted_motion")),
        ("policy:=vla", ("sim", "policy", "safety_filter", "controller")),
    ],
)
def test_each_enclave_names_exactly_what_its_node_does_in_the_running_graph(tmp_path, variant, nodes):
    policy = load_policy()
    expected = {f"/{n}": policy[f"/vla_ros/{n}"] for n in nodes}
    with LaunchedGraph(
        "sim.launch.xml",
        variant,
        "image_width:=64",
        "image_height:=48",
        "real_time_factor:=0.5",
        log_path=tmp_path / "launch.log",
    ):
        probe = GraphProbe()
        try:

            def in_sync():
                graph = probe.snapshot(expected)
                return all(g is not None and g == _wanted(expected[fq], g) for fq, g in graph.items())

            end = time.monotonic() + 240  # the policy node loads its model before it creates its endpoints
            while time.monotonic() < end and not in_sync():
                time.sleep(0.5)
            graph = probe.snapshot(expected)
            for fq, g in graph.items():
                assert g is not None, f"{fq} never appeared: " + (tmp_path / "launch.log").read_text()[-3000:]
                want = _wanted(expected[fq], g)
                for kind in ("publish", "subscribe", "reply"):
                    assert g[kind] == want[kind], (
                        f"{fq} {kind}: the graph has {sorted(g[kind] - want[kind])} that policy.xml does not allow, "
                        f"policy.xml allows {sorted(want[kind] - g[kind])} that the node does not use"
                    )
            assert probe.other_nodes(expected) == set()  # nothing runs outside an enclave of the policy
            if variant == "policy:=vla":
                served = set().union(*(g["reply"] for g in graph.values()))
                asked = policy["/vla_ros/operator"]["request"]
                assert asked <= served, sorted(asked - served)
        finally:
            probe.close()

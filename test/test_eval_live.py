"""``vla-ros eval --live``: two episodes of the shipped model through the launched graph (sim, policy, safety
filter and controller processes, DDS, simulated time), checked against a witness.

While the command runs as a subprocess, this test process runs its own node on simulated time (the
witness) with subscriptions of its own: the sim's ``/vla/episode_status`` and ``/vla/episode_reset`` (its
truth: episode, time, hand and cup positions, the lifted cup), the chunks into and out of the safety
filter, ``/joint_states``, ``/camera/camera_info`` (stamped as the image it comes with) and
``/diagnostics``. Every figure of the JSON is recomputed from what the witness saw, or from the raw records
the command leaves in ``results.json`` once those have been matched with the witness's own, so a figure
that is wrong, counted on the wrong messages or made up fails here. Nothing assumes the outcome: on a
loaded machine the policy may lift both cups or none, and the expected success is what the sim reported.

The witness may itself lose a message when this process is starved (DDS tells it: ``message_lost``), and
sensor stamps show their own gaps: each check is exact when the witness lost nothing and widens only by
what it lost. It may also match a node's publishers late (discovery while five processes start on a busy
machine: seen 3 simulated seconds late for the policy, whose writer then sent the witness nothing of its first
chunks and counted nothing lost), so for each chunk topic everything stamped before the first message the
witness received is out of its sight: the checks widen by what may have gone out there, never more.

Half real time: the policy gets two wall seconds per simulated second for its inference, so the run is
less at the mercy of the machine's speed, and two episodes of at most 6 simulated seconds still fit in a
few minutes (the shipped model lifts in about 3)."""

import json
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest
from ros_helpers import REPO, Probe, stop

from vla_ros.evaluation.run_eval import load_templates
from vla_ros.sim.tasks import EVAL_SEED_START, episode_task

IN_PROCESS_KEYS = {
    "success_rate",
    "success_by_color",
    "mean_time_to_success_s",
    "safety_interventions",
    "safety_verdicts",
    "wrong_cup",
    "mean_distance_reduction",
    "episodes",
    "seeds",
    "model",
    "backend",
    "wall_s",
    "load_avg_1min",
    "success_by_phrasing",
    "filter_pass_unmodified_pct",
    "filter_rejected_pct",
}
LIVE_KEYS = {
    "latency_ms_p50",
    "latency_ms_p99",
    "latency_chunks",
    "joint_msgs_dropped_pct",
    "image_msgs_dropped_pct",
    "filter_pass_unmodified_pct",
    "controller_period_err_ms_p99",
    "real_time_factor",
    "real_time_factor_achieved",
}
VERDICTS = ("pass", "modified", "truncated", "rejected")
CHUNKS_IN, CHUNKS_OUT, DIAGNOSTICS = "/vla/action_chunk", "/vla/safe_action_chunk", "/diagnostics"
TIMING = "/vla/chunk_timing"
# A chunk's way, stage by stage, and the node that times each (vla_ros.latency; written out here as the witness
# reads it), and the segments between them
STAGE_NODES = {
    "received": "policy",
    "tick_start": "policy",
    "inferred": "policy",
    "shaped": "policy",
    "published": "policy",
    "filter_in": "safety_filter",
    "filter_out": "safety_filter",
    "accepted": "controller",
    "first_command": "controller",
}
STAGE_ORDER = tuple(STAGE_NODES)
SEGMENT_ORDER = (
    "sensor_to_policy",
    "wait_for_tick",
    "inference",
    "shaping",
    "publish",
    "to_filter",
    "filter",
    "to_controller",
    "to_first_command",
)

REAL_TIME_FACTOR = 0.5
MAX_EPISODE_S = 6.0
# Simulated seconds: how far one node's simulated clock may trail another's or a message's stamp. Each node
# takes the newest /clock (200 Hz), so the clocks differ by a few periods; 0.1 s also covers a scheduling
# stall of 0.2 s wall at half real time.
CLOCK_SLACK_S = 0.1
STATUS_PERIOD_S = 0.1  # config/sim.yaml: episode_status_rate_hz 10
TICK_PERIOD_S = 0.1  # config/policy.yaml: rate_hz 10, tick_on_frame false: at most one chunk per tick
# Simulated seconds the command may take a status late (it keeps only the newest): 5 statuses, a second of
# wall time at half real time without the command's process getting the CPU.
STATUS_LAG_S = 0.5
# Simulated seconds a node may stall right at one of its reports, with messages waiting that no figure of
# the report shows (2 s of wall time at half real time: seen on a machine at load 18 on 2 cores).
STALL_S = 1.0
# Simulated milliseconds: how far the command's median latency may lie from the witness's over the same
# chunks. Both take the same message next to the controller and read the same /clock, so they differ only
# by when each process got the CPU (per chunk up to 30 ms, seen at load 14 on 2 cores); a latency on
# another clock or from other stamps is off by far more than this.
LATENCY_MEDIAN_SLACK_MS = 50.0


def _ns(t) -> int:
    return int(t.sec) * 1_000_000_000 + int(t.nanosec)


class Witness:
    """A node in the test process that records what the graph did, on simulated time."""

    def __init__(self) -> None:
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import CameraInfo, JointState
        from std_msgs.msg import Header, String
        from trajectory_msgs.msg import JointTrajectory

        try:
            from rclpy.event_handler import SubscriptionEventCallbacks  # Iron and later
        except ImportError:  # Humble
            from rclpy.qos_event import SubscriptionEventCallbacks

        self.probe = Probe("eval_witness")
        node = self.probe.node
        # Deep reliable queues: the executor may fall behind without losing anything (a DDS loss, when this
        # process is starved, is reported by message_lost and counted in self.lost).
        deep = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
        latched = QoSProfile(
            depth=1000, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
        )
        self.lost: Counter[str] = Counter()  # topic -> messages DDS says this process lost
        self.statuses: list[dict] = []
        self.resets: dict[int, int] = {}  # episode -> its first simulated instant (ns), as the sim announced it
        self.chunks_in: dict[int, list[tuple]] = {}  # stamp ns -> [Witness._chunk(msg)], the policy's
        self.chunks_out: dict[int, list[tuple]] = {}  # the same, out of the safety filter
        self.diagnostics: list[tuple[int, str, dict]] = []  # (header stamp ns, status name, values), as received
        self.joint_stamps: list[int] = []
        self.image_stamps: list[int] = []
        self.timings: list[dict] = []  # the nodes' chunk-timing records, as received

        def subscribe(msg_type, topic, callback, qos) -> None:
            events = SubscriptionEventCallbacks(message_lost=lambda e: self.lost.__setitem__(topic, e.total_count))
            node.create_subscription(msg_type, topic, callback, qos, event_callbacks=events)

        subscribe(String, "/vla/episode_status", lambda m: self.statuses.append(json.loads(m.data)), latched)
        # the sim's announcement of each episode: stamp = its first instant, frame_id = its number
        subscribe(
            Header,
            "/vla/episode_reset",
            lambda m: m.frame_id.isdigit() and self.resets.__setitem__(int(m.frame_id), _ns(m.stamp)),
            latched,
        )
        subscribe(JointTrajectory, CHUNKS_IN, self._on_chunk_in, deep)
        subscribe(JointTrajectory, CHUNKS_OUT, self._on_chunk_out, deep)
        subscribe(DiagnosticArray, DIAGNOSTICS, self._on_diagnostics, deep)
        subscribe(String, TIMING, lambda m: self.timings.append(json.loads(m.data)), deep)
        subscribe(JointState, "/joint_states", lambda m: self.joint_stamps.append(_ns(m.header.stamp)), deep)
        # camera_info goes out with every image, with its stamp: the frames the sim published, without
        # deserializing 230 kB per frame in this process.
        subscribe(CameraInfo, "/camera/camera_info", lambda m: self.image_stamps.append(_ns(m.header.stamp)), deep)

    def _chunk(self, msg) -> tuple:
        """(joint names, positions per point, times ns per point, received ns on /clock, received ns on the
        monotonic clock)"""
        return (
            tuple(msg.joint_names),
            tuple(tuple(p.positions) for p in msg.points),
            tuple(_ns(p.time_from_start) for p in msg.points),
            self.probe.node.get_clock().now().nanoseconds,
            time.monotonic_ns(),
        )

    def _on_chunk_in(self, msg) -> None:
        self.chunks_in.setdefault(_ns(msg.header.stamp), []).append(self._chunk(msg))

    def _on_chunk_out(self, msg) -> None:
        self.chunks_out.setdefault(_ns(msg.header.stamp), []).append(self._chunk(msg))

    def _on_diagnostics(self, msg) -> None:
        stamp = _ns(msg.header.stamp)
        self.diagnostics.extend((stamp, s.name, {kv.key: kv.value for kv in s.values}) for s in msg.status)

    def close(self) -> None:
        self.probe.close()

    # ---- what the witness makes of it ---------------------------------------------------------------
    def episodes(self) -> dict[int, list[dict]]:
        """The sim's statuses per episode, in simulated time."""
        out: dict[int, list[dict]] = {}
        for s in self.statuses:
            out.setdefault(s["episode"], []).append(s)
        return {e: sorted(v, key=lambda s: s["time_s"]) for e, v in out.items()}

    def reports(self, name: str) -> list[tuple[int, dict]]:
        return [(stamp, v) for stamp, n, v in self.diagnostics if n == name]

    def report_window(self, name: str, values: dict, count) -> tuple[int, int, list[int]]:
        """When the report ``name`` with these ``values`` went out: (earliest stamp, latest stamp, the indices in
        ``reports(name)`` it lies among). The witness's reports with exactly these values; if the witness lost
        /diagnostics messages and has none, the interval between its reports just before and after it by
        ``count(values)`` (a cumulative counter, so in the order of time). Reliable and deep, the witness
        misses none of a node's reports once it has matched the node's publisher; one it never saw without
        a loss went out before that (discovery at start-up): before its first report, counting no more."""
        reports = self.reports(name)
        exact = [i for i, (_, v) in enumerate(reports) if v == values]
        if exact:
            return reports[exact[0]][0], reports[exact[-1]][0], exact
        c = count(values)
        if not self.lost[DIAGNOSTICS]:
            assert reports and c <= count(reports[0][1]), (
                f"the {name} report the command used never crossed the graph: {values}"
            )
            return 0, reports[0][0], [0]
        before = [i for i, (_, v) in enumerate(reports) if count(v) < c][-1:]
        after = [i for i, (_, v) in enumerate(reports) if count(v) > c][:1]
        return (
            (reports[before[0]][0] if before else 0),
            (reports[after[0]][0] if after else float("inf")),
            before + after,
        )

    def sight_from(self, chunks: dict[int, list[tuple]]) -> float:
        """The first stamp of a chunk topic the witness saw (``chunks_in`` or ``chunks_out``): its publisher sends
        in the order of the stamps, so from there on the witness has every chunk (or counts it lost); before it,
        the publisher may have sent chunks before the witness matched it, which nothing counts as lost."""
        return min(chunks, default=float("inf"))

    def missed_policy_chunks(self, lo: float) -> int:
        """At most how many chunks the policy published from ``lo`` (ns) on that the witness never saw for
        matching late: one per tick from ``lo`` until the witness received its first chunk."""
        first = min((c[0][3] for c in self.chunks_in.values()), default=float("inf"))
        if first <= lo:
            return 0
        if first == float("inf"):
            return 10**9  # never matched: no bound
        return int((first - lo) * 1e-9 / TICK_PERIOD_S) + 1

    def latency_ms(self, stamp: int) -> float:
        """Stamp to the witness's receipt of the safe chunk, on /clock."""
        return (self.chunks_out[stamp][0][3] - stamp) * 1e-6


def published(stamps: list[int], lo: float, hi: float, before_first: bool = False) -> int:
    """How many messages of a sensor the sim published with stamps in (lo, hi]: the witness's, with those it
    lost put back (a sensor stamps at a fixed period, so a gap of n periods in its stamps is n - 1 messages).
    ``before_first``: also those the sim may have sent before the witness matched it, one per period before
    the first stamp the witness has, back to the start of simulated time (an upper bound)."""
    s = np.unique(np.asarray(stamps, dtype=np.int64))
    count = int(np.sum((s > lo) & (s <= hi)))
    period = float(np.median(np.diff(s)))
    for a, b in zip(s[:-1], s[1:]):
        n = round((b - a) / period)
        count += sum(lo < a + j * (b - a) / n <= hi for j in range(1, n))
    if before_first:
        count += sum(lo < s[0] - j * period <= hi for j in range(1, int(s[0] / period) + 1))
    return count


def test_published_puts_back_the_messages_the_witness_missed():
    """The witness's count of a sensor's messages, on stamps with known gaps (ns, 10 ms period)."""
    ms = 10_000_000
    stamps = [k * ms for k in range(50, 101) if k not in (60, 61, 62)]  # 0.5-1.0 s, three lost at 0.6 s
    assert published(stamps, 0, 2e9) == 51
    assert published(stamps, 55 * ms, 65 * ms) == 10
    assert published(stamps, 0, 2e9, before_first=True) == 100  # back to 0.01 s, before the first the witness saw
    assert published(stamps, 20 * ms, 55 * ms, before_first=True) == 35
    assert published(stamps, 20 * ms, 55 * ms) == 6


def _prismatic_joints() -> set[str]:
    """The URDF's prismatic joints (the fingers), read here with ElementTree."""
    root = ET.parse(REPO / "vla_ros" / "description" / "vla_arm.urdf").getroot()
    return {j.get("name") for j in root.iter("joint") if j.get("type") == "prismatic"}


PRISMATIC = _prismatic_joints()
# config/safety_filter.yaml: position_clamp_m (a gripper target up to 1 cm past its stroke is clamped onto
# it, and the chunk counts as modified); revolute targets are never clamped (position_clamp_rad 0), and the
# filter copies the points it keeps, so their revolute positions come out bit for bit.
CLAMP_M = 0.01


def classify(chunk_in: tuple, chunk_out: tuple | None) -> str:
    """The filter's verdict on a chunk, read from what went in and what came out with the same stamp:
    nothing = rejected; the same points at the same times = pass; every future point kept (a tail of the
    input: points already past dropped, a finger target clamped, times stretched) = modified; cut before an
    unsafe point (a run of the input's points that stops short of its last) = truncated. An output that is
    no run of the input's points is no verdict of the filter's: "unexplained"."""
    if chunk_out is None:
        return "rejected"
    names, q_in, t_in = chunk_in[:3]
    q_out, t_out = chunk_out[1:3]
    if chunk_out[0] != names:
        return "unexplained"
    if q_in == q_out and t_in == t_out:
        return "pass"
    tol = np.array([CLAMP_M + 1e-9 if n in PRISMATIC else 0.0 for n in names])
    a, b = np.asarray(q_in), np.asarray(q_out)
    n = len(b)
    for first in range(len(a) - n + 1):
        if n and np.all(np.abs(a[first : first + n] - b) <= tol):
            return "modified" if first + n == len(a) else "truncated"
    return "unexplained"


def test_classify_tells_the_verdicts_apart():
    """The witness's own reading, on hand-built chunks with known verdicts."""
    names = ("elbow_joint", "left_finger_joint")
    q = ((0.0, 0.01), (0.1, 0.02), (0.2, 0.03), (0.3, 0.0))
    t = (100, 200, 300, 400)
    assert classify((names, q, t), None) == "rejected"
    assert classify((names, q, t), (names, q, t)) == "pass"
    assert classify((names, q, t), (names, q, (150, 300, 450, 600))) == "modified"  # stretched
    assert classify((names, q, t), (names, q[1:], t[1:])) == "modified"  # the past point dropped
    assert classify((names, q, t), (names, (*q[:3], (0.3, 0.005)), t)) == "modified"  # the finger clamped
    assert classify((names, q, t), (names, q[:2], t[:2])) == "truncated"
    assert classify((names, q, t), (names, q[1:3], (50, 150))) == "truncated"  # past point dropped and cut
    assert classify((names, q, t), (names, ((0.0, 0.01), (0.15, 0.02)), t[:2])) == "unexplained"  # a moved point
    assert classify((names, q, t), (names[::-1], q, t)) == "unexplained"


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    out = tmp_path_factory.mktemp("live_eval")
    cmd = [
        sys.executable,
        "-m",
        "vla_ros.cli",
        "eval",
        "--live",
        "--episodes",
        "2",
        "--seed",
        "3",
        "--max-episode-s",
        str(MAX_EPISODE_S),
        "--real-time-factor",
        str(REAL_TIME_FACTOR),
        "--out",
        str(out),
        "--json",
    ]
    witness = Witness()  # up before the graph, so it sees the graph from its first message
    try:
        with open(out / "stdout", "w") as stdout, open(out / "stderr", "w") as stderr:
            proc = subprocess.Popen(cmd, cwd=REPO, stdout=stdout, stderr=stderr, start_new_session=True)
        try:
            # Spun while the command runs; its exit is its own signal that it is done.
            finished = witness.probe.spin_until(lambda: proc.poll() is not None, 600)
        finally:
            stop(proc)
    finally:
        witness.close()
    logs = (out / "stdout").read_text()[-2000:] + (out / "stderr").read_text()[-3000:]
    graph_log = (out / "graph.log").read_text()[-3000:] if (out / "graph.log").is_file() else ""
    assert finished and proc.returncode == 0, logs + graph_log
    summary = json.loads((out / "stdout").read_text().strip().splitlines()[-1])
    results = json.loads((out / "results.json").read_text())
    return SimpleNamespace(summary=summary, results=results, witness=witness, out=out)


@pytest.fixture(scope="module")
def sim_episodes(live):
    """Per episode of the command, what the sim reported, as the witness saw it.

    ``start_s``: the episode's first instant (the sim's announcement); ``t``, ``d``: each status's time in
    the episode and the distance from the hand to the named cup; ``end``: the index of the status that
    ended the episode (the first with a lifted cup or at ``MAX_EPISODE_S``), ``lifted`` its lifted cup;
    ``first_lift``: the time of the first status with the named cup lifted. Where the witness lost statuses
    (more than a period between two), the sim's own may lie earlier: ``end_lo`` and ``first_lift_lo`` are the
    earliest they can be, and ``d_tol`` the most a lost status's distance can differ from one the witness
    has (half the gap, at the fastest change per period it saw)."""
    by_number = live.witness.episodes()
    out = []
    for e in live.results["episodes"]:
        statuses = by_number[e["episode"]]
        start = live.witness.resets.get(e["episode"], round(statuses[0]["time_s"] * 1e9)) * 1e-9
        t = np.array([s["time_s"] - start for s in statuses])
        d = np.array([np.linalg.norm(np.subtract(s["tcp"], s["cups"][e["color"]])) for s in statuses])
        periods = np.round(np.diff(np.concatenate([[0.0], t])) / STATUS_PERIOD_S).astype(int)  # before each status
        single = np.abs(np.diff(d))[periods[1:] == 1]
        d_tol = (periods.max() // 2) * (single.max() if single.size else np.inf) if periods.max() > 1 else 0.0
        end = next(i for i, s in enumerate(statuses) if s["lifted"] is not None or t[i] >= MAX_EPISODE_S)
        lifts = [i for i, s in enumerate(statuses) if s["lifted"] == e["color"]]
        first = lifts[0] if lifts else None
        out.append(
            SimpleNamespace(
                statuses=statuses,
                start_s=start,
                t=t,
                d=d,
                d_tol=d_tol,
                end=end,
                end_s=t[end],
                lifted=statuses[end]["lifted"],
                end_lo=t[end] - max(periods[end] - 1, 0) * STATUS_PERIOD_S,
                first_lift=None if first is None else t[first],
                first_lift_lo=None if first is None else t[first] - max(periods[first] - 1, 0) * STATUS_PERIOD_S,
            )
        )
    return out


def test_the_live_json_has_the_in_process_keys_and_the_sims_outcome(live, sim_episodes):
    """The keys of the in-process evaluation and the live figures; the success figures are recomputed from
    what the sim reported (the lifted cup at the status that ended each episode)."""
    summary = live.summary
    assert IN_PROCESS_KEYS | LIVE_KEYS <= set(summary), sorted(IN_PROCESS_KEYS | LIVE_KEYS - set(summary))
    assert summary["mode"] == "live" and summary["backend"] == "onnx" and summary["episodes"] == 2
    assert summary["seeds"] == [EVAL_SEED_START + 3, EVAL_SEED_START + 4]
    colors = [e["color"] for e in live.results["episodes"]]
    success = [sim.lifted == color for sim, color in zip(sim_episodes, colors)]
    assert summary["success_rate"] == pytest.approx(np.mean(success), abs=1e-3), (summary["success_rate"], success)
    for color in ("red", "green", "blue"):
        mine = [ok for ok, c in zip(success, colors) if c == color]
        assert summary["success_by_color"][color] == (pytest.approx(np.mean(mine), abs=1e-3) if mine else None), color
    assert summary["wrong_cup"] == sum(sim.lifted not in (None, c) for sim, c in zip(sim_episodes, colors))
    assert sum(v["episodes"] for v in summary["success_by_phrasing"].values()) == 2
    assert set(summary["success_by_phrasing"]) <= set(load_templates(None))
    assert summary["real_time_factor"] == REAL_TIME_FACTOR
    # every instruction was taken, as the policy itself said on /policy/instruction_status
    assert summary["false_refusal_pct"] == 0.0
    for e in live.results["episodes"]:
        assert not e["refused"] and e["instruction_status"]["status"] == "accepted", e["instruction_status"]
        assert e["instruction_status"]["target"] == e["color"] and e["max_tcp_displacement_m"] > 0.05
    # The achieved factor is the sim's own figure, from its report the witness saw too.
    sim_after = live.results["diagnostics"]["after"]["sim: simulation"]
    live.witness.report_window("sim: simulation", sim_after, lambda v: float(v["sim_time_s"]))
    assert summary["real_time_factor_achieved"] == round(float(sim_after["real_time_factor.achieved"]), 3) > 0.0
    assert float(sim_after["real_time_factor.target"]) == REAL_TIME_FACTOR  # the factor reached the sim


def test_the_episodes_are_the_sims_episodes(live, sim_episodes):
    """Per episode: the task from the seed, the seed the sim ran, one reset per episode, the outcome the sim
    reported, and the distances from the sim's own hand and cup positions.

    The command keeps only the newest status (a latched depth-1 subscription), so under load it may miss
    some: its start distance is then a later status's, its minimum a neighbour's and its lift a later
    status's. They are held to values of the statuses the sim published, the start and lift within
    ``STATUS_LAG_S`` of where they are due, the minimum within what missing the statuses that long before it
    can change."""
    episodes = live.results["episodes"]
    templates = load_templates(None)
    assert [e["seed"] for e in episodes] == live.summary["seeds"]
    assert episodes[1]["episode"] == episodes[0]["episode"] + 1  # one reset per episode, through the sim's service
    assert max(live.witness.episodes()) == episodes[1]["episode"]  # and no other reset
    missed = round(STATUS_LAG_S / STATUS_PERIOD_S)
    times = []
    for e, sim in zip(episodes, sim_episodes):
        color, instruction = episode_task(e["seed"], templates)
        assert (e["color"], e["instruction"]) == (color, instruction)
        assert {s["seed"] for s in sim.statuses} == {e["seed"]}, "the sim ran another seed"
        assert e["lifted"] == sim.lifted and e["success"] == (sim.lifted == color), (e, sim.lifted)
        # the start: the distance at the reset's own status, or at one the command took instead having missed it
        early = sim.d[sim.t <= STATUS_LAG_S]
        assert np.abs(early - e["initial_target_distance_m"]).min() <= sim.d_tol + 1e-9, (
            e["initial_target_distance_m"],
            early,
        )
        # the minimum: a distance the sim reported in the episode, not below the sim's minimum, and no larger
        # than the largest of the statuses before the minimum that the command may have missed
        m = e["min_target_distance_m"]
        assert np.abs(sim.d - m).min() <= sim.d_tol + 1e-9, m
        k = int(np.argmin(sim.d[: sim.end + 1]))
        assert sim.d.min() - sim.d_tol - 1e-9 <= m <= sim.d[max(k - missed, 0) : k + 1].max() + 1e-9, (
            m,
            sim.d[max(k - missed, 0) : k + 1],
        )
        if e["success"]:
            # the time of the first status with the cup lifted, or of one the command took instead
            assert sim.first_lift_lo - 1e-3 <= e["time_to_success_s"] <= sim.first_lift + STATUS_LAG_S, (
                e["time_to_success_s"],
                sim.first_lift,
            )
            times.append(e["time_to_success_s"])
        else:
            assert e["time_to_success_s"] is None
    assert live.summary["mean_time_to_success_s"] == (pytest.approx(np.mean(times), abs=1e-3) if times else None)
    reduction = np.mean([1 - e["min_target_distance_m"] / e["initial_target_distance_m"] for e in episodes])
    assert live.summary["mean_distance_reduction"] == pytest.approx(reduction, abs=1e-3)


def test_the_counted_chunks_crossed_the_graph_and_their_latency_is_the_witnesss(live, sim_episodes):
    """Chunks reached the controller, and the chunks the command counted are the safe chunks the witness
    saw cross the filter (same stamps, each with the policy's chunk of that stamp), none missing within an
    episode; the latency figures are recomputed from the command's raw records, whose median matches the
    witness's own latencies of the same chunks. (Not every episode needs chunks: on a loaded machine the
    filter may reject a slow policy's chunks as stale for a whole episode; the run as a whole must have some.)"""
    w, summary = live.witness, live.summary
    # every chunk out of the filter came in from the policy (but for chunks the witness lost, or sent before it
    # matched the policy's writer)
    unexplained = sorted(s for s in set(w.chunks_out) - set(w.chunks_in) if s >= w.sight_from(w.chunks_in))
    assert len(unexplained) <= w.lost[CHUNKS_IN], unexplained[:5]
    latest_ms = max(w.latency_ms(s) for s in w.chunks_out)
    all_stamps, all_ms = [], []
    for e, sim in zip(live.results["episodes"], sim_episodes):
        stamps = [s for s, _ in e["chunk_arrivals"]]
        assert e["chunks"] == len(stamps), e
        start_ns = round(sim.start_s * 1e9)
        unseen = [s for s in set(stamps) - set(w.chunks_out) if s >= w.sight_from(w.chunks_out)]
        assert len(unseen) <= w.lost[CHUNKS_OUT], f"counted chunks that never left the filter: {unseen[:5]}"
        assert len(set(stamps)) == len(stamps) and all(s >= start_ns for s in stamps), (
            "counted a chunk twice or from before the episode"
        )
        # Every safe chunk stamped in the episode that reached the witness before the end status: the
        # command takes the end status at most a status period after it, and a chunk a latency after its stamp.
        end_ns = start_ns + (sim.end_lo - latest_ms * 1e-3 - CLOCK_SLACK_S) * 1e9
        inside = {s for s in w.chunks_out if start_ns <= s <= end_ns}
        assert inside <= set(stamps), f"missed chunks that crossed in the episode: {sorted(inside - set(stamps))[:5]}"
        mine = [ms for _, ms in e["chunk_arrivals"]]
        assert e["latency_ms_p50"] == (round(float(np.percentile(mine, 50)), 2) if mine else None)
        all_stamps += stamps
        all_ms += mine
    assert summary["latency_chunks"] == len(all_ms) >= 1  # chunks reached the controller
    assert all(ms >= 0.0 for ms in all_ms)  # stamps are observation times: a chunk arrives after its stamp
    assert summary["latency_ms_p50"] == round(float(np.percentile(all_ms, 50)), 2)
    assert summary["latency_ms_p99"] == round(float(np.percentile(all_ms, 99)), 2)
    seen = [(ms, w.latency_ms(s)) for s, ms in zip(all_stamps, all_ms) if s in w.chunks_out]
    mine, witness = np.median([a for a, _ in seen]), np.median([b for _, b in seen])
    assert abs(mine - witness) <= LATENCY_MEDIAN_SLACK_MS, (mine, witness)
    # The controller itself took chunks during the episodes: its own count (since it started), on the
    # witness's /diagnostics, rose between the first episode's start and the last one's end.
    accepted = [
        (stamp, int(v["chunks.accepted"])) for stamp, v in w.reports("controller: state") if "chunks.accepted" in v
    ]
    start_ns, end_ns = (
        sim_episodes[0].start_s * 1e9,
        (sim_episodes[-1].start_s + sim_episodes[-1].end_s + CLOCK_SLACK_S) * 1e9,
    )
    before = max((c for stamp, c in accepted if stamp <= start_ns), default=0)
    assert max((c for stamp, c in accepted if start_ns < stamp <= end_ns), default=0) > before, accepted


def _filter_count(values: dict) -> int:
    return sum(int(values[f"chunks.{v}"]) for v in VERDICTS)


def test_the_filter_verdicts_are_the_chunks_the_witness_saw_cross_the_filter(live):
    """The filter's verdict counts between the command's two snapshots against the witness's reading of
    each chunk (input and output of the same stamp, ``classify``).

    The snapshots are the filter's reports (1 Hz): found among the witness's by their values, their stamps
    bound the window in simulated time. A chunk is handled at or after its stamp and, if it passed, before
    the witness received its output; a rejected one, no later than the slowest chunk the witness saw
    arrive, and a stall (``STALL_S``). Only the chunks whose handling may lie on either side of a snapshot are
    uncertain: the counts
    must lie between the chunks surely inside and those possibly inside, verdict by verdict, widened by the
    chunks the witness lost (a lost output reads as a rejection, a lost input is a chunk it cannot read) and by
    those sent before it matched a publisher (an input without its output then has any verdict; the policy's
    chunks it never saw, at most one per tick, any verdict too)."""
    w, summary, results = live.witness, live.summary, live.results
    a_lo, a_hi, _ = w.report_window(
        "safety_filter: filter", results["diagnostics"]["before"]["safety_filter: filter"], _filter_count
    )
    b_lo, b_hi, _ = w.report_window(
        "safety_filter: filter", results["diagnostics"]["after"]["safety_filter: filter"], _filter_count
    )
    slack = CLOCK_SLACK_S * 1e9
    latest = max(out[0][3] - s for s, out in w.chunks_out.items())
    surely, possibly = Counter(), Counter()
    out_from = w.sight_from(w.chunks_out)
    blind = 0  # inputs whose output, if any, went out before the witness matched the filter's writer
    for stamp, inputs in w.chunks_in.items():
        assert len(inputs) == 1, f"two chunks with the stamp {stamp}: cannot pair them"
        outputs = w.chunks_out.get(stamp, [None])
        assert len(outputs) == 1, f"the filter sent {len(outputs)} chunks for the stamp {stamp}"
        verdict = classify(inputs[0], outputs[0])
        assert verdict != "unexplained", (inputs[0], outputs[0])
        earliest = stamp - slack
        latest_handled = (outputs[0][3] if outputs[0] is not None else stamp + latest + STALL_S * 1e9) + slack
        if outputs[0] is None and stamp < out_from:
            blind += latest_handled > a_lo and earliest < b_hi
            continue
        surely[verdict] += a_hi < earliest and latest_handled < b_lo
        possibly[verdict] += latest_handled > a_lo and earliest < b_hi
    # the policy's chunks the witness never saw: handled in the window if sent no earlier than the slowest
    # handling before it
    lost_in = w.lost[CHUNKS_IN] + blind + w.missed_policy_chunks(a_lo - latest - STALL_S * 1e9 - slack)
    lost_out = w.lost[CHUNKS_OUT]
    surely_total, possibly_total = sum(surely.values()), sum(possibly.values()) + lost_in
    surely["rejected"] = max(surely["rejected"] - lost_out, 0)
    for v in VERDICTS:
        possibly[v] += lost_in + (lost_out if v != "rejected" else 0)
    verdicts = summary["safety_verdicts"]
    assert set(verdicts) == set(VERDICTS)
    for v in VERDICTS:
        assert surely[v] <= verdicts[v] <= possibly[v], (v, verdicts, dict(surely), dict(possibly))
    total = sum(verdicts.values())
    assert 1 <= surely_total <= total <= possibly_total, (verdicts, surely_total, possibly_total)
    assert summary["safety_interventions"] == total - verdicts["pass"]
    assert summary["filter_pass_unmodified_pct"] == pytest.approx(100 * verdicts["pass"] / total, abs=0.01)
    assert summary["filter_rejected_pct"] == pytest.approx(100 * verdicts["rejected"] / total, abs=0.01)


def _intake_lag_ns(w: Witness, indices: list[int], key: str) -> float:
    """How far the policy's intake of ``key`` lagged behind the sensor around the policy reports at
    ``indices``: the largest ``arrival_lag_ms.p99`` (receive clock - stamp, over the messages taken since the
    report before) of those reports, the one before (a report right after another took nothing itself) and
    the one after (the messages taken next). None of them with a figure: nothing was taken, so any earlier
    message may be."""
    reports = [v for _, v in w.reports("policy: policy")]
    near = reports[max(min(indices) - 1, 0) : max(indices) + 2]
    lags = [float(v[f"{key}.arrival_lag_ms.p99"]) for v in near if f"{key}.arrival_lag_ms.p99" in v]
    return max(lags) * 1e6 if lags else float("inf")


def test_the_dropped_message_counts_fit_what_the_sim_published(live):
    """The policy's message counts between the command's two snapshots against the messages the sim
    published, counted by stamp from what the witness received (``published``).

    The snapshots are the policy's reports, found among the witness's by their values; their stamps bound
    the window. A message stamped after a report cannot have been counted before it (CLOCK_SLACK_S for the
    clocks); one stamped before it may still have been in the intake's queue, as far back as the intake
    lagged behind the sensor then (``_intake_lag_ns``, the policy's own figure over the messages it took)
    and a stall right at the report, whose waiting messages no figure shows (``STALL_S``). So ``received + lost`` (every
    message sent in the window: taken, or missing in the stamps) lies between the messages stamped surely
    inside and those possibly inside; the drops add up, and the share is recomputed. The policy's chunk
    count is held to the chunks the witness saw it publish in the same way, widened by those the witness lost
    or never saw for matching the policy late. Sensor messages sent before the witness matched the sim are
    put back at the sensor's period in the upper bound."""
    w, summary, results = live.witness, live.summary, live.results
    received = lambda v: int(v["joint_states.received"])  # noqa: E731 - cumulative: orders the reports in time
    a_lo, a_hi, a_at = w.report_window("policy: policy", results["diagnostics"]["before"]["policy: policy"], received)
    b_lo, b_hi, b_at = w.report_window("policy: policy", results["diagnostics"]["after"]["policy: policy"], received)
    slack = CLOCK_SLACK_S * 1e9
    for source, key, stamps in (
        ("joint_msgs", "joint_states", w.joint_stamps),
        ("image_msgs", "image", w.image_stamps),
    ):
        lag_a, lag_b = _intake_lag_ns(w, a_at, key) + STALL_S * 1e9, _intake_lag_ns(w, b_at, key) + STALL_S * 1e9
        surely = published(stamps, a_hi + slack, b_lo - lag_b - slack)
        possibly = published(stamps, a_lo - lag_a - slack, b_hi + slack, before_first=True)
        counts = summary[source]
        assert 1 <= surely <= counts["received"] + counts["lost"] <= possibly, (source, counts, surely, possibly)
        assert counts["dropped"] == counts["lost"] + counts["rejected"] + counts["unused"]
        pct = summary[source.replace("_msgs", "_msgs_dropped_pct")]
        assert pct == pytest.approx(100 * counts["dropped"] / (counts["received"] + counts["lost"]), abs=1e-3)
    # each chunk published at or after its stamp, before the witness received it
    surely = sum(a_hi < stamp - slack and c[0][3] + slack < b_lo for stamp, c in w.chunks_in.items())
    possibly = (
        sum(c[0][3] + slack > a_lo and stamp - slack < b_hi for stamp, c in w.chunks_in.items())
        + w.lost[CHUNKS_IN]
        + w.missed_policy_chunks(a_lo - slack)
    )
    assert 1 <= surely <= summary["policy_chunks"] <= possibly, (surely, possibly, summary["policy_chunks"])
    assert summary["policy_ticks"] >= summary["policy_chunks"]  # every chunk comes from a tick
    # The controller's worst period error is one the controller reported (on the witness's /diagnostics,
    # unless the witness lost reports).
    reported = {
        round(float(v["period_err_ms.p99"]), 3)
        for _, n, v in w.diagnostics
        if n.startswith("controller:") and n.endswith(": loop") and "period_err_ms.p99" in v
    }
    worst = summary["controller_period_err_ms_p99"]
    assert worst in reported or w.lost[DIAGNOSTICS] and worst >= 0.0, (worst, sorted(reported)[-5:])


def test_the_stage_timing_is_the_nodes_records_and_fits_what_the_witness_saw(live):
    """The latency budget (``latency_stages_ms``): the records it was computed from are the ones the nodes
    published (the witness has them too, unless it lost them or matched a node late), each chunk's stages lie
    in the order of its way and around the witness's own receipt of the chunk (monotonic clock, one host), and
    the figures are recomputed here from the records: the first segment on /clock (the stamp to the policy's
    intake), the others monotonic differences between successive stages."""
    w, summary, results = live.witness, live.summary, live.results
    records = results["latency"]["records"]
    seen = {json.dumps(r, sort_keys=True) for r in w.timings}
    missing = [r for r in records if json.dumps(r, sort_keys=True) not in seen]
    first_seen = {
        node: min((r["stamp_ns"] for r in w.timings if r["node"] == node), default=float("inf"))
        for node in ("policy", "safety_filter", "controller")
    }
    missing = [r for r in missing if r["stamp_ns"] >= first_seen[r["node"]]]
    assert len(missing) <= w.lost[TIMING], missing[:3]
    by_stamp: dict[int, dict[str, list]] = {}
    for r in records:
        assert all(STAGE_NODES[s] == r["node"] for s in r["stages"]), r  # each node times only its own stages
        by_stamp.setdefault(r["stamp_ns"], {}).update(r["stages"])
    segments: dict[str, list[float]] = {}
    complete = 0
    for stamp, stages in by_stamp.items():
        reached = [s for s in STAGE_ORDER if s in stages]
        mono = [stages[s][0] for s in reached]
        assert mono == sorted(mono), (stamp, dict(zip(reached, mono)))  # in the order of the way
        if stages.get("received", [0, None])[1] is not None:
            assert stages["received"][1] - stamp >= 0  # an observation arrives after its stamp
        if "published" in stages and stamp in w.chunks_in:
            assert stages["published"][0] <= w.chunks_in[stamp][0][4]  # sent before the witness got it
        if "filter_out" in stages and stamp in w.chunks_out:
            assert stages["filter_out"][0] <= w.chunks_out[stamp][0][4]
        if reached == list(STAGE_ORDER) and stages["received"][1] is not None:
            complete += 1
            gaps = [(stages["received"][1] - stamp) * 1e-6] + [(b - a) * 1e-6 for a, b in zip(mono, mono[1:])]
            for name, ms in zip(SEGMENT_ORDER, gaps):
                segments.setdefault(name, []).append(ms)
            segments.setdefault("whole", []).append(sum(gaps))
    assert summary["latency_stage_chunks"] == complete >= 1
    # every segment's figure over the chunks that have both of its stages; here, over the complete chunks
    # and the chunks that stopped part way, the whole only over the complete ones
    partial: dict[str, list[float]] = {}
    for stamp, stages in by_stamp.items():
        for name, (a, b) in zip(SEGMENT_ORDER[1:], zip(STAGE_ORDER, STAGE_ORDER[1:])):
            if a in stages and b in stages:
                partial.setdefault(name, []).append((stages[b][0] - stages[a][0]) * 1e-6)
        if stages.get("received", [0, None])[1] is not None:
            partial.setdefault(SEGMENT_ORDER[0], []).append((stages["received"][1] - stamp) * 1e-6)
    partial["whole"] = segments["whole"]
    for name, values in partial.items():
        expected = [round(float(np.percentile(values, 50)), 2), round(float(np.percentile(values, 99)), 2)]
        assert summary["latency_stages_ms"][name] == pytest.approx(expected, abs=0.011), name
    assert (live.out / "latency_budget.png").is_file()

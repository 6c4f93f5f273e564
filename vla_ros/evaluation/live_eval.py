"""``vla-ros eval --live``: the evaluation through the launched graph, measured where the system runs.

Starts ``launch/sim.launch.xml`` with ``policy:=vla`` (sim_node, policy_node, safety_filter_node and
controller_node as separate processes, DDS between them, simulated time at ``real_time_factor``), then for
every episode: sets the sim's ``seed`` parameter, publishes the instruction, resets through ``/sim/reset``
and watches ``/vla/episode_status`` until the named cup is lifted, another cup is lifted (wrong cup) or
``max_episode_s`` of simulated time has passed. Nothing is modelled: the figures are what the processes did.

Measured here, by an independent subscriber (its own process, simulated time):
* ``latency_ms_p50/p99``: ``/vla/safe_action_chunk`` header stamp (the newest observation the policy used)
  to its arrival next to the controller, on ``/clock``;
and read from the nodes' own ``/diagnostics`` (counter differences over the run):
* ``joint_msgs_dropped_pct`` / ``image_msgs_dropped_pct``: every message the policy did not use, whatever the
  cause (lost in transport as the stamps show, rejected on arrival, pushed out of the window unused);
* ``safety_verdicts`` and ``filter_pass_unmodified_pct`` (the safety filter's chunk counters);
* ``controller_period_err_ms_p99``: the worst of the controller's reported p99 period errors;
and joined from the nodes' own timing of every chunk (``/vla/chunk_timing``, ``vla_ros.latency``):
* ``latency_stages_ms``: per segment of a chunk's way (the stamp to the policy, waiting for the tick,
  inference, shaping, publishing, to the filter, the filter, to the controller, to its first command) and
  for the whole of it, [p50, p99] in ms; ``latency_stage_chunks``: the chunks that reached a first command.
``load_hogs``: CPU hogs run beside the graph (``--load``).
The JSON has the in-process evaluation's keys as well, so the two can be put side by side. ``results.json``
also keeps the raw figures behind the summary, so it can be recomputed and checked against the graph: per
episode each counted chunk's stamp and latency (``chunk_arrivals``), and the ``/diagnostics`` reports the
counter differences were taken between (``diagnostics``: ``before`` and ``after``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from vla_ros.cameras import sim_launch_args
from vla_ros.evaluation.tables import (
    false_refusal_pct,
    refusal_summary,
    robot_fields,
    success_breakdown,
    verdict_shares,
)
from vla_ros.latency import LatencyTable, plot_budget
from vla_ros.ros.instruction_status import read_status

VERDICTS = ("pass", "modified", "truncated", "rejected")


def vla_launch_args(model: str | Path, robot: str | None = None) -> list[str]:
    """``sim.launch.xml`` arguments for the learned policy on ``model`` (a folder or a name under models/),
    with what the simulation needs for that model: its cameras, and its robot (``robot``: a profile's name or
    file; None: the one the model folder records, else the bundled arm), which every node of the graph is
    given as ``robot_profile``. Raises ProfileError (a ValueError) where the robot's profile does not load or does
    not command the model's joints."""
    from vla_ros.model.io import resolve_model_dir
    from vla_ros.robot_profile import profile_for_model

    folder = resolve_model_dir(model)
    profile = profile_for_model(folder, robot)
    return ["policy:=vla", f"model:={model}", f"robot_profile:={profile.source}", *sim_launch_args(folder)]


class LiveGraph:
    """The launch file in its own process group (stopped with SIGINT, as Ctrl-C stops ``ros2 launch``)."""

    def __init__(self, launch_args: list[str], log_path: Path | None) -> None:
        from vla_ros.launch_runner import find_launch_file

        self.cmd = [
            sys.executable,
            "-m",
            "vla_ros.launch_runner",
            str(find_launch_file("vla_ros", "sim.launch.xml")),
            *launch_args,
        ]
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> LiveGraph:
        log = open(self.log_path, "w") if self.log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text()[-chars:] if self.log_path and self.log_path.is_file() else ""

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


class Driver:
    """An rclpy node on simulated time that runs the episodes and gathers what the graph reports."""

    def __init__(self) -> None:
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from rcl_interfaces.srv import SetParameters
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.node import Node
        from rclpy.parameter import Parameter
        from std_msgs.msg import Header, String
        from std_srvs.srv import Trigger
        from trajectory_msgs.msg import JointTrajectory

        from vla_ros.ros.chunk_timing import CHUNK_TIMING_DEPTH, CHUNK_TIMING_TOPIC
        from vla_ros.ros.episode import EPISODE_RESET_TOPIC, episode_reset_qos
        from vla_ros.ros.instruction_status import POLICY_INSTRUCTION_STATUS_TOPIC
        from vla_ros.ros.qos import latched_qos

        self._rclpy = rclpy
        if not rclpy.ok():
            rclpy.init()
        self.node = Node("live_eval", parameter_overrides=[Parameter("use_sim_time", Parameter.Type.BOOL, True)])
        n = self.node
        self._executor = SingleThreadedExecutor()  # kept: rclpy.spin_once(node) rebuilds the wait set each call
        self._executor.add_node(n)
        latched = latched_qos()
        self.status: dict | None = None
        self.first_status: dict[int, dict] = {}  # episode -> its first status (published by the reset itself)
        self.resets: dict[int, int] = {}  # episode -> announced start stamp (ns)
        self.diag: dict[str, tuple[float, dict]] = {}  # status name -> (wall time, values)
        self.period_err_p99: list[float] = []
        self.policy_reports: list[dict] = []  # every report of the policy during the run
        self.arrivals: list[tuple[int, float]] = []  # (chunk stamp ns, latency ms) at the controller's input
        self.chunks_out = 0
        self.latency = LatencyTable()  # the nodes' stages of every chunk (``vla_ros.latency``)
        n.create_subscription(String, "/vla/episode_status", self._on_status, latched)
        self.instruction_status: dict | None = None  # the policy's newest (``ros.instruction_status``)
        n.create_subscription(String, POLICY_INSTRUCTION_STATUS_TOPIC, self._on_instruction_status, latched)
        n.create_subscription(Header, EPISODE_RESET_TOPIC, self._on_reset, episode_reset_qos())
        n.create_subscription(JointTrajectory, "/vla/safe_action_chunk", self._on_safe_chunk, 50)
        n.create_subscription(JointTrajectory, "/vla/action_chunk", self._on_chunk, 50)
        n.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, 100)
        n.create_subscription(
            String, CHUNK_TIMING_TOPIC, lambda m: self.latency.add_text(m.data), CHUNK_TIMING_DEPTH * 4
        )
        self.pub_instruction = n.create_publisher(String, "/vla/instruction", latched)
        self.reset_client = n.create_client(Trigger, "/sim/reset")
        self.param_client = n.create_client(SetParameters, "/sim/set_parameters")
        self._String, self._Trigger, self._SetParameters = String, Trigger, SetParameters

    # ---- callbacks ---------------------------------------------------------------------------------
    def now_ns(self) -> int:
        return self.node.get_clock().now().nanoseconds

    def _on_status(self, msg) -> None:
        self.status = json.loads(msg.data)
        self.first_status.setdefault(self.status["episode"], self.status)

    def _on_instruction_status(self, msg) -> None:
        self.instruction_status = read_status(msg)

    def _on_reset(self, msg) -> None:
        from vla_ros.ros.episode import reset_from_msg

        stamp, episode = reset_from_msg(msg)
        if episode is not None:
            self.resets[episode] = stamp

    def _on_safe_chunk(self, msg) -> None:
        from vla_ros.ros.time import ns_from_time_msg

        stamp = ns_from_time_msg(msg.header.stamp)
        self.arrivals.append((stamp, (self.now_ns() - stamp) * 1e-6))

    def _on_chunk(self, msg) -> None:
        self.chunks_out += 1

    def _on_diagnostics(self, msg) -> None:
        wall = time.monotonic()
        for st in msg.status:
            values = {kv.key: kv.value for kv in st.values}
            self.diag[st.name] = (wall, values)
            if st.name.startswith("controller:") and st.name.endswith(": loop") and "period_err_ms.p99" in values:
                self.period_err_p99.append(float(values["period_err_ms.p99"]))
            if st.name == "policy: policy":
                self.policy_reports.append(values)

    # ---- helpers -----------------------------------------------------------------------------------
    def spin_until(self, predicate, wall_timeout_s: float) -> bool:
        end = time.monotonic() + wall_timeout_s
        while time.monotonic() < end:
            self._executor.spin_once(timeout_sec=0.02)
            if predicate():
                return True
        return False

    def wait_until_up(self, graph: LiveGraph, startup_timeout_s: float, also=lambda: True) -> None:
        """Spin until the graph is up: simulated time moves, the sim reports its episode, the policy has its
        model, the filter and the controller report (and ``also()`` holds); RuntimeError with the tail of the
        graph's log when that takes longer than ``startup_timeout_s`` wall seconds."""
        ready = self.spin_until(
            lambda: (
                self.now_ns() > 0
                and self.status is not None
                and (self.values("policy", "policy") or {}).get("status") not in (None, "starting", "no_model")
                and self.values("safety_filter", "filter") is not None
                and self.values("controller", "loop") is not None
                and also()
            ),
            startup_timeout_s,
        )
        if not ready:
            raise RuntimeError(f"the graph did not come up within {startup_timeout_s:.0f} s:\n{graph.log_tail()}")

    def values(self, prefix: str, concern: str) -> dict | None:
        """The newest values of the status ``<prefix>: <concern>`` (None before the first report)."""
        entry = self.diag.get(f"{prefix}: {concern}")
        return None if entry is None else entry[1]

    def fresh_snapshot(self, names: list[str], wall_timeout_s: float = 10.0) -> dict[str, dict]:
        """Values of each status in ``names`` from a report received after now (counters at this moment)."""
        t0 = time.monotonic()
        self.spin_until(lambda: all(self.diag.get(n, (0.0,))[0] > t0 for n in names), wall_timeout_s)
        return {n: dict(self.diag[n][1]) for n in names if n in self.diag}

    def call(self, client, request, wall_timeout_s: float = 30.0):
        if not client.wait_for_service(timeout_sec=wall_timeout_s):
            raise RuntimeError(f"service {client.srv_name} is not available")
        future = client.call_async(request)
        if not self.spin_until(future.done, wall_timeout_s):
            raise RuntimeError(f"service {client.srv_name} did not answer within {wall_timeout_s} s")
        return future.result()

    def set_seed(self, seed: int) -> None:
        from rcl_interfaces.msg import Parameter as ParameterMsg
        from rcl_interfaces.msg import ParameterType, ParameterValue

        value = ParameterValue(type=ParameterType.PARAMETER_INTEGER, integer_value=int(seed))
        result = self.call(
            self.param_client, self._SetParameters.Request(parameters=[ParameterMsg(name="seed", value=value)])
        ).results[0]
        if not result.successful:
            raise RuntimeError(f"the sim refused seed={seed}: {result.reason}")

    def start_episode(self, seed: int, instruction: str) -> int:
        """The sim's seed, the instruction, ``/sim/reset``; returns the new episode's number once the sim
        reports it on ``/vla/episode_status``."""
        self.set_seed(seed)
        self.pub_instruction.publish(self._String(data=instruction))
        before = self.status["episode"] if self.status else 0
        reply = self.call(self.reset_client, self._Trigger.Request())
        if not reply.success:
            raise RuntimeError(f"/sim/reset failed: {reply.message}")
        if not self.spin_until(lambda: self.status is not None and self.status["episode"] > before, 30.0):
            raise RuntimeError("the sim did not report the new episode on /vla/episode_status")
        return self.status["episode"]

    def close(self) -> None:
        self._executor.shutdown()
        self.node.destroy_node()
        self._rclpy.try_shutdown()


def _count(values: dict | None, key: str) -> float:
    try:
        return float((values or {}).get(key, 0))
    except ValueError:
        return 0.0


def _drop_pct(before: dict | None, after: dict | None, source: str) -> tuple[float | None, dict]:
    """Share of ``source``'s messages the policy did not use between two diagnostics snapshots."""
    delta = {
        k: int(_count(after, f"{source}.{k}") - _count(before, f"{source}.{k}"))
        for k in ("received", "lost", "dropped", "rejected", "unused")
    }
    sent = delta["received"] + delta["lost"]
    return (round(100.0 * delta["dropped"] / sent, 3) if sent else None), delta


def run_episodes(
    driver: Driver,
    jobs,
    max_episode_s: float,
    wall_per_episode_s: float,
    progress: bool,
    refused_episode_s: float = 3.0,
) -> list[dict]:
    """Each job (seed, instruction, colour) as one episode of the launched graph; per-episode results. An
    episode whose instruction the policy refuses (``~/instruction_status``) ends ``refused_episode_s`` in."""
    from vla_ros.tokens.convert import TokenError, instruction_text

    results = []
    for ep_seed, instruction, color in jobs:
        episode = driver.start_episode(ep_seed, instruction)
        first = driver.first_status[episode]  # published by the reset itself: the arm at home
        # The announced start when the sim publishes /vla/episode_reset, else the time of that first status.
        driver.spin_until(lambda: episode in driver.resets, 0.5)
        start_ns = driver.resets.get(episode, round(first["time_s"] * 1e9))
        d0 = float(np.linalg.norm(np.subtract(first["tcp"], first["cups"][color])))
        min_d, lifted, success_t, moved = d0, None, None, 0.0
        n_arrivals = len(driver.arrivals)
        try:
            text = instruction_text(instruction)  # as the policy normalises it in its status
        except TokenError:
            text = instruction  # refused by the stream: its status keeps the text as sent

        def decision() -> dict | None:
            """The policy's outcome for this episode's instruction, once it has published one."""
            st = driver.instruction_status
            return st if st is not None and st.get("text") in (text, instruction) else None

        def done() -> bool:
            nonlocal min_d, lifted, success_t, moved
            s = driver.status
            if s["episode"] != episode:
                raise RuntimeError(f"episode {episode} was replaced by {s['episode']} (another client reset the sim?)")
            min_d = min(min_d, float(np.linalg.norm(np.subtract(s["tcp"], s["cups"][color]))))
            moved = max(moved, float(np.linalg.norm(np.subtract(s["tcp"], first["tcp"]))))
            lifted = s["lifted"]
            if lifted == color and success_t is None:
                success_t = s["time_s"] - start_ns * 1e-9
            elapsed = s["time_s"] - start_ns * 1e-9
            refused = (decision() or {}).get("status") == "refused"
            return lifted is not None or elapsed >= max_episode_s or (refused and elapsed >= refused_episode_s)

        if not driver.spin_until(done, wall_per_episode_s):
            raise RuntimeError(
                f"episode {episode} did not finish within {wall_per_episode_s:.0f} s wall "
                f"(simulated time at {driver.status['time_s']:.2f} s)"
            )
        arrivals = [(stamp, ms) for stamp, ms in driver.arrivals[n_arrivals:] if stamp >= start_ns]
        latencies = [ms for _, ms in arrivals]
        results.append(
            {
                "seed": ep_seed,
                "color": color,
                "instruction": instruction,
                "success": lifted == color,
                "time_to_success_s": None if success_t is None else round(success_t, 3),
                "lifted": lifted,
                "chunks": len(latencies),
                "min_target_distance_m": min_d,
                "initial_target_distance_m": d0,
                "latency_ms_p50": round(float(np.percentile(latencies, 50)), 2) if latencies else None,
                "refused": (decision() or {}).get("status") == "refused",
                "instruction_status": decision() or {},
                "max_tcp_displacement_m": round(moved, 4),
                "episode": episode,
                "chunk_arrivals": [
                    [stamp, ms] for stamp, ms in arrivals
                ],  # (stamp ns, latency ms): kept in results.json
            }
        )
        if progress:
            r = results[-1]
            print(
                f"episode {len(results)}/{len(jobs)} seed {ep_seed} {color}: {'success' if r['success'] else 'failure'}"
                f" (lifted {r['lifted']}), {r['chunks']} chunks",
                flush=True,
            )
    return results


def evaluate_live(
    model: str,
    episodes: int,
    seed: int,
    templates,
    backend: str = "onnx",
    max_episode_s: float = 15.0,
    real_time_factor: float = 1.0,
    out: Path | None = None,
    progress: bool = True,
    startup_timeout_s: float = 240.0,
    extra_launch_args: tuple[str, ...] = (),
    robot: str | None = None,
    load: int = 0,
) -> dict:
    """Run ``episodes`` through the launched graph; the summary dict (see the module docstring). ``robot``: as
    for ``vla_launch_args``; ``load``: CPU hogs running beside the graph for the whole run (``CpuHogs``)."""
    from vla_ros.bench.load import CpuHogs
    from vla_ros.robot_profile import profile_for_model
    from vla_ros.sim.tasks import eval_episodes

    profile = profile_for_model(model, robot)

    every = getattr(templates, "refuse", False)  # instructions to refuse: each of them in turn
    jobs = [(s, text, color) for s, color, text in eval_episodes(episodes, seed, templates, every_template=every)]
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    load_start = os.getloadavg()
    t0 = time.time()
    args = [
        *vla_launch_args(model, str(profile.source)),
        f"backend:={backend}",
        f"real_time_factor:={real_time_factor}",
        f"seed:={jobs[0][0] if jobs else 0}",
        *extra_launch_args,
    ]
    with CpuHogs(load), LiveGraph(args, out / "graph.log" if out is not None else None) as graph:
        driver = Driver()
        try:
            driver.wait_until_up(graph, startup_timeout_s)
            names = ["policy: policy", "safety_filter: filter"]
            before = driver.fresh_snapshot(names)
            driver.period_err_p99.clear()
            driver.policy_reports.clear()
            driver.arrivals.clear()
            driver.latency = LatencyTable()
            wall_per_episode_s = max_episode_s / max(real_time_factor, 0.05) * 4 + 60.0
            results = run_episodes(driver, jobs, max_episode_s, wall_per_episode_s, progress)
            after = driver.fresh_snapshot(names + ["sim: simulation"])
            period_err = list(driver.period_err_p99)
            policy_reports = list(driver.policy_reports)
            latency = {**driver.latency.summary(), "records": driver.latency.raw()}
        finally:
            driver.close()
    return summarize(
        results,
        before,
        after,
        period_err,
        policy_reports,
        model=model,
        backend=backend,
        seeds=[jobs[0][0], jobs[-1][0]],
        real_time_factor=real_time_factor,
        wall_s=time.time() - t0,
        load=(load_start, os.getloadavg()),
        out=out,
        robot=profile,
        refuse=getattr(templates, "refuse", False),
        latency=latency,
        load_hogs=load,
    )


def summarize(
    results: list[dict],
    before: dict,
    after: dict,
    period_err: list[float],
    policy_reports: list[dict],
    model: str,
    backend: str,
    seeds,
    real_time_factor: float,
    wall_s: float,
    load,
    out: Path | None,
    robot=None,
    refuse: bool = False,
    latency: dict | None = None,
    load_hogs: int = 0,
) -> dict:
    """The run's figures; ``refuse``: the instructions were all to be refused (``tables.refusal_summary``'s
    keys instead of the success figures); ``latency``: ``LatencyTable.summary()`` of the run's chunks (its
    p50 and p99 per segment in ``latency_stages_ms``, all of it in results.json, the budget's picture in
    ``out``/latency_budget.png)."""
    policy_a, policy_b = before.get("policy: policy"), after.get("policy: policy")
    filter_a, filter_b = before.get("safety_filter: filter"), after.get("safety_filter: filter")
    verdicts = {v: int(_count(filter_b, f"chunks.{v}") - _count(filter_a, f"chunks.{v}")) for v in VERDICTS}
    total = sum(verdicts.values())
    joint_pct, joint_counts = _drop_pct(policy_a, policy_b, "joint_states")
    image_pct, image_counts = _drop_pct(policy_a, policy_b, "image")
    latencies = [ms for r in results for _, ms in r["chunk_arrivals"]]
    breakdown = success_breakdown(results)
    times = [r["time_to_success_s"] for r in results if r["success"]]
    sim_values = after.get("sim: simulation") or {}
    summary = {
        "success_rate": round(float(np.mean([r["success"] for r in results])), 3) if results else None,
        "success_by_color": breakdown["success_by_color"],
        "mean_time_to_success_s": round(float(np.mean(times)), 3) if times else None,
        "safety_interventions": total - verdicts["pass"],
        "safety_verdicts": verdicts,
        **verdict_shares(verdicts),
        "success_by_phrasing": breakdown["success_by_phrasing"],
        "wrong_cup": sum(1 for r in results if r["lifted"] not in (None, r["color"])),
        "mean_distance_reduction": round(
            float(np.mean([1 - r["min_target_distance_m"] / r["initial_target_distance_m"] for r in results])), 3
        )
        if results
        else None,
        "episodes": len(results),
        "seeds": list(seeds),
        "model": str(model),
        **robot_fields(robot),
        "backend": backend,
        "mode": "live",
        "latency_ms_p50": round(float(np.percentile(latencies, 50)), 2) if latencies else None,
        "latency_ms_p99": round(float(np.percentile(latencies, 99)), 2) if latencies else None,
        "latency_chunks": len(latencies),
        "joint_msgs_dropped_pct": joint_pct,
        "image_msgs_dropped_pct": image_pct,
        "joint_msgs": joint_counts,
        "image_msgs": image_counts,
        "controller_period_err_ms_p99": round(max(period_err), 3) if period_err else None,
        "policy_inference_ms_p50": _weighted_median(policy_reports, "inference_ms"),
        "policy_inference_cpu_ms_p50": _weighted_median(policy_reports, "inference_cpu_ms"),
        "policy_observation_age_ms_p50": _weighted_median(policy_reports, "observation_age_ms"),
        "policy_in_node_wall_ms_p50": _weighted_median(policy_reports, "in_node_wall_ms"),
        "policy_chunks": int(_count(policy_b, "chunks") - _count(policy_a, "chunks")),
        "policy_ticks": int(_count(policy_b, "ticks") - _count(policy_a, "ticks")),
        "policy_skipped": {
            k.split(".", 1)[1]: int(_count(policy_b, k) - _count(policy_a, k))
            for k in sorted(policy_b or {})
            if k.startswith("skipped.") and _count(policy_b, k) > _count(policy_a, k)
        },
        "real_time_factor": real_time_factor,
        "real_time_factor_achieved": _float(sim_values, "real_time_factor.achieved"),
        "latency_stages_ms": {
            name: [v["p50"], v["p99"]] for name, v in (latency or {}).get("segments_ms", {}).items() if v
        },
        "latency_stage_chunks": (latency or {}).get("complete", 0),
        "load_hogs": load_hogs,
        "load_avg_1min": [round(load[0][0], 2), round(load[1][0], 2)],
        "cpus": os.cpu_count(),
        "wall_s": round(wall_s, 1),
    }
    if refuse:
        for key in ("success_rate", "success_by_color", "mean_time_to_success_s", "success_by_phrasing", "wrong_cup"):
            summary.pop(key)
        summary = {**refusal_summary(results), "instructions_list": "refuse", **summary}
    else:
        summary["false_refusal_pct"] = false_refusal_pct(results)
    if out is not None:
        (out / "results.json").write_text(
            json.dumps(
                {
                    "summary": summary,
                    "episodes": results,
                    "policy_reports": policy_reports,
                    "diagnostics": {"before": before, "after": after},
                    "latency": latency,
                },
                indent=1,
                default=str,
            )
        )
        if latency and latency.get("complete"):
            plot_budget({"live": latency}, out / "latency_budget.png", f"{model}: the stages of a chunk, live")
    return summary


def _weighted_median(reports: list[dict], name: str) -> float | None:
    """The median over the run of a figure the policy reports per period (``<name>.p50`` over ``<name>.n``
    ticks): the periods' medians, each counted as often as it had ticks."""
    values = [
        (float(r[f"{name}.p50"]), int(r[f"{name}.n"])) for r in reports if f"{name}.p50" in r and f"{name}.n" in r
    ]
    if not values:
        return None
    return round(float(np.median(np.repeat([v for v, _ in values], [n for _, n in values]))), 3)


def _float(values: dict | None, key: str) -> float | None:
    try:
        return round(float(values[key]), 3) if values and key in values else None
    except ValueError:
        return None

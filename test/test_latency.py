"""The latency budget's arithmetic (``vla_ros.latency``): records, their reading, the join of one chunk's
records into segments, the run's table and its picture."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vla_ros.latency import (
    MAX_RECORD_BYTES,
    SEGMENT_NAMES,
    STAGE_NAMES,
    STAGE_NODE,
    WHOLE,
    ChunkTiming,
    LatencyTable,
    SplitStages,
    StageTime,
    TimingError,
    parse_timing,
    plot_budget,
    segments,
    timing_from_dict,
)

pytestmark = pytest.mark.unit  # no ROS node, no DDS, no wall-clock timing: `make test` runs it beside others

MS = 1_000_000
STAMP = 5_000 * MS


def chain(boot_ids=("host", "host", "host"), gaps_ms=(7, 3, 20, 1, 0.5, 2, 1.5, 3, 6), clock_offset_ns=0, stamp=STAMP):
    """One chunk's three records with known gaps between successive stages (ms): policy, filter, controller on
    the hosts ``boot_ids``; each record's ROS clock where a node's part begins and ends (``clock_offset_ns``
    apart from the monotonic clocks, which start at 1e12 ns; none inside the policy's tick)."""
    t_mono = [10**12]
    for g in gaps_ms[1:]:
        t_mono.append(t_mono[-1] + round(g * MS))
    first_clock = stamp + round(gaps_ms[0] * MS)
    clocks = [first_clock + (m - t_mono[0]) for m in t_mono]
    records = {}
    for i, stage in enumerate(STAGE_NAMES):
        node = STAGE_NODE[stage]
        boot = boot_ids[("policy", "safety_filter", "controller").index(node)]
        rec = records.setdefault(node, ChunkTiming(node, stamp, boot))
        # the stages inside the policy's tick have no ROS clock of their own (as the node records them)
        clock = None if stage in ("inferred", "shaped") else clocks[i]
        rec.stages[stage] = StageTime(t_mono[i] + clock_offset_ns, clock)
    return list(records.values())


def test_a_chunk_through_every_stage_on_one_host():
    gaps = (7, 3, 20, 1, 0.5, 2, 1.5, 3, 6)
    out = segments(chain(gaps_ms=gaps))
    assert list(out) == [*SEGMENT_NAMES, WHOLE]
    assert [round(out[s], 6) for s in SEGMENT_NAMES] == list(gaps)
    assert out[WHOLE] == pytest.approx(sum(gaps))


def test_between_hosts_the_ros_clock_counts_and_needs_both_ends():
    """The controller on another host, its monotonic clock 1 h off: the hop to it is read on the ROS clock
    (where both ends have one), every other segment on the monotonic clock as before."""
    gaps = (7, 3, 20, 1, 0.5, 2, 1.5, 3, 6)
    recs = chain(boot_ids=("a", "a", "b"), gaps_ms=gaps)
    recs[2].stages = {k: StageTime(v.mono_ns + 3600 * 10**9, v.clock_ns) for k, v in recs[2].stages.items()}
    out = segments(recs)
    assert out["to_controller"] == pytest.approx(3)
    assert out[WHOLE] == pytest.approx(sum(gaps))
    # without a ROS clock at the filter's end, that hop cannot be read: no segment, no whole
    recs[1].stages["filter_out"] = StageTime(recs[1].stages["filter_out"].mono_ns, None)
    out = segments(recs)
    assert "to_controller" not in out and WHOLE not in out
    assert out["filter"] == pytest.approx(1.5)  # one host: the monotonic clock still serves


def test_a_chunk_the_filter_refused_has_the_segments_up_to_the_filter():
    recs = chain()
    del recs[1].stages["filter_out"]
    out = segments(recs[:2])
    assert set(out) == set(SEGMENT_NAMES[:6])
    assert WHOLE not in out


def test_records_of_two_chunks_are_not_joined():
    a, b = chain()[0], ChunkTiming("safety_filter", STAMP + 1, "host", {"filter_in": StageTime(1, 1)})
    with pytest.raises(ValueError, match="two chunks"):
        segments([a, b])


@given(
    gaps=st.lists(st.floats(0.0, 500.0), min_size=9, max_size=9),
    hosts=st.sampled_from([("h", "h", "h"), ("h", "g", "h"), ("h", "h", "g"), ("", "", "")]),
)
@settings(max_examples=200, deadline=None)
def test_the_whole_is_the_stamp_to_the_first_command_on_any_hosts(gaps, hosts):
    """Whatever the hosts, the whole equals the ROS-clock age of the first command (the clocks agree here), and
    each segment is its gap."""
    recs = chain(boot_ids=hosts, gaps_ms=gaps)
    out = segments(recs)
    # an empty boot id never counts as one host: every hop between nodes is then on the ROS clock, and only the
    # stages inside a node without a clock of their own (inferred, shaped) lose their segments
    if hosts == ("", "", ""):
        assert WHOLE not in out and "to_filter" in out and "inference" not in out
        return
    assert [round(out[s], 3) for s in SEGMENT_NAMES] == [round(g, 3) for g in gaps]
    first_command = recs[2].stages["first_command"].clock_ns
    assert out[WHOLE] == pytest.approx((first_command - STAMP) * 1e-6, abs=1e-5)


def test_parse_reads_what_to_json_wrote_and_refuses_the_rest():
    rec = chain()[1]
    assert parse_timing(rec.to_json()) == rec
    assert timing_from_dict(rec.as_dict()) == rec  # the object the watcher keeps, read the same way
    good = json.loads(rec.to_json())
    bad = [
        "not json",
        json.dumps([1, 2]),
        json.dumps({**good, "stamp_ns": "5"}),
        json.dumps({**good, "stamp_ns": True}),
        json.dumps({**good, "stages": {"inferred": [1, None]}}),  # a policy stage from the filter
        json.dumps({**good, "stages": {"warp": [1, 2]}}),
        json.dumps({**good, "stages": {"filter_in": [1.5, 2]}}),
        json.dumps({**good, "stages": {"filter_in": [1, "2"]}}),
        json.dumps({**good, "stages": {"filter_in": [1]}}),
        json.dumps({k: v for k, v in good.items() if k != "boot_id"}),
        json.dumps({**good, "boot_id": "x" * MAX_RECORD_BYTES}),
    ]
    for text in bad:
        with pytest.raises(TimingError):
            parse_timing(text)
    for raw in ([1, 2], None, {**good, "stages": {"warp": [1, 2]}}):
        with pytest.raises(TimingError):
            timing_from_dict(raw)


def test_the_table_joins_per_stamp_counts_the_unreadable_and_summarises():
    table = LatencyTable()
    for k in range(20):
        gaps = (7 + k, 3, 20, 1, 0.5, 2, 1.5, 3, 6)
        for rec in chain(gaps_ms=gaps, stamp=STAMP + k * 100 * MS):
            table.add_text(rec.to_json())
    table.add_text('{"node": "policy"}')
    table.add_text("garbage")
    s = table.summary()
    assert s["chunks"] == 20 and s["complete"] == 20 and s["unreadable"] == 2
    first = [7 + k for k in range(20)]
    assert s["segments_ms"]["sensor_to_policy"]["p50"] == pytest.approx(float(np.percentile(first, 50)), abs=0.01)
    assert s["segments_ms"]["sensor_to_policy"]["max"] == 26
    assert s["segments_ms"]["inference"] == {"p50": 20.0, "p99": 20.0, "mean": 20.0, "max": 20.0, "n": 20}
    whole = [w + 37.0 for w in first]  # the later gaps add 37 ms
    assert s["segments_ms"][WHOLE]["p99"] == pytest.approx(float(np.percentile(whole, 99)), abs=0.01)
    assert LatencyTable().summary()["segments_ms"][WHOLE] is None  # nothing measured: no figure


def test_the_picture_is_written(tmp_path):
    table = LatencyTable()
    for rec in chain():
        table.add(rec)
    path = plot_budget({"quiet": table.summary(), "load 2": table.summary()}, tmp_path / "b.png", "t")
    assert path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_split_stages_pair_what_two_threads_timed():
    """The controller's two stages: taken in a callback, first command in the cycle (which may come first when
    the cycle runs in its own thread: begin is called before the plan can have the chunk)."""
    st = SplitStages("accepted", "first_command", keep=4)
    t = {k: StageTime(k * MS, k * MS + 7) for k in range(10)}
    st.begin(1, t[1])
    st.begin(2, t[2])  # superseded by 3 within one period: never a first command
    st.begin(3, t[3])
    st.begin(4, t[4])
    st.discard(4)  # refused after all
    assert st.flush() == []  # nothing ended yet: nothing to say
    st.end(1, t[5])
    st.end(3, t[6])
    assert st.flush() == [
        (1, {"accepted": t[1], "first_command": t[5]}),
        (2, {"accepted": t[2]}),
        (3, {"accepted": t[3], "first_command": t[6]}),
    ]
    st.end(9, t[9])  # ended without a begin (a begin the bound dropped): the end alone
    assert st.flush() == [(9, {"first_command": t[9]})]
    for k in range(10, 20):  # never ended, never flushed: only the newest `keep` are held
        st.begin(k, t[k % 10])
    st.end(20, t[0])
    assert [stamp for stamp, _ in st.flush()] == [16, 17, 18, 19, 20]


def test_cpu_hogs_run_while_the_block_runs_and_are_gone_after():
    import os

    from vla_ros.bench.load import CpuHogs

    with CpuHogs(2) as hogs:
        pids = [p.pid for p in hogs.procs]
        assert len(pids) == 2 and all(p.poll() is None for p in hogs.procs)
        assert all(os.path.exists(f"/proc/{pid}") for pid in pids)
    assert hogs.procs == []
    assert not any(
        os.path.exists(f"/proc/{pid}/status") and "State:\tR" in open(f"/proc/{pid}/status").read() for pid in pids
    )
    with pytest.raises(ValueError):
        CpuHogs(-1)


@pytest.mark.parametrize(
    "argv",
    [
        ["eval", "--load", "2"],  # needs --live
        ["eval", "--live", "--load", "65"],
        ["bench", "latency", "--load", "two"],
        ["bench", "latency", "--load", "0,65"],
        ["bench", "latency", "--episodes", "0"],
    ],
)
def test_a_load_or_episode_count_out_of_range_is_refused_before_anything_starts(argv, capsys):
    from vla_ros.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.splitlines()[-1]  # the error line, after the usage
    assert ("--load" in err) if "--load" in argv else ("--episodes" in err), err

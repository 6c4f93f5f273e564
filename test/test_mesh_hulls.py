"""Convex hulls of dense collision meshes: exact where they have few corners, bounded in size where they have many,
holding every vertex either way, cached on disk by the mesh file's hash.

A raw CAD mesh of 150k+ vertices used to take ~22 GB (pairwise matrices in the hull code). Here a generated
sphere of 200,936 vertices (every vertex a corner of its hull, the worst case) and a finely tessellated box go
through the loader the filter uses; load time and peak RSS (`vla-ros bench mesh`) are in docs/benchmarks.md.
"""

from __future__ import annotations

import logging

import coal
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vla_ros.bench.mesh_bench import cube_sphere, write_binary_stl
from vla_ros.safety.robot import (
    HULL_DIRECTIONS,
    HULL_STATS,
    RobotModelError,
    _qhull,
    convex_hull,
    load_robot,
    verify_hull,
)

pytestmark = pytest.mark.unit  # no ROS node, no DDS, no wall-clock timing: `make test` runs it beside others

URDF = """<robot name="{name}">
  <link name="base"/>
  <joint name="j1" type="revolute"><parent link="base"/><child link="ball"/><origin xyz="0 0 0.5"/>
    <axis xyz="0 1 0"/><limit lower="-1.5" upper="1.5" velocity="1.0" effort="1"/></joint>
  <link name="ball"><collision><geometry><mesh filename="{path}"{scale}/></geometry></collision></link>
</robot>"""


def hull_of(robot) -> tuple[np.ndarray, np.ndarray]:
    """(points, triangles) of the robot's only collision geometry, read back from Coal."""
    (geom,) = robot.geom_model.geometryObjects
    assert isinstance(geom.geometry, coal.Convex)
    points = np.asarray(geom.geometry.points())
    tris = np.array(
        [[tri[i] for i in range(3)] for tri in map(geom.geometry.polygons, range(geom.geometry.num_polygons))]
    )
    return points, tris


def outside_m(points: np.ndarray, tris: np.ndarray, query: np.ndarray) -> np.ndarray:
    """(len(query),) largest signed distance of each query point outside the face planes (<= 0: inside)."""
    corners = points[tris]
    normals = np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])
    normals /= np.linalg.norm(normals, axis=1, keepdims=True)
    offsets = np.einsum("fk,fk->f", normals, corners[:, 0])
    return np.concatenate([(q @ normals.T - offsets).max(axis=1) for q in np.array_split(query, 1 + len(query) // 256)])


@pytest.fixture(scope="module")
def dense_sphere(tmp_path_factory):
    vertices, triangles = cube_sphere(184)  # 200,936 vertices, 401,868 triangles, 20 MB of STL
    path = tmp_path_factory.mktemp("dense") / "sphere.stl"
    write_binary_stl(path, vertices, triangles)
    return path, vertices.astype(np.float32).astype(np.float64)  # as stored


@pytest.fixture
def hull_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VLA_ROS_HULL_CACHE", str(tmp_path / "hulls"))
    return tmp_path / "hulls"


def test_a_dense_curved_mesh_loads_as_a_bounded_polytope_holding_it_and_the_second_load_reads_the_cache(
    dense_sphere, hull_cache, caplog
):
    path, vertices = dense_sphere
    lines = []
    before = HULL_STATS.copy()
    with caplog.at_level(logging.INFO, logger="vla_ros.safety.robot"):
        robot = load_robot(URDF.format(name="dense_a", path=path, scale=""), progress=lines.append)
    assert HULL_STATS["computed"] - before["computed"] == 1 and HULL_STATS["cached"] == before["cached"]
    assert any(str(path) in line and f"{len(vertices)} vertices" in line for line in lines), lines
    assert any(str(path) in r.getMessage() and "20.1 MB" in r.getMessage() for r in caplog.records)
    (report,) = robot.mesh_reports
    assert (report.vertices, report.cached) == (len(vertices), False)
    points, tris = hull_of(robot)
    # every sphere vertex is a corner of the exact hull: it is replaced by a polytope of bounded size, which
    # holds every vertex and reaches at most `padding` beyond the sphere (under 1 % of its 5 cm radius here)
    assert len(points) == report.hull_vertices <= 2 * HULL_DIRECTIONS
    assert 0.0 < report.padding <= 0.01 * 0.05
    assert any(f"padded by {report.padding:.3g}" in line for line in lines), lines
    radius = np.linalg.norm(vertices, axis=1).max()
    assert np.linalg.norm(points, axis=1).max() <= radius + report.padding + 1e-9
    # brute force: every input vertex inside 1,000 of the face planes, 3,000 vertices inside all of them
    rng = np.random.default_rng(46)
    assert outside_m(points, tris[rng.choice(len(tris), 1000, replace=False)], vertices).max() <= 1e-12
    assert outside_m(points, tris, vertices[rng.choice(len(vertices), 3000, replace=False)]).max() <= 1e-12
    assert len(list(hull_cache.glob("*.stl"))) == 2  # the hull and its placeholder

    again = load_robot(URDF.format(name="dense_b", path=path, scale=""))  # another description, the same mesh
    assert again is not robot
    assert HULL_STATS["cached"] - before["cached"] == 1 and HULL_STATS["computed"] - before["computed"] == 1
    np.testing.assert_array_equal(hull_of(again)[0], points)
    cached = again.mesh_reports[0]
    assert cached.cached and (cached.vertices, cached.hull_vertices, cached.padding) == (
        report.vertices,
        report.hull_vertices,
        report.padding,
    )


def test_a_dense_mesh_with_flat_faces_gets_its_exact_hull(tmp_path, hull_cache):
    vertices, triangles = cube_sphere(120, round_=False)  # 85,448 vertices on a cube's faces, 8 hull corners
    path = tmp_path / "box.stl"
    write_binary_stl(path, vertices, triangles)
    robot = load_robot(URDF.format(name="box", path=path, scale=""))
    (report,) = robot.mesh_reports
    assert (report.vertices, report.hull_vertices, report.padding) == (len(vertices), 8, 0.0)
    points, tris = hull_of(robot)
    np.testing.assert_array_equal(np.sort(np.abs(points), axis=0), np.full((8, 3), 0.05, dtype=np.float32))
    assert outside_m(points, tris, vertices.astype(np.float32).astype(np.float64)).max() <= 1e-12


def test_a_changed_file_misses_the_cache_a_scale_does_not_and_a_bad_entry_is_recomputed(tmp_path, hull_cache, caplog):
    vertices, triangles = cube_sphere(12)
    path = tmp_path / "ball.stl"
    write_binary_stl(path, vertices, triangles)
    counts = []

    def load(name, scale=""):
        before = HULL_STATS.copy()
        robot = load_robot(URDF.format(name=name, path=path, scale=scale))
        counts.append((HULL_STATS["computed"] - before["computed"], HULL_STATS["cached"] - before["cached"]))
        return robot

    points = hull_of(load("first"))[0]
    load("same_file")
    np.testing.assert_allclose(hull_of(load("scaled", scale=' scale="2 2 2"'))[0], 2 * points)
    write_binary_stl(path, vertices, triangles, header=b"re-exported")  # same vertices, other bytes
    load("changed_file")
    assert counts == [(1, 0), (0, 1), (0, 1), (1, 0)]  # the hull is in the file's units, scaled after
    for entry in hull_cache.glob("*.stl"):
        if not entry.name.endswith(".placeholder.stl"):
            entry.write_bytes(b"not a hull")
    assert not list(hull_cache.glob(".tmp-*"))
    with caplog.at_level(logging.WARNING, logger="vla_ros.safety.robot"):
        load("corrupt_entry")
    assert counts[-1] == (1, 0)
    assert any("unusable" in r.getMessage() for r in caplog.records)
    load("rewritten_entry")
    assert counts[-1] == (0, 1)


def test_hull_check_refuses_a_hull_that_misses_a_vertex_or_is_not_closed():
    rng = np.random.default_rng(7)
    vertices = rng.normal(size=(2000, 3)) * [0.1, 0.05, 0.2]
    points, tris = convex_hull(vertices)
    assert outside_m(points, tris, vertices).max() <= 1e-12  # brute force: every vertex inside every plane
    assert len(points) < len(vertices)
    # the hull of all vertices but the highest one: that vertex is outside it
    keep = np.delete(np.arange(len(vertices)), int(np.argmax(vertices[:, 2])))
    used, tris = _qhull(vertices[keep])
    verify_hull(vertices[keep], used, tris)
    with pytest.raises(RobotModelError, match="outside the hull"):
        verify_hull(vertices, keep[used], tris)  # keep is increasing, so keep[used] is too
    with pytest.raises(RobotModelError, match="not closed"):
        verify_hull(vertices[keep], used, tris[:-1])
    with pytest.raises(RobotModelError, match="not distinct input vertices"):
        verify_hull(vertices[keep], np.append(used, len(keep)), tris)


def test_other_mesh_formats_load_through_assimp_to_the_same_hull(tmp_path, hull_cache):
    vertices, triangles = cube_sphere(8)
    vertices = vertices.astype(np.float32).astype(np.float64)  # what the STL stores
    stl, obj = tmp_path / "ball.stl", tmp_path / "ball.obj"
    write_binary_stl(stl, vertices, triangles)
    lines = [f"v {x!r} {y!r} {z!r}" for x, y, z in vertices.tolist()] + [f"f {a} {b} {c}" for a, b, c in triangles + 1]
    obj.write_text("\n".join(lines) + "\n")
    from_stl = hull_of(load_robot(URDF.format(name="stl", path=stl, scale="")))
    from_obj = hull_of(load_robot(URDF.format(name="obj", path=obj, scale="")))
    assert {tuple(p) for p in from_obj[0]} == {tuple(p) for p in from_stl[0]}
    assert len(from_obj[1]) == len(from_stl[1])


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(radius=st.floats(0.01, 0.5), turn=st.floats(0.0, 3.1), stretch=st.floats(0.3, 1.0))
def test_a_bounded_hull_holds_every_vertex_and_reads_back_from_the_cache(tmp_path_factory, radius, turn, stretch):
    """Any size, orientation and aspect: the circumscribed polytope (its corners rounded to a grid and to float32,
    its faces flat only to that grid: a run of six spheres once failed the exact-hull flatness check) passes its
    own checks, holds every vertex, and comes back from the cache the same."""
    import os

    from vla_ros.safety.robot import mesh_hull

    vertices, triangles = cube_sphere(70, radius_m=radius)  # 28,568 vertices: above the exact-hull limit
    c, s = np.cos(turn), np.sin(turn)
    vertices = vertices @ np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]]) * [1.0, stretch, 1.0]
    folder = tmp_path_factory.mktemp("bounded")
    path = folder / "ball.stl"
    write_binary_stl(path, vertices, triangles)
    os.environ["VLA_ROS_HULL_CACHE"] = str(folder / "hulls")
    try:
        _, fresh = mesh_hull(path, lambda _: None)
        _, cached = mesh_hull(path, lambda _: None)
    finally:
        del os.environ["VLA_ROS_HULL_CACHE"]
    stored = vertices.astype(np.float32).astype(np.float64)
    assert 0.0 < fresh.padding <= 0.02 * radius and len(fresh.points) <= 2 * HULL_DIRECTIONS + 8
    assert outside_m(fresh.points, fresh.triangles, stored).max() <= 1e-12
    np.testing.assert_array_equal(cached.points, fresh.points)
    assert cached.padding == fresh.padding and cached.vertices == fresh.vertices == len(stored)

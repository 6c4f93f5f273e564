"""``vla-ros bench mesh``: how long a robot with dense raw-CAD-like collision meshes takes to load, and its peak RSS.

Writes a URDF whose links each carry a generated sphere mesh (binary STL, ``--grid`` points per cube edge:
184 gives 200,936 vertices, all of them on the hull, the worst case for the hull and its check), then loads
it as the safety filter does (``load_robot_files`` and a ``SafetyFilter``) in a fresh process twice: cold,
with an empty hull cache, and warm, reading it. Each process reports its load time and peak RSS
(``ru_maxrss``, which includes the Python, NumPy, Pinocchio and Coal imports).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from vla_ros.cli import print_result

URDF_HEAD = '<robot name="dense">\n  <link name="base"/>\n'
URDF_LINK = """  <joint name="j{i}" type="revolute"><parent link="{parent}"/><child link="l{i}"/><origin xyz="0 0 0.3"/>
    <axis xyz="0 1 0"/><limit lower="-1.5" upper="1.5" velocity="1.0" effort="1"/></joint>
  <link name="l{i}"><collision><geometry><mesh filename="{path}"/></geometry></collision></link>
"""

CHILD = """
import json, resource, sys, time
t0 = time.perf_counter()
from vla_ros.safety import SafetyConfig, SafetyFilter, load_robot_files
t1 = time.perf_counter()
SafetyFilter(load_robot_files(sys.argv[1]), SafetyConfig())
t2 = time.perf_counter()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "peak_rss_mb": peak}))
"""


def cube_sphere(n: int, radius_m: float = 0.05, round_: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(vertices (6 n^2 - 12 n + 8, 3), triangles) of a cube's six n x n grids pushed onto a sphere.

    With ``round_`` False the grids stay on the cube: a dense mesh with 8 hull vertices, like a CAD part
    whose flat faces are finely tessellated (the sphere, every vertex on the hull, is the worst case).
    Every vertex has at most 6 neighbours (a UV sphere's poles have one per meridian, more than the 255
    a Coal convex allows). Grid points on the cube's edges are computed identically from both faces,
    so the STL reader merges them; the triangles are written as they come (the hull ignores winding).
    """
    u = np.linspace(-1.0, 1.0, n)
    a, b = (x.reshape(-1) for x in np.meshgrid(u, u, indexing="ij"))
    one = np.ones_like(a)
    faces = [np.stack(c, axis=-1) for s in (1.0, -1.0) for c in ((s * one, a, b), (a, s * one, b), (a, b, s * one))]
    cube = np.concatenate(faces)  # (6 n^2, 3) with the edge points repeated
    if round_:
        cube = cube / np.linalg.norm(cube, axis=1, keepdims=True)
    vertices, index = np.unique(cube, axis=0, return_inverse=True)
    grid = np.arange(n * n).reshape(n, n)
    quads = np.stack([grid[:-1, :-1], grid[1:, :-1], grid[1:, 1:], grid[:-1, 1:]], axis=-1).reshape(-1, 4)
    local = np.concatenate([quads[:, [0, 1, 2]], quads[:, [0, 2, 3]]])  # (2 (n-1)^2, 3)
    triangles = np.concatenate([index.reshape(-1)[local + k * n * n] for k in range(6)])
    return vertices * radius_m, triangles


def write_binary_stl(path: Path, vertices: np.ndarray, triangles: np.ndarray, header: bytes = b"") -> None:
    record = np.zeros(len(triangles), dtype=[("normal", "<f4", 3), ("corners", "<f4", (3, 3)), ("attr", "<u2")])
    record["corners"] = vertices[triangles]
    path.write_bytes(header.ljust(80, b"\0")[:80] + np.uint32(len(triangles)).tobytes() + record.tobytes())


def write_dense_robot(folder: Path, meshes: int, grid: int, shape: str = "sphere") -> Path:
    """A chain of ``meshes`` links, each with its own sphere STL (radii differ, so do the files' hashes)."""
    text = URDF_HEAD
    for i in range(meshes):
        vertices, triangles = cube_sphere(grid, radius_m=0.05 + 0.001 * i, round_=shape == "sphere")
        path = folder / f"sphere{i}.stl"
        write_binary_stl(path, vertices, triangles)
        text += URDF_LINK.format(i=i, parent="base" if i == 0 else f"l{i - 1}", path=path)
    urdf = folder / "dense.urdf"
    urdf.write_text(text + "</robot>\n")
    return urdf


def _load_in_child(urdf: Path, cache: Path) -> dict:
    env = dict(os.environ, VLA_ROS_HULL_CACHE=str(cache))
    out = subprocess.run([sys.executable, "-c", CHILD, str(urdf)], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="vla-ros bench mesh",
        description=__doc__.splitlines()[0],
        epilog="example: vla-ros bench mesh --meshes 2 --json",
    )
    parser.add_argument("--meshes", type=int, default=1, help="collision meshes in the URDF, one per link")
    parser.add_argument("--grid", type=int, default=184, help="points per cube edge (184: 200,936 vertices)")
    parser.add_argument("--shape", choices=("sphere", "cube"), default="sphere", help="sphere: all on the hull")
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    args = parser.parse_args(argv)
    if args.meshes < 1 or args.grid < 2:
        parser.error(f"--meshes {args.meshes} and --grid {args.grid} must be >= 1 and >= 2")
    with tempfile.TemporaryDirectory(prefix="vla_ros-mesh-bench-") as tmp:
        urdf = write_dense_robot(Path(tmp), args.meshes, args.grid, args.shape)
        cold = _load_in_child(urdf, Path(tmp) / "hulls")
        warm = _load_in_child(urdf, Path(tmp) / "hulls")
    result = {
        "meshes": args.meshes,
        "shape": args.shape,
        "vertices_per_mesh": 6 * args.grid**2 - 12 * args.grid + 8,
        "cpus": os.cpu_count(),
        "cold_load_s": round(cold["load_s"], 2),
        "cold_peak_rss_mb": round(cold["peak_rss_mb"]),
        "warm_load_s": round(warm["load_s"], 2),
        "warm_peak_rss_mb": round(warm["peak_rss_mb"]),
        "import_s": round(cold["import_s"], 2),
    }
    print_result(result, args.json, 20)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The robot as the safety filter sees it: kinematics (Pinocchio), collision geometry (Coal), pair selection.

Loaded once per robot description and shared read-only; every filter owns its own Pinocchio workspaces.

* The URDF comes as a string (the ``/robot_description`` topic) or a file. ``package://name/...`` mesh
  paths resolve through configured package paths (``name=/dir/of/package`` entries map one package,
  plain ``/dir`` entries are searched for ``/dir/name``), then through the ament index
  (``AMENT_PREFIX_PATH``); ``file://`` URIs and paths relative to the URDF file work too. Only collision
  geometry is read.
* Meshes are replaced by their convex hulls (qhull through scipy; a mesh of more than 20k vertices whose
  hull has many corners by a circumscribed polytope of bounded size, see ``bounded_hull``; time and memory
  linear in the mesh; cached on disk by the mesh file's sha256, see ``mesh_hull``).
  A hull contains the mesh, so distances to it are never larger than distances to the mesh:
  conservative, and GJK on a convex shape is exact and fast.
* Joint names come from the URDF; position and velocity limits through ``vla_ros.urdf_limits``, the reader
  the controller uses too. Mimic joints (``<mimic>``) are
  filled from their leaders, so a chunk commands only the actuated joints.
* Collision pairs: every pair of links, minus those an SRDF disables; without an SRDF, minus adjacent links
  (connected by a joint, skipping links without collision geometry) and pairs already touching in the
  reference configuration (MoveIt Setup Assistant's "Adjacent" and "Default"). Links fixed to each other
  (no movable joint between them) are never checked: their distance cannot change.
* For every pair a Lipschitz bound ``w . |dq|`` on how much its distance can shrink when the joints move
  by ``dq`` along a straight joint-space segment (see ``_joint_reach``); the collision checker uses it to
  certify whole stretches of a path without exact distance queries (conservative advancement, as in
  Schwarzer, Saha and Latombe, "Exact collision checking of robot paths", 2002).
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import logging
import os
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from pathlib import Path
from urllib.parse import unquote

import coal
import numpy as np
import pinocchio as pin

from vla_ros.urdf_limits import read_joint_limits

log = logging.getLogger(__name__)

REVOLUTE_TYPES = {"JointModelRX", "JointModelRY", "JointModelRZ", "JointModelRevoluteUnaligned"}
PRISMATIC_TYPES = {"JointModelPX", "JointModelPY", "JointModelPZ", "JointModelPrismaticUnaligned"}
# Pairs closer than this in the reference configuration count as touching ("Default" in MoveIt's terms).
CONTACT_TOLERANCE_M = 1e-4


class RobotModelError(ValueError):
    """The description cannot be used (unreadable, unsupported joint, unresolvable mesh...)."""


@dataclasses.dataclass(frozen=True)
class PairSpec:
    """A self-collision pair of geometry indices with its Lipschitz weights over the actuated joints."""

    geom_a: int
    geom_b: int
    link_a: str
    link_b: str
    weights: np.ndarray  # (n_act,) metres of distance change per unit of |dq_j|


# ---- description parsing -----------------------------------------------------------------------------


def _ament_share(package: str) -> tuple[Path | None, str]:
    """The package's share folder from the ament index (``AMENT_PREFIX_PATH``), or None and why not."""
    try:
        from ament_index_python.packages import PackageNotFoundError, get_package_share_directory
    except ImportError:
        return None, "ament_index_python is not installed"
    try:
        return Path(get_package_share_directory(package)), ""
    except PackageNotFoundError:
        return None, f"not in the ament index (AMENT_PREFIX_PATH={os.environ.get('AMENT_PREFIX_PATH', '')!r})"
    except (OSError, ValueError) as err:  # AMENT_PREFIX_PATH unset, or not a valid package name
        return None, f"ament index: {err}"


def package_roots(package: str, package_paths: Sequence[str]) -> list[Path]:
    """Where ``package_paths`` put ``package``, in their order: the folder of a ``name=/path`` entry naming it,
    ``<folder>/<package>`` for a plain folder entry (the ament index is not asked here)."""
    roots = []
    for entry in package_paths:
        name, sep, folder = entry.partition("=")
        if sep and name.strip() != package:
            continue
        roots.append(Path(folder.strip()).expanduser() if sep else Path(entry).expanduser() / package)
    return roots


def resolve_package_uri(uri: str, package_paths: Sequence[str], base_dir: Path | None) -> Path:
    """Absolute path of a mesh reference: ``package://name/rest``, ``file:///abs/path`` or a path relative to
    the URDF's folder. ``package://`` looks in ``package_paths`` first (explicit configuration wins), then in
    the ament index, as ``ros2 launch`` and RViz do on a ROS install. Errors name the form that failed and
    every place tried."""
    if uri.startswith("package://"):
        package, _, rest = uri[len("package://") :].partition("/")
        rest = unquote(rest)
        searched = []
        for root in package_roots(package, package_paths):
            candidate = root / rest
            searched.append(str(candidate))
            if candidate.is_file():
                return candidate.resolve()
        share, why_not = _ament_share(package)
        if share is not None:
            candidate = share / rest
            if candidate.is_file():
                return candidate.resolve()
            why_not = f"the ament index has {package} at {share}, without {rest}"
        raise RobotModelError(
            f"cannot resolve {uri} (a package:// mesh): package_paths={list(package_paths)} (tried {searched}); "
            f"{why_not}"
        )
    if uri.startswith("file://"):  # file:///abs/path (file://localhost/abs/path); file://rel/path is read as relative
        form, path = "file:// mesh", Path(unquote(uri[len("file://") :].removeprefix("localhost")))
    else:
        form, path = "mesh path", Path(uri).expanduser()
    if not path.is_absolute():
        if base_dir is None:
            raise RobotModelError(
                f"relative {form} {uri!r} in a URDF given as a string; use package:// or an absolute path"
            )
        path = base_dir / path
    if not path.is_file():
        raise RobotModelError(f"{form} {uri!r} not found (looked at {path})")
    return path.resolve()


def _parse_xml(text: str, what: str) -> ET.Element:
    try:
        return ET.fromstring(text)
    except ET.ParseError as err:
        raise RobotModelError(f"{what} is not valid XML: {err}") from None


def _srdf_disabled_pairs(srdf_xml: str) -> set[frozenset[str]]:
    root = _parse_xml(srdf_xml, "SRDF")
    pairs = set()
    for el in root.iter("disable_collisions"):
        a, b = el.get("link1"), el.get("link2")
        if a and b:
            pairs.add(frozenset((a, b)))
    return pairs


def convex_hull(vertices: np.ndarray, chunk_entries: int = 1 << 22) -> tuple[np.ndarray, np.ndarray]:
    """(points (V, 3), triangles (F, 3) with outward winding) of the convex hull of ``vertices``.

    The points are rows of ``vertices`` (qhull through scipy, which returns input indices). The result
    is verified by ``verify_hull``; memory stays O(vertices + faces + chunk_entries).
    """
    vertices = np.asarray(vertices, dtype=np.float64).reshape(-1, 3)
    used, triangles = _qhull(vertices)
    verify_hull(vertices, used, triangles, chunk_entries)
    return vertices[used], triangles


def _qhull(vertices: np.ndarray, options: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(used (U,) sorted input indices, triangles (F, 3) indexing ``used``, outward winding)."""
    from scipy.spatial import ConvexHull, QhullError

    try:
        hull = ConvexHull(vertices, qhull_options=options)
    except (QhullError, ValueError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise RobotModelError(
            f"convex hull of {len(vertices)} vertices failed (flat or degenerate?): {first}"
        ) from None
    used = np.unique(hull.simplices)
    triangles = np.searchsorted(used, hull.simplices)  # (F, 3) into used
    corners = vertices[used][triangles]  # (F, 3 corners, 3)
    normals = np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])
    flip = np.einsum("fk,fk->f", normals, hull.equations[:, :3]) < 0  # qhull's facet normals point outward
    triangles[flip] = triangles[flip][:, ::-1]
    return used, np.ascontiguousarray(triangles)


def verify_hull(vertices: np.ndarray, used: np.ndarray, triangles: np.ndarray, chunk_entries: int = 1 << 22) -> None:
    """Raise RobotModelError unless ``vertices[used]`` with ``triangles`` is a convex polytope holding every vertex.

    ``used`` are distinct input indices (the hull's corners are input vertices); see ``check_polytope`` and
    ``outside_distance`` for the two checks and their cost. No (V, F) matrix is ever held.
    """
    n_in = len(vertices)
    if used.ndim != 1 or used.size < 4 or used.min() < 0 or used.max() >= n_in or np.any(np.diff(used) <= 0):
        raise RobotModelError("convex hull check failed: hull vertices are not distinct input vertices")
    planes = check_polytope(vertices[used], triangles)
    rest = np.ones(n_in, dtype=bool)
    rest[used] = False
    worst = outside_distance(vertices[rest], planes, chunk_entries)
    if worst > planes.tol:
        raise RobotModelError(f"convex hull check failed: a vertex lies {worst:.3g} m outside the hull")


@dataclasses.dataclass(frozen=True)
class HullPlanes:
    """Face planes of a checked convex polytope: ``normals @ x <= offsets`` inside (unit normals)."""

    normals: np.ndarray  # (F, 3)
    offsets: np.ndarray  # (F,)
    centre: np.ndarray  # (3,) centroid of the corners, strictly inside
    inner_radius: float  # the ball of this radius about ``centre`` is inside
    tol: float  # numerical tolerance for "on or below a plane", scaled to the polytope's size


# Relative tolerance of a circumscribed polytope's checks: its corners are computed, then rounded to a grid and to
# float32, so its faces of four or more corners are flat only to about the grid (1e-6 of its size).
GRID_TOLERANCE = 1e-5


def check_polytope(points: np.ndarray, triangles: np.ndarray, relative_tol: float = 1e-9) -> HullPlanes:
    """The face planes of ``points`` with ``triangles``; RobotModelError unless they bound a convex polytope.

    A closed surface of genus 0 that is convex at every edge bounds a convex body (it cannot wrap twice
    around: the sphere is simply connected), so its own corners lie inside every face plane. Cost O(F log F).
    """
    if triangles.ndim != 2 or triangles.shape[1] != 3 or len(triangles) < 4:
        raise RobotModelError(f"convex hull check failed: triangles of shape {triangles.shape}")
    n_points = len(points)
    if triangles.min() < 0 or triangles.max() >= n_points or np.unique(triangles).size != n_points:
        raise RobotModelError("convex hull check failed: triangles do not use exactly the hull vertices")
    scale = float(np.abs(points).max()) or 1.0
    tol = relative_tol * scale
    # planes from the hull's own triangles (not qhull's equations), unit normals
    corners = points[triangles]  # (F, 3, 3)
    normals = np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])  # (F, 3)
    length = np.linalg.norm(normals, axis=1)
    degenerate = int(np.count_nonzero(length <= 1e-12 * scale * scale))
    if degenerate:  # a zero-area triangle has no plane to check against
        raise RobotModelError(f"convex hull check failed: {degenerate} zero-area triangles")
    normals /= length[:, None]
    offsets = np.einsum("fk,fk->f", normals, corners[:, 0])  # (F,)
    # closed 2-manifold with consistent winding: every directed edge once, and its reverse once
    directed = np.stack([triangles, np.roll(triangles, -1, axis=1)], axis=-1).reshape(-1, 2)  # (3F, 2)
    n = np.int64(n_points)
    key = directed[:, 0] * n + directed[:, 1]
    rev = directed[:, 1] * n + directed[:, 0]
    order = np.argsort(key)
    sorted_key = key[order]
    if np.any(sorted_key[1:] == sorted_key[:-1]):
        raise RobotModelError("convex hull check failed: an edge is used twice in the same direction")
    pos = np.searchsorted(sorted_key, rev)
    pos = np.minimum(pos, sorted_key.size - 1)
    if np.any(sorted_key[pos] != rev):
        raise RobotModelError("convex hull check failed: the surface is not closed")
    if n_points - len(directed) // 2 + len(triangles) != 2:
        raise RobotModelError("convex hull check failed: the surface is not a sphere (Euler characteristic)")
    # convex at every edge: the neighbour's third corner is on or below this face's plane
    neighbour_face = order[pos] // 3  # (3F,) face across each directed edge
    third = triangles[neighbour_face, (order[pos] % 3 + 2) % 3]  # corner of the neighbour opposite the edge
    edge_face = np.repeat(np.arange(len(triangles)), 3)
    bend = np.einsum("ek,ek->e", normals[edge_face], points[third]) - offsets[edge_face]
    if bend.max() > tol:
        raise RobotModelError(f"convex hull check failed: not convex at an edge ({bend.max():.3g} m)")
    centre = points.mean(axis=0)
    inner = offsets - normals @ centre  # (F,) distance of the centroid below each plane
    if inner.min() <= tol:
        raise RobotModelError("convex hull check failed: the hull is flat or turned inside out")
    return HullPlanes(normals, offsets, centre, float(inner.min()), tol)


def plane_violations(vertices: np.ndarray, planes: HullPlanes, chunk_entries: int = 1 << 22) -> np.ndarray:
    """(V,) how far each vertex lies above the polytope's highest face plane (<= 0: inside), ``chunk_entries``
    (vertex, face) products at a time; the vertices inside the inscribed ball are not multiplied out."""
    out = np.full(len(vertices), -np.inf)
    far = np.flatnonzero(np.linalg.norm(vertices - planes.centre, axis=1) > planes.inner_radius - planes.tol)
    rows = max(1, chunk_entries // len(planes.offsets))
    for i in range(0, len(far), rows):
        idx = far[i : i + rows]
        out[idx] = (vertices[idx] @ planes.normals.T - planes.offsets).max(axis=1)
    return out


def outside_distance(vertices: np.ndarray, planes: HullPlanes, chunk_entries: int = 1 << 22) -> float:
    """The largest face-plane violation of any vertex (<= tol: all inside); -inf for no vertices."""
    return float(plane_violations(vertices, planes, chunk_entries).max(initial=-np.inf))


# Meshes up to this many vertices get their exact hull, every vertex checked against it (well under a second).
HULL_EXACT_MAX_VERTICES = 20_000
# A larger mesh is sampled (HULL_SAMPLE vertices at a fixed stride). Where the sample's hull has at most
# HULL_MAX_CORNERS corners (a CAD part whose hull has few corners, however finely its faces are tessellated), the
# mesh gets its exact hull if that has few corners too. Otherwise (a finely tessellated curved surface, every
# vertex a corner: qhull takes seconds per 100k vertices and Coal's checks slow down with the corner count) it
# gets the polytope bounded by its tangent planes in HULL_DIRECTIONS directions, which holds every vertex by
# construction and reaches beyond the exact hull by at most the reported padding.
HULL_SAMPLE = 5_000
HULL_DIRECTIONS = 1024
HULL_MAX_CORNERS = 2048
HULL_CHECKED = 2_000  # of the sample, checked against the result of a large mesh (with the extreme vertices)


@dataclasses.dataclass(frozen=True)
class MeshHull:
    """A collision mesh's convex polytope, in the mesh file's units: ``points`` (U, 3), ``triangles`` (F, 3)
    with outward winding; ``padding`` is 0 for the exact hull, else at most how far it reaches beyond it."""

    points: np.ndarray
    triangles: np.ndarray
    vertices: int  # the mesh's distinct vertices
    padding: float = 0.0


def fibonacci_directions(n: int) -> np.ndarray:
    """(n, 3) unit vectors spread evenly over the sphere (a Fibonacci lattice)."""
    i = np.arange(n) + 0.5
    z = 1.0 - 2.0 * i / n
    r = np.sqrt(1.0 - z * z)
    phi = np.pi * (3.0 - np.sqrt(5.0)) * i
    return np.stack([r * np.cos(phi), r * np.sin(phi), z], axis=1)


def _support_indices(vertices: np.ndarray, directions: np.ndarray, rows: int = 4096) -> np.ndarray:
    """(K,) index of a vertex farthest along each direction, found in float32 (so within float32 rounding of
    the farthest; callers allow for that). Products are laid out (directions, vertices) so the search runs
    along memory: the other way round it is several times slower."""
    v32 = vertices.astype(np.float32).T.copy()  # (3, V)
    d32 = directions.astype(np.float32)
    best = np.full(len(directions), -np.inf, dtype=np.float32)
    index = np.zeros(len(directions), dtype=np.intp)
    every = np.arange(len(directions))
    for i in range(0, v32.shape[1], rows):
        block = v32[:, i : i + rows]
        dots = d32[:, 0:1] * block[0]  # (K, rows), three broadcasts: no BLAS threads for a product of depth 3
        dots += d32[:, 1:2] * block[1]
        dots += d32[:, 2:3] * block[2]
        arg = dots.argmax(axis=1)
        top = dots[every, arg]
        better = top > best
        best[better], index[better] = top[better], arg[better] + i
    return index


def _check_contains(vertices: np.ndarray, planes: HullPlanes, what: str, tol: float | None = None) -> None:
    worst = outside_distance(vertices, planes)
    if worst > (planes.tol if tol is None else tol):
        raise RobotModelError(f"{what} check failed: a vertex lies {worst:.3g} outside it")


def bounded_hull(vertices: np.ndarray) -> MeshHull:
    """The mesh's exact convex hull where it has few corners or the mesh is small, else a circumscribed polytope
    of bounded size (see HULL_SAMPLE). Work is linear in the mesh's vertices, and no (vertices x faces) product
    is formed for a large mesh: every vertex of a small mesh is checked against the result, of a large mesh
    a sample (the circumscribed polytope holds every vertex by construction)."""
    vertices = np.asarray(vertices, dtype=np.float64).reshape(-1, 3)
    if len(vertices) <= HULL_EXACT_MAX_VERTICES:
        used, triangles = _qhull(vertices)
        verify_hull(vertices, used, triangles)
        return MeshHull(vertices[used], triangles, len(vertices))
    sample = np.arange(0, len(vertices), -(-len(vertices) // HULL_SAMPLE))
    checked = sample[:: max(1, len(sample) // HULL_CHECKED)]
    used, triangles = _qhull(vertices[sample])
    if len(used) <= HULL_MAX_CORNERS:  # few corners: qhull of the whole mesh is fast
        used, triangles = _qhull(vertices)
        if len(used) <= HULL_MAX_CORNERS:
            hull = check_polytope(vertices[used], triangles)
            _check_contains(vertices[checked], hull, "convex hull")
            return MeshHull(vertices[used], triangles, len(vertices))
    units = fibonacci_directions(HULL_DIRECTIONS)
    support = np.unique(_support_indices(vertices, units))
    heights = (units @ vertices[support].T).max(axis=1)  # the mesh's extent along each direction
    known = np.union1d(sample, support)
    used, triangles = _qhull(vertices[known])
    inner = check_polytope(vertices[known[used]], triangles)  # inside the exact hull: its corners are vertices
    return _circumscribed(vertices, np.union1d(checked, support), units, heights, inner)


def _circumscribed(
    vertices: np.ndarray, checked: np.ndarray, units: np.ndarray, heights: np.ndarray, inner: HullPlanes
) -> MeshHull:
    """The polytope ``units @ x <= heights + margin`` (``heights``: the mesh's extent along each unit vector, so
    it holds the mesh), its corners snapped to a grid and rounded to float32 (the margin covers both and the
    float32 search for the extremes). ``padding`` is how far it reaches beyond ``inner``, a polytope inside the
    exact hull: at most that much larger than the exact hull anywhere."""
    from scipy.spatial import HalfspaceIntersection, QhullError

    scale = float(np.abs(vertices).max()) or 1.0
    grid = 1e-6 * scale
    # room for the snap, float32 rounding and the checks' tolerance: no vertex ends up outside by any of them
    margin = grid * np.sqrt(3.0) + 16.0 * float(np.finfo(np.float32).eps) * scale + GRID_TOLERANCE * scale
    halfspaces = np.hstack([units, -(heights + margin)[:, None]])  # A x + b <= 0
    try:
        corners = HalfspaceIntersection(halfspaces, inner.centre).intersections
    except (QhullError, ValueError) as err:
        raise RobotModelError(f"bounded hull failed: {str(err).strip().splitlines()[0]}") from None
    # planes meeting at one point give corners a rounding error apart: one corner each
    corners = np.unique((np.round(corners / grid) * grid).astype(np.float32), axis=0).astype(np.float64)
    used, triangles = _qhull(corners, "QJ")  # joggled: simplicial facets, no zero-area triangles
    hull = check_polytope(corners[used], triangles, GRID_TOLERANCE)
    _check_contains(vertices[checked], hull, "bounded hull", 1e-9 * scale)  # inside, not just within the tolerance
    padding = max(0.0, outside_distance(corners[used], inner))
    return MeshHull(corners[used], triangles, len(vertices), padding)


# Bump when the stored hull format or the hull algorithm changes: old entries are then never read.
HULL_CACHE_VERSION = 2
# Hulls computed and hulls read from the disk cache in this process (tests count cache hits with it).
HULL_STATS: collections.Counter[str] = collections.Counter()


def hull_cache_dir() -> Path:
    """$VLA_ROS_HULL_CACHE, else $XDG_CACHE_HOME/vla_ros/hulls (~/.cache/vla_ros/hulls); safe to delete."""
    from vla_ros.cache_dirs import cache_dir

    return cache_dir("hulls", "VLA_ROS_HULL_CACHE")


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


STL_RECORD = np.dtype([("normal", "<f4", 3), ("corners", "<f4", (3, 3)), ("attr", "<u2")])


def _binary_stl(data: bytes) -> tuple[np.ndarray, np.ndarray] | None:
    """(distinct vertices (V, 3), triangles (F, 3)) of a binary STL, or None when ``data`` is not one."""
    if len(data) < 84:
        return None
    count = int.from_bytes(data[80:84], "little")
    if len(data) != 84 + STL_RECORD.itemsize * count:
        return None
    corners = np.ascontiguousarray(np.frombuffer(data, dtype=STL_RECORD, count=count, offset=84)["corners"])
    corners = corners.reshape(-1, 3)  # (3F, 3) float32, each vertex repeated in every triangle it is in
    # merge equal vertices by their exact bits (np.unique(axis=0) sorts 12-byte records, ~4x slower)
    bits = corners.view(np.uint32).astype(np.uint64)  # (3F, 3)
    high, low = (bits[:, 0] << np.uint64(32)) | bits[:, 1], bits[:, 2]
    order = np.lexsort((low, high))
    high, low = high[order], low[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = (high[1:] != high[:-1]) | (low[1:] != low[:-1])
    index = np.empty(len(order), dtype=np.intp)
    index[order] = np.cumsum(first) - 1
    return corners[order[first]].astype(np.float64), index.reshape(-1, 3)


def read_mesh_vertices(path: Path) -> np.ndarray:
    """(V, 3) vertices of a mesh file in its own units: binary STL read here, other formats through Coal (assimp)."""
    data = path.read_bytes()
    stl = _binary_stl(data) if path.suffix.lower() == ".stl" else None
    if stl is not None:
        return stl[0]
    try:
        bvh = coal.MeshLoader().load(str(path), np.ones(3))
    except (RuntimeError, ValueError) as err:
        raise RobotModelError(f"cannot read mesh {path}: {str(err).strip().splitlines()[-1]}") from None
    return np.array(bvh.vertices(), dtype=np.float64).reshape(-1, 3)


def _write_stl_atomically(entry: Path, points: np.ndarray, triangles: np.ndarray, header: bytes = b"") -> None:
    record = np.zeros(len(triangles), dtype=STL_RECORD)
    record["corners"] = points[triangles]
    data = header.ljust(80, b"\0")[:80] + np.uint32(len(triangles)).tobytes() + record.tobytes()
    tmp = ""
    try:  # a reader sees the whole entry or none
        entry.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=entry.parent, prefix=".tmp-", suffix=".stl", delete=False) as f:
            tmp = f.name
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, entry)
    except OSError:
        if tmp:
            Path(tmp).unlink(missing_ok=True)
        raise


def _placeholder_mesh(hull_path: Path) -> Path:
    """A 4-triangle STL next to a hull for Pinocchio to load: ``_convexify`` replaces it by the hull itself,
    so Pinocchio never reads (nor builds a BVH of) a large mesh."""
    path = hull_path.with_name(hull_path.stem + ".placeholder.stl")
    if path.is_file():
        return path
    tetra = np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]) * 1e-3
    faces = np.array([[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]])
    try:
        _write_stl_atomically(path, tetra, faces)
    except OSError:
        path = Path(tempfile.mkdtemp(prefix="vla_ros-hull-")) / path.name
        _write_stl_atomically(path, tetra, faces)
    return path


HULL_HEADER = "vla_ros convex hull"


def _hull_header(hull: MeshHull) -> bytes:
    """The cache entry's STL header: what the hull cannot say of itself (the mesh's size, the padding)."""
    return f"{HULL_HEADER} vertices={hull.vertices} padding={hull.padding!r}".encode()


def _read_hull_entry(entry: Path) -> MeshHull:
    data = entry.read_bytes()
    stored = _binary_stl(data)
    if stored is None:
        raise ValueError("not a binary STL")
    head = data[:80].rstrip(b"\0").decode("ascii", "replace")
    fields = dict(word.partition("=")[::2] for word in head.removeprefix(HULL_HEADER).split())
    if not head.startswith(HULL_HEADER) or set(fields) != {"vertices", "padding"}:
        raise ValueError(f"unknown header {head!r}")
    vertices, padding = int(fields["vertices"]), float(fields["padding"])
    if not (np.isfinite(padding) and padding >= 0.0 and vertices >= 4):
        raise ValueError(f"header {head!r}")
    points, triangles = stored
    check_polytope(points, triangles, GRID_TOLERANCE if padding > 0.0 else 1e-9)
    return MeshHull(points, triangles, vertices, padding)


def mesh_hull(mesh_path: Path, say: Callable[[str], None] = log.info) -> tuple[Path, MeshHull]:
    """(hull STL file, MeshHull) of a mesh file's convex hull (``bounded_hull``), in the file's units.

    Cached on disk (``hull_cache_dir``) as a binary STL named by the mesh file's sha256, the padding in its
    header: the URDF's ``scale`` applies to the hull afterwards (the hull of scaled vertices is the scaled
    hull), so it is not part of the key. A fresh hull is checked against every vertex of the mesh; a cached
    one, written only after that check, is checked again for being closed and convex, and an entry that
    fails is recomputed. Points are float32-exact, so the stored hull is the checked one. Only one raw mesh
    is in memory at a time.
    """
    say(f"collision mesh {mesh_path} ({mesh_path.stat().st_size / 1e6:.1f} MB): convex hull")
    key = hashlib.sha256(f"{_file_sha256(mesh_path)}|v{HULL_CACHE_VERSION}".encode()).hexdigest()
    entry = hull_cache_dir() / f"{key}.stl"
    if entry.is_file():
        try:
            hull = _read_hull_entry(entry)
            say(f"collision mesh {mesh_path}: {_hull_words(hull)}, from the cache")
            HULL_STATS["cached"] += 1
            return entry, hull
        except (OSError, ValueError, RobotModelError) as err:
            log.warning("hull cache entry %s unusable (%s); recomputing", entry, err)
    vertices = read_mesh_vertices(mesh_path)
    say(f"collision mesh {mesh_path}: {len(vertices)} vertices, computing the convex hull")
    if len(vertices) < 4:
        raise RobotModelError(f"mesh {mesh_path} has {len(vertices)} vertices; a solid needs at least 4")
    hull = bounded_hull(vertices)
    del vertices
    HULL_STATS["computed"] += 1
    if np.any(hull.points.astype(np.float32) != hull.points):  # cannot happen for STL or assimp input
        raise RobotModelError(f"mesh {mesh_path}: hull vertices are not float32-exact")
    say(f"collision mesh {mesh_path}: {_hull_words(hull)}")
    try:
        _write_stl_atomically(entry, hull.points, hull.triangles, _hull_header(hull))
    except OSError as err:
        log.warning("cannot write hull cache entry %s (%s); using a temporary copy", entry, err)
        entry = Path(tempfile.mkdtemp(prefix="vla_ros-hull-")) / f"{key}.stl"
        _write_stl_atomically(entry, hull.points, hull.triangles, _hull_header(hull))
    # the hull as the cache gives it back (its corners in the file's order), so every load uses the same one
    return entry, _read_hull_entry(entry)


@dataclasses.dataclass(frozen=True)
class MeshReport:
    """How one collision mesh was loaded (RobotModel.mesh_reports; ``vla-ros robot check`` prints them)."""

    path: str
    vertices: int  # the mesh's distinct vertices
    hull_vertices: int
    padding: float  # mesh units; 0 = the exact hull
    seconds: float
    cached: bool


def _hull_words(hull: MeshHull) -> str:
    words = f"convex hull of {len(hull.points)} vertices"
    if hull.padding > 0.0:
        words += f" padded by {hull.padding:.3g} (mesh units) to bound its size"
    return words


def _coal_convex(points: np.ndarray, triangles: np.ndarray) -> coal.Convex:
    verts = coal.StdVec_Vec3s()
    verts.extend(list(np.asarray(points, dtype=np.float64)))
    tris = coal.StdVec_Triangle()
    tris.extend(map(coal.Triangle, *np.asarray(triangles).T.tolist()))  # ~2x a list comprehension
    try:
        return coal.Convex(verts, tris)
    except RuntimeError as err:  # e.g. a hull vertex with more than 255 edges (the apex of a fine cone)
        message = str(err).strip().splitlines()[-1]
        raise RobotModelError(f"Coal cannot use the convex hull ({len(points)} vertices): {message}") from None


# ---- the model ---------------------------------------------------------------------------------------


class RobotModel:
    """Kinematics, limits and collision geometry of one robot description. Read-only once built.

    Attributes:
        joint_names: actuated joints (movable, not mimic), in Pinocchio's depth-first order.
        lower / upper / velocity: URDF limits of those joints (rad, m, rad/s, m/s).
        prismatic: (n_act,) True for prismatic joints.
        geom_model: robot collision geometry only (meshes as convex hulls).
        geom_links: link name of each geometry.
        geom_weights: (G, n_act) Lipschitz weights of each geometry against a static object.
        moving: (G,) False for geometry fixed to the world (checked against nothing in the environment).
        self_pairs: the self-collision pairs to check.
        excluded: reason -> sorted link pairs not checked (srdf, adjacent, contact_at_reference, rigid).
        reference_q: (n_act,) the reference configuration (zeros clipped into the limits).
        digest: hash of the description, SRDF and mesh files (the cache key).
    """

    def __init__(
        self,
        urdf_xml: str,
        srdf_xml: str | None = None,
        package_paths: Sequence[str] = (),
        base_dir: Path | None = None,
        digest: str = "",
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.digest = digest
        self._progress = progress
        root = _parse_xml(urdf_xml, "URDF")
        if root.tag != "robot":
            raise RobotModelError(f"URDF root element must be <robot>, got <{root.tag}>")
        self.name = root.get("name", "")
        self._urdf_root = root
        # Only collision meshes are needed, and only as convex hulls: each mesh is resolved, read and hulled
        # here, one at a time (see mesh_hull), and Pinocchio loads a 4-triangle placeholder in its place.
        self._hulls: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.mesh_reports: list[MeshReport] = []
        for mesh in root.findall("./link/collision/geometry/mesh"):
            path = resolve_package_uri(mesh.get("filename", ""), package_paths, base_dir)
            started, cached = time.perf_counter(), HULL_STATS["cached"]
            hull_path, hull = mesh_hull(path, self._say)
            self.mesh_reports.append(
                MeshReport(
                    str(path),
                    hull.vertices,
                    len(hull.points),
                    hull.padding,
                    time.perf_counter() - started,
                    HULL_STATS["cached"] > cached,
                )
            )
            placeholder = _placeholder_mesh(hull_path)
            self._hulls[str(placeholder)] = (hull.points, hull.triangles)
            mesh.set("filename", str(placeholder))
        for link in root.findall("link"):  # visual meshes may live in packages we do not have
            for visual in link.findall("visual"):
                link.remove(visual)
        resolved_xml = ET.tostring(root, encoding="unicode")
        try:
            self.model = pin.buildModelFromXML(resolved_xml)
            self.geom_model = pin.buildGeomFromUrdfString(self.model, resolved_xml, pin.GeometryType.COLLISION)
        except (RuntimeError, ValueError) as err:
            raise RobotModelError(f"Pinocchio cannot load the URDF: {err}") from None
        self._read_joints(root)
        self._convexify()
        self.geom_links = tuple(self.model.frames[g.parentFrame].name for g in self.geom_model.geometryObjects)
        self.geom_joints = np.array([g.parentJoint for g in self.geom_model.geometryObjects], dtype=np.intp)
        self.moving = self.geom_joints > 0
        self.geom_weights = self._geometry_weights()
        self.reference_q = np.clip(np.zeros(len(self.joint_names)), self.lower, self.upper)
        self.self_pairs, self.excluded = self._select_pairs(srdf_xml)
        log.info(
            "robot %s: %d joints, %d collision geometries, %d self pairs checked, excluded %s",
            self.name,
            len(self.joint_names),
            len(self.geom_links),
            len(self.self_pairs),
            {k: len(v) for k, v in self.excluded.items()},
        )

    # -- joints --
    def _read_joints(self, root: ET.Element) -> None:
        model = self.model
        mimics = {}
        for joint in root.findall("joint"):
            m = joint.find("mimic")
            if m is not None:
                mimics[joint.get("name")] = (
                    m.get("joint"),
                    float(m.get("multiplier", 1.0)),
                    float(m.get("offset", 0.0)),
                )
        names, q_idx, prismatic = [], [], []
        mimic_rows = []
        for j in range(1, model.njoints):
            kind = model.joints[j].shortname()
            name = model.names[j]
            if model.joints[j].nq != 1 or kind not in REVOLUTE_TYPES | PRISMATIC_TYPES:
                raise RobotModelError(
                    f"joint {name} ({kind}) is not supported: the filter handles revolute and prismatic joints "
                    "with limits (continuous, planar and floating joints have no position limits to enforce)"
                )
            if name in mimics:
                mimic_rows.append((name, *mimics[name]))
                continue
            names.append(name)
            q_idx.append(model.joints[j].idx_q)
            prismatic.append(kind in PRISMATIC_TYPES)
        self.joint_names = tuple(names)
        self.q_index = np.array(q_idx, dtype=np.intp)
        self.prismatic = np.array(prismatic, dtype=bool)
        # The URDF's limits through the reader the controller uses too (not Pinocchio's copy of them), so
        # the filter and the controller can never disagree about a limit.
        urdf_limits = read_joint_limits(root)
        self.lower = np.array([urdf_limits[n].lower for n in names], dtype=np.float64)
        self.upper = np.array([urdf_limits[n].upper for n in names], dtype=np.float64)
        self.velocity = np.array([urdf_limits[n].velocity for n in names], dtype=np.float64)
        bad = [
            n
            for n, lo, hi, v in zip(names, self.lower, self.upper, self.velocity)
            if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi and np.isfinite(v) and v > 0)
        ]
        if bad:
            raise RobotModelError(
                f"joint(s) {bad} lack finite position limits (lower < upper) and a positive velocity limit"
            )
        # Mimic q[m] = multiplier * q[leader] + offset; leaders must be actuated joints.
        self._mimic_q, self._mimic_src, self._mimic_mult, self._mimic_off = [], [], [], []
        for name, leader, mult, off in mimic_rows:
            if leader not in self.joint_names:
                raise RobotModelError(f"mimic joint {name} follows {leader!r}, which is not an actuated joint")
            self._mimic_q.append(model.joints[model.getJointId(name)].idx_q)
            self._mimic_src.append(self.joint_names.index(leader))
            self._mimic_mult.append(mult)
            self._mimic_off.append(off)
        self._mimic_q = np.array(self._mimic_q, dtype=np.intp)
        self._mimic_src = np.array(self._mimic_src, dtype=np.intp)
        self._mimic_mult = np.array(self._mimic_mult)
        self._mimic_off = np.array(self._mimic_off)
        self._full_A = np.zeros((model.nq, len(names)))
        self._full_b = np.zeros(model.nq)
        self._full_A[self.q_index, np.arange(len(names))] = 1.0
        for qi, src, mult, off in zip(self._mimic_q, self._mimic_src, self._mimic_mult, self._mimic_off):
            self._full_A[qi, src] = mult
            self._full_b[qi] = off
        self._contiguous = bool(np.array_equal(self.q_index, np.arange(len(names))))
        self._mimic_list = [
            (int(qi), int(src), float(mult), float(off))
            for qi, src, mult, off in zip(self._mimic_q, self._mimic_src, self._mimic_mult, self._mimic_off)
        ]
        # Which actuated joint drives each Pinocchio joint (and with what factor): for the Lipschitz weights.
        self._driver = {}
        for a, qi in enumerate(self.q_index):
            self._driver[self._joint_of_q(qi)] = (a, 1.0)
        for qi, src, mult in zip(self._mimic_q, self._mimic_src, self._mimic_mult):
            self._driver[self._joint_of_q(qi)] = (int(src), float(mult))

    def root_joint_axes(self) -> dict[int, tuple[np.ndarray, bool]]:
        """Actuated joints whose axis is fixed in the world (children of the root): index -> (world axis,
        prismatic). Motion about such an axis leaves some distances unchanged (a pan joint never moves
        anything towards a horizontal table), which tightens the bounds against half-spaces."""
        out = {}
        for j in range(1, self.model.njoints):
            if self.model.parents[j] != 0 or j not in self._driver or self._driver[j][1] != 1.0:
                continue
            if self._driver[j][0] in set(self._mimic_src.tolist()):
                continue  # a joint elsewhere follows it; keep the plain bound
            kind = self.model.joints[j].shortname()
            if kind[-1] in "XYZ" and kind[:-1] in ("JointModelR", "JointModelP"):
                local = np.eye(3)["XYZ".index(kind[-1])]
            else:
                local = np.asarray(self.model.joints[j].extract().axis, dtype=np.float64)
            axis = self.model.jointPlacements[j].rotation @ local
            out[self._driver[j][0]] = (axis / np.linalg.norm(axis), kind in PRISMATIC_TYPES)
        return out

    def _joint_of_q(self, qi: int) -> int:
        for j in range(1, self.model.njoints):
            if self.model.joints[j].idx_q == qi:
                return j
        raise AssertionError(qi)

    @property
    def actuation_matrix(self) -> np.ndarray:
        """(nv, n_act): joint velocities of the Pinocchio model from actuated ones (mimics included; every
        supported joint has one coordinate, so nv == nq)."""
        return self._full_A

    def full_q(self, q_act: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Pinocchio configuration(s) (..., nq) from actuated positions (..., n_act), mimics filled in.

        With ``out`` (one configuration, the per-query path) it writes slices and a few scalars: numpy's
        fancy indexing costs microseconds a call, which adds up over hundreds of queries per chunk.
        """
        q_act = np.asarray(q_act, dtype=np.float64)
        if out is None:
            return q_act @ self._full_A.T + self._full_b
        if self._contiguous:
            out[: q_act.shape[0]] = q_act
        else:
            out[self.q_index] = q_act
        for qi, src, mult, off in self._mimic_list:
            out[qi] = q_act[src] * mult + off
        return out

    # -- geometry --
    def _say(self, message: str) -> None:
        log.info(message)
        if self._progress is not None:
            self._progress(message)

    def _convexify(self) -> None:
        """Replace each mesh Pinocchio loaded (a placeholder, see __init__) by a Coal convex of its hull."""
        for g in self.geom_model.geometryObjects:
            if isinstance(g.geometry, coal.BVHModelBase):
                points, triangles = self._hulls[str(g.meshPath)]
                scale = np.asarray(g.meshScale, dtype=np.float64)
                if np.any(scale == 0.0):
                    raise RobotModelError(f"mesh of {g.name} has a zero scale {scale.tolist()}")
                if np.prod(np.sign(scale)) < 0:  # a mirroring scale turns the winding inside out
                    triangles = triangles[:, ::-1]
                g.geometry = _coal_convex(points * scale, triangles)
            g.geometry.computeLocalAABB()

    def _joint_extent(self, j: int) -> float:
        """How far a prismatic joint can move its child frame from the joint origin (0 for revolute)."""
        if self.model.joints[j].shortname() in PRISMATIC_TYPES:
            qi = self.model.joints[j].idx_q
            return float(max(abs(self.model.lowerPositionLimit[qi]), abs(self.model.upperPositionLimit[qi])))
        return 0.0

    def _joint_reach(self, geom_index: int) -> dict[int, float]:
        """Lipschitz weight of every joint moving geometry ``geom_index``: how fast (m per rad or m per m)
        its points can move when that joint moves, in any configuration.

        ``L_j`` bounds the distance from joint j's origin (on its axis) to any point of the geometry: the
        geometry's bounding sphere seen from its joint, plus the joint offsets down the chain, plus the
        travel of prismatic joints on the way (triangle inequality, so it holds for every configuration).
        A point at distance <= L_j from a revolute axis moves at most L_j |dq_j|; a prismatic joint moves
        it by |dq_j|. Worked example (sim arm, upper_arm_link cylinder, centre 0.175 m up its joint,
        bounding radius 0.186 m): shoulder_lift gets 0.175 + 0.186 = 0.361 and shoulder_pan
        0.15 + 0.361 = 0.511 (the lift joint sits 0.15 m above the pan joint).
        """
        return self._reach_walk(geom_index)[0]

    def reach_ball(self, geom_index: int) -> tuple[np.ndarray, float]:
        """A world-fixed ball every point of the geometry stays in, in every configuration: centred on the
        origin of the first movable joint above it (which never moves), radius from ``_joint_reach``."""
        _, centre, radius = self._reach_walk(geom_index)
        return centre, radius

    def _reach_walk(self, geom_index: int) -> tuple[dict[int, float], np.ndarray, float]:
        g = self.geom_model.geometryObjects[geom_index]
        geo = g.geometry
        centre = g.placement.translation + g.placement.rotation @ np.asarray(geo.aabb_center)
        reach = float(np.linalg.norm(centre) + geo.aabb_radius)
        weights: dict[int, float] = {}
        j = g.parentJoint
        L = reach + self._joint_extent(j)
        top, top_L = j, L
        while j > 0:
            weights[j] = 1.0 if self.model.joints[j].shortname() in PRISMATIC_TYPES else L
            top, top_L = j, L
            parent = self.model.parents[j]
            L = L + float(np.linalg.norm(self.model.jointPlacements[j].translation)) + self._joint_extent(parent)
            j = parent
        # The first movable joint's origin is fixed in the world (its parent is the universe).
        origin = np.asarray(self.model.jointPlacements[top].translation, dtype=np.float64) if top > 0 else np.zeros(3)
        return weights, origin, top_L

    def _to_actuated(self, per_joint: dict[int, float]) -> np.ndarray:
        w = np.zeros(len(self.joint_names))
        for j, value in per_joint.items():
            a, mult = self._driver[j]
            w[a] += abs(mult) * value
        return w

    def _geometry_weights(self) -> np.ndarray:
        return np.array([self._to_actuated(self._joint_reach(i)) for i in range(len(self.geom_links))]).reshape(
            len(self.geom_links), len(self.joint_names)
        )

    def pair_weights(self, a: int, b: int) -> np.ndarray:
        """Joints above both geometries move them rigidly together: only the joints between count."""
        ra, rb = self._joint_reach(a), self._joint_reach(b)
        only_a = {j: w for j, w in ra.items() if j not in rb}
        only_b = {j: w for j, w in rb.items() if j not in ra}
        return self._to_actuated(only_a) + self._to_actuated(only_b)

    # -- pair selection --
    def _collision_parent(self) -> dict[str, str | None]:
        """For each link, the nearest ancestor link with collision geometry (None at the root)."""
        parent_of = {}
        for joint in self._urdf_root.findall("joint"):
            parent_of[joint.find("child").get("link")] = joint.find("parent").get("link")
        has_geometry = set(self.geom_links)
        out = {}
        for link in has_geometry:
            p = parent_of.get(link)
            while p is not None and p not in has_geometry:
                p = parent_of.get(p)
            out[link] = p
        return out

    def _select_pairs(self, srdf_xml: str | None) -> tuple[list[PairSpec], dict[str, list[tuple[str, str]]]]:
        geoms = range(len(self.geom_links))
        excluded: dict[str, set[tuple[str, str]]] = {"rigid": set()}
        candidates = []
        for a in geoms:
            for b in geoms:
                if b <= a or self.geom_links[a] == self.geom_links[b]:
                    continue
                links = tuple(sorted((self.geom_links[a], self.geom_links[b])))
                weights = self.pair_weights(a, b)
                if not weights.any():
                    excluded["rigid"].add(links)
                    continue
                candidates.append((a, b, links, weights))
        if srdf_xml is not None:
            disabled = _srdf_disabled_pairs(srdf_xml)
            excluded["srdf"] = set()
            keep = []
            for cand in candidates:
                if frozenset(cand[2]) in disabled:
                    excluded["srdf"].add(cand[2])
                else:
                    keep.append(cand)
            candidates = keep
        else:
            parent = self._collision_parent()
            excluded["adjacent"] = set()
            keep = []
            for cand in candidates:
                la, lb = cand[2]
                if parent.get(la) == lb or parent.get(lb) == la:
                    excluded["adjacent"].add(cand[2])
                else:
                    keep.append(cand)
            # "Default": touching in the reference configuration, so they would make it unsafe forever.
            excluded["contact_at_reference"] = set()
            data = self.model.createData()
            gdata = pin.GeometryData(self.geom_model)
            pin.updateGeometryPlacements(self.model, data, self.geom_model, gdata, self.full_q(self.reference_q))
            candidates = []
            for cand in keep:
                d = _pair_distance(self.geom_model, gdata, cand[0], cand[1])
                if d <= CONTACT_TOLERANCE_M:
                    excluded["contact_at_reference"].add(cand[2])
                else:
                    candidates.append(cand)
        # A link pair is excluded as a whole: any geometry of an excluded link pair is dropped.
        dropped = set().union(*excluded.values())
        pairs = []
        for a, b, links, w in candidates:
            if links in dropped:
                continue
            for static in (a, b):  # a pan joint turning the arm about the base cylinder's axis: no closer
                for j in self._symmetric_root_joints(static):
                    w = w.copy()
                    w[j] = 0.0
            pairs.append(PairSpec(a, b, self.geom_links[a], self.geom_links[b], w))
        return pairs, {k: sorted(v) for k, v in excluded.items()}

    def _symmetric_root_joints(self, geom_index: int) -> list[int]:
        """Actuated root joints about whose axis a world-fixed geometry is rotationally symmetric (a sphere
        centred on the axis, or a cylinder, capsule or cone along it): turning them moves nothing closer
        to that geometry, so they drop out of its pairs' bounds."""
        g = self.geom_model.geometryObjects[geom_index]
        if g.parentJoint != 0:
            return []
        geo = g.geometry
        if isinstance(geo, coal.Sphere):
            axis = None
        elif isinstance(geo, (coal.Cylinder, coal.Capsule, coal.Cone)):
            axis = g.placement.rotation[:, 2]
        else:
            return []
        centre = g.placement.translation
        out = []
        for a, (direction, prismatic) in self.root_joint_axes().items():
            origin = np.asarray(self.model.jointPlacements[self._root_joint_of(a)].translation)
            on_axis = np.linalg.norm(np.cross(centre - origin, direction)) < 1e-9
            aligned = axis is None or np.linalg.norm(np.cross(axis, direction)) < 1e-9
            if not prismatic and on_axis and aligned:
                out.append(a)
        return out

    def _root_joint_of(self, actuated: int) -> int:
        return next(j for j, (a, mult) in self._driver.items() if a == actuated and self.model.parents[j] == 0)


def _pair_distance(gmodel: pin.GeometryModel, gdata: pin.GeometryData, a: int, b: int) -> float:
    req, res = coal.DistanceRequest(), coal.DistanceResult()
    return float(
        coal.distance(
            gmodel.geometryObjects[a].geometry, gdata.oMg[a], gmodel.geometryObjects[b].geometry, gdata.oMg[b], req, res
        )
    )


# ---- loading with a cache ----------------------------------------------------------------------------

_CACHE: dict[str, RobotModel] = {}
_CACHE_LOCK = threading.Lock()
_CACHE_SIZE = 4


def _digest(urdf_xml: str, srdf_xml: str | None, package_paths: Sequence[str], base_dir: Path | None) -> str:
    h = hashlib.sha256()
    h.update(urdf_xml.encode())
    h.update(b"\0srdf\0" + (srdf_xml or "").encode())
    try:
        root = ET.fromstring(urdf_xml)
    except ET.ParseError:
        return h.hexdigest()
    for mesh in root.findall("./link/collision/geometry/mesh"):
        try:
            path = resolve_package_uri(mesh.get("filename", ""), package_paths, base_dir)
        except RobotModelError:
            continue  # the load itself reports it
        h.update(str(path).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def load_robot(
    urdf_xml: str,
    srdf_xml: str | None = None,
    package_paths: Sequence[str] = (),
    base_dir: Path | str | None = None,
    progress: Callable[[str], None] | None = None,
) -> RobotModel:
    """The model for a description, built once per content (URDF, SRDF and mesh files) and cached.

    ``progress`` (e.g. a node logger's ``info``) gets a line before each collision mesh is read and hulled.
    """
    base = Path(base_dir) if base_dir else None
    key = _digest(urdf_xml, srdf_xml, tuple(package_paths), base)
    with _CACHE_LOCK:
        robot = _CACHE.get(key)
        if robot is None:
            robot = RobotModel(urdf_xml, srdf_xml, tuple(package_paths), base, digest=key, progress=progress)
            if len(_CACHE) >= _CACHE_SIZE:
                _CACHE.pop(next(iter(_CACHE)))
            _CACHE[key] = robot
        return robot


def load_robot_files(
    urdf_path: Path | str,
    srdf_path: Path | str | None = None,
    package_paths: Sequence[str] = (),
    progress: Callable[[str], None] | None = None,
) -> RobotModel:
    urdf_path = Path(urdf_path).expanduser()
    if not urdf_path.is_file():
        raise FileNotFoundError(f"robot description not found: {urdf_path}")
    srdf = None
    if srdf_path:
        srdf_path = Path(srdf_path).expanduser()
        if not srdf_path.is_file():
            raise FileNotFoundError(f"SRDF not found: {srdf_path}")
        srdf = srdf_path.read_text()
    return load_robot(urdf_path.read_text(), srdf, package_paths, base_dir=urdf_path.parent, progress=progress)

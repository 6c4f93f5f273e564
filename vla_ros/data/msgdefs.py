"""Complete ROS 2 message definitions in ``ros2msg`` form, as rosbag2 stores them in MCAP schemas.

The top-level .msg text comes first, then every type it uses (recursively), each after a line of 80 ``=``
and a ``MSG: pkg/msg/Type`` line. The .msg files are found where every ROS install keeps them
(``<prefix>/share/<pkg>/msg/``): through the ament index when sourced, else in the prefix that holds
the message package's Python module, else next to the Python interpreter (pip mode, where the message
wheels install ``share/``).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import sys
from pathlib import Path

PRIMITIVES = {
    "bool",
    "byte",
    "char",
    "float32",
    "float64",
    "int8",
    "uint8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "int64",
    "uint64",
    "string",
    "wstring",
}
SEPARATOR = "=" * 80


def _module_share_dirs(pkg: str) -> list[Path]:
    """``<prefix>/share`` above where ``pkg``'s Python module lives (<prefix>/lib/pythonX.Y/site-packages/pkg)."""
    spec = importlib.util.find_spec(pkg) if pkg.isidentifier() else None
    if spec is None or not spec.origin:
        return []
    return [parent / "share" for parent in Path(spec.origin).resolve().parents if (parent / "share" / pkg).is_dir()][:1]


def _share_dirs(pkg: str = "") -> list[Path]:
    dirs = [Path(p) / "share" for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p]
    dirs.extend(_module_share_dirs(pkg) if pkg else [])
    dirs.append(Path(sys.prefix) / "share")
    dirs.extend(sorted(Path("/opt/ros").glob("*/share")))
    return dirs


def msg_file(type_name: str) -> Path:
    """'sensor_msgs/msg/Image' or 'sensor_msgs/Image' -> path of Image.msg; FileNotFoundError naming where it looked."""
    pkg, _, name = _split(type_name)
    tried = []
    for share in _share_dirs(pkg):
        path = share / pkg / "msg" / f"{name}.msg"
        tried.append(str(path))
        if path.is_file():
            return path
    raise FileNotFoundError(f"message definition {type_name} not found; looked in: {', '.join(tried)}")


def _split(type_name: str) -> tuple[str, str, str]:
    parts = type_name.split("/")
    if len(parts) == 3:
        return parts[0], parts[1], parts[2]
    if len(parts) == 2:
        return parts[0], "msg", parts[1]
    raise ValueError(f"not a ROS message type name: {type_name!r}")


def _field_types(text: str, package: str) -> list[str]:
    """Non-primitive field types used by a .msg text, as pkg/msg/Type."""
    out = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        tokens = line.split()
        type_token = tokens[0]
        if len(tokens) >= 2 and "=" in tokens[1]:
            continue  # a constant: TYPE NAME=value
        base = re.sub(r"\[.*\]$", "", type_token)  # strip [], [N], [<=N]
        base = re.sub(r"<=\d+$", "", base)  # bounded strings
        if base in PRIMITIVES:
            continue
        pkg, _, name = _split(base) if "/" in base else (package, "msg", base)
        out.append(f"{pkg}/msg/{name}")
    return out


@functools.lru_cache(maxsize=64)
def full_definition(type_name: str) -> str:
    """The ros2msg schema text for ``type_name`` (e.g. 'sensor_msgs/msg/Image')."""
    pkg, _, name = _split(type_name)
    top = msg_file(type_name).read_text()
    parts, seen, queue = [top.rstrip("\n")], {f"{pkg}/msg/{name}"}, _field_types(top, pkg)
    while queue:
        dep = queue.pop(0)
        if dep in seen:
            continue
        seen.add(dep)
        text = msg_file(dep).read_text()
        parts.append(f"{SEPARATOR}\nMSG: {dep}\n{text.rstrip(chr(10))}")
        queue.extend(_field_types(text, dep.split("/")[0]))
    return "\n".join(parts) + "\n"


@functools.lru_cache(maxsize=64)
def type_hash(type_name: str) -> str:
    """The type's RIHS01 hash from the ``.json`` type description installed next to its ``.msg`` (Iron and
    newer), as rosbag2 writes it in ``type_description_hash``; "" where there is none (Humble)."""
    import json

    try:
        description = json.loads(msg_file(type_name).with_suffix(".json").read_text())
    except (OSError, ValueError):
        return ""
    pkg, _, name = _split(type_name)
    wanted = f"{pkg}/msg/{name}"
    return next((h["hash_string"] for h in description.get("type_hashes", []) if h.get("type_name") == wanted), "")

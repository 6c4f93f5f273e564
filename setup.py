"""ament_python build of vla_ros; the same file serves `colcon build` and `pip install -e .` (pip mode)."""

import os
from glob import glob

from setuptools import find_packages, setup

PACKAGE = "vla_ros"

# Node entry points (`ros2 run vla_ros <name>`) plus the `vla-ros` command-line tool.
CONSOLE_SCRIPTS = [
    "sim_node = vla_ros.nodes.sim_node:main",
    "scripted_motion_node = vla_ros.nodes.scripted_motion_node:main",
    "policy_node = vla_ros.nodes.policy_node:main",
    "safety_filter_node = vla_ros.nodes.safety_filter_node:main",
    "controller_node = vla_ros.nodes.controller_node:main",
    "vla-ros = vla_ros.cli:main",
]


def tree(src: str) -> list[tuple[str, list[str]]]:
    """data_files entries that install folder ``src`` under share/<package>/, keeping its layout."""
    entries = []
    for root, _dirs, files in os.walk(src):
        paths = [os.path.join(root, f) for f in files if not f.startswith(".")]
        if paths:
            entries.append((os.path.join("share", PACKAGE, root), paths))
    return entries


setup(
    name=PACKAGE,
    version="0.1.0",
    packages=find_packages(exclude=["test", "test.*"]),
    package_data={PACKAGE: ["description/*.urdf", "description/*.yaml"]},
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", sorted(glob("launch/*.xml"))),
        *tree("config"),
        *tree("models"),
    ],
    install_requires=["setuptools"],
    python_requires=">=3.10",
    zip_safe=False,
    maintainer="vla_ros developers",
    maintainer_email="vla-ros@example.com",
    description="Vision-language-action Transformer policy for ROS 2 robot arms, with a MuJoCo simulation.",
    license="Apache-2.0",
    extras_require={"test": ["pytest"]},
    entry_points={"console_scripts": CONSOLE_SCRIPTS},
)

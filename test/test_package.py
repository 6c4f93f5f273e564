"""package.xml and setup.py agree, and everything they name exists (what colcon and pip will install)."""

import importlib
import os
import re
import runpy
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import setuptools

pytestmark = pytest.mark.unit  # no ROS node, no DDS, no wall-clock timing: `make test` runs it beside others

REPO = Path(__file__).resolve().parents[1]


def setup_kwargs() -> dict:
    captured = {}
    real, cwd = setuptools.setup, os.getcwd()
    setuptools.setup = lambda **kw: captured.update(kw)
    try:
        os.chdir(REPO)  # setup.py globs relative to its folder, as pip and colcon run it
        runpy.run_path(str(REPO / "setup.py"), run_name="__main__")
    finally:
        setuptools.setup = real
        os.chdir(cwd)
    return captured


def package_xml() -> ET.Element:
    return ET.parse(REPO / "package.xml").getroot()


def test_name_version_license_agree():
    kw, pkg = setup_kwargs(), package_xml()
    assert pkg.get("format") == "3"
    assert kw["name"] == pkg.findtext("name") == "vla_ros"
    assert kw["version"] == pkg.findtext("version")
    assert kw["license"] == pkg.findtext("license") == "Apache-2.0"
    assert pkg.find("export/build_type").text == "ament_python"
    import vla_ros

    assert vla_ros.__version__ == kw["version"]


def test_entry_points_resolve_and_launch_files_use_only_them():
    scripts = {}
    for line in setup_kwargs()["entry_points"]["console_scripts"]:
        name, target = (s.strip() for s in line.split("="))
        module, func = target.split(":")
        assert callable(getattr(importlib.import_module(module), func)), target
        scripts[name] = target
    assert "vla-ros" in scripts and "sim_node" in scripts
    for launch in (REPO / "launch").glob("*.xml"):
        for pkg, exe in re.findall(r'<node[^>]*pkg="([^"]+)"[^>]*exec="([^"]+)"', launch.read_text()):
            if pkg == "vla_ros":
                assert exe in scripts, f"{launch.name} starts {exe}, which setup.py does not install"


def test_data_files_install_the_ament_marker_manifest_launch_and_config():
    kw = setup_kwargs()
    installed = {}
    for dest, files in kw["data_files"]:
        for f in files:
            assert (REPO / f).is_file(), f"data file {f} does not exist"
            installed[f] = dest
    assert installed["resource/vla_ros"] == "share/ament_index/resource_index/packages"
    assert installed["package.xml"] == "share/vla_ros"
    for f in list((REPO / "launch").glob("*.xml")) + [p for p in (REPO / "config").rglob("*") if p.is_file()]:
        rel = str(f.relative_to(REPO))
        assert rel in installed and installed[rel] == f"share/vla_ros/{Path(rel).parent}", rel
    assert "description/*.urdf" in kw["package_data"]["vla_ros"]


def test_setup_cfg_puts_scripts_where_ros2_run_looks():
    cfg = (REPO / "setup.cfg").read_text()
    assert "script_dir=$base/lib/vla_ros" in cfg and "install_scripts=$base/lib/vla_ros" in cfg


def test_every_ros_package_imported_is_an_exec_depend():
    depends = {e.text for e in package_xml().findall("exec_depend")}
    imported = set()
    for py in (REPO / "vla_ros").rglob("*.py"):
        for mod in re.findall(r"^\s*(?:from|import) (\w+)", py.read_text(), re.M):
            if mod.endswith(("_msgs", "_srvs", "_interfaces")) or mod in ("rclpy", "ament_index_python"):
                imported.add(mod)
    assert imported, "scan found no ROS imports"
    assert imported <= depends, f"missing exec_depend: {sorted(imported - depends)}"

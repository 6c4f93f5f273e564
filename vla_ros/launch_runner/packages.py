# Copyright 2025 The vla_ros authors
# SPDX-License-Identifier: Apache-2.0
"""Package and executable lookup for the launch runner.

Follows ``launch_ros``: ``$(find-pkg-share)`` / ``$(find-pkg-prefix)`` query
the ament index, and a ``<node pkg exec>`` runs ``<prefix>/lib/<pkg>/<exec>``.

On top of that it supports "pip mode", where ``vla_ros`` is used from a source
checkout or a virtualenv and is not in any ament index:

* ``vla_ros`` itself falls back to the source tree root (the directory holding
  ``package.xml``, two levels above this file), for both share and prefix
  (or to ``<sys.prefix>/share/vla_ros`` after a non-editable pip install);
* its node executables fall back to the console scripts next to
  ``sys.executable`` (the virtualenv's ``bin``).

Any other package must be in the ament index, as under ``ros2 launch``: a
``<node pkg>`` never falls back to ``$PATH`` (a same-named binary of another
package would start instead).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from .errors import LaunchError

#: The package that can be found without an ament index ("pip mode").
SOURCE_PACKAGE = "vla_ros"
#: Root of the source tree: vla_ros/launch_runner/packages.py -> parents[2].
SOURCE_ROOT = Path(__file__).resolve().parents[2]


def _ament_lookup(package: str, kind: str) -> Path | None:
    """Ask the ament index for a package's share or prefix; None if it is not indexed."""
    try:
        from ament_index_python.packages import (
            PackageNotFoundError,
            get_package_prefix,
            get_package_share_directory,
        )
    except ImportError:  # no ament_index_python at all: nothing is indexed
        return None
    try:
        if kind == "share":
            return Path(get_package_share_directory(package))
        return Path(get_package_prefix(package))
    except PackageNotFoundError:
        return None
    except OSError:
        # ament_index_python raises EnvironmentError when AMENT_PREFIX_PATH is
        # unset, which is the normal state in pip mode.
        return None
    except ValueError as exc:  # invalid package name (REP 127)
        raise LaunchError(str(exc)) from None


def _pip_mode_location(kind: str) -> Path:
    """Where vla_ros lives when no ament index knows it.

    A source checkout (editable install) has package.xml at SOURCE_ROOT; a
    regular ``pip install`` instead copies the data files (launch/, config/,
    package.xml) to ``<sys.prefix>/share/vla_ros``.
    """
    installed_share = Path(sys.prefix) / "share" / SOURCE_PACKAGE
    if (SOURCE_ROOT / "package.xml").is_file() or not installed_share.is_dir():
        return SOURCE_ROOT
    return installed_share if kind == "share" else Path(sys.prefix)


def _find_package(package: str, kind: str) -> Path:
    found = _ament_lookup(package, kind)
    if found is not None:
        return found
    if package == SOURCE_PACKAGE:
        return _pip_mode_location(kind)
    raise LaunchError(
        f"package '{package}' not found in the ament index "
        f"(AMENT_PREFIX_PATH={os.environ.get('AMENT_PREFIX_PATH', '')!r})"
    )


def find_package_share(package: str) -> Path:
    """Return the share directory of *package* (``$(find-pkg-share package)``)."""
    return _find_package(package, "share")


def find_package_prefix(package: str) -> Path:
    """Return the install prefix of *package* (``$(find-pkg-prefix package)``)."""
    return _find_package(package, "prefix")


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_node_executable(package: str, executable: str) -> str:
    """Return the absolute path of *package*'s *executable* (``$(exec-in-pkg)``, ``<node pkg exec>``).

    As launch_ros' ExecutableInPackage: ``<prefix>/lib/<package>/<executable>`` of the package in the
    ament index. Pip mode only: vla_ros's own console scripts next to ``sys.executable``. Raises
    :class:`LaunchError` naming the places searched.
    """
    prefix = _ament_lookup(package, "prefix")
    if prefix is not None:
        libexec = prefix / "lib" / package
        if not libexec.is_dir():
            raise LaunchError(
                f"package '{package}' found at '{prefix}', but libexec directory '{libexec}' does not exist"
            )
        found = shutil.which(executable, path=str(libexec))
        if found is None:
            raise LaunchError(
                f"executable '{executable}' not found in the libexec directory '{libexec}' of package '{package}'"
            )
        return found
    if package != SOURCE_PACKAGE:
        raise LaunchError(
            f"executable '{executable}' of package '{package}' not found: the package is not in the ament "
            f"index (AMENT_PREFIX_PATH={os.environ.get('AMENT_PREFIX_PATH', '')!r})"
        )
    # Deliberately not resolved: a venv's python is a symlink to the base
    # interpreter, and the console scripts live next to the symlink.
    venv_candidate = Path(sys.executable).parent / executable
    if _is_executable(venv_candidate):
        return str(venv_candidate)
    raise LaunchError(
        f"executable '{executable}' of package '{package}' not found "
        f"(searched: {venv_candidate}; pip mode: is vla_ros installed in this environment?)"
    )

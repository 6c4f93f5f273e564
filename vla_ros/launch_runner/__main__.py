# Copyright 2025 The vla_ros authors
# SPDX-License-Identifier: Apache-2.0
"""``python -m vla_ros.launch_runner FILE [name:=value ...]``: same as ``vla-ros launch``."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

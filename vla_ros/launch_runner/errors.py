# Copyright 2025 The vla_ros authors
# SPDX-License-Identifier: Apache-2.0
"""The single exception type of the launch runner.

Upstream ``launch`` raises a mix of RuntimeError, ValueError, TypeError and
SubstitutionFailure while parsing or executing a description; the runner folds
all of them into :class:`LaunchError` so callers (and the CLI) can catch one
type. It derives from ValueError because every such error means "this launch
file, or the arguments given to it, are invalid".
"""


class LaunchError(ValueError):
    """A launch file (or its arguments) could not be resolved into processes."""

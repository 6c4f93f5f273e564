"""The one ``main()`` every node entry point uses (the lifecycle of ros2/examples' minimal nodes).

Spins (or calls the node's own ``spin()`` where it has one) and always cleans up: ``close()`` (the
node's own threads), ``destroy_node``, ``try_shutdown``; Ctrl-C and external shutdown end it without a
traceback. A node that cannot start on its configuration (bad parameter, missing file) exits with status
2 and one line saying why, instead of a stack trace.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import rclpy
from rclpy.executors import ExternalShutdownException


def run_node(make_node: Callable[[], object], args: list[str] | None = None) -> int:
    rclpy.init(args=args)
    node = None
    try:
        try:
            node = make_node()
        except (ValueError, OSError) as err:  # ParameterError is a ValueError; a missing file an OSError
            print(f"[{getattr(make_node, '__name__', 'node')}] cannot start: {err}", file=sys.stderr)
            return 2
        spin = getattr(node, "spin", None)  # a node that paces its own executor (the controller's inline loop)
        if spin is not None:
            spin()
        else:
            rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception:
        # A signal can invalidate the context while spin() is inside rcl (rclpy raises RCLError or
        # RuntimeError then): that is a shutdown, not a failure. Anything else is a real error.
        if rclpy.ok():
            raise
    finally:
        if node is not None:
            close = getattr(node, "close", None)
            if close is not None:
                close()
            node.destroy_node()
        rclpy.try_shutdown()
    # A node that stopped itself on an internal failure sets ``failed`` so the launcher sees it died.
    return 1 if getattr(node, "failed", False) else 0

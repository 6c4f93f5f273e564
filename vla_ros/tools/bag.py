"""``vla-ros bag info PATH [--json]``: what a bag holds (topics, types, counts, rates, duration), like ``ros2 bag
info``.

PATH is a rosbag2 bag folder (metadata.yaml + MCAP) or one MCAP file. A path that is not a bag, or a file
that cannot be read, gets a one-line error and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys

EXAMPLE = "example: vla-ros bag info runs/record/episode --json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vla-ros bag", description=__doc__.splitlines()[0], epilog=EXAMPLE)
    verbs = parser.add_subparsers(dest="verb", required=True)
    info_parser = verbs.add_parser("info", help="topics, types, counts, rates and duration of a bag", epilog=EXAMPLE)
    info_parser.add_argument("path", help="bag folder or .mcap file")
    info_parser.add_argument("--json", action="store_true", help="one line of JSON instead of the table")
    args = parser.parse_args(argv)
    from vla_ros.data.bag import BagError, format_info, info

    try:
        summary = info(args.path)
    except BagError as exc:
        print(f"vla-ros bag info: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(summary) if args.json else format_info(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``vla-ros grounding``: the instruction check of a model folder (``vla_ros.policy.grounding``).

* ``train --model DIR``: train the learned score on the model's task pools and write ``grounding.npz`` and
  ``grounding.json`` into the folder (seconds; ``vla-ros train`` does it for every run it writes);
* ``check --model DIR TEXT...``: the decision on each text, as the node takes it;
* ``lists --model DIR``: the decisions on every instruction list (training, held-out, unseen, the refusal
  lists) with each colour, by the word rules and the learned score together and by the score alone: the
  check's own figures, no simulation.

The last line is a JSON object with ``--json``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

from vla_ros.cli import print_result

EXAMPLE = (
    "examples: vla-ros grounding train --model runs/vla_cups\n"
    "          vla-ros grounding check --model vla_cups 'pick up the yellow cup' 'lift the red mug'\n"
    "          vla-ros grounding lists --model vla_cups --json"
)


def _grounder(model: str):
    from vla_ros.model.io import load_config, resolve_model_dir
    from vla_ros.policy.grounding import Grounder, GroundingModel
    from vla_ros.tasks import task_of
    from vla_ros.tokens.text import shared_encoder

    folder = resolve_model_dir(model)
    config = load_config(folder)
    learned = GroundingModel.load(folder)
    return folder, Grounder(task_of(config), learned, shared_encoder(config.max_text_tokens))


def list_figures(grounder, threshold: float | None = None) -> dict:
    """Per instruction list: how many texts (each template with each cup colour), how many the check
    accepts and refuses (and, for the request lists, how many it grounds on another cup), with the word rules
    and the score together and with the score alone."""
    from vla_ros.sim import tasks

    lists = {
        "train": (tasks.PHRASING_TEMPLATES, True),
        "heldout": (tasks.HELDOUT_TEMPLATES, True),
        "unseen": (tasks.UNSEEN_TEMPLATES, True),
        "refuse_train": (tasks.REFUSE_TRAIN_TEMPLATES, False),
        "refuse": (tasks.REFUSE_HELDOUT_TEMPLATES, False),
    }
    out = {}
    for name, (templates, request) in lists.items():
        texts = [(t.format(color=c), c) for t in templates for c in tasks.COLORS]
        texts = list(dict.fromkeys(texts))
        decisions = [(grounder(text, threshold), color) for text, color in texts]
        accepted = sum(g.accepted for g, _ in decisions)
        row = {"texts": len(texts), "accepted": accepted, "refused": len(texts) - accepted}
        if grounder.model is not None:
            low = [g.score < g.threshold for g, _ in decisions]
            row["score_alone_refused"] = int(sum(low))
        if request:
            row["false_refusal_pct"] = round(100.0 * row["refused"] / len(texts), 2)
            row["wrong_target"] = sum(g.accepted and g.target != color for g, color in decisions)
            row["refused_texts"] = [g.text for g, _ in decisions if not g.accepted][:20]
        else:
            row["refused_pct"] = round(100.0 * row["refused"] / len(texts), 2)
            row["by_reason"] = dict(Counter(g.code for g, _ in decisions if not g.accepted))
            row["accepted_texts"] = [g.text for g, _ in decisions if g.accepted][:20]
        out[name] = row
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="vla-ros grounding",
        description=__doc__.splitlines()[0],
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="action", required=True)
    train = sub.add_parser("train", help="train the learned score into a model folder")
    check = sub.add_parser("check", help="the decision on each text")
    lists = sub.add_parser("lists", help="the decisions on every instruction list")
    for p in (train, check, lists):
        p.add_argument("--model", default="vla_cups", help="model folder or name under models/ (default vla_cups)")
        p.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    train.add_argument("--seed", type=int, default=0)
    check.add_argument("texts", nargs="+", metavar="TEXT")
    for p in (check, lists):
        p.add_argument("--threshold", type=float, default=None, help="the score's threshold (default: the model's)")
    args = parser.parse_args(argv)
    try:
        folder, grounder = _grounder(args.model)
        if args.action == "train":
            import torch

            from vla_ros.policy.grounding import train_grounding

            torch.set_num_threads(1)
            t0 = time.monotonic()
            learned = train_grounding(grounder.encoder, grounder.task, seed=args.seed, progress=sys.stderr.isatty())
            learned.save(folder)
            result = {"model": str(folder), **learned.meta, "wall_s": round(time.monotonic() - t0, 1)}
        elif args.action == "check":
            result = {"model": str(folder), "decisions": [grounder(t, args.threshold).as_dict() for t in args.texts]}
            if not args.json:
                for t in args.texts:
                    print(grounder(t, args.threshold).summary())
        else:
            result = {"model": str(folder), "learned_score": grounder.model is not None}
            result |= list_figures(grounder, args.threshold)
    except (FileNotFoundError, ValueError, OSError) as err:
        print(f"vla-ros grounding: {err}", file=sys.stderr)
        return 2
    print_result(result, args.json, 18)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The instruction check: whether the model can ground an instruction, decided before any chunk.

A VLA acts on whatever it is told; a request it was never trained for ("do not pick up the red cup", "pick up
the yellow cup", "open the door") gets a plausible-looking motion towards something. Every instruction
therefore passes two checks before the policy sees it, and a refused one gives no chunk at all (the arm holds):

1. **The task's words** (``Task.ground_words``): what the words alone decide about the scene. For the cup
   task: exactly one cup colour named (none: which cup?; two, "both", "all": more than one), no colour the
   scene has no cup of, no negation. A clear reason code each (``reasons.INSTRUCTION_*``).
2. **A learned score** (``GroundingModel``): a small classifier on the frozen MiniLM embeddings of the
   instruction, with the target's words replaced by one placeholder (``Task.grounding_text``) so that it judges
   the request's form, not which target: trained on the task's requests (``Task.grounding_pools``: the
   phrasing lists and their combinations) against its refusals (other objects, other actions, negations,
   unrelated requests, nonsense). The score is the classifier's probability that the text is a request of the
   kind the model was trained for; below ``threshold`` the instruction is refused (``instruction_not_grounded``).
   Its cross-validated false-refusal and miss rates are kept with it (``grounding.json``).

An accepted instruction names its target (``Grounding.target``); with ``policy_text="grounded"`` the policy
is conditioned on the task's canonical wording of that target (``Task.canonical_instruction``) instead of the
words as given, so a phrasing the policy never saw costs nothing once the check has understood it.

The same ``Grounder`` runs in the node, ``vla-ros eval`` and the live evaluation (through ``PolicySession``).
No rclpy, no torch at run time (the score is a NumPy forward pass); ``train_grounding`` imports torch.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path

import numpy as np

from vla_ros import reasons

GROUNDING_WEIGHTS = "grounding.npz"
GROUNDING_META = "grounding.json"
FEATURES = "minilm_mean_max_v1"  # what ``features`` computes; a file of another kind is refused
DEFAULT_THRESHOLD = 0.5
POLICY_TEXT = ("as_given", "grounded")


@dataclasses.dataclass(frozen=True)
class Grounding:
    """The check's decision on one instruction. ``code`` is "" when accepted, else the reason code; ``score``
    is the learned score (None without a grounding model); ``policy_text`` what the policy is conditioned on."""

    text: str
    accepted: bool
    target: str | None
    score: float | None
    threshold: float
    code: str = ""
    detail: str = ""
    policy_text: str = ""

    def as_dict(self) -> dict:
        return {
            "text": self.text,
            "status": "accepted" if self.accepted else "refused",
            "reason": self.code,
            "detail": self.detail,
            "target": self.target,
            "score": None if self.score is None else round(self.score, 4),
            "threshold": self.threshold,
            "policy_text": self.policy_text,
        }

    def summary(self) -> str:
        """One line for logs and /diagnostics: the text, the decision, the score and why."""
        score = "no learned score" if self.score is None else f"score {self.score:.2f} (threshold {self.threshold:g})"
        if self.accepted:
            return f"{self.text!r} accepted: target {self.target}, {score}"
        return f"{self.text!r} refused ({self.code}): {self.detail}; {score}"


def features(embeddings: np.ndarray) -> np.ndarray:
    """(768,) of MiniLM hidden states (L, 384): the unit mean over every token ([CLS] and [SEP] included,
    as sentence-transformers pools) beside the unit max over the word pieces."""
    e = np.asarray(embeddings, dtype=np.float64)
    mean = e.mean(axis=0)
    peak = (e[1:-1] if len(e) > 2 else e).max(axis=0)
    return np.concatenate([mean / (np.linalg.norm(mean) + 1e-9), peak / (np.linalg.norm(peak) + 1e-9)])


def _gelu(x: np.ndarray) -> np.ndarray:
    """The tanh form of GELU (what ``train_grounding`` trains with)."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


@dataclasses.dataclass
class GroundingModel:
    """The learned score: features -> Linear -> GELU -> Linear -> sigmoid. ``meta`` holds the threshold, the
    task, what it trained on and its cross-validated figures (written as ``grounding.json``)."""

    w1: np.ndarray
    b1: np.ndarray
    w2: np.ndarray
    b2: np.ndarray
    meta: dict

    @property
    def threshold(self) -> float:
        return float(self.meta.get("threshold", DEFAULT_THRESHOLD))

    def scores(self, x: np.ndarray) -> np.ndarray:
        """Scores in [0, 1] of feature rows (n, 768)."""
        h = _gelu(np.asarray(x, dtype=np.float64) @ self.w1.T + self.b1)
        logit = h @ self.w2.T + self.b2
        return 1.0 / (1.0 + np.exp(-np.clip(logit[:, 0], -60, 60)))

    def score(self, embeddings: np.ndarray) -> float:
        return float(self.scores(features(embeddings)[None])[0])

    def save(self, folder: str | Path) -> None:
        folder = Path(folder)
        arrays = {"w1": self.w1, "b1": self.b1, "w2": self.w2, "b2": self.b2}
        np.savez(folder / GROUNDING_WEIGHTS, **{k: np.asarray(v, dtype=np.float32) for k, v in arrays.items()})
        (folder / GROUNDING_META).write_text(json.dumps(self.meta, indent=1) + "\n")

    @classmethod
    def load(cls, folder: str | Path) -> GroundingModel | None:
        """The model folder's instruction check, or None where it has none; a broken one raises ValueError."""
        folder = Path(folder)
        weights, meta_path = folder / GROUNDING_WEIGHTS, folder / GROUNDING_META
        if not weights.is_file() and not meta_path.is_file():
            return None
        try:
            meta = json.loads(meta_path.read_text())
            with np.load(weights) as z:
                arrays = {k: np.asarray(z[k], dtype=np.float64) for k in ("w1", "b1", "w2", "b2")}
        except (OSError, ValueError, KeyError) as err:
            raise ValueError(
                f"{folder}: instruction check unreadable ({GROUNDING_WEIGHTS}, {GROUNDING_META}): {err}"
            ) from err
        if meta.get("features") != FEATURES:
            raise ValueError(f"{meta_path}: features {meta.get('features')!r}, this version computes {FEATURES!r}")
        w1, b1, w2, b2 = (arrays[k] for k in ("w1", "b1", "w2", "b2"))
        if w1.shape[1:] != (768,) or b1.shape != w1.shape[:1] or w2.shape != (1, len(b1)) or b2.shape != (1,):
            raise ValueError(f"{weights}: shapes {[a.shape for a in (w1, b1, w2, b2)]} do not make a 768-in, 1-out MLP")
        if not all(np.all(np.isfinite(a)) for a in (w1, b1, w2, b2)):
            raise ValueError(f"{weights}: NaN or infinity in the weights")
        return cls(w1, b1, w2, b2, meta)


class Grounder:
    """Decides on instructions: the task's words, then the learned score (see the module docstring).

    ``model`` None: only the words are checked (a model folder without ``grounding.npz``; the score is None)."""

    def __init__(self, task, model: GroundingModel | None, encoder) -> None:
        self.task, self.model, self.encoder = task, model, encoder

    def default_threshold(self) -> float:
        return self.model.threshold if self.model is not None else DEFAULT_THRESHOLD

    def __call__(self, text: str, threshold: float | None = None, policy_text: str = "as_given") -> Grounding:
        """The decision on ``text`` at ``threshold`` (None: the model's own); ``policy_text`` "grounded" puts
        the task's wording of the target in ``Grounding.policy_text``, else the text as given."""
        threshold = self.default_threshold() if threshold is None else float(threshold)
        target, code, detail = self.task.ground_words(text)
        score = None
        if self.model is not None:
            score = self.model.score(self.encoder(self.task.grounding_text(text)).embeddings)
        if not code and score is not None and score < threshold:
            code = reasons.INSTRUCTION_NOT_GROUNDED
            detail = "not a request the model was trained for"
        if code:
            return Grounding(text, False, target, score, threshold, code, detail)
        canonical = self.task.canonical_instruction(target) if policy_text == "grounded" else None
        return Grounding(text, True, target, score, threshold, policy_text=canonical or text)


def train_grounding(
    encoder,
    task,
    seed: int = 0,
    hidden: int = 64,
    steps: int = 1500,
    folds: int = 5,
    threshold: float = DEFAULT_THRESHOLD,
    progress: bool = False,
) -> GroundingModel:
    """Train ``task``'s learned score on its pools (``Task.grounding_pools``), with ``folds``-fold
    cross-validated false-refusal and miss rates at ``threshold`` in its meta (``folds`` < 2: none, one fit).
    Repeatable per seed to float rounding."""
    import torch

    pools = task.grounding_pools()
    if pools is None:
        raise ValueError(f"task {task.name!r} has no instruction pools to train an instruction check on")
    requests, refusals = (tuple(dict.fromkeys(task.grounding_text(t) for t in pool)) for pool in pools)
    texts = requests + refusals
    t0 = time.monotonic()
    from tqdm import tqdm

    x = np.stack(
        [features(encoder(t).embeddings) for t in tqdm(texts, desc="encoding", unit="text", disable=not progress)]
    )
    y = np.r_[np.ones(len(requests)), np.zeros(len(refusals))]
    encode_s = time.monotonic() - t0

    def fit(rows: np.ndarray) -> GroundingModel:
        torch.manual_seed(seed)
        net = torch.nn.Sequential(
            torch.nn.Linear(x.shape[1], hidden), torch.nn.GELU(approximate="tanh"), torch.nn.Linear(hidden, 1)
        )
        opt = torch.optim.AdamW(net.parameters(), lr=3e-3, weight_decay=1e-2)
        xs, ys = torch.from_numpy(x[rows]).float(), torch.from_numpy(y[rows]).float()
        balance = torch.tensor(float((ys == 0).sum()) / max(1.0, float((ys == 1).sum())))
        for _ in range(steps):
            loss = torch.nn.functional.binary_cross_entropy_with_logits(net(xs)[:, 0], ys, pos_weight=balance)
            opt.zero_grad()
            loss.backward()
            opt.step()
        w = [p.detach().numpy().astype(np.float64) for p in net.parameters()]
        return GroundingModel(w[0], w[1], w[2], w[3], {})

    rng = np.random.default_rng(seed)
    fold_of = rng.permutation(len(texts)) % max(folds, 1)
    cv_scores = np.empty(len(texts))
    for k in tqdm(range(folds if folds > 1 else 0), desc="cross-validating", unit="fold", disable=not progress):
        cv_scores[fold_of == k] = fit(np.flatnonzero(fold_of != k)).scores(x[fold_of == k])
    model = fit(np.arange(len(texts)))
    train_scores = model.scores(x)
    cross_validation = None
    if folds > 1:
        cross_validation = {
            "folds": folds,
            "false_refusal_pct": round(100.0 * float(np.mean(cv_scores[y == 1] < threshold)), 2),
            "missed_refusal_pct": round(100.0 * float(np.mean(cv_scores[y == 0] >= threshold)), 2),
        }
    model.meta = {
        "features": FEATURES,
        "task": task.name,
        "threshold": threshold,
        "hidden": hidden,
        "steps": steps,
        "seed": seed,
        "requests": len(requests),
        "refusals": len(refusals),
        "cross_validation": cross_validation,
        "training_errors": int(np.sum((train_scores >= threshold) != (y == 1))),
        "encode_s": round(encode_s, 1),
        "train_s": round(time.monotonic() - t0 - encode_s, 1),
    }
    return model


# Bump when the features, the classifier or its training change: older cache entries are then never read.
GROUNDING_CACHE_VERSION = 1


def grounding_cache_dir() -> Path:
    """$VLA_ROS_GROUNDING_CACHE, else $XDG_CACHE_HOME/vla_ros/grounding (~/.cache/...); safe to delete."""
    from vla_ros.cache_dirs import cache_dir

    return cache_dir("grounding", "VLA_ROS_GROUNDING_CACHE")


def cached_grounding(encoder, task, seed: int, max_tokens: int, steps: int = 1500) -> GroundingModel:
    """``train_grounding`` without cross-validation, kept on disk by what decides it (the task's pools, the
    seed, the steps, the text length, this version): the check depends on the task and not on a run's weights,
    so every ``vla-ros train`` of a task after the first reads it in milliseconds instead of training it
    again. An unreadable entry is trained again and replaced."""
    import hashlib
    import os
    import shutil
    import tempfile

    pools = task.grounding_pools()
    key_text = json.dumps([GROUNDING_CACHE_VERSION, FEATURES, task.name, seed, steps, max_tokens, pools])
    entry = grounding_cache_dir() / hashlib.sha256(key_text.encode()).hexdigest()[:32]
    try:
        cached = GroundingModel.load(entry)
        if cached is not None:
            return cached
    except ValueError:
        pass  # written by something else or cut short: train it again
    model = train_grounding(encoder, task, seed=seed, steps=steps, folds=0)
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=entry.parent))
        model.save(tmp)
        shutil.rmtree(entry, ignore_errors=True)
        os.replace(tmp, entry)  # a reader sees the whole entry or none
    except OSError:
        pass  # a read-only or full disk: the model is still returned
    return model

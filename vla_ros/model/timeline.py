"""Who may attend to whom, and the time-RoPE tables: the one rule shared by training, streaming and ONNX.

Every token carries a few integers (no floats, so the rule is exact at the window boundary and after any
shift of the time origin):

=========  ==================================================================================
kind       TEXT, IMAGE, STATE or ACTION (``vla_ros.tokens.types.Kind``)
stamp_ns   masking time: the header stamp for observations; for action tokens the stamp of the
           newest observation the chunk is decoded after (its *anchor*); unused for text
order      rank of the token's observation in the stream's key order ``Observation.key`` =
           (stamp_ns, kind, source); the P patches of a frame share one; action tokens copy their
           anchor's. An integer rank rather than the key itself, because the key holds a string
chunk      which chunk an action token belongs to (-1 for the others)
valid      False for padding in a batch, or for evicted cache slots
rope_ns    RoPE time: the stamp for observations, the future execution time for action tokens
=========  ==================================================================================

The rule (query i, key j), W = window_ns:

* j is TEXT: visible to everyone (the instruction is pinned; text sees only text).
* j is an observation: visible to observation and action queries i when j precedes or equals i in the
  key order (order_j <= order_i) and stamp_i - stamp_j <= W. The P patches of one frame share one order,
  so a frame is bidirectional inside itself; that is stream-exact because a frame always arrives whole.
* j is ACTION: visible only to action queries of the same chunk (bidirectional inside a chunk). No
  observation ever sees an action token, which is why a chunk's keys and values never need to be kept.

The pinned frame (``ModelConfig.pin_first_frame``): its patches are IMAGE tokens with masking stamp
``PINNED_STAMP_NS`` (far in the future, so ``stamp_i - stamp_j`` is never above W) and order
``PINNED_ORDER`` (-1, before every observation's rank, which start at 0). The rule above then makes it
visible to every observation and action query, beyond the window, and not to text; it sees the text and
itself. No special case in ``visibility``: the same integers give the same mask in training, the streaming
runtime and ONNX. Its RoPE time stays the frame's real stamp.

Action tokens use their anchor's stamp for the window, not their future time: every point of the chunk
then reads the same observation window, the one the cache holds right after the anchor arrived. (With
their future times, the late points of a 0.8 s chunk would fall out of a 0.5 s window and see nothing
but the instruction.) Their future time still drives RoPE, so each point knows how far ahead it is.

Worked example, W = 100 ms, stamps in ms (S = state, I = image with 2 patches, A = chunk anchored on
the state at 130):

    token   text  S@0  I@20 I@20  S@90  S@130  A(+100)  A(+200)
    order    -     0    1    1     2     3      3        3

    S@130 sees: text, I@20? 130-20=110 > 100: no; S@90 yes; itself yes.    -> text, S@90, S@130
    I@20 (either patch) sees: text, S@0, both patches of its frame.
    A(+100) and A(+200) see: text, S@90, S@130 (the anchor's window), and each other.

Time-RoPE: angle_f(t) = 2*pi * (t_ns mod P_f) / P_f with integer periods P_f. The reduction is exact
in int64 and the division runs in float64, so the angle *difference* between two tokens equals
2*pi*(t_i - t_j)/P_f to float64 rounding whether ROS time starts at 0, at 1.7e9 s or after a day of
uptime; only then are cos/sin cast to float32. Text tokens get angle 0 (cos 1, sin 0) and their keys
keep only the unrotated half of each head (see ``layers.GroupedQueryAttention``), so attending to the
instruction never depends on time.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import torch

from vla_ros.tokens.types import Kind

TEXT, IMAGE, STATE, ACTION = int(Kind.TEXT), int(Kind.IMAGE), int(Kind.STATE), int(Kind.ACTION)
# The pinned frame's masking stamp and order (see above). 2**62 ns is about 146 years past any ROS stamp, and
# a query stamp minus it stays far inside int64.
PINNED_STAMP_NS = 2**62
PINNED_ORDER = -1


@dataclasses.dataclass
class TokenTimes:
    """Per-token integers of the rule above; numpy arrays or torch tensors of a common shape (..., T)."""

    kind: Any
    stamp_ns: Any
    order: Any
    chunk: Any
    valid: Any


def visibility(q: TokenTimes, k: TokenTimes, window_ns: int):
    """Boolean (..., Tq, Tk): query i may attend to key j. Works on numpy arrays and torch tensors alike
    (only comparisons, &, | and indexing), so training, the torch runtime and the ONNX runtime use
    literally the same code."""
    qk, qs, qo, qc = q.kind[..., :, None], q.stamp_ns[..., :, None], q.order[..., :, None], q.chunk[..., :, None]
    kk, ks, ko, kc = k.kind[..., None, :], k.stamp_ns[..., None, :], k.order[..., None, :], k.chunk[..., None, :]
    q_text = qk == TEXT
    q_act = qk == ACTION
    k_text = kk == TEXT
    k_act = kk == ACTION
    k_obs = (kk == IMAGE) | (kk == STATE)
    precedes = ko <= qo
    recent = (qs - ks) <= window_ns
    see_obs = k_obs & ~q_text & precedes & recent
    see_act = k_act & q_act & (kc == qc)
    return (k_text | see_obs | see_act) & k.valid[..., None, :]


def additive_mask_np(allowed: np.ndarray) -> np.ndarray:
    """float32 mask added to the scores before softmax: 0 where allowed, -inf elsewhere (exact zeros
    after softmax). Callers guarantee each row allows at least one key (a token always sees itself)."""
    return np.where(allowed, np.float32(0.0), np.float32(-np.inf)).astype(np.float32)


def additive_mask(allowed: torch.Tensor) -> torch.Tensor:
    zero = torch.zeros((), dtype=torch.float32, device=allowed.device)
    return torch.where(allowed, zero, torch.tensor(float("-inf"), device=allowed.device))


def rope_tables_np(rope_ns: np.ndarray, kind: np.ndarray, periods_ns: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin float32 (..., T, len(periods_ns)) for integer-ns times; text rows are cos 1, sin 0."""
    periods = np.asarray(periods_ns, dtype=np.int64)
    frac = np.remainder(np.asarray(rope_ns, dtype=np.int64)[..., None], periods) / periods.astype(np.float64)
    angle = (2.0 * math.pi) * frac
    text = (np.asarray(kind) == TEXT)[..., None]
    cos = np.where(text, 1.0, np.cos(angle)).astype(np.float32)
    sin = np.where(text, 0.0, np.sin(angle)).astype(np.float32)
    return cos, sin


def rope_tables(
    rope_ns: torch.Tensor, kind: torch.Tensor, periods_ns: tuple[int, ...]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Torch twin of ``rope_tables_np`` (same float64 arithmetic), on the tensors' device."""
    periods = torch.tensor(periods_ns, dtype=torch.int64, device=rope_ns.device)
    frac = torch.remainder(rope_ns.to(torch.int64)[..., None], periods).to(torch.float64) / periods.to(torch.float64)
    angle = (2.0 * math.pi) * frac
    text = (kind == TEXT)[..., None]
    cos = torch.where(text, torch.ones_like(angle), torch.cos(angle)).to(torch.float32)
    sin = torch.where(text, torch.zeros_like(angle), torch.sin(angle)).to(torch.float32)
    return cos, sin

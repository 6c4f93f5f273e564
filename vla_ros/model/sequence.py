"""From observations to the model's token layout, for training batches and for each streaming step.

A *sequence* is the instruction's text tokens, then the pinned frame's patches where the model has one
(``ModelConfig.pin_first_frame``; ``pinned_frame`` says which frame), then the observations in ``Observation.key`` order
(stamp_ns, kind, source; a frame expands to P patch tokens), then the action tokens of each chunk to
decode. Chunks are anchored on an observation key: chunk c's point k targets time
anchor + (k + 1) / chunk_rate_hz. Several chunks may
share one sequence (each sees only its own anchor's window, see ``timeline``), so a training window
supervises many chunks in one forward pass, with exactly the mask the streaming runtime uses.

The model embeds a sequence from a *pool* of rows, gathered into token order:

    row 0            zeros (padding)
    rows 1 ..        F*P patch tokens (frame f, patch p at 1 + f*P + p)
    then             N state tokens
    then             L text tokens
    then             A action tokens (chunk-query index 0..H-1 each)

so images are encoded in one convolution call and states in one matmul, whatever their interleaving.
Example: text of 2 tokens, then a frame (P = 2) at 10 ms and a state at 5 ms: F=1, N=1, L=2, and
token order [text0, text1, state@5, patch0@10, patch1@10] gathers rows [4, 5, 3, 1, 2].
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Sequence as SequenceABC

import numpy as np
import torch

from vla_ros.model.config import ModelConfig
from vla_ros.model.timeline import ACTION, IMAGE, PINNED_ORDER, PINNED_STAMP_NS, STATE, TEXT
from vla_ros.tokens.types import Kind, Observation

# Source of a token row, before the pool offsets are known.
SRC_PAD, SRC_PATCH, SRC_STATE, SRC_TEXT, SRC_ACTION = 0, 1, 2, 3, 4


@dataclasses.dataclass(frozen=True)
class ChunkSpec:
    """A chunk to decode after the observation whose ``key`` is ``anchor``.

    targets: optional (H, J) absolute joint-position targets in raw units (training); rows may be NaN
    where no target exists (those points are left out of the loss).
    """

    anchor: tuple
    targets: np.ndarray | None = None
    aux: np.ndarray | None = None  # (K,) auxiliary target shared by the chunk's tokens (training only)


@dataclasses.dataclass
class TokenSequence:
    """One sequence in token order (numpy). Per-token arrays have length T."""

    images: np.ndarray  # (F, 3, H, W) float32
    states: np.ndarray  # (N, S) float32, raw units
    text: np.ndarray  # (L, 384) float32
    action_index: np.ndarray  # (A,) int64, chunk-query index of each action row
    src: np.ndarray  # (T,) SRC_* of each token
    src_index: np.ndarray  # (T,) row within its source
    kind: np.ndarray  # (T,) int64 Kind
    stamp_ns: np.ndarray  # (T,) int64 masking time
    order: np.ndarray  # (T,) int64 rank in key order (see timeline)
    chunk: np.ndarray  # (T,) int64, -1 unless ACTION
    rope_ns: np.ndarray  # (T,) int64 RoPE time
    targets: np.ndarray  # (T, J) float32 (NaN where none)
    token_obs: np.ndarray  # (T,) index of the source observation in the caller's list, -1 otherwise
    num_patches: int = 0  # P, patch tokens per frame
    aux: np.ndarray | None = None  # (T, K) float32 auxiliary targets (NaN where none), or None
    frame_aux: np.ndarray | None = None  # (F, K) float32 auxiliary target per frame (NaN where none), or None
    image_camera: np.ndarray | None = None  # (F,) int64 camera index of each frame (None: all camera 0)

    @property
    def num_tokens(self) -> int:
        return int(self.kind.shape[0])

    def gather(self) -> np.ndarray:
        """(T,) pool rows for this sequence alone (see the module docstring)."""
        return _gather(
            self.src, self.src_index, self.images.shape[0], self.states.shape[0], self.text.shape[0], self.num_patches
        )


def _gather(src, src_index, n_frames, n_states, n_text, num_patches, offsets=(0, 0, 0, 0)) -> np.ndarray:
    img0 = 1
    st0 = img0 + n_frames * num_patches
    tx0 = st0 + n_states
    ac0 = tx0 + n_text
    starts = np.array([0, img0 + offsets[0], st0 + offsets[1], tx0 + offsets[2], ac0 + offsets[3]], dtype=np.int64)
    out = starts[src] + src_index
    return np.where(src == SRC_PAD, 0, out).astype(np.int64)


def instruction_vector(text: np.ndarray | None, dim: int) -> np.ndarray:
    """(dim,) the instruction as one vector: the mean of its token embeddings (zeros without one).

    The model conditions every camera patch and every action query on it (``VLATransformer.embed``), on
    top of attending to the instruction's tokens; training and the streaming runtime both build it here.
    """
    if text is None or len(text) == 0:
        return np.zeros(dim, np.float32)
    return np.asarray(text, np.float32).mean(axis=0)


def state_reference(observations: SequenceABC[Observation], anchor_key: tuple, n_joints: int) -> np.ndarray | None:
    """Joint positions (n_joints,) of the newest joint state at or before ``anchor_key`` in ``observations``
    (sorted by key), or None when there is none: what the chunk anchored there is an offset from when the
    model's chunks are state-relative (``ModelConfig.relative_actions``). Training, the streaming runtime
    and the full-pass check all take the reference here."""
    i = bisect.bisect_right(observations, anchor_key, key=lambda o: o.key)
    for j in range(i - 1, -1, -1):
        if observations[j].kind == Kind.STATE:
            return np.asarray(observations[j].data[:n_joints], np.float64)
    return None


def pinned_frame(observations: SequenceABC[Observation]) -> Observation | None:
    """The frame a model with ``pin_first_frame`` pins: the main camera's earliest frame by key, or None.
    Training takes it over a whole episode, the streaming runtime over what it has seen since its reset,
    the full-pass check over its stream."""
    frames = [o for o in observations if o.kind == Kind.IMAGE and o.camera == 0]
    return min(frames, key=lambda o: o.key) if frames else None


def validate_observation(obs: Observation, config: ModelConfig) -> None:
    """Raise ValueError naming the field at fault (data enters the model here)."""
    where = f"observation seq={obs.seq} source={obs.source!r}"
    if obs.kind == Kind.IMAGE:
        shape = (3, config.image_height, config.image_width)
        if not 0 <= obs.camera < len(config.cameras):
            raise ValueError(f"{where}: camera {obs.camera} is not one of the model's cameras {config.cameras}")
    elif obs.kind == Kind.STATE:
        shape = (config.state_dim,)
    else:
        raise ValueError(f"{where}: kind={obs.kind!r} is not IMAGE or STATE")
    data = obs.data
    if not isinstance(data, np.ndarray) or data.shape != shape:
        got = getattr(data, "shape", type(data).__name__)
        raise ValueError(f"{where}: data shape {got} != expected {shape} for {Kind(obs.kind).name}")
    if not np.all(np.isfinite(data)):
        raise ValueError(f"{where}: data has non-finite values")


def validate_text(embeddings: np.ndarray, config: ModelConfig) -> np.ndarray:
    emb = np.asarray(embeddings, dtype=np.float32)
    if emb.ndim != 2 or emb.shape[1] != config.text_embedding_dim:
        raise ValueError(f"instruction embeddings shape {emb.shape} != (L, {config.text_embedding_dim})")
    if emb.shape[0] > config.max_text_tokens:
        raise ValueError(f"instruction has {emb.shape[0]} tokens > max_text_tokens={config.max_text_tokens}")
    if not np.all(np.isfinite(emb)):
        raise ValueError("instruction embeddings have non-finite values")
    return emb


def build_sequence(
    config: ModelConfig,
    observations: SequenceABC[Observation] = (),
    text: np.ndarray | None = None,
    chunks: SequenceABC[ChunkSpec] = (),
    validate: bool = True,
    order_start: int = 0,
    anchors: dict[tuple, tuple[int, int]] | None = None,
    frame_aux: SequenceABC[np.ndarray | None] | None = None,
    pinned: Observation | None = None,
) -> TokenSequence:
    """Lay out text, the pinned frame, observations (sorted by key) and chunk tokens; see the module docstring.

    ``pinned``: the pinned frame (a main-camera frame; only for a model with ``pin_first_frame``). It is
    laid out as well when it is also among ``observations``: there it is a frame of the window like any other.

    ``frame_aux``: optional per-observation auxiliary targets (aligned with ``observations``; used for
    frames, None where there is none), kept in frame order as ``TokenSequence.frame_aux``.

    Observations get orders order_start, order_start + 1, ... in key order (the streaming runtime passes
    its running counter). A chunk's anchor is looked up among the observations, else in ``anchors``
    (key -> (stamp_ns, order)) for an anchor already in the runtime's cache.
    """
    if validate:
        for obs in observations:
            validate_observation(obs, config)
    text_arr = (
        np.zeros((0, config.text_embedding_dim), np.float32)
        if text is None
        else (validate_text(text, config) if validate else np.asarray(text, np.float32))
    )
    P, J, H = config.num_visual_tokens, config.action_dim, config.chunk_length
    order = sorted(range(len(observations)), key=lambda i: observations[i].key)
    images, states, frame_targets, cameras = [], [], [], []
    src, src_index, kind, stamp, order_, chunk, rope, token_obs = [], [], [], [], [], [], [], []
    known = dict(anchors or {})

    def add(s, si, k, st, od, ch, rp, ob):
        src.append(s), src_index.append(si), kind.append(k), stamp.append(st), order_.append(od)
        chunk.append(ch), rope.append(rp), token_obs.append(ob)

    for t in range(text_arr.shape[0]):
        add(SRC_TEXT, t, TEXT, 0, -1, -1, 0, -1)
    if pinned is not None:
        if not config.pin_first_frame:
            raise ValueError("a pinned frame was given to a model without pin_first_frame")
        if validate:
            validate_observation(pinned, config)
        if pinned.kind != Kind.IMAGE or pinned.camera != 0:
            raise ValueError(
                f"the pinned frame must be a frame of the main camera, not {Kind(pinned.kind).name} "
                f"camera {pinned.camera}"
            )
        images.append(np.asarray(pinned.data, np.float32))
        cameras.append(config.pinned_camera)
        if frame_aux is not None:
            frame_targets.append(None)  # the frame head learns the window's frames
        for p in range(P):
            add(SRC_PATCH, p, IMAGE, PINNED_STAMP_NS, PINNED_ORDER, -1, pinned.stamp_ns, -1)
    for rank, i in enumerate(order):
        obs = observations[i]
        od = order_start + rank
        known[obs.key] = (obs.stamp_ns, od)
        if obs.kind == Kind.IMAGE:
            f = len(images)
            images.append(np.asarray(obs.data, np.float32))
            cameras.append(obs.camera)
            if frame_aux is not None:  # the frame head learns the main view only
                frame_targets.append(frame_aux[i] if obs.camera == 0 else None)
            for p in range(P):
                add(SRC_PATCH, f * P + p, IMAGE, obs.stamp_ns, od, -1, obs.stamp_ns, i)
        else:
            states.append(np.asarray(obs.data, np.float32))
            add(SRC_STATE, len(states) - 1, STATE, obs.stamp_ns, od, -1, obs.stamp_ns, i)
    n_obs_tokens = len(src)
    action_index = []
    targets = np.full((n_obs_tokens + H * len(chunks), J), np.nan, np.float32)
    offsets = config.chunk_offsets_ns
    aux_dims = {np.asarray(spec.aux).shape[0] for spec in chunks if spec.aux is not None}
    if len(aux_dims) > 1:
        raise ValueError(f"chunks carry auxiliary targets of different sizes {sorted(aux_dims)}")
    aux = np.full((n_obs_tokens + H * len(chunks), aux_dims.pop()), np.nan, np.float32) if aux_dims else None
    for c, spec in enumerate(chunks):
        if spec.anchor not in known:
            raise ValueError(f"chunk {c}: anchor {spec.anchor} is not one of the sequence's observations")
        anchor_ns, anchor_order = known[spec.anchor]
        if spec.targets is not None:
            t = np.asarray(spec.targets, np.float32)
            if t.shape != (H, J):
                raise ValueError(f"chunk {c}: targets shape {t.shape} != ({H}, {J})")
            targets[len(src) : len(src) + H] = t
        if spec.aux is not None:
            aux[len(src) : len(src) + H] = np.asarray(spec.aux, np.float32)
        for k in range(H):
            add(SRC_ACTION, len(action_index), ACTION, anchor_ns, anchor_order, c, anchor_ns + offsets[k], -1)
            action_index.append(k)
    i64 = lambda v: np.asarray(v, dtype=np.int64)  # noqa: E731
    return TokenSequence(
        images=np.stack(images) if images else np.zeros((0, 3, config.image_height, config.image_width), np.float32),
        states=np.stack(states) if states else np.zeros((0, config.state_dim), np.float32),
        text=text_arr,
        action_index=i64(action_index),
        src=i64(src),
        src_index=i64(src_index),
        kind=i64(kind),
        stamp_ns=i64(stamp),
        order=i64(order_),
        chunk=i64(chunk),
        rope_ns=i64(rope),
        targets=targets,
        token_obs=i64(token_obs),
        num_patches=P,
        aux=aux,
        frame_aux=_frame_aux_rows(frame_targets) if frame_aux is not None else None,
        image_camera=i64(cameras),
    )


def _frame_aux_rows(rows: list) -> np.ndarray | None:
    """(F, K) from per-frame targets (None -> NaN row); None when no frame has one."""
    k = next((np.asarray(r).shape[0] for r in rows if r is not None), 0)
    if not k:
        return None
    return np.stack([np.full(k, np.nan, np.float32) if r is None else np.asarray(r, np.float32) for r in rows])


def frame_cameras(seq: TokenSequence) -> np.ndarray:
    """(F,) camera index of each frame of ``seq``."""
    return seq.image_camera if seq.image_camera is not None else np.zeros(seq.images.shape[0], np.int64)


@dataclasses.dataclass
class TokenBatch:
    """A padded batch of sequences, as torch tensors. Pool inputs are shared by the whole batch.

    Padding tokens have valid False and gather 0 (the zero row); their targets are NaN and
    target_valid False, so they are never attended to and never enter the loss.
    """

    images: torch.Tensor  # (F, 3, H, W)
    states: torch.Tensor  # (N, S)
    text: torch.Tensor  # (L, 384)
    action_index: torch.Tensor  # (A,)
    gather: torch.Tensor  # (B, T)
    kind: torch.Tensor  # (B, T)
    stamp_ns: torch.Tensor
    order: torch.Tensor
    chunk: torch.Tensor
    rope_ns: torch.Tensor
    valid: torch.Tensor  # (B, T) bool
    targets: torch.Tensor  # (B, T, J)
    target_valid: torch.Tensor  # (B, T) bool
    instruction: torch.Tensor | None = None  # (B, 384) instruction_vector of each sequence
    frame_batch: torch.Tensor | None = None  # (F,) the sequence each pooled frame belongs to
    aux: torch.Tensor | None = None  # (B, T, K) auxiliary targets (0 where none), training only
    aux_valid: torch.Tensor | None = None  # (B, T) bool
    frame_aux: torch.Tensor | None = None  # (F, K) per pooled frame (0 where none), training only
    frame_aux_valid: torch.Tensor | None = None  # (F,) bool
    image_camera: torch.Tensor | None = None  # (F,) camera index of each pooled frame

    def to(self, device: torch.device | str) -> TokenBatch:
        return TokenBatch(
            **{
                f.name: None if getattr(self, f.name) is None else getattr(self, f.name).to(device)
                for f in dataclasses.fields(self)
            }
        )

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.gather.shape)


def collate(sequences: SequenceABC[TokenSequence]) -> TokenBatch:
    """Pad to the longest sequence and pool the inputs of all sequences (offsets per source)."""
    if not sequences:
        raise ValueError("collate needs at least one sequence")
    P = sequences[0].num_patches
    B, T = len(sequences), max(s.num_tokens for s in sequences)
    J = sequences[0].targets.shape[1]
    n_frames = sum(s.images.shape[0] for s in sequences)
    n_states = sum(s.states.shape[0] for s in sequences)
    n_text = sum(s.text.shape[0] for s in sequences)
    gather = np.zeros((B, T), np.int64)
    fields = {name: np.zeros((B, T), np.int64) for name in ("kind", "stamp_ns", "order", "rope_ns")}
    fields["chunk"] = np.full((B, T), -1, np.int64)
    valid = np.zeros((B, T), bool)
    targets = np.full((B, T, J), np.nan, np.float32)
    K = next((s.aux.shape[1] for s in sequences if s.aux is not None), 0)
    aux = np.full((B, T, K), np.nan, np.float32) if K else None
    offs = [0, 0, 0, 0]
    for b, s in enumerate(sequences):
        n = s.num_tokens
        gather[b, :n] = _gather(s.src, s.src_index, n_frames, n_states, n_text, P, offs)
        for name in fields:
            fields[name][b, :n] = getattr(s, name)
        valid[b, :n] = True
        targets[b, :n] = s.targets
        if aux is not None and s.aux is not None:
            aux[b, :n] = s.aux
        offs = [
            offs[0] + s.images.shape[0] * P,
            offs[1] + s.states.shape[0],
            offs[2] + s.text.shape[0],
            offs[3] + s.action_index.shape[0],
        ]
    target_valid = valid & (fields["kind"] == ACTION) & np.all(np.isfinite(targets), axis=-1)
    cat = lambda name: torch.from_numpy(np.concatenate([getattr(s, name) for s in sequences]))  # noqa: E731
    aux_fields = {}
    if aux is not None:
        aux_valid = valid & (fields["kind"] == ACTION) & np.all(np.isfinite(aux), axis=-1)
        aux_fields = {"aux": torch.from_numpy(np.nan_to_num(aux, nan=0.0)), "aux_valid": torch.from_numpy(aux_valid)}
    if K and any(s.frame_aux is not None for s in sequences):
        frame_aux = np.concatenate(
            [
                s.frame_aux if s.frame_aux is not None else np.full((s.images.shape[0], K), np.nan, np.float32)
                for s in sequences
            ]
        )
        aux_fields["frame_aux"] = torch.from_numpy(np.nan_to_num(frame_aux, nan=0.0))
        aux_fields["frame_aux_valid"] = torch.from_numpy(np.all(np.isfinite(frame_aux), axis=-1))
    return TokenBatch(
        images=cat("images"),
        states=cat("states"),
        text=cat("text"),
        action_index=cat("action_index"),
        gather=torch.from_numpy(gather),
        valid=torch.from_numpy(valid),
        targets=torch.from_numpy(np.nan_to_num(targets, nan=0.0)),
        target_valid=torch.from_numpy(target_valid),
        instruction=torch.from_numpy(np.stack([instruction_vector(s.text, s.text.shape[1]) for s in sequences])),
        frame_batch=torch.from_numpy(
            np.concatenate([np.full(s.images.shape[0], b, np.int64) for b, s in enumerate(sequences)])
        ),
        image_camera=torch.from_numpy(np.concatenate([frame_cameras(s) for s in sequences])),
        **{name: torch.from_numpy(v) for name, v in fields.items()},
        **aux_fields,
    )

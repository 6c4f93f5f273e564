"""Streaming runtime: an exact rolling KV cache over timed tokens, with torch or ONNX Runtime underneath.

Each tick only the tokens that arrived since the last one are run through the model, against the keys
and values the cache already holds; the result equals a full forward pass over the whole stream with the
same mask (``timeline.visibility``), because every token's keys/values depend only on tokens at most
W seconds older than it, which the cache still holds when it arrives (the Mistral sliding-window argument,
with time instead of indices). Rules that keep it exact:

* Eviction by age, never by count: an observation token is dropped once it is more than
  W + max_lateness older than the newest observation. No future token can see it (queries are never
  older than newest - max_lateness, and they look back at most W).
* The instruction is pinned at the front of the cache. A new instruction changes every token's
  keys/values, so the cache is rebuilt from the raw observations the runtime keeps (those within
  W + max_lateness); after a rebuild the outputs equal a full pass over that retained window.
* A model with ``pin_first_frame`` pins the first main-camera frame after a reset behind the
  instruction (``timeline``: every later token sees it); pinning it rebuilds the cache the same way.
* Out-of-order arrival: an observation whose ``key`` (stamp_ns, kind, source) is older than the newest
  one held is inserted where it belongs: the cache is cut back to the tokens before it and the newer
  raw observations are replayed. One more than max_lateness behind the newest is dropped (and
  counted): the tokens it would need may have been evicted.
* Action chunks are decoded after the newest observation against the cache and never written into it,
  so "rolling back" the chunk costs nothing.

Cache layout (slots of a preallocated buffer, ``capacity`` tokens; keys stored rotated, see ``layers``)::

    slot:  0 .. L-1     L .. start-1         start .. end-1              end .. capacity-1
           instruction  evicted (masked)     live observation tokens,    free
           (+ pinned                         in key order
           frame)

Example (L = 2, P = 2 patches, W + lateness = 100 ms, stamps in ms): after S@0 I@20 S@90 the slots hold
[t0 t1 S0 I20 I20 S90], start = 2, end = 6. S@130 arrives: it runs against slots 0..5 and is written to
slot 6; then S@0 and I@20 (130 - 20 = 110 > 100) are evicted: start = 5. When the evicted block grows (or
the free space runs out), live slots are moved down to slot L (compaction), so memory stays bounded for
any uptime.
Memory: 2 (keys, values) x layers x kv_heads x capacity x head_dim float32, allocated once.
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import torch

from vla_ros.model.config import ModelConfig
from vla_ros.model.model import StepGraph, VLATransformer
from vla_ros.model.sequence import (
    SRC_PATCH,
    ChunkSpec,
    build_sequence,
    instruction_vector,
    pinned_frame,
    state_reference,
    validate_observation,
    validate_text,
)
from vla_ros.model.timeline import TokenTimes, additive_mask_np, rope_tables_np, visibility
from vla_ros.tokens.types import Instruction, Kind, Observation

log = logging.getLogger(__name__)


class PolicyNotReady(RuntimeError):
    """A chunk was asked for before any observation arrived, or, for a state-relative model, before a
    joint state it could be relative to."""


@dataclasses.dataclass(frozen=True)
class PolicyChunk:
    """H future joint-position targets decoded after the newest observation.

    Args:
        stamp_ns: stamp of the newest observation used (the ActionChunk / JointTrajectory header stamp).
        t_s: that observation's t_s (seconds since the token stream's epoch).
        time_from_start_s: (H,) offsets (k + 1) / chunk_rate_hz of the points from stamp_ns.
        positions: (H, J) absolute targets in rad / m, columns in ``joint_names`` order.
        joint_names: the model's joint order (COMMANDED_JOINTS for the shipped model).
        hidden: (H, D) final hidden states of the action tokens, when asked for (tests, probes).
    """

    stamp_ns: int
    t_s: float
    time_from_start_s: np.ndarray
    positions: np.ndarray
    joint_names: tuple[str, ...]
    hidden: np.ndarray | None = None


@dataclasses.dataclass
class ObserveReport:
    """What one ``observe`` call did. ``hidden`` and the token keys only when asked for."""

    accepted: int = 0
    replayed: int = 0  # observations recomputed because an older one arrived late
    dropped_late: int = 0  # older than max_lateness behind the newest: not inserted
    duplicates: int = 0  # same key (stamp_ns, kind, source) as one already held
    evicted_tokens: int = 0
    overflow_tokens: int = 0  # evicted early because the cache was full (outputs no longer exact)
    steps: int = 0  # model calls
    hidden: np.ndarray | None = None  # (T, D) for every token computed (replays included), in run order
    token_keys: list[tuple] | None = None  # (T,) key of each token's observation
    token_patch: np.ndarray | None = None  # (T,) patch index within its frame, 0 for states


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """ "auto" = CUDA when available, else CPU."""
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


class TorchBackend:
    """Runs ``StepGraph`` with torch; the cache lives on the model's device."""

    name = "torch"

    def __init__(self, model: VLATransformer, device: str | torch.device = "auto") -> None:
        self.device = resolve_device(device)
        if self.device.type == "cuda":
            # Full float32: TF32 (cuDNN's default for convolutions) rounds to 10-bit mantissas, which breaks
            # the 1e-4 streamed-vs-full agreement, and these small matmuls gain nothing from it.
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
        self.config = model.config
        self.model = model.to(self.device).eval()
        self.graph = StepGraph(self.model)
        self.cache_k: torch.Tensor | None = None
        self.cache_v: torch.Tensor | None = None

    def allocate(self, capacity: int) -> None:
        c = self.config
        shape = (c.num_hidden_layers, c.num_key_value_heads, capacity, c.head_dim)
        self.cache_k = torch.zeros(shape, device=self.device)
        self.cache_v = torch.zeros(shape, device=self.device)

    @property
    def cache_bytes(self) -> int:
        return 0 if self.cache_k is None else self.cache_k.nbytes + self.cache_v.nbytes

    @torch.inference_mode()
    def run(self, inputs: dict[str, np.ndarray], past_len: int, keep: int) -> tuple[np.ndarray, np.ndarray]:
        """One step against cache slots [0, past_len); the first ``keep`` new tokens' keys/values are
        written at past_len (action tokens come last and are never kept)."""
        dev = self.device
        args = [
            torch.from_numpy(np.ascontiguousarray(inputs[name])).to(dev, non_blocking=True)
            for name in StepGraph.base_input_names[:8]
        ]
        past_k = self.cache_k[:, :, :past_len]
        past_v = self.cache_v[:, :, :past_len]
        instruction = torch.from_numpy(np.ascontiguousarray(inputs["instruction"])).to(dev, non_blocking=True)
        extra = (
            [torch.from_numpy(np.ascontiguousarray(inputs["image_camera"])).to(dev)]
            if "image_camera" in self.graph.input_names
            else []
        )
        actions, hidden, new_k, new_v = self.graph(*args, past_k, past_v, instruction, *extra)
        if keep:
            self.cache_k[:, :, past_len : past_len + keep] = new_k[:, :, :keep]
            self.cache_v[:, :, past_len : past_len + keep] = new_v[:, :, :keep]
        return actions.cpu().numpy(), hidden.cpu().numpy()

    def move(self, src: int, dst: int, n: int) -> None:
        """Copy slots [src, src+n) to [dst, dst+n), dst < src (compaction)."""
        self.cache_k[:, :, dst : dst + n] = self.cache_k[:, :, src : src + n].clone()
        self.cache_v[:, :, dst : dst + n] = self.cache_v[:, :, src : src + n].clone()

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def describe(self) -> str:
        return f"torch:{self.device}"


class StreamingPolicy:
    """The policy the node drives: ``set_instruction``, ``observe`` new tokens, ``predict_action_chunk``.

    Build it with ``StreamingPolicy.from_pretrained("models/<name>")`` (torch or ONNX backend) or
    ``StreamingPolicy.from_model(model)``. Not thread-safe: the node serialises calls. Time is never
    read from a clock: only the observations' stamps matter. After a clock jump (a simulator reset) call
    ``reset()``: observations far behind the newest one are otherwise dropped as late.
    """

    def __init__(self, config: ModelConfig, backend) -> None:
        self.config = config
        self.backend = backend
        self.capacity = config.cache_capacity
        # A step's tokens must fit beside a full window: cap a step at a quarter of the capacity.
        self.max_step_tokens = max(config.num_visual_tokens + 1, (self.capacity - config.prefix_tokens) // 4)
        self.backend.allocate(self.capacity)
        # Per-slot metadata of the cache (numpy: masks are built on the CPU, whatever the backend).
        self._kind = np.zeros(self.capacity, np.int64)
        self._stamp = np.zeros(self.capacity, np.int64)
        self._order = np.zeros(self.capacity, np.int64)
        self._valid = np.zeros(self.capacity, bool)
        self._text: np.ndarray | None = None
        self._pin: Observation | None = None  # the pinned frame (pin_first_frame), in the cache's prefix
        self._instruction_vec = instruction_vector(None, config.text_embedding_dim)
        self.instruction: Instruction | None = None
        # The retained raw window, sorted by key, with the order each was run under (None: not run yet).
        self._raw: list[Observation] = []
        self._raw_keys: list[tuple] = []
        self._raw_order: list[int | None] = []
        self._next_order = 0
        self.total_overflow_tokens = 0
        self.total_dropped_late = 0
        self.last_report: ObserveReport | None = None
        self._fused_chunk: tuple[Observation, np.ndarray] | None = None  # (anchor, actions) decoded within a tick
        self._clear_cache()

    # ----- construction -----
    @classmethod
    def from_model(
        cls, model: VLATransformer, device: str | torch.device = "auto", threads: int | None = None
    ) -> StreamingPolicy:
        """Wrap a model with the torch backend. threads: torch intra-op threads for the process (1 is
        best for a streaming tick on a CPU shared with other nodes; None leaves torch's setting)."""
        if threads:
            torch.set_num_threads(threads)
        return cls(model.config, TorchBackend(model, device))

    @classmethod
    def from_pretrained(
        cls, folder: str | Path, backend: str = "torch", device: str = "auto", threads: int | None = None
    ) -> StreamingPolicy:
        """Load ``models/<name>`` (config.json + model.safetensors, checked) and wrap it.

        backend "torch": device "auto" | "cpu" | "cuda[:i]". backend "onnx": runs ``model.onnx`` from the
        same folder with ONNX Runtime (CUDA execution provider when device allows and it is available).
        threads: intra-op threads (torch: process-wide; ONNX Runtime: this session).
        """
        from vla_ros.model.io import check_onnx, load_config, load_model

        if backend == "torch":
            return cls.from_model(load_model(folder), device, threads)
        if backend == "onnx":
            from vla_ros.model.onnx_backend import OnnxBackend

            config = load_config(folder)
            return cls(config, OnnxBackend(check_onnx(folder), config, device=device, threads=threads))
        raise ValueError(f"backend={backend!r} is not 'torch' or 'onnx'")

    # ----- state -----
    def _clear_cache(self) -> None:
        self._end = 0
        self._n_prefix = 0
        self._start = 0
        self._valid[:] = False
        self._next_order = 0
        self._raw_order = [None] * len(self._raw)

    def reset(self) -> None:
        """New episode: forget every observation and the pinned frame, keep the instruction (its tokens are
        recomputed). A model with ``pin_first_frame`` pins the first main-camera frame observed after this."""
        self._raw.clear()
        self._raw_keys.clear()
        self._pin = None
        self._rebuild()

    @property
    def ready(self) -> bool:
        """True once an observation is held, so a chunk can be decoded."""
        return bool(self._raw)

    @property
    def newest_key(self) -> tuple | None:
        return self._raw_keys[-1] if self._raw_keys else None

    def raw_observations(self) -> list[Observation]:
        """The retained raw window (within W + lateness of the newest), in key order."""
        return list(self._raw)

    @property
    def pinned(self) -> Observation | None:
        """The pinned frame (``ModelConfig.pin_first_frame``), None before the first main-camera frame."""
        return self._pin

    @property
    def cached_tokens(self) -> int:
        """Live tokens in the cache (instruction, pinned frame, observation tokens in the window)."""
        return self._n_prefix + (self._end - self._start)

    @property
    def cache_mb(self) -> float:
        """Preallocated KV cache size in MiB (fixed for the runtime's life)."""
        return self.backend.cache_bytes / 2**20

    def set_instruction(self, instruction: Instruction | np.ndarray | None) -> None:
        """Pin a new instruction (or None for none) and rebuild the cache from the retained observations."""
        if instruction is None:
            self._text, self.instruction = None, None
        elif isinstance(instruction, Instruction):
            self._text, self.instruction = validate_text(instruction.embeddings, self.config), instruction
        else:
            self._text, self.instruction = validate_text(instruction, self.config), None
        self._instruction_vec = instruction_vector(self._text, self.config.text_embedding_dim)
        self._rebuild()

    def _rebuild(self) -> None:
        self._write_prefix()
        self._run_from(0, ObserveReport())

    def _write_prefix(self) -> None:
        """Empty the cache and write the tokens every later one sees: the instruction and the pinned frame.
        The retained observations are left to be run again (their orders are cleared)."""
        self._clear_cache()
        if (self._text is not None and self._text.shape[0]) or self._pin is not None:
            self._step([], text=self._text, pinned=self._pin)
            self._n_prefix = self._start = self._end

    # ----- ticks -----
    def observe(
        self, observations: Observation | Iterable[Observation], return_hidden: bool = False, _decode: bool = False
    ) -> ObserveReport:
        """Insert new observations (any order) and run their tokens through the model. Late ones are
        inserted exactly (cache cut back, newer ones replayed); duplicates and ones too late are counted
        in the report and skipped. Each observation is validated first: a bad one raises ValueError
        naming the field, and then nothing of the call is inserted."""
        if isinstance(observations, Observation):
            observations = [observations]
        batch = sorted(observations, key=lambda o: o.key)
        for obs in batch:
            validate_observation(obs, self.config)
        report = ObserveReport()
        accepted: list[Observation] = []
        if return_hidden:
            report.hidden = np.zeros((0, self.config.hidden_size), np.float32)
            report.token_keys, report.token_patch = [], np.zeros(0, np.int64)
        for obs in batch:
            key = obs.key
            pos = bisect.bisect_left(self._raw_keys, key)
            if pos < len(self._raw_keys) and self._raw_keys[pos] == key:
                report.duplicates += 1
                continue
            if pos < len(self._raw_keys) and self._raw_keys[-1][0] - obs.stamp_ns > self.config.max_lateness_ns:
                report.dropped_late += 1  # the tokens it would attend to may be gone: not exact, drop
                continue
            self._raw.insert(pos, obs)
            self._raw_keys.insert(pos, key)
            self._raw_order.insert(pos, None)
            accepted.append(obs)
            report.accepted += 1
        self.total_dropped_late += report.dropped_late
        if self.config.pin_first_frame:
            # The first main-camera frame pins (an earlier one arriving late takes its place): every token
            # sees it, so the cache is built again from the prefix, as at an instruction.
            candidate = pinned_frame(accepted)
            if candidate is not None and (self._pin is None or candidate.key < self._pin.key):
                self._pin = candidate
                self._write_prefix()
        first = next((i for i, od in enumerate(self._raw_order) if od is None), None)
        if first is not None:
            report.replayed = sum(od is not None for od in self._raw_order[first:])
            self._run_from(first, report, decode=_decode)
        self._trim_raw()
        return report

    def predict_action_chunk(self, return_hidden: bool = False) -> PolicyChunk:
        """Decode the chunk after the newest observation with the cache (nothing is written to it)."""
        if not self._raw:
            raise PolicyNotReady("no observation received yet: cannot decode a chunk")
        anchor = self._raw[-1]
        anchors = {anchor.key: (anchor.stamp_ns, self._raw_order[-1])}
        actions, hidden, _ = self._step([], chunk=ChunkSpec(anchor.key), anchors=anchors)
        return self._chunk(anchor, actions, hidden if return_hidden else None)

    def _chunk(self, anchor: Observation, actions: np.ndarray, hidden: np.ndarray | None) -> PolicyChunk:
        H = self.config.chunk_length
        positions = actions[-H:].astype(np.float64)
        if self.config.relative_actions:
            reference = state_reference(self._raw, anchor.key, len(self.config.joint_names))
            if reference is None:
                raise PolicyNotReady(
                    "no joint state at or before the newest observation: a state-relative chunk (relative_actions) "
                    "cannot be decoded"
                )
            positions = positions + reference
        return PolicyChunk(
            stamp_ns=int(anchor.stamp_ns),
            t_s=float(anchor.t_s),
            time_from_start_s=np.asarray(self.config.chunk_offsets_ns, np.float64) / 1e9,
            positions=positions,
            joint_names=self.config.joint_names,
            hidden=None if hidden is None else hidden[-H:],
        )

    def select_action(self, observations: Observation | Iterable[Observation]) -> PolicyChunk:
        """One tick of the node: observe the new observations and decode the chunk after the newest.

        Equal to observe() then predict_action_chunk(), but when the new tokens fit one step the chunk's
        tokens ride along in the same model call (only the observation tokens are written to the cache),
        which saves a call's fixed cost. The tick's ObserveReport is kept in ``last_report``.
        """
        self._fused_chunk = None
        self.last_report = self.observe(observations, _decode=True)
        if self._fused_chunk is not None:
            anchor, actions = self._fused_chunk
            self._fused_chunk = None
            return self._chunk(anchor, actions, None)  # after the tick: a refusal leaves the cache consistent
        return self.predict_action_chunk()

    # ----- internals -----
    def _run_from(self, first: int, report: ObserveReport, decode: bool = False) -> None:
        """Run raw observations first.. through the model, after cutting the cache back to the tokens of
        observations before ``first`` (those after it were computed without the newcomer: replay them).
        With ``decode``, the last step also decodes the chunk after the newest observation."""
        later = [od for od in self._raw_order[first:] if od is not None]
        if later:
            self._cut_back(min(later))
        for i in range(first, len(self._raw)):
            self._raw_order[i] = None
        P = self.config.num_visual_tokens
        i = first
        while i < len(self._raw):
            j, tokens = i, 0
            while j < len(self._raw):
                n = P if self._raw[j].kind == Kind.IMAGE else 1
                if j > i and tokens + n > self.max_step_tokens:
                    break
                tokens += n
                j += 1
            group = self._raw[i:j]
            report.evicted_tokens += self._evict_by_age()
            report.overflow_tokens += self._make_room(tokens)
            chunk = ChunkSpec(group[-1].key) if decode and j == len(self._raw) else None
            actions, hidden, seq = self._step(group, chunk=chunk, order_start=self._next_order)
            if chunk is not None:
                self._fused_chunk = (group[-1], actions[-self.config.chunk_length :])
                n_obs = seq.num_tokens - self.config.chunk_length
                actions, hidden = actions[:n_obs], hidden[:n_obs]
                seq = dataclasses.replace(
                    seq, src=seq.src[:n_obs], src_index=seq.src_index[:n_obs], token_obs=seq.token_obs[:n_obs]
                )
            for k in range(i, j):  # build_sequence ranks the (already sorted) group in order
                self._raw_order[k] = self._next_order + (k - i)
            self._next_order += j - i
            report.steps += 1
            if report.hidden is not None:
                report.hidden = np.concatenate([report.hidden, hidden])
                report.token_keys.extend(group[t].key for t in seq.token_obs)
                report.token_patch = np.concatenate(
                    [report.token_patch, np.where(seq.src == SRC_PATCH, seq.src_index % P, 0)]
                )
            i = j
        report.evicted_tokens += self._evict_by_age()
        self.total_overflow_tokens += report.overflow_tokens

    def _cut_back(self, order: int) -> None:
        """Drop cached observation tokens whose order is >= order (a suffix: slots are in key order)."""
        lo, hi = self._start, self._end
        self._end = lo + int(np.count_nonzero(self._order[lo:hi] < order))
        self._valid[self._end : hi] = False

    def _evict_by_age(self) -> int:
        """Mark observation tokens older than (newest cached) - (W + lateness) as evicted (masked now,
        compacted later). The reference is the newest token already *run*, not the newest received: a
        batch may hold a second of data whose early tokens still need the old ones."""
        if self._end <= self._start:
            return 0
        horizon = int(self._stamp[self._end - 1]) - (self.config.window_ns + self.config.max_lateness_ns)
        n_old = int(np.searchsorted(self._stamp[self._start : self._end], horizon, side="left"))
        self._valid[self._start : self._start + n_old] = False
        self._start += n_old
        return n_old

    def _make_room(self, tokens: int) -> int:
        """Compact when the evicted block is large or the free space is short; if a full window plus the
        step still does not fit (inputs faster than the nominal rates), evict the oldest tokens early."""
        dead = self._start - self._n_prefix
        if dead and (self._end + tokens > self.capacity or dead >= max(32, self.capacity // 8)):
            live = self._end - self._start
            self.backend.move(self._start, self._n_prefix, live)
            for arr in (self._kind, self._stamp, self._order, self._valid):
                arr[self._n_prefix : self._n_prefix + live] = arr[self._start : self._end].copy()
            self._valid[self._n_prefix + live : self._end] = False
            self._start, self._end = self._n_prefix, self._n_prefix + live
        overflow = max(0, self._end + tokens - self.capacity)
        if not overflow:
            return 0
        # Evict whole observations, oldest first (a frame's patches share one order), then compact.
        cut = min(self._end - self._start, overflow)
        while self._start + cut < self._end and self._order[self._start + cut] == self._order[self._start + cut - 1]:
            cut += 1
        log.warning(
            "KV cache full (capacity %d tokens): evicting %d tokens early; outputs are not exact until they would have "
            "aged out. Raise max_cache_tokens or check the input rates.",
            self.capacity,
            cut,
        )
        self._valid[self._start : self._start + cut] = False
        self._start += cut
        self._make_room(tokens)
        return cut

    def _step(
        self,
        observations: list[Observation],
        text: np.ndarray | None = None,
        chunk: ChunkSpec | None = None,
        anchors: dict | None = None,
        order_start: int = 0,
        pinned: Observation | None = None,
    ):
        """Run new tokens against the cache [0, end); write the text and observation tokens at end (the
        chunk's action tokens, last in the sequence, are never written)."""
        cfg = self.config
        seq = build_sequence(
            cfg,
            observations,
            text,
            [chunk] if chunk else (),
            validate=False,
            order_start=order_start,
            anchors=anchors,
            pinned=pinned,
        )
        T, end = seq.num_tokens, self._end
        q = TokenTimes(seq.kind, seq.stamp_ns, seq.order, seq.chunk, np.ones(T, bool))
        k = TokenTimes(
            np.concatenate([self._kind[:end], seq.kind]),
            np.concatenate([self._stamp[:end], seq.stamp_ns]),
            np.concatenate([self._order[:end], seq.order]),
            np.concatenate([np.full(end, -1), seq.chunk]),
            np.concatenate([self._valid[:end], np.ones(T, bool)]),
        )
        mask = additive_mask_np(visibility(q, k, cfg.window_ns))  # (T, end + T)
        cos, sin = rope_tables_np(seq.rope_ns, seq.kind, cfg.rope_periods_ns)
        inputs = dict(
            images=seq.images,
            states=seq.states,
            text=seq.text,
            action_index=seq.action_index,
            gather=seq.gather(),
            cos=cos,
            sin=sin,
            mask=mask,
            instruction=self._instruction_vec,
            image_camera=seq.image_camera,
        )
        keep = T - (self.config.chunk_length if chunk else 0)
        actions, hidden = self.backend.run(inputs, end, keep)
        if keep:
            sl = slice(end, end + keep)
            self._kind[sl], self._stamp[sl] = seq.kind[:keep], seq.stamp_ns[:keep]
            self._order[sl], self._valid[sl] = seq.order[:keep], True
            self._end = end + keep
        return actions, hidden, seq

    def _trim_raw(self) -> None:
        """Keep raw observations within W + lateness of the newest (for replays and rebuilds)."""
        if not self._raw_keys:
            return
        horizon = self._raw_keys[-1][0] - (self.config.window_ns + self.config.max_lateness_ns)
        n_old = bisect.bisect_left(self._raw_keys, (horizon,))
        if n_old:
            del self._raw[:n_old]
            del self._raw_keys[:n_old]
            del self._raw_order[:n_old]

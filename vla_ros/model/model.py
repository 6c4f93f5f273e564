"""The streaming vision-language-action Transformer (torch; no rclpy).

A decoder-only Transformer over timed tokens (see docs/architecture.md, "Timed tokens and datasets"): camera
patches, joint states, the pinned instruction and the action queries of a chunk, each with its own timestamp. Time is
the position (continuous-time RoPE, ``timeline``), attention is limited per token to a window of W
seconds (plus the instruction), and the same mask is used in training (``forward``), in the streaming
runtime and in the exported ONNX step, which is what makes the cached stream exactly equal to a full pass.

``VLATransformer.step`` is the single computation every path shares: embed the new tokens (``StepInputs``),
run them through the blocks against past keys/values, return the final hidden states, the action head's
output and the new tokens' keys/values. Training calls it with no past; the runtime with its cache;
``StepGraph`` wraps it for ONNX export with the KV cache as explicit (positional) inputs/outputs.

The model knows no task: a task's extra heads and losses (``vla_ros.tasks``, e.g. the cup task's) are
attached by the task that claims the config, under the task's own attribute names.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn as nn

from vla_ros.model.config import ModelConfig
from vla_ros.model.layers import Block, PatchEncoder, RMSNorm, StateEncoder, TextProjection
from vla_ros.model.sequence import TokenBatch
from vla_ros.model.timeline import ACTION, IMAGE, STATE, TEXT, TokenTimes, additive_mask, rope_tables, visibility
from vla_ros.tasks import task_of


@dataclasses.dataclass
class StepInputs:
    """One step's inputs, batch first (see ``sequence`` for the token layout).

    images (F, 3, H, W), states (N, S), text (L, 384), action_index (A,) int64, gather (B, T) int64, cos/sin
    (B, T, d/4), mask (B, 1, T, C+T) additive float, past_k / past_v (layers, B, G, C, d), instruction (B, 384)
    (``sequence.instruction_vector``); frame_batch (F,) the sequence of each frame (None: all frames belong
    to sequence 0), image_camera (F,) each frame's camera (None: camera 0)."""

    images: torch.Tensor
    states: torch.Tensor
    text: torch.Tensor
    action_index: torch.Tensor
    gather: torch.Tensor
    cos: torch.Tensor
    sin: torch.Tensor
    mask: torch.Tensor
    past_k: torch.Tensor
    past_v: torch.Tensor
    instruction: torch.Tensor
    frame_batch: torch.Tensor | None = None
    image_camera: torch.Tensor | None = None


@dataclasses.dataclass
class StepOutput:
    hidden: torch.Tensor  # (B, T, D) after the final norm
    actions: torch.Tensor  # (B, T, J) absolute joint positions (denormalised); meaningful on ACTION rows
    new_k: torch.Tensor  # (layers, B, G, T, d) keys of the new tokens, rotated/stored form (see layers)
    new_v: torch.Tensor  # (layers, B, G, T, d)
    weights: list[torch.Tensor] | None = None  # per layer (B, H, T, C+T) when asked for
    keypoints: torch.Tensor | None = None  # (F, 2 c2) each frame's instruction-conditioned keypoints


class VLATransformer(nn.Module):
    """Encoders -> modality embeddings -> pre-norm blocks -> final RMSNorm -> action head."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        D, J = config.hidden_size, config.action_dim
        self.patch_encoder = PatchEncoder(config)
        self.state_encoder = StateEncoder(config)
        self.text_projection = TextProjection(config)
        # The instruction as one vector conditions camera patches (FiLM: scale and shift, as in RT-1's
        # FiLM-EfficientNet) and action queries (added). Attention alone starts out spreading an action
        # query's weight over hundreds of patches and a handful of word tokens, so the colour word barely
        # reaches the patches that matter; with this the "which cup" signal is there from the first layer.
        # Zero-initialised: training starts from the unconditioned model.
        self.instruction_norm = RMSNorm(config.text_embedding_dim, config.rms_norm_eps)
        self.instruction_proj = nn.Linear(config.text_embedding_dim, 3 * D)
        self.modality = nn.Embedding(4, D)  # indexed by Kind: TEXT, IMAGE, STATE, ACTION
        # Which camera a frame's patches come from (the patch encoder is shared), and a row for the pinned
        # frame (pin_first_frame); a one-camera model without a pin has none.
        self.camera_embedding = nn.Embedding(config.frame_embeddings, D) if config.frame_embeddings else None
        self.action_queries = nn.Parameter(torch.zeros(config.chunk_length, D))  # one per chunk point
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(D, config.rms_norm_eps)
        self.action_head = nn.Linear(D, J)
        self.task = task_of(config)  # the task that claims the config attaches its heads by their own names
        for name, head in self.task.heads(config).items():
            self.register_module(name, head)
        mean = config.action_mean or (0.0,) * J
        std = config.action_std or (1.0,) * J
        self.register_buffer("action_mean", torch.tensor(mean, dtype=torch.float32), persistent=False)
        self.register_buffer("action_std", torch.tensor(std, dtype=torch.float32), persistent=False)
        self.apply(self._init_weights)
        nn.init.zeros_(self.instruction_proj.weight)
        nn.init.zeros_(self.patch_encoder.film.weight)
        nn.init.normal_(self.action_queries, std=config.initializer_range)
        nn.init.normal_(self.patch_encoder.position, std=config.initializer_range)

    def _init_weights(self, module: nn.Module) -> None:
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=std)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    # ----- pieces -----
    def embed(
        self,
        images: torch.Tensor,
        states: torch.Tensor,
        text: torch.Tensor,
        action_index: torch.Tensor,
        gather: torch.Tensor,
        instruction: torch.Tensor,
        frame_batch: torch.Tensor | None = None,
        image_camera: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Encode every input once, then gather rows into token order (see ``sequence``).

        images (F, 3, H, W), states (N, S), text (L, 384), action_index (A,), gather (B, T), instruction
        (B, 384), frame_batch (F,) the sequence of each frame (None: all frames belong to sequence 0),
        image_camera (F,) each frame's camera (None: camera 0) -> x (B, T, D), is_text (B, T) float 0/1, keypoints (F, 2
        c2).
        """
        D, P = self.config.hidden_size, self.config.num_visual_tokens
        n_frames = images.shape[0]
        instruction = self.instruction_norm(instruction)  # (B, 384)
        frame_instruction = (
            instruction[frame_batch] if frame_batch is not None else instruction[:1].expand(n_frames, -1)
        )
        patches, keypoints = self.patch_encoder.encode(images, frame_instruction)
        patches = patches + self.modality.weight[IMAGE]  # (F, P, D)
        if self.camera_embedding is not None:
            cam = (
                image_camera
                if image_camera is not None
                else torch.zeros(n_frames, dtype=torch.int64, device=images.device)
            )
            patches = patches + self.camera_embedding(cam)[:, None, :]
        patches = patches.reshape(n_frames * P, D)
        state_tok = self.state_encoder(states) + self.modality.weight[STATE]  # (N, D)
        text_tok = self.text_projection(text) + self.modality.weight[TEXT]  # (L, D)
        action_tok = self.action_queries.index_select(0, action_index) + self.modality.weight[ACTION]  # (A, D)
        pool = torch.cat([patches.new_zeros(1, D), patches, state_tok, text_tok, action_tok], dim=0)
        x = pool[gather]  # (B, T, D)
        text_start = 1 + n_frames * P + states.shape[0]
        action_start = text_start + text.shape[0]
        is_text = ((gather >= text_start) & (gather < action_start)).to(x.dtype)
        is_image = ((gather >= 1) & (gather < 1 + n_frames * P)).to(x.dtype)[..., None]
        is_action = (gather >= action_start).to(x.dtype)[..., None]
        cond = self.instruction_proj(instruction)[:, None, :]  # (B, 1, 3D)
        query, scale, shift = cond[..., :D], cond[..., D : 2 * D], cond[..., 2 * D :]
        x = x * (1.0 + is_image * scale) + is_image * shift + is_action * query
        return x, is_text, keypoints

    def backbone(self, x, cos, sin, is_text, mask, past_k, past_v, need_weights: bool = False):
        """x (B, T, D) through all blocks; past_k, past_v (layers, B, G, C, d)."""
        new_k, new_v, weights = [], [], []
        key_scale = self.blocks[0].attn.key_scale(is_text)  # the same for every layer: built once
        for i, block in enumerate(self.blocks):
            x, k, v, w = block(x, cos, sin, key_scale, mask, past_k[i], past_v[i], need_weights)
            new_k.append(k)
            new_v.append(v)
            weights.append(w)
        return self.norm(x), torch.stack(new_k), torch.stack(new_v), (weights if need_weights else None)

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        """Normalised action prediction (..., J) for each token."""
        return self.action_head(hidden)

    def denormalize_actions(self, actions: torch.Tensor) -> torch.Tensor:
        return actions * self.action_std + self.action_mean

    def normalize_actions(self, actions: torch.Tensor) -> torch.Tensor:
        return (actions - self.action_mean) / self.action_std

    def empty_past(self, batch: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
        c = self.config
        shape = (c.num_hidden_layers, batch, c.num_key_value_heads, 0, c.head_dim)
        return torch.zeros(shape, device=device), torch.zeros(shape, device=device)

    # ----- the shared step -----
    def step(self, inputs: StepInputs, need_weights: bool = False) -> StepOutput:
        """New tokens (``inputs.gather`` (B, T)) against past keys/values (see ``StepInputs``)."""
        i = inputs
        x, is_text, keypoints = self.embed(
            i.images, i.states, i.text, i.action_index, i.gather, i.instruction, i.frame_batch, i.image_camera
        )
        hidden, new_k, new_v, weights = self.backbone(
            x, i.cos, i.sin, is_text, i.mask, i.past_k, i.past_v, need_weights
        )
        actions = self.denormalize_actions(self.head(hidden))
        return StepOutput(hidden, actions, new_k, new_v, weights, keypoints)

    # ----- training / full pass -----
    def batch_mask(self, batch: TokenBatch) -> torch.Tensor:
        """Boolean (B, T, T): the streaming rule, AND key padding; padded *queries* see only themselves
        so no softmax row is empty (no NaN); their outputs are never used."""
        times = TokenTimes(batch.kind, batch.stamp_ns, batch.order, batch.chunk, batch.valid)
        allowed = visibility(times, times, self.config.window_ns)  # (B, T, T)
        T = batch.gather.shape[1]
        eye = torch.eye(T, dtype=torch.bool, device=allowed.device)
        return allowed | (eye & ~batch.valid[:, :, None])

    def full_pass(self, batch: TokenBatch, need_weights: bool = False) -> StepOutput:
        """Every token of every sequence at once, no cache: the reference the streaming runtime equals."""
        allowed = self.batch_mask(batch)
        mask = additive_mask(allowed)[:, None]  # (B, 1, T, T)
        cos, sin = rope_tables(batch.rope_ns, batch.kind, self.config.rope_periods_ns)
        past_k, past_v = self.empty_past(batch.gather.shape[0], device=batch.gather.device)
        instruction = batch.instruction
        if instruction is None:
            instruction = torch.zeros(batch.gather.shape[0], self.config.text_embedding_dim, device=batch.gather.device)
        inputs = StepInputs(
            batch.images,
            batch.states,
            batch.text,
            batch.action_index,
            batch.gather,
            cos,
            sin,
            mask,
            past_k,
            past_v,
            instruction,
            batch.frame_batch,
            batch.image_camera,
        )
        return self.step(inputs, need_weights)

    def forward(self, batch: TokenBatch, tool=None) -> tuple[torch.Tensor, dict]:
        """Training loss on the action tokens only: MSE (or L1, ``config.action_loss``) in normalised
        units over valid targets.

        Padding and tokens without a target are excluded from the mean (not just zero-weighted in
        the numerator), so the loss does not shrink as padding grows. ``tool``: an optional
        ``(pred, target) -> loss`` on the absolute joint positions (``training.tool_points.ToolPoints``),
        added to the loss and reported as ``tool_loss``; ``info["loss"]`` stays the action loss alone. The
        task's losses on its heads (``vla_ros.tasks``) are added with their weights and reported by name.
        """
        out = self.full_pass(batch)
        pred = self.head(out.hidden)  # (B, T, J) normalised; recomputed cheaply rather than re-normalising
        target = self.normalize_actions(batch.targets)
        sel = batch.target_valid
        n = int(sel.sum())
        if n == 0:
            loss = pred.sum() * 0.0
            return loss, {"loss": 0.0, "num_targets": 0, "mae": 0.0}
        err = pred[sel] - target[sel]  # (n, J)
        loss = err.abs().mean() if self.config.action_loss == "l1" else err.pow(2).mean()
        with torch.no_grad():
            mae = (out.actions[sel] - batch.targets[sel]).abs().mean()
        info = {"loss": float(loss.detach()), "num_targets": n, "mae": float(mae)}
        if tool is not None:
            tool_loss = tool(out.actions[sel], batch.targets[sel])
            info["tool_loss"] = float(tool_loss.detach())
            loss = loss + tool_loss
        for name, weight, term in self.task.losses(self, out, batch):
            info[name] = float(term.detach())
            loss = loss + weight * term
        return loss, info


class StepGraph(nn.Module):
    """One streaming step with the KV cache as explicit inputs and outputs (batch of one, squeezed).

    Inputs: images (F, 3, H, W), states (N, S), text (L, 384), action_index (A,) int64, gather (T,) int64,
    cos/sin (T, d/4), mask (T, C+T) additive float, past_key / past_value (layers, G, C, d), instruction
    (384,) (``sequence.instruction_vector`` of the pinned instruction, every step), and for a model with more
    than one camera image_camera (F,) int64, each frame's camera (``input_names`` says which).
    Outputs: actions (T, J) absolute, hidden (T, D), new_key / new_value (layers, G, T, d).
    The torch runtime calls this module and the ONNX file is exported from it: one code path.
    """

    base_input_names = (
        "images",
        "states",
        "text",
        "action_index",
        "gather",
        "cos",
        "sin",
        "mask",
        "past_key",
        "past_value",
        "instruction",
    )
    output_names = ("actions", "hidden", "new_key", "new_value")

    def __init__(self, model: VLATransformer) -> None:
        super().__init__()
        self.model = model
        self.input_names = step_input_names(model.config)

    def forward(
        self,
        images,
        states,
        text,
        action_index,
        gather,
        cos,
        sin,
        mask,
        past_key,
        past_value,
        instruction,
        image_camera=None,
    ):
        inputs = StepInputs(
            images,
            states,
            text,
            action_index,
            gather[None],
            cos[None],
            sin[None],
            mask[None, None],
            past_key[:, None],
            past_value[:, None],
            instruction[None],
            image_camera=image_camera,
        )
        out = self.model.step(inputs)
        return out.actions[0], out.hidden[0], out.new_k[:, 0], out.new_v[:, 0]


def step_input_names(config: ModelConfig) -> tuple[str, ...]:
    """The step graph's inputs for a model: ``image_camera`` only where there is more than one camera, so a
    one-camera model's graph (and every model.onnx exported before cameras existed) stays as it was."""
    return StepGraph.base_input_names + (("image_camera",) if config.frame_embeddings else ())

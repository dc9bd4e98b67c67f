"""Provenance every result file records: git commit, versions, data sha256, model ids, seed."""

from __future__ import annotations

import datetime as _dt
import hashlib
import platform
import subprocess
import sys
from pathlib import Path

from .version import __version__


def git_commit(cwd: Path | None = None) -> dict:
    """``{"commit": sha | "unknown", "dirty": bool | None}`` for the repo holding this package."""
    where = cwd or Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=5)
        if sha.returncode != 0:
            return {"commit": "unknown", "dirty": None}
        st = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=where,
            capture_output=True,
            text=True,
            timeout=5,
        )
        return {"commit": sha.stdout.strip(), "dirty": bool(st.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"commit": "unknown", "dirty": None}


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes; for a folder (a dataset stored as one file per conversation,
    e.g. Mem-Gallery) the sha256 of its sorted ``"<relative path> <file sha256>"`` lines."""
    p = Path(path)
    if p.is_dir():
        lines = [f"{f.relative_to(p).as_posix()} {sha256_file(f)}" for f in sorted(p.rglob("*")) if f.is_file()]
        return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def llm_runtime() -> dict:
    """``{"llama_cpp": {"version", "system_info"}}`` once this process has loaded an embedded
    model (llama.cpp imported), else ``{}``. Its answers depend on the build and the CPU features
    its kernels use (``AVX512 = 1 | ...``): the same prompt, greedily decoded, can end in another
    answer on another CPU where two tokens are nearly tied, so a run reproduces to the digit on
    the same build and CPU only."""
    mod = sys.modules.get("llama_cpp")
    if mod is None:
        return {}
    try:
        info = mod.llama_print_system_info().decode("utf-8", "replace").strip()
    except (AttributeError, OSError):
        info = None
    return {"llama_cpp": {"version": getattr(mod, "__version__", None), "system_info": info}}


def provenance(**fields) -> dict:
    """Common provenance plus the caller's fields (model ids, prompt versions, data sha256, seed...);
    with the embedded models' runtime (:func:`llm_runtime`) once one was loaded."""
    return {
        "memfrontier_version": __version__,
        **git_commit(),
        "python": platform.python_version(),
        "machine": platform.machine(),
        **llm_runtime(),
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        **fields,
    }

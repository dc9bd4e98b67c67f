"""The CPU thread policy (memfrontier.core.threads): defaults, the environment variables, refusals."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from memfrontier.core.threads import (
    DEFAULT_TORCH_THREADS,
    LLM_THREADS_ENV,
    TORCH_THREADS_ENV,
    ThreadConfigError,
    apply_torch_threads,
    llm_threads,
    torch_threads,
)


def test_torch_threads_default_is_one(monkeypatch):
    monkeypatch.delenv(TORCH_THREADS_ENV, raising=False)
    assert DEFAULT_TORCH_THREADS == 1
    assert torch_threads() == 1
    monkeypatch.setenv(TORCH_THREADS_ENV, "  ")  # blank = unset
    assert torch_threads() == 1


def test_torch_threads_env_is_honoured_and_explicit_wins(monkeypatch):
    monkeypatch.setenv(TORCH_THREADS_ENV, "3")
    assert torch_threads() == 3
    assert torch_threads(2) == 2


@pytest.mark.parametrize("raw", ["0", "-2", "two", "1.5", "2.0"])
def test_torch_threads_env_invalid_is_refused(monkeypatch, raw):
    monkeypatch.setenv(TORCH_THREADS_ENV, raw)
    with pytest.raises(ThreadConfigError, match=rf"MEMFRONTIER_TORCH_THREADS must be a positive integer.*{raw!r}"):
        torch_threads()


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_explicit_invalid_counts_are_refused(bad):
    with pytest.raises(ThreadConfigError, match="num_threads must be a positive integer"):
        torch_threads(bad)
    with pytest.raises(ThreadConfigError, match="n_threads must be a positive integer"):
        llm_threads(bad)


def test_llm_threads_default_env_and_explicit(monkeypatch):
    monkeypatch.delenv(LLM_THREADS_ENV, raising=False)
    assert llm_threads() == (os.cpu_count() or 1)
    monkeypatch.setenv(LLM_THREADS_ENV, "5")
    assert llm_threads() == 5
    assert llm_threads(1) == 1
    monkeypatch.setenv(LLM_THREADS_ENV, "many")
    with pytest.raises(ThreadConfigError, match="MEMFRONTIER_LLM_THREADS"):
        llm_threads()


def test_serve_argv_takes_llm_threads_from_the_environment(monkeypatch):
    from memfrontier.llm.local_models import resolve_local, serve_argv

    monkeypatch.setenv(LLM_THREADS_ENV, "3")
    argv = serve_argv(resolve_local("gemma-3-270m"), 8123)
    assert argv[argv.index("--n_threads") + 1] == "3"


def test_embedder_resolves_threads_at_construction(monkeypatch):
    from memfrontier.embed.minilm import MiniLMEmbedder

    monkeypatch.setenv(TORCH_THREADS_ENV, "2")
    assert MiniLMEmbedder().threads == 2
    assert MiniLMEmbedder(num_threads=1).threads == 1
    monkeypatch.setenv(TORCH_THREADS_ENV, "zero")
    with pytest.raises(ThreadConfigError, match="MEMFRONTIER_TORCH_THREADS"):
        MiniLMEmbedder()
    with pytest.raises(ThreadConfigError, match="num_threads"):
        MiniLMEmbedder(num_threads=0)


def test_apply_sets_torch_process_wide_and_passive_wait_in_a_fresh_process():
    # a fresh process: the count is process-wide, and OMP_WAIT_POLICY only matters before torch loads
    code = (
        "import os; from memfrontier.embed.minilm import MiniLMEmbedder; e = MiniLMEmbedder(); "
        "import torch; e.model; print(torch.get_num_threads(), os.environ.get('OMP_WAIT_POLICY'))"
    )
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env[TORCH_THREADS_ENV] = "2"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["2", "PASSIVE"]


def test_apply_torch_threads_returns_and_sets_the_count(monkeypatch):
    import torch

    before = torch.get_num_threads()
    monkeypatch.setenv(TORCH_THREADS_ENV, "1")
    try:
        assert apply_torch_threads() == 1
        assert torch.get_num_threads() == 1
        assert apply_torch_threads(2) == 2
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_cpu_workers_default_env_and_explicit(monkeypatch):
    from memfrontier.core.threads import CPU_WORKERS_ENV, cpu_workers

    monkeypatch.delenv(CPU_WORKERS_ENV, raising=False)
    assert cpu_workers() == (os.cpu_count() or 1)
    monkeypatch.setenv(CPU_WORKERS_ENV, "3")
    assert cpu_workers() == 3 and cpu_workers(1) == 1
    monkeypatch.setenv(CPU_WORKERS_ENV, "-1")
    with pytest.raises(ThreadConfigError, match="MEMFRONTIER_CPU_WORKERS"):
        cpu_workers()


def test_run_cpu_runs_off_the_loop_in_the_pool_with_the_callers_context():
    import asyncio
    import contextvars
    import threading

    from memfrontier.core.threads import cpu_executor, run_cpu

    var = contextvars.ContextVar("ledger", default="none")

    def work(x, *, y):
        return threading.current_thread().name, var.get(), x + y

    async def main():
        var.set("this question's ledger")
        return threading.current_thread().name, await run_cpu(work, 1, y=2)

    loop_thread, (name, seen, total) = asyncio.run(main())
    assert name.startswith("memfrontier-cpu") and name != loop_thread
    assert (seen, total) == ("this question's ledger", 3)
    assert cpu_executor() is cpu_executor()


def _openblas_threads_after(code: str, **env_over: str) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MEMFRONTIER_BLAS_THREADS", "OPENBLAS_NUM_THREADS")}
    env.update(env_over)
    probe = (
        f"{code}\nfrom threadpoolctl import threadpool_info\n"
        "print(max(i['num_threads'] for i in threadpool_info() if i['internal_api'] == 'openblas'))"
    )
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300)
    return out.returncode, out.stdout.strip() or out.stderr


def test_numpys_openblas_runs_one_thread_once_an_embedder_or_the_cpu_pool_exists():
    """Fresh processes: OpenBLAS's own default (the cores, here 2) until the memory path starts."""
    cores = os.cpu_count() or 1
    assert _openblas_threads_after("import numpy") == (0, str(cores))
    assert _openblas_threads_after("from memfrontier.embed.minilm import MiniLMEmbedder; MiniLMEmbedder()") == (0, "1")
    assert _openblas_threads_after("from memfrontier.core.threads import cpu_executor; cpu_executor()") == (0, "1")
    assert _openblas_threads_after(
        "from memfrontier.core.threads import cpu_executor; cpu_executor()", MEMFRONTIER_BLAS_THREADS="2"
    ) == (0, "2")
    rc, err = _openblas_threads_after(
        "from memfrontier.core.threads import cpu_executor; cpu_executor()", MEMFRONTIER_BLAS_THREADS="0"
    )
    assert rc != 0 and "MEMFRONTIER_BLAS_THREADS must be a positive integer" in err

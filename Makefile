# Rollscope. `make demo` and `make test` work on a fresh machine: they create .venv and install.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
RS     := $(VENV)/bin/rollscope
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)
HOST   ?= 127.0.0.1
PORT   ?= 8000
# The demo's database, named explicitly (the CLI would otherwise use ./rollscope.db only if it
# exists, else the user's data folder); every command prints the database it uses first.
demo demo-data serve: export ROLLSCOPE_DATABASE_URL ?= sqlite:///$(CURDIR)/rollscope.db
FIX    := tests/fixtures
TUNIX_TOKENS := --tokenizer $(FIX)/tokenizers/mistral-v1-tokenizer.model \
	--added-token '32000=<pad>' --added-token '32001=<start_of_turn>' --added-token '32002=<end_of_turn>'

# Tunix: one run of the single-episode files (every case in all four collect modes), and the
# orchestrator's GRPO groups in their own runs, one per rendering (Token batches, Trajectory
# batches, the learner's CSV log), at the learner's global step 3 (orchestrator_group.*.meta.json): the same episodes
# in one run would make each group look three times its size.
TUNIX          := $(FIX)/realdata/tunix/v0.1.7
TUNIX_EPISODES := $(filter-out %.meta.json %/summary.json %/orchestrator_group.Token.json %/orchestrator_group.Trajectory.json,$(wildcard $(TUNIX)/*.json))

.PHONY: install demo demo-data serve test bench bench-ingest bench-load clean schema

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,producers]'
	rm -f $(VENV)/.installed-*
	$(PY) -m app.static_files  # static/**/*.gz: served to gzip clients (app/static_files.py)
	touch $(STAMP)

install: $(STAMP)

## Load real Tunix, tau-bench, verifiers, NeMo Gym, Atropos and ATIF traces and a generated 30-step GRPO run into ./rollscope.db.
demo-data: $(STAMP)
	mkdir -p build
	$(RS) demo --out build/demo-run.jsonl
	$(RS) ingest build/demo-run.jsonl --tokenizer build/demo-run.tokenizer.json
	$(RS) ingest $(TUNIX_EPISODES) --run tunix-v0.1.7 $(TUNIX_TOKENS)
	$(RS) ingest $(TUNIX)/orchestrator_group.Token.json --run tunix-grpo-orchestrator --step 3 $(TUNIX_TOKENS)
	$(RS) ingest $(TUNIX)/orchestrator_group.Trajectory.json --run tunix-grpo-orchestrator-trajectories --step 3 $(TUNIX_TOKENS)
	$(RS) ingest $(TUNIX)/trajectory_log_orchestrator_group.csv --run tunix-grpo-learner-log --step 3 $(TUNIX_TOKENS)
	$(RS) ingest $(FIX)/realdata/tau-bench --run tau-bench-airline
	$(RS) ingest $(addprefix $(FIX)/realdata/verifiers/,train_group_with_advantages.jsonl train_multi_tool.jsonl train_max_turns.jsonl) --run verifiers-0.4.0 --tokenizer $(FIX)/realdata/verifiers/tokenizer/tokenizer.json
	$(RS) ingest $(FIX)/realdata/nemo-gym --run nemo-gym-examples
	$(RS) ingest $(FIX)/realdata/atropos --run atropos-rubiks
	$(RS) ingest $(FIX)/realdata/atif --run atif-v1.7

## ... then serve the dashboard on http://$(HOST):$(PORT)
demo: demo-data
	$(RS) serve --host $(HOST) --port $(PORT)

serve: $(STAMP)
	$(RS) serve --host $(HOST) --port $(PORT)

test: $(STAMP)
	./scripts/ensure-services.sh
	$(PY) -m pytest -n 2 --dist loadfile -q --durations=25
	# then, alone: the test that restarts the Postgres server (nothing else may use it meanwhile)
	ROLLSCOPE_TEST_PG_RESTART=1 $(PY) -m pytest -q tests/worker/test_pg_restart.py

schema: $(STAMP)
	$(RS) schema --out docs/rollscope-1.schema.json

bench: $(STAMP)
	$(PY) bench/ingest.py
	$(PY) bench/ingest_and_pages.py
	$(PY) bench/views.py
	$(PY) bench/readers.py
	$(PY) bench/agents_and_otlp.py

bench-load: $(STAMP)
	$(PY) bench/load.py

bench-ingest: $(STAMP)
	$(PY) bench/ingest.py

clean:
	rm -rf build rollscope.db rollscope.db-wal rollscope.db-shm

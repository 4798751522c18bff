# The two commands of the README. Each sets up what it needs first, so both work on a fresh
# machine (Python 3.11, root, package registries only).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 5006

.PHONY: setup serve test lint bench chromium

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

setup: $(BIN)/python
	$(BIN)/pip install --quiet -e ".[test]"

# Serves the app with the built-in example trees on http://127.0.0.1:$(PORT)/inspector
serve: setup
	$(BIN)/panel serve inspector --address 127.0.0.1 --port $(PORT) --allow-websocket-origin 127.0.0.1:$(PORT) --allow-websocket-origin localhost:$(PORT) --unused-session-lifetime 120000 --websocket-max-message-size 5242880

# Browser tests drive Debian's chromium (never a downloaded browser build).
chromium:
	@command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium)

test: setup chromium
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

lint: setup
	$(BIN)/ruff check .

bench: setup
	$(BIN)/python benchmarks/bench_ops.py

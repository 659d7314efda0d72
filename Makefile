# Two commands do everything on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torch/torchvision are pinned here only for this machine's local wheel cache; the package
# itself accepts any torch>=2.1 (see pyproject.toml).
TORCH_PIN ?= torch==2.14.1 torchvision==0.29.1

$(BIN)/laya: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH_PIN)
	$(BIN)/pip install -q -e '.[test]'
	touch $(BIN)/laya

.PHONY: install demo test test-slow bench typecheck lint format
install: $(BIN)/laya

demo: install
	$(BIN)/laya train --dataset digits --out model.pt --overwrite
	$(BIN)/laya info model.pt

test: install
	$(BIN)/python -m pytest -q

# ruff (configured in pyproject.toml): lint and the formatter's check, as CI runs them before the tests.
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Rewrites the tree in place: imports sorted, lint fixes that are safe, then the formatter.
format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

test-slow: install
	$(BIN)/python -m pytest -q -m slow

bench: install
	$(BIN)/python -m benchmarks

# mypy on the public Python API (docs/api.md). Not part of `make test`: a cold run reads torch's sources (minutes).
typecheck: install
	$(BIN)/pip install -q -e '.[typecheck]'
	$(BIN)/python -m mypy --follow-imports=silent --ignore-missing-imports laya_cli/api.py

# Two commands do everything on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torch/torchvision are pinned here only for this machine's local wheel cache; the package
# itself accepts any torch>=2.1 (see pyproject.toml).
TORCH_PIN ?= torch==2.14.1 torchvision==0.29.1
# What the tests, the linter and the notebook test add to the demo's install (the `test` extra), once.
TEST_TOOLS := $(VENV)/.test-tools

# laya and what it needs, nothing more: what `make demo` runs on.
$(BIN)/laya: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH_PIN)
	$(BIN)/pip install -q -e .
	touch $(BIN)/laya

$(TEST_TOOLS): $(BIN)/laya pyproject.toml
	$(BIN)/pip install -q -e '.[test]'
	touch $(TEST_TOOLS)

.PHONY: install demo test test-slow bench typecheck lint format
install: $(BIN)/laya

demo: install
	$(BIN)/laya train --dataset digits --out model.pt --overwrite
	$(BIN)/laya info model.pt

test: $(TEST_TOOLS)
	$(BIN)/python -m pytest -q -n auto --dist loadscope

# ruff (configured in pyproject.toml): lint and the formatter's check, as CI runs them before the tests.
lint: $(TEST_TOOLS)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Rewrites the tree in place: imports sorted, lint fixes that are safe, then the formatter.
format: $(TEST_TOOLS)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

test-slow: $(TEST_TOOLS)
	$(BIN)/python -m pytest -q -m slow

bench: $(TEST_TOOLS)
	$(BIN)/python -m benchmarks

# mypy on the public Python API (docs/api.md). Not part of `make test`: a cold run reads torch's sources (minutes).
typecheck: install
	$(BIN)/pip install -q -e '.[typecheck]'
	$(BIN)/python -m mypy --follow-imports=silent --ignore-missing-imports laya_cli/api.py

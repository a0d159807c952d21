# foo_rs — a newcomer's one-minute map. `make help` lists the targets.
.DEFAULT_GOAL := help
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: help setup build-dev demo test test-rust test-python bench bench-python lint format

help: ## Show this help
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

setup: ## Create .venv, install torch + tools, build foo_rs (release) into it
	bash scripts/setup.sh

build-dev: ## Rebuild foo_rs into .venv (debug, fast to compile)
	VIRTUAL_ENV=$(CURDIR)/$(VENV) $(VENV)/bin/maturin develop

demo: setup ## Set up, then train a small model on foo and on CPU side by side
	$(PY) -m foo_rs.demo

test: setup test-rust test-python ## Set up, then run every test (Rust and Python)

test-rust: ## Rust unit tests of the allocator, kernels and RNG (no Python needed)
	cargo test

test-python: ## pytest against the built package
	$(PY) -m pytest -q

bench: ## criterion benches of the Rust kernels and allocator
	cargo bench

bench-python: ## Side-by-side foo vs torch CPU report
	$(PY) -m foo_rs.bench

lint: ## rustfmt, clippy
	cargo fmt --check
	cargo clippy --all-targets -- -D warnings

format: ## Format Rust code
	cargo fmt

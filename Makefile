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

test: setup test-rust test-memcheck test-python ## Set up, then run every test (Rust, Rust under valgrind, Python)

test-rust: ## Rust unit tests of the allocator, kernels and RNG (no Python needed)
	cargo test

test-memcheck: ## The allocator and thread-pool tests under valgrind memcheck (part of `make test`)
	bash scripts/valgrind_tests.sh allocator:: kernels::parallel::

test-valgrind: ## Rust unit tests under valgrind memcheck (invalid reads/writes, uninitialised use, definite leaks)
	bash scripts/valgrind_tests.sh

test-python: ## pytest against the built package
	$(PY) -m pytest -q

bench: ## criterion benches of the Rust kernels, allocator and machine limits, then % of limit per bench
	cargo bench
	python3 scripts/bench_report.py

bench-python: ## Side-by-side foo vs torch CPU report
	$(PY) -m foo_rs.bench

lint: ## rustfmt, clippy
	cargo fmt --check
	cargo clippy --all-targets -- -D warnings

format: ## Format Rust code
	cargo fmt

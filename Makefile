# foo_rs — a newcomer's one-minute map. `make help` lists the targets.
.DEFAULT_GOAL := help
VENV ?= .venv
PY := $(VENV)/bin/python

# The oldest supported torch: CI builds foo_rs against it in its own venv and
# target directory and runs one test file per capability (SMOKE_TESTS).
OLDEST_TORCH ?= 2.13
OLDEST_VENV ?= .venv-$(OLDEST_TORCH)
# test_elementwise (4,157 cases) and test_foreach (1,301) run on the newest torch only: their kernels
# are torch-independent Rust; on the oldest torch the elementwise glue is exercised here by
# test_fast_lane, the optimizers' by test_optim_amp (`make test-torch TORCH=2.13` runs everything).
# Cut to keep `.ci/run` within its time on a slower (2.0 GHz Zen 1) machine.
SMOKE_TESTS := tests/test_device.py tests/test_storage.py tests/test_memory.py tests/test_rng.py \
	tests/test_autocast.py tests/test_fallback.py tests/test_fast_lane.py \
	tests/test_linalg_reduce.py tests/test_conv_rnn.py tests/test_norm_pool.py tests/test_index_ops.py \
	tests/test_models.py tests/test_module_transfer.py tests/test_real_models.py tests/test_profiler.py \
	tests/test_install.py tests/test_compile.py tests/test_foo_ops.py tests/test_distributed.py tests/test_streams.py \
	tests/test_pinned.py tests/test_runtime.py tests/test_rnn_seq.py tests/test_attention.py tests/test_random_ops.py \
	tests/test_conv_native.py tests/test_cnn_native.py tests/test_sort.py \
	tests/test_nn_special.py tests/test_complex_fft.py tests/test_optim_amp.py \
	tests/test_memory_history.py tests/test_native_rest.py tests/test_native_pad.py

.PHONY: help setup build-dev demo test test-rust test-python test-oldest test-torch bench bench-python bench-dist lint format

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

test-oldest: ## Build against the oldest supported torch (own venv), run one test file per capability
	FOO_RS_TORCH=$(OLDEST_TORCH) FOO_RS_INSTALL=wheel VENV=$(OLDEST_VENV) CARGO_TARGET_DIR=target/torch-$(OLDEST_TORCH) bash scripts/setup.sh
	$(OLDEST_VENV)/bin/python -m pytest -q $(SMOKE_TESTS)

test-torch: ## Every test against another supported torch: make test-torch TORCH=2.14
	FOO_RS_TORCH=$(TORCH) FOO_RS_INSTALL=wheel VENV=.venv-$(TORCH) CARGO_TARGET_DIR=target/torch-$(TORCH) bash scripts/setup.sh
	.venv-$(TORCH)/bin/python -m pytest -q

bench: ## criterion benches of the Rust kernels, allocator and machine limits, then % of limit per bench
	cargo bench
	python3 scripts/bench_report.py

bench-python: ## Side-by-side foo vs torch CPU report
	$(PY) -m foo_rs.bench

bench-dist: ## all_reduce bandwidth foo vs CPU tensors on gloo, DDP step scaling 1 -> 2 processes
	$(PY) -m foo_rs.bench_dist

lint: ## rustfmt, clippy (plain and with the python feature), ruff (lint and format), the _C stub against the Rust signatures and the built module
	cargo fmt --check
	cargo clippy --all-targets -- -D warnings
	PYO3_PYTHON=$(CURDIR)/$(VENV)/bin/python cargo clippy --features python --lib -- -D warnings
	$(VENV)/bin/ruff check python tests benches scripts
	$(VENV)/bin/ruff format --check python tests benches scripts
	$(PY) scripts/gen_c_stub.py --check
	cd python && ../$(VENV)/bin/python -m mypy.stubtest foo_rs._C

format: ## Format Rust and Python code
	cargo fmt
	$(VENV)/bin/ruff format python tests benches scripts

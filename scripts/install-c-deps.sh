#!/usr/bin/env bash
# Installs what building the C plugins needs (plugins/c-function, the C template
# templates/c-scalar-function; docs/write-a-plugin.md, "C"), unless it is there already:
#   from Debian's packages
#     clang-19                   the C compiler, for --target=wasm32-wasi
#     lld-19                     wasm-ld, the WebAssembly linker clang-19 calls
#     libclang-rt-19-dev-wasm32  compiler-rt's builtins for wasm32 (64-bit division etc.)
#     wasi-libc                  the C library (malloc, memcpy, ...) for wasm32-wasi, in
#                                /usr/include/wasm32-wasi and /usr/lib/wasm32-wasi
#   from crates.io (cargo install --locked, into ~/.cargo/bin)
#     wit-bindgen-cli  $WIT_BINDGEN_VERSION  `wit-bindgen c`: the C bindings of the WIT
#                      (feature c only)
#     wasm-tools       $WASM_TOOLS_VERSION  `wasm-tools component new`: core module -> component
#                      (features component, print, validate only)
# The crates are installed only when `wit-bindgen --version` / `wasm-tools --version` say
# another version (or nothing). `make plugins`, `make test` and `make kit-check` run this
# first. Says what it installs; fails naming the packages when it cannot install them.
#
#   scripts/install-c-deps.sh            install what is missing
#   scripts/install-c-deps.sh --versions print the pinned versions (for the Makefile)
set -euo pipefail

# The pins (host/src/kit/new.rs reads them from here for the C template's README and Makefile).
WIT_BINDGEN_VERSION=0.63.0
WASM_TOOLS_VERSION=1.263.0

if [ "${1:-}" = "--versions" ]; then
  echo "wit-bindgen-cli $WIT_BINDGEN_VERSION"
  echo "wasm-tools $WASM_TOOLS_VERSION"
  exit 0
fi

need=()
command -v clang-19 >/dev/null 2>&1 || need+=(clang-19)
[ -x /usr/lib/llvm-19/bin/wasm-ld ] || need+=(lld-19)
[ -f /usr/lib/llvm-19/lib/clang/19/lib/wasi/libclang_rt.builtins-wasm32.a ] \
  || need+=(libclang-rt-19-dev-wasm32)
[ -f /usr/lib/wasm32-wasi/libc.a ] || need+=(wasi-libc)
if [ "${#need[@]}" -gt 0 ]; then
  echo "install-c-deps: installing ${need[*]} from Debian's packages (clang-19 and wasi-libc for the C plugins)" >&2
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "error: the C plugins need ${need[*]}; install them, e.g. as root: apt-get install ${need[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null; then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  fi
  command -v clang-19 >/dev/null && [ -x /usr/lib/llvm-19/bin/wasm-ld ] \
    && [ -f /usr/lib/wasm32-wasi/libc.a ] || {
    echo "error: ${need[*]} installed but clang-19, wasm-ld or wasi-libc are still missing" >&2
    exit 1
  }
fi

# cargo installs into ~/.cargo/bin (or $CARGO_HOME/bin); look there too when it is not on PATH.
cargo_bin=${CARGO_HOME:-$HOME/.cargo}/bin
version_of() { # TOOL: the version `TOOL --version` prints second, or nothing
  local tool
  tool=$(command -v "$1" 2>/dev/null || echo "$cargo_bin/$1")
  if [ -x "$tool" ]; then "$tool" --version 2>/dev/null | awk '{print $2}'; fi
}
install() { # ARGS...: cargo install --locked ARGS
  command -v cargo >/dev/null || { echo "error: cargo not found; install Rust with rustup, then run $0 again" >&2; exit 1; }
  echo "install-c-deps: cargo install --locked $* (from crates.io; takes a few minutes once)" >&2
  # These tools run for a moment on one small C file per build: optimising them at level 1
  # instead of 3 takes a large part off their compile time on a fresh machine (CI, 2 cores).
  # A target folder of their own: under CARGO_TARGET_DIR (CI keeps it between runs), cargo
  # install would take the lock of the host's folder, which `make test` is building meanwhile.
  local target=()
  [ -z "${CARGO_TARGET_DIR:-}" ] || target=(--target-dir "$CARGO_TARGET_DIR/c-tools")
  CARGO_PROFILE_RELEASE_OPT_LEVEL=1 cargo install --quiet --locked "${target[@]}" "$@"
}
# Only the C generator (`wit-bindgen c`), not the Rust, Go, C#, C++, D, MoonBit and Markdown ones.
[ "$(version_of wit-bindgen)" = "$WIT_BINDGEN_VERSION" ] \
  || install --no-default-features --features c "wit-bindgen-cli@$WIT_BINDGEN_VERSION"
# Only the subcommands the builds use (component new, print, validate): a fraction of the
# default build's compile time.
[ "$(version_of wasm-tools)" = "$WASM_TOOLS_VERSION" ] \
  || install --no-default-features --features component,print,validate "wasm-tools@$WASM_TOOLS_VERSION"
[ "$(version_of wit-bindgen)" = "$WIT_BINDGEN_VERSION" ] && [ "$(version_of wasm-tools)" = "$WASM_TOOLS_VERSION" ] || {
  echo "error: after cargo install, wit-bindgen says '$(version_of wit-bindgen)' and wasm-tools '$(version_of wasm-tools)'; expected $WIT_BINDGEN_VERSION and $WASM_TOOLS_VERSION (is another copy first on PATH?)" >&2
  exit 1
}

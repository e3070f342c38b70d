#!/usr/bin/env bash
# Installs, from Debian's packages, what the browser test of the job page
# needs (tests/e2e/tests/all/ui_browser.rs, docs/ui.md), unless it is there already:
#   chromium           headless Chromium: the test loads the page of a
#                      recovered job with `--dump-dom` and `--screenshot`
#   fonts-dejavu-core  a font for the screenshot's text (Chromium draws no
#                      glyph without one)
# The version is the one Debian's configured release (bookworm and its
# security updates) carries: apt pins it, nothing is downloaded from
# elsewhere. `make test` runs this first (make browser-deps). Says what it
# installs; fails naming the packages when it cannot install them.
set -euo pipefail
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need+=(fonts-dejavu-core)
if [ "${#need[@]}" -eq 0 ]; then
  exit 0
fi
echo "install-browser-deps: installing ${need[*]} from Debian's packages (headless Chromium for the job page's browser test)" >&2
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "error: the browser test needs ${need[*]}; install them, e.g. as root: apt-get install ${need[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
command -v chromium >/dev/null && [ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || {
  echo "error: ${need[*]} installed but chromium or its font is still missing" >&2
  exit 1
}
echo "install-browser-deps: $(chromium --version 2>/dev/null | head -1)" >&2

#!/usr/bin/env bash
# The HTML compile report in a real browser: `fxfuse compile IN --html=R.html` on a
# vLLM-shaped FP8 Llama and on a transformers export, then headless Chromium loads each
# report (file://, no network), must log no console message (errors, failed loads, uncaught
# exceptions all show up as CONSOLE lines), must have run the page script to its end
# (data-ready="1" in the DOM), and takes a screenshot (kept in the test outputs).
#   html_browser_test.sh FXFUSE
# Fails when no Chromium is installed: tools/install_deps.sh installs the Debian package
# `chromium` for the test environment (FXFUSE_WITH_BROWSER=1, or FXFUSE_WITH_TORCH=1 as CI sets).
set -uo pipefail
FXFUSE=$(realpath "$1")
T=${TEST_TMPDIR:-$(mktemp -d)}
OUT=${TEST_UNDECLARED_OUTPUTS_DIR:-$T}
CHROME=""
for c in chromium chromium-browser google-chrome; do
  if command -v "$c" >/dev/null 2>&1; then CHROME=$(command -v "$c"); break; fi
done
if [[ -z $CHROME ]]; then
  echo "FAIL: no Chromium installed (install the Debian package 'chromium': FXFUSE_WITH_BROWSER=1 tools/install_deps.sh)"
  exit 1
fi
fails=0
run_chrome() {  # run_chrome NAME ARGS... (stdout -> $T/NAME.out, log -> $T/NAME.log)
  local name=$1; shift
  timeout 120 "$CHROME" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync --disable-dev-shm-usage \
    --disable-extensions --user-data-dir="$T/profile-$name" --enable-logging=stderr --v=0 "$@" \
    >"$T/$name.out" 2>"$T/$name.log"
}
for case in "llama32:tests/data/vllm/vllm_llama32_fp8_custom.post_grad.fxg.json" "hf_llama:tests/data/hf/hf_llama.core_aten.pt2"; do
  name=${case%%:*}; in=${case#*:}
  html="$T/$name.html"
  if ! "$FXFUSE" compile "$in" -q --html="$html"; then echo "FAIL: $name: compile --html failed"; fails=$((fails + 1)); continue; fi
  if grep -qiE '(src|href)="(https?:)?//' "$html"; then echo "FAIL: $name: external URL in report"; fails=$((fails + 1)); fi
  grep -q "<svg" "$html" || { echo "FAIL: $name: no inline picture"; fails=$((fails + 1)); }
  run_chrome "$name-dom" --dump-dom "file://$html"
  if grep -q ':CONSOLE' "$T/$name-dom.log"; then
    echo "FAIL: $name: console messages:"; grep ':CONSOLE' "$T/$name-dom.log" | head -5; fails=$((fails + 1))
  fi
  if grep -q 'data-ready="1"' "$T/$name-dom.out"; then echo "ok: $name: page script ran"; else
    echo "FAIL: $name: page script did not finish (no data-ready)"; tail -5 "$T/$name-dom.log"; fails=$((fails + 1)); fi
  run_chrome "$name-shot" --window-size=1400,1800 --hide-scrollbars --screenshot="$OUT/$name-report.png" "file://$html"
  if grep -q ':CONSOLE' "$T/$name-shot.log"; then echo "FAIL: $name: console messages (screenshot run)"; fails=$((fails + 1)); fi
  if [[ -s "$OUT/$name-report.png" && "$(head -c 4 "$OUT/$name-report.png" | tail -c 3)" == "PNG" ]]; then
    echo "ok: $name: screenshot $OUT/$name-report.png ($(stat -c %s "$OUT/$name-report.png") bytes)"
  else
    echo "FAIL: $name: no screenshot"; tail -5 "$T/$name-shot.log"; fails=$((fails + 1))
  fi
  cp "$html" "$OUT/" 2>/dev/null
done
echo "$fails failed"
[[ $fails -eq 0 ]]

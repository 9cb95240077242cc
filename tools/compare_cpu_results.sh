#!/usr/bin/env bash
# Checks that two fxfuse binaries give the same CPU results on every graph in tests/: the
# output of `compile --report` (timings removed), the launch plan (`--emit=plan-text`, or the
# refusal) and `verify`, graph by graph. Used to show
# that a refactoring changed no behaviour.
#
#   tools/compare_cpu_results.sh OLD_FXFUSE NEW_FXFUSE [GRAPH...]
#
# Without GRAPH arguments: every .fxg under tests/ and every graph file under tests/data/
# (.pt2, export/exporter JSON, FX text). Prints one line per difference and a summary;
# exits 1 if any output differs. `verify` runs with --bind-default small sizes and a time
# limit per graph (VERIFY_TIMEOUT_S, default 120); a graph whose verify times out under both
# binaries is reported, not counted as a difference.
set -uo pipefail
cd "$(dirname "$0")/.."
old=$(realpath "$1"); new=$(realpath "$2"); shift 2
timeout_s=${VERIFY_TIMEOUT_S:-120}
if (($#)); then graphs=("$@"); else
  mapfile -t graphs < <({ find tests -name '*.fxg' -not -path 'tests/fuzz/*';
    find tests/data -type f \( -name '*.pt2' -o -name '*.json' -o -name '*.txt' \) -not -name 'expected_counts.json' -not -name 'manifest.json'; } | sort)
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
strip_timings() {  # timings (ms, *_ms) differ from run to run, "output" names this run's file
  python3 -c 'import json,sys
def strip(o):
    if isinstance(o, dict): return {k: strip(v) for k, v in o.items() if k != "ms" and not k.endswith("_ms") and k != "output"}
    if isinstance(o, list): return [strip(v) for v in o]
    return o
try: print(json.dumps(strip(json.load(sys.stdin)), indent=1, sort_keys=True))
except ValueError: print("<no JSON report>")'
}
run_one() {  # run_one BIN TAG GRAPH
  local bin=$1 tag=$2 g=$3
  "$bin" compile "$g" -q -o "$tmp/$tag.fxg" --report="$tmp/$tag.report.json" > "$tmp/$tag.compile.out" 2>&1
  echo "exit $?" >> "$tmp/$tag.compile.out"
  "$bin" compile "$g" -q --emit=plan-text -o "$tmp/$tag.plan" > "$tmp/$tag.plan.out" 2>&1
  echo "exit $?" >> "$tmp/$tag.plan.out"
  [[ -f "$tmp/$tag.plan" ]] || echo "<no plan>" > "$tmp/$tag.plan"
  strip_timings < "$tmp/$tag.report.json" > "$tmp/$tag.report" 2>/dev/null || echo "<no report>" > "$tmp/$tag.report"
  timeout "$timeout_s" "$bin" verify "$g" > "$tmp/$tag.verify" 2>&1
  echo "exit $?" >> "$tmp/$tag.verify"
  sed -i -E 's/[0-9]+(\.[0-9]+)? ?(ms|s)\b/<time>/g' "$tmp/$tag.verify" "$tmp/$tag.compile.out"
}
diffs=0; same=0; timeouts=0
for g in "${graphs[@]}"; do
  rm -f "$tmp"/old.* "$tmp"/new.*
  run_one "$old" old "$g"; run_one "$new" new "$g"
  bad=""
  for k in compile.out fxg report plan plan.out verify; do
    cmp -s "$tmp/old.$k" "$tmp/new.$k" || bad+=" $k"
  done
  if grep -q '^exit 124$' "$tmp/old.verify" && grep -q '^exit 124$' "$tmp/new.verify"; then timeouts=$((timeouts + 1)); fi
  if [[ -n $bad ]]; then echo "DIFFERS: $g:$bad"; diffs=$((diffs + 1)); else same=$((same + 1)); fi
done
echo "compare_cpu_results: ${#graphs[@]} graphs, $same identical, $diffs differ ($timeouts verify timeouts under both)"
((diffs == 0))

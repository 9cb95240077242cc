#!/usr/bin/env bash
# Output safety (ir/output_set.h) and non-regular inputs, through the CLI:
#   * a symlink planted at the old predictable temp name (OUT.tmp~) or at the target itself
#     never redirects a write; /dev/null stays a device; a FIFO without a reader is refused;
#   * modes: an existing 0600 target stays 0600, a 0444 target is refused (exit 2, content
#     kept), a new file gets 0666 & ~umask;
#   * all-or-nothing: a failing --report leaves no -o file, no --dump-dir and no temporaries;
#   * two concurrent writers of one file leave exactly one writer's complete output;
#   * `-o` onto the command's own input works (the input is read first);
#   * a FIFO, directory or device as input: exit 2, one line, no blocking.
set -uo pipefail
FXFUSE="$1"
T="${TEST_TMPDIR:-$(mktemp -d)}/safe_output"
rm -rf "$T" && mkdir -p "$T"
fails=0; passes=0
ok() { passes=$((passes+1)); }
bad() { echo "FAIL $1"; fails=$((fails+1)); }

# Runs the CLI with a time limit; sets rc, err (stderr), lines (stderr line count).
run() {
  timeout 30 "$FXFUSE" "$@" >"$T/stdout" 2>"$T/stderr"
  rc=$?
  err=$(cat "$T/stderr")
  lines=$(grep -c '' "$T/stderr")
}
expect_rc() {  # NAME WANT
  if [[ $rc -ne $2 ]]; then bad "$1: exit $rc, want $2 (stderr: $err)"; return 1; fi
  if [[ $2 -eq 2 && $lines -ne 1 ]]; then bad "$1: $lines stderr lines, want 1: $err"; return 1; fi
  ok
}
no_temps() {  # NAME DIR: no temporaries left (neither the old OUT.tmp~ nor .OUT.XXXXXX)
  local left
  left=$(find "$2" -maxdepth 1 \( -name '*.tmp~' -o -name '.*.??????' \) ! -type l | head -3)
  if [[ -n $left ]]; then bad "$1: temporaries left: $left"; else ok; fi
}

cat >"$T/in.fxg" <<'EOF'
fxfuse.module {
  graph @main {
    input %1 "x": f32[4, 8]
    %2: f32[4, 8] = aten.relu.default(self=%1)
    output %2
  }
}
EOF
run convert "$T/in.fxg" -o "$T/expected_small.fxg"; expect_rc "convert baseline" 0
run compile -q -o "$T/expected_default.fxg"; expect_rc "compile baseline" 0

# --- a symlink at the old temp name, and at the target ---------------------------------
echo SECRET >"$T/victim"; chmod 600 "$T/victim"
ln -s "$T/victim" "$T/r.json.tmp~"
run compile -q --report "$T/r.json"
expect_rc "symlink at OUT.tmp~" 0
[[ $(cat "$T/victim") == SECRET ]] && ok || bad "symlink at OUT.tmp~: the victim file was written through the link"
[[ -L "$T/r.json.tmp~" ]] && ok || bad "symlink at OUT.tmp~: the planted link was replaced"
python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$T/r.json" && ok || bad "symlink at OUT.tmp~: report is not JSON"
ln -s "$T/victim" "$T/link.json"
run compile -q --report "$T/link.json"
expect_rc "symlink target" 2 && [[ $err == *"symbolic link"* ]] && ok || bad "symlink target: message: $err"
[[ $(cat "$T/victim") == SECRET && -L "$T/link.json" ]] && ok || bad "symlink target: link or victim changed"

# --- special files -------------------------------------------------------------------------
was_device=0; [[ -c /dev/null ]] && was_device=1
run compile -q --report /dev/null
expect_rc "/dev/null target" 0
# (where /dev/null is already a plain file, replaced by an older fxfuse, only the exit code is checked)
[[ $was_device -eq 0 || -c /dev/null ]] && ok || bad "/dev/null is no longer a character device"
mkfifo "$T/fifo_out.fxg"
run compile -q -o "$T/fifo_out.fxg"
expect_rc "FIFO target without a reader" 2 && [[ $err == *"no reader"* ]] && ok || bad "FIFO target: message: $err"
[[ -p "$T/fifo_out.fxg" ]] && ok || bad "FIFO target was replaced"

# --- modes -----------------------------------------------------------------------------------
echo old >"$T/m600.fxg"; chmod 600 "$T/m600.fxg"
run convert "$T/in.fxg" -o "$T/m600.fxg"; expect_rc "0600 target" 0
[[ $(stat -c %a "$T/m600.fxg") == 600 ]] && ok || bad "0600 target became $(stat -c %a "$T/m600.fxg")"
cmp -s "$T/m600.fxg" "$T/expected_small.fxg" && ok || bad "0600 target: content not written"
echo old >"$T/m444.fxg"; chmod 444 "$T/m444.fxg"
run convert "$T/in.fxg" -o "$T/m444.fxg"
expect_rc "0444 target" 2 && [[ $err == *"read-only"* ]] && ok || bad "0444 target: message: $err"
[[ $(cat "$T/m444.fxg") == old && $(stat -c %a "$T/m444.fxg") == 444 ]] && ok || bad "0444 target was replaced"
(umask 077; "$FXFUSE" convert "$T/in.fxg" -o "$T/new077.fxg" 2>/dev/null)
[[ $(stat -c %a "$T/new077.fxg") == 600 ]] && ok || bad "new file under umask 077: mode $(stat -c %a "$T/new077.fxg")"
(umask 022; "$FXFUSE" convert "$T/in.fxg" -o "$T/new022.fxg" 2>/dev/null)
[[ $(stat -c %a "$T/new022.fxg") == 644 ]] && ok || bad "new file under umask 022: mode $(stat -c %a "$T/new022.fxg")"

# --- all-or-nothing ----------------------------------------------------------------------------
mkdir -p "$T/set"
run compile -q -o "$T/set/a.fxg" --dump-dir "$T/set/dump" --report "$T/set/missing_dir/r.json"
expect_rc "failing --report" 2
[[ ! -e "$T/set/a.fxg" ]] && ok || bad "failing --report left the -o file"
[[ ! -e "$T/set/dump" ]] && ok || bad "failing --report left the dump directory"
no_temps "failing --report" "$T/set"
mkdir -p "$T/set/is_a_dir"
run compile -q -o "$T/set/b.fxg" --html "$T/set/is_a_dir"
expect_rc "failing --html" 2
[[ ! -e "$T/set/b.fxg" ]] && ok || bad "failing --html left the -o file"
echo keep >"$T/set/c.fxg"
run compile -q -o "$T/set/c.fxg" --report "$T/set/is_a_dir"
expect_rc "failing --report, existing -o" 2
[[ $(cat "$T/set/c.fxg") == keep ]] && ok || bad "failing --report replaced an existing -o file"
run compile -q -o "$T/set/d.fxg" --report "$T/set/d.json" --dump-dir "$T/set/dump2"
expect_rc "successful set" 0
[[ -s "$T/set/d.fxg" && -s "$T/set/d.json" && -s "$T/set/dump2/00.input.fxg" ]] && ok || bad "successful set: outputs missing"
no_temps "successful set" "$T/set"

# --- concurrent writers ------------------------------------------------------------------------
mixed=0
for i in $(seq 1 12); do
  "$FXFUSE" convert "$T/in.fxg" -o "$T/race.fxg" 2>/dev/null & p1=$!
  "$FXFUSE" compile -q -o "$T/race.fxg" 2>/dev/null & p2=$!
  wait $p1; r1=$?; wait $p2; r2=$?
  if [[ $r1 -ne 0 || $r2 -ne 0 ]]; then bad "concurrent writers: exit $r1/$r2"; break; fi
  if ! cmp -s "$T/race.fxg" "$T/expected_small.fxg" && ! cmp -s "$T/race.fxg" "$T/expected_default.fxg"; then
    mixed=$((mixed+1))
  fi
done
[[ $mixed -eq 0 ]] && ok || bad "concurrent writers: $mixed of 12 results were neither writer's complete output"
no_temps "concurrent writers" "$T"

# --- -o onto the input -------------------------------------------------------------------------
cp "$T/in.fxg" "$T/self.fxg"
run convert "$T/self.fxg" -o "$T/self.fxg"; expect_rc "-o onto the input" 0
cmp -s "$T/self.fxg" "$T/expected_small.fxg" && ok || bad "-o onto the input: wrong content"

# --- non-regular inputs ----------------------------------------------------------------------
mkfifo "$T/fifo_in.fxg"
start=$(date +%s)
run inspect "$T/fifo_in.fxg"
expect_rc "FIFO input" 2 && [[ $err == *"FIFO"* ]] && ok || bad "FIFO input: message: $err"
(( $(date +%s) - start < 10 )) && ok || bad "FIFO input: took $(( $(date +%s) - start )) s"
mkdir -p "$T/dir_in.fxg"
run inspect "$T/dir_in.fxg"; expect_rc "directory input" 2
run inspect /dev/zero; expect_rc "device input" 2
[[ $err == *"character device"* ]] && ok || bad "device input: message: $err"

echo "safe_output_test: $passes passed, $fails failed"
[[ $fails -eq 0 ]]

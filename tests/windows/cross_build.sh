#!/usr/bin/env bash
# Cross-compiles strata.exe for 64-bit Windows with Debian's MinGW-w64 (installed if missing) into build-mingw/.
# Then, unless STRATA_NO_WINE=1, runs it under Debian's wine64 (installed if missing, ~100 MB): test_platform.exe
# (positioned reads and mappings past 4 GiB), `strata.exe info`, `generate` on tiny models for each ISA (tokens
# equal and logits within 1e-4 of the Linux build's) and one `--serve` request (same token lines).
# Env: STRATA_BUILD = the Linux build to compare with (default build/), PY = python with torch (tiny models).
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$(pwd)
JOBS=${STRATA_JOBS:-2}
LINUX_ENGINE=${STRATA_BUILD:-$REPO/build}/engine/strata
PY=${PY:-python3}
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

apt_install() {
  echo "Installing Debian's $* ..."
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

command -v x86_64-w64-mingw32-g++-posix >/dev/null || apt_install g++-mingw-w64-x86-64-posix
cmake -S . -B build-mingw -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE="$REPO/cmake/mingw-w64-x86_64.cmake" >/dev/null
# strata.exe, plus test_platform.exe: the one test that exercises the Win32 file and mapping code.
cmake --build build-mingw -j "$JOBS" --target strata test_platform
ls -l build-mingw/engine/strata.exe

if [ "${STRATA_NO_WINE:-0}" = 1 ]; then
  echo "STRATA_NO_WINE=1: not running strata.exe"
  exit 0
fi
WINE=/usr/lib/wine/wine64
[ -x "$WINE" ] || apt_install wine64
export WINEPREFIX="$REPO/build-mingw/wineprefix" WINEDEBUG=-all WINEDLLOVERRIDES="mscoree,mshtml="
run_exe() { "$WINE" "$REPO/build-mingw/engine/$1" "${@:2}"; }

echo "--- test_platform.exe"
run_exe test_platform.exe
# A new prefix is still being set up in the background after the first run (a clean clone's CI once saw a later run
# fail with no output): wait for the wine server to go idle before the runs that compare.
"$(dirname "$WINE")/wineserver" -w

MODELS=$("$PY" -c "
import sys; sys.path.insert(0, 'engine/tools')
import make_tiny
m = make_tiny.build('tiny')
print(' '.join(m['gguf'][t] for t in ('q8_0', 'q2_0', 'iq2_xs', 'f16')))" | tail -n 1)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"; "$(dirname "$WINE")/wineserver" -k 2>/dev/null || true' EXIT

echo "--- strata.exe info"
first_model=${MODELS%% *}
run_exe strata.exe info "$first_model" > "$TMP/info-win.txt"
"$LINUX_ENGINE" info "$first_model" > "$TMP/info-linux.txt"
diff "$TMP/info-linux.txt" "$TMP/info-win.txt"
if grep -q $'\r' "$TMP/info-win.txt"; then echo "strata.exe wrote \\r\\n line ends (stdout not binary)"; exit 1; fi

echo "--- strata.exe generate (tokens and logits against the Linux build)"
for model in $MODELS; do
  for isa in scalar avx2 avx512; do
    args=(generate --model "$model" --prompt-ids 1,2,3,4,5 -n 8 --ignore-eos --threads 2)
    linux=$(STRATA_ISA=$isa "$LINUX_ENGINE" "${args[@]}" --logits-out "$TMP/linux.bin" 2>"$TMP/linux.err") || {
      echo "$(basename "$model") $isa: the Linux build failed"; cat "$TMP/linux.err"; exit 1; }
    # A run that fails is run once more, reported (see the --serve check below); a second failure fails the check.
    win=$(STRATA_ISA=$isa run_exe strata.exe "${args[@]}" --logits-out "$TMP/win.bin" 2>"$TMP/win.err") || {
      rc=$?; echo "$(basename "$model") $isa: strata.exe exited with $rc; its stderr:"; tail -n 20 "$TMP/win.err"
      echo "running it again"; "$(dirname "$WINE")/wineserver" -w
      win=$(STRATA_ISA=$isa run_exe strata.exe "${args[@]}" --logits-out "$TMP/win.bin" 2>"$TMP/win.err") || {
        rc=$?; echo "$(basename "$model") $isa: strata.exe exited with $rc again"; cat "$TMP/win.err"; exit 1; }; }
    logits=$("$PY" -c "
import numpy as np, sys
a, b = np.fromfile(sys.argv[1], np.float32), np.fromfile(sys.argv[2], np.float32)
if a.shape != b.shape: print('shapes differ', a.shape, b.shape); sys.exit(1)
d = float(np.abs(a - b).max())
print('bit-identical' if d == 0 else f'max |diff| {d:.3g}'); sys.exit(0 if d <= 1e-4 else 1)" "$TMP/linux.bin" "$TMP/win.bin") || {
      echo "$(basename "$model") $isa: logits differ: $logits"; exit 1; }
    if [ "$linux" != "$win" ] || [ -z "$linux" ]; then
      echo "$(basename "$model") $isa: tokens differ: linux [$linux] windows [$win]"; exit 1
    fi
    echo "$(basename "$model") $isa: tokens equal ($win), logits $logits"
  done
done

echo "--- strata.exe --serve (one GEN, then QUIT once DONE arrives)"
serve_tokens() {  # $1 = a name for its files, then the command; writes the T and DONE lines (timings cut) to $TMP/serve-$1.txt
  local name=$1; shift
  : > "$TMP/serve-$name.txt"
  coproc ENGINE { "$@" --serve --model "$first_model" --threads 2 2>"$TMP/serve-$name.err"; }
  local pid=$ENGINE_PID line rc=0
  while IFS= read -r line <&"${ENGINE[0]}"; do
    case $line in
      READY*) echo "GEN 6 1,2,3,4,5" >&"${ENGINE[1]}" ;;
      T\ *) echo "$line" >> "$TMP/serve-$name.txt" ;;
      DONE*) echo "$line" | cut -d' ' -f1-3,6 >> "$TMP/serve-$name.txt"; echo QUIT >&"${ENGINE[1]}"; break ;;
    esac
  done
  wait "$pid" || rc=$?
  if [ "$rc" != 0 ] || ! grep -q '^DONE 6 5 length$' "$TMP/serve-$name.txt"; then
    echo "serve ($name): exit code $rc; its token lines:"; cat "$TMP/serve-$name.txt"
    echo "its stderr (last 20 lines):"; tail -n 20 "$TMP/serve-$name.err"
    return 1
  fi
}
serve_tokens linux "$LINUX_ENGINE" || exit 1
# One retry under wine, reported: a clean-clone CI run once saw this run fail with no output (not reproduced in 40
# runs here, idle or loaded). A second failure fails the check.
if ! serve_tokens win "$WINE" "$REPO/build-mingw/engine/strata.exe"; then
  echo "serve under wine failed once (above); running it again"
  "$(dirname "$WINE")/wineserver" -w
  serve_tokens win "$WINE" "$REPO/build-mingw/engine/strata.exe" || exit 1
fi
diff "$TMP/serve-linux.txt" "$TMP/serve-win.txt"
echo "serve: $(grep -c '^T ' "$TMP/serve-win.txt") token lines equal"

#!/usr/bin/env bash
# `make test`: the whole suite, in three pytest runs.
#
#   1. tests marked `beside` (the README path: ~7.5 minutes that mostly wait on real time)
#      start first, at normal CPU priority, in the background;
#   2. everything else not marked `solo` runs next to them on TEST_WORKERS xdist workers
#      under `nice -n TEST_NICE`, so the kernel gives the `beside` tests' processes (a
#      Temporal server, a worker, HAProxy and its region backends, Locust) the CPU they ask
#      for first: what they judge (a load test's capacity through HAProxy) is not starved;
#   3. then tests marked `solo` run alone (the Python lab's power-loss test: its one event
#      loop sheds bursts when starved, so it would measure the other tests' load).
#
# Usage: scripts/run-tests.sh BIN WORKERS NICE [pytest args...]
# With pytest args naming some tests, a run that finds none (pytest's exit 5) is not a
# failure; without, it is.
set -u
bin=$1 workers=$2 niceness=$3
shift 3

beside_log=$(mktemp)
"$bin/python" -m pytest -q -p no:cacheprovider -m beside "$@" >"$beside_log" 2>&1 &
beside=$!
trap 'kill "$beside" 2>/dev/null; rm -f "$beside_log"' EXIT
trap 'exit 130' INT TERM
echo "tests marked beside are running next to the rest (pid $beside); their output comes after"

nice -n "$niceness" "$bin/python" -m pytest -q -n "$workers" --dist loadfile \
  --no-loadscope-reorder -m "not solo and not beside" "$@"
rc=$?
wait "$beside"
beside_rc=$?
echo "== tests marked beside, run next to the rest:"
cat "$beside_log"
"$bin/python" -m pytest -q -m solo "$@"
solo_rc=$?

status=0
for code in "$rc" "$beside_rc" "$solo_rc"; do
  if [ "$code" -eq 5 ] && [ $# -gt 0 ]; then
    continue
  fi
  [ "$code" -ne 0 ] && status=$code && break
done
if [ $# -gt 0 ] && [ "$rc" -eq 5 ] && [ "$beside_rc" -eq 5 ] && [ "$solo_rc" -eq 5 ]; then
  status=5
fi
exit "$status"

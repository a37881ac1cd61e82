#!/bin/sh
# Drover exec-loop: the entry point of the runner container in Kubernetes job mode.
#
# The worker container (which owns the run) hands this loop one step at a time through files
# on a shared volume, so nothing depends on pods/exec or attach (which drop long, silent
# connections and have reported failures as success):
#
#   $DIR/steps/N/script.sh   the step (written by the worker; its last line should `exec` the
#                            main command so signals reach it directly)
#   $DIR/steps/N/ready       renamed into place by the worker once script.sh is complete
#   $DIR/steps/N/output      stdout+stderr of the step, appended as it runs (tailed by offset)
#   $DIR/steps/N/exit        the exit code, written to exit.tmp then renamed: the ONLY success
#   $DIR/steps/N/signal      INT, TERM or KILL from the worker: forwarded to the step
#   $DIR/steps/N/done        written by this loop once the step has ended (stops its watcher)
#   $DIR/heartbeat           touched every second by this loop (stale = runner lost)
#   $DIR/worker-heartbeat    touched by the worker; stale for DROVER_EXEC_WORKER_TIMEOUT
#                            seconds (default 60) = worker gone: kill the step and exit
#   $DIR/shutdown            the worker is done: exit 0 once no step runs
#   $DIR/runner.lock         created once (O_EXCL) by the loop that drives this directory, with
#                            its pod and pid: a second runner on the same directory (a Job pod
#                            started twice, two run pods sharing a node's run directory) exits
#                            73 without running any step, so no step ever runs twice
#
# The pod's SIGTERM is noted but not obeyed: terraform must be stopped by the worker's
# signal so it can release its state lock. Runs under dash, busybox sh and bash.

DIR="${DROVER_EXEC_DIR:-/drover/exec}"
WORKER_TIMEOUT="${DROVER_EXEC_WORKER_TIMEOUT:-60}"
TICK="${DROVER_EXEC_TICK:-0.2}"

mkdir -p "$DIR/steps" || exit 70
# noclobber makes `>` an O_EXCL create: exactly one loop ever holds the lock, and it is never
# released (a loop that died mid-step left that step's outcome unknown; running it again is
# the worker's decision, not a second runner's).
if ! (set -C; echo "pod ${HOSTNAME:-unknown}, pid $$" >"$DIR/runner.lock") 2>/dev/null; then
  echo "[exec-loop] $DIR is already driven by another runner ($(cat "$DIR/runner.lock" 2>/dev/null || echo unknown)); refusing to run its steps a second time" >&2
  exit 73
fi
# Fractional sleep is not POSIX; fall back to whole seconds where it is unsupported.
sleep "$TICK" 2>/dev/null || TICK=1

trap 'echo "[exec-loop] stop signal received; waiting for the worker to stop the run" >&2' TERM INT HUP

ticks_per_second=$(awk "BEGIN { t = 1 / $TICK; if (t < 1) t = 1; printf \"%d\", t }")
tick_count=0

beat() {
  tick_count=$((tick_count + 1))
  if [ "$tick_count" -ge "$ticks_per_second" ] || [ ! -e "$DIR/heartbeat" ]; then
    tick_count=0
    : >"$DIR/heartbeat.tmp" && mv -f "$DIR/heartbeat.tmp" "$DIR/heartbeat"
  fi
}

# Seconds since the worker last touched its heartbeat (0 when it never has: still starting).
worker_silence() {
  [ -e "$DIR/worker-heartbeat" ] || { echo 0; return; }
  now=$(date +%s)
  then_=$(date -r "$DIR/worker-heartbeat" +%s 2>/dev/null || stat -c %Y "$DIR/worker-heartbeat" 2>/dev/null || echo "$now")
  echo $((now - then_))
}

worker_gone() {
  [ "$(worker_silence)" -gt "$WORKER_TIMEOUT" ]
}

# Forwards the worker's signals to step $1, keeps the heartbeat, and stops the step when the
# worker has gone. Runs in the background while the step runs in the foreground: a
# non-interactive shell starts background jobs with SIGINT ignored, which would make the
# worker's INT (terraform's graceful stop) ineffective, so the step itself must be foreground.
#
# The watcher ends when it sees the step's `done` marker, never by a signal: a TERM sent right
# after forking can reach the child before it has dropped the parent's trap (dash, busybox) and
# be swallowed, leaving `wait` blocked forever. A marker polled every tick cannot be lost.
watch_step() {
  step="$DIR/steps/$1"
  while [ ! -e "$step/done" ]; do
    if [ -e "$step/signal" ] && [ -e "$step/pid" ]; then
      sig=$(cat "$step/signal")
      mv -f "$step/signal" "$step/signal.sent"
      case "$sig" in
        INT | TERM | KILL) [ -e "$step/done" ] || kill "-$sig" "$(cat "$step/pid")" 2>/dev/null ;;
        *) echo "[exec-loop] ignoring unknown signal '$sig'" >>"$step/output" ;;
      esac
    fi
    if worker_gone && [ ! -e "$step/done" ]; then
      echo "[exec-loop] the worker stopped answering; stopping the step" >>"$step/output"
      kill -TERM "$(cat "$step/pid")" 2>/dev/null
      waited=0
      while [ "$waited" -lt 10 ] && [ ! -e "$step/done" ]; do
        sleep 1
        waited=$((waited + 1))
      done
      [ -e "$step/done" ] || kill -KILL "$(cat "$step/pid")" 2>/dev/null
    fi
    beat
    [ -e "$step/done" ] || sleep "$TICK"
  done
}

# Runs step $1 to completion and records its exit code (128+N when signal N ended it).
run_step() {
  step="$DIR/steps/$1"
  : >"$step/output"
  watch_step "$1" &
  watcher=$!
  # $$ of this sh is the pid the step keeps after exec: the one the watcher signals.
  sh -c 'echo $$ >"$1/pid"; exec sh "$1/script.sh"' exec-step "$step" >>"$step/output" 2>&1 </dev/null
  code=$?
  : >"$step/done"
  # A trapped signal (the pod's TERM) interrupts `wait` with a status above 128: wait again until
  # the watcher is reaped (then `wait` answers 127), so it never writes to this step's output
  # after the exit code is published.
  while :; do
    wait "$watcher" 2>/dev/null
    [ "$?" -gt 128 ] || break
  done
  echo "$code" >"$step/exit.tmp" && mv -f "$step/exit.tmp" "$step/exit"
}

n=1
beat
while :; do
  if [ -e "$DIR/steps/$n/ready" ]; then
    run_step "$n"
    n=$((n + 1))
    continue
  fi
  if [ -e "$DIR/shutdown" ]; then
    exit 0
  fi
  if worker_gone; then
    echo "[exec-loop] no word from the worker for more than ${WORKER_TIMEOUT}s; exiting" >&2
    exit 75
  fi
  beat
  sleep "$TICK"
done

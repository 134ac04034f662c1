#!/bin/sh
# killjob.sh DIR: one run of a job of TestKillNineLoop. Its token is
# ATTEMPT.PID.START (START: field 22 of /proc/PID/stat, the shell's start
# time). It starts a tree of processes (a child, a grandchild, and one in a
# session of its own left behind by a double fork, with a child of its own),
# writing "PID START" for each to DIR/pids/JOBID.TOKEN, 6 lines in all; once
# all 6 are written it sleeps for as many milliseconds as the job's data
# (a number on stdin), appends "JOBID TOKEN" to DIR/results and prints the
# token, as a JSON string, as its result.
d=$1

# rec PID: appends "PID START" to $f, if PID still runs.
rec() {
	read -r s <"/proc/$1/stat" || return 0
	set -- $s
	echo "$1 ${22}" >>"$f"
}

if [ "$2" = daemon ]; then
	f=$3
	rec $$
	sleep 1000 &
	rec $!
	wait
	exit 0
fi

read -r s </proc/$$/stat
set -- $s
tok="$JOBSTAGE_JOB_ATTEMPT.$1.${22}"
f="$d/pids/$JOBSTAGE_JOB_ID.$tok"
read -r ms || true
case $ms in '' | *[!0-9]*) ms=10 ;; esac

rec $$
sleep 1000 &
rec $!
(
	sleep 1000 &
	rec $!
	wait
) &
rec $!
(setsid "$0" "$d" daemon "$f" </dev/null >/dev/null 2>&1 &)
while [ "$(wc -l <"$f")" -lt 6 ]; do sleep 0.005; done

if [ "$ms" -lt 10 ]; then
	sleep "0.00$ms"
elif [ "$ms" -lt 100 ]; then
	sleep "0.0$ms"
else
	sleep 0.1
fi
echo "$JOBSTAGE_JOB_ID $tok" >>"$d/results"
printf '"%s"\n' "$tok"

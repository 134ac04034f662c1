#!/bin/sh
# tree.sh FILE [exit]: starts a tree of processes four deep, two of its
# branches in sessions of their own (setsid), one of them left by a parent
# that exits at once (a double fork); each process appends its pid to FILE,
# 13 lines in all. The root then waits, or with "exit" exits once all 13 are
# written.
f=$1
case $2 in
child)
	echo $$ >>"$f"
	sleep 1000 &
	echo $! >>"$f"
	"$0" "$f" grandchild &
	wait
	;;
grandchild)
	echo $$ >>"$f"
	sleep 1000 &
	echo $! >>"$f"
	wait
	;;
daemon)
	echo $$ >>"$f"
	setsid "$0" "$f" grandchild </dev/null >/dev/null 2>&1 &
	exit 0
	;;
*)
	echo $$ >>"$f"
	sleep 1000 &
	echo $! >>"$f"
	"$0" "$f" child &
	setsid "$0" "$f" child &
	"$0" "$f" daemon &
	if [ "$2" = exit ]; then
		while [ "$(wc -l <"$f")" -lt 13 ]; do sleep 0.01; done
		exit 0
	fi
	wait
	;;
esac

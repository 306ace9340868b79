#!/bin/sh
# llama-server, but the model whose --alias is $SLOW_START_MODEL starts
# $SLOW_START_S seconds late: a stand-in for a larger model's load
# (gigabytes read, then warmed up) in front of a demo model that loads in
# a second. bench/scenarios.sh gives it to sluice as --llama-server, with
# SLOW_START_EXE the real llama-server.
alias=
prev=
for a; do
	[ "$prev" = --alias ] && alias=$a
	prev=$a
done
[ -n "$alias" ] && [ "$alias" = "$SLOW_START_MODEL" ] && sleep "$SLOW_START_S"
exec "${SLOW_START_EXE:-llama-server}" "$@"

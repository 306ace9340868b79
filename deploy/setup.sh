#!/usr/bin/env bash
# sluice's one set-up step: installs the Debian packages it needs, makes sure
# a llama-server is available, and builds into build/. Safe to run again:
# with nothing to do it only rebuilds what changed.
#
# Environment:
#   SLUICE_LLAMA_SERVER    llama-server to use (else: on PATH, else one is
#                          provisioned into the cache directory)
#   SLUICE_MESON_OPTIONS   extra options for meson (e.g. --werror)
#   SLUICE_EXTRA_PACKAGES  more Debian packages to install with the rest,
#                          space-separated (.ci/run: the deploy suite's)
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'setup: %s\n' "$*"; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

sudo=""
if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null || die "not root and no sudo: install the packages listed in README.md by hand"
	sudo="sudo"
fi

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

# ---- Debian packages ----
# chromium: the tests drive a headless browser through sluice (CORS from a
# page on another origin; llama-server's web UI relayed with --ui).
# nginx: tests/test_nginx.py runs deploy/nginx/sluice.conf in front of sluice
# (Debian's plain nginx package has the proxy, upstream keepalive and map
# modules it uses), as a process of its own; see "services" below.
# python3-yaml: tests/test_deploy_files.py parses the Kubernetes manifests,
# tests/test_cli.py what --check-config prints.
# systemd: its systemd-analyze checks the unit file (nothing is started;
# containers often lack it).
# libyaml-dev: sluice reads its configuration file (--config) with libyaml.
# libxxhash-dev: prompt prefixes are hashed with xxHash for prefix affinity.
# libc-ares-dev: --upstream-dns names are looked up with c-ares.
# libssl-dev: sluice digests API keys (keys:) with libcrypto's SHA-256.
# libyajl-dev: relayed request bodies are validated with yajl.
# libunistring-dev: ... and their UTF-8 checked with libunistring.
packages=(gcc libc6-dev pkgconf meson ninja-build python3
	libuv1-dev libcurl4-openssl-dev libjansson-dev libjsmn-dev libyaml-dev libxxhash-dev chromium
	nginx python3-yaml systemd libc-ares-dev libssl-dev libyajl-dev
	libunistring-dev)
read -r -a extra <<<"${SLUICE_EXTRA_PACKAGES:-}"
missing=()
extra_missing=()
if command -v dpkg-query >/dev/null; then
	for p in "${packages[@]}"; do
		installed "$p" || missing+=("$p")
	done
	for p in "${extra[@]}"; do
		installed "$p" || extra_missing+=("$p")
	done
	# llhttp: trixie and later ship a library; bookworm only the generated
	# sources in node-llhttp, which subprojects/llhttp builds.
	if ! installed libllhttp-dev && ! installed node-llhttp; then
		missing+=(llhttp)
	fi
elif ! pkg-config --exists libuv libcurl jansson yaml-0.1 libcares; then
	die "not a Debian system: install a C compiler, meson, ninja, pkg-config, libuv, libcurl, jansson, libyaml, c-ares and llhttp, then run this again"
fi

if [ $((${#missing[@]} + ${#extra_missing[@]})) -gt 0 ]; then
	say "updating the package lists"
	update_log=$(mktemp)
	apt_update() {
		$sudo apt-get -q "$@" update >"$update_log" 2>&1 &&
			! grep -q '^E: ' "$update_log"
	}
	if ! apt_update; then
		# A snapshot mirror's Release files are past their Valid-Until
		# date. When that is apt's only error, take the lists anyway
		# (signatures are still checked), as provision-llama-server.sh does.
		expired='^E: Release file for .* is expired \(invalid since .*\)\. Updates for this repository will not be applied\.$'
		if grep -q '^E: ' "$update_log" &&
			! grep '^E: ' "$update_log" | grep -qvE "$expired"; then
			say "the mirror's Release files have expired (a snapshot mirror?): retrying with Acquire::Check-Valid-Until=false (signatures are still checked)"
			apt_update -o Acquire::Check-Valid-Until=false ||
				die "apt-get update failed: $(tail -n 3 "$update_log" | paste -s -d ' ')"
		else
			die "apt-get update failed: $(tail -n 3 "$update_log" | paste -s -d ' ')"
		fi
	fi
	rm -f "$update_log"
	for i in "${!missing[@]}"; do
		if [ "${missing[$i]}" = llhttp ]; then
			if apt-cache show libllhttp-dev >/dev/null 2>&1; then
				missing[$i]=libllhttp-dev
			else
				missing[$i]=node-llhttp
			fi
		fi
	done
	# Services: Debian starts and enables a package's daemon as it
	# installs it (nginx: a web server on port 80; docker.io: dockerd and
	# its bridge network). The tests run their own, so while setup
	# installs packages, a policy-rc.d (Debian's switch for this) keeps any
	# from starting, unless the machine has its own policy; the services
	# of the packages setup installed are then disabled at boot too. A
	# service that was there before is left alone.
	policy=/usr/sbin/policy-rc.d
	own_policy=""
	drop_policy() { [ -z "$own_policy" ] || $sudo rm -f "$policy"; own_policy=""; }
	# Removed however setup ends, so that an interrupted install does not
	# leave every later package's service kept from starting.
	trap drop_policy EXIT
	trap 'exit 130' INT TERM
	if [ ! -e "$policy" ]; then
		printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null &&
			$sudo chmod 755 "$policy" && own_policy=1
	fi
	apt_install() {
		$sudo env DEBIAN_FRONTEND=noninteractive apt-get -q install -y \
			--no-install-recommends "$@" >/dev/null 2>&1
	}
	if [ ${#missing[@]} -gt 0 ]; then
		say "installing: ${missing[*]}"
		apt_install "${missing[@]}" || die "apt-get install ${missing[*]} failed"
	fi
	# The extras serve tests of their own (the deploy suite), which skip
	# without them: one that cannot be installed (docker.io beside Docker
	# CE, say) must not stop the build.
	if [ ${#extra_missing[@]} -gt 0 ]; then
		say "installing: ${extra_missing[*]}"
		apt_install "${extra_missing[@]}" ||
			say "warning: apt-get install ${extra_missing[*]} failed; going on without them"
	fi
	drop_policy
	if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
		for p in "${missing[@]}" "${extra_missing[@]}"; do
			case "$p" in
			nginx) $sudo systemctl disable --quiet nginx || true ;;
			docker.io) $sudo systemctl disable --quiet docker docker.socket || true ;;
			esac
		done
	fi
else
	say "packages: all present"
fi

# ---- llama-server ----
cache="${SLUICE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice}"
if [ -n "${SLUICE_LLAMA_SERVER:-}" ]; then
	[ -x "$SLUICE_LLAMA_SERVER" ] || die "SLUICE_LLAMA_SERVER=$SLUICE_LLAMA_SERVER is not an executable file"
	llama="$SLUICE_LLAMA_SERVER"
elif command -v llama-server >/dev/null; then
	llama=$(command -v llama-server)
else
	llama="$cache/llama.cpp/bin/llama-server"
	if ! { [ -x "$llama" ] && "$llama" --version >/dev/null 2>&1; }; then
		how_to_get() {
			cat >&2 <<'EOF'
setup: error: no llama-server, and setup cannot provision one here. Get
llama-server from your package manager (e.g. Homebrew's llama.cpp), a
llama.cpp release, or the official container image, then put it on PATH or
set SLUICE_LLAMA_SERVER=/path/to/llama-server and run setup again.
EOF
			exit 1
		}
		command -v apt-get >/dev/null || how_to_get
		say "no llama-server on this machine: provisioning one from Debian unstable into $cache"
		./deploy/provision-llama-server.sh || how_to_get
	fi
fi
say "llama-server: $llama ($("$llama" --version 2>&1 | head -n 1))"

# ---- build ----
# shellcheck disable=SC2206 # word splitting of the options is intended
opts=(${SLUICE_MESON_OPTIONS:-} "-Dllama_server=$llama")
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if [ ! -f build/build.ninja ]; then
	meson setup build "${opts[@]}" >"$log" 2>&1 ||
		{ cat "$log" >&2; die "meson setup failed"; }
	printf '%s\n' "${opts[@]}" >build/.setup-options
elif [ "$(printf '%s\n' "${opts[@]}")" != "$(cat build/.setup-options 2>/dev/null)" ]; then
	# Reconfigure only when the options changed: keeps a re-run quick.
	meson configure build "${opts[@]}" >"$log" 2>&1 ||
		{ cat "$log" >&2; die "meson configure failed"; }
	printf '%s\n' "${opts[@]}" >build/.setup-options
fi
ninja -C build >"$log" 2>&1 || { cat "$log" >&2; die "build failed"; }
say "built build/sluice; run it with ./build/sluice, test with: meson test -C build --print-errorlogs"

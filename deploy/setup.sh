#!/usr/bin/env bash
# sluice's set-up: installs the Debian packages that building and running
# sluice needs (with --tests, also those the test suite uses), makes sure a
# llama-server is available, and builds into build/. Safe to run again:
# with nothing to do it only rebuilds what changed. --help says more.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'setup: %s\n' "$*"; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

usage() {
	cat <<'EOF'
Usage: ./deploy/setup.sh [--tests]

Installs the Debian packages that building and running sluice needs (a C
compiler, meson, ninja, pkgconf and the libraries' -dev packages; on
bookworm, llhttp's C sources are unpacked into the cache directory instead),
makes sure a llama-server is available (provisioning one into the cache
directory when there is none), and builds into build/. Then: ./build/sluice

  --tests   also install what the test suite uses (chromium, nginx,
            python3-yaml, systemd for systemd-analyze, curl, nodejs and
            npm, and with npm ci the npm package in tests/otlp). Then:
            meson test -C build --print-errorlogs
  --help    this text

Packages are installed with apt-get (through sudo when not root). Without
root or sudo, setup goes on when every package is already there, and
otherwise prints the apt-get command for an administrator to run.

Environment:
  SLUICE_LLAMA_SERVER    llama-server to use (default: llama-server on PATH,
                         else one provisioned into the cache directory)
  SLUICE_CACHE_DIR       the cache directory: a provisioned llama-server,
                         and on bookworm llhttp's C sources (default:
                         ${XDG_CACHE_HOME:-~/.cache}/sluice)
  SLUICE_MESON_OPTIONS   more options for meson setup (default: none;
                         e.g. --werror)
  SLUICE_EXTRA_PACKAGES  more Debian packages to install, space-separated;
                         setup goes on without those it cannot install
                         (default: none; .ci/run: the deploy suite's)
EOF
}

tests=""
for arg in "$@"; do
	case $arg in
	--tests) tests=1 ;;
	-h | --help) usage; exit 0 ;;
	*) die "unknown argument '$arg' (./deploy/setup.sh --help lists them)" ;;
	esac
done

# "2 min 44 s" for a number of seconds.
duration() {
	if [ "$1" -ge 60 ]; then
		printf '%d min %d s' $(($1 / 60)) $(($1 % 60))
	else
		printf '%d s' "$1"
	fi
}

# Prints the last lines apt wrote to the log $1 (its errors end it), to
# stderr, after the one-line error $2; the whole log stays for a look.
apt_failed() {
	{
		printf 'setup: error: %s; apt said:\n' "$2"
		tail -n 8 "$1" | sed 's/^/  /'
		printf 'setup: (all it said: %s)\n' "$1"
	} >&2
	exit 1
}

# ---- Debian packages ----
# Building and running sluice:
# gcc, libc6-dev, pkgconf, meson, ninja-build: the build (meson runs on
#   python3, which tests/meson.build also looks for).
# libuv1-dev: the event loop. libcurl4-openssl-dev: the libcurl upstream
#   client; ca-certificates: an https:// upstream is verified against them.
# libjansson-dev, libjsmn-dev: JSON. libyaml-dev: --config's file.
# libxxhash-dev: prompt prefixes are hashed with xxHash for prefix affinity.
# libc-ares-dev: --upstream-dns names are looked up with c-ares.
# libssl-dev: API keys (keys:) are digested with libcrypto's SHA-256.
# libyajl-dev: relayed request bodies are validated with yajl ...
# libunistring-dev: ... and their UTF-8 checked with libunistring.
# llhttp: below; a package on trixie and later, sources on bookworm.
packages=(gcc libc6-dev pkgconf meson ninja-build python3 ca-certificates
	libuv1-dev libcurl4-openssl-dev libjansson-dev libjsmn-dev libyaml-dev
	libxxhash-dev libc-ares-dev libssl-dev libyajl-dev libunistring-dev)
# The test suite (--tests):
# chromium: the tests drive a headless browser through sluice (CORS from a
#   page on another origin; llama-server's web UI relayed with --ui).
# nginx: tests/test_nginx.py runs deploy/nginx/sluice.conf in front of
#   sluice (Debian's plain nginx has the proxy, upstream keepalive and map
#   modules it uses), as a process of its own; see "services" below.
# python3-yaml: tests/test_deploy_files.py parses the Kubernetes manifests,
#   tests/test_cli.py what --check-config prints.
# systemd: its systemd-analyze checks the unit file (nothing is started;
#   containers often lack it).
# curl: tests/test_readme.py runs the README's curl examples as written.
# nodejs, npm: tests/test_trace.py decodes sluice's OTLP exports with
#   OpenTelemetry's own OTLP definitions, an npm package (tests/otlp/,
#   installed below with npm ci from its lock file). Only where node and
#   npm are not on the PATH already: NodeSource's nodejs bundles npm and
#   conflicts with Debian's npm package.
test_packages=(chromium nginx python3-yaml systemd curl)
if [ -n "$tests" ]; then
	packages+=("${test_packages[@]}")
	command -v node >/dev/null || packages+=(nodejs)
	command -v npm >/dev/null || packages+=(npm)
fi
read -r -a extra <<<"${SLUICE_EXTRA_PACKAGES:-}"

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

cache="${SLUICE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice}"

# llhttp: trixie and later ship a library, libllhttp-dev. Bookworm has only
# node-llhttp, a Node.js package that carries llhttp's generated C sources
# (which subprojects/llhttp builds), and installing it pulls in nodejs and
# ICU: 14 packages with it, 21 MB to download and 93 MB on disk for 600 kB
# of C.
# So on bookworm setup downloads node-llhttp's .deb alone (150 kB), unpacks
# it aside, and keeps the sources, its copyright and its version in
# $llhttp_dir, which the build is pointed at (-Dllhttp:source_dir; a build
# directory set up by hand looks there too: subprojects/llhttp). An
# installed libllhttp-dev or node-llhttp is used as it is. The copy is
# fetched again when apt's lists offer another version (a security update),
# as an installed package would be upgraded.
llhttp_dir="$cache/llhttp"
# The version of node-llhttp unpacked into $llhttp_dir, or nothing.
llhttp_unpacked() {
	[ -f "$llhttp_dir/llhttp.c" ] && [ -f "$llhttp_dir/llhttp.h" ] &&
		cat "$llhttp_dir/VERSION" 2>/dev/null
}
# The version of node-llhttp that apt would download, or nothing.
llhttp_candidate() {
	apt-cache policy node-llhttp 2>/dev/null |
		sed -n 's/^ *Candidate: //p' | grep -v '^(none)$'
}
# Unpacks node-llhttp's sources into $llhttp_dir; apt's lists must have it.
fetch_llhttp() {
	local work deb apt_opts=() version
	work=$(mktemp -d "${TMPDIR:-/tmp}/sluice-setup-llhttp.XXXXXX")
	# As root, apt downloads as the _apt user, who cannot write there.
	[ "$(id -u)" -ne 0 ] || apt_opts=(-o APT::Sandbox::User=root)
	if ! (cd "$work" && apt-get -q "${apt_opts[@]}" download node-llhttp) >"$work/log" 2>&1; then
		printf 'setup: error: apt-get download node-llhttp failed; apt said:\n' >&2
		tail -n 8 "$work/log" | sed 's/^/  /' >&2
		rm -rf "$work"
		exit 1
	fi
	deb=$(echo "$work"/node-llhttp_*.deb)
	# shellcheck disable=SC2016 # dpkg-deb's own ${Version}, not the shell's
	version=$(dpkg-deb --show --showformat='${Version}' "$deb")
	dpkg -x "$deb" "$work/root"
	rm -rf "$llhttp_dir.new"
	mkdir -p "$llhttp_dir.new"
	cp "$work"/root/usr/share/llhttp/{llhttp.c,api.c,http.c} \
		"$work/root/usr/share/include/llhttp/llhttp.h" \
		"$work/root/usr/share/doc/node-llhttp/copyright" "$llhttp_dir.new/"
	printf '%s\n' "$version" >"$llhttp_dir.new/VERSION"
	# Dated now, not as packed: ninja rebuilds what is newer than its
	# objects, and another version's files can be older than those.
	touch "$llhttp_dir.new"/*
	rm -rf "$llhttp_dir" "$work"
	mv "$llhttp_dir.new" "$llhttp_dir"
	say "llhttp: node-llhttp $version's C sources are in $llhttp_dir"
}

sudo=""
can_install=1
if [ "$(id -u)" -ne 0 ]; then
	if command -v sudo >/dev/null; then sudo="sudo"; else can_install=""; fi
fi

missing=()
extra_missing=()
# llhttp from $llhttp_dir (1), to be fetched there first (1), and whether
# apt's lists must be updated for that (1).
llhttp_cached=""
llhttp_fetch=""
lists_needed=""
if command -v dpkg-query >/dev/null; then
	for p in "${packages[@]}"; do
		installed "$p" || missing+=("$p")
	done
	for p in "${extra[@]}"; do
		installed "$p" || extra_missing+=("$p")
	done
	if ! installed libllhttp-dev && ! installed node-llhttp; then
		llhttp_cached=1
		candidate=$(llhttp_candidate) || candidate=""
		if apt-cache show libllhttp-dev >/dev/null 2>&1; then
			missing+=(libllhttp-dev)
			llhttp_cached=""
		elif [ -z "$(llhttp_unpacked)" ] ||
			{ [ -n "$candidate" ] && [ "$candidate" != "$(llhttp_unpacked)" ]; }; then
			llhttp_fetch=1
			# Without lists that have it, apt-get update first;
			# one who cannot is told to install node-llhttp.
			if [ -z "$candidate" ]; then
				if [ -n "$can_install" ]; then lists_needed=1; else missing+=(node-llhttp); fi
			fi
		fi
	fi
elif ! pkg-config --exists libuv libcurl jansson yaml-0.1 libxxhash libcares libcrypto yajl; then
	die "not a Debian system: install a C compiler, meson, ninja, pkg-config and the development files of libuv, libcurl, jansson, jsmn, libyaml, xxHash, c-ares, libcrypto, yajl, libunistring and llhttp, then run this again"
fi

if [ ${#missing[@]} -gt 0 ] && [ -z "$can_install" ]; then
	{
		say "error: these packages are missing, and setup cannot install them (not root, and no sudo): ${missing[*]}"
		say "an administrator can install them with:"
		printf '    apt-get update && apt-get install --no-install-recommends %s\n' "${missing[*]}"
	} >&2
	exit 1
fi
if [ ${#extra_missing[@]} -gt 0 ] && [ -z "$can_install" ]; then
	say "warning: not root and no sudo: going on without ${extra_missing[*]} (SLUICE_EXTRA_PACKAGES)"
	extra_missing=()
fi

if [ $((${#missing[@]} + ${#extra_missing[@]})) -gt 0 ] || [ -n "$lists_needed" ]; then
	started=$SECONDS
	apt_log=$(mktemp "${TMPDIR:-/tmp}/sluice-setup-apt.XXXXXX")
	say "packages: updating apt's package lists"
	apt_update() {
		$sudo apt-get -q "$@" update >"$apt_log" 2>&1 &&
			! grep -q '^E: ' "$apt_log"
	}
	if ! apt_update; then
		# A snapshot mirror's Release files are past their Valid-Until
		# date. When that is apt's only error, take the lists anyway
		# (signatures are still checked), as provision-llama-server.sh does.
		expired='^E: Release file for .* is expired \(invalid since .*\)\. Updates for this repository will not be applied\.$'
		if grep -q '^E: ' "$apt_log" &&
			! grep '^E: ' "$apt_log" | grep -qvE "$expired"; then
			say "packages: the mirror's Release files have expired (a snapshot mirror?): retrying with Acquire::Check-Valid-Until=false (signatures are still checked)"
			apt_update -o Acquire::Check-Valid-Until=false ||
				apt_failed "$apt_log" "apt-get update failed"
		else
			apt_failed "$apt_log" "apt-get update failed"
		fi
	fi
	# Now that the lists are fresh, whether this release has libllhttp-dev
	# is sure (an image without lists said no to both).
	if [ -n "$llhttp_fetch" ] && apt-cache show libllhttp-dev >/dev/null 2>&1; then
		missing+=(libllhttp-dev)
		llhttp_fetch=""
		llhttp_cached=""
	fi
	# The extras serve tests of their own (the deploy suite), which skip
	# without them: one this release does not have is left out, and one
	# that cannot be installed (docker.io beside Docker CE, say) must not
	# stop the build.
	available=()
	for p in "${extra_missing[@]}"; do
		if apt-cache show "$p" >/dev/null 2>&1; then
			available+=("$p")
		else
			say "warning: no package $p here: going on without it (SLUICE_EXTRA_PACKAGES)"
		fi
	done
	extra_missing=("${available[@]}")

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

	# apt-get install, its output into $apt_log, saying how far it got
	# (from apt's status lines): at each quarter of the download and of
	# the installation, and between them every 15 s that it moved on.
	# First, without installing (--assume-no), what it will take: apt's
	# own summary, and its errors before anything changes.
	apt_install() {
		local what=$1 summary count need disk
		shift
		if ! summary=$($sudo env DEBIAN_FRONTEND=noninteractive apt-get \
			install --assume-no --no-install-recommends "$@" 2>&1) &&
			grep -q '^E: ' <<<"$summary"; then
			printf '%s\n' "$summary" >"$apt_log"
			return 1
		fi
		count=$(sed -n 's/.* \([0-9]*\) newly installed.*/\1/p' <<<"$summary")
		need=$(sed -n 's/^Need to get \(.*\) of archives\.$/\1/p' <<<"$summary")
		disk=$(sed -n 's/^After this operation, \(.*\) of additional disk space will be used\.$/\1/p' <<<"$summary")
		say "packages: installing $what"
		say "packages: ${count:-?} packages with what they need: ${need:-nothing} to download, ${disk:-no more} on disk"
		$sudo env DEBIAN_FRONTEND=noninteractive apt-get -q \
			-o APT::Status-Fd=1 install -y --no-install-recommends "$@" \
			2>&1 | {
			local line kind pct f x said=downloaded shown=0 at=$SECONDS
			while IFS= read -r line; do
				case $line in
				dlstatus:*) kind=downloaded ;;
				pmstatus:*) kind=installed ;;
				*) printf '%s\n' "$line" >>"$apt_log"; continue ;;
				esac
				# kind:package:percent:text; a package may
				# carry :arch, so the percent is the first
				# number after the kind.
				pct=""
				IFS=: read -r -a f <<<"$line"
				for x in "${f[@]:1}"; do
					[[ $x =~ ^[0-9]+(\.[0-9]+)?$ ]] && { pct=${x%%.*}; break; }
				done
				[ -n "$pct" ] || continue
				# apt's download figure can pass 100%.
				[ "$pct" -le 100 ] || pct=100
				[ "$kind" = "$said" ] || { said=$kind; shown=0; }
				if [ $((pct / 25)) -gt $((shown / 25)) ] ||
					{ [ "$pct" -gt "$shown" ] && [ $((SECONDS - at)) -ge 15 ]; }; then
					say "packages: $kind $pct%"
					shown=$pct
					at=$SECONDS
				fi
			done
		}
	}
	: >"$apt_log"
	if [ ${#missing[@]} -gt 0 ]; then
		apt_install "${missing[*]}" "${missing[@]}" ||
			apt_failed "$apt_log" "apt-get install ${missing[*]} failed"
	fi
	if [ ${#extra_missing[@]} -gt 0 ]; then
		apt_install "${extra_missing[*]}" "${extra_missing[@]}" ||
			say "warning: apt-get install ${extra_missing[*]} failed; going on without them. apt said: $(tail -n 3 "$apt_log" | paste -s -d ' ')"
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
	rm -f "$apt_log"
	say "packages: done in $(duration $((SECONDS - started)))"
else
	say "packages: all there"
fi
if [ -n "$llhttp_fetch" ]; then
	say "llhttp: fetching node-llhttp's C sources alone (150 kB; not nodejs and ICU, which installing it would pull in)"
	fetch_llhttp
fi

# ---- llama-server ----
if [ -n "${SLUICE_LLAMA_SERVER:-}" ]; then
	[ -x "$SLUICE_LLAMA_SERVER" ] || die "SLUICE_LLAMA_SERVER=$SLUICE_LLAMA_SERVER is not an executable file"
	llama="$SLUICE_LLAMA_SERVER"
elif command -v llama-server >/dev/null; then
	llama=$(command -v llama-server)
else
	llama="$cache/llama.cpp/bin/llama-server"
	# The provisioning script also renews an older wrapper, without
	# downloading anything when the packages are there.
	if ! { [ -x "$llama" ] && grep -q -- '--argv0' "$llama" &&
		"$llama" --version >/dev/null 2>&1; }; then
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
		started=$SECONDS
		if [ -e "$llama" ]; then
			say "llama-server: renewing $llama (a wrapper from an older setup)"
		else
			say "llama-server: none on this machine: provisioning one from Debian unstable into $cache (about 25 MB to download)"
		fi
		./deploy/provision-llama-server.sh || how_to_get
		[ $((SECONDS - started)) -lt 5 ] ||
			say "llama-server: done in $(duration $((SECONDS - started)))"
	fi
fi
say "llama-server: $llama ($("$llama" --version 2>&1 | head -n 1))"

# ---- build ----
started=$SECONDS
# shellcheck disable=SC2206 # word splitting of the options is intended
opts=(${SLUICE_MESON_OPTIONS:-} "-Dllama_server=$llama")
[ -z "$llhttp_cached" ] ||
	opts+=("-Dllhttp:source_dir=$llhttp_dir" "-Dllhttp:include_dir=$llhttp_dir")
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if [ ! -f build/build.ninja ]; then
	say "build: configuring build/ (meson setup)"
	meson setup build "${opts[@]}" >"$log" 2>&1 ||
		{ cat "$log" >&2; die "meson setup failed"; }
	printf '%s\n' "${opts[@]}" >build/.setup-options
elif [ "$(printf '%s\n' "${opts[@]}")" != "$(cat build/.setup-options 2>/dev/null)" ]; then
	# Reconfigure only when the options changed: keeps a re-run quick.
	say "build: reconfiguring build/ (meson configure)"
	meson configure build "${opts[@]}" >"$log" 2>&1 ||
		{ cat "$log" >&2; die "meson configure failed"; }
	printf '%s\n' "${opts[@]}" >build/.setup-options
fi
# How long: a whole build is 129 steps and about 100 s of CPU time (64 s
# user, 32 s system, measured on a fresh bookworm), so each step to do
# counts 0.75 s of a core; a busy machine takes longer. Options meson
# configure changed are applied first (ninja's build.ninja target), or the
# count would be of that one step.
ninja -C build build.ninja >"$log" 2>&1 || { cat "$log" >&2; die "meson could not regenerate build/"; }
steps=$(ninja -C build -n 2>/dev/null | grep -c '^\[') || steps=0
if [ "$steps" -gt 20 ]; then
	cores=$(nproc 2>/dev/null || echo 1)
	minutes=$(((steps * 3 / 4 / cores + 30) / 60))
	[ "$minutes" -gt 0 ] || minutes=1
	say "build: compiling and linking ($steps steps, about $minutes min on $cores idle cores)"
elif [ "$steps" -gt 0 ]; then
	say "build: compiling"
fi
# ninja, its output into $log, saying how far it got from its "[done/all]"
# lines at each tenth, so that a build of minutes is never long silent.
build_with_progress() {
	ninja -C build 2>&1 | {
		local line n all pct shown=0
		while IFS= read -r line; do
			printf '%s\n' "$line" >>"$log"
			[[ $line =~ ^\[([0-9]+)/([0-9]+)\]\  ]] || continue
			n=${BASH_REMATCH[1]} all=${BASH_REMATCH[2]}
			pct=$((n * 100 / all))
			# The last tenth is the "done" line below.
			if [ "$pct" -lt 100 ] && [ $((pct / 10)) -gt $((shown / 10)) ]; then
				say "build: $pct% ($n of $all steps, $(duration $((SECONDS - started))))"
				shown=$pct
			fi
		done
	}
}
# What went wrong: ninja's output less its progress lines (what is left is
# the failed command and the compiler's words), else its last lines.
build_failed() {
	grep -v '^\[[0-9]*/[0-9]*\] ' "$log" >&2 || tail -n 20 "$log" >&2
	die "build failed"
}
: >"$log"
if [ "$steps" -gt 20 ]; then
	build_with_progress || build_failed
else
	ninja -C build >"$log" 2>&1 || build_failed
fi
[ "$steps" -eq 0 ] || say "build: done in $(duration $((SECONDS - started)))"
# ---- the tests' npm packages ----
# tests/otlp/'s, from its lock file, into tests/otlp/node_modules (ignored
# by git); again only when the lock file changed since.
if [ -n "$tests" ]; then
	otlp=tests/otlp
	if ! cmp -s "$otlp/package-lock.json" "$otlp/node_modules/.sluice-lock"; then
		say "tests: installing $otlp's npm packages (npm ci)"
		(cd "$otlp" && npm ci --ignore-scripts --no-audit --no-fund) >"$log" 2>&1 ||
			{ cat "$log" >&2; die "npm ci in $otlp failed"; }
		cp "$otlp/package-lock.json" "$otlp/node_modules/.sluice-lock"
	fi
fi
if [ -n "$tests" ]; then
	say "ready: run sluice with ./build/sluice, the tests with: meson test -C build --print-errorlogs"
else
	say "ready: run sluice with ./build/sluice (the tests need ./deploy/setup.sh --tests first)"
fi

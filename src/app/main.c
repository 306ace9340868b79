/* main.c: sluice's entry point: options, the one-shot actions, the app. */
#include "app.h"

#include "sluice/fleet/child.h"
#include "sluice/base/common.h"
#include "sluice/config/config.h"
#include "sluice/fleet/demo_model.h"
#include "sluice/tenants/config_sections.h"
#include "sluice/tenants/keys.h"
#include "sluice/base/log.h"
#include "sluice/net/probe.h"
#include "sluice/fleet/startup.h"

#include <curl/curl.h>
#include <llhttp.h>
#include <signal.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sl_build_config.h"

extern char **environ;

/*
 * Each client connection takes a descriptor, and each request in flight
 * another upstream: use what the hard limit allows, and say so when even
 * that is short of --max-connections.
 */
static void raise_fd_limit(unsigned max_connections)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < max_connections + 64)
		sl_warn("only %llu file descriptors (ulimit -n): fewer than "
		        "--max-connections %u needs",
		        (unsigned long long)rl.rlim_cur, max_connections);
}

/* --probe URL: the exit status a container's HEALTHCHECK reads. */
static int probe(const char *url)
{
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		fprintf(stderr, "sluice: libcurl failed to initialise\n");
		return EXIT_FAILURE;
	}
	char err[CURL_ERROR_SIZE + 64];
	int rc = sl_probe(url, err, sizeof(err));
	if (rc != 0) {
		/* A container's health log keeps this line: no password. */
		char *shown = sl_url_shown(url);
		fprintf(stderr, "sluice: --probe %s: %s\n", shown, err);
		free(shown);
	}
	curl_global_cleanup();
	return rc == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

int main(int argc, char **argv)
{
	/* sluice's own executable doubles as llama-server's launcher. */
	if (argc > 0 && strcmp(argv[0], SL_LAUNCHER_ARGV0) == 0)
		return sl_launcher_main(argc, argv);

	struct sl_config cfg;
	char err[512];
	if (sl_config_parse(&cfg, sl_config_sections, argc, argv, environ, err,
	                    sizeof(err)) != 0) {
		fprintf(stderr, "sluice: %s\n", err);
		sl_config_free(&cfg);
		return SL_EXIT_USAGE;
	}
	int code = EXIT_SUCCESS;
	if (cfg.help) {
		sl_config_usage(stdout);
		goto out;
	}
	if (cfg.version) {
		printf("sluice %s (libuv %s, %s, llhttp %d.%d.%d)\n",
		       SL_VERSION, uv_version_string(), curl_version(),
		       LLHTTP_VERSION_MAJOR, LLHTTP_VERSION_MINOR,
		       LLHTTP_VERSION_PATCH);
		goto out;
	}
	if (cfg.hash_key) {
		if (sl_keys_hash_stdin(stdin, stdout, err, sizeof(err)) != 0) {
			fprintf(stderr, "sluice: %s\n", err);
			code = SL_EXIT_USAGE;
		}
		goto out;
	}
	if (cfg.check_config) {
		/* What a start would refuse before running anything, too. */
		if (sl_preflight(&cfg, err, sizeof(err)) != 0) {
			fprintf(stderr, "sluice: %s\n", err);
			code = SL_EXIT_USAGE;
			goto out;
		}
		sl_config_print(&cfg, stdout);
		goto out;
	}
	sl_log_setup((enum sl_log_level)cfg.log_level,
	             (enum sl_log_format)cfg.log_format);
	if (cfg.write_demo_model) {
		enum sl_demo_size size = (enum sl_demo_size)cfg.demo_model_size;
		int rc = sl_demo_model_write(cfg.write_demo_model, size);
		if (rc != 0) {
			fprintf(stderr, "sluice: --write-demo-model %s: %s\n",
			        cfg.write_demo_model, sl_strerror(rc));
			code = EXIT_FAILURE;
		}
		goto out;
	}
	if (cfg.probe) {
		code = probe(cfg.probe);
		goto out;
	}

	/* A client that vanishes must cost an EPIPE, not the process. */
	signal(SIGPIPE, SIG_IGN);
	raise_fd_limit(cfg.max_connections);
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		fprintf(stderr, "sluice: libcurl failed to initialise\n");
		code = EXIT_FAILURE;
		goto out;
	}
	code = sl_app_run(&cfg);
	curl_global_cleanup();
out:
	sl_config_free(&cfg);
	return code;
}

/*
 * fuzz_config.c: the configuration file (config_file.c, config.c and the
 * sections' readers) on any bytes.
 *
 * The input is the file. It reaches the parser the way a user's file does,
 * by path (a memfd's /proc path: nothing touches the disk), through
 * sl_config_parse() with --config. The file is read again on SIGHUP, so a
 * bad one must cost a clear error, never a crash or a leak. Invariants
 * checked:
 *   - a refusal is one line that names the file (most start with its
 *     path and line; a check across options names it after the options);
 *   - a file that is accepted prints back (--check-config's output).
 */
#ifndef _GNU_SOURCE /* the build may define it already */
#define _GNU_SOURCE
#endif
#include "sluice/config/config.h"
#include "sluice/tenants/config_sections.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define CHECK(cond)                                                            \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "fuzz_config: %s\n", #cond);           \
			abort();                                               \
		}                                                              \
	} while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int fd = memfd_create("sluice-fuzz-config", 0);
	CHECK(fd >= 0);
	for (size_t done = 0; done < size;) {
		ssize_t n = write(fd, data + done, size - done);
		CHECK(n > 0);
		done += (size_t)n;
	}
	char path[64];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	char *argv[] = {"sluice", "--config", path, NULL};
	char *envp[] = {NULL};
	struct sl_config cfg;
	char err[1024] = "";
	if (sl_config_parse(&cfg, sl_config_sections, 3, argv, envp, err,
	                    sizeof(err)) == 0) {
		FILE *out = fopen("/dev/null", "w");
		CHECK(out);
		sl_config_print(&cfg, out);
		fclose(out);
	} else {
		CHECK(err[0] != '\0');
		CHECK(!strchr(err, '\n'));
		CHECK(strstr(err, path));
	}
	sl_config_free(&cfg);
	close(fd);
	return 0;
}

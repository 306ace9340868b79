/*
 * procstat.h: what the sluice process itself costs, for /metrics.
 *
 * The families carry the names, types and meanings of the Prometheus client
 * libraries' process collector, so that dashboards made for any exporter
 * read sluice too: process_cpu_seconds_total, process_resident_memory_bytes,
 * process_virtual_memory_bytes, process_open_fds, process_max_fds and
 * process_start_time_seconds. sluice_build_info says which sluice and which
 * libraries answer.
 *
 * Everything here is read once per scrape (GET /metrics), never per event:
 * a getrusage() and a getrlimit() call, one small read of /proc/self/statm,
 * and one walk of /proc/self/fd. /proc lives in memory, so none of it waits
 * on a disk and the loop is not held. Where a source is missing (no /proc on
 * this system, or not mounted), its families are left out rather than shown
 * as zero.
 *
 * Glossary:
 *   statm   /proc/self/statm: "size resident shared text lib data dt", in
 *           pages; size is the virtual memory, resident the resident set.
 *   scrape  one GET /metrics (or its JSON summary).
 */
#ifndef SLUICE_PROCSTAT_H
#define SLUICE_PROCSTAT_H

#include "sluice/base/metrics.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* One reading of the process; a has_ flag is false where its source is
 * missing, and the value next to it is then 0 and not shown. */
struct sl_procstat {
	double cpu_seconds;      /* user + system, all of sluice's threads */
	double start_time;       /* seconds since the Unix epoch */
	uint64_t virtual_bytes;  /* statm size */
	uint64_t resident_bytes; /* statm resident */
	uint64_t open_fds;       /* entries of /proc/self/fd */
	uint64_t max_fds;        /* RLIMIT_NOFILE, the soft limit */
	bool has_cpu : 1;        /* getrusage answered */
	bool has_memory : 1;     /* statm was read and made sense */
	bool has_open_fds : 1;   /* /proc/self/fd could be listed */
	bool has_max_fds : 1;    /* the limit is a number, not unlimited */
};

/* The wall clock, in seconds since the Unix epoch. */
double sl_procstat_wall_seconds(void);

/*
 * Parses statm's text into bytes, given the page size. Returns 0, or
 * SL_EINVAL when the text does not start with two page counts, or when a
 * count in bytes would not fit in 64 bits.
 */
int sl_procstat_parse_statm(const char *text, uint64_t page_size,
                            uint64_t *virtual_bytes, uint64_t *resident_bytes);

/*
 * Counts the open descriptors listed in the directory `fd_dir`
 * ("/proc/self/fd"), leaving out the one the listing itself holds. Returns
 * the count, or a negative errno when the directory cannot be opened.
 */
int64_t sl_procstat_count_fds(const char *fd_dir);

/* Reads the process now; the start time is the one taken as it loaded. */
void sl_procstat_read(struct sl_procstat *p);

/* The process_* families, in Prometheus text format. */
void sl_procstat_expose(const struct sl_procstat *p, struct sl_text *t);

/*
 * The same values for the JSON summary: a new object with the known values
 * only, named as the families less "process_" (start_time_seconds in whole
 * seconds).
 */
json_t *sl_procstat_json(const struct sl_procstat *p);

/*
 * sluice_build_info{version=...,libuv=...,libcurl=...,llhttp=...} 1: the
 * versions of sluice and of the libraries it runs with (libuv and libcurl
 * as linked, llhttp as compiled in, as `sluice --version` prints them).
 */
void sl_procstat_expose_build_info(struct sl_text *t);

#endif

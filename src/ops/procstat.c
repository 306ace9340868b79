/* procstat.c: sluice's own CPU, memory and descriptors, per scrape. */
#include "sluice/ops/procstat.h"

#include "sluice/base/common.h"

#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <llhttp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "sl_build_config.h"

#define STATM_PATH "/proc/self/statm"
#define FD_DIR "/proc/self/fd"
/*
 * statm is seven numbers of at most 20 digits each: 160 bytes hold it, and
 * only the first two are read.
 */
#define STATM_READ_MAX 160

double sl_procstat_wall_seconds(void)
{
	struct timespec ts;
	if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
		return 0;
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/*
 * The start time is taken as the program loads, before main(): whatever
 * start-up does first (provisioning llama-server, writing the demo model)
 * then lies inside the lifetime it measures, as it does for the kernel's
 * own start time, and no module has to remember to record it.
 */
static double start_time;

__attribute__((constructor)) static void record_start_time(void)
{
	start_time = sl_procstat_wall_seconds();
}

/* One decimal page count, advancing *p past it; false if there is none. */
static bool parse_pages(const char **p, uint64_t *out)
{
	const char *s = *p;
	while (*s == ' ')
		s++;
	if (*s < '0' || *s > '9')
		return false;
	uint64_t v = 0;
	for (; *s >= '0' && *s <= '9'; s++) {
		unsigned digit = (unsigned)(*s - '0');
		if (v > (UINT64_MAX - digit) / 10)
			return false;
		v = v * 10 + digit;
	}
	*p = s;
	*out = v;
	return true;
}

int sl_procstat_parse_statm(const char *text, uint64_t page_size,
                            uint64_t *virtual_bytes, uint64_t *resident_bytes)
{
	uint64_t size, resident;
	const char *p = text;
	if (page_size == 0 || !parse_pages(&p, &size) || *p != ' ' ||
	    !parse_pages(&p, &resident))
		return SL_EINVAL;
	if (size > UINT64_MAX / page_size || resident > UINT64_MAX / page_size)
		return SL_EINVAL;
	*virtual_bytes = size * page_size;
	*resident_bytes = resident * page_size;
	return 0;
}

/*
 * Counting costs a walk of the descriptor table per scrape, never per event:
 * O(open descriptors), which the RLIMIT_NOFILE bounds (sluice holds about
 * one per client connection and one per upstream transfer). The kernel
 * lists /proc/self/fd from the table without touching the files, and
 * readdir() fills one buffer per call, so a table of tens of thousands of
 * descriptors costs about a millisecond of one scrape.
 */
int64_t sl_procstat_count_fds(const char *fd_dir)
{
	DIR *dir = opendir(fd_dir);
	if (!dir)
		return -errno;
	/* The listing holds a descriptor of its own, which is not sluice's. */
	int own = dirfd(dir);
	int64_t n = 0;
	const struct dirent *e;
	while ((e = readdir(dir)) != NULL) {
		if (e->d_name[0] == '.')
			continue; /* "." and ".."; descriptors are digits */
		if (atoi(e->d_name) == own)
			continue;
		n++;
	}
	closedir(dir);
	return n;
}

static void read_cpu(struct sl_procstat *p)
{
	struct rusage ru;
	if (getrusage(RUSAGE_SELF, &ru) != 0)
		return;
	p->cpu_seconds =
	    (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	    (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
	p->has_cpu = true;
}

static void read_memory(struct sl_procstat *p)
{
	long page_size = sysconf(_SC_PAGESIZE);
	if (page_size <= 0)
		return;
	int fd = open(STATM_PATH, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return; /* no /proc: left out */
	char buf[STATM_READ_MAX + 1];
	ssize_t got = read(fd, buf, STATM_READ_MAX);
	close(fd);
	if (got <= 0)
		return;
	buf[got] = '\0';
	if (sl_procstat_parse_statm(buf, (uint64_t)page_size, &p->virtual_bytes,
	                            &p->resident_bytes) == 0)
		p->has_memory = true;
}

static void read_fds(struct sl_procstat *p)
{
	int64_t n = sl_procstat_count_fds(FD_DIR);
	if (n >= 0) {
		p->open_fds = (uint64_t)n;
		p->has_open_fds = true;
	}
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 &&
	    rl.rlim_cur != RLIM_INFINITY) {
		p->max_fds = (uint64_t)rl.rlim_cur;
		p->has_max_fds = true;
	}
}

void sl_procstat_read(struct sl_procstat *p)
{
	memset(p, 0, sizeof(*p));
	p->start_time = start_time;
	read_cpu(p);
	read_memory(p);
	read_fds(p);
}

/* The help texts are the client libraries' own, word for word. */
void sl_procstat_expose(const struct sl_procstat *p, struct sl_text *t)
{
	if (p->has_cpu) {
		sl_expose_family(t, "process_cpu_seconds_total", "counter",
		                 "Total user and system CPU time spent in "
		                 "seconds.");
		sl_text_printf(t, "process_cpu_seconds_total %.6f\n",
		               p->cpu_seconds);
	}
	if (p->has_open_fds) {
		sl_expose_family(t, "process_open_fds", "gauge",
		                 "Number of open file descriptors.");
		sl_text_printf(t, "process_open_fds %" PRIu64 "\n",
		               p->open_fds);
	}
	if (p->has_max_fds) {
		sl_expose_family(t, "process_max_fds", "gauge",
		                 "Maximum number of open file descriptors.");
		sl_text_printf(t, "process_max_fds %" PRIu64 "\n", p->max_fds);
	}
	if (p->has_memory) {
		sl_expose_family(t, "process_virtual_memory_bytes", "gauge",
		                 "Virtual memory size in bytes.");
		sl_text_printf(t, "process_virtual_memory_bytes %" PRIu64 "\n",
		               p->virtual_bytes);
		sl_expose_family(t, "process_resident_memory_bytes", "gauge",
		                 "Resident memory size in bytes.");
		sl_text_printf(t, "process_resident_memory_bytes %" PRIu64 "\n",
		               p->resident_bytes);
	}
	sl_expose_family(t, "process_start_time_seconds", "gauge",
	                 "Start time of the process since unix epoch in "
	                 "seconds.");
	sl_text_printf(t, "process_start_time_seconds %.6f\n", p->start_time);
}

json_t *sl_procstat_json(const struct sl_procstat *p)
{
	json_t *j = json_object();
	if (p->has_cpu)
		json_object_set_new(j, "cpu_seconds",
		                    json_real(p->cpu_seconds));
	if (p->has_memory) {
		json_object_set_new(
		    j, "resident_memory_bytes",
		    json_integer((json_int_t)p->resident_bytes));
		json_object_set_new(j, "virtual_memory_bytes",
		                    json_integer((json_int_t)p->virtual_bytes));
	}
	if (p->has_open_fds)
		json_object_set_new(j, "open_fds",
		                    json_integer((json_int_t)p->open_fds));
	if (p->has_max_fds)
		json_object_set_new(j, "max_fds",
		                    json_integer((json_int_t)p->max_fds));
	/* Whole seconds: the summary's reals keep 6 significant digits,
	 * which would round a time since the epoch to hours. */
	json_object_set_new(j, "start_time_seconds",
	                    json_integer((json_int_t)p->start_time));
	return j;
}

void sl_procstat_expose_build_info(struct sl_text *t)
{
	const curl_version_info_data *curl = curl_version_info(CURLVERSION_NOW);
	char libcurl[64];
	sl_label_escape(curl && curl->version ? curl->version : "", libcurl,
	                sizeof(libcurl));
	char libuv[64];
	sl_label_escape(uv_version_string(), libuv, sizeof(libuv));
	sl_expose_family(t, "sluice_build_info", "gauge",
	                 "Always 1; its labels name the versions of sluice "
	                 "and of the libraries it runs with.");
	sl_text_printf(t,
	               "sluice_build_info{version=\"%s\",libuv=\"%s\","
	               "libcurl=\"%s\",llhttp=\"%d.%d.%d\"} 1\n",
	               SL_VERSION, libuv, libcurl, LLHTTP_VERSION_MAJOR,
	               LLHTTP_VERSION_MINOR, LLHTTP_VERSION_PATCH);
}

/*
 * child.c: spawning, output relay, stopping and reaping of a child process.
 */
#include "sluice/fleet/child.h"

#include "sluice/base/common.h"
#include "sluice/base/log.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef __linux__
#include <sys/prctl.h>
#endif

extern char **environ;

int sl_launcher_main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "%s: internal launcher, started by sluice\n",
		        argv[0]);
		_exit(127);
	}
#ifdef __linux__
	/*
	 * The kernel sends SIGKILL when the thread that forked us (sluice's
	 * loop thread) dies. If sluice died before this line ran we would have
	 * been reparented already, so compare with the pid it passed.
	 */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
		fprintf(stderr, "sluice launcher: prctl: %s\n",
		        strerror(errno));
		_exit(127);
	}
#endif
	if (getppid() != (pid_t)strtol(argv[1], NULL, 10))
		_exit(127);
	execv(argv[2], argv + 3);
	fprintf(stderr, "sluice launcher: cannot execute %s: %s\n", argv[2],
	        strerror(errno));
	_exit(127);
}

static void child_unref(struct sl_child *c)
{
	if (--c->open_handles == 0)
		free(c);
}

static void on_handle_closed(uv_handle_t *h)
{
	child_unref(h->data);
}

static void close_handle(struct sl_child *c, uv_handle_t *h)
{
	if (!uv_is_closing(h))
		uv_close(h, on_handle_closed);
	(void)c;
}

/* Reports the end once the process has exited and its output is drained. */
static void maybe_report(struct sl_child *c, bool drain_expired)
{
	if (c->reported || !c->exited || (!c->output_done && !drain_expired))
		return;
	c->reported = true;
	uv_timer_stop(&c->timer);
	c->on_exit(c, c->exit_status, c->term_signal);
	close_handle(c, (uv_handle_t *)&c->output);
	close_handle(c, (uv_handle_t *)&c->timer);
}

static void on_drain_timeout(uv_timer_t *t)
{
	maybe_report(t->data, true);
}

static void on_process_exit(uv_process_t *p, int64_t status, int signal)
{
	struct sl_child *c = p->data;
	c->exited = true;
	c->exit_status = signal ? -1 : status;
	c->term_signal = signal;
	close_handle(c, (uv_handle_t *)p);
	uv_timer_stop(&c->timer);
	if (!c->output_done)
		uv_timer_start(&c->timer, on_drain_timeout, SL_CHILD_DRAIN_MS,
		               0);
	maybe_report(c, false);
}

static void emit_line(struct sl_child *c)
{
	size_t n = c->line_len;
	while (n > 0 && (c->line[n - 1] == '\r' || c->line[n - 1] == '\n'))
		n--;
	c->line[n] = '\0';
	c->line_len = 0;
	if (n == 0)
		return;
	/*
	 * The child's own chatter (a dozen lines at each llama-server start)
	 * is for debugging: at the default level a start-up reads as a few
	 * lines of sluice's own. When the child fails, its owner quotes the
	 * tail kept here, so the lines that explain a failure are still seen.
	 */
	sl_debug("%s[%d]: %s", c->name, c->pid, c->line);
	memcpy(c->tail[c->tail_next], c->line, n + 1);
	c->tail_next = (c->tail_next + 1) % SL_CHILD_TAIL_LINES;
	if (c->tail_count < SL_CHILD_TAIL_LINES)
		c->tail_count++;
}

static void on_output_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	struct sl_child *c = h->data;
	*buf = uv_buf_init(c->read_buf, sizeof(c->read_buf));
	(void)suggested;
}

static void on_output_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	struct sl_child *c = s->data;
	if (nread < 0) {
		if (c->line_len > 0)
			emit_line(c);
		uv_read_stop(s);
		c->output_done = true;
		maybe_report(c, false);
		return;
	}
	for (ssize_t i = 0; i < nread; i++) {
		/* Keep one byte for the terminating NUL. */
		if (c->line_len == SL_CHILD_LINE_MAX - 1)
			emit_line(c);
		c->line[c->line_len++] = buf->base[i];
		if (buf->base[i] == '\n')
			emit_line(c);
	}
}

/*
 * sluice's own executable, to run as the launcher. The path readlink gives
 * rather than "/proc/self/exe" itself: under valgrind or another wrapper,
 * exec'ing /proc/self/exe would start the wrapper, while readlink answers
 * with the program it runs.
 */
static const char *self_exe(void)
{
	static char path[PATH_MAX];
	if (!path[0]) {
		ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
		if (n <= 0 || (size_t)n >= sizeof(path) - 1)
			snprintf(path, sizeof(path), "/proc/self/exe");
		else
			path[n] = '\0';
	}
	return path;
}

/* sluice's environment minus the names in `extra`, plus `extra`. */
static char **build_env(char *const extra[])
{
	size_t n_env = 0, n_extra = 0;
	while (environ[n_env])
		n_env++;
	while (extra && extra[n_extra])
		n_extra++;
	char **env = sl_xcalloc(n_env + n_extra + 1, sizeof(*env));
	size_t k = 0;
	for (size_t i = 0; i < n_env; i++) {
		bool overridden = false;
		for (size_t j = 0; j < n_extra && !overridden; j++) {
			size_t len = (size_t)(strchr(extra[j], '=') - extra[j]);
			overridden =
			    strncmp(environ[i], extra[j], len + 1) == 0;
		}
		if (!overridden)
			env[k++] = environ[i];
	}
	for (size_t j = 0; j < n_extra; j++)
		env[k++] = extra[j];
	return env;
}

int sl_child_spawn(uv_loop_t *loop, const char *name, const char *file,
                   char *const args[], char *const env[],
                   sl_child_exit_cb on_exit, void *data, struct sl_child **out)
{
	struct sl_child *c = sl_xcalloc(1, sizeof(*c));
	c->loop = loop;
	c->on_exit = on_exit;
	c->data = data;
	snprintf(c->name, sizeof(c->name), "%s", name);
	*out = NULL;

	uv_file fds[2];
	int err = uv_pipe(fds, 0, 0);
	if (err)
		goto err_free;
	uv_pipe_init(loop, &c->output, 0);
	c->output.data = c;
	err = uv_pipe_open(&c->output, fds[0]);
	if (err) {
		close(fds[0]);
		goto err_close_pipe;
	}
	uv_timer_init(loop, &c->timer);
	c->timer.data = c;

	/* launcher argv: argv0, parent pid, file, args[0..] */
	size_t n_args = 0;
	while (args[n_args])
		n_args++;
	char ppid[24];
	snprintf(ppid, sizeof(ppid), "%ld", (long)getpid());
	char **largs = sl_xcalloc(n_args + 4, sizeof(*largs));
	largs[0] = SL_LAUNCHER_ARGV0;
	largs[1] = ppid;
	largs[2] = (char *)file;
	for (size_t i = 0; i < n_args; i++)
		largs[3 + i] = args[i];
	char **full_env = build_env(env);

	uv_stdio_container_t stdio[3] = {
	    {.flags = UV_IGNORE},
	    {.flags = UV_INHERIT_FD, .data.fd = fds[1]},
	    {.flags = UV_INHERIT_FD, .data.fd = fds[1]},
	};
	uv_process_options_t opts = {
	    .exit_cb = on_process_exit,
	    .file = self_exe(),
	    .args = largs,
	    .env = full_env,
	    .stdio_count = 3,
	    .stdio = stdio,
	    .flags = UV_PROCESS_DETACHED,
	};
	c->process.data = c;
	err = uv_spawn(loop, &c->process, &opts);
	close(fds[1]);
	free(largs);
	free(full_env);
	if (err) {
		/* A failed uv_spawn still initialised the handle: close it. */
		c->open_handles = 3;
		c->reported = true;
		close_handle(c, (uv_handle_t *)&c->process);
		close_handle(c, (uv_handle_t *)&c->output);
		close_handle(c, (uv_handle_t *)&c->timer);
		return err;
	}
	c->pid = c->process.pid;
	c->open_handles = 3;
	uv_read_start((uv_stream_t *)&c->output, on_output_alloc,
	              on_output_read);
	*out = c;
	return 0;

err_close_pipe:
	close(fds[1]);
	c->open_handles = 1;
	close_handle(c, (uv_handle_t *)&c->output);
	return err;
err_free:
	free(c);
	return err;
}

static void on_grace_expired(uv_timer_t *t)
{
	struct sl_child *c = t->data;
	if (!c->exited) {
		sl_warn("%s[%d] still running after the grace period; "
		        "sending SIGKILL",
		        c->name, c->pid);
		uv_process_kill(&c->process, SIGKILL);
	}
}

void sl_child_stop(struct sl_child *c, uint64_t grace_ms)
{
	if (c->exited)
		return;
	if (grace_ms == 0) {
		uv_process_kill(&c->process, SIGKILL);
		return;
	}
	uv_process_kill(&c->process, SIGTERM);
	uv_timer_start(&c->timer, on_grace_expired, grace_ms, 0);
}

char *sl_child_tail(const struct sl_child *c, char *buf, size_t size)
{
	size_t used = 0;
	buf[0] = '\0';
	unsigned first = (c->tail_next + SL_CHILD_TAIL_LINES - c->tail_count) %
	                 SL_CHILD_TAIL_LINES;
	for (unsigned i = 0; i < c->tail_count && used + 1 < size; i++) {
		const char *line = c->tail[(first + i) % SL_CHILD_TAIL_LINES];
		int n = snprintf(buf + used, size - used, "%s%s",
		                 i ? " | " : "", line);
		if (n < 0)
			break;
		used = SL_MIN(size - 1, used + (size_t)n);
	}
	return buf;
}

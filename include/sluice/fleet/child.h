/*
 * child.h: a supervised child process (llama-server) whose output joins
 * sluice's log (at debug level; its last lines are kept for the error
 * message when it fails) and which cannot outlive sluice.
 *
 * The child is started through a small launcher, sluice's own executable
 * under another argv[0], which asks the kernel to SIGKILL it when sluice
 * dies (PR_SET_PDEATHSIG) and then execs the real program. So even a
 * `kill -9` of sluice leaves no llama-server behind. The child runs in its
 * own session, so a Ctrl-C on the terminal reaches sluice alone, and sluice
 * decides how llama-server stops.
 *
 * Lifetime: sl_child_spawn() allocates the child. Exactly one on_exit call
 * reports its end, once the process has exited and its output has been
 * drained. After on_exit returns, the child closes its handles and frees
 * itself: the owner must drop its pointer then.
 *
 * Glossary:
 *   tail   the last SL_CHILD_TAIL_LINES lines the child printed, kept for
 *          error messages ("llama-server exited: ... last output: ...").
 */
#ifndef SLUICE_CHILD_H
#define SLUICE_CHILD_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

/* Lines longer than this are split: a child cannot make sluice buffer more. */
#define SL_CHILD_LINE_MAX 1024
/* Lines kept for error messages. */
#define SL_CHILD_TAIL_LINES 8
/* After the process exits, how long to wait for the rest of its output. */
#define SL_CHILD_DRAIN_MS 500

/* argv[0] under which sluice's executable acts as the launcher. */
#define SL_LAUNCHER_ARGV0 "sluice-launcher"

struct sl_child;

/* status: exit status, or -1 when killed by `signal`. */
typedef void (*sl_child_exit_cb)(struct sl_child *child, int64_t status,
                                 int signal);

struct sl_child {
	uv_loop_t *loop;
	uv_process_t process;
	uv_pipe_t output; /* read end of the child's stdout and stderr */
	uv_timer_t timer; /* SIGKILL after the grace period; output drain */
	int pid;
	char name[32]; /* log prefix, e.g. "llama-server" */
	sl_child_exit_cb on_exit;
	void *data; /* the owner's */

	unsigned open_handles; /* freed when it reaches zero */
	bool exited;           /* the process has exited */
	bool output_done;      /* EOF or error on the output pipe */
	bool reported;         /* on_exit has been called */
	int64_t exit_status;
	int term_signal;

	char read_buf[4096];
	char line[SL_CHILD_LINE_MAX];
	size_t line_len;
	char tail[SL_CHILD_TAIL_LINES][SL_CHILD_LINE_MAX];
	unsigned tail_next, tail_count;
};

/*
 * Starts `file` with `args` (NULL-terminated, args[0] the program name) and
 * extra environment `env` (NULL-terminated "NAME=value" entries, added to
 * sluice's own environment; may be NULL). On success stores the new child
 * in *out and returns 0; else returns a negative code and *out is NULL.
 */
int sl_child_spawn(uv_loop_t *loop, const char *name, const char *file,
                   char *const args[], char *const env[],
                   sl_child_exit_cb on_exit, void *data, struct sl_child **out);

/*
 * Asks the child to stop: SIGTERM now, SIGKILL if it is still running after
 * grace_ms (0: SIGKILL at once). Harmless after the process has exited.
 */
void sl_child_stop(struct sl_child *child, uint64_t grace_ms);

/* The tail joined by " | ", into buf; returns buf. */
char *sl_child_tail(const struct sl_child *child, char *buf, size_t size);

/*
 * The launcher, run by main() when argv[0] is SL_LAUNCHER_ARGV0:
 * argv = {SL_LAUNCHER_ARGV0, parent-pid, file, args[0], args[1], ...}.
 * Never returns.
 */
int sl_launcher_main(int argc, char **argv);

#endif

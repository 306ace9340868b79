/*
 * json-bench: what reading JSON costs the event loop, per upstream event,
 * per client body, and for the worst bodies a client can send.
 *
 *   build/bench/json-bench [BYTES [ROW]]   (BYTES: 1048576, --max-body's)
 *
 * First the hot path, in nanoseconds per call (the best of five rounds):
 * sl_jscan_parse() of a streamed OpenAI chunk and of a native token event
 * as llama-server 0.7.0 writes them, sl_request_validate() of a chat body
 * of 200 bytes and of 4 KB, and the shape check alone on each
 * (sl_jscan_shape(), which both of them run). Then one table of the
 * milliseconds that sl_request_validate() takes over bodies of BYTES
 * shaped to be slow: all of it one nest of arrays, 250 arrays each 2,040
 * deep (within jansson's limit), arrays as deep as sluice allows side by
 * side, a flat array, many short members, a string full of brackets, and
 * a chain of keys that jsmn would link one under the other (a number too
 * large for jansson sends it to jsmn's full scan), relayed to
 * /v1/chat/completions; then the wide ones on /generate and /infer, whose
 * few members are read and the rest ignored: the best of three, or one
 * when it takes over a second. The validation runs on the event loop, so
 * this is how long every other client waits. Times are the thread's CPU
 * time, which a busy machine inflates less than the clock's. With ROW, the
 * body column of one row of that table, only that row is run, once: under
 * valgrind --tool=callgrind --toggle-collect=sl_request_validate, the
 * instructions of one call, which a busy machine does not change.
 */
#include "sluice/base/common.h"
#include "sluice/json/json_scan.h"
#include "sluice/relay/request.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* Rounds of the hot-path loops; the best is shown. */
#define ROUNDS 5

static const char chat_chunk[] =
    "{\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{"
    "\"content\":\" some\"}}],\"created\":1795453621,\"id\":\"chatcmpl-"
    "YaVOrqZKaOni38L4NT2dWoyg4SpbEaY2\",\"model\":\"demo-tiny.gguf\","
    "\"system_fingerprint\":\"b11669-Debian\",\"object\":\"chat."
    "completion.chunk\"}";

static const char native_event[] =
    "{\"index\":0,\"content\":\" some\",\"tokens\":[],\"stop\":false,"
    "\"id_slot\":-1,\"tokens_predicted\":1,\"tokens_evaluated\":5}";

static const char chat_body[] =
    "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":"
    "\"You are a helpful assistant.\"},{\"role\":\"user\",\"content\":"
    "\"Write a haiku about the sea.\"}],\"max_tokens\":64,"
    "\"temperature\":0.7,\"stream\":true}";

static const struct sl_endpoint *endpoint(const char *path)
{
	for (unsigned i = 0; i < sl_n_endpoints; i++)
		if (strcmp(sl_endpoints[i].path, path) == 0)
			return &sl_endpoints[i];
	abort();
}

static const struct sl_endpoint *chat_endpoint(void)
{
	return endpoint("/v1/chat/completions");
}

static const struct sl_request_options opts = {.max_tokens_cap = 64,
                                               .stream_upstream = true};

/* What is timed: one call on `text`; its result, kept from the optimiser. */
typedef int (*op_fn)(const char *text, size_t len);

static int op_scan(const char *text, size_t len)
{
	struct sl_jscan s;
	int rc = sl_jscan_parse(&s, text, len, (unsigned)len + 1);
	sl_jscan_free(&s);
	return rc;
}

static int op_validate(const char *text, size_t len)
{
	struct sl_request r;
	int rc =
	    sl_request_validate(&r, chat_endpoint(), NULL, text, len, &opts);
	sl_request_free(&r);
	return rc;
}

#ifdef SL_JSCAN_DEPTH_MAX
static int op_shape(const char *text, size_t len)
{
	return (int)sl_jscan_shape(text, len);
}
#endif

/* The CPU time this thread has used, in nanoseconds. */
static uint64_t cpu_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Nanoseconds per call, the best of ROUNDS rounds of n calls. */
static double ns_per_call(op_fn op, const char *text, size_t len, unsigned n)
{
	double best = -1;
	volatile int sink = 0;
	for (int r = 0; r < ROUNDS; r++) {
		uint64_t start = cpu_ns();
		for (unsigned i = 0; i < n; i++)
			sink += op(text, len);
		double ns = (double)(cpu_ns() - start) / n;
		if (best < 0 || ns < best)
			best = ns;
	}
	(void)sink;
	return best;
}

static void hot_row(const char *what, op_fn op, const char *text, size_t len)
{
	printf("| %s | %zu | %.0f |\n", what, len,
	       ns_per_call(op, text, len, 200000));
}

/* A chat body of about `size` bytes: chat_body's with a longer message. */
static char *long_chat_body(size_t size)
{
	char *body = sl_xmalloc(size + sizeof(chat_body));
	size_t at = (size_t)sprintf(body, "{\"messages\":[{\"role\":\"user\","
	                                  "\"content\":\"");
	while (at < size - 16)
		at += (size_t)sprintf(body + at, "the sea, [again] ");
	strcpy(body + at, "\"}]}");
	return body;
}

/* A growing text, for the shapes. */
struct text {
	char *p;
	size_t len, cap;
};

static void put(struct text *t, const char *s, size_t n)
{
	if (t->len + n + 1 > t->cap) {
		t->cap = (t->len + n + 1) * 2;
		t->p = sl_xrealloc(t->p, t->cap);
	}
	memcpy(t->p + t->len, s, n);
	t->len += n;
	t->p[t->len] = '\0';
}

static void put_str(struct text *t, const char *s)
{
	put(t, s, strlen(s));
}

static void put_run(struct text *t, char c, size_t n)
{
	for (size_t i = 0; i < n; i++)
		put(t, &c, 1);
}

/*
 * Bodies of about `size` bytes: shape 0, one nest; 1, nests of `deep`
 * side by side in an array; 2, a flat array; 3, a string of brackets;
 * 4, keys each after a colon, not a comma, under a closed array, then
 * the object closed and closing brackets with nothing open:
 * {"a":[]:"a":"a":...}:}}}, each of which jsmn walks the chain for;
 * 5, many short members. Each begins with `head`, the object's opening and
 * any members before these: JANSSON's sends a relayed body down jansson's
 * path rather than the fast one (request.c, read_fast), NATIVE's gives
 * /generate and /infer what they need.
 */
#define PLAIN "{"
#define JANSSON "{\"n\":1,"
#define NATIVE "{\"prompt\":\"p\",\"query\":\"q\","
static struct text shape(int kind, size_t size, size_t deep, const char *head)
{
	struct text t = {0};
	put_str(&t, head);
	switch (kind) {
	case 0:
		put_str(&t, "\"a\":");
		put_run(&t, '[', (size - 6) / 2);
		put_run(&t, ']', (size - 6) / 2);
		put_str(&t, "}");
		break;
	case 1:
		put_str(&t, "\"a\":[");
		for (size_t n = 0; t.len + 2 * deep + 3 <= size; n++) {
			if (n)
				put_str(&t, ",");
			put_run(&t, '[', deep);
			put_run(&t, ']', deep);
		}
		put_str(&t, "]}");
		break;
	case 2:
		put_str(&t, "\"a\":[1");
		while (t.len + 4 <= size)
			put_str(&t, ",1");
		put_str(&t, "]}");
		break;
	case 4:
		put_str(&t, "\"seed\":1e999,\"a\":[]:");
		while (t.len + 4 <= size / 2)
			put_str(&t, "\"a\":");
		put_str(&t, "\"a\"}:");
		put_run(&t, '}', size - t.len);
		break;
	case 5:
		for (unsigned n = 0; t.len + 16 <= size; n++) {
			char member[32];
			snprintf(member, sizeof(member), "%s\"k%u\":1",
			         n ? "," : "", n);
			put_str(&t, member);
		}
		put_str(&t, "}");
		break;
	default:
		put_str(&t, "\"prompt\":\"");
		while (t.len + 4 <= size)
			put_str(&t, "[{");
		put_str(&t, "\"}");
		break;
	}
	return t;
}

/* The one row of the second table to run, or NULL for every row. */
static const char *only_row;

static void worst_row(const char *what, const char *path, int kind, size_t size,
                      size_t deep, const char *head)
{
	if (only_row && strcmp(what, only_row) != 0)
		return;
	struct text t = shape(kind, size, deep, head);
	printf("| %s | %zu | ", what, t.len);
	fflush(stdout);
	double best = -1;
	int rounds = only_row ? 1 : 3;
	for (int round = 0; round < rounds; round++) {
		struct sl_request r;
		uint64_t start = cpu_ns();
		int rc = sl_request_validate(&r, endpoint(path), NULL, t.p,
		                             t.len, &opts);
		double ms = (double)(cpu_ns() - start) / 1e6;
		if (best < 0 || ms < best)
			best = ms;
		bool last = round == rounds - 1 || ms > 1000;
		if (last)
			printf("%.3f | %s |\n", best,
			       rc == 0 ? "accepted" : r.error);
		sl_request_free(&r);
		if (last)
			break;
	}
	fflush(stdout);
	free(t.p);
}

/* The first table: the hot path, ns per call. */
static void hot_table(void)
{
	char *long_body = long_chat_body(4096);
	printf("| per call | bytes | ns |\n| --- | --- | --- |\n");
	hot_row("sl_jscan_parse, OpenAI chunk", op_scan, chat_chunk,
	        strlen(chat_chunk));
	hot_row("sl_jscan_parse, native token event", op_scan, native_event,
	        strlen(native_event));
	hot_row("sl_request_validate, chat body", op_validate, chat_body,
	        strlen(chat_body));
	hot_row("sl_request_validate, long chat body", op_validate, long_body,
	        strlen(long_body));
#ifdef SL_JSCAN_DEPTH_MAX
	hot_row("sl_jscan_shape, OpenAI chunk", op_shape, chat_chunk,
	        strlen(chat_chunk));
	hot_row("sl_jscan_shape, chat body", op_shape, chat_body,
	        strlen(chat_body));
	hot_row("sl_jscan_shape, long chat body", op_shape, long_body,
	        strlen(long_body));
#endif
	free(long_body);
	printf("\n");
}

int main(int argc, char **argv)
{
	size_t size = argc > 1 ? strtoull(argv[1], NULL, 10) : 1u << 20;
	if (size < 1024) {
		fprintf(stderr, "json-bench: BYTES must be 1024 or more\n");
		return 2;
	}
	only_row = argc > 2 ? argv[2] : NULL;
#ifdef SL_JSCAN_DEPTH_MAX
	size_t allowed = SL_JSCAN_DEPTH_MAX - 2;
#else
	size_t allowed = 62;
#endif
	if (!only_row)
		hot_table();

	static const char chat[] = "/v1/chat/completions";
	char label[96];
	printf("| body | bytes | ms | answer |\n| --- | --- | --- | --- |\n");
	worst_row("one nest of arrays", chat, 0, size, 0, PLAIN);
	worst_row("arrays 2,040 deep, side by side", chat, 1, size, 2040,
	          PLAIN);
	snprintf(label, sizeof(label), "arrays %zu deep, side by side",
	         allowed);
	worst_row(label, chat, 1, size, allowed, PLAIN);
	worst_row("a flat array", chat, 2, size, 0, PLAIN);
	worst_row("many members", chat, 5, size, 0, PLAIN);
	worst_row("a string of brackets", chat, 3, size, 0, PLAIN);
	worst_row("a chain of keys, then brackets", chat, 4, size, 0, PLAIN);
	strcat(label, ", jansson's path");
	worst_row(label, chat, 1, size, allowed, JANSSON);
	worst_row("a flat array, jansson's path", chat, 2, size, 0, JANSSON);
	/* The native APIs map a few members and ignore the rest. */
	static const char *const native[] = {"/generate", "/infer"};
	for (size_t i = 0; i < SL_ARRAY_SIZE(native); i++) {
		snprintf(label, sizeof(label),
		         "arrays %zu deep, side by side, %s", allowed,
		         native[i]);
		worst_row(label, native[i], 1, size, allowed, NATIVE);
		snprintf(label, sizeof(label), "a flat array, %s", native[i]);
		worst_row(label, native[i], 2, size, 0, NATIVE);
		snprintf(label, sizeof(label), "many members, %s", native[i]);
		worst_row(label, native[i], 5, size, 0, NATIVE);
	}
	return 0;
}

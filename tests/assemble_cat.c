/*
 * assemble_cat: drives the assembler from the command line, for
 * test_assemble_exact.py, which compares its output with llama-server's own
 * plain answers.
 *
 *   assemble_cat KIND [--return-tokens] < STREAM
 *       reads a whole SSE stream as llama-server sent it, feeds each event's
 *       data to the assembler and prints the answer; exit status 0, or 1
 *       when an event was refused or no event came. An error event's
 *       status goes to stderr as "status N".
 *   assemble_cat KIND --reproducible < BODY
 *       prints "true" or "false": sl_assemble_reproducible() for the body.
 *
 * KIND is native, text or chat. Events are split on blank lines and their
 * "data:" lines joined with newlines, as SSE says; the stream is small
 * (a test's), so it is read whole.
 */
#include "sluice/json/assemble.h"

#include "sluice/base/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *read_all(FILE *f, size_t *len)
{
	size_t cap = 4096, n = 0;
	char *buf = sl_xmalloc(cap);
	size_t got;
	while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
		n += got;
		if (cap - n - 1 == 0)
			buf = sl_xrealloc(buf, cap *= 2);
	}
	buf[n] = '\0';
	*len = n;
	return buf;
}

/* Feeds the data of one event (lines in [p, end)) to the assembler. */
static int feed_event(struct sl_assembler *a, const char *p, const char *end)
{
	char *data = NULL;
	size_t n = 0;
	bool any = false;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *line_end = nl ? nl : end;
		size_t ll = (size_t)(line_end - p);
		if (ll && p[ll - 1] == '\r')
			ll--;
		if (ll >= 5 && memcmp(p, "data:", 5) == 0) {
			const char *v = p + 5;
			size_t vl = ll - 5;
			if (vl && *v == ' ')
				v++, vl--;
			data = sl_xrealloc(data, n + vl + 2);
			if (any)
				data[n++] = '\n';
			memcpy(data + n, v, vl);
			n += vl;
			any = true;
		}
		p = nl ? nl + 1 : end;
	}
	int rc = any ? sl_assembler_add(a, data, n) : 0;
	free(data);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: assemble_cat native|text|chat "
		                "[--return-tokens|--reproducible]\n");
		return 2;
	}
	enum sl_assemble_kind kind =
	    strcmp(argv[1], "native") == 0 ? SL_ASSEMBLE_NATIVE
	    : strcmp(argv[1], "text") == 0 ? SL_ASSEMBLE_TEXT
	    : strcmp(argv[1], "chat") == 0 ? SL_ASSEMBLE_CHAT
	                                   : SL_ASSEMBLE_NONE;
	const char *opt = argc > 2 ? argv[2] : "";
	size_t len;
	char *in = read_all(stdin, &len);
	if (strcmp(opt, "--reproducible") == 0) {
		json_t *body = json_loadb(in, len, 0, NULL);
		printf("%s\n",
		       sl_assemble_reproducible(kind, body) ? "true" : "false");
		json_decref(body);
		free(in);
		return 0;
	}
	struct sl_assembler a;
	sl_assembler_init(&a, kind, strcmp(opt, "--return-tokens") == 0);
	int status = 0;
	const char *p = in, *end = in + len;
	while (p < end && status == 0) {
		const char *sep = strstr(p, "\n\n");
		const char *ev_end = sep ? sep : end;
		status = feed_event(&a, p, ev_end);
		p = sep ? sep + 2 : end;
	}
	size_t n = 0;
	char *out = status == 0 ? sl_assembler_result(&a, &n) : NULL;
	if (out) {
		fwrite(out, 1, n, stdout);
		fprintf(stderr, "status %d\n", sl_assembler_status(&a));
	}
	free(out);
	sl_assembler_free(&a);
	free(in);
	return out ? 0 : 1;
}

/*
 * test_http_frame.c: the frame scanner, driven directly with byte strings.
 *
 * A small stand-in for llhttp plays the scanner's caller the way http.c
 * does: it feeds the parser what the scanner allows, keeps a lone CR for
 * the next read, and tells the scanner where a head ended, how long each
 * chunk is and when a request is complete. It also checks that it is never
 * fed past the end of a part, which is what would let a second request
 * hide inside the first (CVE-2025-23167: llhttp 8.1 ends the header section
 * at "\r\n\r" and any byte).
 *
 * Every input is scanned whole, then split into two reads at every
 * position, then a byte at a time, and each run must end the same way:
 * the same parts ending at the same offsets, the same refusal on the same
 * byte.
 */
#include "sluice/net/http_frame.h"

#include "sluice/base/common.h"
#include "test.h"

#include <stdbool.h>

#define MAX_MARKS 16
/* No head in these tests comes near it; the 431 test sets its own. */
#define NO_LIMIT ((size_t)1 << 20)

static const char CR_NO_LF[] = "malformed HTTP request: CR not followed by LF";
static const char LF_NO_CR[] = "malformed HTTP request: LF not preceded by CR";

/* How one run over an input ended. */
struct run {
	unsigned status;
	const char *message;
	size_t consumed;        /* bytes the parser was fed */
	size_t ends[MAX_MARKS]; /* just past each line-based part */
	size_t n_ends;
	size_t requests[MAX_MARKS]; /* just past each complete request */
	size_t n_requests;
	size_t folds[MAX_MARKS]; /* each minor version digit fed as '1' */
	size_t n_folds;
};

/* What the stand-in parser expects next, as llhttp would. */
enum expect { E_HEAD, E_BODY, E_SIZE, E_DATA, E_TRAILERS };

struct driver {
	struct sl_http_frame frame;
	size_t header_bytes;
	enum expect expect;
	char line[512]; /* the current head, chunk-size line or trailers */
	size_t line_len;
	uint64_t left; /* E_BODY: body bytes; E_DATA: data and its CRLF */
	struct run run;
};

static bool ends_with(const char *s, size_t len, const char *tail)
{
	size_t n = strlen(tail);
	return len >= n && memcmp(s + len - n, tail, n) == 0;
}

/* Whether the head so far is complete: leading empty lines do not count. */
static bool head_complete(const char *s, size_t len)
{
	size_t skip = 0;
	while (len - skip >= 2 && s[skip] == '\r' && s[skip + 1] == '\n')
		skip += 2;
	return len - skip >= 4 && ends_with(s + skip, len - skip, "\r\n\r\n");
}

static void request_complete(struct driver *d, size_t at)
{
	ASSERT(d->run.n_requests < MAX_MARKS);
	d->run.requests[d->run.n_requests++] = at;
	sl_http_frame_reset(&d->frame);
	d->header_bytes = 0;
	d->expect = E_HEAD;
	d->line_len = 0;
}

/* A line-based part ended at `at`: it must be the last byte fed. */
static void part_end(struct driver *d, size_t at, bool last_fed)
{
	if (!last_fed)
		TEST_FAIL("the parser was fed past the end of a part at "
		          "offset %zu",
		          at);
	ASSERT(d->run.n_ends < MAX_MARKS);
	d->run.ends[d->run.n_ends++] = at;
}

static void head_done(struct driver *d, size_t at)
{
	/* memmem is a GNU extension: the head is a C string here. */
	d->line[d->line_len] = '\0';
	bool chunked = strstr(d->line, "Transfer-Encoding: chunked") != NULL;
	const char *cl = strstr(d->line, "Content-Length: ");
	unsigned long long length = cl ? strtoull(cl + 16, NULL, 10) : 0;
	sl_http_frame_head_done(&d->frame, chunked);
	d->line_len = 0;
	if (chunked) {
		d->expect = E_SIZE;
	} else if (length > 0) {
		d->expect = E_BODY;
		d->left = length;
	} else {
		request_complete(d, at);
	}
}

/*
 * The parser takes n bytes at s + at. Returns how many it used: all of
 * them, but for a Content-Length body, where llhttp pauses at the end of
 * the request.
 */
static size_t parse(struct driver *d, const char *s, size_t at, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		size_t end = at + i + 1;
		bool last = i + 1 == n;
		if (d->expect == E_BODY) {
			if (--d->left == 0) {
				request_complete(d, end);
				return i + 1;
			}
			continue;
		}
		if (d->expect == E_DATA) {
			if (--d->left == 0) {
				d->expect = E_SIZE;
				d->line_len = 0;
			}
			continue;
		}
		ASSERT(d->line_len + 1 < sizeof(d->line));
		d->line[d->line_len++] = s[at + i];
		if (d->expect == E_HEAD &&
		    head_complete(d->line, d->line_len)) {
			part_end(d, end, last);
			head_done(d, end);
		} else if (d->expect == E_SIZE &&
		           ends_with(d->line, d->line_len, "\r\n")) {
			part_end(d, end, last);
			d->line[d->line_len] = '\0';
			uint64_t size = strtoull(d->line, NULL, 16);
			sl_http_frame_chunk(&d->frame, size);
			d->line_len = 0;
			d->expect = size ? E_DATA : E_TRAILERS;
			d->left = size + 2;
		} else if (d->expect == E_TRAILERS &&
		           (d->line_len == 2 ||
		            ends_with(d->line, d->line_len, "\r\n\r\n")) &&
		           ends_with(d->line, d->line_len, "\r\n")) {
			part_end(d, end, last);
			request_complete(d, end);
		}
	}
	return n;
}

/*
 * Scans s[0..n) arriving in reads that end at reads[0..n_reads), the last
 * one at n, as http.c's conn_parse does: bytes not used wait for the next
 * read, a refusal stops everything.
 */
static struct run drive(const char *s, size_t n, const size_t *reads,
                        size_t n_reads, size_t max_header_bytes)
{
	struct driver d;
	memset(&d, 0, sizeof(d));
	sl_http_frame_reset(&d.frame);
	size_t off = 0;
	for (size_t r = 0; r < n_reads && !d.frame.status; r++) {
		size_t avail = reads[r];
		while (off < avail) {
			size_t feed = sl_http_frame_scan(
			    &d.frame, s + off, avail - off, &d.header_bytes,
			    max_header_bytes);
			ASSERT(feed <= avail - off);
			if (d.frame.fold_minor) {
				/* http.c feeds '1' for it, as the line does. */
				ASSERT(feed > 0);
				ASSERT(d.run.n_folds < MAX_MARKS);
				d.run.folds[d.run.n_folds++] = off + feed - 1;
				d.frame.fold_minor = false;
			}
			size_t used = feed ? parse(&d, s, off, feed) : 0;
			off += used;
			if (d.frame.status)
				break;
			if (feed == 0) {
				/* Only a lone CR at the end may wait. */
				ASSERT_EQ(avail - off, 1);
				ASSERT_EQ(s[off], '\r');
				break;
			}
		}
	}
	d.run.status = d.frame.status;
	d.run.message = d.frame.message;
	d.run.consumed = off;
	return d.run;
}

static void same_run(const struct run *whole, const struct run *split,
                     const char *how, size_t where)
{
	bool same = whole->status == split->status &&
	            whole->consumed == split->consumed &&
	            whole->n_ends == split->n_ends &&
	            whole->n_requests == split->n_requests &&
	            whole->n_folds == split->n_folds &&
	            (whole->message == split->message ||
	             (whole->message && split->message &&
	              strcmp(whole->message, split->message) == 0));
	for (size_t i = 0; same && i < whole->n_ends; i++)
		same = whole->ends[i] == split->ends[i];
	for (size_t i = 0; same && i < whole->n_requests; i++)
		same = whole->requests[i] == split->requests[i];
	for (size_t i = 0; same && i < whole->n_folds; i++)
		same = whole->folds[i] == split->folds[i];
	if (!same)
		TEST_FAIL("%s %zu: status %u consumed %zu, %zu parts, %zu "
		          "requests; whole: status %u consumed %zu, %zu parts, "
		          "%zu requests",
		          how, where, split->status, split->consumed,
		          split->n_ends, split->n_requests, whole->status,
		          whole->consumed, whole->n_ends, whole->n_requests);
}

/* Scans s whole, split in two at every position, and byte by byte. */
static struct run scan_all_ways(const char *s, size_t n, size_t max)
{
	size_t whole_read[1] = {n};
	struct run whole = drive(s, n, whole_read, 1, max);
	for (size_t cut = 1; cut < n; cut++) {
		size_t reads[2] = {cut, n};
		struct run split = drive(s, n, reads, 2, max);
		same_run(&whole, &split, "split at", cut);
	}
	size_t *reads = sl_xmalloc(n * sizeof(*reads));
	for (size_t i = 0; i < n; i++)
		reads[i] = i + 1;
	struct run bytes = drive(s, n, reads, n, max);
	free(reads);
	same_run(&whole, &bytes, "byte by byte, length", n);
	return whole;
}

static struct run scan_str(const char *s)
{
	return scan_all_ways(s, strlen(s), NO_LIMIT);
}

/* Expects a refusal on byte `at`, with no part ended before it. */
static void expect_refused(const char *s, unsigned status, const char *message,
                           size_t at)
{
	struct run r = scan_str(s);
	ASSERT_EQ(r.status, status);
	ASSERT_STR_EQ(r.message, message);
	ASSERT_EQ(r.consumed, at);
	ASSERT_EQ(r.n_requests, 0);
}

/* s with `ch` inserted at k, NUL-terminated; the caller frees it. */
static char *insert_at(const char *s, size_t k, char ch)
{
	size_t n = strlen(s);
	char *out = sl_xmalloc(n + 2);
	memcpy(out, s, k);
	out[k] = ch;
	memcpy(out + k + 1, s + k, n - k + 1);
	return out;
}

/* ---- the cases ---- */

static const char PIPELINE_A[] =
    "\r\nGET /a HTTP/1.1\r\nHost: x\r\nA: b\r\n\r\n";
static const char PIPELINE_B[] = "POST /b HTTP/1.1\r\nHost: x\r\n"
                                 "Transfer-Encoding: chunked\r\n\r\n";
static const char PIPELINE_B_BODY[] = "5;e=1\r\nh\rl\no\r\n0\r\nT: v\r\n\r\n";
static const char PIPELINE_C[] = "POST /c HTTP/1.1\r\nHost: x\r\n"
                                 "Content-Length: 3\r\n\r\na\rc";
static const char PIPELINE_D[] = "GET /d HTTP/1.1\r\nHost: x\r\n\r\n";

/*
 * Four pipelined requests, with an empty line before the first and bare CR
 * and LF inside body data (which is not the scanner's to judge): every
 * part ends where it ends when scanned whole, however the bytes arrive.
 */
static void test_pipelined_heads_end_at_the_same_offsets(void)
{
	char *s = sl_xasprintf("%s%s%s%s%s", PIPELINE_A, PIPELINE_B,
	                       PIPELINE_B_BODY, PIPELINE_C, PIPELINE_D);
	size_t a = strlen(PIPELINE_A), b = a + strlen(PIPELINE_B);
	size_t b_body = b + strlen(PIPELINE_B_BODY);
	size_t c = b_body + strlen(PIPELINE_C);
	size_t d = c + strlen(PIPELINE_D);
	struct run r = scan_str(s);
	ASSERT_EQ(r.status, 0);
	ASSERT(r.message == NULL);
	ASSERT_EQ(r.consumed, strlen(s));
	/* Heads, the two chunk-size lines and the trailers. */
	ASSERT_EQ(r.n_ends, 7);
	ASSERT_EQ(r.ends[0], a);
	ASSERT_EQ(r.ends[1], b);
	ASSERT_EQ(r.ends[2], b + strlen("5;e=1\r\n"));
	ASSERT_EQ(r.ends[3], b + strlen("5;e=1\r\nh\rl\no\r\n0\r\n"));
	ASSERT_EQ(r.ends[4], b_body);
	ASSERT_EQ(r.ends[5], c - 3);
	ASSERT_EQ(r.ends[6], d);
	ASSERT_EQ(r.n_requests, 4);
	ASSERT_EQ(r.requests[0], a);
	ASSERT_EQ(r.requests[1], b_body);
	ASSERT_EQ(r.requests[2], c);
	ASSERT_EQ(r.requests[3], d);
	free(s);
}

/* A head whose last CR has not got its LF yet is not over. */
static void test_final_cr_waits_for_its_lf(void)
{
	static const char s[] = "GET / HTTP/1.1\r\nHost: x\r\n\r";
	struct run r = scan_str(s);
	ASSERT_EQ(r.status, 0);
	ASSERT_EQ(r.consumed, strlen(s) - 1);
	ASSERT_EQ(r.n_ends, 0);
}

/*
 * CVE-2025-23167: llhttp 8.1 takes "\r\n\r" and any byte for the end of
 * the header section, so "X" and the request after it would be parsed as
 * a second request that a proxy in front never saw. The scanner refuses
 * the bare CR and feeds the parser nothing from it on.
 */
static void test_cve_2025_23167_smuggled_request_is_refused(void)
{
	static const char head[] = "GET / HTTP/1.1\r\nHost: a\r\n";
	char *s =
	    sl_xasprintf("%s\rXGET /admin HTTP/1.1\r\nHost: a\r\n\r\n", head);
	expect_refused(s, 400, CR_NO_LF, strlen(head));
	free(s);
	/* The same shape where a chunk-size line and the trailers end. */
	static const char chunked[] = "POST / HTTP/1.1\r\nHost: a\r\n"
	                              "Transfer-Encoding: chunked\r\n\r\n";
	s = sl_xasprintf("%s5\rXhello\r\n0\r\n\r\n", chunked);
	expect_refused(s, 400, CR_NO_LF, strlen(chunked) + 1);
	free(s);
	s = sl_xasprintf("%s0\r\n\rXGET /admin HTTP/1.1\r\n\r\n", chunked);
	expect_refused(s, 400, CR_NO_LF, strlen(chunked) + 3);
	free(s);
}

static const char VALID_HEAD[] = "GET /a?b=c HTTP/1.1\r\nHost: x\r\n"
                                 "Accept: */*\r\n\r\n";

/*
 * A CR inserted anywhere in a head, where the next byte is not LF, is
 * refused on that byte: in the method, the target, the version, a name, a
 * value, or before another CR. So is an LF not preceded by CR.
 */
static void test_bare_cr_or_lf_is_refused_wherever_it_falls(void)
{
	size_t n = strlen(VALID_HEAD);
	for (size_t k = 0; k < n; k++) {
		if (VALID_HEAD[k] == '\n')
			continue; /* that CR would have its LF */
		char *s = insert_at(VALID_HEAD, k, '\r');
		expect_refused(s, 400, CR_NO_LF, k);
		free(s);
	}
	for (size_t k = 0; k < n; k++) {
		if (k > 0 && VALID_HEAD[k - 1] == '\r')
			continue; /* that LF would end a CRLF */
		char *s = insert_at(VALID_HEAD, k, '\n');
		expect_refused(s, 400, LF_NO_CR, k);
		free(s);
	}
}

/* The same in the chunk-size lines and trailers of a chunked body. */
static void test_bare_cr_is_refused_in_chunk_lines_and_trailers(void)
{
	static const char head[] = "POST / HTTP/1.1\r\nHost: a\r\n"
	                           "Transfer-Encoding: chunked\r\n\r\n";
	static const char body[] = "3;ext=1\r\nabc\r\n0\r\nT: v\r\n\r\n";
	char *valid = sl_xasprintf("%s%s", head, body);
	size_t data = strlen(head) + strlen("3;ext=1\r\n");
	for (size_t k = strlen(head); k < strlen(valid); k++) {
		/*
		 * Chunk data may hold any byte, and the CRLF after it is
		 * checked as such (test_chunk_data_must_end_in_crlf).
		 */
		if (valid[k] == '\n' || (k >= data && k <= data + 3))
			continue;
		char *s = insert_at(valid, k, '\r');
		expect_refused(s, 400, CR_NO_LF, k);
		free(s);
	}
	free(valid);
}

/* obs-fold (RFC 9112, 5.2): a server must refuse it or replace it. */
static void test_obsolete_line_folding_is_refused(void)
{
	static const char before[] = "GET / HTTP/1.1\r\nHost: x\r\nA: b\r\n";
	char *s = sl_xasprintf("%s c\r\n\r\n", before);
	expect_refused(s, 400, "malformed HTTP request: obsolete line folding",
	               strlen(before));
	free(s);
	s = sl_xasprintf("%s\tc\r\n\r\n", before);
	expect_refused(s, 400, "malformed HTTP request: obsolete line folding",
	               strlen(before));
	free(s);
	/* A first header line that begins with whitespace, and a trailer. */
	expect_refused("GET / HTTP/1.1\r\n Host: x\r\n\r\n", 400,
	               "malformed HTTP request: obsolete line folding", 16);
	static const char chunked[] = "POST / HTTP/1.1\r\nHost: a\r\n"
	                              "Transfer-Encoding: chunked\r\n\r\n"
	                              "0\r\nT: v\r\n";
	s = sl_xasprintf("%s w\r\n\r\n", chunked);
	expect_refused(s, 400, "malformed HTTP request: obsolete line folding",
	               strlen(chunked));
	free(s);
}

static void test_empty_header_name_is_refused(void)
{
	expect_refused("GET / HTTP/1.1\r\n: v\r\nHost: x\r\n\r\n", 400,
	               "malformed HTTP request: empty header name", 16);
	static const char before[] = "GET / HTTP/1.1\r\nHost: x\r\n";
	char *s = sl_xasprintf("%s:\r\n\r\n", before);
	expect_refused(s, 400, "malformed HTTP request: empty header name",
	               strlen(before));
	free(s);
}

/* How a refusal is reported: status and message, or a silent close. */
static void test_request_line_refusals(void)
{
	expect_refused("GET /\r\nHost: x\r\n\r\n", SL_HTTP_FRAME_CLOSE_SILENTLY,
	               "an HTTP/0.9 request", 5);
	/* A major version is judged at the '.' that ends it. */
	expect_refused("GET / HTTP/0.9\r\n\r\n", SL_HTTP_FRAME_CLOSE_SILENTLY,
	               "an HTTP/0.9 request", 12);
	expect_refused("GET / HTTP/2.0\r\n\r\n", 505,
	               "only HTTP/1.0 and HTTP/1.1 are supported", 12);
	expect_refused("GET  / HTTP/1.1\r\n\r\n", 400,
	               "malformed HTTP request: extra space in the request "
	               "line",
	               4);
	expect_refused("GET\t/ HTTP/1.1\r\n\r\n", 400,
	               "malformed HTTP request: tab in the request line", 3);
	expect_refused("GET /\x01 HTTP/1.1\r\n\r\n", 400,
	               "malformed HTTP request: control or non-ASCII byte in "
	               "the request target",
	               5);
	/* A fragment: one path for sluice's routes, another upstream. */
	expect_refused("GET /cors-proxy#x HTTP/1.1\r\n\r\n", 400,
	               "malformed HTTP request: a fragment (#) in the request "
	               "target",
	               15);
	/* SL_HTTP_FRAME_MAX_EMPTY_LINES are allowed, one more is not. */
	expect_refused("\r\n\r\n\r\n\r\n\r\nGET / HTTP/1.1\r\n\r\n", 400,
	               "malformed HTTP request: empty lines instead of a "
	               "request line",
	               8);
}

/* Chunk extensions count against the head's byte limit. */
static void test_chunk_extensions_count_against_the_limit(void)
{
	static const char head[] = "POST / HTTP/1.1\r\nHost: a\r\n"
	                           "Transfer-Encoding: chunked\r\n\r\n";
	char *s = sl_xasprintf("%s5;abcdef\r\nhello\r\n0\r\n\r\n", head);
	/* "5;a" fits in 3 bytes; "b" is the fourth. */
	struct run r = scan_all_ways(s, strlen(s), 3);
	ASSERT_EQ(r.status, 431);
	ASSERT_STR_EQ(r.message, "chunk extensions too large");
	ASSERT_EQ(r.consumed, strlen(head) + 3);
	r = scan_all_ways(s, strlen(s), NO_LIMIT);
	ASSERT_EQ(r.status, 0);
	ASSERT_EQ(r.n_requests, 1);
	free(s);
}

static void test_chunk_data_must_end_in_crlf(void)
{
	static const char head[] = "POST / HTTP/1.1\r\nHost: a\r\n"
	                           "Transfer-Encoding: chunked\r\n\r\n";
	char *s = sl_xasprintf("%s5\r\nhelloXX0\r\n\r\n", head);
	expect_refused(s, 400,
	               "malformed HTTP request: chunk data not followed by "
	               "CRLF",
	               strlen(head) + 8);
	free(s);
}

/*
 * RFC 9110, 2.5: HTTP/1.2 to HTTP/1.9 are read as HTTP/1.1, which llhttp
 * takes: the minor digit, and only it, is handed back to be fed as '1',
 * wherever the reads split. Other versions are left to llhttp's judgement
 * (1.0, 1.1) or refused as before.
 */
static void test_higher_minor_versions_are_folded(void)
{
	static const char *const folded[] = {"1.2", "1.5", "1.9"};
	for (size_t i = 0; i < SL_ARRAY_SIZE(folded); i++) {
		char *s = sl_xasprintf("GET / HTTP/%s\r\nHost: x\r\n\r\n"
		                       "GET /b HTTP/%s\r\nHost: x\r\n\r\n",
		                       folded[i], folded[i]);
		struct run r = scan_str(s);
		ASSERT_EQ(r.status, 0);
		ASSERT_EQ(r.consumed, strlen(s));
		ASSERT_EQ(r.n_requests, 2);
		ASSERT_EQ(r.n_folds, 2);
		ASSERT_EQ(r.folds[0], strlen("GET / HTTP/1."));
		/* The first request is 27 bytes. */
		ASSERT_EQ(r.folds[1], 27 + strlen("GET /b HTTP/1."));
		free(s);
	}
	static const char *const kept[] = {
	    "GET / HTTP/1.1\r\n\r\n",  "GET / HTTP/1.0\r\n\r\n",
	    "GET / HTTP/11.2\r\n\r\n", "GET / HTTP/1x2\r\n\r\n",
	    "GET / XTTP/1.2\r\n\r\n",  "GET /HTTP/1.2 HTTP/1.1\r\n\r\n",
	    "GET / HTTP/1.\r\n\r\n",   "GET / HTTP/01.1\r\n\r\n",
	    "GET / HTTP/00.9\r\n\r\n", "GET / HTTP/20.0\r\n\r\n",
	    "GET / HTTP/0\r\n\r\n",    "GET / HTTP/2\r\n\r\n"};
	for (size_t i = 0; i < SL_ARRAY_SIZE(kept); i++) {
		struct run r = scan_str(kept[i]);
		ASSERT_EQ(r.status, 0);
		ASSERT_EQ(r.n_folds, 0);
	}
	/* One digit each (RFC 9112, 2.3): the scanner folds the first. */
	struct run r = scan_str("GET / HTTP/1.23\r\n\r\n");
	ASSERT_EQ(r.n_folds, 1);
	expect_refused("GET / HTTP/3.2\r\n\r\n", 505,
	               "only HTTP/1.0 and HTTP/1.1 are supported", 12);
}

int main(void)
{
	RUN(test_pipelined_heads_end_at_the_same_offsets);
	RUN(test_final_cr_waits_for_its_lf);
	RUN(test_cve_2025_23167_smuggled_request_is_refused);
	RUN(test_bare_cr_or_lf_is_refused_wherever_it_falls);
	RUN(test_bare_cr_is_refused_in_chunk_lines_and_trailers);
	RUN(test_obsolete_line_folding_is_refused);
	RUN(test_empty_header_name_is_refused);
	RUN(test_request_line_refusals);
	RUN(test_chunk_extensions_count_against_the_limit);
	RUN(test_chunk_data_must_end_in_crlf);
	RUN(test_higher_minor_versions_are_folded);
	return 0;
}

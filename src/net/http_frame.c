/*
 * http_frame.c: the frame scanner; http_frame.h says what it owns, why it
 * exists and what a scan returns.
 */
#include "sluice/net/http_frame.h"

#include "sluice/base/common.h"

#include <string.h>

void sl_http_frame_reset(struct sl_http_frame *f)
{
	memset(f, 0, sizeof(*f));
}

void sl_http_frame_head_done(struct sl_http_frame *f, bool chunked)
{
	f->state = chunked ? SL_HTTP_FRAME_CHUNK_SIZE : SL_HTTP_FRAME_BODY;
	f->line_len = 0;
}

void sl_http_frame_chunk(struct sl_http_frame *f, uint64_t size)
{
	if (size == 0) {
		f->state = SL_HTTP_FRAME_TRAILERS;
		f->line_len = 0;
	} else {
		f->state = SL_HTTP_FRAME_CHUNK_DATA;
		f->data_left = size;
	}
}

/* Records a refusal; returns `at` for its caller. */
static size_t scan_refuse(struct sl_http_frame *f, unsigned status,
                          const char *why, size_t at)
{
	f->status = status;
	f->message = why;
	return at;
}

/*
 * One byte of the request line, which must be method SP target SP version
 * with single spaces (RFC 9112, 3). The target may hold no control bytes,
 * no '#' and nothing from 0x80 up; the version's major digit is judged here,
 * at the '.' after it, before llhttp sees that: 0 is HTTP/0.9 (closed without
 * an answer, as there is no way to answer it that its client would read as
 * an error), 2 to 9 are versions sluice does not speak (505). A version whose
 * major is not one digit and a '.' ("HTTP/01.1", "HTTP/11.1") is malformed,
 * left to llhttp, which refuses it: 400, as for any version it cannot read.
 * A minor digit from 2 to 9 after "HTTP/1." sets fold_minor. Returns false
 * when refused.
 */
static bool scan_request_line_byte(struct sl_http_frame *f, unsigned char ch)
{
	static const char prefix[] = "HTTP/";
	if (ch == ' ') {
		if (f->part_len == 0 || f->spaces == 2) {
			f->status = 400;
			f->message = "malformed HTTP request: extra space in "
			             "the request line";
			return false;
		}
		f->spaces++;
		f->part_len = 0;
		f->version_prefix_ok = true;
		return true;
	}
	if (ch == '\t') {
		f->status = 400;
		f->message = "malformed HTTP request: tab in the request "
		             "line";
		return false;
	}
	if (f->spaces == 1 && (ch < 0x21 || ch >= 0x7f)) {
		f->status = 400;
		f->message = "malformed HTTP request: control or non-ASCII "
		             "byte in the request target";
		return false;
	}
	/*
	 * A fragment is the client's own business and never part of a
	 * request target (RFC 9112, 3.2). Let through, it would make one path
	 * for sluice's routes ("/cors-proxy#x") and another upstream, where
	 * libcurl drops it ("/cors-proxy").
	 */
	if (f->spaces == 1 && ch == '#') {
		f->status = 400;
		f->message = "malformed HTTP request: a fragment (#) in the "
		             "request target";
		return false;
	}
	if (f->spaces == 2 && f->part_len < sizeof(prefix) - 1 &&
	    ch != (unsigned char)prefix[f->part_len])
		f->version_prefix_ok = false; /* llhttp refuses it */
	if (f->spaces == 2 && f->part_len == sizeof(prefix) - 1 &&
	    f->version_prefix_ok && ch >= '0' && ch <= '9')
		f->version_major = ch;
	if (f->spaces == 2 && f->part_len == sizeof(prefix) &&
	    f->version_major && ch == '.') {
		if (f->version_major == '0') {
			f->status = SL_HTTP_FRAME_CLOSE_SILENTLY;
			f->message = "an HTTP/0.9 request";
			return false;
		}
		if (f->version_major >= '2') {
			f->status = 505;
			f->message = "only HTTP/1.0 and HTTP/1.1 are "
			             "supported";
			return false;
		}
		f->version_one = true;
	}
	if (f->spaces == 2 && f->part_len == sizeof(prefix) + 1 &&
	    f->version_one && ch >= '2' && ch <= '9')
		f->fold_minor = true;
	f->part_len++;
	return true;
}

/*
 * The end of a line in a line-based part. Returns true when the part is
 * over (llhttp moves on with the bytes so far), false to scan on; sets
 * status when the line is refused.
 */
static bool scan_line_end(struct sl_http_frame *f)
{
	size_t len = f->line_len;
	f->line_len = 0;
	if (f->state == SL_HTTP_FRAME_CHUNK_SIZE)
		return true;
	if (f->state == SL_HTTP_FRAME_TRAILERS)
		return len == 0;
	if (f->past_request_line)
		return len == 0; /* an empty line ends the header section */
	if (len == 0) {
		if (++f->empty_lines > SL_HTTP_FRAME_MAX_EMPTY_LINES)
			scan_refuse(
			    f, 400,
			    "malformed HTTP request: empty lines instead "
			    "of a request line",
			    0);
		return false;
	}
	if (f->spaces < 2)
		scan_refuse(f,
		            f->spaces == 1 ? SL_HTTP_FRAME_CLOSE_SILENTLY : 400,
		            f->spaces == 1 ? "an HTTP/0.9 request"
		                           : "malformed HTTP request: no "
		                             "target in the request line",
		            0);
	else if (f->part_len == 0)
		scan_refuse(
		    f, 400,
		    "malformed HTTP request: extra space in the request "
		    "line",
		    0);
	f->past_request_line = true;
	return false;
}

/*
 * The line-based parts: request line and headers, chunk-size lines,
 * trailers. Returns how many bytes llhttp may parse: up to the end of the
 * part, up to a refused byte (status set), or everything but a final CR
 * whose LF has not arrived.
 */
static size_t scan_lines(struct sl_http_frame *f, const char *p, size_t len,
                         size_t *header_bytes, size_t max_header_bytes)
{
	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)p[i];
		if (ch == '\r') {
			if (i + 1 == len)
				return i; /* judged with the next read */
			if (p[i + 1] != '\n')
				return scan_refuse(f, 400,
				                   "malformed HTTP request: CR "
				                   "not followed by LF",
				                   i);
			i++;
			bool part_over = scan_line_end(f);
			if (f->status)
				return i - 1;
			if (part_over)
				return i + 1;
			continue;
		}
		if (ch == '\n')
			return scan_refuse(f, 400,
			                   "malformed HTTP request: LF not "
			                   "preceded by CR",
			                   i);
		bool first = f->line_len++ == 0;
		if (f->state == SL_HTTP_FRAME_HEAD && !f->past_request_line) {
			if (!scan_request_line_byte(f, ch))
				return i;
			if (f->fold_minor)
				return i + 1; /* the caller feeds '1' for it */
			continue;
		}
		if (first && f->state != SL_HTTP_FRAME_CHUNK_SIZE &&
		    (ch == ' ' || ch == '\t'))
			return scan_refuse(f, 400,
			                   "malformed HTTP request: obsolete "
			                   "line folding",
			                   i);
		if (first && f->state != SL_HTTP_FRAME_CHUNK_SIZE && ch == ':')
			return scan_refuse(
			    f, 400,
			    "malformed HTTP request: empty header "
			    "name",
			    i);
		if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
			return scan_refuse(f, 400,
			                   "malformed HTTP request: control "
			                   "byte in the header section",
			                   i);
		/*
		 * Chunk extensions are headers in all but name: they count
		 * against the same limit (llhttp bounds them nowhere).
		 */
		if (f->state == SL_HTTP_FRAME_CHUNK_SIZE) {
			if (++*header_bytes > max_header_bytes)
				return scan_refuse(
				    f, 431, "chunk extensions too large", i);
			continue;
		}
		/* The rest of a header's printable bytes pass as they are. */
		size_t run = sl_printable_span(p + i + 1, len - i - 1);
		f->line_len += run;
		i += run;
	}
	return len;
}

size_t sl_http_frame_scan(struct sl_http_frame *f, const char *p, size_t len,
                          size_t *header_bytes, size_t max_header_bytes)
{
	switch (f->state) {
	case SL_HTTP_FRAME_BODY:
		return len; /* llhttp pauses at the end of the message */
	case SL_HTTP_FRAME_CHUNK_DATA: {
		size_t n = (size_t)SL_MIN((uint64_t)len, f->data_left);
		f->data_left -= n;
		if (f->data_left == 0) {
			f->state = SL_HTTP_FRAME_CHUNK_CRLF;
			f->crlf_seen = 0;
		}
		return n;
	}
	case SL_HTTP_FRAME_CHUNK_CRLF:
		/* llhttp 8 skips these two bytes unseen: "5\r\nhelloXX". */
		for (size_t i = 0; i < len; i++) {
			if (p[i] != "\r\n"[f->crlf_seen])
				return scan_refuse(
				    f, 400,
				    "malformed HTTP request: chunk "
				    "data not followed by CRLF",
				    i);
			if (++f->crlf_seen == 2) {
				f->state = SL_HTTP_FRAME_CHUNK_SIZE;
				f->line_len = 0;
				return i + 1;
			}
		}
		return len;
	case SL_HTTP_FRAME_HEAD:
	case SL_HTTP_FRAME_CHUNK_SIZE:
	case SL_HTTP_FRAME_TRAILERS: break;
	}
	return scan_lines(f, p, len, header_bytes, max_header_bytes);
}

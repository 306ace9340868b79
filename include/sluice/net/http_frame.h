/*
 * http_frame.h: the frame scanner, which decides where each part of an
 * HTTP/1.1 request ends before llhttp sees its bytes.
 *
 * The scanner owns one thing: the answer to "how many of these bytes may
 * the parser take now". It reads a request byte by byte and stops at the
 * end of each part (the head, a chunk-size line, a chunk's data, the CRLF
 * after it, the trailers), so that llhttp is fed exactly one part at a time
 * and can never end a part anywhere else. llhttp 8.1 (Debian bookworm) takes
 * "\r\n\r" and any byte for the end of the header section (CVE-2025-23167),
 * and "\r" and any byte for the end of a chunk-size line or of the trailers:
 * a second request could hide behind them. The scanner refuses every CR not
 * followed by LF and every LF not preceded by CR, whatever llhttp version is
 * linked, and the other shapes RFC 9112 says a server must refuse in the
 * request line and header section: extra or missing spaces and tabs in the
 * request line, control and non-ASCII bytes in the target, HTTP/0.9 and
 * versions 2 to 9, obsolete line folding, an empty header name, control
 * bytes in the header section, chunk data not followed by CRLF, and chunk
 * extensions past the header byte limit. HTTP/1.2 to HTTP/1.9, which
 * llhttp refuses, are read as HTTP/1.1 (RFC 9110, 2.5: a server answers a
 * higher minor version of a major it speaks as the highest it supports):
 * see fold_minor.
 *
 * It is pure logic: no libuv, no llhttp, no connection. Its owner (http.c)
 * tells it what the parser learned that the bytes alone do not say (where
 * the head ended and whether a chunked body follows, each chunk's size),
 * because the scanner leaves lengths and header semantics to the parser.
 *
 * Glossary:
 *   part       a stretch of a request the parser is fed whole and alone:
 *              the head, a chunk-size line, a chunk's data, the CRLF after
 *              it, the trailers. A Content-Length body is one part the
 *              parser counts itself.
 *   head       the request line and the header section, up to and
 *              including the empty line that ends it.
 *   line       bytes up to a CRLF, which is not part of the line.
 *   refusal    a request the scanner will not let through: `status` is the
 *              HTTP status to answer with and `message` the reason, or
 *              status SL_HTTP_FRAME_CLOSE_SILENTLY for an HTTP/0.9 request,
 *              which is closed without any answer (there is no answer its
 *              client would read as an error).
 *
 * Return contract of sl_http_frame_scan(): the number of bytes, from the
 * start of those given, that the parser may take now, never more than
 * given. Then:
 *   - status != 0: refused. The bytes counted come before the refused byte
 *     and may still be parsed (a parser error there wins, being earlier);
 *     the caller answers the refusal (or closes without an answer, for
 *     SL_HTTP_FRAME_CLOSE_SILENTLY) and stops: the scanner is not called
 *     again for this request.
 *   - else the caller feeds the parser that many bytes and scans what is
 *     left; when fold_minor is set, the last of those bytes is fed as '1'
 *     and the caller clears it. A count short of what was given means a
 *     part ends there, the last byte counted is such a version digit, or
 *     the bytes left are a lone CR at the end whose LF has not arrived:
 *     the next scan then returns 0, and the caller keeps those bytes and
 *     scans them again with the next read.
 * So a head split across reads anywhere ends at the same offset as the
 * head scanned whole, and a refusal falls on the same byte.
 */
#ifndef SLUICE_HTTP_FRAME_H
#define SLUICE_HTTP_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The status of a refusal that closes without an answer (HTTP/0.9). */
#define SL_HTTP_FRAME_CLOSE_SILENTLY 1u

/*
 * RFC 9112, 2.2 asks servers to ignore at least one empty line before a
 * request line (some clients send CRLF after a POST body). A few more are
 * allowed; a stream of them is not a request.
 */
#define SL_HTTP_FRAME_MAX_EMPTY_LINES 4u

/* Which part of a request the next byte belongs to. */
enum sl_http_frame_state {
	SL_HTTP_FRAME_HEAD,       /* request line and header section */
	SL_HTTP_FRAME_BODY,       /* a Content-Length body: the parser counts */
	SL_HTTP_FRAME_CHUNK_SIZE, /* chunk size and extensions, to the CRLF */
	SL_HTTP_FRAME_CHUNK_DATA, /* data_left bytes of a chunk's data */
	SL_HTTP_FRAME_CHUNK_CRLF, /* the CRLF after a chunk's data */
	SL_HTTP_FRAME_TRAILERS,   /* trailer fields after the last chunk */
};

/*
 * One request's scanning state, embedded in its connection. All zeroes (as
 * from calloc, or after sl_http_frame_reset()) is the start of a request.
 * The caller reads `status` and `message`; the other fields are the
 * scanner's own.
 */
struct sl_http_frame {
	enum sl_http_frame_state state;
	bool past_request_line; /* HEAD: in the header fields */
	bool version_prefix_ok; /* the version begins "HTTP/" so far */
	char version_major;     /* ...then this digit, or 0 for none yet */
	bool version_one;       /* ...which was "1." */
	unsigned empty_lines;   /* CRLFs before the request line */
	unsigned spaces;        /* SPs in the request line so far */
	size_t part_len;        /* bytes of the request line's current part */
	size_t line_len;        /* bytes of the current line, CRLF excluded */
	uint64_t data_left;     /* CHUNK_DATA */
	unsigned crlf_seen;     /* CHUNK_CRLF: 0 to 2 */
	/*
	 * The last byte counted is the minor digit of HTTP/1.2 to HTTP/1.9:
	 * the caller feeds '1' in its place, then clears this.
	 */
	bool fold_minor;
	/* A refusal: 0 none, else the status (see the glossary). */
	unsigned status;
	const char *message; /* static text; NULL when status is 0 */
};

/* Starts the next request: its head is scanned from the next byte. */
void sl_http_frame_reset(struct sl_http_frame *f);

/*
 * The parser has taken the whole head: what follows is a chunked body
 * (`chunked`) or a Content-Length body (or nothing) the parser counts.
 */
void sl_http_frame_head_done(struct sl_http_frame *f, bool chunked);

/*
 * The parser has taken a whole chunk-size line: `size` bytes of data and
 * their CRLF follow, or the trailers when `size` is 0.
 */
void sl_http_frame_chunk(struct sl_http_frame *f, uint64_t size);

/*
 * How many of the `len` bytes at `p` the parser may take now: see the
 * return contract above. Chunk extensions count against the same limit as
 * the head: each of their bytes adds one to *header_bytes (the request's
 * running count, which the caller keeps) and is refused with 431 past
 * max_header_bytes. header_bytes may be NULL while no chunked body is being
 * scanned.
 */
size_t sl_http_frame_scan(struct sl_http_frame *f, const char *p, size_t len,
                          size_t *header_bytes, size_t max_header_bytes);

#endif

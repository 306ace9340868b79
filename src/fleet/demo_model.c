/*
 * demo_model.c: writes the demo model as a GGUF v3 file.
 *
 * GGUF v3 layout (little-endian): magic "GGUF", version, tensor count,
 * key/value count; the key/value pairs (typed metadata); one info record per
 * tensor (name, dimensions, type, offset into the data section); padding to
 * the alignment; then the tensor data, each tensor starting aligned.
 *
 * How the weights keep every output printable: dimension 0 of every token
 * embedding is a positive constant and no block ever writes to dimension 0
 * (row 0 of attn_output and ffn_down is zero), so after the final RMS norm
 * that dimension is always positive. Row 0 of output.weight is +LOGIT_BIAS
 * for printable pieces and -LOGIT_BIAS for the rest, which puts every
 * control, byte and unknown token far below every printable one whatever the
 * context: greedy and sampled decoding alike pick only printable pieces, and
 * never the end-of-sequence token, so generation runs to n_predict.
 */
#include "sluice/fleet/demo_model.h"

#include "sluice/base/common.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* GGUF metadata value types. */
enum {
	GGUF_UINT32 = 4,
	GGUF_INT32 = 5,
	GGUF_FLOAT32 = 6,
	GGUF_BOOL = 7,
	GGUF_STRING = 8,
	GGUF_ARRAY = 9,
};

/* GGML tensor types. */
enum { GGML_TYPE_F32 = 0 };

/* llama.cpp's token types. */
enum {
	TOKEN_NORMAL = 1,
	TOKEN_UNKNOWN = 2,
	TOKEN_CONTROL = 3,
	TOKEN_BYTE = 6,
};

#define GGUF_VERSION 3u
#define TOKEN_UNK 0u
#define TOKEN_BOS 1u
#define TOKEN_EOS 2u
#define FIRST_BYTE_TOKEN 3u
#define FIRST_PIECE_TOKEN (FIRST_BYTE_TOKEN + 256u)

/* Size of dimension 0 of every embedding; see the top of the file. */
#define EMBED_ANCHOR 4.0f
/* Row-0 weight of output.weight: + for printable pieces, - for the rest. */
#define LOGIT_BIAS 4.0f
/* Spread of the printable pieces' other output weights: how varied the text is.
 */
#define LOGIT_SPREAD 0.5f
#define RMS_EPSILON 1e-5f

/* clang-format off */
static const struct sl_demo_spec demo_specs[] = {
	[SL_DEMO_TINY] = {"tiny", 64, 2, 4, 128, 65536},
	[SL_DEMO_SLOW] = {"slow", 384, 6, 6, 1024, 65536},
};
/* clang-format on */

/* Whole-word pieces, so that the random text reads a little like words. */
/* clang-format off */
static const char *const demo_words[] = {
	"the",   "of",    "and",   "to",    "in",    "is",   "it",
	"that",  "was",   "for",   "on",    "are",   "with", "as",
	"at",    "be",    "this",  "from",  "or",    "by",   "one",
	"had",   "not",   "but",   "what",  "all",   "were", "when",
	"we",    "there", "can",   "an",    "which", "if",   "do",
	"will",  "each",  "about", "how",   "up",    "out",  "then",
	"many",  "some",  "so",    "these", "would", "into", "has",
	"more",  "two",   "like",  "see",   "time",  "could", "make",
	"than",  "first", "been",  "now",   "river", "stone", "light",
	"north", "quiet", "field",
};
/* clang-format on */

/* "▁" (U+2581), SentencePiece's marker for a space. */
#define SPACE_MARK "\xe2\x96\x81"

#define N_PRINTABLE_CHARS (0x7e - 0x21 + 1)
#define VOCAB_SIZE                                                             \
	(FIRST_PIECE_TOKEN + 1u + N_PRINTABLE_CHARS + SL_ARRAY_SIZE(demo_words))

const struct sl_demo_spec *sl_demo_spec(enum sl_demo_size size)
{
	return &demo_specs[size];
}

int sl_demo_size_parse(const char *name, enum sl_demo_size *out)
{
	for (size_t i = 0; i < SL_ARRAY_SIZE(demo_specs); i++) {
		if (strcmp(name, demo_specs[i].name) == 0) {
			*out = (enum sl_demo_size)i;
			return 0;
		}
	}
	return SL_EINVAL;
}

const char *const *sl_demo_words(unsigned *n)
{
	*n = SL_ARRAY_SIZE(demo_words);
	return demo_words;
}

uint32_t sl_demo_vocab_size(void)
{
	return (uint32_t)VOCAB_SIZE;
}

/* The piece of token `id` into buf; returns its type. */
static int token_piece(uint32_t id, char *buf, size_t size)
{
	if (id == TOKEN_UNK) {
		snprintf(buf, size, "<unk>");
		return TOKEN_UNKNOWN;
	}
	if (id == TOKEN_BOS || id == TOKEN_EOS) {
		snprintf(buf, size, id == TOKEN_BOS ? "<s>" : "</s>");
		return TOKEN_CONTROL;
	}
	if (id < FIRST_PIECE_TOKEN) {
		snprintf(buf, size, "<0x%02X>", id - FIRST_BYTE_TOKEN);
		return TOKEN_BYTE;
	}
	uint32_t k = id - FIRST_PIECE_TOKEN;
	if (k == 0)
		snprintf(buf, size, SPACE_MARK);
	else if (k <= N_PRINTABLE_CHARS)
		snprintf(buf, size, "%c", (char)(0x21 + k - 1));
	else
		snprintf(buf, size, SPACE_MARK "%s",
		         demo_words[k - 1 - N_PRINTABLE_CHARS]);
	return TOKEN_NORMAL;
}

/*
 * Deterministic pseudo-random numbers: splitmix64, seeded from the tensor's
 * name, so each tensor's values are independent of the order of writing.
 */
struct prng {
	uint64_t state;
};

static void prng_seed(struct prng *r, const char *name)
{
	uint64_t h = 0xcbf29ce484222325u; /* FNV-1a */
	for (; *name; name++)
		h = (h ^ (unsigned char)*name) * 0x100000001b3u;
	r->state = h;
}

static uint64_t prng_next(struct prng *r)
{
	uint64_t z = (r->state += 0x9e3779b97f4a7c15u);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	return z ^ (z >> 31);
}

/* Uniform in [-1, 1), exactly representable, so identical on every host. */
static float prng_uniform(struct prng *r)
{
	return (float)(int32_t)(prng_next(r) >> 40) / 8388608.0f - 1.0f;
}

/*
 * The writer: a FILE with a sticky error, so that the layout code reads as a
 * list of fields and is checked once at the end.
 */
struct writer {
	FILE *f;
	uint64_t pos;
	int err;
};

static void put_bytes(struct writer *w, const void *p, size_t n)
{
	if (w->err == 0 && fwrite(p, 1, n, w->f) != n)
		w->err = errno ? -errno : SL_EINVAL;
	w->pos += n;
}

static void put_u32(struct writer *w, uint32_t v)
{
	unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8),
	                      (unsigned char)(v >> 16),
	                      (unsigned char)(v >> 24)};
	put_bytes(w, b, sizeof(b));
}

static void put_u64(struct writer *w, uint64_t v)
{
	put_u32(w, (uint32_t)v);
	put_u32(w, (uint32_t)(v >> 32));
}

static void put_f32(struct writer *w, float v)
{
	uint32_t bits;
	memcpy(&bits, &v, sizeof(bits));
	put_u32(w, bits);
}

static void put_str(struct writer *w, const char *s)
{
	size_t n = strlen(s);
	put_u64(w, n);
	put_bytes(w, s, n);
}

static void put_pad(struct writer *w)
{
	static const unsigned char zeros[SL_DEMO_ALIGNMENT];
	size_t rem = (size_t)(w->pos % SL_DEMO_ALIGNMENT);
	if (rem)
		put_bytes(w, zeros, SL_DEMO_ALIGNMENT - rem);
}

static void kv_u32(struct writer *w, const char *key, uint32_t v)
{
	put_str(w, key);
	put_u32(w, GGUF_UINT32);
	put_u32(w, v);
}

static void kv_f32(struct writer *w, const char *key, float v)
{
	put_str(w, key);
	put_u32(w, GGUF_FLOAT32);
	put_f32(w, v);
}

static void kv_bool(struct writer *w, const char *key, int v)
{
	unsigned char b = v ? 1 : 0;
	put_str(w, key);
	put_u32(w, GGUF_BOOL);
	put_bytes(w, &b, 1);
}

static void kv_str(struct writer *w, const char *key, const char *v)
{
	put_str(w, key);
	put_u32(w, GGUF_STRING);
	put_str(w, v);
}

static void kv_array_header(struct writer *w, const char *key, uint32_t type,
                            uint64_t count)
{
	put_str(w, key);
	put_u32(w, GGUF_ARRAY);
	put_u32(w, type);
	put_u64(w, count);
}

/* The tokenizer: pieces, scores and types. Five of the key/value pairs. */
static void write_vocab(struct writer *w)
{
	char piece[64];

	kv_str(w, "tokenizer.ggml.model", "llama");
	kv_array_header(w, "tokenizer.ggml.tokens", GGUF_STRING, VOCAB_SIZE);
	for (uint32_t id = 0; id < VOCAB_SIZE; id++) {
		token_piece(id, piece, sizeof(piece));
		put_str(w, piece);
	}
	/* SentencePiece merges prefer higher scores; words rank after chars. */
	kv_array_header(w, "tokenizer.ggml.scores", GGUF_FLOAT32, VOCAB_SIZE);
	for (uint32_t id = 0; id < VOCAB_SIZE; id++)
		put_f32(w, id < FIRST_PIECE_TOKEN
		               ? 0.0f
		               : -(float)(id - FIRST_PIECE_TOKEN));
	kv_array_header(w, "tokenizer.ggml.token_type", GGUF_INT32, VOCAB_SIZE);
	for (uint32_t id = 0; id < VOCAB_SIZE; id++)
		put_u32(w, (uint32_t)token_piece(id, piece, sizeof(piece)));
}

static void write_metadata(struct writer *w, const struct sl_demo_spec *s)
{
	char name[64];
	snprintf(name, sizeof(name), "sluice demo (%s)", s->name);

	kv_str(w, "general.architecture", "llama");
	kv_str(w, "general.name", name);
	kv_u32(w, "general.alignment", SL_DEMO_ALIGNMENT);
	kv_u32(w, "llama.context_length", s->n_ctx_train);
	kv_u32(w, "llama.embedding_length", s->n_embd);
	kv_u32(w, "llama.block_count", s->n_layer);
	kv_u32(w, "llama.feed_forward_length", s->n_ff);
	kv_u32(w, "llama.attention.head_count", s->n_head);
	kv_u32(w, "llama.attention.head_count_kv", s->n_head);
	kv_f32(w, "llama.attention.layer_norm_rms_epsilon", RMS_EPSILON);
	kv_u32(w, "llama.rope.dimension_count", s->n_embd / s->n_head);
	kv_u32(w, "llama.vocab_size", VOCAB_SIZE);
	write_vocab(w);
	kv_u32(w, "tokenizer.ggml.bos_token_id", TOKEN_BOS);
	kv_u32(w, "tokenizer.ggml.eos_token_id", TOKEN_EOS);
	kv_u32(w, "tokenizer.ggml.unknown_token_id", TOKEN_UNK);
	kv_bool(w, "tokenizer.ggml.add_bos_token", 1);
}

/* How a tensor's values are made. */
enum fill {
	FILL_ONES,    /* norm weights */
	FILL_RANDOM,  /* uniform, scaled by sqrt(3 / fan_in): unit variance out
	               */
	FILL_NO_COL0, /* as RANDOM, but blind to dimension 0 (the anchor) */
	FILL_NO_ROW0, /* as RANDOM, but row 0 zero: never writes dimension 0 */
	FILL_EMBEDDING, /* uniform, with the positive anchor in dimension 0 */
	FILL_OUTPUT,    /* the output layer described at the top */
};

struct tensor {
	char name[48];
	uint64_t ne0, ne1; /* ne1 == 0 for a vector */
	enum fill fill;
};

static uint64_t tensor_bytes(const struct tensor *t)
{
	return t->ne0 * (t->ne1 ? t->ne1 : 1) * sizeof(float);
}

/* The tensor list, in file order; returns the count (at most `max`). */
static size_t list_tensors(const struct sl_demo_spec *s, struct tensor *t,
                           size_t max)
{
	size_t n = 0;
	const uint64_t d = s->n_embd, ff = s->n_ff, v = VOCAB_SIZE;
#define ADD(fill_, ne0_, ne1_, ...)                                            \
	do {                                                                   \
		if (n < max) {                                                 \
			snprintf(t[n].name, sizeof(t[n].name), __VA_ARGS__);   \
			t[n].ne0 = (ne0_);                                     \
			t[n].ne1 = (ne1_);                                     \
			t[n].fill = (fill_);                                   \
		}                                                              \
		n++;                                                           \
	} while (0)

	ADD(FILL_EMBEDDING, d, v, "token_embd.weight");
	for (uint32_t b = 0; b < s->n_layer; b++) {
		ADD(FILL_ONES, d, 0, "blk.%u.attn_norm.weight", b);
		ADD(FILL_NO_COL0, d, d, "blk.%u.attn_q.weight", b);
		ADD(FILL_NO_COL0, d, d, "blk.%u.attn_k.weight", b);
		ADD(FILL_NO_COL0, d, d, "blk.%u.attn_v.weight", b);
		ADD(FILL_NO_ROW0, d, d, "blk.%u.attn_output.weight", b);
		ADD(FILL_ONES, d, 0, "blk.%u.ffn_norm.weight", b);
		ADD(FILL_NO_COL0, d, ff, "blk.%u.ffn_gate.weight", b);
		ADD(FILL_NO_ROW0, ff, d, "blk.%u.ffn_down.weight", b);
		ADD(FILL_NO_COL0, d, ff, "blk.%u.ffn_up.weight", b);
	}
	ADD(FILL_ONES, d, 0, "output_norm.weight");
	ADD(FILL_OUTPUT, d, v, "output.weight");
#undef ADD
	return n;
}

/* One row of ne0 values: row `row` of tensor `t`. */
static void fill_row(const struct tensor *t, uint64_t row, struct prng *r,
                     float *out)
{
	const float scale = sqrtf(3.0f / (float)t->ne0);
	char piece[64];

	for (uint64_t i = 0; i < t->ne0; i++) {
		switch (t->fill) {
		case FILL_ONES: out[i] = 1.0f; break;
		case FILL_RANDOM: out[i] = prng_uniform(r) * scale; break;
		case FILL_NO_COL0:
			out[i] = i == 0 ? 0.0f : prng_uniform(r) * scale;
			break;
		case FILL_NO_ROW0:
			out[i] = row == 0 ? 0.0f : prng_uniform(r) * scale;
			break;
		case FILL_EMBEDDING:
			out[i] = i == 0 ? EMBED_ANCHOR : prng_uniform(r);
			break;
		case FILL_OUTPUT: {
			int printable =
			    token_piece((uint32_t)row, piece, sizeof(piece)) ==
			    TOKEN_NORMAL;
			if (i == 0)
				out[i] = printable ? LOGIT_BIAS : -LOGIT_BIAS;
			else
				out[i] = printable
				             ? prng_uniform(r) * LOGIT_SPREAD
				             : 0.0f;
			break;
		}
		}
	}
}

static void write_tensor_data(struct writer *w, const struct tensor *t,
                              float *row_buf)
{
	struct prng r;
	prng_seed(&r, t->name);
	uint64_t rows = t->ne1 ? t->ne1 : 1;
	for (uint64_t row = 0; row < rows; row++) {
		fill_row(t, row, &r, row_buf);
		for (uint64_t i = 0; i < t->ne0; i++)
			put_f32(w, row_buf[i]);
	}
	put_pad(w);
}

static int write_model(FILE *f, const struct sl_demo_spec *s)
{
	struct writer w = {.f = f};
	size_t n_tensors = list_tensors(s, NULL, 0);
	struct tensor *tensors = sl_xcalloc(n_tensors, sizeof(*tensors));
	list_tensors(s, tensors, n_tensors);
	float *row_buf = sl_xcalloc(SL_MAX(s->n_embd, s->n_ff), sizeof(float));

	put_bytes(&w, "GGUF", 4);
	put_u32(&w, GGUF_VERSION);
	put_u64(&w, n_tensors);
	put_u64(&w, SL_DEMO_KV_COUNT);
	write_metadata(&w, s);

	uint64_t offset = 0;
	for (size_t i = 0; i < n_tensors; i++) {
		const struct tensor *t = &tensors[i];
		put_str(&w, t->name);
		put_u32(&w, t->ne1 ? 2 : 1);
		put_u64(&w, t->ne0);
		if (t->ne1)
			put_u64(&w, t->ne1);
		put_u32(&w, GGML_TYPE_F32);
		put_u64(&w, offset);
		offset += tensor_bytes(t);
		offset += (SL_DEMO_ALIGNMENT - offset % SL_DEMO_ALIGNMENT) %
		          SL_DEMO_ALIGNMENT;
	}
	put_pad(&w);

	for (size_t i = 0; i < n_tensors; i++)
		write_tensor_data(&w, &tensors[i], row_buf);

	free(row_buf);
	free(tensors);
	return w.err;
}

int sl_demo_model_write(const char *path, enum sl_demo_size size)
{
	char *tmp = sl_xasprintf("%s.tmp.%ld", path, (long)getpid());
	int err = 0;

	FILE *f = fopen(tmp, "wb");
	if (!f) {
		err = -errno;
		goto out_free;
	}
	err = write_model(f, &demo_specs[size]);
	if (fflush(f) != 0 && err == 0)
		err = -errno;
	if (fsync(fileno(f)) != 0 && err == 0)
		err = -errno;
	if (fclose(f) != 0 && err == 0)
		err = -errno;
	if (err == 0 && rename(tmp, path) != 0)
		err = -errno;
	if (err != 0)
		unlink(tmp);
out_free:
	free(tmp);
	return err;
}

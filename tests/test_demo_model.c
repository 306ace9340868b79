/*
 * test_demo_model.c: the demo model is a well-formed GGUF v3 file with the
 * metadata and tensors the design says, and its bytes never vary.
 *
 * The file is read back by an independent reader written here from the GGUF
 * specification, not by the writer's own code.
 */
#include "sluice/fleet/demo_model.h"

#include "sluice/base/common.h"
#include "test.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct reader {
	const unsigned char *p, *end;
};

static uint64_t rd(struct reader *r, unsigned n)
{
	if ((size_t)(r->end - r->p) < n)
		TEST_FAIL("read past the end of the file");
	uint64_t v = 0;
	for (unsigned i = 0; i < n; i++)
		v |= (uint64_t)r->p[i] << (8 * i);
	r->p += n;
	return v;
}

/* A GGUF string, copied NUL-terminated into buf. */
static void rd_str(struct reader *r, char *buf, size_t size)
{
	uint64_t n = rd(r, 8);
	if (n >= size || (size_t)(r->end - r->p) < n)
		TEST_FAIL("string of %llu bytes does not fit",
		          (unsigned long long)n);
	memcpy(buf, r->p, n);
	buf[n] = '\0';
	r->p += n;
}

enum { T_U32 = 4, T_I32 = 5, T_F32 = 6, T_BOOL = 7, T_STR = 8, T_ARR = 9 };

static unsigned type_size(uint32_t t)
{
	switch (t) {
	case 0:
	case 1:
	case T_BOOL: return 1;
	case 2:
	case 3: return 2;
	case T_U32:
	case T_I32:
	case T_F32: return 4;
	case 10:
	case 11:
	case 12: return 8;
	default: return 0;
	}
}

struct model_info {
	uint64_t n_tensors, n_kv;
	uint32_t block_count, embd, ff, heads, vocab;
	uint64_t tokens_len, scores_len, types_len;
	int byte_tokens, control_tokens, normal_tokens;
	char first_byte_piece[64];
	char arch[256], tokenizer[256];
	uint64_t data_bytes_expected; /* sum of tensor sizes, aligned */
	uint64_t data_start, file_size;
	int saw_output, saw_token_embd;
};

static void read_kv(struct reader *r, struct model_info *m)
{
	char key[128];
	rd_str(r, key, sizeof(key));
	uint32_t type = (uint32_t)rd(r, 4);
	if (type == T_STR) {
		char val[256];
		rd_str(r, val, sizeof(val));
		if (!strcmp(key, "general.architecture"))
			snprintf(m->arch, sizeof(m->arch), "%s", val);
		if (!strcmp(key, "tokenizer.ggml.model"))
			snprintf(m->tokenizer, sizeof(m->tokenizer), "%s", val);
		return;
	}
	if (type == T_ARR) {
		uint32_t et = (uint32_t)rd(r, 4);
		uint64_t n = rd(r, 8);
		for (uint64_t i = 0; i < n; i++) {
			if (et == T_STR) {
				char piece[64];
				rd_str(r, piece, sizeof(piece));
				if (!strcmp(key, "tokenizer.ggml.tokens") &&
				    !strcmp(piece, "<0x00>"))
					snprintf(m->first_byte_piece,
					         sizeof(m->first_byte_piece),
					         "%s", piece);
			} else if (!strcmp(key, "tokenizer.ggml.token_type")) {
				int32_t t = (int32_t)rd(r, 4);
				m->byte_tokens += t == 6;
				m->control_tokens += t == 3;
				m->normal_tokens += t == 1;
			} else {
				ASSERT(type_size(et) > 0);
				rd(r, type_size(et));
			}
		}
		if (!strcmp(key, "tokenizer.ggml.tokens"))
			m->tokens_len = n;
		if (!strcmp(key, "tokenizer.ggml.scores"))
			m->scores_len = n;
		if (!strcmp(key, "tokenizer.ggml.token_type"))
			m->types_len = n;
		return;
	}
	ASSERT(type_size(type) > 0);
	uint64_t v = rd(r, type_size(type));
	if (!strcmp(key, "llama.block_count"))
		m->block_count = (uint32_t)v;
	if (!strcmp(key, "llama.embedding_length"))
		m->embd = (uint32_t)v;
	if (!strcmp(key, "llama.feed_forward_length"))
		m->ff = (uint32_t)v;
	if (!strcmp(key, "llama.attention.head_count"))
		m->heads = (uint32_t)v;
	if (!strcmp(key, "llama.vocab_size"))
		m->vocab = (uint32_t)v;
}

static unsigned char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	ASSERT(f != NULL);
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	unsigned char *buf = malloc((size_t)n);
	ASSERT(fread(buf, 1, (size_t)n, f) == (size_t)n);
	fclose(f);
	*len = (size_t)n;
	return buf;
}

static void parse_model(const unsigned char *buf, size_t len,
                        struct model_info *m)
{
	struct reader r = {buf, buf + len};
	memset(m, 0, sizeof(*m));
	ASSERT(len > 24 && memcmp(buf, "GGUF", 4) == 0);
	r.p += 4;
	ASSERT_EQ(rd(&r, 4), 3); /* GGUF version 3 */
	m->n_tensors = rd(&r, 8);
	m->n_kv = rd(&r, 8);
	for (uint64_t i = 0; i < m->n_kv; i++)
		read_kv(&r, m);

	uint64_t expect_offset = 0;
	for (uint64_t i = 0; i < m->n_tensors; i++) {
		char name[64];
		rd_str(&r, name, sizeof(name));
		uint32_t n_dims = (uint32_t)rd(&r, 4);
		ASSERT(n_dims == 1 || n_dims == 2);
		uint64_t elems = 1, ne0 = rd(&r, 8);
		elems *= ne0;
		if (n_dims == 2)
			elems *= rd(&r, 8);
		ASSERT_EQ(ne0,
		          !strncmp(name, "blk.", 4) && strstr(name, "ffn_down")
		              ? m->ff
		              : m->embd);
		ASSERT_EQ(rd(&r, 4), 0); /* F32 */
		uint64_t offset = rd(&r, 8);
		ASSERT_EQ(offset % SL_DEMO_ALIGNMENT, 0);
		ASSERT_EQ(offset, expect_offset);
		expect_offset = offset + elems * 4;
		expect_offset +=
		    (SL_DEMO_ALIGNMENT - expect_offset % SL_DEMO_ALIGNMENT) %
		    SL_DEMO_ALIGNMENT;
		m->saw_output |= !strcmp(name, "output.weight");
		m->saw_token_embd |= !strcmp(name, "token_embd.weight");
	}
	size_t header = (size_t)(r.p - buf);
	m->data_start = (header + SL_DEMO_ALIGNMENT - 1) / SL_DEMO_ALIGNMENT *
	                SL_DEMO_ALIGNMENT;
	m->data_bytes_expected = expect_offset;
	m->file_size = len;
}

static void check_variant(enum sl_demo_size size, const char *dir)
{
	const struct sl_demo_spec *spec = sl_demo_spec(size);
	char a[512], b[512];
	snprintf(a, sizeof(a), "%s/%s-a.gguf", dir, spec->name);
	snprintf(b, sizeof(b), "%s/%s-b.gguf", dir, spec->name);
	ASSERT_EQ(sl_demo_model_write(a, size), 0);
	ASSERT_EQ(sl_demo_model_write(b, size), 0);

	size_t la, lb;
	unsigned char *ba = slurp(a, &la), *bb = slurp(b, &lb);
	/* Identical bytes when written twice. */
	ASSERT_EQ(la, lb);
	ASSERT(memcmp(ba, bb, la) == 0);

	struct model_info m;
	parse_model(ba, la, &m);
	ASSERT_EQ(m.n_kv, SL_DEMO_KV_COUNT);
	ASSERT_STR_EQ(m.arch, "llama");
	ASSERT_STR_EQ(m.tokenizer, "llama");
	ASSERT_EQ(m.block_count, spec->n_layer);
	ASSERT_EQ(m.embd, spec->n_embd);
	ASSERT_EQ(m.ff, spec->n_ff);
	ASSERT_EQ(m.heads, spec->n_head);
	ASSERT_EQ(m.n_tensors, SL_DEMO_GLOBAL_TENSORS +
	                           SL_DEMO_TENSORS_PER_BLOCK * m.block_count);
	ASSERT(m.saw_output && m.saw_token_embd);
	/* The tokenizer: parallel arrays, all 256 byte-fallback tokens. */
	ASSERT_EQ(m.vocab, sl_demo_vocab_size());
	ASSERT_EQ(m.tokens_len, m.vocab);
	ASSERT_EQ(m.scores_len, m.vocab);
	ASSERT_EQ(m.types_len, m.vocab);
	ASSERT_EQ(m.byte_tokens, 256);
	ASSERT_EQ(m.control_tokens, 2); /* BOS and EOS */
	ASSERT(m.normal_tokens > 95);   /* space, printable ASCII, words */
	ASSERT_STR_EQ(m.first_byte_piece, "<0x00>");
	/* The data section holds exactly the tensors, nothing after. */
	ASSERT_EQ(m.file_size, m.data_start + m.data_bytes_expected);

	free(ba);
	free(bb);
	unlink(a);
	unlink(b);
}

static void test_tiny(void)
{
	char dir[] = "/tmp/sluice-test-XXXXXX";
	ASSERT(mkdtemp(dir) != NULL);
	check_variant(SL_DEMO_TINY, dir);
	rmdir(dir);
}

static void test_slow(void)
{
	char dir[] = "/tmp/sluice-test-XXXXXX";
	ASSERT(mkdtemp(dir) != NULL);
	check_variant(SL_DEMO_SLOW, dir);
	/* "slow" is tens of MB: big enough to take seconds to generate. */
	rmdir(dir);
}

static void test_sizes_differ(void)
{
	const struct sl_demo_spec *t = sl_demo_spec(SL_DEMO_TINY);
	const struct sl_demo_spec *s = sl_demo_spec(SL_DEMO_SLOW);
	uint64_t tiny_params =
	    (uint64_t)t->n_layer * t->n_embd * (4u * t->n_embd + 3u * t->n_ff);
	uint64_t slow_params =
	    (uint64_t)s->n_layer * s->n_embd * (4u * s->n_embd + 3u * s->n_ff);
	ASSERT(tiny_params * 4 < 1024 * 1024);       /* under a MB */
	ASSERT(slow_params * 4 > 10u * 1024 * 1024); /* tens of MB */
	ASSERT(slow_params * 4 < 100u * 1024 * 1024);
	enum sl_demo_size v;
	ASSERT_EQ(sl_demo_size_parse("slow", &v), 0);
	ASSERT_EQ(v, SL_DEMO_SLOW);
	ASSERT_EQ(sl_demo_size_parse("medium", &v), SL_EINVAL);
}

static void test_write_error(void)
{
	int rc = sl_demo_model_write("/nonexistent-dir/x.gguf", SL_DEMO_TINY);
	ASSERT(rc < 0);
}

int main(void)
{
	RUN(test_tiny);
	RUN(test_slow);
	RUN(test_sizes_differ);
	RUN(test_write_error);
	return 0;
}

/*
 * test_affinity.c: prefix affinity's keys and table (affinity.h).
 */
#include "sluice/fleet/affinity.h"

#include "sluice/base/common.h"
#include "sluice/json/json_scan.h"
#include "test.h"

/* Text of `n` bytes, the same for the same seed. */
static char *text_of(size_t n, unsigned seed)
{
	char *t = sl_xmalloc(n + 1);
	for (size_t i = 0; i < n; i++)
		t[i] = (char)('a' + (i * 7 + seed * 13 + i / 5) % 26);
	t[n] = '\0';
	return t;
}

/* Blocks chain: a shared beginning gives the same leading hashes only. */
static void test_chain(void)
{
	struct sl_affinity_key a, b, c;
	char *t = text_of(3 * SL_AFFINITY_BLOCK + 10, 1);
	sl_affinity_key_text(&a, t, 3 * SL_AFFINITY_BLOCK + 10);
	ASSERT_EQ(a.n, 4); /* three whole blocks and a short one */
	/* The same first two blocks, then something else. */
	t[2 * SL_AFFINITY_BLOCK + 3] ^= 1;
	sl_affinity_key_text(&b, t, 3 * SL_AFFINITY_BLOCK + 10);
	ASSERT_EQ(b.n, 4);
	ASSERT(a.hash[0] == b.hash[0] && a.hash[1] == b.hash[1]);
	ASSERT(a.hash[2] != b.hash[2] && a.hash[3] != b.hash[3]);
	/* A change in the first block changes every hash after it. */
	t[0] ^= 1;
	sl_affinity_key_text(&c, t, 3 * SL_AFFINITY_BLOCK + 10);
	for (unsigned i = 0; i < c.n; i++)
		ASSERT(c.hash[i] != b.hash[i]);
	free(t);
	/* Nothing to hash, and the bound on blocks. */
	sl_affinity_key_text(&a, "", 0);
	ASSERT_EQ(a.n, 0);
	size_t big = (SL_AFFINITY_MAX_BLOCKS + 5) * SL_AFFINITY_BLOCK;
	t = text_of(big, 2);
	sl_affinity_key_text(&a, t, big);
	ASSERT_EQ(a.n, SL_AFFINITY_MAX_BLOCKS);
	free(t);
}

static void key_of_body(struct sl_affinity_key *k, const char *body)
{
	struct sl_jscan s = {.n = 0};
	ASSERT_EQ(sl_jscan_parse(&s, body, strlen(body), 1000), 0);
	sl_affinity_key_of(k, &s);
	sl_jscan_free(&s);
}

/* The key is the messages (or the prompt) as written, wherever it is. */
static void test_key_of_body(void)
{
	struct sl_affinity_key a, b;
	key_of_body(&a, "{\"model\":\"x\",\"messages\":[{\"role\":\"user\","
	                "\"content\":\"hi\"}],\"max_tokens\":3}");
	key_of_body(&b, "{\"messages\":[{\"role\":\"user\",\"content\":"
	                "\"hi\"}],\"temperature\":0}");
	ASSERT_EQ(a.n, 1);
	ASSERT(a.n == b.n && a.hash[0] == b.hash[0]);
	sl_affinity_key_text(
	    &b, "[{\"role\":\"user\",\"content\":\"hi\"}]",
	    strlen("[{\"role\":\"user\",\"content\":\"hi\"}]"));
	ASSERT(a.hash[0] == b.hash[0]);
	/* A prompt, string or not; messages win over a prompt. */
	key_of_body(&a, "{\"prompt\":\"once upon\",\"n_predict\":4}");
	sl_affinity_key_text(&b, "\"once upon\"", 11);
	ASSERT(a.n == 1 && a.hash[0] == b.hash[0]);
	key_of_body(&a, "{\"prompt\":[1,2,3]}");
	sl_affinity_key_text(&b, "[1,2,3]", 7);
	ASSERT(a.n == 1 && a.hash[0] == b.hash[0]);
	key_of_body(&a, "{\"prompt\":\"p\",\"messages\":[]}");
	sl_affinity_key_text(&b, "[]", 2);
	ASSERT(a.n == 1 && a.hash[0] == b.hash[0]);
	/* Nothing to go by. */
	key_of_body(&a, "{\"input\":\"x\"}");
	ASSERT_EQ(a.n, 0);
	key_of_body(&a, "[1]");
	ASSERT_EQ(a.n, 0);
}

/*
 * The longest known prefix decides; only candidates count, and a shorter
 * prefix of another candidate then decides.
 */
static void test_lookup(void)
{
	struct sl_affinity *t = sl_xmalloc(sizeof(*t));
	sl_affinity_init(t);
	size_t len = 4 * SL_AFFINITY_BLOCK;
	char *sys = text_of(len, 3);
	struct sl_affinity_key first, longer, other;
	sl_affinity_key_text(&first, sys, 2 * SL_AFFINITY_BLOCK);
	sl_affinity_key_text(&longer, sys, len);
	char *else_ = text_of(len, 4);
	sl_affinity_key_text(&other, else_, len);

	const uint32_t both[] = {7, 9}, only7[] = {7}, only9[] = {9};
	unsigned matched = 99;
	ASSERT_EQ(sl_affinity_lookup(t, &longer, both, 2, &matched), -1);
	ASSERT_EQ(matched, 0);

	sl_affinity_store(t, &first, 9);
	ASSERT_EQ(sl_affinity_lookup(t, &longer, both, 2, &matched), 1);
	ASSERT_EQ(matched, 2);
	ASSERT_EQ(sl_affinity_lookup(t, &longer, only7, 1, &matched), -1);
	ASSERT_EQ(sl_affinity_lookup(t, &other, both, 2, &matched), -1);

	/* Replica 7 now holds the whole of `longer`: it wins, by 4 blocks. */
	sl_affinity_store(t, &longer, 7);
	ASSERT_EQ(sl_affinity_lookup(t, &longer, both, 2, &matched), 0);
	ASSERT_EQ(matched, 4);
	/* Its first two blocks moved to 7 as well: 9 has nothing left. */
	ASSERT_EQ(sl_affinity_lookup(t, &first, only9, 1, &matched), -1);
	free(sys);
	free(else_);
	free(t);
}

/*
 * Bounded memory: a set holds SL_AFFINITY_WAYS entries, and a new one
 * replaces the least recently used; a lookup counts as a use.
 */
static void test_eviction(void)
{
	struct sl_affinity *t = sl_xmalloc(sizeof(*t));
	sl_affinity_init(t);
	/* Keys of one block each, all in set 5. */
	struct sl_affinity_key k[SL_AFFINITY_WAYS + 1];
	unsigned found = 0;
	for (unsigned seed = 0; found < SL_AFFINITY_WAYS + 1; seed++) {
		char word[32];
		int n = snprintf(word, sizeof(word), "prefix %u", seed);
		sl_affinity_key_text(&k[found], word, (size_t)n);
		if (k[found].hash[0] % SL_AFFINITY_SETS == 5)
			found++;
	}
	const uint32_t r[] = {1};
	unsigned matched;
	for (unsigned i = 0; i < SL_AFFINITY_WAYS; i++)
		sl_affinity_store(t, &k[i], 1);
	/* k[0] is used again: k[1] is now the least recently used. */
	ASSERT_EQ(sl_affinity_lookup(t, &k[0], r, 1, &matched), 0);
	sl_affinity_store(t, &k[SL_AFFINITY_WAYS], 1);
	ASSERT_EQ(sl_affinity_lookup(t, &k[1], r, 1, &matched), -1);
	for (unsigned i = 0; i <= SL_AFFINITY_WAYS; i++)
		if (i != 1)
			ASSERT_EQ(sl_affinity_lookup(t, &k[i], r, 1, &matched),
			          0);
	/* Storing a known hash again moves it, and takes no second entry. */
	sl_affinity_store(t, &k[0], 2);
	const uint32_t r2[] = {2};
	ASSERT_EQ(sl_affinity_lookup(t, &k[0], r2, 1, &matched), 0);
	ASSERT_EQ(sl_affinity_lookup(t, &k[2], r, 1, &matched), 0);
	ASSERT_EQ(sl_affinity_lookup(t, &k[3], r, 1, &matched), 0);
	free(t);
}

int main(void)
{
	test_chain();
	test_key_of_body();
	test_lookup();
	test_eviction();
	return 0;
}

/*
 * affinity.c: prefix affinity (see affinity.h): block hashes of a prompt's
 * leading bytes, and a set-associative table from hash to replica.
 */
#include "sluice/fleet/affinity.h"

#include <string.h>
#include <xxhash.h>

void sl_affinity_key_text(struct sl_affinity_key *k, const char *text,
                          size_t len)
{
	uint64_t h = 0;
	k->n = 0;
	for (size_t at = 0; at < len && k->n < SL_AFFINITY_MAX_BLOCKS;
	     at += SL_AFFINITY_BLOCK) {
		size_t n =
		    len - at < SL_AFFINITY_BLOCK ? len - at : SL_AFFINITY_BLOCK;
		/* Seeded with the previous block's hash: a chain. */
		h = XXH3_64bits_withSeed(text + at, n, h);
		k->hash[k->n++] = h;
	}
}

void sl_affinity_key_of(struct sl_affinity_key *k, const struct sl_jscan *s)
{
	k->n = 0;
	if (s->n < 1 || sl_jscan_type(s, 0) != JSMN_OBJECT)
		return;
	int v = sl_jscan_get(s, 0, "messages");
	if (v < 0)
		v = sl_jscan_get(s, 0, "prompt");
	if (v < 0)
		return;
	size_t start, end;
	sl_jscan_extent(s, v, &start, &end);
	sl_affinity_key_text(k, s->text + start, end - start);
}

const char *sl_affinity_result_name(enum sl_affinity_result r)
{
	static const char *const names[] = {"hit", "busy", "miss"};
	return r < SL_AFFINITY_RESULTS ? names[r] : "?";
}

void sl_affinity_init(struct sl_affinity *a)
{
	memset(a, 0, sizeof(*a));
}

static struct sl_affinity_entry *set_of(struct sl_affinity *a, uint64_t hash)
{
	/* The low bits chose nothing else: XXH3's bits are all good. */
	return a->set[hash % SL_AFFINITY_SETS];
}

int sl_affinity_lookup(struct sl_affinity *a, const struct sl_affinity_key *k,
                       const uint32_t *candidates, unsigned n,
                       unsigned *matched)
{
	/* Longest first: the first hit is the longest prefix known. */
	for (unsigned b = k->n; b-- > 0;) {
		struct sl_affinity_entry *set = set_of(a, k->hash[b]);
		for (unsigned w = 0; w < SL_AFFINITY_WAYS; w++) {
			struct sl_affinity_entry *e = &set[w];
			if (!e->live || e->hash != k->hash[b])
				continue;
			for (unsigned c = 0; c < n; c++)
				if (candidates[c] == e->replica) {
					e->used = ++a->clock;
					*matched = b + 1;
					return (int)c;
				}
		}
	}
	*matched = 0;
	return -1;
}

void sl_affinity_store(struct sl_affinity *a, const struct sl_affinity_key *k,
                       uint32_t replica)
{
	uint64_t now = ++a->clock;
	for (unsigned b = 0; b < k->n; b++) {
		struct sl_affinity_entry *set = set_of(a, k->hash[b]);
		/* The entry itself if known, else the least recently used. */
		struct sl_affinity_entry *victim = &set[0];
		for (unsigned w = 0; w < SL_AFFINITY_WAYS; w++) {
			struct sl_affinity_entry *e = &set[w];
			if (e->live && e->hash == k->hash[b]) {
				victim = e;
				break;
			}
			if (!e->live || e->used < victim->used)
				victim = e;
			if (!victim->live)
				break;
		}
		*victim = (struct sl_affinity_entry){.hash = k->hash[b],
		                                     .used = now,
		                                     .replica = replica,
		                                     .live = 1};
	}
}

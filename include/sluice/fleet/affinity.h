/*
 * affinity.h: prefix affinity, which replica of a model last served a
 * prompt that starts like this one.
 *
 * llama-server keeps each slot's prompt in its KV cache and reuses the
 * longest common prefix for the next request of that slot (cache_prompt,
 * slot similarity). Requests that share a long beginning (one system
 * prompt, one conversation's earlier turns) are cheaper on the replica that
 * already holds it. So the balancer remembers, for the leading bytes of
 * recent prompts, which replica served them, and prefers that replica
 * unless it is busier than the least busy one by more than a margin (the
 * caller's rule; see pool.c or app_models.c).
 *
 * Keys are taken from the request body as written, without parsing it into
 * objects: the `messages` array of a chat request, or the `prompt` of a
 * completion, cut into blocks of SL_AFFINITY_BLOCK bytes. Each block's
 * hash chains the one before it (XXH3 seeded with the previous hash), so
 * block i's hash stands for the whole prefix up to the end of block i, and
 * the longest shared prefix is the last block whose hash is known. Two
 * clients that write the same messages with different spacing do not
 * match: the same client, which is the case that matters (a conversation,
 * an application's fixed system prompt), writes them the same way.
 *
 * The table is a set-associative cache (as a CPU's): a hash picks a set of
 * SL_AFFINITY_WAYS entries, and a new entry replaces the set's least
 * recently used one. Lookups and inserts are O(1) and the memory is fixed;
 * what is forgotten is what was used least lately, approximately.
 *
 * Replicas are named by an id the caller chooses and never reuses (an
 * upstream's id): an entry for a replica that is gone names no candidate
 * and is ignored, then replaced in time.
 *
 * Glossary:
 *   block    SL_AFFINITY_BLOCK bytes of the key text (the last may be short)
 *   chain    the hashes of a key's blocks, in order
 *   matched  how many leading blocks of a chain the table knows, for the
 *            replica it names
 */
#ifndef SLUICE_AFFINITY_H
#define SLUICE_AFFINITY_H

#include "sluice/json/json_scan.h"

#include <stddef.h>
#include <stdint.h>

/*
 * Bytes per block: about 64 tokens of English. Finer blocks match more
 * exactly but cost more lookups; a prefix shorter than one block is not
 * worth a detour, as llama-server re-reads it in a few milliseconds.
 */
#define SL_AFFINITY_BLOCK 256
/*
 * Blocks hashed per request: the first 32 KiB of a prompt. A prompt that
 * shares more than that with another is still sent by its first 32 KiB,
 * which decide as well; hashing a megabyte per request would not.
 */
#define SL_AFFINITY_MAX_BLOCKS 128
/* Entries per set, and sets: 16384 blocks remembered, 4 MiB of prompts. */
#define SL_AFFINITY_WAYS 4
#define SL_AFFINITY_SETS 4096

/* How prefix affinity decided one pick, for the metrics. */
enum sl_affinity_result {
	SL_AFFINITY_HIT,  /* sent to the replica holding its prefix */
	SL_AFFINITY_BUSY, /* that replica was full, or beyond the margin */
	SL_AFFINITY_MISS, /* no replica holds a prefix of it */
	SL_AFFINITY_RESULTS,
};

const char *sl_affinity_result_name(enum sl_affinity_result r);

/* One request's key: the chain of its leading blocks. */
struct sl_affinity_key {
	uint64_t hash[SL_AFFINITY_MAX_BLOCKS];
	unsigned n; /* 0: nothing to match on */
};

/*
 * The key of a request body, from its scan (json_scan.h; the body's
 * tokens, which request validation has made already): the text of its
 * top-level "messages" member when it has one, else of "prompt", else none
 * (n = 0).
 */
void sl_affinity_key_of(struct sl_affinity_key *k, const struct sl_jscan *s);

/* The chain of `len` bytes of text (exposed for the tests). */
void sl_affinity_key_text(struct sl_affinity_key *k, const char *text,
                          size_t len);

struct sl_affinity_entry {
	uint64_t hash;
	uint64_t used; /* the table's clock when last looked up or stored */
	uint32_t replica;
	uint32_t live; /* 0: empty */
};

struct sl_affinity {
	struct sl_affinity_entry set[SL_AFFINITY_SETS][SL_AFFINITY_WAYS];
	uint64_t clock; /* counts lookups and stores, for LRU order */
};

/* An empty table (allocated by the caller: it is 512 KiB). */
void sl_affinity_init(struct sl_affinity *a);

/*
 * The replica that served the longest known prefix of `k`, with how many
 * blocks matched, and only among the `n` ids in `candidates` (an entry for
 * another replica is skipped, and a shorter prefix may then decide).
 * Returns the index into candidates, or -1 when none matched.
 */
int sl_affinity_lookup(struct sl_affinity *a, const struct sl_affinity_key *k,
                       const uint32_t *candidates, unsigned n,
                       unsigned *matched);

/* Remembers that `replica` now holds every prefix of `k`. */
void sl_affinity_store(struct sl_affinity *a, const struct sl_affinity_key *k,
                       uint32_t replica);

#endif

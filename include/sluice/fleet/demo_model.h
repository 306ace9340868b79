/*
 * demo_model.h: sluice's embedded demo model, written as a GGUF v3 file.
 *
 * The demo model is a small llama-architecture network with deterministic
 * pseudo-random weights, so that `sluice` runs out of the box and the tests
 * have a real llama-server to talk to without downloading anything. It
 * generates random text, never anything meaningful.
 *
 * Glossary:
 *   piece     a vocabulary entry's text; "\xe2\x96\x81" (U+2581) stands for a
 *             space, as in SentencePiece.
 *   printable a piece that decodes to printable ASCII; only these can ever be
 *             generated, because the output layer gives every other token
 *             (control, byte fallback, unknown) a strongly negative logit.
 *   tiny      a few hundred KB, thousands of tokens per second on two cores.
 *   slow      tens of MB and a few hundred tokens per second, for tests that
 *             need a generation to last seconds.
 */
#ifndef SLUICE_DEMO_MODEL_H
#define SLUICE_DEMO_MODEL_H

#include <stdint.h>

enum sl_demo_size { SL_DEMO_TINY, SL_DEMO_SLOW };

/* The shape of one variant. */
struct sl_demo_spec {
	const char *name;     /* "tiny" or "slow" */
	uint32_t n_embd;      /* embedding width */
	uint32_t n_layer;     /* transformer blocks */
	uint32_t n_head;      /* attention heads (and KV heads: no GQA) */
	uint32_t n_ff;        /* feed-forward width */
	uint32_t n_ctx_train; /* llama.context_length */
};

/*
 * The most tokens an answer of the demo model runs to (llama-server's
 * --n-predict, given to the llama-server of the demo alone): its text is
 * random, and a request without max_tokens would otherwise generate until
 * its context is full (thousands of tokens, many seconds).
 */
#define SL_DEMO_N_PREDICT 256

/* Metadata key/value pairs every demo model carries. */
#define SL_DEMO_KV_COUNT 20u
/* Tensors outside the blocks (token_embd, output_norm, output) and per block.
 */
#define SL_DEMO_GLOBAL_TENSORS 3u
#define SL_DEMO_TENSORS_PER_BLOCK 9u
/* GGUF's default data alignment, which the writer also states explicitly. */
#define SL_DEMO_ALIGNMENT 32u

/* The spec of a variant; never NULL for a valid enum value. */
const struct sl_demo_spec *sl_demo_spec(enum sl_demo_size size);

/* Parses "tiny" or "slow"; returns 0, or SL_EINVAL. */
int sl_demo_size_parse(const char *name, enum sl_demo_size *out);

/*
 * The whole words of the vocabulary (common English ones), n of them:
 * sluice-bench writes its synthetic prompts with them.
 */
const char *const *sl_demo_words(unsigned *n);

/* Number of vocabulary entries (the same for every variant). */
uint32_t sl_demo_vocab_size(void);

/*
 * Writes the model to `path`: first to a temporary file beside it, then
 * renamed into place, so that a reader never sees half a model. The bytes
 * depend only on `size`. Returns 0 or a negative errno-style code. Blocking
 * file I/O: call it before the event loop runs, never from a callback.
 */
int sl_demo_model_write(const char *path, enum sl_demo_size size);

#endif

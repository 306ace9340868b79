/* native_api.c: /generate and /infer onto /completion. */
#include "sluice/json/native_api.h"

#include "sluice/base/common.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

SL_PRINTF(3, 4)
static json_t *refuse(char *err, size_t size, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, size, fmt, ap);
	va_end(ap);
	return NULL;
}

/* Copies an optional number field within [lo, hi]; false if it is bad. */
static bool copy_number(json_t *in, json_t *out, const char *from,
                        const char *to, double lo, double hi, bool integer)
{
	json_t *v = json_object_get(in, from);
	if (!v)
		return true;
	if (integer ? !json_is_integer(v) : !json_is_number(v))
		return false;
	double d = json_number_value(v);
	if (!isfinite(d) || d < lo || d > hi)
		return false;
	json_object_set(out, to, v);
	return true;
}

json_t *sl_generate_body(json_t *in, unsigned cap, char *err, size_t size)
{
	if (!json_is_object(in))
		return refuse(err, size,
		              "the request body must be a JSON "
		              "object");
	json_t *prompt = json_object_get(in, "prompt");
	if (!json_is_string(prompt))
		return refuse(err, size,
		              "\"prompt\" is required and must be a "
		              "string");
	json_t *max = json_object_get(in, "max_tokens");
	json_int_t n = SL_GENERATE_DEFAULT_TOKENS;
	if (max) {
		if (!json_is_integer(max) || json_integer_value(max) < 1)
			return refuse(err, size,
			              "\"max_tokens\" must be a "
			              "positive integer");
		n = json_integer_value(max);
	}
	json_t *stream = json_object_get(in, "stream");
	if (stream && !json_is_boolean(stream))
		return refuse(err, size, "\"stream\" must be true or false");
	json_t *stop = json_object_get(in, "stop");
	if (stop) {
		size_t i;
		json_t *s;
		bool ok = json_is_array(stop);
		json_array_foreach(stop, i, s) ok = ok && json_is_string(s);
		if (!ok)
			return refuse(err, size,
			              "\"stop\" must be an array of "
			              "strings");
	}
	json_t *out =
	    json_pack("{s:O, s:I, s:b, s:b}", "prompt", prompt, "n_predict",
	              (json_int_t)SL_MIN(n, (json_int_t)cap), "stream", 1,
	              "cache_prompt", 1);
	if (stop)
		json_object_set(out, "stop", stop);
	static const struct {
		const char *name;
		double lo, hi;
		bool integer;
		const char *rule;
	} fields[] = {
	    {"temperature", 0, 100, false, "a number from 0"},
	    {"top_p", 0, 1, false, "a number from 0 to 1"},
	    {"top_k", 0, 1e9, true, "a non-negative integer"},
	    {"seed", -1, 4294967295.0, true, "an integer"},
	};
	for (size_t i = 0; i < SL_ARRAY_SIZE(fields); i++) {
		if (!copy_number(in, out, fields[i].name, fields[i].name,
		                 fields[i].lo, fields[i].hi,
		                 fields[i].integer)) {
			json_decref(out);
			return refuse(err, size, "\"%s\" must be %s",
			              fields[i].name, fields[i].rule);
		}
	}
	return out;
}

json_t *sl_infer_body(json_t *in, unsigned cap, char *err, size_t size)
{
	if (!json_is_object(in))
		return refuse(err, size,
		              "the request body must be a JSON "
		              "object");
	json_t *query = json_object_get(in, "query");
	if (!json_is_string(query))
		return refuse(err, size,
		              "\"query\" is required and must be a "
		              "string");
	return json_pack("{s:O, s:I, s:b, s:b}", "prompt", query, "n_predict",
	                 (json_int_t)SL_MIN(SL_INFER_TOKENS, cap), "stream", 1,
	                 "cache_prompt", 1);
}

const char *sl_finish_reason(json_t *native_final)
{
	const char *type =
	    json_string_value(json_object_get(native_final, "stop_type"));
	if (!type)
		return "unknown";
	if (strcmp(type, "limit") == 0)
		return "length";
	if (strcmp(type, "eos") == 0 || strcmp(type, "word") == 0)
		return "stop";
	return type;
}

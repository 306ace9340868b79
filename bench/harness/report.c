/*
 * report.c: the runs written out: a Markdown table on stdout (with the
 * tenants', the SLO classes', the refusals' and the scenarios' tables when
 * there are any), CSV, the JSON document and one JSON line per request.
 */
#include "harness.h"
#include "tools.h"

#include "sluice/base/common.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static const char *const columns[] = {
    "run",
    "requests",
    "concurrency",
    "success",
    "fail",
    "avg latency ms",
    "p50 latency ms",
    "p95 latency ms",
    "p99 latency ms",
    "req/s",
    "TTFT p50 ms",
    "TTFT p99 ms",
    "ITL p99 ms",
    "output tok/s",
    "avg batch size",
    "batches",
    "goodput req/s",
};
#define N_COLUMNS SL_ARRAY_SIZE(columns)

static double get(json_t *j, const char *key)
{
	json_t *v = json_object_get(j, key);
	return json_is_number(v) ? json_number_value(v) : NAN;
}

static void cell(char *buf, size_t size, double v, int decimals)
{
	if (isnan(v))
		snprintf(buf, size, "-");
	else
		snprintf(buf, size, "%.*f", decimals, v);
}

struct row {
	char cells[N_COLUMNS][72];
};

/*
 * A row of the table: the run's own figures (g is the run), or one
 * priority's (g is its group, which lacks the run-wide columns).
 */
static void make_row(const struct bench *b, const struct run *r, json_t *g,
                     const char *cls, struct row *row)
{
	const size_t w = sizeof(row->cells[0]);
	const char *label = b->o.label;
	snprintf(row->cells[0], w, "%s%s%s", label, *label && cls ? " " : "",
	         cls ? cls : (*label ? "" : "run"));
	snprintf(row->cells[1], w, "%.0f", get(g, "num_prompts"));
	if (r->rate > 0)
		snprintf(row->cells[2], w, "%g/s", r->rate);
	else
		snprintf(row->cells[2], w, "%u", r->concurrency);
	cell(row->cells[3], w, get(g, "completed"), 0);
	cell(row->cells[4], w, get(g, "failed"), 0);
	cell(row->cells[5], w, get(g, "mean_e2el_ms"), 1);
	cell(row->cells[6], w, get(g, "median_e2el_ms"), 1);
	cell(row->cells[7], w, get(g, "p95_e2el_ms"), 1);
	cell(row->cells[8], w, get(g, "p99_e2el_ms"), 1);
	cell(row->cells[9], w, get(g, "request_throughput"), 1);
	cell(row->cells[10], w, get(g, "median_ttft_ms"), 1);
	cell(row->cells[11], w, get(g, "p99_ttft_ms"), 1);
	cell(row->cells[12], w, cls ? NAN : get(g, "p99_itl_ms"), 2);
	cell(row->cells[13], w, get(g, "output_throughput"), 1);
	cell(row->cells[14], w, cls ? NAN : r->avg_batch_size, 2);
	cell(row->cells[15], w, cls ? NAN : r->batches, 0);
	cell(row->cells[16], w,
	     options_have_slo(&b->o) ? get(g, "request_goodput") : NAN, 1);
}

/* The rows of one run: all of it, then each priority sent ("none": no
 * X-Priority). */
static unsigned run_rows(const struct bench *b, const struct run *r,
                         struct row *rows)
{
	unsigned n = 0;
	make_row(b, r, r->doc, NULL, &rows[n++]);
	json_t *prios =
	    json_object_get(json_object_get(r->doc, "groups"), "priority");
	/* A row per priority, unless every request went without one. */
	size_t groups = json_object_size(prios);
	if (groups == 0 ||
	    (groups == 1 && json_object_get(prios, prio_names[PRIO_NONE])))
		return n;
	for (int c = PRIO_NONE; c < N_PRIOS; c++) {
		json_t *g = json_object_get(prios, prio_names[c]);
		if (g)
			make_row(b, r, g, prio_names[c], &rows[n++]);
	}
	return n;
}

static long long count_of(json_t *g, const char *key)
{
	return (long long)json_integer_value(json_object_get(g, key));
}

static void print_tenants(const struct bench *b, FILE *out)
{
	if (b->o.n_tenants == 0)
		return;
	fprintf(out, "\n| run | tenant | weight | requests | success | fail "
	             "| TTFT p99 ms | goodput req/s | service tokens | Jain |\n"
	             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
	for (unsigned k = 0; k < b->n_runs; k++) {
		json_t *doc = b->runs[k].doc;
		json_t *tenants =
		    json_object_get(json_object_get(doc, "groups"), "tenant");
		double jain =
		    get(json_object_get(doc, "fairness"), "jain_index");
		for (unsigned i = 0; i < b->o.n_tenants; i++) {
			json_t *g =
			    json_object_get(tenants, b->o.tenants[i].name);
			char ttft[32], good[32], j[32];
			cell(ttft, sizeof(ttft), get(g, "p99_ttft_ms"), 1);
			cell(good, sizeof(good), get(g, "request_goodput"), 2);
			cell(j, sizeof(j), i ? NAN : jain, 3);
			/* A tenant that sent nothing in a run has no group:
			 * its counts are 0. */
			fprintf(out,
			        "| %u | %s | %g | %lld | %lld | %lld | %s | %s "
			        "| %lld | %s |\n",
			        k, b->o.tenants[i].name, b->o.tenants[i].weight,
			        count_of(g, "num_prompts"),
			        count_of(g, "completed"), count_of(g, "failed"),
			        ttft, good, count_of(g, "service_tokens"), j);
		}
	}
}

static void print_scenarios(const struct bench *b, FILE *out)
{
	for (unsigned k = 0; k < b->n_runs; k++) {
		json_t *sc = json_object_get(b->runs[k].doc, "scenarios");
		const char *name;
		json_t *v;
		json_object_foreach(sc, name, v)
		{
			char *text = json_dumps(v, JSON_COMPACT);
			fprintf(out, "\nrun %u, %s: %s\n", k, name, text);
			free(text);
		}
	}
}

void report_markdown(const struct bench *b, FILE *out)
{
	for (size_t i = 0; i < N_COLUMNS; i++)
		fprintf(out, "| %s ", columns[i]);
	fprintf(out, "|\n");
	for (size_t i = 0; i < N_COLUMNS; i++)
		fprintf(out, "|%s", i ? "---:" : "---");
	fprintf(out, "|\n");
	for (unsigned k = 0; k < b->n_runs; k++) {
		struct row rows[N_PRIOS + 1];
		unsigned n = run_rows(b, &b->runs[k], rows);
		for (unsigned i = 0; i < n; i++) {
			for (size_t c = 0; c < N_COLUMNS; c++)
				fprintf(out, "| %s ", rows[i].cells[c]);
			fprintf(out, "|\n");
		}
	}
	print_tenants(b, out);
	json_t *runs = json_array();
	for (unsigned k = 0; k < b->n_runs; k++)
		json_array_append(runs, b->runs[k].doc);
	sb_slo_markdown(out, runs);
	json_decref(runs);
	print_scenarios(b, out);
}

/* The CSV's columns after the table's: run-wide figures of SLO-aware
 * admission (fractions, not %), "-" on a priority's row. */
static const char *const csv_extra[][2] = {
    {"shed", "shed"},
    {"admitted attainment", "admitted_attainment"},
    {"refusal p50 ms", "median_refusal_ms"},
    {"refusal p99 ms", "p99_refusal_ms"},
    {"predictor error p50", "median_predictor_error"},
    {"predictor error p90", "p90_predictor_error"},
};

static void csv_extras(FILE *f, json_t *doc)
{
	for (size_t c = 0; c < SL_ARRAY_SIZE(csv_extra); c++) {
		char v[32];
		cell(v, sizeof(v), doc ? get(doc, csv_extra[c][1]) : NAN,
		     c == 0 ? 0 : 4);
		fprintf(f, ",%s", v);
	}
}

void report_csv(const struct bench *b, const char *path)
{
	FILE *f = fopen(path, "w");
	if (!f)
		usage_error("--csv %s: %s", path, strerror(errno));
	fprintf(f, "class");
	for (size_t i = 0; i < N_COLUMNS; i++)
		fprintf(f, ",%s", columns[i]);
	for (size_t c = 0; c < SL_ARRAY_SIZE(csv_extra); c++)
		fprintf(f, ",%s", csv_extra[c][0]);
	fputc('\n', f);
	for (unsigned k = 0; k < b->n_runs; k++) {
		struct row rows[N_PRIOS + 1];
		unsigned n = run_rows(b, &b->runs[k], rows);
		for (unsigned i = 0; i < n; i++) {
			/* The class is the row name's last word, or "all". */
			const char *cls = "all";
			for (int c = PRIO_NONE; i && c < N_PRIOS; c++) {
				size_t len = strlen(rows[i].cells[0]);
				size_t cl = strlen(prio_names[c]);
				if (len >= cl &&
				    !strcmp(rows[i].cells[0] + len - cl,
				            prio_names[c]))
					cls = prio_names[c];
			}
			fprintf(f, "%s", cls);
			for (size_t c = 0; c < N_COLUMNS; c++)
				fprintf(f, ",%s", rows[i].cells[c]);
			csv_extras(f, i == 0 ? b->runs[k].doc : NULL);
			fputc('\n', f);
		}
	}
	fclose(f);
}

json_t *report_document(const struct bench *b, json_t *search)
{
	char date[32];
	time_t now = time(NULL);
	struct tm tm;
	gmtime_r(&now, &tm);
	strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", &tm);
	json_t *command = json_array();
	for (int i = 0; i < b->o.argc; i++)
		json_array_append_new(command, json_string(b->o.argv[i]));
	json_t *runs = json_array();
	for (unsigned k = 0; k < b->n_runs; k++)
		json_array_append(runs, b->runs[k].doc);
	json_t *doc = json_pack(
	    "{s:s, s:i, s:s, s:s, s:o, s:s, s:o}", "tool", "sluice-bench",
	    "version", 2, "label", b->o.label, "date", date, "command", command,
	    "endpoint", endpoint_names[b->o.endpoint], "runs", runs);
	if (b->o.num_runs > 1)
		json_object_set_new(doc, "repeats", results_repeats(b));
	if (search)
		json_object_set(doc, "search", search);
	return doc;
}

static json_t *ms_since(uint64_t from, uint64_t to)
{
	return to ? json_real((double)(to - from) / 1e6) : json_null();
}

static json_t *maybe(double v)
{
	return isnan(v) ? json_null() : json_real(v);
}

/* A request's SLO class, whether it met its SLOs, its refusal, and
 * sluice's prediction against its TTFT. */
static void put_slo_fields(const struct bench *b, const struct record *rec,
                           json_t *j)
{
	const struct options *o = &b->o;
	json_object_set_new(
	    j, "slo_class",
	    rec->slo_class >= 0
	        ? json_string(o->slo_classes[rec->slo_class].name)
	        : json_null());
	json_object_set_new(j, "slo_met",
	                    options_have_slo(o) && !rec->cancelled
	                        ? json_boolean(results_meets(b, rec))
	                        : json_null());
	bool refused = !rec->ok && (rec->status == 429 || rec->status == 503);
	json_object_set_new(j, "reason",
	                    rec->reason[0] ? json_string(rec->reason)
	                                   : json_null());
	json_object_set_new(j, "refused_ms",
	                    refused && rec->head_ns
	                        ? ms_since(rec->try_sent_ns, rec->head_ns)
	                        : json_null());
	json_object_set_new(j, "predicted_ms", maybe(rec->predicted_ms));
	json_object_set_new(j, "actual_ttft_ms",
	                    maybe(results_actual_ttft_ms(b, rec)));
	json_object_set_new(j, "predictor_error",
	                    maybe(fabs(results_relative_error(b, rec))));
}

static json_t *record_json(const struct bench *b, unsigned k, size_t i)
{
	const struct run *r = &b->runs[k];
	const struct record *rec = &r->recs[i];
	json_t *j = json_pack(
	    "{s:I, s:i, s:i, s:i, s:s?, s:s?, s:s, s:i, s:s?, s:o, s:o}", "id",
	    (json_int_t)i, "run", (int)k, "conv", (int)rec->conv, "turn",
	    (int)rec->turn, "tenant",
	    rec->tenant >= 0 ? b->o.tenants[rec->tenant].name : NULL, "model",
	    rec->model >= 0 ? b->o.models[rec->model] : NULL, "priority",
	    prio_names[rec->prio], "status", rec->status, "error", rec->error,
	    "intended_ms", ms_since(r->start_ns, rec->intended_ns), "sent_ms",
	    ms_since(r->start_ns, rec->sent_ns));
	json_object_set_new(j, "ttft_ms",
	                    rec->first_ns
	                        ? ms_since(rec->intended_ns, rec->first_ns)
	                        : json_null());
	json_object_set_new(j, "e2el_ms",
	                    rec->end_ns && !rec->cancelled
	                        ? ms_since(rec->intended_ns, rec->end_ns)
	                        : json_null());
	json_object_set_new(j, "tpot_ms", maybe(results_tpot_ms(rec)));
	json_object_set_new(j, "input_tokens", json_integer(rec->input_tokens));
	json_object_set_new(j, "output_tokens",
	                    json_integer(rec->output_tokens));
	json_object_set_new(j, "cached_tokens",
	                    json_integer(rec->cached_tokens));
	json_object_set_new(j, "queue_ms", maybe(rec->queue_ms));
	json_object_set_new(j, "upstream_ms", maybe(rec->upstream_ms));
	json_object_set_new(j, "server_ttft_ms", maybe(rec->server_ttft_ms));
	json_object_set_new(j, "retries", json_integer(rec->retries));
	/* Unique per request, in its body (but /infer's): what the server
	 * saw, request by request. */
	json_object_set_new(j, "seed", json_integer((json_int_t)rec->seed));
	json_object_set_new(j, "warmup", json_boolean(rec->warmup));
	json_object_set_new(j, "cancelled", json_boolean(rec->cancelled));
	if (rec->cancelled)
		json_object_set_new(j, "slot_freed",
		                    rec->slot_freed < 0
		                        ? json_null()
		                        : json_boolean(rec->slot_freed));
	json_object_set_new(j, "llama_prompt_ms", maybe(rec->llama_prompt_ms));
	json_object_set_new(j, "llama_predicted_n",
	                    maybe(rec->llama_predicted_n));
	put_slo_fields(b, rec, j);
	return j;
}

void report_jsonl(const struct bench *b, const char *path)
{
	FILE *f = fopen(path, "w");
	if (!f)
		usage_error("--jsonl %s: %s", path, strerror(errno));
	for (unsigned k = 0; k < b->n_runs; k++)
		for (size_t i = 0; i < b->runs[k].n_recs; i++) {
			json_t *j = record_json(b, k, i);
			json_dumpf(j, f, JSON_COMPACT);
			fputc('\n', f);
			json_decref(j);
		}
	fclose(f);
}

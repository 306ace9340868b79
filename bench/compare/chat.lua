-- wrk script for bench/compare.sh: POST /v1/chat/completions with a small
-- JSON body; COMPARE_MAX_TOKENS tokens (default 16), streamed when
-- COMPARE_STREAM is "on". At the end, one JSON line with the counts and the
-- latency percentiles in microseconds goes to the file COMPARE_WRK_OUT
-- names. A stream is one response to wrk: it reads it whole, chunk by chunk.
--
-- With COMPARE_PORTKEY_HOST set, each request also carries the headers that
-- make Portkey's gateway send it to that OpenAI-compatible server.

local tokens = tonumber(os.getenv("COMPARE_MAX_TOKENS") or "16")
local stream = os.getenv("COMPARE_STREAM") == "on"

wrk.method = "POST"
wrk.path = "/v1/chat/completions"
wrk.body = string.format('{"model":"mock","messages":[{"role":"user",' ..
	'"content":"Say hello to the benchmark"}],"max_tokens":%d,"stream":%s}',
	tokens, stream and "true" or "false")
wrk.headers["Content-Type"] = "application/json"

local portkey_host = os.getenv("COMPARE_PORTKEY_HOST")
if portkey_host and portkey_host ~= "" then
	wrk.headers["x-portkey-provider"] = "openai"
	wrk.headers["x-portkey-custom-host"] = portkey_host
end

function done(summary, latency, requests)
	local e = summary.errors
	local out = assert(io.open(assert(os.getenv("COMPARE_WRK_OUT")), "w"))
	out:write(string.format(
		'{"requests":%d,"duration_s":%.6f,"errors":%d,"status_errors":%d,' ..
		'"p50_us":%d,"p99_us":%d,"mean_us":%.1f,"max_us":%d}\n',
		summary.requests, summary.duration / 1e6,
		e.connect + e.read + e.write + e.timeout, e.status,
		latency:percentile(50), latency:percentile(99), latency.mean,
		latency.max))
	out:close()
end

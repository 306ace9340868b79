/*
 * probe.c: one blocking GET for `sluice --probe URL`; see probe.h.
 */
#include "sluice/net/probe.h"

#include "sluice/base/common.h"

#include <curl/curl.h>
#include <stdio.h>
#include <string.h>

/* The body does not matter, only the status: it is read and dropped. */
static size_t discard(char *data, size_t size, size_t n, void *ctx)
{
	(void)data;
	(void)ctx;
	return size * n;
}

int sl_probe(const char *url, char *err, size_t err_size)
{
	char curl_err[CURL_ERROR_SIZE] = "";
	CURL *e = curl_easy_init();
	if (!e) {
		snprintf(err, err_size, "libcurl failed to initialise");
		return SL_ECURL;
	}
	curl_easy_setopt(e, CURLOPT_URL, url);
#if LIBCURL_VERSION_NUM >= 0x075500 /* 7.85: the string form */
	curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
#else
	curl_easy_setopt(e, CURLOPT_PROTOCOLS,
	                 (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
	curl_easy_setopt(e, CURLOPT_TIMEOUT, (long)SL_PROBE_TIMEOUT_S);
	/* No signals: the timeout must not rely on SIGALRM around DNS. */
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	/*
	 * An http_proxy in the environment must not carry a probe of the
	 * gateway itself (usually 127.0.0.1) to some other host.
	 */
	curl_easy_setopt(e, CURLOPT_PROXY, "");
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, discard);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, curl_err);
	curl_easy_setopt(e, CURLOPT_USERAGENT, "sluice-probe");

	int rc = 0;
	CURLcode cc = curl_easy_perform(e);
	long status = 0;
	curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
	if (cc != CURLE_OK) {
		snprintf(err, err_size, "no answer: %s",
		         curl_err[0] ? curl_err : curl_easy_strerror(cc));
		rc = SL_ECURL;
	} else if (status < 200 || status > 299) {
		snprintf(err, err_size, "answered HTTP %ld, not 2xx", status);
		rc = SL_EUPSTREAM;
	}
	curl_easy_cleanup(e);
	return rc;
}

/* access.c: client keys, the admin key and CORS (see access.h). */
#include "sluice/access.h"

bool sl_access_allow(struct sl_app *app, struct sl_http_request *req,
                     enum sl_access level)
{
	(void)app;
	(void)req;
	(void)level;
	return true;
}

bool sl_access_preflight(struct sl_app *app, struct sl_http_request *req)
{
	(void)app;
	(void)req;
	return false;
}

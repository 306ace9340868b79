// Preloaded into Portkey's gateway by bench/compare.sh (node --require).
//
// Portkey routes a request by its headers: x-portkey-provider names the
// provider's wire format and x-portkey-custom-host the server that speaks
// it. wrk sends both (bench/compare/chat.lua), but sluice-bench, which
// drives the streamed runs, sends no headers of its own choosing, so a
// request that names no provider is given the ones that route it to the
// mock (COMPARE_PORTKEY_HOST) before Portkey sees it. The cost is a scan of
// the raw header list, small beside Portkey's own work per request.
'use strict';

const http = require('node:http');

const customHost = process.env.COMPARE_PORTKEY_HOST;
const emit = http.Server.prototype.emit;

function namesProvider(rawHeaders) {
	for (let i = 0; i < rawHeaders.length; i += 2) {
		if (rawHeaders[i].toLowerCase() === 'x-portkey-provider')
			return true;
	}
	return false;
}

http.Server.prototype.emit = function (event, req, ...rest) {
	// @hono/node-server builds its Request from rawHeaders.
	if (event === 'request' && customHost && !namesProvider(req.rawHeaders)) {
		req.rawHeaders.push('x-portkey-provider', 'openai',
			'x-portkey-custom-host', customHost);
	}
	return emit.call(this, event, req, ...rest);
};

// Decodes OTLP/HTTP protobuf exports (ExportTraceServiceRequest) with the
// message definitions that OpenTelemetry's @opentelemetry/otlp-transformer
// ships (protobufjs code generated from opentelemetry-proto), and prints
// each as one line of JSON: 64-bit integers as strings, enums as numbers,
// bytes (trace and span ids) as lowercase hex. tests/test_trace.py checks
// sluice's exports with it, so that they are read by an implementation
// other than sluice's own.
//
//     node tests/otlp/decode.js FILE...
"use strict";
const fs = require("fs");
const path = require("path");
const root = require(path.join(__dirname, "node_modules", "@opentelemetry",
  "otlp-transformer", "build", "src", "generated", "root.js"));

const Request = root.opentelemetry.proto.collector.trace.v1
  .ExportTraceServiceRequest;

function hexBytes(key, value) {
  if (value && value.type === "Buffer")
    return Buffer.from(value.data).toString("hex");
  return value;
}

for (const file of process.argv.slice(2)) {
  const message = Request.decode(fs.readFileSync(file));
  const doc = Request.toObject(message, {longs: String, enums: Number});
  console.log(JSON.stringify(doc, hexBytes));
}

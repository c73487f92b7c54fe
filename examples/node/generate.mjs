// Streams an answer from pdserve's router with @grpc/grpc-js, loading the .proto files as they are (no codegen).
//
//   node generate.mjs --router 127.0.0.1:50050 --prompt "What is the capital of France?" --chat --max-tokens 32
//
// Prints the text as it streams, then one JSON line on stderr summing up the final chunk (request id, finish and
// stop reasons, usage, timings). Options: --token T (authorization: Bearer T), --temperature X, --seed N.
import { parseArgs } from "node:util";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";

const PROTO_ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "protos");

function loadRouter(protoRoot) {
  const definition = protoLoader.loadSync("pdserve/v1/router.proto", {
    includeDirs: [protoRoot],
    keepCase: true, // field names exactly as in the .proto (finish_reason, token_ids)
    longs: String, // uint64 fields arrive as decimal strings, never as lossy floats
    defaults: true,
    oneofs: true,
  });
  return grpc.loadPackageDefinition(definition).pdserve.v1.Router;
}

function buildRequest(opts) {
  const sampling = { max_tokens: Number(opts["max-tokens"]) };
  if (opts.temperature !== undefined) sampling.temperature = Number(opts.temperature);
  if (opts.seed !== undefined) sampling.seed = String(opts.seed);
  const prompt = opts.chat
    ? { chat: { messages: [{ role: "user", content: opts.prompt }] } }
    : { text: opts.prompt };
  return { ...prompt, sampling };
}

function main() {
  const { values: opts } = parseArgs({
    options: {
      router: { type: "string", default: "127.0.0.1:50050" },
      prompt: { type: "string", default: "What is the capital of France?" },
      chat: { type: "boolean", default: false },
      "max-tokens": { type: "string", default: "64" },
      temperature: { type: "string" },
      seed: { type: "string" },
      token: { type: "string" },
      "proto-root": { type: "string", default: PROTO_ROOT },
    },
  });
  const Router = loadRouter(opts["proto-root"]);
  const client = new Router(opts.router, grpc.credentials.createInsecure());
  const metadata = new grpc.Metadata();
  if (opts.token) metadata.set("authorization", `Bearer ${opts.token}`);

  let text = "";
  let last = null;
  const call = client.Generate(buildRequest(opts), metadata);
  call.on("data", (chunk) => {
    text += chunk.text;
    process.stdout.write(chunk.text);
    last = chunk;
  });
  call.on("error", (err) => {
    console.error(`\nrouter error: ${grpc.status[err.code]}: ${err.details}`);
    process.exitCode = 1;
  });
  call.on("end", () => {
    process.stdout.write("\n");
    if (!last || !last.finish_reason) {
      console.error("the stream ended without a final chunk (finish_reason unset)");
      process.exitCode = 1;
      return;
    }
    const { request_id, finish_reason, stop_reason, usage, timings } = last;
    console.error(JSON.stringify({ request_id, finish_reason, stop_reason, usage, timings, text }));
  });
}

main();

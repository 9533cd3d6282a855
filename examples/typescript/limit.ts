// Calls the rate limiter's Limit with @connectrpc/connect over Connect JSON,
// and handles a denial: run `make run`, then
// `node_modules/.bin/tsx examples/typescript/limit.ts`.
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { RatelimitService } from "./gen/ratelimit/v1/ratelimit_pb.js";

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : fallback;
}

const url = arg("url", "http://127.0.0.1:7070");
const token = arg("token", process.env.UNKEY_TOKEN ?? "");
const identifier = arg("identifier", "example_ts");

const transport = createConnectTransport({
  baseUrl: url,
  httpVersion: "1.1",
  useBinaryFormat: false, // Connect JSON, as curl speaks it
  interceptors: [
    (next) => async (req) => {
      if (token) req.header.set("Authorization", `Bearer ${token}`);
      return next(req);
    },
  ],
});
const client = createClient(RatelimitService, transport);

for (let i = 1; i <= 3; i++) {
  try {
    // Two requests a minute; int64 fields are bigints.
    const res = await client.limit({ namespace: "examples", identifier, limit: 2n, duration: 60_000n });
    if (res.success) {
      console.log(`request ${i}: passed, ${res.remaining} left`);
    } else {
      console.log(`request ${i}: denied, retry in ${res.retryAfter} ms`);
    }
  } catch (e) {
    const err = ConnectError.from(e);
    console.error(`request ${i}: ${Code[err.code]}: ${err.rawMessage}`);
    process.exit(1);
  }
}

// Calls the server over https with a key of narrow permissions through
// Unkey's @unkey/api SDK, as an application given such a key would. Run by
// TestUnkeySDKWithKeyOverTLS with BASE_URL (https), LIMIT_KEY (may limit
// and read overrides in namespace sdk, nothing else) and
// NODE_EXTRA_CA_CERTS (the test's CA); exits non-zero at the first answer
// that is not right.
import { Unkey } from "@unkey/api";

const serverURL = process.env.BASE_URL;
const rootKey = process.env.LIMIT_KEY;

function check(cond, what, got) {
  if (!cond) {
    console.error(`FAIL: ${what}: ${JSON.stringify(got)}`);
    process.exit(1);
  }
  console.log(`ok: ${what}`);
}

check(serverURL.startsWith("https://"), "the base URL is https", serverURL);
const unkey = new Unkey({ serverURL, rootKey });

// 30-day windows, as every test against the real clock: a minute's would
// weigh the first call down once the minute turns between it and the last.
const first = await unkey.ratelimit.limit({ namespace: "sdk", identifier: "tls_user", limit: 2, duration: 2592000000 });
check(first.data.success === true && first.data.remaining === 1, "limit over https with the key", first.data);

async function refused(what, call, permission) {
  try {
    await call();
    check(false, `${what} is refused`, null);
  } catch (e) {
    const err = e.data$?.error;
    check(e.statusCode === 403 && err?.status === 403 && err?.title === "Forbidden" &&
      err?.type?.endsWith("insufficient_permissions") && err?.detail?.includes(permission) &&
      e.data$?.meta?.requestId?.length > 0, `${what}: 403 naming ${permission}`, e.data$ ?? String(e));
  }
}
await refused("setOverride", () => unkey.ratelimit.setOverride({ namespace: "sdk", identifier: "tls_user", limit: 1000000, duration: 60000 }),
  "ratelimit.sdk.set_override");
await refused("deleteOverride", () => unkey.ratelimit.deleteOverride({ namespace: "sdk", identifier: "tls_user" }),
  "ratelimit.sdk.delete_override");
await refused("limit in another namespace", () => unkey.ratelimit.limit({ namespace: "billing", identifier: "x", limit: 1, duration: 60000 }),
  "ratelimit.billing.limit");
await refused("multiLimit naming another namespace", () => unkey.ratelimit.multiLimit([
  { namespace: "sdk", identifier: "tls_user", limit: 2, duration: 2592000000 },
  { namespace: "billing", identifier: "x", limit: 1, duration: 60000 },
]), "ratelimit.billing.limit");

const after = await unkey.ratelimit.limit({ namespace: "sdk", identifier: "tls_user", limit: 2, duration: 2592000000, cost: 0 });
check(after.data.remaining === 1, "nothing refused was counted", after.data);
const page = await unkey.ratelimit.listOverrides({ namespace: "sdk" });
const listed = page.result ?? page;
check(Array.isArray(listed.data) && listed.data.length === 0, "listOverrides with read_override", page);
console.log("all key checks passed");

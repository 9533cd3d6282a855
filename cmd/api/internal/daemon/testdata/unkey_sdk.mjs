// Drives the API through Unkey's own SDKs, as a user switching from Unkey
// would: only the base URL changes. Run by TestUnkeySDKs with BASE_URL and
// ROOT_KEY set; exits non-zero at the first answer that is not right.
import { Ratelimit, Overrides } from "@unkey/ratelimit";
import { Unkey } from "@unkey/api";

const baseUrl = process.env.BASE_URL;
const rootKey = process.env.ROOT_KEY;

function check(cond, what, got) {
  if (!cond) {
    console.error(`FAIL: ${what}: ${JSON.stringify(got)}`);
    process.exit(1);
  }
  console.log(`ok: ${what}`);
}

// @unkey/ratelimit: limit until denied.
const rl = new Ratelimit({ baseUrl, rootKey, namespace: "sdk", limit: 3, duration: "60s" });
const seen = [];
for (let i = 0; i < 4; i++) {
  seen.push(await rl.limit("user_1"));
}
check(seen.map((r) => r.success).join() === "true,true,true,false", "3 of 3 admitted, the 4th denied", seen);
check(seen[2].remaining === 0 && seen[0].remaining === 2 && seen[0].limit === 3, "remaining counts down", seen);
check(typeof seen[0].reset === "number" && seen[0].reset > Date.now(), "reset is a future unix ms", seen[0]);

// Cost.
const costly = await rl.limit("user_2", { cost: 2 });
check(costly.success === true && costly.remaining === 1, "a cost of 2 of 3 leaves 1", costly);
const tooCostly = await rl.limit("user_2", { cost: 2 });
check(tooCostly.success === false && tooCostly.remaining === 1, "another cost of 2 is denied, 1 left", tooCostly);

// @unkey/api: multiLimit with a bare-array body, all or nothing.
const unkey = new Unkey({ serverURL: baseUrl, rootKey });
const multi = await unkey.ratelimit.multiLimit([
  { namespace: "sdk", identifier: "multi_a", limit: 5, duration: 60000 },
  { namespace: "sdk", identifier: "multi_b", limit: 1, duration: 60000, cost: 2 },
]);
check(multi.meta.requestId.length > 0, "meta.requestId", multi.meta);
check(multi.data.passed === false && multi.data.limits.length === 2, "multiLimit did not pass", multi.data);
check(multi.data.limits[0].passed === true && multi.data.limits[0].identifier === "multi_a" &&
  multi.data.limits[1].passed === false, "per-limit verdicts", multi.data.limits);
const after = await unkey.ratelimit.limit({ namespace: "sdk", identifier: "multi_a", limit: 5, duration: 60000, cost: 0 });
check(after.data.remaining === 5, "nothing of the failed batch was counted", after.data);

// Overrides through the Overrides class.
const ov = new Overrides({ baseUrl, rootKey });
const set = await ov.setOverride({ namespace: "sdk", identifier: "vip_*", limit: 100, duration: 60000 });
check(typeof set.data.overrideId === "string" && set.data.overrideId.length > 0, "setOverride returns an id", set.data);
const got = await ov.getOverride({ namespace: "sdk", identifier: "vip_*" });
check(got.data.overrideId === set.data.overrideId && got.data.limit === 100 && got.data.duration === 60000 &&
  got.data.identifier === "vip_*", "getOverride", got.data);
await ov.setOverride({ namespace: "sdk", identifier: "user_3", limit: 1, duration: 60000 });
const page1 = await ov.listOverrides({ namespace: "sdk", limit: 1 });
check(page1.data.length === 1 && page1.pagination.hasMore === true && page1.pagination.cursor, "first page of one", page1);
const page2 = await ov.listOverrides({ namespace: "sdk", limit: 1, cursor: page1.pagination.cursor });
check(page2.data.length === 1 && page2.pagination.hasMore === false && page2.data[0].identifier !== page1.data[0].identifier,
  "second and last page", page2);

// A limit call the override changes.
const vip = await rl.limit("vip_7");
check(vip.success === true && vip.limit === 100 && vip.remaining === 99 && vip.overrideId === set.data.overrideId,
  "the pattern override decides vip_7", vip);
const plain = await rl.limit("user_4");
check(plain.limit === 3 && plain.overrideId === undefined, "no override for user_4", plain);

await ov.deleteOverride({ namespace: "sdk", identifier: "vip_*" });
const gone = await rl.limit("vip_8");
check(gone.limit === 3 && gone.overrideId === undefined, "the deleted override no longer applies", gone);
try {
  await ov.getOverride({ namespace: "sdk", identifier: "vip_*" });
  check(false, "getOverride of a deleted override throws", null);
} catch (e) {
  check(e.statusCode === 404 && e.data$?.error?.type?.endsWith("ratelimit_override_not_found"), "404 not found", e.data$ ?? String(e));
}

// Errors in Unkey's shape.
try {
  await unkey.ratelimit.limit({ namespace: "sdk", identifier: "x", limit: 0, duration: 60000 });
  check(false, "a limit of 0 is refused", null);
} catch (e) {
  check(e.statusCode === 400 && e.data$?.error?.errors?.[0]?.location === "body.limit", "400 names the field", e.data$ ?? String(e));
}
const stranger = new Unkey({ serverURL: baseUrl, rootKey: "not-a-known-root-key-123" });
try {
  await stranger.ratelimit.limit({ namespace: "sdk", identifier: "x", limit: 1, duration: 60000 });
  check(false, "an unknown root key is refused", null);
} catch (e) {
  check(e.statusCode === 401, "401 for an unknown root key", e.data$ ?? String(e));
}
console.log("all SDK checks passed");

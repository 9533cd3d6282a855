// Opens the dashboard in headless Chromium and prints, as JSON, what the
// page shows once it has loaded: the namespaces, the selected namespace's
// totals and top identifiers, the overrides, the regions and Redis nodes.
// Usage: node dashboard.mjs <base url> <key or ""> [screenshot.png]
import { chromium } from "playwright-core";

const [base, key, shot] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 800 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => m.type() === "error" && errors.push(m.text()));
  await page.goto(base + "/dashboard");
  if (key) {
    // The first load, without the key, is refused: only what follows counts.
    await page.waitForFunction(() => document.body.dataset.loaded, null, { timeout: 15000 });
    errors.length = 0;
    await page.fill("#key", key);
    await page.evaluate(() => { delete document.body.dataset.loaded; });
    await page.click("button[type=submit]");
  }
  await page.waitForFunction(() => document.body.dataset.loaded, null, { timeout: 15000 });
  const rows = (sel) => page.$$eval(`${sel} tbody tr`, (trs) => trs.map((tr) => [...tr.children].map((td) => td.textContent)));
  const out = {
    error: await page.textContent("#error"),
    namespaces: await rows("#namespaces"),
    namespace: await page.textContent("#ns-name"),
    passed: await page.textContent("#total-passed"),
    denied: await page.textContent("#total-denied"),
    bars: await page.$$eval("#chart rect", (r) => r.length),
    top: await rows("#top"),
    overrides: await rows("#overrides"),
    regions: await rows("#regions"),
    redis: await rows("#redis"),
    errors,
  };
  if (shot) await page.screenshot({ path: shot, fullPage: true });
  console.log(JSON.stringify(out));
} finally {
  await browser.close();
}

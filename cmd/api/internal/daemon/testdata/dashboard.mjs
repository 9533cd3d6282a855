// Opens the dashboard in headless Chromium, once per visit, and prints as
// JSON a list of what the page shows once it has loaded: the notices, the
// namespaces, the selected namespace's totals, chart (its axes, its bars,
// and the values its tooltip and readout show when each of its last bars is
// pointed at, and when it is focused from the keyboard), top identifiers and
// overrides, the penalties, the regions, processes and Redis nodes, and the script's
// errors and the statuses of the calls the API refused.
//
// Usage: node dashboard.mjs '<json>', the json being
//   {"base": url, "timezone": "Asia/Kolkata", "locale": "en-GB",
//    "visits": [{"key": key or "", "shot": screenshot.png or ""}, …]}
import { chromium } from "playwright-core";

const spec = JSON.parse(process.argv[2]);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
});

// loaded waits for the page's next load to end.
async function loaded(page) {
  await page.waitForFunction(() => document.body.dataset.loaded, null, { timeout: 15000 });
}

// chartState reads the chart: its axes, its bars and what it says of the
// bucket pointed at.
function chartState(page) {
  return page.evaluate(() => {
    const el = document.getElementById("chart");
    const texts = (sel) => [...el.querySelectorAll(sel)].map((t) => t.textContent);
    return {
      title: document.getElementById("chart-title").textContent,
      yTitle: el.querySelector(".y-axis .axis-title")?.textContent ?? "",
      yLabels: texts(".y-axis .tick-label"),
      xTitle: el.querySelector(".x-axis .axis-title")?.textContent ?? "",
      xTicks: [...el.querySelectorAll(".x-axis .tick")].map((g) => ({ time: Number(g.dataset.time),
        text: g.querySelector(".tick-label .time")?.textContent ?? g.querySelector(".tick-label").textContent })),
      bars: [...el.querySelectorAll(".bar")].map((g) => Number(g.dataset.time)),
    };
  });
}

function focusState(page) {
  return page.evaluate(() => {
    const el = document.getElementById("chart");
    return {
      time: Number(el.querySelector(".focus")?.dataset.time ?? -1),
      tooltip: [...el.querySelectorAll(".tooltip text")].map((t) => t.textContent),
      readout: document.getElementById("chart-readout").textContent,
    };
  });
}

async function visit(page, key, shot) {
  // Script errors and policy violations; the calls the API refused (Chromium
  // logs each as an error too) apart.
  // The page reloads its data every 10 s, and a visit on a loaded machine
  // outlasts that: a call refused again is one refusal (by its URL), so
  // what is counted is which calls were refused, not how often.
  const errors = [], refused = [], refusedURLs = new Set();
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => {
    if (m.type() !== "error") return;
    if (!m.text().startsWith("Failed to load resource: the server responded with a status of 4")) {
      errors.push(m.text());
      return;
    }
    const call = m.location().url + " " + m.text();
    if (refusedURLs.has(call)) return;
    refusedURLs.add(call);
    refused.push(m.text());
  });
  await page.goto(spec.base + "/dashboard");
  await loaded(page);
  if (key) {
    // The first load, without the key, is refused (its two calls, where the
    // API needs a key): only what follows counts. Chromium reports a refusal
    // on its console after the page has seen it, late on a loaded machine,
    // so its two reports are awaited (for at most 5 s) before they are
    // dropped.
    for (const until = Date.now() + 5000; refused.length < 2 && Date.now() < until;) await page.waitForTimeout(50);
    errors.length = refused.length = 0;
    refusedURLs.clear();
    await page.fill("#key", key);
    await page.evaluate(() => { delete document.body.dataset.loaded; });
    await page.click("button[type=submit]");
    await loaded(page);
  }
  const rows = (sel) => page.$$eval(`${sel} tbody tr`, (trs) => trs.map((tr) => [...tr.children].map((td) => td.textContent)));
  const out = {
    error: await page.textContent("#error"),
    notices: await page.$$eval("#notices .notice", (ps) => ps.map((p) => p.textContent)),
    namespaces: await rows("#namespaces"),
    namespace: await page.textContent("#ns-name"),
    passed: await page.textContent("#total-passed"),
    denied: await page.textContent("#total-denied"),
    chart: await chartState(page),
    top: await rows("#top"),
    overrides: await rows("#overrides"),
    penalties: await rows("#penalties"),
    regions: await rows("#regions"),
    processes: await page.$$eval("#processes tbody tr", (trs) => trs.map((tr) => [tr.className, ...[...tr.children].map((td) => td.textContent)])),
    redis: await rows("#redis"),
  };
  // Point at each of the last five bars, in the middle of the plot's
  // height. Their boxes are read in one step: the page redraws the chart
  // when it refreshes, which detaches the bars a handle would hold (a
  // handle's boundingBox is then null).
  out.hovers = [];
  const bars = await page.$$eval("#chart .bar", (bs) => bs.map((b) => b.getBoundingClientRect().toJSON()));
  const plot = await page.$eval("#chart", (el) => el.getBoundingClientRect().toJSON());
  for (const box of bars.slice(-5)) {
    await page.mouse.move(box.x + box.width / 2, plot.y + plot.height / 2);
    out.hovers.push(await focusState(page));
  }
  // Leave the chart, then reach it from the keyboard: focus shows the last
  // bar with decisions, ← the bucket before it.
  await page.mouse.move(0, 0);
  out.left = await focusState(page);
  await page.focus("#chart");
  out.focused = await focusState(page);
  await page.keyboard.press("ArrowLeft");
  out.arrowLeft = await focusState(page);
  await page.evaluate(() => document.activeElement.blur());
  if (shot) {
    // The README's picture: a bar two thirds along pointed at.
    if (bars.length) {
      const box = bars[Math.floor((bars.length * 2) / 3)];
      await page.mouse.move(box.x + box.width / 2, plot.y + plot.height / 2);
    }
    await page.screenshot({ path: shot, fullPage: true });
  }
  out.errors = errors;
  out.refused = refused.map((s) => s.replace(/^.* status of (\d+).*$/, "$1"));
  return out;
}

try {
  const views = [];
  for (const v of spec.visits) {
    // A context each: a visit starts with no key in the tab's storage.
    const context = await browser.newContext({ viewport: { width: 1400, height: 800 }, timezoneId: spec.timezone,
      locale: spec.locale });
    try {
      views.push(await visit(await context.newPage(), v.key, v.shot));
    } finally {
      await context.close();
    }
  }
  console.log(JSON.stringify(views));
} finally {
  await browser.close();
}

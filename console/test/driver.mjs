// driver.mjs — drives a browser for the console's Go tests (server/cmd/bap/console_test.go) with
// playwright-core on the system Chromium (no browser download): one JSON command per stdin line,
// one JSON answer per stdout line ({"ok":true,...} or {"ok":false,"error":...}). The Go test
// decides what to do and asserts on what the site and the database recorded; this only clicks.
//
//   node driver.mjs CHROMIUM_PATH
//
// Commands: goto {url} · wait {loc, state?, timeout?} · click {loc} · fill {loc, value} ·
// text {loc} · count {loc} · cells {loc} (each matched row's cell texts) · attr {loc, name} ·
// select {loc, label} · axe {} · shot {path, fullPage?, within?: [css]} · cookies {} · logs {} · url {} · close {}.
// A loc is {css?, role?, name?, exact?, within?: css, hasText?}.
import { createInterface } from "node:readline";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { chromium } from "playwright-core";

const require = createRequire(import.meta.url);
const axeSource = readFileSync(require.resolve("axe-core/axe.min.js"), "utf8");
const executablePath = process.argv[2];
const args = ["--disable-dev-shm-usage", "--no-first-run"];
if (process.getuid && process.getuid() === 0) args.push("--no-sandbox"); // Chromium refuses root with its sandbox
const browser = await chromium.launch({ executablePath, headless: true, args });
const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
const page = await context.newPage();
const logs = [];
page.on("console", (m) => logs.push(`${m.type()}: ${m.text()}`));
page.on("pageerror", (e) => logs.push(`pageerror: ${e.message}`));

function locate(loc) {
  let root = loc.within ? page.locator(loc.within) : page;
  let l;
  if (loc.role) l = root.getByRole(loc.role, loc.name !== undefined ? { name: loc.name, exact: loc.exact ?? true } : {});
  else l = root.locator(loc.css);
  if (loc.hasText) l = l.filter({ hasText: loc.hasText });
  return l;
}

async function run(cmd) {
  const timeout = cmd.timeout ?? 10_000;
  switch (cmd.op) {
    case "goto":
      await page.goto(cmd.url, { waitUntil: "load", timeout });
      return { url: page.url() };
    case "wait":
      await locate(cmd.loc).first().waitFor({ state: cmd.state ?? "visible", timeout });
      return {};
    case "click":
      await locate(cmd.loc).first().click({ timeout });
      return {};
    case "fill":
      await locate(cmd.loc).first().fill(cmd.value, { timeout });
      return {};
    case "select":
      await locate(cmd.loc).first().selectOption({ label: cmd.label }, { timeout });
      return {};
    case "text":
      return { text: (await locate(cmd.loc).first().textContent({ timeout })) ?? "" };
    case "count":
      return { count: await locate(cmd.loc).count() };
    case "cells":
      return { rows: await locate(cmd.loc).evaluateAll((trs) => trs.map((tr) => Array.from(tr.children, (td) => td.textContent ?? ""))) };
    case "attr":
      return { value: await locate(cmd.loc).first().getAttribute(cmd.name, { timeout }) };
    case "axe": {
      await page.addScriptTag({ content: axeSource }).catch(() => {});
      // The console's CSP refuses inline script: axe runs in the page through the protocol instead.
      const result = await page.evaluate(async (src) => {
        if (!window.axe) (0, eval)(src);
        const r = await window.axe.run(document, { resultTypes: ["violations"] });
        return r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.map((n) => n.target.join(" ")).slice(0, 5) }));
      }, axeSource);
      return { violations: result };
    }
    case "shot": {
      const opts = { path: cmd.path, fullPage: cmd.fullPage ?? false };
      if (cmd.within?.length) {
        // The smallest part of the page holding every element named (page coordinates, a margin).
        const rects = await page.evaluate((sels) => sels.map((sel) => {
          const r = document.querySelector(sel)?.getBoundingClientRect();
          if (!r) throw new Error(`no element ${sel}`);
          return [r.left + scrollX, r.top + scrollY, r.right + scrollX, r.bottom + scrollY];
        }), cmd.within);
        const m = 16;
        const x = Math.max(0, Math.min(...rects.map((r) => r[0])) - m), y = Math.max(0, Math.min(...rects.map((r) => r[1])) - m);
        opts.clip = { x, y, width: Math.max(...rects.map((r) => r[2])) + m - x, height: Math.max(...rects.map((r) => r[3])) + m - y };
        opts.fullPage = true;
      }
      await page.screenshot(opts);
      return {};
    }
    case "cookies":
      return { cookies: await context.cookies() };
    case "logs":
      return { logs };
    case "url":
      return { url: page.url() };
    case "close":
      await browser.close();
      return {};
    default:
      throw new Error(`unknown op ${cmd.op}`);
  }
}

const rl = createInterface({ input: process.stdin });
process.stdout.write(JSON.stringify({ ok: true, ready: true, version: browser.version() }) + "\n");
for await (const line of rl) {
  if (!line.trim()) continue;
  let cmd;
  try {
    cmd = JSON.parse(line);
    const res = await run(cmd);
    process.stdout.write(JSON.stringify({ ok: true, ...res }) + "\n");
    if (cmd.op === "close") break;
  } catch (e) {
    process.stdout.write(JSON.stringify({ ok: false, error: String(e && e.message ? e.message : e) }) + "\n");
  }
}
await browser.close().catch(() => {});
process.exit(0);

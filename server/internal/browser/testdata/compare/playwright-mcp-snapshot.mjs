// Measures Playwright MCP's browser_snapshot on a page, for comparison with
// BenchmarkObserveBig (see bench_test.go). Not part of the build or the tests.
//
//   mkdir /tmp/pwmcp && cd /tmp/pwmcp && npm install @playwright/mcp
//   (cd server/internal/browser/testdata && python3 -m http.server 18123 --bind 127.0.0.1 &)
//   cd /tmp/pwmcp && node <repo>/server/internal/browser/testdata/compare/playwright-mcp-snapshot.mjs \
//       http://127.0.0.1:18123/big.html 10
//
// It starts @playwright/mcp (stdio) on the Debian Chromium, navigates, then
// calls browser_snapshot n times; it prints the p50 time and the bytes of the
// snapshot text.
// Drives @playwright/mcp over stdio: navigate to a page, then time
// browser_snapshot N times and report time and bytes of the snapshot text.
import { spawn } from 'node:child_process';
const url = process.argv[2];
const n = parseInt(process.argv[3] || '10', 10);
const child = spawn('node', [process.env.PWMCP_CLI || 'node_modules/@playwright/mcp/cli.js', '--headless', '--isolated',
  '--executable-path', '/usr/bin/chromium', '--browser', 'chromium', '--no-sandbox'], { stdio: ['pipe', 'pipe', 'inherit'] });
let buf = '';
const waiters = new Map();
child.stdout.on('data', (d) => {
  buf += d;
  let i;
  while ((i = buf.indexOf('\n')) >= 0) {
    const line = buf.slice(0, i); buf = buf.slice(i + 1);
    if (!line.trim()) continue;
    const msg = JSON.parse(line);
    if (msg.id && waiters.has(msg.id)) { waiters.get(msg.id)(msg); waiters.delete(msg.id); }
  }
});
let id = 0;
const rpc = (method, params) => new Promise((res) => { const i = ++id; waiters.set(i, res); child.stdin.write(JSON.stringify({ jsonrpc: '2.0', id: i, method, params }) + '\n'); });
const note = (method, params) => child.stdin.write(JSON.stringify({ jsonrpc: '2.0', method, params }) + '\n');
const textOf = (r) => (r.result && r.result.content || []).map((c) => c.text || '').join('');
(async () => {
  await rpc('initialize', { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'bench', version: '0' } });
  note('notifications/initialized', {});
  let t0 = performance.now();
  const nav = await rpc('tools/call', { name: 'browser_navigate', arguments: { url } });
  const navMs = performance.now() - t0;
  const times = []; let bytes = 0; let text = '';
  for (let k = 0; k < n; k++) {
    t0 = performance.now();
    const r = await rpc('tools/call', { name: 'browser_snapshot', arguments: {} });
    times.push(performance.now() - t0);
    text = textOf(r);
    bytes = Buffer.byteLength(text);
  }
  times.sort((a, b) => a - b);
  const refs = (text.match(/\[ref=/g) || []).length;
  console.log(JSON.stringify({ navigate_ms: +navMs.toFixed(1), navigate_bytes: Buffer.byteLength(textOf(nav)), snapshot_p50_ms: +times[Math.floor(times.length / 2)].toFixed(1), snapshot_min_ms: +times[0].toFixed(1), snapshot_bytes: bytes, refs }));
  
  child.kill();
  process.exit(0);
})();

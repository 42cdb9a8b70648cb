// The governed browser workflow through the official TypeScript MCP client
// (@modelcontextprotocol/client 2.x, pinned in tools/package.json), pinned to revision 2026-07-28:
// list the tools, create a task, open a browser session, navigate, observe, fill, click, close.
// Run by server/cmd/bap/mcp_test.go; inputs come from the environment. Prints one JSON line per
// tool call ({"tool", "result"}) and a last line {"summary": …}.
import { pathToFileURL } from 'node:url';

const { Client, StreamableHTTPClientTransport } = await import(pathToFileURL(process.env.MCP_CLIENT).href);
const env = (k) => {
  if (!process.env[k]) throw new Error(`missing ${k}`);
  return process.env[k];
};
const site = env('SITE_URL');
const run = `${Date.now()}`;
let n = 0;
const key = () => `ts-${run}-${++n}`;

const client = new Client({ name: 'bap-ts-e2e', version: '1.0.0' }, { versionNegotiation: { mode: { pin: '2026-07-28' } } });
await client.connect(new StreamableHTTPClientTransport(new URL(env('MCP_URL'))));
const summary = { era: client.getProtocolEra(), version: client.getNegotiatedProtocolVersion() };

const tools = [];
let cursor;
do {
  const page = await client.listTools(cursor ? { cursor } : {});
  tools.push(...page.tools.map((t) => t.name));
  cursor = page.nextCursor;
} while (cursor);
summary.tools = tools.length;

async function call(tool, args) {
  const result = await client.callTool({ name: tool, arguments: args });
  console.log(JSON.stringify({ tool, result }));
  return result;
}
const sc = (r) => r.structuredContent ?? {};

function find(nodes, pred) {
  for (const node of nodes ?? []) {
    if (pred(node)) return node;
    const inner = find(node.children, pred);
    if (inner) return inner;
  }
  return undefined;
}

const created = await call('create_task', {
  goal: 'Order as Ada',
  policy: { allowed_origins: [new URL(site).origin] },
  idempotency_key: key(),
});
const taskId = sc(created).task?.task_id;
const session = await call('create_browser_session', { task_id: taskId, idempotency_key: key() });
if (session.isError) {
  summary.outcome = sc(session).code ?? 'error';
} else {
  const sessionId = sc(session).session.session_id;
  const nav = await call('navigate', { session_id: sessionId, url: `${site}/`, idempotency_key: key() });
  if (nav.isError) throw new Error(`navigate: ${JSON.stringify(sc(nav))}`);
  const page = sc(await call('observe', { session_id: sessionId }));
  const box = find(page.nodes, (x) => x.role === 'textbox' && /name/i.test(x.name ?? ''));
  const button = find(page.nodes, (x) => x.role === 'button' && /order/i.test(x.name ?? ''));
  if (!box || !button) throw new Error(`observe found no textbox/button: ${JSON.stringify(page)}`);
  const fill = await call('act', { session_id: sessionId, action: 'fill', node_id: box.node_id, value: 'Ada', idempotency_key: key() });
  if (fill.isError) throw new Error(`fill: ${JSON.stringify(sc(fill))}`);
  const click = await call('act', { session_id: sessionId, action: 'click', node_id: button.node_id, idempotency_key: key() });
  if (click.isError) throw new Error(`click: ${JSON.stringify(sc(click))}`);
  summary.navigated = sc(click).navigated;
  const after = sc(await call('observe', { session_id: sessionId }));
  summary.url = after.url;
  summary.text = JSON.stringify(sc(await call('extract', { session_id: sessionId, kind: 'text' })).data ?? '');
  const closed = await call('close_task', { task_id: taskId, idempotency_key: key() });
  summary.state = sc(closed).task?.state;
  summary.outcome = 'ok';
}
console.log(JSON.stringify({ summary }));
await client.close();

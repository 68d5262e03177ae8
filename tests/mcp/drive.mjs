// Drives a Cubicle agent's real desktop through /mcp with the official TypeScript SDK client:
// screenshot → open a terminal → click → type a command → screenshot changed → shell shows that
// the typed command ran. Usage: CUBICLE_MCP_URL=http://127.0.0.1:PORT/mcp CUBICLE_TOKEN=cbt_…
// CUBICLE_AGENT=Ada node drive.mjs. Prints one JSON line; exits 1 on any failure.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const url = process.env.CUBICLE_MCP_URL;
const token = process.env.CUBICLE_TOKEN;
const agent = process.env.CUBICLE_AGENT;
const marker = `ts-sdk-${Date.now()}`;

function fail(msg) {
  console.log(JSON.stringify({ ok: false, error: msg }));
  process.exit(1);
}

const text = (r) => r.content.filter((c) => c.type === 'text').map((c) => c.text).join('\n');
const image = (r) => r.content.find((c) => c.type === 'image');

const client = new Client({ name: 'cubicle-ts-sdk-test', version: '1.0.0' });
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
await client.connect(transport);
const call = async (name, args) => {
  const r = await client.callTool({ name, arguments: { agent, ...args } }, undefined, { timeout: 300000 });
  if (r.isError) fail(`${name}: ${text(r)}`);
  return r;
};
const { tools } = await client.listTools();
for (const want of ['list_computers', 'computer_screenshot', 'computer_click', 'computer_type', 'computer_shell']) {
  if (!tools.some((t) => t.name === want)) fail(`tool ${want} is not listed`);
}
const before = image(await call('computer_screenshot', {}));
if (!before || before.mimeType !== 'image/jpeg' && before.mimeType !== 'image/png') fail('no screenshot image');
await call('computer_key', { keys: 'ctrl+alt+t' });
await new Promise((r) => setTimeout(r, 3000));
await call('computer_click', { x: 640, y: 400 });
await call('computer_type', { text: `echo ${marker} > /tmp/ts-typed.txt\n` });
const after = image(await call('computer_screenshot', {}));
if (!after || after.data === before.data) fail('the screen did not change');
let out = '';
for (let i = 0; i < 20 && !out.includes(marker); i++) {
  out = text(await call('computer_shell', { command: 'cat /tmp/ts-typed.txt' }));
  if (!out.includes(marker)) await new Promise((r) => setTimeout(r, 500));
}
if (!out.includes(marker)) fail(`the typed command did not run: ${out}`);
await client.close();
console.log(JSON.stringify({ ok: true, tools: tools.length, marker }));

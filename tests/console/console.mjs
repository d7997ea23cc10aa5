// The browser half of tests/console.rs: Debian's chromium, headless, driven by
// playwright-core, against `warden console` (CONSOLE_URL) while MCP requests on
// the 2025-11-25 protocol (no elicitation: the person answers in the inbox) go
// to `warden serve --http` (MCP_URL). Exits non-zero on the first failed step.
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';

const require = createRequire(path.join(process.cwd(), 'node_modules') + '/');
const { chromium } = require('playwright-core');
const env = (k) => { if (!process.env[k]) throw new Error(k + ' is not set'); return process.env[k]; };
const [CONSOLE_URL, MCP_URL, MCP_TOKEN, WS, SHOTS] = ['CONSOLE_URL', 'MCP_URL', 'MCP_TOKEN', 'WS', 'SHOTS'].map(env);
const T = 30000;

function step(name) { console.log('== ' + name); }
function check(ok, what) { if (!ok) throw new Error('check failed: ' + what); }

let nextId = 1;
// One JSON-RPC request, as a 2025-11-25 client without elicitation sends it.
async function mcp(method, params) {
  const id = nextId++;
  const r = await fetch(MCP_URL, {
    method: 'POST',
    headers: {
      Authorization: 'Bearer ' + MCP_TOKEN, 'Content-Type': 'application/json',
      Accept: 'application/json, text/event-stream', 'MCP-Protocol-Version': '2025-11-25',
    },
    body: JSON.stringify({ jsonrpc: '2.0', id, method, params }),
  });
  const text = await r.text();
  if (!r.ok) throw new Error(method + ': HTTP ' + r.status + ': ' + text);
  if (text.trimStart().startsWith('{')) return JSON.parse(text);
  for (const line of text.split('\n')) {
    if (!line.startsWith('data:')) continue;
    const v = JSON.parse(line.slice(5));
    if (v.id === id) return v;
  }
  throw new Error(method + ': no answer in ' + text);
}
const call = (name, args) => mcp('tools/call', { name, arguments: args });
const resultText = (r) => (r.result?.content || []).map((c) => c.text || '').join('') || JSON.stringify(r);

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: process.getuid() === 0 ? ['--no-sandbox'] : [],
});
const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
page.setDefaultTimeout(T);
page.on('console', (m) => console.log('page: ' + m.text()));
const shot = (name) => page.screenshot({ path: path.join(SHOTS, 'console-' + name + '.png'), fullPage: true });

try {
  step('without the token the page gets nothing');
  const bare = await browser.newPage();
  await bare.goto(CONSOLE_URL.replace(/#.*$/, ''));
  await bare.waitForSelector('#conn:text-matches("^no token")');
  const refused = await bare.evaluate(async () => (await fetch('/api/inbox')).status);
  check(refused === 401, 'the API without the token: ' + refused);
  await bare.close();

  step('the page opens with the token from the fragment and follows the feed');
  await page.goto(CONSOLE_URL);
  await page.waitForSelector('#conn.on');
  check(!page.url().includes('token='), 'the token left the address bar');

  step('a call started by an MCP client appears live');
  const r0 = await call('read_file', { path: 'a.txt' });
  check(!r0.result?.isError, 'read_file: ' + resultText(r0));
  await page.waitForSelector('#calls-body tr[data-status="success"]:has(td.tool:text-is("read_file"))');
  // A slower call shows while it runs (its call_start event), then ends (its record).
  const slow = call('sh', { command: 'sleep 2; echo slept' });
  await page.waitForSelector('#calls-body tr[data-status="running"]:has(td.tool:text-is("sh"))');
  await shot('live');
  const r5 = await slow;
  check(!r5.result?.isError && resultText(r5).includes('slept'), 'sh: ' + resultText(r5));
  await page.waitForSelector('#calls-body tr[data-status="success"]:has(td.tool:text-is("sh"))');

  step('a job is followed and cancelled from the page');
  const r3 = await call('bg', { command: 'i=0; while :; do echo tick $i; i=$((i+1)); sleep 0.2; done' });
  check(!r3.result?.isError, 'the job started: ' + resultText(r3));
  const job = page.locator('#jobs-body tr[data-status="running"]').first();
  await job.waitFor();
  await job.getByRole('button', { name: 'Follow output' }).click();
  await page.waitForFunction(() => document.getElementById('job-output').textContent.includes('tick 3'));
  await shot('jobs');
  await page.locator('#jobs-body tr[data-status="running"]').first().getByRole('button', { name: 'Cancel' }).click();
  await page.waitForSelector('#jobs-body tr[data-status="cancelled"]');
  await page.waitForSelector('#calls-body tr[data-status="cancelled"]:has(td.tool:text-is("bg"))');

  step('a changed server definition is refused, shown as a diff and accepted');
  const r4 = await call('notes__note', { text: 'hi' });
  check(r4.result?.isError || r4.error, 'the changed definition is refused: ' + JSON.stringify(r4));
  await page.getByRole('button', { name: 'Check now' }).click();
  const owner = page.locator('#defs-list .card[data-owner="server notes"]');
  await owner.waitFor();
  const diff = await owner.textContent();
  check(diff.includes('- Keep a short note') && diff.includes('+ Keep a short note, at most 80 characters'), diff);
  await shot('definitions');
  await owner.getByRole('button', { name: /^Accept/ }).click();
  await owner.locator('.msg:text-matches("^accepted")').waitFor();
  await page.waitForSelector('#defs-status:text-matches("^Every definition matches")');

  step('a pending approval is approved in the page and the call completes');
  const approved = call('write_file', { path: 'approved.txt', content: 'written after approval' });
  const card = page.locator('#approvals-list .card').first();
  await card.waitFor();
  check((await card.textContent()).includes('write_file'), 'the card names the tool');
  await shot('approval');
  await card.getByRole('button', { name: 'Approve', exact: true }).click();
  const r1 = await approved;
  check(!r1.result?.isError, 'the approved write: ' + resultText(r1));
  check(fs.readFileSync(path.join(WS, 'approved.txt'), 'utf8') === 'written after approval', 'the file is written');
  await page.waitForSelector('#approvals-list .card', { state: 'detached' });
  await page.waitForSelector('#calls-body tr[data-status="success"]:has(td.tool:text-is("write_file"))');

  step('the TypeScript SDK (2025-11-25, cannot be asked over HTTP) writes a file once approved in the page');
  const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
  const { StreamableHTTPClientTransport } = require('@modelcontextprotocol/sdk/client/streamableHttp.js');
  const transport = new StreamableHTTPClientTransport(new URL(MCP_URL), {
    requestInit: { headers: { Authorization: 'Bearer ' + MCP_TOKEN } },
  });
  const sdk = new Client({ name: 'console-test', version: '1.0.0' }, { capabilities: {} });
  await sdk.connect(transport);
  const viaSdk = sdk.callTool({ name: 'write_file', arguments: { path: 'sdk.txt', content: 'written by the TypeScript SDK' } },
    undefined, { timeout: 60000 });
  const card3 = page.locator('#approvals-list .card').first();
  await card3.waitFor();
  check((await card3.textContent()).includes('sdk.txt'), 'the card shows the SDK call');
  await card3.getByRole('button', { name: 'Approve', exact: true }).click();
  const r6 = await viaSdk;
  check(!r6.isError, 'the SDK write: ' + JSON.stringify(r6));
  check(fs.readFileSync(path.join(WS, 'sdk.txt'), 'utf8') === 'written by the TypeScript SDK', 'the SDK file');
  await sdk.close();
  await page.waitForSelector('#approvals-list .card', { state: 'detached' });

  step('the Python SDK (2025-11-25 over HTTP) writes a file once approved in the page');
  const { spawn } = await import('node:child_process');
  const py = spawn(env('PY'), [env('PY_CLIENT')], { env: { ...process.env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let pyOut = '';
  py.stdout.on('data', (d) => { pyOut += d; });
  py.stderr.on('data', (d) => { pyOut += d; });
  const pyDone = new Promise((resolve) => py.on('exit', (code) => resolve(code)));
  const card4 = page.locator('#approvals-list .card').first();
  await card4.waitFor();
  check((await card4.textContent()).includes('py.txt'), 'the card shows the Python call');
  await card4.getByRole('button', { name: 'Approve', exact: true }).click();
  check((await pyDone) === 0, 'the Python SDK write: ' + pyOut);
  check(fs.readFileSync(path.join(WS, 'py.txt'), 'utf8') === 'written by the Python SDK', 'the Python file');
  await page.waitForSelector('#approvals-list .card', { state: 'detached' });

  step('a rejection reaches the agent as REJECTED');
  const rejected = call('write_file', { path: 'rejected.txt', content: 'never' });
  const card2 = page.locator('#approvals-list .card').first();
  await card2.waitFor();
  await card2.locator('input.reason').fill('not this one');
  await card2.getByRole('button', { name: 'Reject', exact: true }).click();
  const r2 = await rejected;
  check(r2.result?.isError && resultText(r2).includes('REJECTED'), 'the rejection: ' + resultText(r2));
  check(resultText(r2).includes('not this one'), 'the reason reaches the agent: ' + resultText(r2));
  check(!fs.existsSync(path.join(WS, 'rejected.txt')), 'nothing written');
  await page.waitForSelector('#calls-body tr[data-status="rejected"]');

  step('"always" for these arguments: the same call runs again without asking');
  const always = call('write_file', { path: 'always.txt', content: 'again and again' });
  const card5 = page.locator('#approvals-list .card').first();
  await card5.waitFor();
  await card5.locator('select.scope').selectOption('args workspace');
  await card5.getByRole('button', { name: 'Always', exact: true }).click();
  const r7 = await always;
  check(!r7.result?.isError, 'the first always call: ' + resultText(r7));
  const again = await call('write_file', { path: 'always.txt', content: 'again and again' });
  check(!again.result?.isError, 'the same call, not asked again: ' + resultText(again));
  // (Had it waited for a person, `again` would not have returned: nobody answers it.)
  await page.waitForSelector('#approvals-list .card', { state: 'detached' });

  step('a search over the log, with log verify\'s verdict');
  await page.fill('#q-tool', 'write_file');
  await page.click('#search-form button[type=submit]');
  await page.waitForSelector('#search-body tr[data-call-id]:has(td.status:text-is("rejected"))');
  await page.waitForSelector('#verdict.good');
  await shot('search');
  console.log('all steps passed');
} catch (e) {
  await shot('failure').catch(() => {});
  console.error(e.stack || String(e));
  process.exitCode = 1;
} finally {
  await browser.close();
}

// Browser test of the chat UI's handling of the event stream (SPEC §2.1) — thinking, tool
// blocks with streamed arguments, result text and a screenshot, confirmation cards, Stop,
// sessions and the timeline — with a real `cubicle serve` for login, agents and the page, and
// the chat routes answered by this test with scripted events, so every request body the UI
// sends is checked. The same UI against the real runtime is in workspace.test.mjs.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { desktopViewport, launchBrowser, logIn, missingPrerequisite, screenshot, startServer, watchPage } from './harness.mjs';

const skip = missingPrerequisite();

let n = 0;
const ev = (type, fields = {}) => ({ type, id: String(++n).padStart(32, '0'), createdAt: new Date().toISOString(), ...fields });
const sse = (events) => events.map((e) => `data: ${JSON.stringify(e)}\n\n`).join('');

describe('chat UI (scripted event stream)', { skip: skip || false }, () => {
  let server;
  let browser;
  let context;
  let page;
  let problems;
  let agent;
  let me;
  let png;
  const requests = [];
  let nextAnswer = null; // (body) => Promise<string> | string
  const saved = new Map(); // sessionId -> history

  before(async () => {
    server = await startServer();
    browser = await launchBrowser();
    context = await browser.newContext({ viewport: desktopViewport });
    page = await context.newPage();
    problems = watchPage(page);
    await page.goto('about:blank');
    png = await page.evaluate(() => {
      const c = document.createElement('canvas');
      c.width = 320;
      c.height = 200;
      const g = c.getContext('2d');
      g.fillStyle = '#205080';
      g.fillRect(0, 0, 320, 200);
      g.fillStyle = '#fff';
      g.font = '28px sans-serif';
      g.fillText('screenshot', 80, 110);
      return c.toDataURL('image/png').split(',')[1];
    });
    await logIn(page, server.url);
    me = (await (await context.request.get(`${server.url}/api/auth/me`)).json()).user;
    const res = await context.request.post(`${server.url}/api/app/agents`, { data: { name: 'Scripted' }, headers: { Origin: server.url } });
    agent = await res.json();

    await context.route(/\/api\/app\/chat(\/.*)?(\?.*)?$/, async (route) => {
      const req = route.request();
      const url = new URL(req.url());
      if (req.method() === 'POST' && url.pathname === '/api/app/chat') {
        const body = req.postDataJSON();
        requests.push({ path: url.pathname, body, accept: req.headers()['accept'] });
        const answer = nextAnswer;
        nextAnswer = null;
        const text = await answer(body);
        saved.set(body.sessionId, [{ id: 'm1', name: me.id, role: 'user', content: [{ type: 'text', text: body.input || '(answer)' }] }]);
        await route.fulfill({ status: 200, headers: { 'Content-Type': 'text/event-stream' }, body: text });
        return;
      }
      if (req.method() === 'POST' && url.pathname === '/api/app/chat/stop') {
        requests.push({ path: url.pathname, body: req.postDataJSON() });
        await route.fulfill({ status: 200, contentType: 'application/json', body: '{"stopped":true}' });
        return;
      }
      if (url.pathname === '/api/app/chat/sessions') {
        const sessions = [...saved.keys()].map((id, i) => ({
          sessionId: id,
          agentId: agent.id,
          title: `Chat ${i + 1}`,
          createdAt: new Date().toISOString(),
          updatedAt: new Date().toISOString(),
        }));
        await route.fulfill({ status: 200, contentType: 'application/json', body: JSON.stringify({ sessions }) });
        return;
      }
      const m = url.pathname.match(/^\/api\/app\/chat\/sessions\/([^/]+)(\/history)?$/);
      if (m && m[2]) {
        await route.fulfill({
          status: 200,
          contentType: 'application/json',
          body: JSON.stringify({
            sessionId: m[1],
            runs: [
              { id: 'r1', turnId: 't', step: 1, tool: 'computer_screenshot', status: 'SUCCESS', durationMs: 420, createdAt: new Date().toISOString(), outputSha256: 'ab' },
              { id: 'r2', turnId: 't', step: 2, tool: 'computer_shell', status: 'FAILED', durationMs: 1300, createdAt: new Date().toISOString(), outputSha256: null },
            ],
            total: 2,
            failed: 1,
            failureRate: 0.5,
            durationMs: 1720,
            byTool: [
              { tool: 'computer_screenshot', count: 1, failed: 0, durationMs: 420, maxMs: 420 },
              { tool: 'computer_shell', count: 1, failed: 1, durationMs: 1300, maxMs: 1300 },
            ],
          }),
        });
        return;
      }
      if (m) {
        const history = saved.get(decodeURIComponent(m[1]));
        if (!history) {
          await route.fulfill({ status: 404, contentType: 'application/json', body: '{"error":"no such chat","code":"not_found"}' });
          return;
        }
        await route.fulfill({
          status: 200,
          contentType: 'application/json',
          body: JSON.stringify({
            sessionId: m[1],
            agentId: agent.id,
            history: [
              ...history,
              { id: 'm2', name: 'Scripted', role: 'assistant', content: [{ type: 'tool_use', toolCallId: 'h1', name: 'computer_shell', input: { command: 'echo saved' } }] },
              { id: 'm3', name: 'tool', role: 'user', content: [{ type: 'tool_result', toolCallId: 'h1', state: 'success', content: [{ type: 'text', text: 'saved\n' }] }] },
            ],
          }),
        });
        return;
      }
      await route.continue();
    });
  });

  after(async () => {
    await browser?.close();
    await server?.stop();
  });

  test('a turn streams thinking, a tool block with a screenshot, and text', async () => {
    nextAnswer = () =>
      sse([
        ev('AGENT_START', { sessionId: 's', replyId: 'r', name: 'Scripted', role: 'assistant' }),
        ev('THINKING_BLOCK_START', { blockId: 'th1' }),
        ev('THINKING_BLOCK_DELTA', { blockId: 'th1', delta: 'I should look at the screen.' }),
        ev('THINKING_BLOCK_END', { blockId: 'th1' }),
        ev('TOOL_CALL_START', { toolCallId: 'c1', toolCallName: 'computer_screenshot' }),
        ev('TOOL_CALL_DELTA', { toolCallId: 'c1', toolCallName: 'computer_screenshot', delta: '{}' }),
        ev('TOOL_CALL_END', { toolCallId: 'c1', toolCallName: 'computer_screenshot' }),
        ev('TOOL_RESULT_START', { toolCallId: 'c1', toolCallName: 'computer_screenshot' }),
        ev('TOOL_RESULT_TEXT_DELTA', { toolCallId: 'c1', toolCallName: 'computer_screenshot', delta: 'screen 1280x800' }),
        ev('TOOL_RESULT_DATA_DELTA', { toolCallId: 'c1', toolCallName: 'computer_screenshot', data: { type: 'image', mediaType: 'image/png', data: png } }),
        ev('TOOL_RESULT_END', { toolCallId: 'c1', toolCallName: 'computer_screenshot', state: 'success' }),
        ev('CUSTOM', { name: 'something-new', value: 1 }),
        ev('TEXT_BLOCK_START', { blockId: 'tx' }),
        ev('TEXT_BLOCK_DELTA', { blockId: 'tx', delta: 'The desktop shows ' }),
        ev('TEXT_BLOCK_DELTA', { blockId: 'tx', delta: 'a blue screen.' }),
        ev('TEXT_BLOCK_END', { blockId: 'tx' }),
        ev('AGENT_RESULT', { result: { id: 'r', name: 'Scripted', role: 'assistant', content: [{ type: 'text', text: 'The desktop shows a blue screen.' }], timestamp: new Date().toISOString() } }),
        ev('AGENT_END'),
      ]);
    await page.goto(`${server.url}/#/agents/${agent.id}`);
    await page.locator('#chat-title', { hasText: 'Scripted' }).waitFor();
    await page.fill('#chat-input', 'What is on the screen?');
    await page.press('#chat-input', 'Enter');
    await page.locator('.msg.assistant .block-text', { hasText: 'The desktop shows a blue screen.' }).waitFor();
    const body = requests[0].body;
    assert.equal(requests[0].accept, 'text/event-stream');
    assert.deepEqual([body.userId, body.agentId, body.input], [me.id, agent.id, 'What is on the screen?']);
    assert.match(body.sessionId, /^[A-Za-z0-9._-]{1,128}$/);
    const tool = page.locator('.block-tool[data-tool="computer_screenshot"]');
    assert.equal(await tool.getAttribute('data-state'), 'success');
    assert.equal(await tool.locator('.tool-state').textContent(), 'Success');
    assert.equal(await tool.locator('.tool-result').textContent(), 'screen 1280x800');
    const img = tool.locator('img');
    await page.waitForFunction(() => document.querySelector('.block-tool img')?.naturalWidth === 320);
    assert.match(await img.getAttribute('src'), /^data:image\/png;base64,/);
    // Thinking is collapsible and closed once done; the tool block collapses on click.
    const thinking = page.locator('.block-thinking');
    assert.equal(await thinking.evaluate((d) => d.open), false);
    await thinking.locator('summary').click();
    assert.match(await thinking.textContent(), /look at the screen/);
    await tool.locator('.tool-head').click();
    assert.equal(await tool.locator('.tool-body').count(), 0);
    await tool.locator('.tool-head').click();
    await screenshot(page, 'chat-tool-blocks-scripted');
  });

  test('a confirmation card answers with Always allow (a rule) on the same session', async () => {
    const call = { id: 'c2', name: 'computer_shell', input: { command: 'rm -rf ~/workspace/tmp' } };
    nextAnswer = () =>
      sse([
        ev('AGENT_START', { name: 'Scripted' }),
        ev('TOOL_CALL_START', { toolCallId: 'c2', toolCallName: 'computer_shell' }),
        ev('TOOL_CALL_DELTA', { toolCallId: 'c2', delta: JSON.stringify(call.input) }),
        ev('TOOL_CALL_END', { toolCallId: 'c2' }),
        ev('REQUIRE_USER_CONFIRM', { toolCalls: [call] }),
        ev('AGENT_END'),
      ]);
    await page.fill('#chat-input', 'clean up tmp');
    await page.click('#chat-send');
    const card = page.locator('.confirm-card');
    await card.waitFor();
    assert.match(await card.textContent(), /rm -rf ~\/workspace\/tmp/);
    assert.match(await page.locator('#chat-note').textContent(), /waiting for your answer/);
    nextAnswer = () =>
      sse([
        ev('USER_CONFIRM_RESULT', { confirmResults: [{ confirmed: true, toolCall: call, rules: ['exact'] }] }),
        ev('TOOL_RESULT_START', { toolCallId: 'c2', toolCallName: 'computer_shell' }),
        ev('TOOL_RESULT_TEXT_DELTA', { toolCallId: 'c2', delta: '' }),
        ev('TOOL_RESULT_END', { toolCallId: 'c2', toolCallName: 'computer_shell', state: 'success' }),
        ev('AGENT_END'),
      ]);
    await card.getByRole('button', { name: 'Always allow' }).click();
    await page.locator('.confirm-card[data-answered="always"]').waitFor();
    await page.locator('.block-tool[data-tool="computer_shell"][data-state="success"]').waitFor();
    const answer = requests.filter((r) => r.path === '/api/app/chat').at(-1).body;
    assert.equal(answer.sessionId, requests[0].body.sessionId, 'the same session resumes');
    assert.equal(answer.input, '');
    assert.deepEqual(answer.confirmResults, [{ confirmed: true, toolCall: call, rules: ['exact'] }]);
  });

  test('Stop asks the server to stop the running turn', async () => {
    let release;
    const held = new Promise((r) => (release = r));
    nextAnswer = async () => {
      await held;
      return sse([ev('AGENT_START', { name: 'Scripted' }), ev('REQUEST_STOP', { reason: 'stopped by the user' }), ev('AGENT_END')]);
    };
    await page.fill('#chat-input', 'a long task');
    await page.click('#chat-send');
    await page.locator('#chat-stop').waitFor();
    await page.locator('#chat-running').waitFor();
    await page.click('#chat-stop');
    await waitFor(() => requests.some((r) => r.path === '/api/app/chat/stop'));
    const stop = requests.find((r) => r.path === '/api/app/chat/stop');
    assert.equal(stop.body.sessionId, requests[0].body.sessionId);
    release();
    await page.locator('.block-notice', { hasText: 'Stopped: stopped by the user' }).waitFor();
    await page.locator('#chat-send').waitFor();
  });

  test('sessions: new chat, reopen an old one with its history; the timeline', async () => {
    await page.click('#sessions-toggle');
    await page.click('#new-chat');
    await page.locator('.empty-state', { hasText: 'Start a chat with Scripted' }).waitFor();
    await page.click('#sessions-toggle');
    const item = page.locator(`#sessions-list [data-session="${requests[0].body.sessionId}"]`);
    await item.click();
    await page.locator('.block-tool[data-tool="computer_shell"] .tool-result', { hasText: 'saved' }).waitFor();
    await page.click('#timeline-tab');
    await page.locator('#timeline-stats').waitFor();
    assert.match(await page.locator('#timeline-stats').textContent(), /2runs1failed50%failure rate1\.7 stotal time/);
    assert.equal(await page.locator('.timeline-list li').count(), 2);
    assert.equal(await page.locator('.timeline-list li[data-status="FAILED"]').count(), 1);
    await screenshot(page, 'chat-timeline-scripted');
  });

  test('a refused request shows the server message', async () => {
    await page.click('[role=tab]:has-text("Chat")');
    nextAnswer = null;
    await context.route('**/api/app/chat', (route) =>
      route.request().method() === 'POST'
        ? route.fulfill({ status: 400, contentType: 'application/json', body: '{"error":"sessionId, userId and input are required","code":"invalid"}' })
        : route.fallback(),
    );
    await page.fill('#chat-input', 'hello');
    await page.click('#chat-send');
    await page.locator('.block-notice.error', { hasText: 'sessionId, userId and input are required' }).waitFor();
  });

  test('no page errors', () => {
    assert.deepEqual(
      problems.filter((p) => !/status of 400/.test(p)),
      [],
    );
  });
});

async function waitFor(cond, ms = 5000) {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`condition not met in ${ms} ms`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

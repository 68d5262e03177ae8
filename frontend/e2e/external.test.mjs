// Browser test of a tool the client runs (REQUIRE_EXTERNAL_EXECUTION, issue 27): a real
// `cubicle serve` with the real agent runtime, the scripted model server as the only stand-in.
// The model asks for a file with client_pick_file; the real web client in Chromium shows the
// card, the person picks a file from "their machine" (a file input fed by the test), the
// client posts it to POST /api/app/chat/external, and the waiting turn carries on with its
// content. A second request whose deadline passes unanswered ends as an error, and its history
// run is TIMEOUT. A CSV the agent shares back is rendered as a table with a download.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { desktopViewport, launchBrowser, logIn, missingPrerequisite, screenshot, startServer, watchPage } from './harness.mjs';
import { call, startModel, text } from './model.mjs';

const skip = missingPrerequisite();

describe('external execution (real runtime, scripted model)', { skip: skip || false }, () => {
  let server;
  let model;
  let browser;
  let context;
  let page;
  let problems;
  let agent;

  before(async () => {
    server = await startServer();
    model = await startModel();
    browser = await launchBrowser();
    context = await browser.newContext({ viewport: desktopViewport });
    page = await context.newPage();
    problems = watchPage(page);
    await logIn(page, server.url);
    const put = await context.request.put(`${server.url}/api/app/admin/model`, {
      data: { baseUrl: model.baseUrl, model: 'scripted', allowPrivate: true },
      headers: { Origin: server.url },
    });
    assert.equal(put.status(), 200, await put.text());
    const res = await context.request.post(`${server.url}/api/app/agents`, { data: { name: 'Picker' }, headers: { Origin: server.url } });
    agent = await res.json();
  });

  after(async () => {
    await browser?.close();
    await server?.stop();
    await model?.stop();
  });

  test('the person picks a file in the browser; the waiting turn gets it', async () => {
    model.push(call('client_pick_file', { prompt: 'your shopping list', accept: '.txt', timeout_seconds: 120 }), text('Your list has milk on it.'));
    await page.goto(`${server.url}/#/agents/${agent.id}`);
    await page.locator('#chat-input').waitFor();
    await page.fill('#chat-input', 'read my shopping list');
    await page.press('#chat-input', 'Enter');
    const card = page.locator('.external-card[data-state="waiting"]');
    await card.waitFor();
    assert.match(await card.textContent(), /your shopping list/);
    assert.match(await card.textContent(), /waits until/);
    // The hint of the wait is shown too.
    await page.locator('.block-notice', { hasText: 'Waiting for you to pick a file' }).waitFor();
    // The request named the tools this client runs.
    const asked = model.seen[0];
    assert.ok(
      asked.tools.some((t) => t.function.name === 'client_pick_file'),
      'the model is offered client_pick_file',
    );
    await card.locator('input[type="file"]').setInputFiles({ name: 'list.txt', mimeType: 'text/plain', buffer: Buffer.from('milk\neggs\n') });
    await card.locator('.external-send').click();
    await page.locator('.msg.assistant .block-text', { hasText: 'Your list has milk on it.' }).waitFor();
    await page.locator('.external-card[data-state="success"]').waitFor();
    // The model got the file's content in the tool result.
    const second = JSON.stringify(model.seen[1].messages);
    assert.match(second, /list\.txt/);
    assert.match(second, /milk\\neggs/);
    await screenshot(page, 'chat-external-pick-file');
  });

  test('a deadline that passes: the turn goes on without the file, the history says TIMEOUT', async () => {
    model.push(call('client_pick_file', { prompt: 'a photo', timeout_seconds: 2 }), text('No file came; I carry on without it.'));
    await page.fill('#chat-input', 'use my photo');
    await page.press('#chat-input', 'Enter');
    await page.locator('.external-card[data-state="waiting"]').waitFor();
    // Nobody answers.
    await page.locator('.external-card[data-state="error"]', { hasText: 'nobody answered' }).waitFor({ timeout: 30_000 });
    await page.locator('.msg.assistant .block-text', { hasText: 'No file came' }).waitFor();
    // The history of the session, as the export gives it.
    const sessions = await (await context.request.get(`${server.url}/api/app/chat/sessions?agentId=${agent.id}`)).json();
    const id = sessions.sessions[0].sessionId;
    const lines = (await (await context.request.get(`${server.url}/api/app/chat/sessions/${id}/history.jsonl`)).text()).trim().split('\n');
    const runs = lines.map((l) => JSON.parse(l));
    assert.deepEqual(
      runs.map((r) => [r.tool, r.status]),
      [
        ['client_pick_file', 'SUCCESS'],
        ['client_pick_file', 'TIMEOUT'],
      ],
    );
    assert.deepEqual(problems, []);
  });
});

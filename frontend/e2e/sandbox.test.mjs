// Browser test of Settings → Security → Host sandbox (issue 26): an agent's host_shell write
// outside the writable paths is refused by the real OS sandbox, the chat says so, the card lists
// the refusal; Allow its directory → the same command succeeds; Revoke → it is refused again.
// Real `cubicle serve` (engine none, host tools in the sandbox) with the real agent runtime and
// real headless Chromium; the scripted model server is the only stand-in.

import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { artifactsDir, desktopViewport, launchBrowser, logIn, missingPrerequisite, screenshot, startServer, watchPage } from './harness.mjs';
import { call, startModel, text } from './model.mjs';

const skip = missingPrerequisite();

describe('Settings → Security → Host sandbox', { skip: skip || false }, () => {
  let server;
  let model;
  let browser;
  let context;
  let page;
  let agent;
  let outside;

  before(async () => {
    // Outside the scratch directories (/tmp is writable in the sandbox) and the home.
    mkdirSync(artifactsDir, { recursive: true });
    outside = mkdtempSync(join(artifactsDir, 'sandbox-'));
    server = await startServer({ env: { CUBICLE_ENGINE: 'none', CUBICLE_TOOL_GUARD: 'OFF' } });
    model = await startModel();
    browser = await launchBrowser();
    context = await browser.newContext({ viewport: desktopViewport });
    page = await context.newPage();
    watchPage(page);
    await logIn(page, server.url);
    const headers = { Origin: server.url };
    const put = await context.request.put(`${server.url}/api/app/admin/model`, {
      data: { baseUrl: model.baseUrl, model: 'scripted', allowPrivate: true },
      headers,
    });
    assert.equal(put.status(), 200, await put.text());
    agent = await (await context.request.post(`${server.url}/api/app/agents`, { data: { name: 'Builder' }, headers })).json();
    const sel = await context.request.put(`${server.url}/api/app/agents/${agent.id}/computer-selection`, {
      data: { computer: 'host', allowHostEnvironment: false },
      headers,
    });
    assert.equal(sel.status(), 200, await sel.text());
  });

  after(async () => {
    await browser?.close();
    await server?.stop();
    await model?.stop();
    if (outside) rmSync(outside, { recursive: true, force: true });
  });

  /** One chat turn in which the agent runs command with host_shell; returns what the model got back. */
  const shell = async (command) => {
    const first = model.seen.length;
    model.push(call('host_shell', { command }), text('done'));
    await page.goto(`${server.url}/#/agents/${agent.id}`);
    await page.locator('#chat-input').waitFor();
    await page.fill('#chat-input', 'build it');
    await page.press('#chat-input', 'Enter');
    // The tool's result, as the runtime handed it to the model with its next request.
    for (let i = 0; model.seen.length < first + 2; i++) {
      assert.ok(i < 600, 'the turn did not come back to the model');
      await new Promise((r) => setTimeout(r, 100));
    }
    await page.locator('.block-tool[data-tool="host_shell"]').last().waitFor();
    return JSON.stringify(model.seen[first + 1].messages);
  };

  test('a refused write is listed, approved, works, revoked, refused again', async () => {
    const out = join(outside, 'out.txt');
    const cmd = `echo built > ${out}`;
    let res = await shell(cmd);
    assert.ok(!existsSync(out), 'the sandbox let the write through');
    assert.match(res, /refused write access/);

    await page.goto(`${server.url}/#/settings/security`);
    const card = page.locator('#sandbox-card');
    const row = card.locator(`tr[data-path="${out}"]`);
    await row.waitFor();
    assert.match(await row.innerText(), /write/);
    assert.match(await row.innerText(), /Builder/);
    await card.scrollIntoViewIfNeeded();
    await screenshot(page, 'settings-sandbox-refusal');
    await row.locator('.sandbox-approve-dir').click();
    await card.locator('#sandbox-widenings', { hasText: outside }).waitFor();
    await row.locator('text=widened').waitFor();

    res = await shell(cmd);
    assert.equal(readFileSync(out, 'utf8'), 'built\n', `after the approval: ${res}`);

    await page.goto(`${server.url}/#/settings/security`);
    await card.locator('#sandbox-widenings', { hasText: outside }).waitFor();
    await card.locator('#sandbox-widenings .sandbox-revoke').click();
    await card.locator('#sandbox-widenings').waitFor({ state: 'detached' });
    rmSync(out);
    res = await shell(cmd);
    assert.ok(!existsSync(out), 'written after the revocation');
    assert.match(res, /refused write access/);
  });
});

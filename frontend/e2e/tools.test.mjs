// Browser test of Settings → Tools (issue 23): an administrator adds an MCP server (a bad name
// is refused with the server's message), opens it under Tools & permissions, and enables it for
// an agent in the agent's computer panel; secrets show masked. Real `cubicle serve`, real
// headless Chromium.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { adminUser, desktopViewport, launchBrowser, logIn, missingPrerequisite, openConfigure, screenshot, startServer, watchPage } from './harness.mjs';

const skip = missingPrerequisite();

describe('Settings → Tools', { skip: skip || false }, () => {
  let server;
  let browser;
  let context;
  let page;
  let problems;

  before(async () => {
    server = await startServer();
    browser = await launchBrowser();
    context = await browser.newContext({ viewport: desktopViewport });
    page = await context.newPage();
    problems = watchPage(page);
    await logIn(page, server.url);
  });

  after(async () => {
    await browser?.close();
    await server?.stop();
  });

  const api = async (method, path, data) => {
    const res = await context.request.fetch(`${server.url}${path}`, {
      method,
      data,
      headers: { Origin: server.url, 'Content-Type': 'application/json' },
    });
    return { status: res.status(), body: await res.json().catch(() => null) };
  };

  test('add a server, open it, enable it for an agent', async () => {
    await page.goto(`${server.url}/#/settings/tools`);
    await page.locator('#mcp-servers-card').waitFor();
    await page.click('#mcp-add-button');
    const form = page.locator('#mcp-add');
    await form.locator('.mcp-name').fill('Bad_Name');
    await form.locator('.mcp-url').fill('https://mcp.example.com/mcp');
    await form.locator('button[type=submit]').click();
    await form.locator('.mcp-error', { hasText: 'lower-case' }).waitFor();
    await form.locator('.mcp-name').fill('files');
    await form.locator('.mcp-headers').fill('Authorization: Bearer secret-value-98765');
    await form.locator('button[type=submit]').click();
    const item = page.locator('.mcp-server', { hasText: 'files' });
    await item.waitFor();
    assert.match(await item.innerText(), /default deny/);

    // Tools & permissions opened after adding: open it for user admin.
    const policy = item.locator('.mcp-policy');
    await policy.waitFor();
    await policy.locator('.mcp-add-rule').click();
    await policy.locator('.mcp-rule-subject').last().fill('user:nobody');
    await policy.locator('button[type=submit]').click();
    await policy.locator('.mcp-policy-error', { hasText: 'no user' }).waitFor();
    await policy.locator('.mcp-rule-subject').last().fill(`user:${adminUser}`);
    await policy.locator('button[type=submit]').click();
    await policy.locator('text=Saved.').waitFor();
    await screenshot(page, 'settings-tools');

    const { body } = await api('GET', '/api/app/admin/mcp-servers');
    const saved = body.servers.find((s) => s.name === 'files');
    assert.deepEqual(saved.policy.rules, [{ subject: `user:${adminUser}`, effect: 'allow' }]);
    assert.equal(saved.headers.Authorization, '••••8765');
    assert.ok(!JSON.stringify(body).includes('secret-value-98765'), 'the secret never comes back');

    // Edit keeps the masked header as it is.
    await item.locator('button', { hasText: 'Edit' }).click();
    const edit = page.locator(`#mcp-edit-${saved.id}`);
    assert.equal(await edit.locator('.mcp-headers').inputValue(), 'Authorization: ••••8765');
    await edit.locator('.mcp-description').fill('Files of the team');
    await edit.locator('button[type=submit]').click();
    await item.locator('text=Files of the team').waitFor();
    const again = (await api('GET', '/api/app/admin/mcp-servers')).body.servers.find((s) => s.name === 'files');
    assert.equal(again.headers.Authorization, '••••8765');

    // The agent's computer panel: enable it.
    const agent = (await api('POST', '/api/app/agents', { name: 'Tooler' })).body;
    await page.goto(`${server.url}/#/agents/${agent.id}`);
    await page.locator('#chat-title', { hasText: 'Tooler' }).waitFor();
    const toggle = page.locator('#computer-toggle');
    if ((await toggle.getAttribute('aria-expanded')) !== 'true') await toggle.click();
    await openConfigure(page);
    const box = page.locator(`#agent-mcp-servers [data-server="${saved.id}"] input`);
    await box.check();
    await page.waitForFunction(
      async ([url, id]) => {
        const r = await fetch(`${url}/api/app/agents/${id}/mcp-servers`);
        const b = await r.json();
        return b.servers.some((s) => s.enabled);
      },
      [server.url, agent.id],
    );
    await screenshot(page, 'agent-mcp-servers');
    // Only the two refusals the test asked for (the bad name, the unknown user).
    assert.deepEqual(problems.filter((p) => !/status of 400 .*mcp-servers/.test(p)), []);
    assert.equal(problems.length, 2, problems.join('\n'));
  });
});

// Browser tests of accounts and roles end to end (issue 15): an administrator creates a member
// in Settings → Users; the member logs in and sees only their own agents and no settings;
// changing one's password ends one's other sessions; disabling the member ends their session;
// Settings → Security saves. Real `cubicle serve`, real headless Chromium.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  desktopViewport,
  launchBrowser,
  logIn,
  missingPrerequisite,
  openConfigure,
  screenshot,
  startServer,
  watchPage,
} from './harness.mjs';

const skip = missingPrerequisite();

const member = 'mia';
const memberPassword = 'Orange-kite-' + Math.random().toString(36).slice(2, 8) + '-42';
const memberPassword2 = 'Second-river-' + Math.random().toString(36).slice(2, 8) + '-7';

describe('accounts and roles', { skip: skip || false }, () => {
  let server;
  let browser;
  let admin; // { context, page, problems }

  before(async () => {
    server = await startServer();
    browser = await launchBrowser();
    const context = await browser.newContext({ viewport: desktopViewport });
    const page = await context.newPage();
    admin = { context, page, problems: watchPage(page) };
    await logIn(page, server.url);
  });

  after(async () => {
    await browser?.close();
    await server?.stop();
  });

  async function apiAs(context, method, path, data) {
    const res = await context.request.fetch(`${server.url}${path}`, {
      method,
      data,
      headers: { Origin: server.url, 'Content-Type': 'application/json' },
    });
    return res;
  }

  async function newMember(password) {
    const context = await browser.newContext({ viewport: desktopViewport });
    const page = await context.newPage();
    const problems = watchPage(page);
    await logIn(page, server.url, member, password);
    return { context, page, problems };
  }

  test('an administrator creates a member in Settings → Users', async () => {
    const { page } = admin;
    const res = await apiAs(admin.context, 'POST', '/api/app/agents', { name: 'Admin private bot' });
    assert.equal(res.status(), 201, await res.text());
    await page.goto(`${server.url}/#/settings/users`);
    await page.locator('#users-table').waitFor();
    // A weak password is refused with the reason, and nothing is created.
    await page.fill('#user-new-name', member);
    await page.fill('#user-new-password', 'password123');
    await page.click('#user-create');
    await page.locator('#user-create-error').waitFor();
    assert.match(await page.locator('#user-create-error').textContent(), /too short|common password|too simple/);
    assert.equal(await page.locator(`tr[data-user="${member}"]`).count(), 0);
    await page.fill('#user-new-password', memberPassword);
    await page.click('#user-create');
    await page.locator('#user-created').waitFor();
    await page.locator(`tr[data-user="${member}"]`).waitFor();
    assert.equal(await page.locator(`tr[data-user="${member}"] select.user-role`).inputValue(), 'member');
    await screenshot(page, 'settings-users');
  });

  test('the member sees only their own agents and never the settings', async () => {
    const m = await newMember(memberPassword);
    const { page, context } = m;
    assert.equal(await page.locator('#settings-link').count(), 0, 'no Settings link for a member');
    await page.locator('#account-link').waitFor();
    // Their own list is empty: the administrator's agent is not there.
    await page.locator('#agents-empty').waitFor();
    assert.equal((await page.content()).includes('Admin private bot'), false);
    await page.fill('#agent-create-name', 'Mia bot');
    await page.click('#agent-create-submit');
    await page.locator('#agent-list', { hasText: 'Mia bot' }).waitFor();
    // Settings pages, by address: the notice, and the API answers 403.
    for (const section of ['local-vm', 'users', 'security', 'model']) {
      await page.goto(`${server.url}/#/settings/${section}`);
      await page.locator('#settings-forbidden').waitFor();
    }
    for (const path of ['/api/app/admin/users', '/api/app/admin/security', '/api/app/admin/local-vm', '/api/app/admin/model']) {
      const res = await context.request.get(`${server.url}${path}`);
      assert.equal(res.status(), 403, path);
    }
    // The administrator's agents are not the member's: 404.
    const theirs = await (await apiAs(admin.context, 'GET', '/api/app/agents')).json();
    const res = await context.request.get(`${server.url}/api/app/agents/${theirs.agents[0].id}`);
    assert.equal(res.status(), 404);
    // Host access is granted, not taken: ticking the box through the API is refused.
    const mine = await (await context.request.get(`${server.url}/api/app/agents`)).json();
    const sel = await apiAs(context, 'PUT', `/api/app/agents/${mine.agents[0].id}/computer-selection`, {
      computer: 'vm',
      allowHostEnvironment: true,
    });
    assert.equal(sel.status(), 403, await sel.text());
    await screenshot(page, 'member-agents');
    assert.deepEqual(m.problems.filter((p) => !/status of 40[34]/.test(p)), []);
    await m.context.close();
  });

  test('changing the password ends the other sessions of the account', async () => {
    const a = await newMember(memberPassword);
    const b = await newMember(memberPassword);
    await a.page.goto(`${server.url}/#/account`);
    await a.page.fill('#password-current', memberPassword);
    await a.page.fill('#password-new', memberPassword2);
    await a.page.fill('#password-again', memberPassword2);
    await a.page.click('#password-save');
    await a.page.locator('#password-saved').waitFor();
    // The session that changed it continues; the other one is sent to the login form.
    await a.page.goto(`${server.url}/#/agents`);
    await a.page.locator('#agent-list').waitFor();
    await b.page.goto(`${server.url}/#/agents`);
    await b.page.reload();
    await b.page.waitForURL(/#\/login$/);
    await a.context.close();
    await b.context.close();
  });

  test('disabling the member ends their session', async () => {
    const m = await newMember(memberPassword2);
    await m.page.locator('#agent-list').waitFor();
    const { page } = admin;
    await page.goto(`${server.url}/#/settings/users`);
    await page.locator(`tr[data-user="${member}"] .user-toggle`).click();
    await page.locator(`tr[data-user="${member}"][data-disabled="true"]`).waitFor();
    // The member's next request finds the session gone.
    await m.page.reload();
    await m.page.waitForURL(/#\/login$/);
    await m.page.fill('#login-username', member);
    await m.page.fill('#login-password', memberPassword2);
    await m.page.click('#login-submit');
    await m.page.locator('#login-error').waitFor();
    assert.match(await m.page.locator('#login-error').textContent(), /disabled/);
    await m.context.close();
  });

  test("the computer panel lists the agent's always-allowed commands, each removable", async () => {
    const { page, context } = admin;
    const agents = (await (await apiAs(context, 'GET', '/api/app/agents')).json()).agents;
    const bot = agents.find((a) => a.name === 'Admin private bot');
    const res = await apiAs(context, 'POST', '/api/app/admin/security/allow-rules', {
      agentId: bot.id,
      tool: 'computer_shell',
      command: 'make test',
    });
    assert.equal(res.status(), 201, await res.text());
    const rule = await res.json();
    await page.goto(`${server.url}/#/agents/${bot.id}`);
    await page.locator('#chat-title', { hasText: 'Admin private bot' }).waitFor();
    const toggle = page.locator('#computer-toggle');
    if ((await toggle.getAttribute('aria-expanded')) !== 'true') await toggle.click();
    await openConfigure(page); // the agent's rules sit under Configure
    const item = page.locator(`#agent-rules li[data-rule="${rule.id}"]`);
    await item.waitFor();
    assert.match(await item.textContent(), /computer_shell\s*make test/);
    await screenshot(page, 'computer-panel-allow-rules');
    await item.locator('button').click();
    await page.locator('#agent-rules').waitFor({ state: 'detached' });
    const left = await (await apiAs(context, 'GET', `/api/app/agents/${bot.id}/allow-rules`)).json();
    assert.deepEqual(left.rules ?? [], []);
    assert.deepEqual(admin.problems.filter((p) => !/status of 40[034]/.test(p)), []);
  });

  test('Settings → Security saves the level and shows the confirmations', async () => {
    const { page } = admin;
    await page.goto(`${server.url}/#/settings/security`);
    await page.locator('#security-form').waitFor();
    await page.selectOption('#security-level', 'SMART');
    await page.fill('#security-ports', '8080');
    await page.click('#security-save');
    await page.locator('#security-saved').waitFor();
    await page.locator('#security-level-now', { hasText: 'SMART' }).waitFor();
    // A bad value is refused with the reason and nothing changes.
    await page.fill('#security-ports', '70000');
    await page.click('#security-save');
    await page.locator('#security-error').waitFor();
    const view = await (await apiAs(admin.context, 'GET', '/api/app/admin/security')).json();
    assert.equal(view.effectiveLevel, 'SMART');
    assert.deepEqual(view.desktopHostPorts, [8080]);
    await page.locator('#confirmations-card').waitFor();
    await screenshot(page, 'settings-security');
    assert.deepEqual(admin.problems.filter((p) => !/status of 40[034]/.test(p)), []);
  });
});

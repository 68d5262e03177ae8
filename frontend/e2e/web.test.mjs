// The main browser flow against a real `cubicle serve`: log in, manage agents, open a chat,
// use the computer panel (the server's answer is the truth), phone width, settings, log out.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  adminUser,
  desktopViewport,
  launchBrowser,
  logIn,
  missingPrerequisite,
  openConfigure,
  phoneViewport,
  screenshot,
  startServer,
  unexplainedProblems,
  watchPage,
} from './harness.mjs';

const skip = missingPrerequisite();

describe('web UI', { skip: skip || false }, () => {
  let server;
  let browser;
  let context; // the signed-in desktop-width browser
  let page;
  let problems;
  let agentId;

  /** GET through the browser's session, as the UI sees the server. */
  const api = async (path) => {
    const res = await context.request.get(`${server.url}${path}`);
    assert.equal(res.status(), 200, `GET ${path}`);
    return res.json();
  };

  /** Waits until the panel shows no request in flight. */
  const settled = () => page.locator('.status-line', { hasText: /^Saved: / }).waitFor();

  before(async () => {
    server = await startServer();
    browser = await launchBrowser();
    context = await browser.newContext({ viewport: desktopViewport });
    page = await context.newPage();
    problems = watchPage(page);
  });

  after(async () => {
    await browser?.close();
    await server?.stop();
  });

  test('log in', async () => {
    await logIn(page, server.url);
    assert.match(await page.locator('#topbar-user').textContent(), new RegExp(adminUser));
    await page.locator('#agents-empty').waitFor();
  });

  test('create, rename and delete agents', async () => {
    for (const name of ['Researcher', 'Scratch']) {
      await page.fill('#agent-create-name', name);
      await page.click('#agent-create-submit');
      await page.locator('.agent-row', { hasText: name }).waitFor();
    }
    const { agents } = await api('/api/app/agents');
    assert.deepEqual(agents.map((a) => a.name).sort(), ['Researcher', 'Scratch']);
    const researcher = agents.find((a) => a.name === 'Researcher');
    agentId = researcher.id;
    assert.equal(researcher.allowHostEnvironment, false);

    // Rename "Scratch" inline.
    const scratch = agents.find((a) => a.name === 'Scratch');
    const row = page.locator(`.agent-row[data-agent-id="${scratch.id}"]`);
    await row.getByRole('button', { name: 'Rename Scratch' }).click();
    await page.fill(`#rename-${scratch.id}`, 'Scratch pad');
    await row.getByRole('button', { name: 'Save' }).click();
    await row.locator('.agent-name', { hasText: 'Scratch pad' }).waitFor();
    assert.equal((await api(`/api/app/agents/${scratch.id}`)).name, 'Scratch pad');

    // Delete asks first; cancelling keeps the agent.
    await row.getByRole('button', { name: 'Delete Scratch pad' }).click();
    await page.locator('dialog[open]').waitFor();
    await page.locator('dialog[open]').getByRole('button', { name: 'Cancel' }).click();
    await page.locator('dialog').waitFor({ state: 'detached' });
    assert.equal((await api('/api/app/agents')).agents.length, 2);

    await row.getByRole('button', { name: 'Delete Scratch pad' }).click();
    await page.click('#confirm-button');
    await row.waitFor({ state: 'detached' });
    const left = (await api('/api/app/agents')).agents;
    assert.deepEqual(
      left.map((a) => a.id),
      [agentId],
    );
    const gone = await context.request.get(`${server.url}/api/app/agents/${scratch.id}`);
    assert.equal(gone.status(), 404);
  });

  test('open the chat: computer panel with the selector and the empty state', async () => {
    await page.locator('.agent-link', { hasText: 'Researcher' }).click();
    await page.waitForURL(new RegExp(`#/agents/${agentId}$`));
    await page.locator('#chat-title', { hasText: 'Researcher' }).waitFor();
    // The composer is ready for a message.
    assert.equal(await page.locator('#chat-input').isDisabled(), false);
    const toggle = page.locator('#computer-toggle');
    if ((await toggle.getAttribute('aria-expanded')) !== 'true') await toggle.click();
    await page.locator('#computer-panel').waitFor();
    // Screen first: the computer type is under "Configure", collapsed until opened.
    assert.equal(await page.locator('#computer-selector').isVisible(), false);
    await openConfigure(page);
    assert.equal(await page.locator('#computer-selector').isVisible(), true);
    assert.equal(await page.locator('input[name=computer]').count(), 6);
    // The selector shows the type the server gave the new agent (its default).
    const created = await api(`/api/app/agents/${agentId}`);
    assert.equal(await page.locator(`input[name=computer][value=${created.computer}]`).isChecked(), true);
    assert.equal(await page.locator('input[name=computer]:checked').count(), 1);
    // A new agent uses a Local VM: the panel shows the desktop controls (no desktop yet).
    await page.locator('#local-vm-panel').waitFor();
    assert.match(await page.locator('#vm-state').textContent(), /no desktop/);

    // The checkbox is offered only next to a VM.
    await page.check('input[name=computer][value=none]');
    await page.locator('.status-line', { hasText: /^Saved: None$/ }).waitFor();
    const empty = page.locator('#computer-empty');
    assert.equal(await empty.isVisible(), true);
    assert.match(await empty.textContent(), /No computer \(None\)/);
    assert.equal(await page.locator('#allow-host-environment').count(), 0);
    assert.equal((await api(`/api/app/agents/${agentId}`)).computer, 'none');

    // The top-right button hides and shows the panel.
    await toggle.click();
    await page.locator('#computer-panel').waitFor({ state: 'detached' });
    assert.equal(await toggle.getAttribute('aria-expanded'), 'false');
    await toggle.click();
    await page.locator('#computer-panel').waitFor();
  });

  test('Local VM + allow host, then Browser only clears the checkbox', async () => {
    await page.check('input[name=computer][value=vm]');
    const allow = page.locator('#allow-host-environment');
    await allow.waitFor();
    await settled();
    assert.equal(await allow.isChecked(), false);
    let a = await api(`/api/app/agents/${agentId}`);
    assert.equal(a.computer, 'vm');
    assert.equal(a.allowHostEnvironment, false);

    await allow.check();
    await page.locator('.status-line', { hasText: 'Saved: Local VM + host environment' }).waitFor();
    a = await api(`/api/app/agents/${agentId}`);
    assert.equal(a.computer, 'vm', 'checking the box keeps the VM type');
    assert.equal(a.allowHostEnvironment, true);
    await screenshot(page, 'agent-chat-desktop');

    await page.check('input[name=computer][value=browser]');
    await allow.waitFor({ state: 'detached' });
    await page.locator('.status-line', { hasText: 'Saved: Browser only' }).waitFor();
    a = await api(`/api/app/agents/${agentId}`);
    assert.equal(a.computer, 'browser');
    assert.equal(a.allowHostEnvironment, false, 'the server cleared the flag');

    // After a reload the page shows what the server kept.
    await page.reload();
    await page.locator('#computer-panel').waitFor();
    assert.equal(await page.locator('input[name=computer][value=browser]').isChecked(), true);
    assert.equal(await page.locator('#allow-host-environment').count(), 0);

    // Switching back to a VM does not re-check the box.
    await page.check('input[name=computer][value=vm]');
    await allow.waitFor();
    await page.locator('.status-line', { hasText: /^Saved: Local VM$/ }).waitFor();
    assert.equal(await allow.isChecked(), false);
    a = await api(`/api/app/agents/${agentId}`);
    assert.deepEqual([a.computer, a.allowHostEnvironment], ['vm', false]);

    // Put the screenshot state back for the phone view: VM with host environment.
    await allow.check();
    await page.locator('.status-line', { hasText: 'Saved: Local VM + host environment' }).waitFor();
  });

  test('the server rejects an invalid selection and nothing changes', async () => {
    const res = await context.request.put(`${server.url}/api/app/agents/${agentId}/computer-selection`, {
      data: { computer: 'quantum', allowHostEnvironment: true },
      headers: { Origin: server.url },
    });
    assert.equal(res.status(), 400);
    assert.equal((await res.json()).code, 'invalid');
    const a = await api(`/api/app/agents/${agentId}`);
    assert.deepEqual([a.computer, a.allowHostEnvironment], ['vm', true]);
  });

  test('phone width: chat with the computer panel', async () => {
    const phone = await browser.newContext({
      viewport: phoneViewport,
      isMobile: true,
      hasTouch: true,
      storageState: await context.storageState(),
    });
    const p = await phone.newPage();
    const phoneProblems = watchPage(p);
    await p.goto(`${server.url}/#/agents/${agentId}`);
    await p.locator('#chat-title', { hasText: 'Researcher' }).waitFor();
    // The agent list is a drawer on phones.
    assert.equal(await p.locator('#agent-sidebar').isVisible(), true); // in the DOM, off-screen
    const box = await p.locator('#agent-sidebar').boundingBox();
    assert.equal(box.x + box.width <= 0, true, 'sidebar is off-screen until opened');

    // SPEC §1.8: the computer icon opens a black full-screen view; an agent without a desktop
    // shows a hint to configure it on the desktop, and phones never choose the environment.
    await screenshot(p, 'agent-chat-phone-conversation');
    const toggle = p.locator('#computer-toggle');
    await toggle.click();
    await p.locator('#mobile-computer').waitFor();
    await p.locator('#mobile-no-computer').waitFor();
    assert.match(await p.locator('#mobile-no-computer').textContent(), /Configure a computer for this agent on the desktop/);
    assert.equal(await p.locator('#computer-selector').count(), 0);
    const bg = await p.locator('#mobile-computer').evaluate((el) => getComputedStyle(el).backgroundColor);
    assert.equal(bg, 'rgb(0, 0, 0)');
    const width = await p.evaluate(() => document.documentElement.scrollWidth);
    assert.equal(width <= phoneViewport.width, true, `no horizontal scroll (scrollWidth ${width})`);
    await screenshot(p, 'agent-chat-phone');

    await p.locator('#mobile-close').click();
    await p.locator('#mobile-computer').waitFor({ state: 'detached' });
    await p.getByRole('button', { name: 'Show agents' }).click();
    await p.waitForFunction(() => document.getElementById('agent-sidebar').getBoundingClientRect().left >= 0);
    assert.deepEqual(await unexplainedProblems(phoneProblems, phone, server.url, agentId), []);
    await phone.close();
  });

  test('settings: the Local VM section shows the engine report', async () => {
    await page.click('#settings-link');
    await page.waitForURL(/#\/settings\/local-vm$/);
    const table = page.locator('#doctor-table');
    await table.waitFor();
    const rows = table.locator('tbody tr[data-status]');
    const n = await rows.count();
    assert.equal(n > 0, true, 'at least one check');
    const report = await api('/api/app/admin/doctor');
    assert.equal(n, report.checks.length, 'one row per check of the server');
    for (let i = 0; i < n; i++) {
      assert.match(await rows.nth(i).getAttribute('data-status'), /^(ok|warn|fail)$/);
    }
    await page.locator('#policy-card').waitFor();
    await page.locator('#prepare-notice').waitFor();
    assert.match(await page.locator('#prepare-notice').textContent(), /stops all VM tasks and running desktops/);
  });

  test('settings: image sources refuse a bad digest and save a mirror', async () => {
    const card = page.locator('#sources-card');
    await card.waitFor();
    const before = (await api('/api/app/admin/local-vm')).imageSources;
    assert.equal(before.cursor.digestFrom, 'default');
    assert.match(await page.locator('#source-cursor-in-force').textContent(), new RegExp(before.cursor.digest));
    assert.equal(await page.locator('#source-cursor-digest').getAttribute('placeholder'), before.cursor.inherited.digest);

    // A digest that is not sha256 + 64 hex: the server's message, and nothing saved.
    const seen = problems.length;
    await page.fill('#source-cursor-digest', 'sha256:not-hex');
    await page.click('#sources-save');
    await page.locator('#sources-error').waitFor();
    assert.match(await page.locator('#sources-error').textContent(), /cursor\.digest.*sha256:<64 lowercase hex digits>/);
    assert.deepEqual((await api('/api/app/admin/local-vm')).imageSources, before);
    // The refused request logs one "status of 400" console line: it was asked for.
    for (let i = problems.length - 1; i >= seen; i--) if (/status of 400/.test(problems[i])) problems.splice(i, 1);

    // A mirror that serves the same image.
    const digest = `sha256:${'ab'.repeat(32)}`;
    await page.fill('#source-cursor-image', 'registry.example.com:5000/mirror/universal:sand-box-latest');
    await page.fill('#source-cursor-digest', digest);
    await page.click('#sources-save');
    await page.locator('#sources-status', { hasText: /^Saved\./ }).waitFor();
    assert.equal(await page.locator('#sources-error').count(), 0);
    const saved = (await api('/api/app/admin/local-vm')).imageSources;
    assert.equal(saved.cursor.image, 'registry.example.com:5000/mirror/universal:sand-box-latest');
    assert.equal(saved.cursor.digest, digest);
    assert.equal(saved.cursor.imageFrom, 'settings');
    assert.deepEqual(saved.standard, before.standard);
    await page.locator('#source-cursor-in-force', { hasText: 'registry.example.com:5000/mirror/universal' }).waitFor();

    // Back to the defaults.
    await page.click('#sources-reset');
    await page.locator('#sources-status', { hasText: /apply again/ }).waitFor();
    assert.deepEqual((await api('/api/app/admin/local-vm')).imageSources, before);
    assert.equal(await page.locator('#source-cursor-image').inputValue(), '');
  });

  test('log out returns to the login form and ends the session', async () => {
    await page.click('#logout-button');
    await page.waitForURL(/#\/login$/);
    await page.locator('#login-username').waitFor();
    const me = await context.request.get(`${server.url}/api/auth/me`);
    assert.equal(me.status(), 401);
    // Back to an app page: still the login form.
    await page.goto(`${server.url}/#/agents/${agentId}`);
    await page.waitForURL(/#\/login$/);
  });

  test('no page errors', async () => {
    // The session ended with the log out test: ask the server with a fresh login.
    await logIn(page, server.url);
    assert.deepEqual(await unexplainedProblems(problems, context, server.url, agentId), []);
  });
});

// The full flow with a real desktop (issue 5 item 9): Settings → prepare the standard image
// (or reuse it) → agent chat → create the desktop → live screen (canvas not blank) → take
// over → open a terminal with a shortcut and type a command with Chinese text → the screen
// changes → hand back → recreate → the file the command wrote is still in the workspace.
//
// Runs only with CUBICLE_E2E_DESKTOP=1 (it needs the container engine and builds or reuses
// the desktop image, minutes when nothing is cached). Under CUBICLE_REQUIRE_ALL=1 it is never
// skipped silently: with CUBICLE_E2E_DESKTOP unset it fails and says why; only an explicit
// CUBICLE_E2E_DESKTOP=0 (visible in the CI script) skips it.
// With CUBICLE_GUEST_LINK=exec it checks that the desktop is reached over the exec link.
// It removes the desktop container it created and then its two volumes (work files and browser
// profile, which the product keeps by design, SPEC §1.5) so runs leave nothing behind.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { desktopViewport, launchBrowser, logIn, linkSuffix, missingPrerequisite, removeDesktop, screenshot, startServer, watchPage } from './harness.mjs';

let skip = missingPrerequisite();
if (!skip && process.env.CUBICLE_E2E_DESKTOP !== '1') {
  skip = 'set CUBICLE_E2E_DESKTOP=1 to run the real-desktop flow (needs Podman or Docker and the desktop image)';
  if (process.env.CUBICLE_REQUIRE_ALL === '1' && process.env.CUBICLE_E2E_DESKTOP !== '0') {
    throw new Error(`CUBICLE_REQUIRE_ALL=1 and ${skip}; CUBICLE_E2E_DESKTOP=0 opts out explicitly`);
  }
  if (process.env.CUBICLE_E2E_DESKTOP === '0') skip = `CUBICLE_E2E_DESKTOP=0: the real-desktop flow is switched off (${skip})`;
}

/** Samples the canvas: how many distinct colours (a blank screen has ~1). */
const canvasColours = (page, sel) =>
  page.locator(sel).evaluate((c) => {
    const g = c.getContext('2d');
    const d = g.getImageData(0, 0, c.width, c.height).data;
    const seen = new Set();
    for (let i = 0; i < d.length; i += 4 * 97) seen.add((d[i] >> 4) * 256 + (d[i + 1] >> 4) * 16 + (d[i + 2] >> 4));
    return seen.size;
  });

/** A cheap fingerprint of the canvas, to see the screen change. */
const canvasHash = (page, sel) =>
  page.locator(sel).evaluate((c) => {
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let h = 0;
    for (let i = 0; i < d.length; i += 4 * 31) h = (h * 31 + d[i] + d[i + 1] * 7 + d[i + 2] * 13) >>> 0;
    return h;
  });

describe('real desktop flow' + linkSuffix, { skip: skip || false, timeout: 30 * 60_000 }, () => {
  let server;
  let browser;
  let context;
  let page;
  let problems;
  let agent;
  let volumes = [];
  const marker = `cubicle-e2e-${Date.now()}`;

  const api = async (path) => {
    const res = await context.request.get(`${server.url}${path}`);
    assert.equal(res.status(), 200, `GET ${path}: ${await res.text()}`);
    return res.json();
  };

  before(async () => {
    server = await startServer();
    browser = await launchBrowser();
    context = await browser.newContext({ viewport: desktopViewport });
    page = await context.newPage();
    problems = watchPage(page);
    await logIn(page, server.url);
  });

  after(async () => {
    await removeDesktop(context, server, agent, volumes);
    await browser?.close();
    await server?.stop();
  });

  test('prepare the standard image from Settings (reusing a compatible one)', { timeout: 25 * 60_000 }, async () => {
    await page.goto(`${server.url}/#/settings/local-vm`);
    await page.locator('#prepare-card').waitFor();
    await page.selectOption('#prepare-image', 'standard');
    await page.click('#prepare-submit');
    // Progress shows while it runs; it ends prepared (or with the server's error).
    await page.waitForFunction(
      () => {
        const li = document.querySelector('#image-list li[data-image="standard"]');
        const running = li?.querySelector('[role=progressbar]');
        return (
          document.getElementById('prepare-error') ||
          (li && !running && (li.dataset.prepared === '1' || li.querySelector('.form-error')))
        );
      },
      null,
      { timeout: 25 * 60_000, polling: 1000 },
    );
    const st = await api('/api/app/admin/local-vm');
    const std = st.images.find((i) => i.imageKey === 'standard');
    assert.equal(std.prepared, true, `standard prepared: ${JSON.stringify(std)}`);
    await screenshot(page, 'desktop-settings-prepared');
  });

  test('create the desktop from the chat panel and see the live screen', { timeout: 5 * 60_000 }, async (t) => {
    const res = await context.request.post(`${server.url}/api/app/agents`, { data: { name: 'Desk' }, headers: { Origin: server.url } });
    assert.equal(res.status(), 201);
    agent = await res.json();
    await page.goto(`${server.url}/#/agents/${agent.id}`);
    const toggle = page.locator('#computer-toggle');
    if ((await toggle.getAttribute('aria-expanded')) !== 'true') await toggle.click();
    await page.locator('#vm-image option[value="standard"]').waitFor({ state: 'attached' });
    await page.selectOption('#vm-image', 'standard');
    await page.click('#vm-create');
    await page.locator('#vm-state', { hasText: 'running' }).waitFor({ timeout: 4 * 60_000 });
    const { desktop } = await api(`/api/app/agents/${agent.id}/local-vm`);
    volumes = [desktop.workspaceVolume, desktop.browserProfileVolume].filter(Boolean);
    t.diagnostic(`desktop container ${desktop.container}, volumes ${desktop.workspaceVolume} ${desktop.browserProfileVolume}, guest link ${desktop.guestLink}`);
    // The guest link CUBICLE_GUEST_LINK asked for (scripts/test.sh runs this flow with each).
    const wantLink = process.env.CUBICLE_GUEST_LINK || 'socket';
    assert.equal(desktop.guestLink, wantLink === 'auto' ? 'socket' : wantLink, `guest link: ${JSON.stringify(desktop)}`);
    assert.equal(desktop.health, 'ok', `desktop health: ${JSON.stringify(desktop)}`);
    const sel = '.screen-panel .screen-canvas';
    await page.waitForFunction((s) => Number(document.querySelector(s)?.dataset.frames) >= 1, sel, { timeout: 60_000 });
    // The first frames may show the desktop still starting (black): wait for a real screen.
    const deadline = Date.now() + 60_000;
    let colours;
    while ((colours = await canvasColours(page, sel)) <= 3 && Date.now() < deadline) await page.waitForTimeout(500);
    assert.equal(colours > 3, true, `the live screen is not blank (${colours} colours)`);
    await screenshot(page, 'desktop-chat-panel');
  });

  test('take over, open a terminal with a shortcut and type a command with Chinese text', { timeout: 3 * 60_000 }, async (t) => {
    // Every refusal the channel sends is reported.
    const refusals = [];
    page.on('websocket', (ws) =>
      ws.on('framereceived', (f) => {
        if (typeof f.payload === 'string' && f.payload.includes('"type":"error"')) refusals.push(f.payload);
      }),
    );
    await page.click('#vm-open');
    const view = '#interactive-desktop';
    await page.locator(`${view} [data-action="hand-back"]`).waitFor({ timeout: 30_000 });
    const sel = `${view} .screen-canvas`;
    await page.waitForFunction((s) => Number(document.querySelector(s)?.dataset.frames) >= 1, sel);
    const before = await canvasHash(page, sel);
    await page.locator(sel).focus();
    await page.keyboard.press('Control+Alt+T');
    // The terminal opens (slow on a loaded machine): wait for the screen to change.
    const opened = Date.now() + 20_000;
    while (Date.now() < opened && (await canvasHash(page, sel)) === before) await page.waitForTimeout(250);
    await page.waitForTimeout(4000); // let the terminal finish drawing and take focus
    t.diagnostic(`refusals so far: ${JSON.stringify(refusals)}`);
    assert.deepEqual(refusals, [], 'no input was refused');
    await page.fill(`${view} .screen-text`, `echo ${marker} 你好 > ~/workspace/e2e.txt`);
    await page.click(`${view} .text-entry button`);
    // A single-line box has no newline: press Enter with the shortcut button.
    await page.click(`${view} .shortcut-row button:text-is("Enter")`);
    await page.waitForFunction(
      ([s, h]) => {
        const c = document.querySelector(s);
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let x = 0;
        for (let i = 0; i < d.length; i += 4 * 31) x = (x * 31 + d[i] + d[i + 1] * 7 + d[i + 2] * 13) >>> 0;
        return x !== h;
      },
      [sel, before],
      { timeout: 30_000, polling: 250 },
    );
    await page.waitForTimeout(1500);
    await screenshot(page, 'desktop-interactive');
    assert.deepEqual(refusals, [], 'no input was refused');
    await page.click(`${view} [data-action="hand-back"]`);
    await page.locator(`${view} [data-action="take-over"]`).waitFor();
    await page.click('#desktop-close');
  });

  test('recreate keeps the workspace file', { timeout: 5 * 60_000 }, async () => {
    await page.click('#vm-recreate');
    await page.locator('#vm-state', { hasText: 'running' }).waitFor({ timeout: 4 * 60_000 });
    const me = (await api('/api/auth/me')).user;
    const res = await context.request.post(`${server.url}/api/app/chat`, {
      data: { sessionId: `e2e-${Date.now()}`, userId: me.id, agentId: agent.id, input: '/shell cat ~/workspace/e2e.txt' },
      headers: { Origin: server.url, Accept: 'text/event-stream' },
      timeout: 120_000,
    });
    const text = await res.text();
    assert.equal(res.status(), 200, text);
    assert.match(text, new RegExp(`${marker} 你好`), 'the file survived the recreate');
  });

  test('no page errors', () => {
    assert.deepEqual(problems, []);
  });
});

// The page as the Wails window runs it, against a real `cubicle serve`: the desktop bindings
// (window.go.app.App.Connection/Ready/Navigated, window.runtime.EventsOn) are stood in by an
// init script, so the page must skip the login, send the bearer token with no cookies, call
// Ready once, and follow the menu's "navigate" event. The real window is tested by app/.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  adminPassword,
  adminUser,
  desktopViewport,
  launchBrowser,
  missingPrerequisite,
  startServer,
  watchPage,
} from './harness.mjs';

const skip = missingPrerequisite();

/** Logs in over the API and returns the session token (what the desktop backend hands out). */
async function sessionToken(url) {
  const res = await fetch(`${url}/api/auth/login`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ username: adminUser, password: adminPassword }),
  });
  assert.equal(res.status, 200);
  for (const c of res.headers.getSetCookie()) {
    const [pair] = c.split(';');
    const eq = pair.indexOf('=');
    if (eq > 0 && pair.slice(eq + 1) !== '') return pair.slice(eq + 1);
  }
  throw new Error('login set no session cookie');
}

/** A browser context whose pages see stand-in Wails bindings. */
async function desktopContext(browser, url, token) {
  const context = await browser.newContext({ viewport: desktopViewport });
  await context.addInitScript(
    ([url, token]) => {
      const d = { ready: 0, navigated: [], handlers: {} };
      window.__desktop = d;
      window.go = {
        app: {
          App: {
            Connection: () => Promise.resolve({ url, token }),
            Ready: () => {
              d.ready++;
              return Promise.resolve();
            },
            Navigated: (route) => {
              d.navigated.push(route);
              return Promise.resolve();
            },
          },
        },
      };
      window.runtime = {
        EventsOn: (name, cb) => {
          d.handlers[name] = cb;
          return () => {};
        },
      };
    },
    [url, token],
  );
  return context;
}

describe('desktop shell', { skip: skip || false }, () => {
  let server;
  let browser;

  before(async () => {
    server = await startServer();
    browser = await launchBrowser();
  });

  after(async () => {
    await browser?.close();
    await server?.stop();
  });

  test('skips the login, uses the bearer token, reports Ready, follows navigate', async () => {
    const token = await sessionToken(server.url);
    const context = await desktopContext(browser, server.url, token);
    const page = await context.newPage();
    const problems = watchPage(page);
    const apiRequests = [];
    page.on('request', (req) => {
      if (new URL(req.url()).pathname.startsWith('/api/')) apiRequests.push(req);
    });

    await page.goto(`${server.url}/`);
    await page.locator('#agent-create-name').waitFor();
    assert.doesNotMatch(page.url(), /#\/login/);
    assert.match(await page.locator('#topbar-user').textContent(), new RegExp(adminUser));
    assert.equal(await page.locator('#logout-button').count(), 0, 'no log out in the desktop window');
    await page.waitForFunction(() => window.__desktop.ready === 1);

    // A state-changing call works with the token alone.
    await page.fill('#agent-create-name', 'Desk agent');
    await page.click('#agent-create-submit');
    await page.locator('.agent-row', { hasText: 'Desk agent' }).waitFor();

    assert.equal(apiRequests.length >= 3, true, 'me, list and create went out');
    for (const req of apiRequests) {
      const h = await req.allHeaders();
      assert.equal(h['authorization'], `Bearer ${token}`, `${req.method()} ${req.url()} carries the token`);
      assert.equal(h['cookie'], undefined, `${req.method()} ${req.url()} carries no cookie`);
    }

    // The application menu's "Local VM settings…" emits navigate.
    await page.evaluate(() => window.__desktop.handlers.navigate('#/settings/local-vm'));
    await page.waitForURL(/#\/settings\/local-vm$/);
    await page.locator('#doctor-table').waitFor();
    // A payload that is not one of our routes is ignored.
    await page.evaluate(() => window.__desktop.handlers.navigate('javascript:alert(1)'));
    await page.evaluate(() => window.__desktop.handlers.navigate(42));
    assert.match(page.url(), /#\/settings\/local-vm$/);

    const navigated = await page.evaluate(() => window.__desktop.navigated);
    assert.equal(navigated.includes('#/settings/local-vm'), true, `Navigated calls: ${navigated}`);
    assert.equal(await page.evaluate(() => window.__desktop.ready), 1, 'Ready is called once');
    assert.deepEqual(problems, []);
    await context.close();
  });

  test('a refused token shows an error, not the web login', async () => {
    const context = await desktopContext(browser, server.url, 'not-a-valid-token');
    const page = await context.newPage();
    await page.goto(`${server.url}/#/agents`);
    const alert = page.locator('.boot-error');
    await alert.waitFor();
    assert.match(await alert.textContent(), /refused this window's credentials/);
    assert.doesNotMatch(page.url(), /#\/login/);
    assert.equal(await page.locator('#login-username').count(), 0);
    await page.waitForFunction(() => window.__desktop.ready === 1);
    await context.close();
  });
});

// Browser tests of signing in and out against a real `cubicle serve`: wrong password, a page
// load without a session, the API without a cookie, and returning to the page asked for.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  adminPassword,
  adminUser,
  desktopViewport,
  launchBrowser,
  missingPrerequisite,
  screenshot,
  startServer,
  watchPage,
} from './harness.mjs';

const skip = missingPrerequisite();

describe('authentication', { skip: skip || false }, () => {
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

  test('the API without a cookie answers 401, health answers without one', async () => {
    const health = await fetch(`${server.url}/api/health`);
    assert.equal(health.status, 200);
    const body = await health.json();
    assert.equal(body.ok, true);
    assert.equal(typeof body.version, 'string');

    for (const path of ['/api/auth/me', '/api/app/agents', '/api/app/admin/doctor']) {
      const res = await fetch(`${server.url}${path}`);
      assert.equal(res.status, 401, `${path} without a cookie`);
      const err = await res.json();
      assert.equal(err.code, 'unauthenticated', `${path} error code`);
      assert.equal(typeof err.error, 'string');
    }
  });

  test('a page load with no cookie lands on the login form', async () => {
    const context = await browser.newContext({ viewport: desktopViewport });
    const page = await context.newPage();
    const problems = watchPage(page);
    await page.goto(`${server.url}/`);
    await page.waitForURL(/#\/login$/);
    await page.locator('#login-username').waitFor();
    assert.equal(await page.locator('#login-submit').isVisible(), true);
    assert.equal(await page.locator('.topbar').count(), 0, 'no app chrome before login');
    await screenshot(page, 'login');
    assert.deepEqual(problems, []);
    await context.close();
  });

  test('a wrong password shows the error and stays on login', async () => {
    const context = await browser.newContext({ viewport: desktopViewport });
    const page = await context.newPage();
    const problems = watchPage(page);
    await page.goto(`${server.url}/#/login`);
    await page.fill('#login-username', adminUser);
    await page.fill('#login-password', adminPassword + '-wrong');
    await page.click('#login-submit');
    const error = page.locator('#login-error');
    await error.waitFor();
    assert.equal((await error.textContent()).trim(), 'Wrong username or password');
    assert.match(page.url(), /#\/login$/);
    assert.equal(await page.inputValue('#login-password'), '', 'password field cleared');
    const cookies = await context.cookies();
    assert.deepEqual(
      cookies.map((c) => c.name),
      [],
      'no session cookie after a failed login',
    );
    const me = await context.request.get(`${server.url}/api/auth/me`);
    assert.equal(me.status(), 401);
    assert.deepEqual(problems, []);
    await context.close();
  });

  test('a deep link survives the login and the session cookie is HttpOnly', async () => {
    const context = await browser.newContext({ viewport: desktopViewport });
    const page = await context.newPage();
    const problems = watchPage(page);
    await page.goto(`${server.url}/#/settings/local-vm`);
    await page.waitForURL(/#\/login$/);
    await page.fill('#login-username', adminUser);
    await page.fill('#login-password', adminPassword);
    await page.click('#login-submit');
    await page.waitForURL(/#\/settings\/local-vm$/);
    await page.locator('#local-vm-settings').waitFor();
    assert.equal((await page.locator('#topbar-user').textContent()).includes(adminUser), true);

    const cookies = await context.cookies();
    assert.equal(cookies.length >= 1, true, 'a session cookie was set');
    for (const c of cookies) assert.equal(c.httpOnly, true, `cookie ${c.name} is HttpOnly`);
    assert.equal(await page.evaluate(() => document.cookie), '', 'the page cannot read the session');

    // Losing the session (cookie gone) sends the next API call back to login: "Check again"
    // once the engine checks the page started have ended (they can take half a minute on a
    // loaded machine), or the page's own polling if that comes first (the button is gone then).
    await context.clearCookies();
    page.click('#doctor-refresh', { timeout: 120_000 }).catch(() => {});
    await page.waitForURL(/#\/login$/, { timeout: 120_000 });
    await page.locator('#login-username').waitFor();
    assert.deepEqual(problems, []);
    await context.close();
  });
});

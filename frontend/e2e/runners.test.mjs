// Browser test of runner updates (Settings → Runners) against a real `cubicle serve` and a real
// `cubicle runner` process (no engine needed). The server offers a version "e2e-next" from a
// dist directory whose binary is really this build (so it says another version): the channels
// editor rolls it out, the runner's row offers the update, and Update is refused by the runner
// — it checks that the new binary runs as the version it was promised — which keeps running
// its old version, connected.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { binPath, desktopViewport, launchBrowser, logIn, missingPrerequisite, screenshot, startServer } from './harness.mjs';

const skip = missingPrerequisite();
const goos = { linux: 'linux', darwin: 'darwin', win32: 'windows' }[process.platform];
const goarch = { x64: 'amd64', arm64: 'arm64' }[process.arch];

describe('runner updates', { skip: skip || false }, () => {
  let server;
  let browser;
  let page;
  let runner;
  let runnerLog = '';
  const dist = mkdtempSync(join(tmpdir(), 'cubicle-e2e-dist-'));
  const runnerDir = mkdtempSync(join(tmpdir(), 'cubicle-e2e-runner-'));

  before(async () => {
    mkdirSync(join(dist, 'e2e-next'));
    const name = `cubicle-${goos}-${goarch}${goos === 'windows' ? '.exe' : ''}`;
    copyFileSync(binPath, join(dist, 'e2e-next', name));
    server = await startServer({ env: { CUBICLE_DIST_DIR: dist } });
    browser = await launchBrowser();
    page = await (await browser.newContext({ viewport: desktopViewport })).newPage();
    await logIn(page, server.url);
  });

  after(async () => {
    runner?.kill('SIGTERM');
    await browser?.close();
    await server?.stop();
    rmSync(dist, { recursive: true, force: true });
    rmSync(runnerDir, { recursive: true, force: true });
  });

  const api = async (method, path, body) => {
    const res = await page.request.fetch(`${server.url}${path}`, {
      method,
      data: body,
      headers: { Origin: server.url },
    });
    const text = await res.text();
    return { status: res.status(), body: text ? JSON.parse(text) : null };
  };

  test('the channels roll out a version, the row offers it, a bad binary is refused and the runner keeps running', async () => {
    const created = await api('POST', '/api/app/admin/runners', { name: 'upd-box' });
    assert.equal(created.status, 201);
    const { id, token } = created.body;
    runner = spawn(binPath, ['runner', '--server', server.url, '--token', token, '--data-dir', runnerDir, '--engine', 'none'], {
      env: { ...process.env, CUBICLE_RUNNER_TOKEN: '' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    runner.stdout.on('data', (d) => (runnerLog += d));
    runner.stderr.on('data', (d) => (runnerLog += d));

    await page.goto(`${server.url}/#/settings/runners`);
    const row = page.locator('#runners-table tr', { hasText: id });
    await page.locator(`#runners-table tr[data-status="connected"]`, { hasText: id }).waitFor({ timeout: 60_000 });
    const version = (await api('GET', '/api/app/admin/runners')).body.runners.find((r) => r.id === id).version;
    assert.equal(await row.locator('button.runner-update').count(), 0, 'no update while it runs the wanted version');

    // Roll e2e-next out to every release runner.
    await page.locator('#channel-release select').selectOption('e2e-next');
    await page.locator('#channel-release input[type="number"]').fill('100');
    await page.click('#channels-save');
    await page.locator('#runner-channels [role="status"]', { hasText: 'Saved' }).waitFor();
    assert.equal((await api('GET', '/api/app/admin/runner-channels')).body.release.version, 'e2e-next');
    await row.locator('.runner-update-available', { hasText: 'e2e-next' }).waitFor();

    // Update: the binary is really this build, so the runner refuses it and says why.
    await row.locator('button.runner-update').click();
    const err = page.locator('#runners-error');
    await err.waitFor({ timeout: 120_000 });
    const text = (await err.textContent()) ?? '';
    assert.match(text, /upd-box/);
    assert.match(text, new RegExp(`kept version ${version.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`));
    assert.match(text, /want version e2e-next: refused/);
    await screenshot(page, 'settings-runners-update-refused');
    const after = (await api('GET', '/api/app/admin/runners')).body.runners.find((r) => r.id === id);
    assert.equal(after.status, 'connected', runnerLog);
    assert.equal(after.version, version);
    assert.equal(runner.exitCode, null, `the runner ended:\n${runnerLog}`);
  });
});

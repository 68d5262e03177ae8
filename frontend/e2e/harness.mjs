// Shared set-up for the browser tests: a real `cubicle serve` on a free loopback port with a
// temporary data dir, and headless Debian Chromium driven by playwright-core.
//
// Environment:
//   CUBICLE_BIN            the binary (default ../bin/cubicle, i.e. the repo's bin/)
//   CUBICLE_CHROMIUM       the browser (default /usr/bin/chromium)
//   CUBICLE_REQUIRE_ALL=1  a missing binary or browser fails the test instead of skipping it
//   CUBICLE_E2E_PORTS      port range to pick from, "FROM-TO" (default 18100-18199)

import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const here = dirname(fileURLToPath(import.meta.url));
/** The frontend directory. */
export const frontendDir = resolve(here, '..');
/** The repository root. */
export const repoRoot = resolve(frontendDir, '..');
/** Where screenshots go (the repo's test-artifacts/). */
export const artifactsDir = join(repoRoot, 'test-artifacts');

export const binPath = resolve(frontendDir, process.env.CUBICLE_BIN || '../bin/cubicle');
export const chromiumPath = process.env.CUBICLE_CHROMIUM || '/usr/bin/chromium';

export const adminUser = 'e2e-admin';
export const adminPassword = 'e2e-Passw0rd-' + Math.random().toString(36).slice(2, 10);

export const desktopViewport = { width: 1440, height: 900 };
export const phoneViewport = { width: 390, height: 844 };

/**
 * Why the browser tests cannot run here, or '' when they can. With CUBICLE_REQUIRE_ALL=1 a
 * missing piece is a failure, never a skip (CI must not count a skip as a pass).
 */
export function missingPrerequisite() {
  const missing = [];
  if (!existsSync(binPath)) missing.push(`cubicle binary not found at ${binPath} (build it: make build)`);
  if (!existsSync(chromiumPath)) missing.push(`Chromium not found at ${chromiumPath} (apt-get install chromium)`);
  const why = missing.join('; ');
  if (why !== '' && process.env.CUBICLE_REQUIRE_ALL === '1') {
    throw new Error(`CUBICLE_REQUIRE_ALL=1 and ${why}`);
  }
  return why;
}

function portFree(port) {
  return new Promise((res) => {
    const srv = createServer();
    srv.once('error', () => res(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => res(true)));
  });
}

/** A free port on 127.0.0.1 from CUBICLE_E2E_PORTS, starting at a random offset. */
export async function freePort() {
  const [from, to] = (process.env.CUBICLE_E2E_PORTS || '18100-18199').split('-').map(Number);
  const span = to - from + 1;
  const start = Math.floor(Math.random() * span);
  for (let i = 0; i < span; i++) {
    const port = from + ((start + i) % span);
    if (await portFree(port)) return port;
  }
  throw new Error(`no free port in ${from}-${to}`);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * Starts `cubicle serve` (opts.env: extra environment) and waits until GET /api/health
 * answers. Returns { url, stop, log }.
 * stop() ends the server (SIGTERM, then SIGKILL after 5 s) and deletes its data dir.
 * The port is free when chosen, but the server listens only after its start-up (seconds on a
 * loaded machine), and other runs on the machine pick ports from the same range: a server
 * that finds its port taken meanwhile is started again on another one.
 */
export async function startServer(opts = {}) {
  for (let attempt = 1; ; attempt++) {
    try {
      return await startServerOnce(opts);
    } catch (err) {
      if (!(err instanceof PortTaken) || attempt >= 5) throw err;
    }
  }
}

class PortTaken extends Error {}

async function startServerOnce(opts) {
  const port = await freePort();
  const dataDir = mkdtempSync(join(tmpdir(), 'cubicle-e2e-'));
  const url = `http://127.0.0.1:${port}`;
  const output = [];
  const child = spawn(binPath, ['serve', '--listen', `127.0.0.1:${port}`, '--data-dir', dataDir], {
    env: {
      ...process.env,
      CUBICLE_ADMIN_USER: adminUser,
      CUBICLE_ADMIN_PASSWORD: adminPassword,
      // A test's server prepares no image on its first start unless the test asks for it.
      CUBICLE_FIRST_RUN_PREPARE: 'off',
      ...(opts.env ?? {}),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout.on('data', (d) => output.push(String(d)));
  child.stderr.on('data', (d) => output.push(String(d)));
  let exited = null;
  const exitPromise = new Promise((res) =>
    child.once('exit', (code, signal) => {
      exited = { code, signal };
      res(exited);
    }),
  );
  const log = () => output.join('');

  const stop = async () => {
    if (exited === null) {
      child.kill('SIGTERM');
      const done = await Promise.race([exitPromise, sleep(5000).then(() => null)]);
      if (done === null) {
        child.kill('SIGKILL');
        await exitPromise;
      }
    }
    rmSync(dataDir, { recursive: true, force: true });
  };

  const deadline = Date.now() + 30_000;
  for (;;) {
    if (exited !== null) {
      await stop();
      const Err = /cannot listen on .*address already in use/.test(log()) ? PortTaken : Error;
      throw new Err(`cubicle serve exited early (${JSON.stringify(exited)}):\n${log()}`);
    }
    // Only once this server says it listens: until then the port may answer for another
    // program (or run) that took it meanwhile, and this server is about to exit.
    if (log().includes(`is running at ${url}`)) {
      try {
        const res = await fetch(`${url}/api/health`, { signal: AbortSignal.timeout(10_000) });
        if (res.ok) {
          const body = await res.json();
          if (body.ok === true) break;
        }
      } catch {
        // not serving yet
      }
    }
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`cubicle serve did not answer /api/health within 30 s:\n${log()}`);
    }
    await sleep(100);
  }
  return { url, port, dataDir, stop, log };
}

/** Launches headless Chromium with the flags that work on these machines. */
export function launchBrowser() {
  return chromium.launch({
    executablePath: chromiumPath,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--no-first-run',
      '--disable-quic',
    ],
  });
}

/**
 * What this file's runs are called after: "" normally, " (exec link)" when the desktops are
 * reached over the exec link (CUBICLE_GUEST_LINK=exec: the *-exec.test.mjs files run a flow once
 * more that way, beside the others). Suite titles and artifact names carry it, so the two runs
 * of a flow neither look alike in the report nor overwrite each other's files.
 */
const overExec = process.env.CUBICLE_GUEST_LINK === 'exec';
export const linkSuffix = overExec ? ' (exec link)' : '';
/** What this file's artifacts' names end in: "" normally, "-exec" over the exec link. */
export const fileSuffix = overExec ? '-exec' : '';

/** Saves a full-page screenshot into test-artifacts/NAME.png (NAME-exec.png over the exec link) and returns its path. */
export async function screenshot(page, name) {
  mkdirSync(artifactsDir, { recursive: true });
  const path = join(artifactsDir, `${name}${fileSuffix}.png`);
  await page.screenshot({ path, fullPage: false });
  return path;
}

/**
 * Collects uncaught page errors and console errors so a test can assert there were none.
 * Chromium's own "Failed to load resource: … 401/403" lines are left out: a 401 is how the
 * app learns it is signed out, and the tests check those answers directly; so is a GET's
 * net::ERR_NETWORK_CHANGED (the host's interfaces changed; the client tries a GET once more).
 *
 * A failed resource names the request it came from: its line ends with "(METHOD path?query)",
 * and every answer of 500 or more is also written to stderr with its body, so a failure in a
 * long run says which call failed and why.
 */
export function watchPage(page) {
  const problems = [];
  const methods = new Map(); // URL → the method of its latest request
  page.on('request', (r) => methods.set(r.url(), r.method()));
  page.on('response', async (res) => {
    if (res.status() < 500) return;
    const req = res.request();
    let body = '';
    try {
      body = (await res.text()).slice(0, 500);
    } catch {
      // a stream, or the page moved on
    }
    process.stderr.write(`page: ${res.status()} ${req.method()} ${res.url()}: ${body}\n`);
  });
  page.on('pageerror', (err) => problems.push(`pageerror: ${err.message}`));
  page.on('console', (msg) => {
    if (msg.type() !== 'error') return;
    const text = msg.text();
    if (/^Failed to load resource: the server responded with a status of 40[13]\b/.test(text)) return;
    // Chromium fails the requests in flight when the host's network interfaces change (each
    // desktop's container network coming up does that); the client sends a GET once more
    // (api.ts Client.send), so only a GET's first try is left out — any other method counts.
    const url = msg.location()?.url;
    if (/^Failed to load resource: net::ERR_NETWORK_CHANGED\b/.test(text) && url && methods.get(url) === 'GET') return;
    problems.push(`console: ${text}${requestOf(text, msg.location()?.url, methods)}`);
  });
  return problems;
}

/**
 * " (METHOD path?query)" for a console line about a failed resource at url (the method is left
 * out when the page made no request event for it, e.g. its favicon), else "".
 */
function requestOf(text, url, methods) {
  if (!url || !/^Failed to load resource\b/.test(text)) return '';
  let where = url;
  try {
    const u = new URL(url);
    where = u.pathname + u.search;
  } catch {
    // not a URL: shown as it is
  }
  const method = methods.get(url);
  return ` (${method ? `${method} ` : ''}${where})`;
}

/**
 * The server's warnings and errors (its log lines at WARN or ERROR), the last max of them: what
 * a failed page assertion prints next to the page's problems, since a 5xx answer is logged
 * there with its cause.
 */
export function serverTrouble(server, max = 40) {
  const lines = (server?.log() ?? '').split('\n').filter((l) => /\blevel=(WARN|ERROR)\b/.test(l));
  return lines.slice(-max).join('\n');
}

/** Writes the server's whole log to test-artifacts/NAME-server.log (for a look after a run). */
export function saveServerLog(server, name) {
  if (!server) return;
  mkdirSync(artifactsDir, { recursive: true });
  writeFileSync(join(artifactsDir, `${name}${fileSuffix}-server.log`), server.log());
}

/** Logs in through the form and waits for the agent list. */
export async function logIn(page, url, username = adminUser, password = adminPassword) {
  await page.goto(`${url}/#/login`);
  await page.fill('#login-username', username);
  await page.fill('#login-password', password);
  await page.click('#login-submit');
  await page.waitForURL(/#\/agents$/);
}

/**
 * The page problems left after dropping the console lines caused by routes this server build
 * does not serve yet (chat answering 503, the computer websocket answering 404). Which routes
 * are missing is asked of the server, so once they land every such line counts again.
 */
export async function unexplainedProblems(problems, context, url, agentId) {
  const chatMissing = [503, 404].includes(
    (await context.request.get(`${url}/api/app/chat/sessions?agentId=${encodeURIComponent(agentId)}`)).status(),
  );
  const wsMissing =
    (await context.request.get(`${url}/api/app/agents/${encodeURIComponent(agentId)}/computer`)).status() === 404;
  return problems.filter(
    (p) =>
      !(chatMissing && /status of 503 \(Service Unavailable\)/.test(p)) &&
      !(wsMissing && /WebSocket connection to .*\/computer' failed: .*404/.test(p)),
  );
}

/** Opens the computer panel's "Configure" section (collapsed by default) if it is closed. */
export async function openConfigure(page) {
  const details = page.locator('#computer-configure');
  await details.waitFor();
  if ((await details.getAttribute('open')) === null) await details.locator('summary').click();
  await page.locator('#computer-selector').waitFor();
}

/**
 * Removes agent's desktop through the server, then the volumes it kept (the product keeps an
 * agent's workspace and browser profile by design, SPEC §1.5; a test leaves nothing behind).
 */
export async function removeDesktop(context, server, agent, volumes) {
  if (agent) {
    await context.request
      .post(`${server.url}/api/app/agents/${agent.id}/local-vm/remove`, { headers: { Origin: server.url } })
      .catch(() => undefined);
  }
  for (const v of volumes) {
    for (const engine of ['podman', 'docker']) {
      try {
        execFileSync(engine, ['volume', 'rm', v], { stdio: 'ignore', timeout: 30_000 });
        break;
      } catch {
        // not this engine, or already gone
      }
    }
  }
}

// Browser tests of the live screen UI — computer panel, interactive desktop, dual desktop and
// the phone view — against a real `cubicle serve` for login, agents and pages, with the
// desktop side played by this test: the agent's Local VM state (GET …/local-vm) and the
// computer channel websocket (docs/computer-protocol.md) are answered here, so every message
// the UI sends (take over, input with token/version/frame id, switch, hand back) is checked
// exactly, without a container engine. The real-desktop flow is e2e/desktop.test.mjs.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  desktopViewport,
  launchBrowser,
  logIn,
  missingPrerequisite,
  phoneViewport,
  screenshot,
  startServer,
  unexplainedProblems,
  watchPage,
} from './harness.mjs';

const skip = missingPrerequisite();
const W = 1280;
const H = 800;

/** A binary frame: "CBFR", version 1, header 24, encoding 1 (JPEG), 0, id, width, height, JPEG. */
function frame(id, jpeg) {
  const b = Buffer.alloc(24 + jpeg.length);
  b.write('CBFR', 0, 'latin1');
  b[4] = 1;
  b[5] = 24;
  b[6] = 1;
  b.writeBigUInt64BE(BigInt(id), 8);
  b.writeUInt32BE(W, 16);
  b.writeUInt32BE(H, 20);
  jpeg.copy(b, 24);
  return b;
}

/** The fake desktop side of one agent: status, frames, leases; records client messages. */
class FakeDesktop {
  constructor(agentId, jpeg) {
    this.agentId = agentId;
    this.jpeg = jpeg;
    this.messages = [];
    this.sockets = new Set();
    this.holder = null; // { you, name, kind }
    this.version = 1;
    this.frameId = 41;
    this.refuseWith = null; // a control holder that refuses take over
  }
  status(forYou = true) {
    const h = this.refuseWith ?? this.holder;
    return JSON.stringify({
      type: 'status',
      agentId: this.agentId,
      desktopId: `desk-${this.agentId}`,
      state: 'running',
      shared: false,
      streaming: true,
      control: h
        ? {
            kind: h.kind,
            name: h.name,
            activity: `${h.name} is controlling this computer`,
            you: h.you && forYou,
            version: this.version,
            since: new Date().toISOString(),
          }
        : null,
      serverTime: new Date().toISOString(),
    });
  }
  broadcast() {
    for (const ws of this.sockets) ws.send(this.status());
  }
  attach(ws) {
    this.sockets.add(ws);
    ws.send(this.status());
    this.frameId++;
    ws.send(frame(this.frameId, this.jpeg));
    ws.onMessage((raw) => {
      const m = JSON.parse(String(raw));
      this.messages.push(m);
      const lease = () =>
        JSON.stringify({
          type: 'lease',
          id: m.id,
          op: m.type,
          desktopId: `desk-${this.agentId}`,
          token: `tok-${this.agentId}-${this.version}`,
          version: this.version,
          expiresAt: new Date(Date.now() + 30_000).toISOString(),
          renewInSeconds: 10,
        });
      switch (m.type) {
        case 'take_over':
        case 'switch':
          if (this.refuseWith) {
            ws.send(
              JSON.stringify({
                type: 'error',
                id: m.id,
                op: m.type,
                reason: 'person_controlling',
                code: 'conflict',
                message: 'control is held by someone else',
              }),
            );
            return;
          }
          if (m.type === 'switch' && this.onSwitch) this.onSwitch(m);
          this.holder = { kind: 'person', name: 'e2e-admin', you: true };
          ws.send(lease());
          this.broadcast();
          return;
        case 'hand_back':
          this.holder = null;
          this.version++;
          ws.send(JSON.stringify({ type: 'ok', id: m.id, op: m.type }));
          this.broadcast();
          return;
        case 'renew':
          ws.send(lease());
          return;
        case 'input':
          if (m.id) ws.send(JSON.stringify({ type: 'ok', id: m.id, op: 'input' }));
          return;
      }
    });
    ws.onClose(() => this.sockets.delete(ws));
  }
  /** The server side hands control back (e.g. another desktop was switched to). */
  release() {
    this.holder = null;
    this.version++;
    this.broadcast();
  }
  inputs() {
    return this.messages.filter((m) => m.type === 'input');
  }
}

describe('live screen UI (desktop side played by the test)', { skip: skip || false }, () => {
  let server;
  let browser;
  let context;
  let page;
  let problems;
  const agents = {};
  const fakes = {};
  let jpeg;

  const installFakes = async (ctx) => {
    await ctx.route(/\/api\/app\/agents\/[^/]+\/local-vm$/, async (route) => {
      const id = decodeURIComponent(new URL(route.request().url()).pathname.split('/')[4]);
      await route.fulfill({
        status: 200,
        contentType: 'application/json',
        body: JSON.stringify({
          agentId: id,
          isolation: 'per-agent',
          images: ['standard', 'cursor'],
          desktop: {
            id: `desk-${id}`,
            scope: 'agent',
            agentId: id,
            description: 'the desktop of the test',
            fixed: false,
            imageKey: 'standard',
            imagePending: false,
            state: 'running',
          },
        }),
      });
    });
    await ctx.routeWebSocket(/\/api\/app\/agents\/[^/]+\/computer/, (ws) => {
      const id = decodeURIComponent(new URL(ws.url()).pathname.split('/')[4]);
      fakes[id].attach(ws);
    });
  };

  before(async () => {
    server = await startServer();
    browser = await launchBrowser();
    context = await browser.newContext({ viewport: desktopViewport });
    page = await context.newPage();
    problems = watchPage(page);
    // A real JPEG of a recognisable screen, made by the browser.
    await page.goto('about:blank');
    const b64 = await page.evaluate(async ([w, h]) => {
      const c = document.createElement('canvas');
      c.width = w;
      c.height = h;
      const g = c.getContext('2d');
      g.fillStyle = '#2b5797';
      g.fillRect(0, 0, w, h);
      g.fillStyle = '#fff';
      g.fillRect(100, 100, 400, 300);
      g.font = '64px sans-serif';
      g.fillText('fake desktop', 560, 420);
      return c.toDataURL('image/jpeg', 0.8).split(',')[1];
    }, [W, H]);
    jpeg = Buffer.from(b64, 'base64');
    await logIn(page, server.url);
    for (const name of ['Alpha', 'Beta']) {
      const res = await context.request.post(`${server.url}/api/app/agents`, { data: { name }, headers: { Origin: server.url } });
      assert.equal(res.status(), 201, await res.text());
      agents[name] = await res.json();
      fakes[agents[name].id] = new FakeDesktop(agents[name].id, jpeg);
    }
    await installFakes(context);
  });

  after(async () => {
    await browser?.close();
    await server?.stop();
  });

  test('panel preview draws frames with the original aspect ratio', async () => {
    await page.goto(`${server.url}/#/agents/${agents.Alpha.id}`);
    const toggle = page.locator('#computer-toggle');
    if ((await toggle.getAttribute('aria-expanded')) !== 'true') await toggle.click();
    await page.locator('#vm-state', { hasText: 'running' }).waitFor();
    const canvas = page.locator('.screen-panel .screen-canvas');
    await page.waitForFunction(() => Number(document.querySelector('.screen-panel .screen-canvas')?.dataset.frames) >= 1);
    assert.deepEqual(await canvas.evaluate((c) => [c.width, c.height]), [W, H]);
    // The canvas shows the frame: sample a pixel inside the white rectangle and the blue background.
    const px = await canvas.evaluate((c) => {
      const g = c.getContext('2d');
      return [Array.from(g.getImageData(300, 250, 1, 1).data), Array.from(g.getImageData(50, 700, 1, 1).data)];
    });
    assert.equal(px[0][0] > 230 && px[0][1] > 230 && px[0][2] > 230, true, `white at (300,250): ${px[0]}`);
    assert.equal(px[1][2] > 120 && px[1][0] < 80, true, `blue at (50,700): ${px[1]}`);
    const box = await page.locator('.screen-panel .screen-stage').boundingBox();
    assert.equal(Math.abs(box.width / box.height - W / H) < 0.02, true, `stage ${box.width}x${box.height}`);
    assert.match(await page.locator('.screen-panel .screen-who').textContent(), /view only/);
    await screenshot(page, 'chat-computer-panel-live');
  });

  test('click the preview: take over, mouse/keyboard/text/scroll carry the lease, hand back', async () => {
    const fake = fakes[agents.Alpha.id];
    await page.locator('.screen-panel .screen-canvas').click();
    await page.locator('#interactive-desktop').waitFor();
    await page.locator('#interactive-desktop [data-action="hand-back"]').waitFor();
    const takeOver = fake.messages.find((m) => m.type === 'take_over');
    assert.ok(takeOver, 'take_over sent');
    const canvas = page.locator('#interactive-desktop .screen-canvas');
    await page.waitForFunction(() => Number(document.querySelector('#interactive-desktop .screen-canvas')?.dataset.frames) >= 1);
    const box = await canvas.boundingBox();
    // Aim at screen pixel (640, 400): the centre, whatever the letterboxing.
    await page.mouse.click(box.x + box.width / 2, box.y + box.height / 2);
    await page.waitForFunction(() => true);
    await waitFor(() => fake.inputs().some((m) => m.action === 'mouse_up'));
    const down = fake.inputs().find((m) => m.action === 'mouse_down');
    assert.equal(Math.abs(down.x - 640) <= 2 && Math.abs(down.y - 400) <= 2, true, `mouse_down at ${down.x},${down.y}`);
    assert.equal(down.button, 1);
    const lease = { token: `tok-${agents.Alpha.id}-${fake.version}`, version: fake.version };
    for (const m of fake.inputs()) {
      assert.equal(m.token, lease.token);
      assert.equal(m.version, lease.version);
      assert.equal(m.frameId, fake.frameId, 'aimed at the newest frame');
    }
    // A point in the top-left corner of the picture maps to (≈0, ≈0).
    const fit = Math.min(box.width / W, box.height / H);
    const ox = (box.width - W * fit) / 2;
    const oy = (box.height - H * fit) / 2;
    await page.mouse.click(box.x + ox + 100 * fit + 0.5, box.y + oy + 100 * fit + 0.5, { button: 'right' });
    await waitFor(() => fake.inputs().filter((m) => m.action === 'mouse_down').length >= 2);
    const right = fake.inputs().filter((m) => m.action === 'mouse_down')[1];
    assert.deepEqual([Math.abs(right.x - 100) <= 1, Math.abs(right.y - 100) <= 1, right.button], [true, true, 3]);

    // Keyboard: a shortcut and plain typing go to the desktop.
    await canvas.focus();
    await page.keyboard.press('Control+Alt+T');
    await page.keyboard.type('ls');
    await page.keyboard.press('Enter');
    await waitFor(() => fake.inputs().some((m) => m.keys === 'Return'));
    const keys = fake.inputs().filter((m) => m.action === 'key' || m.action === 'type').map((m) => m.keys ?? m.text);
    assert.deepEqual(keys, ['ctrl+alt+t', 'l', 's', 'Return']);
    // Non-ASCII text through the text box.
    await page.fill('#interactive-desktop .screen-text', '你好, Cubicle');
    await page.click('#interactive-desktop .text-entry button');
    await waitFor(() => fake.inputs().some((m) => m.text === '你好, Cubicle'));
    // Scroll down three clicks.
    await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
    await page.mouse.wheel(0, 120);
    await waitFor(() => fake.inputs().some((m) => m.action === 'scroll'));
    const scroll = fake.inputs().find((m) => m.action === 'scroll');
    assert.equal(scroll.deltaY, 3);
    await screenshot(page, 'interactive-desktop');

    await page.click('#interactive-desktop [data-action="hand-back"]');
    await page.locator('#interactive-desktop [data-action="take-over"]').waitFor();
    const hb = fake.messages.find((m) => m.type === 'hand_back');
    assert.equal(hb.token, lease.token);
    // After handing back, input is not sent any more.
    const n = fake.inputs().length;
    await canvas.click();
    await page.keyboard.type('x');
    await page.waitForTimeout(300);
    assert.equal(fake.inputs().length, n, 'no input without control');
    await page.click('#desktop-close');
    await page.locator('#chat-input').waitFor();
  });

  test('refusal names who controls the desktop', async () => {
    const fake = fakes[agents.Beta.id];
    fake.refuseWith = { kind: 'person', name: 'alice', you: false };
    await page.goto(`${server.url}/#/agents/${agents.Beta.id}`);
    await page.locator('#vm-open').click();
    await page.locator('#interactive-desktop').waitFor();
    await page.locator('#interactive-desktop .screen-who', { hasText: 'alice is controlling this computer' }).waitFor();
    await page.click('#interactive-desktop [data-action="take-over"]');
    const notice = page.locator('#interactive-desktop .screen-notice');
    await notice.waitFor();
    assert.match(await notice.textContent(), /alice is controlling this computer/);
    fake.refuseWith = null;
    fake.broadcast();
    await page.click('#desktop-close');
  });

  test('dual desktop: view only on entry; taking over the other side switches from the first', async () => {
    const a = fakes[agents.Alpha.id];
    const b = fakes[agents.Beta.id];
    a.messages = [];
    b.messages = [];
    // On a switch the server hands the other desktop back.
    b.onSwitch = (m) => {
      if (m.fromAgentId === agents.Alpha.id) a.release();
    };
    await page.goto(`${server.url}/#/agents/${agents.Alpha.id}`);
    await page.locator('#vm-dual').click();
    await page.locator('#dual-desktop').waitFor();
    await page.selectOption('#dual-left-pick', agents.Alpha.id);
    await page.selectOption('#dual-right-pick', agents.Beta.id);
    await page.waitForFunction(() => document.querySelectorAll('#dual-desktop .screen-canvas[data-frames="1"]').length === 2);
    assert.equal(await page.locator('#agent-sidebar').isVisible(), true);
    assert.equal(a.messages.length + b.messages.length, 0, 'entering sends nothing: view only');

    await page.click('#dual-left [data-action="take-over"]');
    await page.locator('#dual-left [data-action="hand-back"]').waitFor();
    const tokA = `tok-${agents.Alpha.id}-${a.version}`;
    await page.click('#dual-right [data-action="take-over"]');
    await page.locator('#dual-right [data-action="hand-back"]').waitFor();
    await page.locator('#dual-left [data-action="take-over"]').waitFor(); // the left side was handed back
    const sw = b.messages.find((m) => m.type === 'switch');
    assert.ok(sw, `switch sent: ${JSON.stringify(b.messages)}`);
    assert.deepEqual([sw.fromAgentId, sw.fromToken], [agents.Alpha.id, tokA]);
    assert.equal(b.messages.some((m) => m.type === 'take_over'), false);
    await screenshot(page, 'dual-desktop');
    await page.click('#dual-right [data-action="hand-back"]');
    await page.click('#dual-close');
  });

  test('phone: the computer icon opens a black full-screen view with take over at the bottom', async () => {
    const phone = await browser.newContext({
      viewport: phoneViewport,
      isMobile: true,
      hasTouch: true,
      storageState: await context.storageState(),
    });
    await installFakes(phone);
    const p = await phone.newPage();
    const phoneProblems = watchPage(p);
    await p.goto(`${server.url}/#/agents/${agents.Alpha.id}`);
    await p.locator('#chat-title', { hasText: 'Alpha' }).waitFor();
    await p.click('#computer-toggle');
    await p.locator('#mobile-computer .screen-mobile').waitFor();
    await p.waitForFunction(() => Number(document.querySelector('#mobile-computer .screen-canvas')?.dataset.frames) >= 1);
    assert.match(await p.locator('#mobile-computer .screen-bar').textContent(), /Alpha.*running/);
    assert.equal(await p.locator('#computer-selector').count(), 0, 'no environment choice on phones');
    const stage = await p.locator('#mobile-computer .screen-stage').boundingBox();
    const takeOver = await p.locator('#mobile-computer [data-action="take-over"]').boundingBox();
    assert.equal(takeOver.y > stage.y + stage.height - 1, true, 'take over is below the screen');
    const bg = await p.locator('#mobile-computer').evaluate((el) => getComputedStyle(el).backgroundColor);
    assert.equal(bg, 'rgb(0, 0, 0)');
    await p.click('#mobile-computer [data-action="take-over"]');
    await p.locator('#mobile-computer [data-action="hand-back"]').waitFor();
    await screenshot(p, 'mobile-computer');
    await p.click('#mobile-computer [data-action="hand-back"]');
    await p.locator('#mobile-computer [data-action="take-over"]').waitFor();
    assert.deepEqual(await unexplainedProblems(phoneProblems, phone, server.url, agents.Alpha.id), []);
    await phone.close();
  });

  test('no page errors', async () => {
    assert.deepEqual(await unexplainedProblems(problems, context, server.url, agents.Alpha.id), []);
  });
});

async function waitFor(cond, ms = 5000) {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`condition not met in ${ms} ms: ${cond}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

// A minimal client of the in-guest driver's bridge protocol (docs/guest-protocol.md) for the
// browser tests: the reference picture of a real desktop comes straight from its driver, not
// through the computer channel whose decoding the tests check.

import { execFileSync, spawn } from 'node:child_process';
import { readdirSync, existsSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';

/** The driver sockets of the desktops a `cubicle serve` with dataDir runs. */
export function driverSockets(dataDir) {
  const run = join(dataDir, 'run');
  if (!existsSync(run)) return [];
  return readdirSync(run)
    .map((d) => join(run, d, 'guest.sock'))
    .filter((p) => existsSync(p));
}

/**
 * How the tests reach the driver of container (the desktop `cubicle serve` with dataDir
 * created): its run directory's socket when the app uses the socket link, else — the exec link
 * (CUBICLE_GUEST_LINK=exec), no socket on the host — the driver's relay through an exec session
 * of the container's engine, as the app itself does.
 */
export function driverTarget(dataDir, container) {
  const socks = driverSockets(dataDir);
  if (socks.length > 0) return socks.length === 1 ? socks[0] : { error: `several driver sockets: ${socks}` };
  for (const engine of ['podman', 'docker']) {
    try {
      execFileSync(engine, ['container', 'inspect', container], { stdio: 'ignore', timeout: 30_000 });
      return { engine, container };
    } catch {
      // not this engine
    }
  }
  return { error: `no driver socket under ${dataDir} and no engine knows container ${container}` };
}

/** A duplex stream to the driver: a socket path, or { engine, container } for its relay. */
function openDriver(target) {
  if (typeof target === 'string') return connect(target);
  const child = spawn(target.engine, ['exec', '-i', target.container, '/usr/local/bin/cubicle-guest', '--relay'], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const handlers = {};
  const s = {
    write: (b) => child.stdin.write(b),
    destroy: (err) => {
      child.kill();
      if (err) handlers.error?.(err);
    },
    setTimeout: (ms, f) => {
      const t = setTimeout(f, ms);
      child.on('exit', () => clearTimeout(t));
    },
    on: (ev, f) => {
      if (ev === 'data') child.stdout.on('data', f);
      else if (ev === 'connect') queueMicrotask(f);
      else if (ev === 'error') {
        handlers.error = f;
        child.on('error', f);
        child.on('exit', (code) => code && f(new Error(`${target.engine} exec ${target.container} cubicle-guest --relay: exit ${code}`)));
      }
    },
  };
  return s;
}

/**
 * Sends one request after the hello and resolves with { result, blob }; target is a socket
 * path or what driverTarget returned.
 */
export function driverCall(target, op, args) {
  return new Promise((resolve, reject) => {
    if (target?.error) {
      reject(new Error(target.error));
      return;
    }
    const sock = openDriver(target);
    let buf = Buffer.alloc(0);
    const msgs = [];
    const send = (env) => {
      const js = Buffer.from(JSON.stringify(env));
      const hdr = Buffer.alloc(8);
      hdr.writeUInt32BE(js.length, 0);
      hdr.writeUInt32BE(0, 4);
      sock.write(Buffer.concat([hdr, js]));
    };
    sock.setTimeout(60_000, () => sock.destroy(new Error(`driver ${op}: no answer within 60 s`)));
    sock.on('error', reject);
    sock.on('connect', () => {
      send({ id: 0, op: 'hello', args: { protocol: 1, client: 'e2e' } });
      send({ id: 1, op, args });
    });
    sock.on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      while (buf.length >= 8) {
        const jn = buf.readUInt32BE(0);
        const bn = buf.readUInt32BE(4);
        if (buf.length < 8 + jn + bn) break;
        const env = JSON.parse(buf.subarray(8, 8 + jn).toString());
        msgs.push({ env, blob: buf.subarray(8 + jn, 8 + jn + bn) });
        buf = buf.subarray(8 + jn + bn);
      }
      const reply = msgs.find((m) => m.env.id === 1);
      const hello = msgs.find((m) => m.env.id === 0);
      if (hello?.env.error) {
        sock.destroy();
        reject(new Error(`driver hello: ${hello.env.error.message}`));
      } else if (reply) {
        sock.destroy();
        if (reply.env.error) reject(new Error(`driver ${op}: ${reply.env.error.message}`));
        else resolve({ result: reply.env.result, blob: reply.blob });
      }
    });
  });
}

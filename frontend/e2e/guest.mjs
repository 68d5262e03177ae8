// A minimal client of the in-guest driver's bridge protocol (docs/guest-protocol.md) for the
// browser tests: the reference picture of a real desktop comes straight from its driver, not
// through the computer channel whose decoding the tests check.

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

/** Sends one request after the hello and resolves with { result, blob }. */
export function driverCall(socketPath, op, args) {
  return new Promise((resolve, reject) => {
    const sock = connect(socketPath);
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

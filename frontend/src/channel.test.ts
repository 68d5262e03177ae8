import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { buildFrame, buildUpdate, ScreenChannel, subprotocolV2, type Lease, type ScreenStatus } from './screen';

/** A WebSocket stand-in: records what the client sends; the test plays the server. */
class FakeWS {
  static last: FakeWS | null = null;
  readyState = 0;
  binaryType = '';
  sent: Array<Record<string, unknown>> = [];
  onopen: (() => void) | null = null;
  onmessage: ((e: { data: unknown }) => void) | null = null;
  onclose: ((e: { code: number; reason: string }) => void) | null = null;
  constructor(
    readonly url: string,
    readonly protocols?: string[],
  ) {
    FakeWS.last = this;
  }
  send(s: string) {
    this.sent.push(JSON.parse(s));
  }
  close() {
    this.readyState = 3;
  }
  open() {
    this.readyState = 1;
    this.onopen?.();
  }
  server(m: unknown) {
    this.onmessage?.({ data: m instanceof ArrayBuffer ? m : JSON.stringify(m) });
  }
}

const status = (control: ScreenStatus['control']): ScreenStatus => ({
  type: 'status',
  agentId: 'a1',
  desktopId: 'd1',
  state: 'running',
  shared: false,
  streaming: true,
  control,
  serverTime: '2026-11-29T17:40:00Z',
});

describe('ScreenChannel', () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it('takes over, stamps input with the lease and newest frame, renews, hands back', async () => {
    const leases: Array<Lease | null> = [];
    const frames: number[] = [];
    const ch = new ScreenChannel('ws://x/api/app/agents/a1/computer', { onLease: (l) => leases.push(l), onFrame: (f) => frames.push(f.id) }, FakeWS as unknown as typeof WebSocket);
    const ws = FakeWS.last!;
    ws.open();
    ws.server(buildFrame(7, 100, 50, new Uint8Array([1])));
    ws.server(buildFrame(9, 100, 50, new Uint8Array([1])));
    expect(frames).toEqual([7, 9]);
    expect(ch.input({ action: 'click', x: 1, y: 1 })).toBe(false); // no lease, nothing sent
    expect(ws.sent).toEqual([]);

    const p = ch.takeOver();
    expect(ws.sent[0]).toMatchObject({ type: 'take_over' });
    const id = ws.sent[0].id;
    ws.server({ type: 'lease', id, op: 'take_over', desktopId: 'd1', token: 'T', version: 4, expiresAt: '', renewInSeconds: 10 });
    await expect(p).resolves.toMatchObject({ type: 'lease', token: 'T' });
    expect(ch.input({ action: 'key', keys: 'ctrl+l' })).toBe(true);
    expect(ws.sent[1]).toEqual({ type: 'input', token: 'T', version: 4, frameId: 9, action: 'key', keys: 'ctrl+l' });

    vi.advanceTimersByTime(10_000);
    expect(ws.sent[2]).toEqual({ type: 'renew', token: 'T' });

    const hb = ch.handBack();
    expect(ws.sent[3]).toMatchObject({ type: 'hand_back', token: 'T' });
    ws.server({ type: 'ok', id: ws.sent[3].id, op: 'hand_back' });
    await expect(hb).resolves.toMatchObject({ type: 'ok' });
    expect(ch.lease).toBeNull();
    expect(leases.at(-1)).toBeNull();
    ch.close();
  });

  it('a status without our control ends the lease; a refusal is returned, not thrown', async () => {
    const errors: string[] = [];
    const ch = new ScreenChannel('ws://x', { onError: (e) => errors.push(e.reason) }, FakeWS as unknown as typeof WebSocket);
    const ws = FakeWS.last!;
    ws.open();
    const p = ch.takeOver();
    ws.server({ type: 'lease', id: ws.sent[0].id, op: 'take_over', desktopId: 'd1', token: 'T', version: 1, expiresAt: '', renewInSeconds: 10 });
    await p;
    ws.server(status({ kind: 'person', name: 'me', activity: '', you: true, version: 1, since: '' }));
    expect(ch.lease).not.toBeNull();
    ws.server(status({ kind: 'person', name: 'alice', activity: 'alice is controlling this computer', you: false, version: 2, since: '' }));
    expect(ch.lease).toBeNull();

    const q = ch.takeOver();
    ws.server({ type: 'error', id: ws.sent[1].id, op: 'take_over', reason: 'person_controlling', code: 'conflict', message: 'alice is controlling this computer' });
    await expect(q).resolves.toMatchObject({ type: 'error', reason: 'person_controlling' });
    // An unsolicited refusal (an input without id) goes to onError.
    ws.server({ type: 'error', op: 'input', reason: 'handed_back', code: 'conflict', message: 'x' });
    expect(errors).toEqual(['handed_back']);
    ch.close();
  });

  it('switch names the desktop to hand back; reconnects with back-off after a close', () => {
    const states: string[] = [];
    const ch = new ScreenChannel('ws://x', { onConnection: (s) => states.push(s) }, FakeWS as unknown as typeof WebSocket);
    const first = FakeWS.last!;
    first.open();
    void ch.switchFrom('a0', 'T0');
    expect(first.sent[0]).toMatchObject({ type: 'switch', fromAgentId: 'a0', fromToken: 'T0' });
    first.onclose?.({ code: 1006, reason: '' });
    expect(states).toEqual(['connecting', 'open', 'closed']);
    vi.advanceTimersByTime(999);
    expect(FakeWS.last).toBe(first);
    vi.advanceTimersByTime(1);
    expect(FakeWS.last).not.toBe(first);
    FakeWS.last!.onclose?.({ code: 1006, reason: '' });
    vi.advanceTimersByTime(1999);
    const second = FakeWS.last;
    vi.advanceTimersByTime(1);
    expect(FakeWS.last).not.toBe(second); // 2 s the second time
    ch.close();
  });

  it('speaks version 2: regions, pointer and cursor messages, refresh on a broken update', () => {
    const updates: number[] = [];
    const frames: number[] = [];
    const pointers: string[] = [];
    const ch = new ScreenChannel(
      'ws://x',
      {
        onUpdate: (u) => updates.push(u.id),
        onFrame: (f) => frames.push(f.id),
        onPointer: (p) => pointers.push(`${p.x},${p.y}`),
        onCursor: (c) => pointers.push(`cursor ${c.serial}`),
      },
      FakeWS as unknown as typeof WebSocket,
    );
    const ws = FakeWS.last!;
    expect(ws.protocols).toEqual([subprotocolV2]);
    ws.open();
    ws.server(buildUpdate({ id: 11, width: 10, height: 10, key: true, lossless: false, refresh: false, regions: [] }));
    ws.server({ type: 'cursor', serial: 4, width: 1, height: 1, hotX: 0, hotY: 0, png: '' });
    ws.server({ type: 'pointer', x: 3, y: 4 });
    ws.server(buildFrame(12, 10, 10, new Uint8Array([1]))); // an older server: whole frames
    expect(updates).toEqual([11]);
    expect(frames).toEqual([12]);
    expect(pointers).toEqual(['cursor 4', '3,4']);
    expect(ch.lastFrame).toBe(12);
    const broken = new Uint8Array(buildUpdate({ id: 13, width: 10, height: 10, key: false, lossless: false, refresh: false, regions: [] }));
    broken[24 + 3] = 1; // one region announced, none there
    ws.server(broken.buffer);
    expect(updates).toEqual([11]);
    expect(ws.sent.at(-1)).toEqual({ type: 'refresh' });
    ch.close();
  });
});

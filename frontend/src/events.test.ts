import { describe, expect, it } from 'vitest';
import { ApiError, Client, type StreamMessage } from './api';
import { EventHub, type BusEvent, type EventSource } from './events';

/** A streaming response whose body is written by the test. */
function streamed() {
  let ctl!: ReadableStreamDefaultController<Uint8Array>;
  const body = new ReadableStream<Uint8Array>({ start: (c) => void (ctl = c) });
  const enc = new TextEncoder();
  return {
    response: new Response(body, { status: 200, headers: { 'Content-Type': 'text/event-stream' } }),
    write: (s: string) => ctl.enqueue(enc.encode(s)),
    end: () => ctl.close(),
  };
}

describe('Client.events', () => {
  it('reads SSE messages split anywhere, skips comments, sends the resume id and the token', async () => {
    const s = streamed();
    let seen: RequestInit | undefined;
    let url = '';
    const c = new Client({
      baseUrl: 'http://127.0.0.1:9',
      token: 'tok',
      fetch: (async (u: RequestInfo | URL, init?: RequestInit) => {
        url = String(u);
        seen = init;
        return s.response;
      }) as typeof fetch,
    });
    const got: StreamMessage[] = [];
    const done = c.events((m) => got.push(m), { lastEventId: 'ep-7' });
    s.write('data: {"type":"stream.hello","epoch":"ep"}\n\n: ping\n\nid: ep-8\nda');
    s.write('ta: {"id":"ep-8","type":"desktop.state","data":{"instanceId":"vm-1","state":"running"}}\n');
    s.write('\ndata: not json\n\n');
    s.end();
    await done;
    expect(url).toBe('http://127.0.0.1:9/api/app/events');
    const h = seen?.headers as Record<string, string>;
    expect(h['Authorization']).toBe('Bearer tok');
    expect(h['Last-Event-ID']).toBe('ep-7');
    expect(seen?.credentials).toBe('omit');
    expect(got.map((m) => m.type)).toEqual(['stream.hello', 'desktop.state']);
    expect(got[1].data).toEqual({ instanceId: 'vm-1', state: 'running' });
  });

  it('a refusal is an ApiError, and 401 says so to the app', async () => {
    let unauth = 0;
    const c = new Client({
      fetch: (async () => new Response(JSON.stringify({ error: 'log in first', code: 'unauthenticated' }), { status: 401 })) as typeof fetch,
      onUnauthenticated: () => unauth++,
    });
    await expect(c.events(() => undefined)).rejects.toMatchObject({ status: 401, code: 'unauthenticated' });
    expect(unauth).toBe(1);
  });
});

/** A scripted event source: each connection is a list of messages, then an end or a failure. */
class Script implements EventSource {
  conns: Array<{ lastEventId?: string }> = [];
  private plans: Array<{ msgs: StreamMessage[]; then: 'end' | 'hang' | Error }> = [];
  plan(msgs: StreamMessage[], then: 'end' | 'hang' | Error) {
    this.plans.push({ msgs, then });
  }
  async events(onMessage: (m: StreamMessage) => void, opts: { lastEventId?: string; signal?: AbortSignal }) {
    this.conns.push({ lastEventId: opts.lastEventId });
    const p = this.plans.shift() ?? { msgs: [], then: 'hang' as const };
    for (const m of p.msgs) onMessage(m);
    if (p.then === 'hang') {
      await new Promise<void>((res) => opts.signal?.addEventListener('abort', () => res()));
      return;
    }
    if (p.then instanceof Error) throw p.then;
  }
}

/** Timers the test fires by hand. */
function manualTimers() {
  const pending: Array<{ fn: () => void; ms: number }> = [];
  return {
    pending,
    setTimer: (fn: () => void, ms: number) => {
      const t = { fn, ms };
      pending.push(t);
      return t;
    },
    clearTimer: (t: unknown) => {
      const i = pending.indexOf(t as { fn: () => void; ms: number });
      if (i >= 0) pending.splice(i, 1);
    },
    fire: async () => {
      const t = pending.shift();
      t?.fn();
      await tick();
      return t?.ms;
    },
  };
}

const tick = () => new Promise((r) => setTimeout(r, 0));
const hello: StreamMessage = { type: 'stream.hello', epoch: 'ep' };
const ev = (n: number, type = 'desktop.state'): StreamMessage => ({ id: `ep-${n}`, type, time: 't', data: { n } });

describe('EventHub', () => {
  it('delivers events in order, is up after hello, and resumes from the last id with a growing backoff', async () => {
    const src = new Script();
    const t = manualTimers();
    src.plan([hello, ev(1), ev(2)], 'end');
    src.plan([], new ApiError(0, 'network', 'down'));
    src.plan([hello, ev(3)], 'hang');
    const hub = new EventHub(src, { retryMs: 100, maxRetryMs: 250, setTimer: t.setTimer, clearTimer: t.clearTimer });
    const got: number[] = [];
    const states: boolean[] = [];
    hub.subscribe((e: BusEvent) => got.push((e.data as unknown as { n: number }).n));
    hub.onState((up) => states.push(up));
    hub.start();
    hub.start(); // idempotent
    await tick();
    expect(got).toEqual([1, 2]);
    expect(states).toEqual([true, false]);
    expect(src.conns).toEqual([{ lastEventId: undefined }]);
    expect(await t.fire()).toBe(100); // first retry
    expect(src.conns[1]).toEqual({ lastEventId: 'ep-2' });
    expect(await t.fire()).toBe(200); // failed again: doubled
    expect(src.conns[2]).toEqual({ lastEventId: 'ep-2' });
    expect(got).toEqual([1, 2, 3]);
    expect(hub.up).toBe(true);
    expect(hub.lastEventId).toBe('ep-3');
    hub.stop();
    expect(hub.up).toBe(false);
    expect(t.pending).toEqual([]);
  });

  it('tells resync listeners when the server says events were lost', async () => {
    const src = new Script();
    src.plan([hello, { type: 'stream.resync' }, ev(9)], 'hang');
    const hub = new EventHub(src);
    let resyncs = 0;
    const got: number[] = [];
    hub.onResync(() => resyncs++);
    hub.subscribe((e) => got.push((e.data as unknown as { n: number }).n));
    hub.start();
    await tick();
    expect(resyncs).toBe(1);
    expect(got).toEqual([9]);
    hub.stop();
  });

  it('stops retrying when signed out', async () => {
    const src = new Script();
    const t = manualTimers();
    src.plan([], new ApiError(401, 'unauthenticated', 'log in first'));
    const hub = new EventHub(src, { setTimer: t.setTimer, clearTimer: t.clearTimer });
    hub.start();
    await tick();
    expect(t.pending).toEqual([]);
    expect(src.conns.length).toBe(1);
  });

  it('one failing listener does not stop the others; unsubscribed ones hear nothing', async () => {
    const src = new Script();
    src.plan([hello, ev(1), ev(2)], 'hang');
    const hub = new EventHub(src);
    const got: number[] = [];
    hub.subscribe(() => {
      throw new Error('broken listener');
    });
    const off = hub.subscribe(() => got.push(-1));
    off();
    hub.subscribe((e) => got.push((e.data as unknown as { n: number }).n));
    hub.start();
    await tick();
    expect(got).toEqual([1, 2]);
    hub.stop();
  });
});

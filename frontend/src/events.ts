// The UI's one event stream (GET /api/app/events, docs/events.md): a hub holds the single
// connection of the signed-in page, reconnects with a backoff (resuming from the last event
// id, so nothing is missed while the server still holds it), and hands each event to the
// components that listen. Components never poll while the stream is up; when it is down they
// fall back to a slow poll (useServerState in hooks.ts), and when events were lost the hub
// says "resync" so that they read their state afresh.

import { ApiError, type StreamMessage } from './api';
import type * as ev from './gen/events';

/**
 * The payload of each event type (backend/events: the names are events.go's Type constants,
 * the payloads are generated from payloads.go into gen/events.ts).
 */
export interface BusPayloads {
  'desktop.state': ev.Desktop;
  'desktop.stats': ev.Stats;
  'prepare.progress': ev.Prepare;
  'images.changed': ev.Images;
  'control.changed': ev.Control;
  'timeline.entry': ev.Timeline;
  'agent.changed': ev.Agent;
  'node.changed': ev.Node;
  'runner.status': ev.Runner;
  'desktop.egress_blocked': ev.EgressBlocked;
  'chat.confirm': ev.Confirm;
}

/** An event type the server sends. */
export type BusEventType = keyof BusPayloads;

/**
 * A bus event as the stream carries it: a union discriminated by type, so `e.type === '…'`
 * narrows data to that type's payload. A type this client does not know is handed on like the
 * others and matches no branch.
 */
export type BusEvent = {
  [T in BusEventType]: { id: string; type: T; time: string; data: BusPayloads[T] };
}[BusEventType];

/** What the hub needs of the API client. */
export interface EventSource {
  events(onMessage: (m: StreamMessage) => void, opts: { lastEventId?: string; signal?: AbortSignal }): Promise<void>;
}

/** Options of a hub; the defaults suit the app, tests shorten them. */
export interface HubOptions {
  /** First reconnect delay (ms); it doubles up to maxRetryMs. */
  retryMs?: number;
  maxRetryMs?: number;
  setTimer?: (fn: () => void, ms: number) => unknown;
  clearTimer?: (t: unknown) => void;
}

type Listener = (e: BusEvent) => void;

/**
 * One connection to the event stream, shared by the page. start() connects; stop() ends it
 * for good. Listeners are called in order for every event; resync listeners when the stream
 * says events were lost (or it comes back after a gap it cannot fill); state listeners when
 * the stream goes up or down.
 */
export class EventHub {
  private listeners = new Set<Listener>();
  private resyncs = new Set<() => void>();
  private states = new Set<(up: boolean) => void>();
  private abort: AbortController | null = null;
  private timer: unknown = null;
  private stopped = true;
  private backoff: number;
  private lastId = '';
  private upNow = false;
  private readonly opts: Required<HubOptions>;

  constructor(
    private readonly source: EventSource,
    opts: HubOptions = {},
  ) {
    this.opts = {
      retryMs: opts.retryMs ?? 1000,
      maxRetryMs: opts.maxRetryMs ?? 30_000,
      setTimer: opts.setTimer ?? ((fn, ms) => setTimeout(fn, ms)),
      clearTimer: opts.clearTimer ?? ((t) => clearTimeout(t as ReturnType<typeof setTimeout>)),
    };
    this.backoff = this.opts.retryMs;
  }

  /** Whether the stream is connected (its hello arrived). */
  get up(): boolean {
    return this.upNow;
  }

  /** The id of the newest event seen. */
  get lastEventId(): string {
    return this.lastId;
  }

  /** Connects (idempotent). */
  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    void this.connect();
  }

  /** Disconnects for good; listeners stay registered but hear nothing more. */
  stop(): void {
    this.stopped = true;
    if (this.timer !== null) this.opts.clearTimer(this.timer);
    this.timer = null;
    this.abort?.abort();
    this.abort = null;
    this.setUp(false);
  }

  /** Calls fn for every event; returns the unsubscribe. */
  subscribe(fn: Listener): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  /** Calls fn when events were lost and state must be read afresh. */
  onResync(fn: () => void): () => void {
    this.resyncs.add(fn);
    return () => this.resyncs.delete(fn);
  }

  /** Calls fn when the stream goes up (true) or down (false). */
  onState(fn: (up: boolean) => void): () => void {
    this.states.add(fn);
    return () => this.states.delete(fn);
  }

  private setUp(up: boolean) {
    if (this.upNow === up) return;
    this.upNow = up;
    for (const fn of [...this.states]) fn(up);
  }

  private async connect(): Promise<void> {
    if (this.stopped) return;
    const abort = new AbortController();
    this.abort = abort;
    let fatal = false;
    try {
      await this.source.events((m) => this.message(m), { lastEventId: this.lastId || undefined, signal: abort.signal });
    } catch (err) {
      // Signed out, or the server has no stream: retrying soon does not help.
      if (err instanceof ApiError && (err.status === 401 || err.status === 403)) fatal = true;
    }
    if (this.abort !== abort || this.stopped) return;
    this.abort = null;
    this.setUp(false);
    if (fatal) {
      this.stopped = true;
      return;
    }
    const wait = this.backoff;
    this.backoff = Math.min(this.opts.maxRetryMs, this.backoff * 2);
    this.timer = this.opts.setTimer(() => {
      this.timer = null;
      void this.connect();
    }, wait);
  }

  private message(m: StreamMessage) {
    if (m.type === 'stream.hello') {
      this.backoff = this.opts.retryMs;
      this.setUp(true);
      return;
    }
    if (m.type === 'stream.resync') {
      for (const fn of [...this.resyncs]) fn();
      return;
    }
    if (!m.id) return;
    this.lastId = m.id;
    // The server names each event's type and sends that type's payload (BusPayloads).
    const e = { id: m.id, type: m.type, time: m.time ?? '', data: m.data ?? {} } as BusEvent;
    for (const fn of [...this.listeners]) {
      try {
        fn(e);
      } catch {
        // a listener's failure must not stop the others
      }
    }
  }
}

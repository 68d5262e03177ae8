// Small Preact hooks shared by the pages: the hash route, the title, and server state that
// follows the event stream (useServerState) instead of polling.

import { createContext } from 'preact';
import { useContext, useEffect, useRef, useState } from 'preact/hooks';
import { messageFor } from './errors';
import type { BusEvent, EventHub } from './events';
import { parseRoute, type Route } from './router';

/** The current hash route, updated on hashchange. */
export function useHashRoute(): Route {
  const [route, setRoute] = useState<Route>(() => parseRoute(window.location.hash));
  useEffect(() => {
    const onChange = () => setRoute(parseRoute(window.location.hash));
    window.addEventListener('hashchange', onChange);
    return () => window.removeEventListener('hashchange', onChange);
  }, []);
  return route;
}

/** Sets the document title for the page. */
export function useTitle(title: string): void {
  useEffect(() => {
    document.title = title === '' ? 'Cubicle' : `${title} · Cubicle`;
  }, [title]);
}

/** The signed-in page's event hub (null outside a session, e.g. in unit tests). */
export const EventsContext = createContext<EventHub | null>(null);

/** Calls fn for every event of the stream while the component is mounted. */
export function useEvents(fn: (e: BusEvent) => void): void {
  const hub = useContext(EventsContext);
  const ref = useRef(fn);
  ref.current = fn;
  useEffect(() => (hub ? hub.subscribe((e) => ref.current(e)) : undefined), [hub]);
}

/** Whether the event stream is connected. */
export function useStreamUp(): boolean {
  const hub = useContext(EventsContext);
  const [up, setUp] = useState(hub?.up ?? false);
  useEffect(() => {
    if (!hub) return;
    setUp(hub.up);
    return hub.onState(setUp);
  }, [hub]);
  return up;
}

/** What useServerState returns. */
export interface ServerState<T> {
  /** The newest answer; null before the first. */
  data: T | null;
  /** Why the newest load failed ('' when it did not). */
  error: string;
  /** The error itself, for callers that look at its class. */
  failure: unknown;
  loading: boolean;
  /** Loads now; resolves when done. */
  reload: () => Promise<void>;
  /** Replaces the data with an answer the caller got (e.g. from a PUT). */
  set: (v: T) => void;
}

/** Options of useServerState. */
export interface ServerStateOptions {
  /** Which events make the state stale (it is loaded again, coalesced); none by default. */
  when?: (e: BusEvent) => boolean;
  /** The slow poll while the event stream is down (ms); 0 = none. Default 30 s. */
  fallbackMs?: number;
  /** Coalescing window for events (ms); default 150. */
  debounceMs?: number;
}

/**
 * Server state that follows the event stream: load() runs when deps change, again when an
 * event `when` accepts arrives or the stream asks to resync, and — only while the stream is
 * down — every fallbackMs. Answers to loads started before a newer one are dropped.
 */
export function useServerState<T>(load: () => Promise<T>, deps: unknown[], opts: ServerStateOptions = {}): ServerState<T> {
  const hub = useContext(EventsContext);
  const up = useStreamUp();
  const [data, setData] = useState<T | null>(null);
  const [failure, setFailure] = useState<unknown>(null);
  const [loading, setLoading] = useState(true);
  const seq = useRef(0);
  const live = useRef(true);
  const loadRef = useRef(load);
  loadRef.current = load;
  const optsRef = useRef(opts);
  optsRef.current = opts;

  const reload = async () => {
    const n = ++seq.current;
    setLoading(true);
    try {
      const v = await loadRef.current();
      if (!live.current || n !== seq.current) return;
      setData(v);
      setFailure(null);
    } catch (err) {
      if (!live.current || n !== seq.current) return;
      setFailure(err ?? new Error('failed'));
    } finally {
      if (live.current && n === seq.current) setLoading(false);
    }
  };

  useEffect(() => {
    live.current = true;
    void reload();
    return () => {
      live.current = false;
    };
  }, deps);

  // Events and resyncs make it load again (coalesced).
  useEffect(() => {
    if (!hub) return;
    let t: ReturnType<typeof setTimeout> | null = null;
    const soon = () => {
      if (t !== null) return;
      t = setTimeout(() => {
        t = null;
        void reload();
      }, optsRef.current.debounceMs ?? 150);
    };
    const offEvents = hub.subscribe((e) => {
      if (optsRef.current.when?.(e)) soon();
    });
    const offResync = hub.onResync(soon);
    return () => {
      offEvents();
      offResync();
      if (t !== null) clearTimeout(t);
    };
  }, [hub, ...deps]);

  // The slow fallback poll, only while the stream is down.
  const fallback = opts.fallbackMs ?? 30_000;
  useEffect(() => {
    if (up || fallback <= 0) return;
    const t = setInterval(() => void reload(), fallback);
    return () => clearInterval(t);
  }, [up, fallback, ...deps]);

  return {
    data,
    error: failure === null ? '' : messageFor(failure),
    failure,
    loading,
    reload,
    set: (v: T) => {
      seq.current++;
      setData(v);
      setFailure(null);
    },
  };
}

/**
 * Listens for the DOM event type on the element in ref, calling the latest handler. For events
 * Preact's on* props miss: Preact infers an event's DOM name from the element's on* property,
 * and elements have no oncompositionend, so onCompositionEnd listens for "CompositionEnd",
 * which never fires (an input method's committed text then stayed in the field, unsent).
 */
export function useDomEvent<K extends keyof HTMLElementEventMap>(
  ref: { current: HTMLElement | null },
  type: K,
  handler: (e: HTMLElementEventMap[K]) => void,
): void {
  const latest = useRef(handler);
  latest.current = handler;
  useEffect(() => {
    const el = ref.current;
    if (!el) return;
    const on = (e: HTMLElementEventMap[K]) => latest.current(e);
    el.addEventListener(type, on);
    return () => el.removeEventListener(type, on);
  }, [ref.current, type]);
}

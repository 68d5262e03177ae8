// Detects which shell hosts the page. The Wails desktop window exposes its bindings on
// window.go and its runtime on window.runtime; a plain browser has neither.

/** How the desktop shell tells the page where the backend listens. */
export interface Connection {
  url: string;
  token: string;
}

/** The parts of the Wails bindings and runtime the UI uses. */
export interface DesktopWindow {
  go?: {
    app?: {
      App?: {
        Connection?: () => Promise<Connection>;
        Ready?: () => Promise<void> | void;
        Navigated?: (route: string) => Promise<void> | void;
      };
    };
  };
  runtime?: {
    EventsOn?: (name: string, cb: (...data: unknown[]) => void) => unknown;
  };
}

/** The host shell: the browser (cookie login) or the desktop window (bearer token). */
export type Shell =
  | { kind: 'web' }
  | {
      kind: 'desktop';
      connection: Connection;
      /** Tells the window the first screen rendered (the desktop test waits for it). */
      ready: () => void;
      /** Tells the window the route changed (for its log). */
      navigated: (hash: string) => void;
      /** Subscribes to the window's "navigate" event (the app menu's "Local VM settings…"). */
      onNavigate: (cb: (hash: string) => void) => void;
    };

/** Calls an optional binding and ignores its failure: these are signals, not features. */
function signal(fn: ((...args: never[]) => Promise<void> | void) | undefined, ...args: unknown[]): void {
  if (typeof fn !== 'function') return;
  try {
    Promise.resolve((fn as (...a: unknown[]) => Promise<void> | void)(...args)).catch(() => {});
  } catch {
    // A throwing binding must not break the page.
  }
}

/**
 * Resolves the shell. In the desktop window it asks the Go side for the backend URL and
 * token; a binding that fails or answers nonsense is an error (the window cannot work
 * without it), never a silent fall-back to the web login.
 */
export async function detectShell(win: DesktopWindow): Promise<Shell> {
  const bound = win.go?.app?.App;
  if (typeof bound?.Connection !== 'function') {
    return { kind: 'web' };
  }
  const conn = await bound.Connection();
  if (!conn || typeof conn.url !== 'string' || conn.url === '' || typeof conn.token !== 'string') {
    throw new Error('The desktop shell returned no backend connection.');
  }
  return {
    kind: 'desktop',
    connection: { url: conn.url, token: conn.token },
    ready: () => signal(win.go?.app?.App?.Ready),
    navigated: (hash) => signal(win.go?.app?.App?.Navigated, hash),
    onNavigate: (cb) => {
      const on = win.runtime?.EventsOn;
      if (typeof on === 'function') {
        on('navigate', (hash: unknown) => {
          if (typeof hash === 'string') cb(hash);
        });
      }
    },
  };
}

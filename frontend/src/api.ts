// The one client for Cubicle's HTTP API. It mirrors the Go routes one method per route and
// holds no business rules: the server validates and decides, and its answer is the truth.
//
// Two shells share it: in the browser (`cubicle serve`) requests are same-origin and carry
// the HttpOnly session cookie; in the Wails window they go to the backend's loopback URL
// with a per-launch bearer token and no cookies.

/** A signed-in account. */
export interface User {
  id: string;
  username: string;
  role: string;
}

/** The computer an agent works on (SPEC §1.6, §1.11). */
export type ComputerType = 'vm' | 'cloud' | 'host' | 'browser' | 'auto' | 'none';

/** An agent as the server returns it. */
export interface Agent {
  id: string;
  name: string;
  computer: ComputerType;
  allowHostEnvironment: boolean;
  createdAt: string;
  updatedAt: string;
}

/** The body of PUT /api/app/agents/:id/computer-selection. */
export interface ComputerSelection {
  computer: ComputerType;
  allowHostEnvironment: boolean;
}

/** One line of the engine/host report from GET /api/app/admin/doctor. */
export interface DoctorCheck {
  name: string;
  status: 'ok' | 'warn' | 'fail';
  detail: string;
  fix: string;
}

/** GET /api/health. */
export interface Health {
  ok: boolean;
  version: string;
}

/** The error classes the server puts in `code`. */
export type ErrorCode =
  | 'not_found'
  | 'invalid'
  | 'conflict'
  | 'forbidden'
  | 'unauthenticated'
  | 'exists'
  | 'unavailable'
  | 'network'
  | 'unknown';

/** A failed API call: the HTTP status, the server's error class and its message. */
export class ApiError extends Error {
  readonly status: number;
  readonly code: ErrorCode;

  constructor(status: number, code: ErrorCode, message: string) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.code = code;
  }
}

/** How the client reaches the backend. */
export interface ClientOptions {
  /** Prefix for every path; empty means same origin (the web shell). */
  baseUrl?: string;
  /** Bearer token (desktop shell). When set, no cookies are sent. */
  token?: string;
  /** fetch implementation; defaults to the global one (tests inject a mock). */
  fetch?: typeof fetch;
  /**
   * Called when the server answers 401 to any call except login, so the app can go back
   * to the login page.
   */
  onUnauthenticated?: () => void;
}

type Method = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

const knownCodes: readonly ErrorCode[] = [
  'not_found',
  'invalid',
  'conflict',
  'forbidden',
  'unauthenticated',
  'exists',
  'unavailable',
];

/** Falls back to a class derived from the status when the body has no known code. */
function codeFor(status: number, code: unknown): ErrorCode {
  if (typeof code === 'string' && (knownCodes as readonly string[]).includes(code)) {
    return code as ErrorCode;
  }
  switch (status) {
    case 400:
      return 'invalid';
    case 401:
      return 'unauthenticated';
    case 403:
      return 'forbidden';
    case 404:
      return 'not_found';
    case 409:
      return 'conflict';
    case 503:
      return 'unavailable';
    default:
      return 'unknown';
  }
}

const agentPath = (id: string) => `/api/app/agents/${encodeURIComponent(id)}`;

/** Client for Cubicle's API; one method per route. */
export class Client {
  private readonly baseUrl: string;
  private readonly token?: string;
  private readonly fetchImpl: typeof fetch;
  private readonly onUnauthenticated?: () => void;

  constructor(opts: ClientOptions = {}) {
    this.baseUrl = (opts.baseUrl ?? '').replace(/\/+$/, '');
    this.token = opts.token;
    this.fetchImpl = opts.fetch ?? ((input, init) => globalThis.fetch(input, init));
    this.onUnauthenticated = opts.onUnauthenticated;
  }

  /** True when the client authenticates with a bearer token (desktop shell). */
  get usesToken(): boolean {
    return this.token !== undefined && this.token !== '';
  }

  /** GET /api/health (no authentication). */
  health(): Promise<Health> {
    return this.request<Health>('GET', '/api/health');
  }

  /** POST /api/auth/login; sets the session cookie. A 401 means wrong credentials. */
  async login(username: string, password: string): Promise<User> {
    const res = await this.request<{ user: User }>(
      'POST',
      '/api/auth/login',
      { username, password },
      { redirectOn401: false },
    );
    return res.user;
  }

  /** POST /api/auth/logout; clears the session cookie. */
  async logout(): Promise<void> {
    await this.request<void>('POST', '/api/auth/logout', undefined, { redirectOn401: false });
  }

  /** GET /api/auth/me: the signed-in user, or ApiError 401. */
  async me(): Promise<User> {
    const res = await this.request<{ user: User }>('GET', '/api/auth/me');
    return res.user;
  }

  /** GET /api/app/agents. */
  async listAgents(): Promise<Agent[]> {
    const res = await this.request<{ agents: Agent[] | null }>('GET', '/api/app/agents');
    return res.agents ?? [];
  }

  /** POST /api/app/agents. */
  createAgent(name: string): Promise<Agent> {
    return this.request<Agent>('POST', '/api/app/agents', { name });
  }

  /** GET /api/app/agents/:id. */
  getAgent(id: string): Promise<Agent> {
    return this.request<Agent>('GET', agentPath(id));
  }

  /** PATCH /api/app/agents/:id. */
  renameAgent(id: string, name: string): Promise<Agent> {
    return this.request<Agent>('PATCH', agentPath(id), { name });
  }

  /** DELETE /api/app/agents/:id. */
  async deleteAgent(id: string): Promise<void> {
    await this.request<void>('DELETE', agentPath(id));
  }

  /** PUT /api/app/agents/:id/computer-selection; returns the agent as the server saved it. */
  setComputerSelection(id: string, selection: ComputerSelection): Promise<Agent> {
    return this.request<Agent>('PUT', `${agentPath(id)}/computer-selection`, selection);
  }

  /** GET /api/app/admin/doctor (admin only). */
  async doctor(): Promise<DoctorCheck[]> {
    const res = await this.request<{ checks: DoctorCheck[] | null }>('GET', '/api/app/admin/doctor');
    return res.checks ?? [];
  }

  private async request<T>(
    method: Method,
    path: string,
    body?: unknown,
    opts: { redirectOn401?: boolean } = {},
  ): Promise<T> {
    const headers: Record<string, string> = { Accept: 'application/json' };
    if (method !== 'GET') {
      // State-changing requests always declare JSON, body or not: the server requires it.
      headers['Content-Type'] = 'application/json';
    }
    if (this.usesToken) {
      headers['Authorization'] = `Bearer ${this.token}`;
    }
    const init: RequestInit = {
      method,
      headers,
      credentials: this.usesToken ? 'omit' : 'same-origin',
    };
    if (body !== undefined) {
      init.body = JSON.stringify(body);
    }

    let res: Response;
    try {
      res = await this.fetchImpl(this.baseUrl + path, init);
    } catch (err) {
      const why = err instanceof Error ? err.message : String(err);
      throw new ApiError(0, 'network', `Cannot reach the Cubicle server (${why}).`);
    }

    if (!res.ok) {
      const err = await errorFrom(res);
      if (res.status === 401 && opts.redirectOn401 !== false) {
        this.onUnauthenticated?.();
      }
      throw err;
    }
    if (res.status === 204) {
      return undefined as T;
    }
    const text = await res.text();
    if (text === '') {
      return undefined as T;
    }
    try {
      return JSON.parse(text) as T;
    } catch {
      throw new ApiError(res.status, 'unknown', `The server sent a response that is not JSON (${method} ${path}).`);
    }
  }
}

async function errorFrom(res: Response): Promise<ApiError> {
  let message = '';
  let code: unknown;
  try {
    const text = await res.text();
    const body = JSON.parse(text) as { error?: unknown; code?: unknown };
    if (typeof body.error === 'string') message = body.error;
    code = body.code;
  } catch {
    // Not JSON (a proxy page, an empty body): fall back to the status line.
  }
  if (message === '') {
    message = `${res.status} ${res.statusText || 'request failed'}`.trim();
  }
  return new ApiError(res.status, codeFor(res.status, code), message);
}

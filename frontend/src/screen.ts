// The computer channel's client side (WS /api/app/agents/:id/computer; the wire contract is
// backend/liveview/channel.go, v2.go and docs/computer-protocol.md): binary frames
// (version 1) and region updates (version 2), status, lease and pointer messages, mapping
// pointer positions on the canvas to screen pixels, and keyboard events to the driver's key
// names. The parsing and mapping are pure and unit tested; painter.ts draws.

/** Length of a binary frame's header. */
export const frameHeaderLen = 24;
const frameMagic = 'CBFR';

/** The websocket subprotocol of version 2; a server that does not speak it sends version 1. */
export const subprotocolV2 = 'cubicle.computer.v2';

/** Length of a version 2 update's header, and of each region's header. */
export const updateHeaderLen = 32;
export const regionHeaderLen = 16;

/** How a region is encoded. */
export type RegionEncoding = 'jpeg' | 'png' | 'fill' | 'copy';
const regionEncodings: Record<number, RegionEncoding> = { 1: 'jpeg', 2: 'png', 3: 'fill', 4: 'copy' };

/** One rectangle of an update, in screen pixels. */
export interface Region {
  x: number;
  y: number;
  w: number;
  h: number;
  enc: RegionEncoding;
  /** jpeg/png: the image; fill: R, G, B, 255; copy: source x (u16), source y (u16). */
  data: Uint8Array;
}

/** A version 2 update: apply its regions in order to the screen as of the previous one. */
export interface Update {
  version: 2;
  id: number;
  width: number;
  height: number;
  /** The regions cover the whole screen: nothing before is needed. */
  key: boolean;
  /** Every pixel is exact after this update. */
  lossless: boolean;
  /** Only a lossless repeat of parts that stopped changing. */
  refresh: boolean;
  regions: Region[];
  bytes: number;
}

/** The pointer's image (sent when it changes): a PNG, base64, with its hot spot. */
export interface CursorMessage {
  type: 'cursor';
  serial: number;
  width: number;
  height: number;
  hotX: number;
  hotY: number;
  png: string;
}

/** The pointer's position in screen pixels (sent when it moves). */
export interface PointerMessage {
  type: 'pointer';
  x: number;
  y: number;
}

/** Parses a version 2 update message. */
export function parseUpdate(buf: ArrayBuffer): Update {
  if (buf.byteLength < updateHeaderLen) throw new Error(`update too short (${buf.byteLength} bytes)`);
  const v = new DataView(buf);
  const magic = String.fromCharCode(v.getUint8(0), v.getUint8(1), v.getUint8(2), v.getUint8(3));
  if (magic !== frameMagic || v.getUint8(4) !== 2) throw new Error('not a version 2 update');
  const hlen = v.getUint8(5);
  if (hlen < updateHeaderLen || hlen > buf.byteLength) throw new Error(`bad update header length ${hlen}`);
  if (v.getUint8(6) !== 1) throw new Error(`unknown message kind ${v.getUint8(6)}`);
  const flags = v.getUint8(7);
  const n = v.getUint32(24);
  const regions: Region[] = [];
  let off = hlen;
  for (let i = 0; i < n; i++) {
    if (off + regionHeaderLen > buf.byteLength) throw new Error(`region ${i}: short header`);
    const enc = regionEncodings[v.getUint8(off + 8)];
    if (!enc) throw new Error(`region ${i}: unknown encoding ${v.getUint8(off + 8)}`);
    const len = v.getUint32(off + 12);
    if (off + regionHeaderLen + len > buf.byteLength) throw new Error(`region ${i}: data past the end`);
    if ((enc === 'fill' || enc === 'copy') && len !== 4) throw new Error(`region ${i}: ${enc} with ${len} bytes`);
    regions.push({
      x: v.getUint16(off),
      y: v.getUint16(off + 2),
      w: v.getUint16(off + 4),
      h: v.getUint16(off + 6),
      enc,
      data: new Uint8Array(buf, off + regionHeaderLen, len),
    });
    off += regionHeaderLen + len;
  }
  if (off !== buf.byteLength) throw new Error(`${buf.byteLength - off} bytes after the last region`);
  return {
    version: 2,
    id: Number(v.getBigUint64(8)),
    width: v.getUint32(16),
    height: v.getUint32(20),
    key: (flags & 1) !== 0,
    lossless: (flags & 2) !== 0,
    refresh: (flags & 4) !== 0,
    regions,
    bytes: buf.byteLength,
  };
}

/** Builds an update message (the tests' inverse of parseUpdate). */
export function buildUpdate(u: Omit<Update, 'version' | 'bytes'>): ArrayBuffer {
  const codes: Record<RegionEncoding, number> = { jpeg: 1, png: 2, fill: 3, copy: 4 };
  const size = u.regions.reduce((n, r) => n + regionHeaderLen + r.data.byteLength, updateHeaderLen);
  const buf = new ArrayBuffer(size);
  const v = new DataView(buf);
  for (let i = 0; i < 4; i++) v.setUint8(i, frameMagic.charCodeAt(i));
  v.setUint8(4, 2);
  v.setUint8(5, updateHeaderLen);
  v.setUint8(6, 1);
  v.setUint8(7, (u.key ? 1 : 0) | (u.lossless ? 2 : 0) | (u.refresh ? 4 : 0));
  v.setBigUint64(8, BigInt(u.id));
  v.setUint32(16, u.width);
  v.setUint32(20, u.height);
  v.setUint32(24, u.regions.length);
  let off = updateHeaderLen;
  for (const r of u.regions) {
    v.setUint16(off, r.x);
    v.setUint16(off + 2, r.y);
    v.setUint16(off + 4, r.w);
    v.setUint16(off + 6, r.h);
    v.setUint8(off + 8, codes[r.enc]);
    v.setUint32(off + 12, r.data.byteLength);
    new Uint8Array(buf, off + regionHeaderLen).set(r.data);
    off += regionHeaderLen + r.data.byteLength;
  }
  return buf;
}

/** Parses a binary message of either version. */
export function parseBinary(buf: ArrayBuffer): Frame | Update {
  if (buf.byteLength > 4 && new DataView(buf).getUint8(4) === 2) return parseUpdate(buf);
  return parseFrame(buf);
}

/** A decoded binary frame (version 1: the whole screen). */
export interface Frame {
  version?: 1;
  id: number;
  width: number;
  height: number;
  mediaType: 'image/jpeg' | 'image/png';
  image: Uint8Array;
}

/** Parses one binary message: "CBFR", version, header length, encoding, 0, id u64, w u32, h u32. */
export function parseFrame(buf: ArrayBuffer): Frame {
  if (buf.byteLength < frameHeaderLen) throw new Error(`frame too short (${buf.byteLength} bytes)`);
  const v = new DataView(buf);
  const magic = String.fromCharCode(v.getUint8(0), v.getUint8(1), v.getUint8(2), v.getUint8(3));
  if (magic !== frameMagic) throw new Error('not a screen frame (bad magic)');
  const version = v.getUint8(4);
  if (version !== 1) throw new Error(`unsupported frame version ${version}`);
  const hlen = v.getUint8(5);
  if (hlen < frameHeaderLen || hlen > buf.byteLength) throw new Error(`bad frame header length ${hlen}`);
  const enc = v.getUint8(6);
  if (enc !== 1 && enc !== 2) throw new Error(`unknown frame encoding ${enc}`);
  const id = Number(v.getBigUint64(8));
  return {
    id,
    width: v.getUint32(16),
    height: v.getUint32(20),
    mediaType: enc === 1 ? 'image/jpeg' : 'image/png',
    image: new Uint8Array(buf, hlen),
  };
}

/** Builds a frame (the tests' and the fake server's inverse of parseFrame). */
export function buildFrame(id: number, width: number, height: number, image: Uint8Array, enc = 1): ArrayBuffer {
  const buf = new ArrayBuffer(frameHeaderLen + image.byteLength);
  const v = new DataView(buf);
  for (let i = 0; i < 4; i++) v.setUint8(i, frameMagic.charCodeAt(i));
  v.setUint8(4, 1);
  v.setUint8(5, frameHeaderLen);
  v.setUint8(6, enc);
  v.setBigUint64(8, BigInt(id));
  v.setUint32(16, width);
  v.setUint32(20, height);
  new Uint8Array(buf, frameHeaderLen).set(image);
  return buf;
}

/** Where the image sits inside its box when scaled to fit with its aspect ratio kept. */
export interface Fit {
  x: number;
  y: number;
  width: number;
  height: number;
  scale: number;
}

/** Scales a screen of sw×sh to fit a box of bw×bh, centred (letterboxed). */
export function fitRect(sw: number, sh: number, bw: number, bh: number): Fit {
  if (sw <= 0 || sh <= 0 || bw <= 0 || bh <= 0) return { x: 0, y: 0, width: 0, height: 0, scale: 0 };
  const scale = Math.min(bw / sw, bh / sh);
  const width = sw * scale;
  const height = sh * scale;
  return { x: (bw - width) / 2, y: (bh - height) / 2, width, height, scale };
}

/**
 * Maps a point in the element's box (CSS pixels, from its top-left) to screen pixels, or
 * null when it falls on the letterbox bars.
 */
export function toScreen(
  px: number,
  py: number,
  box: { width: number; height: number },
  screen: { width: number; height: number },
): { x: number; y: number } | null {
  const f = fitRect(screen.width, screen.height, box.width, box.height);
  if (f.scale === 0) return null;
  const rx = px - f.x;
  const ry = py - f.y;
  if (rx < 0 || ry < 0 || rx > f.width || ry > f.height) return null;
  const x = Math.min(screen.width - 1, Math.max(0, Math.floor(rx / f.scale)));
  const y = Math.min(screen.height - 1, Math.max(0, Math.floor(ry / f.scale)));
  return { x, y };
}

/** The driver's button number for a DOM mouse button (0 left, 1 middle, 2 right). */
export function buttonFor(domButton: number): number {
  if (domButton === 1) return 2;
  if (domButton === 2) return 3;
  return 1;
}

const namedKeys: Record<string, string> = {
  Enter: 'Return',
  Tab: 'Tab',
  Escape: 'Escape',
  Backspace: 'BackSpace',
  Delete: 'Delete',
  Insert: 'Insert',
  Home: 'Home',
  End: 'End',
  PageUp: 'Page_Up',
  PageDown: 'Page_Down',
  ArrowLeft: 'Left',
  ArrowUp: 'Up',
  ArrowRight: 'Right',
  ArrowDown: 'Down',
  ' ': 'space',
  ContextMenu: 'Menu',
  PrintScreen: 'Print',
  CapsLock: 'Caps_Lock',
};

/** The subset of KeyboardEvent keyFor reads. */
export interface KeyLike {
  key: string;
  code?: string;
  ctrlKey: boolean;
  altKey: boolean;
  shiftKey: boolean;
  metaKey: boolean;
  isComposing?: boolean;
  /** AltGr held (KeyboardEvent.getModifierState('AltGraph')). */
  altGraph?: boolean;
}

/**
 * What a key press sends: {keys} for the `key` action (chords like "ctrl+alt+t"), {text}
 * for a printable character without modifiers (typed as-is, any language), or null for
 * keys that are only modifiers or unknown (and IME composition).
 *
 * Keyboard layouts: a character is the one the person's layout made (e.key), so German,
 * French, Japanese and any other layout type what their keys say. A shortcut names the letter
 * the layout puts on the key (Ctrl+Z on a German keyboard is the key labelled Z, whose
 * physical code is KeyY; Ctrl+A on a French one is labelled A, code KeyQ); only when the
 * layout's character is not a Latin letter or digit (Cyrillic, Greek, AZERTY's unshifted
 * digit row, a macOS Option character) does the physical key's US letter stand in, as
 * shortcuts expect. AltGr (reported as Ctrl+Alt on Windows) with a character types the
 * character: it is how those layouts write @, €, { and |.
 */
export function keyFor(e: KeyLike): { keys: string } | { text: string } | null {
  if (e.isComposing || e.key === 'Process' || e.key === 'Dead' || e.key === 'Unidentified') return null;
  if (['Control', 'Shift', 'Alt', 'Meta', 'AltGraph', 'OS'].includes(e.key)) return null;
  const printable = [...e.key].length === 1 && e.key !== ' ';
  if (printable && !e.metaKey && (e.altGraph || (e.ctrlKey && e.altKey && !/^[a-zA-Z0-9]$/.test(e.key)))) {
    return { text: e.key };
  }
  const mods: string[] = [];
  if (e.ctrlKey) mods.push('ctrl');
  if (e.altKey) mods.push('alt');
  if (e.metaKey) mods.push('super');
  let name = namedKeys[e.key];
  if (!name && /^F([1-9]|1[0-2])$/.test(e.key)) name = e.key;
  if (!name) {
    if ([...e.key].length !== 1) return null;
    if (mods.length === 0) return { text: e.key };
    // The layout's letter or digit when it is one; else the physical key's (see above).
    let ch = e.key;
    if (/^[a-zA-Z0-9]$/.test(ch)) ch = ch.toLowerCase();
    else if (e.code && /^Key[A-Z]$/.test(e.code)) ch = e.code.slice(3).toLowerCase();
    else if (e.code && /^Digit[0-9]$/.test(e.code)) ch = e.code.slice(5);
    if (ch === '+') ch = 'plus';
    else if (ch === '-') ch = 'minus';
    if (e.shiftKey) mods.push('shift');
    return { keys: [...mods, ch].join('+') };
  }
  if (e.shiftKey) mods.push('shift');
  return { keys: [...mods, name].join('+') };
}

/** Wheel delta (pixels or lines) to scroll clicks, at most ±10 per event. */
export function wheelClicks(delta: number, deltaMode: number): number {
  if (delta === 0) return 0;
  const lines = deltaMode === 1 ? delta : deltaMode === 2 ? delta * 10 : delta / 40;
  const n = Math.sign(lines) * Math.max(1, Math.round(Math.abs(lines)));
  return Math.max(-10, Math.min(10, n));
}

/** Who operates the desktop (the status message's control). */
export interface ControlInfo {
  kind: 'person' | 'agent';
  name: string;
  activity: string;
  you: boolean;
  version: number;
  since: string;
  expiresAt?: string;
}

/** The status message. */
export interface ScreenStatus {
  type: 'status';
  agentId: string;
  desktopId?: string;
  state: string;
  /** What the screen is: a desktop ('' or vm), the agent's browser, or the node's own screen. */
  kind?: string;
  shared: boolean;
  streaming: boolean;
  message?: string;
  control: ControlInfo | null;
  idleStopAt?: string;
  serverTime: string;
}

/** A lease granted by take_over, renew or switch. */
export interface Lease {
  type: 'lease';
  id?: string;
  op: string;
  desktopId: string;
  token: string;
  version: number;
  expiresAt: string;
  renewInSeconds: number;
}

/** A refused client message. */
export interface ChannelError {
  type: 'error';
  id?: string;
  op: string;
  reason: string;
  code: string;
  message: string;
}

/** An input action as the channel takes it (fields by action; see guest-protocol "input"). */
export interface InputAction {
  action: string;
  x?: number;
  y?: number;
  toX?: number;
  toY?: number;
  button?: number;
  deltaX?: number;
  deltaY?: number;
  keys?: string;
  text?: string;
}

/** A sentence for a refusal: who controls the desktop, or the server's own message. */
export function refusalText(err: ChannelError, status: ScreenStatus | null): string {
  const c = status?.control;
  const msg = err.message || `Refused (${err.reason || err.code}).`;
  if (c && !c.you && ['taken_by_other', 'person_controlling', 'agent_running'].includes(err.reason)) {
    if (c.activity && !msg.includes(c.name)) return `${c.activity}. ${msg}`;
  }
  return msg;
}

/**
 * Seconds until the idle stop: idleStopAt − serverTime (both from one status message, so the
 * clocks of server and browser need not agree), minus the milliseconds since it arrived.
 */
export function idleSeconds(idleStopAt: string, serverTime: string, elapsedMs: number): number {
  const left = (Date.parse(idleStopAt) - Date.parse(serverTime) - elapsedMs) / 1000;
  return Number.isFinite(left) ? Math.max(0, left) : 0;
}

/** The websocket URL of an agent's computer channel for a page at location. */
export function channelUrl(loc: { protocol: string; host: string }, agentId: string, base = '', token = ''): string {
  let origin = `${loc.protocol === 'https:' ? 'wss:' : 'ws:'}//${loc.host}`;
  if (base !== '') origin = base.replace(/^http/, 'ws');
  const q = token !== '' ? `?access_token=${encodeURIComponent(token)}` : '';
  return `${origin}/api/app/agents/${encodeURIComponent(agentId)}/computer${q}`;
}

/** A reply to a request. */
export type Reply = Lease | ChannelError | { type: 'ok' } | ClipboardMessage | ResizedMessage;

/** Refusal reasons after which the lease this client holds is no longer valid. */
const lostLease = ['handed_back', 'expired', 'revoked', 'stale_version', 'not_holder', 'task_ended', 'taken_by_other'];

/** Events a ScreenChannel reports. */
export interface ChannelHandlers {
  onFrame?: (f: Frame) => void;
  onUpdate?: (u: Update) => void;
  onPointer?: (p: PointerMessage) => void;
  onCursor?: (c: CursorMessage) => void;
  onStatus?: (s: ScreenStatus) => void;
  onLease?: (l: Lease | null) => void;
  onError?: (e: ChannelError) => void;
  onConnection?: (state: 'connecting' | 'open' | 'closed', why?: string) => void;
  /** The desktop copied something while this person controls it (or a clipboard_get answer). */
  onClipboard?: (c: ClipboardMessage) => void;
}

/** Clipboard content from the desktop (docs/computer-protocol.md, "clipboard"). */
export interface ClipboardMessage {
  type: 'clipboard';
  id?: string;
  op?: string;
  mime?: string;
  size: number;
  text?: string;
  /** A PNG image, base64. */
  data?: string;
  /** Why there is no content (e.g. over the 10 MiB limit). */
  message?: string;
}

/** The answer to resize: the screen's size now. */
export interface ResizedMessage {
  type: 'resized';
  id?: string;
  op: string;
  width: number;
  height: number;
}

/** The clipboard limit in either direction (bytes). */
export const maxClipboard = 10 << 20;

/** Screen sizes a resize may ask for; the driver also caps the largest (2560×1600 by default). */
export const minScreen = { width: 320, height: 240 };
export const maxScreen = { width: 2560, height: 1600 };

/**
 * The desktop size that fits a viewer area of w×h CSS pixels at devicePixelRatio 1: even
 * numbers inside the bounds. Phones (narrow areas) keep a usable width by not going below
 * the minimum.
 */
export function fitSize(w: number, h: number): { width: number; height: number } {
  const clamp = (v: number, lo: number, hi: number) => Math.max(lo, Math.min(hi, Math.floor(v)));
  return {
    width: clamp(w, minScreen.width, maxScreen.width) & ~1,
    height: clamp(h, minScreen.height, maxScreen.height) & ~1,
  };
}

/**
 * One connection to an agent's computer channel: reconnects while open, renews the lease
 * it holds, and stamps input with the token, version and newest frame id.
 */
export class ScreenChannel {
  private ws: WebSocket | null = null;
  private closed = false;
  private retry: ReturnType<typeof setTimeout> | null = null;
  private renewTimer: ReturnType<typeof setTimeout> | null = null;
  private seq = 0;
  private backoff = 1000;
  private pending = new Map<string, (m: Reply) => void>();
  lease: Lease | null = null;
  lastFrame = 0;
  status: ScreenStatus | null = null;

  constructor(
    private readonly url: string,
    private readonly h: ChannelHandlers,
    private readonly wsImpl: typeof WebSocket = WebSocket,
  ) {
    this.connect();
  }

  private connect() {
    if (this.closed) return;
    this.h.onConnection?.('connecting');
    const ws = new this.wsImpl(this.url, [subprotocolV2]);
    ws.binaryType = 'arraybuffer';
    this.ws = ws;
    ws.onopen = () => {
      this.backoff = 1000;
      this.h.onConnection?.('open');
    };
    ws.onmessage = (ev: MessageEvent) => this.message(ev.data);
    ws.onclose = (ev: CloseEvent) => {
      if (this.ws !== ws) return;
      this.ws = null;
      this.setLease(null);
      for (const [, resolve] of this.pending) {
        resolve({ type: 'error', op: 'connection', reason: 'closed', code: 'unavailable', message: 'the connection closed' });
      }
      this.pending.clear();
      this.h.onConnection?.('closed', ev.reason || `code ${ev.code}`);
      // Reconnect, backing off to 10 s while the server refuses.
      if (!this.closed) this.retry = setTimeout(() => this.connect(), this.backoff);
      this.backoff = Math.min(10_000, this.backoff * 2);
    };
  }

  private message(data: unknown) {
    if (data instanceof ArrayBuffer) {
      let m: Frame | Update;
      try {
        m = parseBinary(data);
      } catch {
        // a message we cannot read: an update lost breaks the picture, so start over
        if (data.byteLength > 4 && new DataView(data).getUint8(4) === 2) this.refresh();
        return;
      }
      if (m.id > this.lastFrame) this.lastFrame = m.id;
      if ('regions' in m) this.h.onUpdate?.(m);
      else this.h.onFrame?.(m);
      return;
    }
    let m: { type?: string; id?: string };
    try {
      m = JSON.parse(String(data));
    } catch {
      return;
    }
    if (m.type === 'pointer') {
      this.h.onPointer?.(m as PointerMessage);
      return;
    }
    if (m.type === 'cursor') {
      this.h.onCursor?.(m as CursorMessage);
      return;
    }
    if (m.type === 'clipboard' && !m.id) {
      this.h.onClipboard?.(m as ClipboardMessage);
      return;
    }
    if (m.type === 'status') {
      this.status = m as ScreenStatus;
      // Our lease is gone when the server says we no longer hold control.
      if (this.lease && !(this.status.control?.you && this.status.control.kind === 'person')) this.setLease(null);
      this.h.onStatus?.(this.status);
      return;
    }
    const waiter = m.id ? this.pending.get(m.id) : undefined;
    if (m.id) this.pending.delete(m.id);
    if (m.type === 'lease') this.setLease(m as Lease);
    if (m.type === 'error') {
      const e = m as ChannelError;
      if (e.op === 'renew' || lostLease.includes(e.reason)) this.setLease(null);
      if (!waiter) this.h.onError?.(e);
    }
    waiter?.(m as Lease);
  }

  private setLease(l: Lease | null) {
    if (this.renewTimer) clearTimeout(this.renewTimer);
    this.renewTimer = null;
    this.lease = l;
    if (l) {
      const ms = Math.max(1000, (l.renewInSeconds || 5) * 1000);
      this.renewTimer = setTimeout(() => {
        if (this.lease) this.send({ type: 'renew', token: this.lease.token });
      }, ms);
    }
    this.h.onLease?.(l);
  }

  private send(m: Record<string, unknown>): boolean {
    if (!this.ws || this.ws.readyState !== 1) return false;
    this.ws.send(JSON.stringify(m));
    return true;
  }

  private request(m: Record<string, unknown>): Promise<Reply> {
    const id = `r${++this.seq}`;
    return new Promise((resolve) => {
      if (!this.send({ ...m, id })) {
        resolve({ type: 'error', op: String(m.type), reason: 'closed', code: 'unavailable', message: 'not connected to the computer channel' });
        return;
      }
      this.pending.set(id, resolve);
    });
  }

  /** Asks for control. */
  takeOver() {
    return this.request({ type: 'take_over' });
  }

  /** Takes control here after handing back the desktop of fromAgentId (dual desktop). */
  switchFrom(fromAgentId: string, fromToken: string) {
    return this.request({ type: 'switch', fromAgentId, fromToken });
  }

  /** Returns control. */
  async handBack() {
    const l = this.lease;
    if (!l) return { type: 'ok' as const };
    const r = await this.request({ type: 'hand_back', token: l.token });
    if (r.type === 'ok') this.setLease(null);
    return r;
  }

  /** Sends one input action aimed at the newest frame; false when not in control. */
  input(a: InputAction): boolean {
    if (!this.lease) return false;
    return this.send({ type: 'input', token: this.lease.token, version: this.lease.version, frameId: this.lastFrame, ...a });
  }

  /** The lease fields a desktop operation carries; null when not in control. */
  private stamp(): Record<string, unknown> | null {
    if (!this.lease) return null;
    return { token: this.lease.token, version: this.lease.version, frameId: this.lastFrame };
  }

  private notInControl(op: string): ChannelError {
    return { type: 'error', op, reason: 'not_holder', code: 'forbidden', message: 'take over the desktop first' };
  }

  /** Puts text, or a PNG image (base64), on the desktop's clipboard. */
  async setClipboard(c: { text: string } | { png: string }): Promise<Reply> {
    const st = this.stamp();
    if (!st) return this.notInControl('clipboard_set');
    const body = 'text' in c ? { text: c.text } : { mime: 'image/png', data: c.png };
    return this.request({ type: 'clipboard_set', ...st, ...body });
  }

  /** Reads the desktop's clipboard. */
  async getClipboard(): Promise<Reply> {
    const st = this.stamp();
    if (!st) return this.notInControl('clipboard_get');
    return this.request({ type: 'clipboard_get', ...st });
  }

  /** Asks the desktop to take the size w×h (resize to fit). */
  async resize(width: number, height: number): Promise<Reply> {
    const st = this.stamp();
    if (!st) return this.notInControl('resize');
    return this.request({ type: 'resize', ...st, width, height });
  }

  /** Asks for a keyframe (version 2): the picture was lost (a queue dropped, a bad message). */
  refresh() {
    this.send({ type: 'refresh' });
  }

  /** Closes for good. */
  close() {
    this.closed = true;
    if (this.retry) clearTimeout(this.retry);
    if (this.renewTimer) clearTimeout(this.renewTimer);
    const ws = this.ws;
    this.ws = null;
    ws?.close();
  }
}

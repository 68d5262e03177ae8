// A live desktop screen over the computer channel: draws the picture (region updates, or
// whole frames from an older server) on a canvas scaled to fit with the original aspect
// ratio, the desktop's pointer on an overlay, shows who is in control, and — while this person
// holds control — sends mouse, keyboard, text and scroll input stamped with the lease.

import type { ComponentChildren } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import type { Client } from '../api';
import { messageFor } from '../errors';
import { useDomEvent } from '../hooks';
import { PointerOverlay, ScreenPainter, type Context2D } from '../painter';
import { formatCountdown, stateLabel, stateTone } from '../settings/vmtext';
import { KeyRow, touchDevice, useTouch } from './TouchInput';
import { ClipboardDrawer, clipboardFromPaste, writeBrowserClipboard } from './ClipboardDrawer';
import { FilesDrawer, useUploads } from './FilesDrawer';
import { entriesOfDrop, type DropEntry } from '../upload';
import {
  buttonFor,
  channelUrl,
  fitSize,
  idleSeconds,
  keyFor,
  refusalText,
  ScreenChannel,
  toScreen,
  wheelClicks,
  type ChannelError,
  type ClipboardMessage,
  type Lease,
  type ScreenStatus,
} from '../screen';

/** What a ScreenView tells its parent. */
export interface ScreenHandle {
  channel: ScreenChannel;
  agentId: string;
}

interface ScreenViewProps {
  client: Client;
  agentId: string;
  /** Shown above the screen (e.g. the agent's name in dual desktop). */
  label?: ComponentChildren;
  /** panel: small preview; full: the interactive view; mobile: black full screen. */
  variant: 'panel' | 'full' | 'mobile' | 'dual';
  /** Called when the preview is clicked without control (the panel opens the desktop). */
  onPreviewClick?: () => void;
  /** Replaces the plain take over (dual desktop hands back the other side first). */
  takeOver?: (h: ScreenHandle) => Promise<string>;
  /** Reports the channel (and its lease changes) to the parent. */
  onHandle?: (h: ScreenHandle, lease: Lease | null) => void;
  /** Take over as soon as the desktop runs (the panel's "Open desktop"). */
  autoTakeOver?: boolean;
  /** Extra buttons next to Take over / Hand back. */
  actions?: ComponentChildren;
}

const shortcuts: ReadonlyArray<{ keys: string; label: string }> = [
  { keys: 'ctrl+alt+t', label: 'Terminal (Ctrl+Alt+T)' },
  { keys: 'ctrl+c', label: 'Ctrl+C' },
  { keys: 'ctrl+v', label: 'Ctrl+V' },
  { keys: 'ctrl+l', label: 'Ctrl+L' },
  { keys: 'alt+Tab', label: 'Alt+Tab' },
  { keys: 'ctrl+w', label: 'Ctrl+W' },
  { keys: 'ctrl+t', label: 'Ctrl+T' },
  { keys: 'Escape', label: 'Esc' },
  { keys: 'Return', label: 'Enter' },
];

/** The live screen. */
export function ScreenView(props: ScreenViewProps) {
  const { client, agentId, variant } = props;
  const canvas = useRef<HTMLCanvasElement>(null);
  const overlayCanvas = useRef<HTMLCanvasElement>(null);
  const overlay = useRef<PointerOverlay | null>(null);
  const stage = useRef<HTMLDivElement>(null);
  const chan = useRef<ScreenChannel | null>(null);
  const [lossless, setLossless] = useState(false);
  const [cursorCSS, setCursorCSS] = useState('');
  const [hovering, setHovering] = useState(false);
  const [status, setStatus] = useState<ScreenStatus | null>(null);
  const [lease, setLease] = useState<Lease | null>(null);
  const [conn, setConn] = useState<'connecting' | 'open' | 'closed'>('connecting');
  const [connWhy, setConnWhy] = useState('');
  const [size, setSize] = useState<{ width: number; height: number } | null>(null);
  const [notice, setNotice] = useState('');
  const [busy, setBusy] = useState(false);
  const [text, setText] = useState('');
  const [frames, setFrames] = useState(0);
  const [deskClip, setDeskClip] = useState<ClipboardMessage | null>(null);
  const [fit, setFit] = useState(false);
  const sink = useRef<HTMLTextAreaElement>(null);
  const propsRef = useRef(props);
  propsRef.current = props;

  useEffect(() => {
    const { baseUrl, token } = client.connection;
    const c = canvas.current;
    const oc = overlayCanvas.current;
    const ctx = c?.getContext('2d', { alpha: false });
    const octx = oc?.getContext('2d');
    if (!c || !oc || !ctx || !octx) return;
    let count = 0;
    const ov = new PointerOverlay(oc, octx as Context2D);
    overlay.current = ov;
    let askKeyframe = () => {};
    const painter = new ScreenPainter(c, ctx as Context2D, {
      onSize: (width, height) => {
        setSize({ width, height });
        ov.setSize(width, height);
      },
      onDrawn: (_id, exact) => {
        count++;
        if (count === 1 || count % 30 === 0) setFrames(count);
        setLossless(exact);
      },
      onLost: () => askKeyframe(),
    });
    const ch: ScreenChannel = new ScreenChannel(channelUrl(window.location, agentId, baseUrl, token), {
      onFrame: (f) => painter.frame(f),
      onUpdate: (u) => painter.update(u),
      onPointer: (p) => ov.setPosition(p),
      onCursor: (cur) => {
        void ov.setCursor(cur).then(() => setCursorCSS(ov.cssCursor()));
      },
      onStatus: setStatus,
      onLease: (l) => {
        setLease(l);
        propsRef.current.onHandle?.({ channel: ch, agentId }, l);
      },
      onError: (e: ChannelError) => setNotice(refusalText(e, ch.status)),
      onClipboard: (m) => {
        // The desktop copied something while this person controls it: to the browser's
        // clipboard when the browser lets us, and always into the clipboard drawer.
        setDeskClip(m);
        if (m.message) setNotice(m.message);
        else void writeBrowserClipboard(m).catch(() => {});
      },
      onConnection: (s, why) => {
        setConn(s);
        setConnWhy(why ?? '');
      },
    });
    askKeyframe = () => ch.refresh();
    chan.current = ch;
    propsRef.current.onHandle?.({ channel: ch, agentId }, null);
    // Leaving the page hands control back (docs/computer-protocol.md, "A client, in short").
    const onHide = () => void ch.handBack();
    window.addEventListener('pagehide', onHide);
    return () => {
      window.removeEventListener('pagehide', onHide);
      void ch.handBack();
      setTimeout(() => ch.close(), 200);
      painter.close();
      chan.current = null;
      overlay.current = null;
    };
  }, [client, agentId]);

  // While this person controls the desktop and points at it, their own cursor takes the
  // desktop pointer's shape (no lag) and the drawn pointer hides; otherwise it is drawn.
  const ownsPointer = lease !== null && hovering && cursorCSS !== '' && variant !== 'mobile';
  useEffect(() => overlay.current?.setHidden(ownsPointer), [ownsPointer]);

  // The idle countdown: idleStopAt − serverTime, ticking locally from when the status came.
  const [statusAt, setStatusAt] = useState(0);
  const [, setTick] = useState(0);
  useEffect(() => setStatusAt(Date.now()), [status]);
  useEffect(() => {
    if (!status?.idleStopAt) return;
    const t = setInterval(() => setTick((n) => n + 1), 1000);
    return () => clearInterval(t);
  }, [status?.idleStopAt]);
  const idleLeft = status?.idleStopAt
    ? idleSeconds(status.idleStopAt, status.serverTime, Date.now() - statusAt)
    : null;

  const running = status?.state === 'running';
  const control = status?.control ?? null;
  const mine = lease !== null;
  const uploads = useUploads(client, agentId);
  const [dropping, setDropping] = useState(false);
  // Files dropped on the screen go to the workspace, for the person in control of the full view.
  const filesHere = !status?.kind || status.kind === 'vm'; // not the browser or the host screen
  const takesDrops = mine && variant !== 'panel' && filesHere;
  const hasFiles = (e: DragEvent) => Array.from(e.dataTransfer?.types ?? []).includes('Files');

  const takeOver = async () => {
    const ch = chan.current;
    if (!ch) return;
    setBusy(true);
    setNotice('');
    try {
      if (props.takeOver) {
        const msg = await props.takeOver({ channel: ch, agentId });
        if (msg) setNotice(msg);
      } else {
        const r = await ch.takeOver();
        if (r.type === 'error') setNotice(refusalText(r, ch.status));
      }
      focusInput();
    } catch (err) {
      setNotice(messageFor(err));
    } finally {
      setBusy(false);
    }
  };

  const handBack = async () => {
    const ch = chan.current;
    if (!ch) return;
    setBusy(true);
    const r = await ch.handBack();
    if (r.type === 'error') setNotice(refusalText(r as ChannelError, ch.status));
    setBusy(false);
  };

  // Take over on open when asked (the panel's "Open desktop").
  const autoDone = useRef(false);
  useEffect(() => {
    if (props.autoTakeOver && running && conn === 'open' && !mine && !autoDone.current && !(control && !control.you)) {
      autoDone.current = true;
      void takeOver();
    }
  }, [props.autoTakeOver, running, conn, mine, control]);

  // Keyboard input goes through a hidden text area over the screen: a canvas cannot host an
  // input method, a text area can (IME composition, dead keys, mobile keyboards).
  const focusInput = () => {
    if (sink.current) sink.current.focus({ preventScroll: true });
    else canvas.current?.focus();
  };

  // Resize to fit: while on, the desktop follows the size of the screen area (debounced).
  useEffect(() => {
    const el = stage.current;
    if (!fit || !mine || !el) return;
    let t: ReturnType<typeof setTimeout> | null = null;
    let last = '';
    let retries = 0;
    const apply = () => {
      const want = fitSize(el.clientWidth, el.clientHeight);
      const key = `${want.width}x${want.height}`;
      if (key === last || !chan.current) return;
      last = key;
      void chan.current.resize(want.width, want.height).then((r) => {
        if (r.type !== 'error') return;
        // Refused (e.g. just after a take-over, before the lease reached the server): the same
        // size is asked again a moment later, a few times, before the refusal is shown.
        if (last === key && retries < 3) {
          retries++;
          last = '';
          if (t) clearTimeout(t);
          t = setTimeout(apply, 1000);
          return;
        }
        setNotice(refusalText(r as ChannelError, chan.current?.status ?? null));
      });
    };
    apply();
    const ro = new ResizeObserver(() => {
      if (t) clearTimeout(t);
      t = setTimeout(apply, 400);
    });
    ro.observe(el);
    return () => {
      ro.disconnect();
      if (t) clearTimeout(t);
    };
  }, [fit, mine]);

  // Input: only while this connection holds the lease.
  const point = (e: MouseEvent) => {
    const c = canvas.current;
    if (!c || !size) return null;
    const r = c.getBoundingClientRect();
    return toScreen(e.clientX - r.left, e.clientY - r.top, { width: r.width, height: r.height }, size);
  };
  const lastMove = useRef(0);
  const send = (a: Parameters<ScreenChannel['input']>[0]) => chan.current?.input(a) ?? false;
  // Touch (phones, tablets): gestures on the stage, the view zoom, the trackpad cursor.
  const touch = useTouch({
    stage,
    canvas,
    size,
    mine,
    send,
    onViewTap: variant === 'panel' ? props.onPreviewClick : undefined,
  });
  const touchKeys = mine && variant !== 'panel' && (variant === 'mobile' || touchDevice());
  const keyRow = touchKeys && (
    <KeyRow send={send} mode={touch.mode} onMode={touch.setMode} zoomed={touch.zoomed} onResetZoom={touch.resetZoom} />
  );

  const onMouseDown = (e: MouseEvent) => {
    if (!mine) {
      if (variant === 'panel' && props.onPreviewClick) props.onPreviewClick();
      return;
    }
    const p = point(e);
    if (!p) return;
    e.preventDefault();
    focusInput();
    send({ action: 'mouse_down', x: p.x, y: p.y, button: buttonFor(e.button) });
  };
  const onMouseUp = (e: MouseEvent) => {
    if (!mine) return;
    const p = point(e);
    if (!p) return;
    e.preventDefault();
    send({ action: 'mouse_up', x: p.x, y: p.y, button: buttonFor(e.button) });
  };
  // Moves go at most every 50 ms; the last one of a burst is sent when its turn comes, so the
  // desktop's pointer ends where the person's did.
  const trailingMove = useRef<ReturnType<typeof setTimeout> | null>(null);
  const onMouseMove = (e: MouseEvent) => {
    if (!mine) return;
    const p = point(e);
    if (!p) return;
    if (trailingMove.current) clearTimeout(trailingMove.current);
    const wait = 50 - (performance.now() - lastMove.current);
    const go = () => {
      trailingMove.current = null;
      lastMove.current = performance.now();
      send({ action: 'move', x: p.x, y: p.y });
    };
    if (wait <= 0) go();
    else trailingMove.current = setTimeout(go, wait);
  };
  const onWheel = (e: WheelEvent) => {
    if (!mine) return;
    const p = point(e);
    if (!p) return;
    e.preventDefault();
    const dy = wheelClicks(e.deltaY, e.deltaMode);
    const dx = wheelClicks(e.deltaX, e.deltaMode);
    if (dy !== 0 || dx !== 0) send({ action: 'scroll', x: p.x, y: p.y, deltaY: dy, deltaX: dx });
  };
  // ctrl+v: the browser's clipboard goes to the desktop first (the paste event below), then
  // the keys; when the browser fires no paste event (nothing to paste), the keys go alone.
  const pasteKeys = useRef<{ keys: string; timer: ReturnType<typeof setTimeout> } | null>(null);
  const onKeyDown = (e: KeyboardEvent) => {
    if (!mine) return;
    const k = keyFor({
      key: e.key, code: e.code, ctrlKey: e.ctrlKey, altKey: e.altKey, shiftKey: e.shiftKey, metaKey: e.metaKey,
      isComposing: e.isComposing, altGraph: e.getModifierState?.('AltGraph'),
    });
    if (!k) return; // composing (IME), dead keys, modifiers: the text area handles them
    if ('keys' in k && /^(ctrl\+|super\+)(shift\+)?v$/.test(k.keys)) {
      const keys = k.keys.replace(/^super\+/, 'ctrl+');
      if (pasteKeys.current) clearTimeout(pasteKeys.current.timer);
      pasteKeys.current = {
        keys,
        timer: setTimeout(() => {
          pasteKeys.current = null;
          send({ action: 'key', keys });
        }, 250),
      };
      return; // no preventDefault: the browser fires paste
    }
    e.preventDefault();
    if ('text' in k) send({ action: 'type', text: k.text });
    else send({ action: 'key', keys: k.keys });
  };
  const onPaste = (e: ClipboardEvent) => {
    if (!mine) return;
    e.preventDefault();
    const pk = pasteKeys.current;
    if (pk) clearTimeout(pk.timer);
    pasteKeys.current = null;
    void (async () => {
      const c = await clipboardFromPaste(e.clipboardData);
      if (c && 'tooLarge' in c) setNotice(c.tooLarge);
      else if (c) {
        const r = await chan.current?.setClipboard(c);
        if (r?.type === 'error') setNotice(refusalText(r as ChannelError, chan.current?.status ?? null));
      }
      send({ action: 'key', keys: pk?.keys ?? 'ctrl+v' });
    })();
  };
  // Committed text of an input method (compositionend) or of a plain insertion without a key
  // (mobile keyboards, Input.insertText): typed into the desktop as it is, then cleared.
  const flushSink = () => {
    const el = sink.current;
    if (!el || el.value === '') return;
    const text = el.value;
    el.value = '';
    if (mine) send({ action: 'type', text });
  };
  useDomEvent(sink, 'compositionend', () => setTimeout(flushSink, 0));
  const onSinkInput = (e: Event) => {
    const ie = e as InputEvent;
    if (ie.isComposing || ie.inputType === 'insertCompositionText') return;
    flushSink();
  };
  const sendText = (e: Event) => {
    e.preventDefault();
    if (text === '') return;
    if (send({ action: 'type', text })) setText('');
  };

  const textEntry = (
    <form class="text-entry" onSubmit={sendText}>
      <input
        type="text"
        class="screen-text"
        placeholder="Type text into the desktop (any language)…"
        value={text}
        onInput={(e) => setText(e.currentTarget.value)}
      />
      <button class="btn small" type="submit" disabled={text === ''}>
        Send text
      </button>
    </form>
  );
  const shortcutRow = (
    <div class="shortcut-row" aria-label="Keyboard shortcuts">
      {shortcuts.map((s) => (
        <button key={s.keys} class="btn ghost small" type="button" onClick={() => send({ action: 'key', keys: s.keys })}>
          {s.label}
        </button>
      ))}
    </div>
  );

  let badge = 'Connecting…';
  let tone = 'pending';
  if (conn === 'closed') {
    badge = 'Offline';
    tone = 'fail';
  } else if (status) {
    badge = stateLabel(status.state);
    tone = running ? 'ok' : status.state === 'absent' || status.state === 'stopped' ? '' : stateTone(status.state) || 'pending';
  }
  let who = '';
  if (control) {
    if (control.kind === 'person' && control.you) who = mine ? 'You are in control' : 'You control this desktop in another window';
    else who = control.activity || `${control.name} is in control`;
  } else if (running) {
    who = 'Nobody is in control — view only';
  }

  return (
    <div class={`screen screen-${variant}${mine ? ' controlling' : ''}`} data-agent={agentId} data-state={status?.state ?? ''}>
      <div class="screen-bar">
        {props.label}
        <span class={`badge ${tone}`} data-testid="screen-state">
          {badge}
        </span>
        {status?.shared && <span class="badge">Shared</span>}
        <span class="muted small screen-who">{who}</span>
        {idleLeft !== null && running && (
          <span class="muted small idle-countdown" title="The desktop stops when idle this long">
            Idle stop in {formatCountdown(idleLeft)}
          </span>
        )}
      </div>
      <div
        class={`screen-stage touch-${touch.mode}${dropping ? ' dropping' : ''}`}
        ref={stage}
        onDragOver={(e) => {
          if (!takesDrops || !hasFiles(e)) return;
          e.preventDefault();
          if (e.dataTransfer) e.dataTransfer.dropEffect = 'copy';
          setDropping(true);
        }}
        onDragLeave={() => setDropping(false)}
        onDrop={(e) => {
          setDropping(false);
          if (!takesDrops || !hasFiles(e)) return;
          e.preventDefault();
          // The entries must be taken now: the browser empties the drop's data once this returns.
          const items = Array.from(e.dataTransfer?.items ?? []).filter((it) => it.kind === 'file');
          const entries = items.map((it) => (it.webkitGetAsEntry?.() ?? null) as DropEntry | null);
          const loose = Array.from(e.dataTransfer?.files ?? []);
          entriesOfDrop(entries, loose).then(uploads.addEntries, (err: unknown) => uploads.fail('the dropped files', messageFor(err)));
        }}
        onTouchStart={touch.handlers.onTouchStart}
        onTouchMove={touch.handlers.onTouchMove}
        onTouchEnd={touch.handlers.onTouchEnd}
        onTouchCancel={touch.handlers.onTouchCancel}
      >
        <canvas
          ref={canvas}
          class="screen-canvas"
          width={16}
          height={10}
          tabIndex={0}
          aria-label={mine ? 'Desktop screen: you are in control' : 'Desktop screen (view only)'}
          data-frames={frames}
          data-lossless={lossless ? 'true' : 'false'}
          style={{ ...touch.zoomStyle, ...(ownsPointer ? { cursor: cursorCSS } : {}) }}
          onMouseDown={onMouseDown}
          onMouseUp={onMouseUp}
          onMouseMove={onMouseMove}
          onMouseEnter={() => setHovering(true)}
          onMouseLeave={() => setHovering(false)}
          onWheel={onWheel}
          onKeyDown={onKeyDown}
          onContextMenu={(e) => mine && e.preventDefault()}
        />
        <textarea
          ref={sink}
          class="screen-ime"
          data-testid="screen-ime"
          aria-label="Keyboard input for the desktop"
          autocapitalize="off"
          autocomplete="off"
          spellcheck={false}
          tabIndex={-1}
          onKeyDown={onKeyDown}
          onPaste={onPaste}
          onInput={onSinkInput}
        />
        <canvas
          ref={overlayCanvas}
          class="screen-pointer"
          width={16}
          height={10}
          aria-hidden="true"
          style={{
            position: 'absolute',
            inset: 0,
            width: '100%',
            height: '100%',
            objectFit: 'contain',
            pointerEvents: 'none',
            ...touch.zoomStyle,
          }}
        />
        {(!running || frames === 0) && (
          <div class="screen-placeholder">
            <p>
              {conn === 'closed'
                ? `The live screen is not connected${connWhy ? ` (${connWhy})` : ''}; retrying…`
                : status?.message || (running ? 'Waiting for the first frame…' : 'Connecting to the desktop…')}
            </p>
          </div>
        )}
        {running && !mine && variant === 'panel' && frames > 0 && (
          <div class="screen-hint" aria-hidden="true">
            Click to open the desktop
          </div>
        )}
        {touch.mode === 'trackpad' && touch.cursorAt && (mine || touchKeys) && (
          <div class="touch-cursor" aria-hidden="true" style={{ left: `${touch.cursorAt.left}px`, top: `${touch.cursorAt.top}px` }} />
        )}
      </div>
      <div class="screen-actions">
        {mine && variant !== 'panel' && (
          <label class="small fit-toggle" title="The desktop takes the size of this view (RandR); off keeps its size">
            <input type="checkbox" data-action="fit" checked={fit} onChange={(e) => setFit(e.currentTarget.checked)} /> Fit to
            window
          </label>
        )}
        {mine ? (
          <button class="btn small" type="button" data-action="hand-back" onClick={() => void handBack()} disabled={busy}>
            Hand back
          </button>
        ) : (
          <button
            class="btn small primary"
            type="button"
            data-action="take-over"
            onClick={() => void takeOver()}
            disabled={busy || !running || conn !== 'open'}
          >
            Take over
          </button>
        )}
        {props.actions}
      </div>
      {notice !== '' && (
        <p class="form-error small screen-notice" role="alert">
          {notice}
        </p>
      )}
      {mine && variant !== 'panel' && variant !== 'mobile' && (
        <div class="screen-input">
          {keyRow}
          {textEntry}
          {shortcutRow}
          <ClipboardDrawer channel={chan.current} desktop={deskClip} onNotice={setNotice} />
          {filesHere && <FilesDrawer client={client} agentId={agentId} uploads={uploads} />}
          <p class="muted small">
            Click the screen, then type: keys and shortcuts go to the desktop. Use the box for longer or non-Latin text.
          </p>
        </div>
      )}
      {mine && variant === 'mobile' && (
        <div class="screen-input mobile-input">
          {keyRow}
          <details>
            <summary>Shortcuts</summary>
            {shortcutRow}
          </details>
          <details>
            <summary>Text</summary>
            {textEntry}
          </details>
          <ClipboardDrawer channel={chan.current} desktop={deskClip} onNotice={setNotice} />
          {filesHere && <FilesDrawer client={client} agentId={agentId} uploads={uploads} />}
          <details>
            <summary>Scroll, touch and hand back</summary>
            <div class="shortcut-row">
              {[-5, 5].map((dy) => (
                <button
                  key={dy}
                  class="btn ghost small"
                  type="button"
                  disabled={!size}
                  onClick={() => size && send({ action: 'scroll', x: size.width >> 1, y: size.height >> 1, deltaY: dy })}
                >
                  {dy < 0 ? 'Scroll up' : 'Scroll down'}
                </button>
              ))}
            </div>
            <p class="small">
              Direct: tap to click, hold for a right click, drag to drag, two fingers to scroll, pinch to zoom. Trackpad: move
              the cursor with one finger, tap to click, tap with two fingers for a right click. Tap “Hand back” when you are
              done so the agent can continue.
            </p>
          </details>
        </div>
      )}
    </div>
  );
}

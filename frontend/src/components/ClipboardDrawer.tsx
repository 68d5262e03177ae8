// The clipboard drawer of the live screen: text or an image the person sends to the desktop's
// clipboard, and what the desktop copied last, for browsers that refuse the async Clipboard
// API (or before the person allowed it). Limits: 10 MiB either way (docs/computer-protocol.md).

import { useState } from 'preact/hooks';
import { maxClipboard, refusalText, type ChannelError, type ClipboardMessage, type ScreenChannel } from '../screen';

/** Content for setClipboard, or why it cannot be sent. */
export type OutgoingClip = { text: string } | { png: string } | { tooLarge: string };

const mib = (n: number) => `${(n / (1 << 20)).toFixed(1)} MiB`;
const tooLarge = (n: number) =>
  `The clipboard holds ${mib(n)}; at most ${maxClipboard >> 20} MiB can be copied to the desktop.`;

function base64(buf: ArrayBuffer): string {
  const bytes = new Uint8Array(buf);
  let s = '';
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(s);
}

/** What a paste event carries: a PNG image (preferred when present) or text. */
export async function clipboardFromPaste(dt: DataTransfer | null): Promise<OutgoingClip | null> {
  if (!dt) return null;
  for (const item of Array.from(dt.items ?? [])) {
    if (item.kind === 'file' && item.type === 'image/png') {
      const f = item.getAsFile();
      if (!f) continue;
      if (f.size > maxClipboard) return { tooLarge: tooLarge(f.size) };
      return { png: base64(await f.arrayBuffer()) };
    }
  }
  const text = dt.getData('text/plain');
  if (text === '') return null;
  const size = new TextEncoder().encode(text).length;
  return size > maxClipboard ? { tooLarge: tooLarge(size) } : { text };
}

/** Reads the browser's clipboard with the async Clipboard API (needs permission or a gesture). */
export async function readBrowserClipboard(): Promise<OutgoingClip | null> {
  const nav = navigator.clipboard;
  if (!nav) throw new Error('this browser offers no clipboard access here; paste into the box instead');
  if (nav.read) {
    try {
      for (const item of await nav.read()) {
        if (item.types.includes('image/png')) {
          const b = await item.getType('image/png');
          if (b.size > maxClipboard) return { tooLarge: tooLarge(b.size) };
          return { png: base64(await b.arrayBuffer()) };
        }
      }
    } catch {
      // read() may be refused where readText() is allowed
    }
  }
  const text = await nav.readText();
  if (text === '') return null;
  const size = new TextEncoder().encode(text).length;
  return size > maxClipboard ? { tooLarge: tooLarge(size) } : { text };
}

/** Writes what the desktop copied to the browser's clipboard (rejects when not allowed). */
export async function writeBrowserClipboard(m: ClipboardMessage): Promise<void> {
  const nav = navigator.clipboard;
  if (!nav) throw new Error('no clipboard access');
  if (m.data && m.mime === 'image/png') {
    const bin = Uint8Array.from(atob(m.data), (c) => c.charCodeAt(0));
    await nav.write([new ClipboardItem({ 'image/png': new Blob([bin], { type: 'image/png' }) })]);
    return;
  }
  if (m.text !== undefined) await nav.writeText(m.text);
}

interface Props {
  channel: ScreenChannel | null;
  /** The desktop's clipboard as last sent. */
  desktop: ClipboardMessage | null;
  onNotice: (msg: string) => void;
}

/** The drawer: send to the desktop, and the desktop's last copy with a copy button. */
export function ClipboardDrawer({ channel, desktop, onNotice }: Props) {
  const [text, setText] = useState('');
  const [state, setState] = useState('');

  const send = async (c: OutgoingClip | null) => {
    if (!c) {
      setState('Nothing to send: the clipboard is empty.');
      return;
    }
    if ('tooLarge' in c) {
      onNotice(c.tooLarge);
      return;
    }
    if (!channel) return;
    const r = await channel.setClipboard(c);
    if (r.type === 'error') onNotice(refusalText(r as ChannelError, channel.status));
    else setState('text' in c ? `Sent ${[...c.text].length} characters to the desktop's clipboard.` : "Sent the image to the desktop's clipboard.");
  };

  return (
    <details class="clipboard-drawer" data-testid="clipboard-drawer">
      <summary>Clipboard</summary>
      <form
        class="text-entry"
        onSubmit={(e) => {
          e.preventDefault();
          void send(text === '' ? null : { text });
        }}
      >
        <textarea
          class="clipboard-text"
          rows={2}
          placeholder="Paste here, then send to the desktop's clipboard…"
          value={text}
          onInput={(e) => setText(e.currentTarget.value)}
          onPaste={(e) => {
            // An image pasted here goes straight to the desktop.
            const dt = e.clipboardData;
            if (dt && Array.from(dt.items ?? []).some((i) => i.kind === 'file' && i.type === 'image/png')) {
              e.preventDefault();
              void clipboardFromPaste(dt).then(send);
            }
          }}
        />
        <button class="btn small" type="submit" data-action="clipboard-send" disabled={text === ''}>
          Send to desktop
        </button>
        <button
          class="btn ghost small"
          type="button"
          data-action="clipboard-read"
          onClick={() =>
            void readBrowserClipboard()
              .then(send)
              .catch((err: unknown) => setState(`The browser refused its clipboard (${String(err)}); paste into the box.`))
          }
        >
          Send my clipboard
        </button>
      </form>
      <div class="clipboard-desktop" data-testid="clipboard-desktop">
        {desktop?.text !== undefined && (
          <>
            <p class="small muted">The desktop copied ({desktop.size} bytes):</p>
            <pre class="clipboard-preview">{desktop.text.length > 2000 ? desktop.text.slice(0, 2000) + '…' : desktop.text}</pre>
          </>
        )}
        {desktop?.data && desktop.mime === 'image/png' && (
          <>
            <p class="small muted">The desktop copied an image ({mib(desktop.size)}):</p>
            <img class="clipboard-image" alt="Image copied on the desktop" src={`data:image/png;base64,${desktop.data}`} />
          </>
        )}
        {desktop && !desktop.message && (
          <button
            class="btn ghost small"
            type="button"
            data-action="clipboard-copy"
            onClick={() =>
              void writeBrowserClipboard(desktop)
                .then(() => setState('Copied to your clipboard.'))
                .catch((err: unknown) => setState(`The browser refused to copy (${String(err)}); select the text instead.`))
            }
          >
            Copy to my clipboard
          </button>
        )}
        {!desktop && <p class="small muted">Nothing copied on the desktop yet. Text copied there arrives here (and in your clipboard).</p>}
      </div>
      {state !== '' && <p class="small muted" role="status">{state}</p>}
    </details>
  );
}

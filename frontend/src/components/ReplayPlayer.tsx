// The player of a desktop recording (docs/recording.md): the replay stream is the computer
// channel's version 2 messages, so the live view's painter draws it. Play/pause, speeds
// 0.5×–8×, a scrubber with the recording's markers, "next tool call", the screenshot the agent
// received beside the replayed screen at a tool call, and a clip exported in the browser
// (canvas capture + MediaRecorder → WebM).

import { useEffect, useRef, useState } from 'preact/hooks';
import type { Client, Recording, RecordingMarker } from '../api';
import { PointerOverlay, ScreenPainter, type Context2D } from '../painter';
import { parseUpdate, subprotocolV2, type CursorMessage, type PointerMessage } from '../screen';

/** Speeds the player offers. */
export const speeds = [0.5, 1, 2, 4, 8];

/** The position message the replay stream sends. */
interface Position {
  type: 'replay';
  state: 'playing' | 'paused' | 'ended';
  at: number;
  speed: number;
  durationMs: number;
  live?: boolean;
  notes?: string[];
  seeked?: boolean;
}

/** The tool marker shown beside the screen at position at: the last one reached. */
export function markerAt(markers: RecordingMarker[], at: number): number {
  let found = -1;
  markers.forEach((m, i) => {
    if (m.kind === 'tool' && m.at <= at + 50) found = i;
  });
  return found;
}

/** The next tool marker after position at (-1: none). */
export function nextTool(markers: RecordingMarker[], at: number): number {
  return markers.findIndex((m) => m.kind === 'tool' && m.at > at + 100);
}

/**
 * How long the player shows the recording to be: what the server says, and for a recording
 * still being written at least the position reached (the server counts up to the last thing
 * written, which stands still while the screen does).
 */
export function shownDuration(durationMs: number, recordedMs: number, live: boolean, at: number): number {
  return Math.max(durationMs, recordedMs, live ? at : 0, 1);
}

export function clock(ms: number): string {
  const s = Math.max(0, Math.floor(ms / 1000));
  const h = Math.floor(s / 3600);
  const mm = String(Math.floor((s % 3600) / 60)).padStart(h > 0 ? 2 : 1, '0');
  const ss = String(s % 60).padStart(2, '0');
  return h > 0 ? `${h}:${mm}:${ss}` : `${mm}:${ss}`;
}

interface ReplayPlayerProps {
  client: Client;
  agentId: string;
  recording: Recording;
  /** Where to start (ms since the recording started). */
  from: number;
  onClose: () => void;
}

/** The player. */
export function ReplayPlayer({ client, agentId, recording, from, onClose }: ReplayPlayerProps) {
  const canvas = useRef<HTMLCanvasElement>(null);
  const overlayCanvas = useRef<HTMLCanvasElement>(null);
  const ws = useRef<WebSocket | null>(null);
  const [pos, setPos] = useState<Position>({ type: 'replay', state: 'paused', at: from, speed: 1, durationMs: recording.durationMs });
  const posAt = useRef({ at: from, wall: performance.now(), playing: false, speed: 1 });
  const [now, setNow] = useState(from);
  const [speed, setSpeed] = useState(1);
  const [notes, setNotes] = useState<string[]>([]);
  const [error, setError] = useState('');
  const [drawn, setDrawn] = useState(0);
  // The position of the last seek once its picture is drawn (data-seeked: what a test waits on).
  const [seekedAt, setSeekedAt] = useState(-1);
  const [shot, setShot] = useState<{ index: number; url: string } | null>(null);
  const [exporting, setExporting] = useState(false);
  const recorder = useRef<{ rec: MediaRecorder; stop: () => void } | null>(null);
  const markers = recording.markers ?? [];
  const duration = shownDuration(pos.durationMs, recording.durationMs, pos.live ?? recording.live, now);

  useEffect(() => {
    const c = canvas.current;
    const oc = overlayCanvas.current;
    const ctx = c?.getContext('2d', { alpha: false });
    const octx = oc?.getContext('2d');
    if (!c || !oc || !ctx || !octx) return;
    const ov = new PointerOverlay(oc, octx as Context2D);
    let count = 0;
    const painter = new ScreenPainter(c, ctx as Context2D, {
      onSize: (w, h) => ov.setSize(w, h),
      onDrawn: () => {
        count++;
        setDrawn(count);
      },
      onLost: () => send({ type: 'seek', at: Math.round(current()) }),
    });
    const sock = new WebSocket(client.replayUrl(window.location, agentId, recording.id, from, 1), [subprotocolV2]);
    sock.binaryType = 'arraybuffer';
    ws.current = sock;
    sock.onmessage = (e) => {
      if (typeof e.data !== 'string') {
        try {
          painter.update(parseUpdate(e.data as ArrayBuffer));
        } catch {
          // not an update: skip
        }
        return;
      }
      let m: { type?: string };
      try {
        m = JSON.parse(e.data) as { type?: string };
      } catch {
        return;
      }
      if (m.type === 'pointer') ov.setPosition(m as PointerMessage);
      else if (m.type === 'cursor') void ov.setCursor(m as CursorMessage);
      else if (m.type === 'replay') {
        const p = m as Position;
        posAt.current = { at: p.at, wall: performance.now(), playing: p.state === 'playing', speed: p.speed };
        setPos(p);
        setNow(p.at);
        if (p.notes && p.notes.length > 0) setNotes((n) => [...n, ...p.notes!]);
        // The messages before a seeked position drew the screen as it was at p.at.
        if (p.seeked) void painter.idle().then(() => setSeekedAt(p.at));
      }
    };
    sock.onerror = () => setError('The replay stream failed.');
    sock.onclose = (e) => {
      if (e.code !== 1000 && e.code !== 1005) setError(`The replay stream closed (${e.reason || e.code}).`);
    };
    const tick = window.setInterval(() => setNow(current()), 200);
    return () => {
      window.clearInterval(tick);
      sock.close();
      painter.close();
      ws.current = null;
    };
  }, [client, agentId, recording.id]);

  function current(): number {
    const p = posAt.current;
    return p.playing ? p.at + (performance.now() - p.wall) * p.speed : p.at;
  }

  function send(m: { type: string; at?: number; speed?: number }) {
    if (ws.current?.readyState === WebSocket.OPEN) ws.current.send(JSON.stringify(m));
  }

  // The agent's screenshot at the tool call reached.
  const mi = markerAt(markers, now);
  useEffect(() => {
    if (mi < 0 || !markers[mi]?.screenshot) {
      setShot(null);
      return;
    }
    let live = true;
    let url = '';
    client.recordingScreenshot(agentId, recording.id, mi).then(
      (b) => {
        url = URL.createObjectURL(b);
        if (live) setShot({ index: mi, url });
      },
      () => live && setShot(null),
    );
    return () => {
      live = false;
      if (url) URL.revokeObjectURL(url);
    };
  }, [mi, recording.id]);

  const playing = pos.state === 'playing';
  const next = nextTool(markers, now);

  function exportClip() {
    if (recorder.current) {
      recorder.current.stop();
      return;
    }
    const c = canvas.current;
    const oc = overlayCanvas.current;
    if (!c || !oc || typeof MediaRecorder === 'undefined') {
      setError('This browser cannot record a clip (no MediaRecorder).');
      return;
    }
    // The clip is a canvas of its own: the screen with the pointer drawn over it.
    const out = document.createElement('canvas');
    out.width = c.width;
    out.height = c.height;
    const octx = out.getContext('2d');
    if (!octx) return;
    let raf = 0;
    const paint = () => {
      if (out.width !== c.width || out.height !== c.height) {
        out.width = c.width;
        out.height = c.height;
      }
      octx.drawImage(c, 0, 0);
      octx.drawImage(oc, 0, 0, out.width, out.height);
      raf = requestAnimationFrame(paint);
    };
    paint();
    const stream = out.captureStream(30);
    const type = ['video/webm;codecs=vp9', 'video/webm;codecs=vp8', 'video/webm'].find((t) => MediaRecorder.isTypeSupported(t)) ?? 'video/webm';
    const rec = new MediaRecorder(stream, { mimeType: type });
    const chunks: Blob[] = [];
    rec.ondataavailable = (e) => e.data.size > 0 && chunks.push(e.data);
    rec.onstop = () => {
      cancelAnimationFrame(raf);
      stream.getTracks().forEach((t) => t.stop());
      recorder.current = null;
      setExporting(false);
      const blob = new Blob(chunks, { type: 'video/webm' });
      const a = document.createElement('a');
      a.href = URL.createObjectURL(blob);
      a.download = `recording-${recording.id}-${Math.round(current() / 1000)}s.webm`;
      a.dataset.bytes = String(blob.size);
      a.id = 'replay-clip-link';
      document.body.appendChild(a);
      a.click();
      window.setTimeout(() => {
        URL.revokeObjectURL(a.href);
        a.remove();
      }, 60_000);
    };
    rec.start(250);
    recorder.current = { rec, stop: () => rec.state !== 'inactive' && rec.stop() };
    setExporting(true);
    if (!playing) send({ type: 'play' });
  }

  useEffect(() => () => recorder.current?.stop(), []);

  return (
    <div class="replay" id="replay-player" role="dialog" aria-label="Recording player">
      <div class="replay-head">
        <strong>Recording of {new Date(recording.startedAt).toLocaleString()}</strong>
        <span class="muted small">
          {recording.live ? 'being recorded · ' : ''}
          {clock(duration)} · {(recording.bytes / 1e6).toFixed(1)} MB
        </span>
        <button type="button" class="btn small" onClick={onClose} id="replay-close">
          Close
        </button>
      </div>
      <div class="replay-body">
        <div class="screen-stage replay-stage">
          <canvas
            ref={canvas}
            class="screen-canvas"
            id="replay-canvas"
            width={16}
            height={10}
            data-drawn={drawn}
            data-at={Math.round(now)}
            data-state={pos.state}
            data-seeked={seekedAt}
          />
          <canvas
            ref={overlayCanvas}
            class="screen-pointer"
            width={16}
            height={10}
            aria-hidden="true"
            style={{ position: 'absolute', inset: 0, width: '100%', height: '100%', objectFit: 'contain', pointerEvents: 'none' }}
          />
        </div>
        {shot && (
          <figure class="replay-shot" id="replay-shot">
            <img src={shot.url} alt="The screenshot the agent received" />
            <figcaption class="muted small">What the agent saw: {markers[shot.index]?.label}</figcaption>
          </figure>
        )}
      </div>
      <div class="replay-scrub">
        <input
          type="range"
          id="replay-scrubber"
          aria-label="Position"
          min={0}
          max={duration}
          step={100}
          value={Math.min(now, duration)}
          onChange={(e) => send({ type: 'seek', at: Number(e.currentTarget.value) })}
        />
        <div class="replay-ticks" aria-hidden="true">
          {markers.map((m, i) => (
            <button
              type="button"
              key={i}
              class={`replay-tick tick-${m.kind}`}
              style={{ left: `${(100 * m.at) / duration}%` }}
              title={`${clock(m.at)} ${m.label}`}
              onClick={() => send({ type: 'seek', at: m.at })}
              tabIndex={-1}
            />
          ))}
        </div>
      </div>
      <div class="replay-controls">
        <button type="button" class="btn primary small" id="replay-play" onClick={() => send({ type: playing ? 'pause' : 'play' })}>
          {playing ? 'Pause' : 'Play'}
        </button>
        <span class="muted small" id="replay-clock">
          {clock(now)} / {clock(duration)}
        </span>
        <label class="small">
          Speed{' '}
          <select
            id="replay-speed"
            value={String(speed)}
            onChange={(e) => {
              const v = Number(e.currentTarget.value);
              setSpeed(v);
              send({ type: 'speed', speed: v });
            }}
          >
            {speeds.map((s) => (
              <option key={s} value={String(s)}>
                {s}×
              </option>
            ))}
          </select>
        </label>
        <button type="button" class="btn small" id="replay-next-tool" disabled={next < 0} onClick={() => next >= 0 && send({ type: 'seek', at: markers[next].at })}>
          Next tool call
        </button>
        <button type="button" class="btn small" id="replay-export" onClick={exportClip}>
          {exporting ? 'Stop and save clip' : 'Export clip'}
        </button>
        {mi >= 0 && <span class="small replay-label">{markers[mi].label}</span>}
      </div>
      {error !== '' && (
        <p class="form-error" role="alert">
          {error}
        </p>
      )}
      {(notes.length > 0 || (recording.notes ?? []).length > 0) && (
        <ul class="muted small replay-notes">
          {[...(recording.notes ?? []), ...notes].map((n, i) => (
            <li key={i}>{n}</li>
          ))}
        </ul>
      )}
    </div>
  );
}

// The messages of a chat: text, collapsible thinking, tool blocks (arguments, streamed
// result, screenshots, state badge), confirmation cards, notices, and the work of temporary
// task helpers grouped under a "Helper: <name>" header.

import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import {
  argsSummary,
  fromBase64,
  parseTable,
  prettyArgs,
  type Block,
  type ChatState,
  type DataBlock,
  type ExternalBlock,
  type HelperBlock,
  type ToolCall,
} from '../chat';

/** How the person answers a tool this client runs (client_pick_file): a file, or none. */
export type ExternalAnswer = (block: ExternalBlock, file: File | null) => Promise<void>;

interface MessageListProps {
  agentName: string;
  state: ChatState;
  loading: boolean;
  onAnswer: (calls: ToolCall[], how: 'once' | 'always' | 'deny') => void;
  onExternal?: ExternalAnswer;
  onExample: (text: string) => void;
  /** No model is set for this agent: the empty chat offers what works without one. */
  operator?: boolean;
  onOpenComputer?: () => void;
  /** Reply id → the snapshot that undoes that turn (the workspace as the turn found it). */
  undo?: Map<string, string>;
  onUndo?: (snapshotId: string) => void;
  /** A group chat: each agent's message shows its avatar. */
  avatars?: boolean;
}

const stateLabel: Record<string, string> = {
  calling: 'Calling',
  running: 'Running',
  success: 'Success',
  error: 'Error',
  interrupted: 'Interrupted',
  denied: 'Denied',
};

const stateTone: Record<string, string> = {
  calling: 'pending',
  running: 'pending',
  success: 'ok',
  error: 'fail',
  interrupted: 'warn',
  denied: 'warn',
};

/** The scrolling message list. */
export function MessageList({ agentName, state, loading, onAnswer, onExternal, onExample, operator = false, onOpenComputer, undo, onUndo, avatars = false }: MessageListProps) {
  const ref = useRef<HTMLDivElement>(null);
  const stick = useRef(true);
  // Follow the stream while the reader is at the bottom.
  useEffect(() => {
    const el = ref.current;
    if (el && stick.current) el.scrollTop = el.scrollHeight;
  }, [state]);

  if (state.messages.length === 0) {
    return (
      <div class="messages" id="messages" aria-live="polite">
        <div class="empty-state">
          <p class="empty-title">{loading ? 'Loading the conversation…' : `Start a chat with ${agentName}`}</p>
          {!loading && operator && (
            <p class="small operator-offer" id="operator-offer">
              No model is set yet, so this chat runs in operator mode:{' '}
              <button class="linklike" type="button" id="operator-shell" onClick={() => onExample('/shell ls')}>
                /shell
              </button>
              ,{' '}
              <button class="linklike" type="button" id="operator-screenshot" onClick={() => onExample('/screenshot')}>
                /screenshot
              </button>{' '}
              and the{' '}
              <button class="linklike" type="button" id="operator-computer" onClick={() => onOpenComputer?.()}>
                computer panel
              </button>{' '}
              work without one.
            </p>
          )}
          {!loading && !operator && (
            <p class="muted small">
              Ask in plain language, or try{' '}
              <button class="linklike" type="button" onClick={() => onExample('/help')}>
                /help
              </button>{' '}
              and{' '}
              <button class="linklike" type="button" onClick={() => onExample('/screenshot')}>
                /screenshot
              </button>
              .
            </p>
          )}
        </div>
      </div>
    );
  }
  return (
    <div
      class="messages filled"
      id="messages"
      ref={ref}
      aria-live="polite"
      onScroll={(e) => {
        const el = e.currentTarget;
        stick.current = el.scrollHeight - el.scrollTop - el.clientHeight < 40;
      }}
    >
      {state.messages.map((m) => (
        <article class={`msg ${m.role}`} key={m.id} data-role={m.role} data-agent={m.agentId}>
          <header class="msg-head">
            {avatars && m.role === 'assistant' && (
              <span class="agent-avatar small" aria-hidden="true">
                {(m.name.trim().slice(0, 1) || '?').toUpperCase()}
              </span>
            )}
            <span class="msg-name">{m.role === 'user' ? 'You' : m.name}</span>
            {m.source && <span class="muted small">{m.source}</span>}
          </header>
          <div class="msg-body">
            {m.blocks.map((b) => (
              <BlockView key={`${b.kind}-${b.id}`} block={b} onAnswer={onAnswer} onExternal={onExternal} />
            ))}
          </div>
          {m.role === 'assistant' && undoOf(m.replyIds, undo) && !state.running && (
            <button class="linklike small undo-turn" type="button" onClick={() => onUndo?.(undoOf(m.replyIds, undo))}>
              Restore the workspace to before this turn
            </button>
          )}
        </article>
      ))}
      {state.running && (
        <p class="typing muted small" id="chat-running">
          <span class="dot" />
          <span class="dot" />
          <span class="dot" /> Working…
        </p>
      )}
    </div>
  );
}

function BlockView({ block: b, onAnswer, onExternal }: { block: Block; onAnswer: MessageListProps['onAnswer']; onExternal?: ExternalAnswer }) {
  switch (b.kind) {
    case 'text':
      return <div class="block-text">{b.text}</div>;
    case 'thinking':
      return (
        <details class="block-thinking" open={!b.done}>
          <summary>{b.done ? 'Thought' : 'Thinking…'}</summary>
          <div class="thinking-text">{b.text}</div>
        </details>
      );
    case 'tool':
      return <ToolBlock block={b} />;
    case 'confirm':
      return <ConfirmCard block={b} onAnswer={onAnswer} />;
    case 'notice':
      return (
        <p class={`block-notice ${b.tone}`} role={b.tone === 'error' ? 'alert' : undefined}>
          {b.text}
        </p>
      );
    case 'helper':
      return <HelperGroup block={b} onAnswer={onAnswer} />;
    case 'data':
      return <DataView block={b} />;
    case 'external':
      return <ExternalCard block={b} onExternal={onExternal} />;
  }
}

function size(n: number): string {
  if (n >= 1 << 20) return `${(n / (1 << 20)).toFixed(1)} MiB`;
  if (n >= 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${n} bytes`;
}

/** A file, image or table a tool handed to the person: rendered, with a download link. */
function DataView({ block: b }: { block: DataBlock }) {
  const url = useMemo(() => {
    if (!b.done || typeof URL.createObjectURL !== 'function') return '';
    return URL.createObjectURL(new Blob([fromBase64(b.data) as BlobPart], { type: b.mediaType || 'application/octet-stream' }));
  }, [b.done, b.data, b.mediaType]);
  useEffect(() => () => {
    if (url !== '') URL.revokeObjectURL(url);
  }, [url]);
  const mt = b.mediaType.split(';')[0].trim();
  const table = useMemo(() => {
    if (!b.done || (mt !== 'text/csv' && mt !== 'text/tab-separated-values')) return null;
    return parseTable(new TextDecoder().decode(fromBase64(b.data)), mt === 'text/csv' ? ',' : '\t');
  }, [b.done, b.data, mt]);
  return (
    <figure class="block-data" data-name={b.name} data-media-type={mt} data-done={b.done ? 'true' : 'false'}>
      {b.done && mt.startsWith('image/') && url !== '' && <img src={url} alt={b.name} />}
      {table && table.length > 0 && (
        <div class="data-table-wrap">
          <table class="data-table">
            <thead>
              <tr>
                {table[0].map((c, i) => (
                  <th key={i}>{c}</th>
                ))}
              </tr>
            </thead>
            <tbody>
              {table.slice(1).map((r, i) => (
                <tr key={i}>
                  {r.map((c, j) => (
                    <td key={j}>{c}</td>
                  ))}
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      <figcaption class="data-caption">
        <span class="tool-name">{b.name || 'file'}</span>
        <span class="muted small">
          {mt || 'file'}, {size(b.size)}
        </span>
        {b.done && url !== '' ? (
          <a class="btn small data-download" href={url} download={b.name || 'file'}>
            Download
          </a>
        ) : (
          <span class="muted small">receiving…</span>
        )}
      </figcaption>
    </figure>
  );
}

const externalVerdict: Record<string, string> = {
  sent: 'Sent; the agent continues.',
  success: 'The agent has the file.',
  denied: 'You declined.',
  error: 'Not answered',
  interrupted: 'The turn was stopped.',
};

/** A tool the agent asks this client to run: pick a file from this machine, before a deadline. */
function ExternalCard({ block: b, onExternal }: { block: ExternalBlock; onExternal?: ExternalAnswer }) {
  const [file, setFile] = useState<File | null>(null);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState('');
  const answer = async (f: File | null) => {
    if (!onExternal) return;
    setBusy(true);
    setError('');
    try {
      await onExternal(b, f);
    } catch (err) {
      setError(err instanceof Error ? err.message : String(err));
    } finally {
      setBusy(false);
    }
  };
  const deadline = b.deadline !== '' ? new Date(b.deadline).toLocaleTimeString() : '';
  return (
    <div class="external-card" role="group" aria-label="The agent asks for a file" data-state={b.state} data-tool={b.name}>
      <p class="confirm-title">
        <strong>The agent asks you for a file</strong>
      </p>
      {b.prompt !== '' && <p class="external-prompt">{b.prompt}</p>}
      {b.state === 'waiting' ? (
        <>
          <input
            type="file"
            id={`external-file-${b.id}`}
            class="external-file"
            accept={b.accept || undefined}
            onChange={(e) => setFile(e.currentTarget.files?.[0] ?? null)}
          />
          <div class="confirm-actions">
            <button class="btn primary small external-send" type="button" disabled={busy || file === null || !onExternal} onClick={() => void answer(file)}>
              Send file
            </button>
            <button class="btn small external-decline" type="button" disabled={busy || !onExternal} onClick={() => void answer(null)}>
              Decline
            </button>
          </div>
          {deadline !== '' && <p class="muted small">The agent waits until {deadline}.</p>}
          {error !== '' && (
            <p class="form-error small" role="alert">
              {error}
            </p>
          )}
        </>
      ) : (
        <p class="confirm-verdict small external-verdict">
          {externalVerdict[b.state] ?? b.state}
          {b.detail !== '' ? ` (${b.detail})` : ''}
        </p>
      )}
    </div>
  );
}

function HelperGroup({ block: b, onAnswer }: { block: HelperBlock; onAnswer: MessageListProps['onAnswer'] }) {
  return (
    <section class="block-helper" data-helper={b.name} data-done={b.done ? 'true' : 'false'} aria-label={`Helper: ${b.name}`}>
      <header class="helper-head">
        <span class="helper-title">Helper: {b.name}</span>
        <span class={`badge ${b.done ? 'ok' : 'pending'}`}>{b.done ? 'Done' : 'Working'}</span>
        <span class="muted small">own task desktop, removed when done</span>
      </header>
      {b.task !== '' && <p class="helper-task muted small">{b.task}</p>}
      <div class="helper-body">
        {b.blocks.map((x) => (
          <BlockView key={`${x.kind}-${x.id}`} block={x} onAnswer={onAnswer} />
        ))}
      </div>
    </section>
  );
}

function ToolBlock({ block: b }: { block: Extract<Block, { kind: 'tool' }> }) {
  const [open, setOpen] = useState(true);
  const args = prettyArgs(b.args);
  return (
    <div class={`block-tool state-${b.state}`} data-tool={b.name} data-state={b.state}>
      <button class="tool-head" type="button" aria-expanded={open} onClick={() => setOpen(!open)}>
        <span class="tool-caret" aria-hidden="true">
          {open ? '▾' : '▸'}
        </span>
        <span class="tool-name">{b.name || 'tool'}</span>
        <span class="tool-summary muted">{argsSummary(b.args)}</span>
        <span class={`badge ${stateTone[b.state] ?? ''} tool-state`}>{stateLabel[b.state] ?? b.state}</span>
      </button>
      {open && (
        <div class="tool-body">
          {args !== '' && (
            <div class="tool-section">
              <span class="tool-label">Arguments</span>
              <pre class="tool-args">{args}</pre>
            </div>
          )}
          {b.result !== '' && (
            <div class="tool-section">
              <span class="tool-label">Result</span>
              <pre class="tool-result">{b.result}</pre>
            </div>
          )}
          {b.images.map((img, i) => (
            <a
              key={i}
              class="tool-image"
              href={`data:${img.mediaType};base64,${img.data}`}
              target="_blank"
              rel="noreferrer"
              title="Open the screenshot"
            >
              <img src={`data:${img.mediaType};base64,${img.data}`} alt={`Screenshot from ${b.name}`} />
            </a>
          ))}
        </div>
      )}
    </div>
  );
}

function ConfirmCard({ block: b, onAnswer }: { block: Extract<Block, { kind: 'confirm' }>; onAnswer: MessageListProps['onAnswer'] }) {
  const [sent, setSent] = useState('');
  const answered = b.answered || sent;
  const verdict: Record<string, string> = {
    allowed: 'Allowed once.',
    once: 'Allowed once.',
    always: 'Always allowed (a rule was added).',
    denied: 'Denied.',
    deny: 'Denied.',
  };
  const reply = (how: 'once' | 'always' | 'deny') => {
    setSent(how);
    onAnswer(b.toolCalls, how);
  };
  return (
    <div class="confirm-card" role="group" aria-label="Confirmation needed" data-answered={answered || undefined}>
      <p class="confirm-title">
        <strong>Confirm before running</strong>
      </p>
      <p class="muted small">The safety guard wants your approval for:</p>
      {b.reason && (
        <p class="confirm-reason small" data-testid="confirm-reason">
          Why: {b.reason}
        </p>
      )}
      {b.toolCalls.map((c) => (
        <div class="confirm-call" key={c.id}>
          <span class="tool-name">{c.name}</span>
          <pre class="tool-args">{prettyArgs(JSON.stringify(c.input ?? {}))}</pre>
        </div>
      ))}
      {answered ? (
        <p class="confirm-verdict small">{verdict[answered] ?? answered}</p>
      ) : (
        <div class="confirm-actions">
          <button class="btn primary small" type="button" onClick={() => reply('once')}>
            Allow once
          </button>
          <button class="btn small" type="button" onClick={() => reply('always')}>
            Always allow
          </button>
          <button class="btn danger small" type="button" onClick={() => reply('deny')}>
            Deny
          </button>
        </div>
      )}
    </div>
  );
}

/** The snapshot that undoes the turn of a message's replies ("" when none). */
function undoOf(replyIds: string[] | undefined, undo: Map<string, string> | undefined): string {
  for (const id of replyIds ?? []) {
    const s = undo?.get(id);
    if (s) return s;
  }
  return '';
}

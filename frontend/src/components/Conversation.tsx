// The conversation of an agent chat: sessions (new chat, reopen old ones), the streaming
// message list (text, thinking, tool blocks with screenshots, confirmation cards), the
// composer with Stop, and the execution timeline of the session.

import { useEffect, useRef, useState } from 'preact/hooks';
import type { Agent, ChatSessionInfo, Client } from '../api';
import {
  addUserMessage,
  clientTools,
  emptyChat,
  endTurn,
  fromHistory,
  newSessionId,
  reduce,
  type ChatState,
  type ConfirmResult,
  type ExternalBlock,
  type ToolCall,
  toBase64,
} from '../chat';
import { messageFor } from '../errors';
import { MessageList } from './MessageList';
import { WorkspaceUndo } from './WorkspaceUndo';
import { Timeline } from './Timeline';

interface ConversationProps {
  client: Client;
  agent: Agent | null;
  agentId: string;
  userId: string;
  /** Opens the computer panel (the empty chat offers it in operator mode). */
  onOpenComputer?: () => void;
}

const lastSessionKey = (agentId: string) => `cubicle.chat.${agentId}`;

function savedSession(agentId: string): string {
  try {
    return window.localStorage.getItem(lastSessionKey(agentId)) ?? '';
  } catch {
    return '';
  }
}

function rememberSession(agentId: string, id: string) {
  try {
    window.localStorage.setItem(lastSessionKey(agentId), id);
  } catch {
    // not remembered
  }
}

/** The chat column's body. */
export function Conversation({ client, agent, agentId, userId, onOpenComputer }: ConversationProps) {
  const [sessions, setSessions] = useState<ChatSessionInfo[] | null>(null);
  const [sessionsError, setSessionsError] = useState('');
  const [sessionId, setSessionId] = useState(() => savedSession(agentId) || newSessionId());
  const [chat, setChat] = useState<ChatState>(emptyChat);
  const [loadingHistory, setLoadingHistory] = useState(false);
  const [input, setInput] = useState('');
  const [view, setView] = useState<'chat' | 'timeline'>('chat');
  const [listOpen, setListOpen] = useState(false);
  const [stopping, setStopping] = useState(false);
  const abort = useRef<AbortController | null>(null);
  const chatRef = useRef(chat);
  chatRef.current = chat;
  const seq = useRef(0);
  // Whether this agent's turns have no model (operator mode): the empty chat then says what works without one.
  const [operator, setOperator] = useState(false);
  // Turns that can be undone: reply id → the snapshot of the workspace as the turn found it.
  const [undo, setUndo] = useState<Map<string, string>>(new Map());
  const [undoing, setUndoing] = useState('');
  const [undoNote, setUndoNote] = useState('');
  useEffect(() => {
    if (chat.running) return;
    let live = true;
    client.listSnapshots(agentId).then(
      (list) => {
        if (!live) return;
        const m = new Map<string, string>();
        for (const s of list) if (s.replyId && s.before) m.set(s.replyId, s.before);
        setUndo(m);
      },
      () => live && setUndo(new Map()), // no snapshots here (another computer, a runner): no undo
    );
    return () => {
      live = false;
    };
  }, [client, agentId, chat.running]);
  useEffect(() => {
    let live = true;
    client.getAgentModel(agentId).then(
      (m) => live && setOperator(!m.effective.configured && !m.effective.problem),
      () => undefined, // the composer's note says the same in general
    );
    return () => {
      live = false;
    };
  }, [client, agentId]);

  const loadSessions = async () => {
    try {
      setSessions(await client.chatSessions(agentId));
      setSessionsError('');
    } catch (err) {
      setSessionsError(messageFor(err));
      setSessions([]);
    }
  };

  const open = async (id: string) => {
    abort.current?.abort();
    setSessionId(id);
    rememberSession(agentId, id);
    setListOpen(false);
    setView('chat');
    setChat(emptyChat);
    setLoadingHistory(true);
    try {
      const s = await client.chatSession(id);
      setChat({ ...emptyChat, messages: fromHistory(s.history) });
    } catch {
      // A new (never used) session has no history yet.
    } finally {
      setLoadingHistory(false);
    }
  };

  useEffect(() => {
    void loadSessions();
    const saved = savedSession(agentId);
    if (saved) void open(saved);
    return () => abort.current?.abort();
  }, [client, agentId]);

  const newChat = () => {
    abort.current?.abort();
    const id = newSessionId();
    setSessionId(id);
    rememberSession(agentId, id);
    setChat(emptyChat);
    setView('chat');
    setListOpen(false);
  };

  const send = async (text: string, confirmResults?: ConfirmResult[]) => {
    if (chatRef.current.running || userId === '') return;
    const ac = new AbortController();
    abort.current = ac;
    setStopping(false);
    seq.current++;
    setChat((s) => (text !== '' ? addUserMessage(s, `u${seq.current}-${Date.now()}`, text) : { ...s, running: true }));
    rememberSession(agentId, sessionId);
    let failure: string | undefined;
    try {
      await client.chat(
        { sessionId, userId, agentId, input: text, confirmResults, clientTools },
        (e) => setChat((s) => reduce(s, e)),
        ac.signal,
      );
    } catch (err) {
      if (!ac.signal.aborted) failure = messageFor(err);
    } finally {
      if (abort.current === ac) abort.current = null;
      setChat((s) => endTurn(s, failure));
      setStopping(false);
      void loadSessions();
    }
  };

  const submit = (e: Event) => {
    e.preventDefault();
    const text = input.trim();
    if (text === '' || chat.running) return;
    setInput('');
    void send(text);
  };

  const stop = async () => {
    setStopping(true);
    try {
      await client.stopChat(sessionId);
    } catch {
      // the stream's end tells the rest
    }
    // If the stream does not end by itself soon, stop reading it.
    const ac = abort.current;
    setTimeout(() => {
      if (ac && abort.current === ac) ac.abort();
    }, 5000);
  };

  const answer = (calls: ToolCall[], how: 'once' | 'always' | 'deny') => {
    const results: ConfirmResult[] = calls.map((c) => ({
      confirmed: how !== 'deny',
      toolCall: { id: c.id, name: c.name, input: c.input },
      ...(how === 'always' ? { rules: ['exact'] } : {}),
    }));
    void send('', results);
  };

  // A tool the agent asked this client to run: the picked file (or none: declined) goes to the
  // turn that waits for it; the stream then carries on.
  const external = async (b: ExternalBlock, file: File | null) => {
    if (file !== null && file.size > 8 << 20) throw new Error(`${file.name} is larger than 8 MiB; pick a smaller file.`);
    const body =
      file === null
        ? { sessionId, toolCallId: b.id, state: 'denied' as const }
        : {
            sessionId,
            toolCallId: b.id,
            state: 'success' as const,
            content: [
              {
                type: 'file' as const,
                name: file.name,
                mediaType: file.type || 'application/octet-stream',
                data: toBase64(new Uint8Array(await file.arrayBuffer())),
              },
            ],
          };
    try {
      await client.chatExternal(body);
    } catch (err) {
      throw new Error(messageFor(err), { cause: err });
    }
    setChat((s) => ({
      ...s,
      messages: s.messages.map((m) => ({
        ...m,
        blocks: m.blocks.map((x) => (x.kind === 'external' && x.id === b.id && x.state === 'waiting' ? { ...x, state: 'sent' as const } : x)),
      })),
    }));
  };

  const exportHistory = async () => {
    try {
      const text = await client.historyExport(sessionId);
      const url = URL.createObjectURL(new Blob([text], { type: 'application/jsonl' }));
      const a = document.createElement('a');
      a.href = url;
      a.download = `history-${sessionId}.jsonl`;
      a.click();
      setTimeout(() => URL.revokeObjectURL(url), 10_000);
    } catch (err) {
      setSessionsError(messageFor(err));
    }
  };

  const current = sessions?.find((s) => s.sessionId === sessionId);
  const title = current?.title || (chat.messages.length > 0 ? 'This chat' : 'New chat');

  return (
    <>
      <div class="chat-toolbar">
        <div class="session-picker">
          <button
            class="btn ghost small"
            type="button"
            id="sessions-toggle"
            aria-expanded={listOpen}
            aria-controls="sessions-list"
            onClick={() => {
              if (!listOpen) void loadSessions();
              setListOpen(!listOpen);
            }}
          >
            <span class="session-title">{title}</span> ▾
          </button>
          {listOpen && (
            <div class="popover" id="sessions-list" role="menu">
              <button class="btn small primary block" type="button" id="new-chat" onClick={newChat}>
                + New chat
              </button>
              {sessionsError !== '' && <p class="form-error small">{sessionsError}</p>}
              {sessions === null && <p class="muted small">Loading…</p>}
              {sessions !== null && sessions.length === 0 && sessionsError === '' && (
                <p class="muted small">No saved chats with this agent yet.</p>
              )}
              <ul>
                {(sessions ?? []).map((s) => (
                  <li key={s.sessionId}>
                    <button
                      type="button"
                      role="menuitem"
                      class={`session-item${s.sessionId === sessionId ? ' active' : ''}`}
                      data-session={s.sessionId}
                      onClick={() => void open(s.sessionId)}
                    >
                      <span class="session-name">{s.title || s.sessionId}</span>
                      <span class="muted small">{new Date(s.updatedAt).toLocaleString()}</span>
                    </button>
                  </li>
                ))}
              </ul>
            </div>
          )}
        </div>
        <div class="tabs" role="tablist" aria-label="Chat view">
          <button
            class={`tab${view === 'chat' ? ' active' : ''}`}
            role="tab"
            type="button"
            aria-selected={view === 'chat'}
            onClick={() => setView('chat')}
          >
            Chat
          </button>
          <button
            class={`tab${view === 'timeline' ? ' active' : ''}`}
            role="tab"
            type="button"
            id="timeline-tab"
            aria-selected={view === 'timeline'}
            onClick={() => setView('timeline')}
          >
            Timeline
          </button>
          {view === 'timeline' && (
            <button class="btn ghost small" type="button" id="history-export" title="Download this chat's execution history (JSON Lines)" onClick={() => void exportHistory()}>
              Export
            </button>
          )}
        </div>
      </div>

      {view === 'timeline' ? (
        <Timeline client={client} sessionId={sessionId} running={chat.running} agentId={agentId} />
      ) : (
        <MessageList
          agentName={agent?.name ?? 'this agent'}
          state={chat}
          loading={loadingHistory}
          onAnswer={answer}
          onExternal={external}
          onExample={(t) => setInput(t)}
          operator={operator}
          onOpenComputer={onOpenComputer}
          undo={undo}
          onUndo={(id) => {
            setUndoNote('');
            setUndoing(id);
          }}
        />
      )}
      {undoing !== '' && (
        <WorkspaceUndo
          client={client}
          agentId={agentId}
          snapshotId={undoing}
          onCancel={() => setUndoing('')}
          onDone={(msg) => {
            setUndoing('');
            setUndoNote(msg);
          }}
        />
      )}
      {undoNote !== '' && (
        <p class="block-notice ok small" id="undo-note" role="status">
          {undoNote}
        </p>
      )}

      <form class="composer" onSubmit={submit}>
        <textarea
          id="chat-input"
          rows={2}
          value={input}
          placeholder={agent ? `Message ${agent.name}… (/help for operator commands)` : 'Message…'}
          onInput={(e) => setInput(e.currentTarget.value)}
          onKeyDown={(e) => {
            if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) submit(e);
          }}
          disabled={!agent || userId === ''}
        />
        {chat.running ? (
          <button class="btn danger" type="button" id="chat-stop" onClick={() => void stop()} disabled={stopping}>
            {stopping ? 'Stopping…' : 'Stop'}
          </button>
        ) : (
          <button class="btn primary" type="submit" id="chat-send" disabled={!agent || input.trim() === ''}>
            Send
          </button>
        )}
        <p class="muted small composer-note" id="chat-note">
          {chat.awaitingConfirm
            ? 'The agent is waiting for your answer above.'
            : 'Enter sends, Shift+Enter adds a line. Without a model, use slash commands such as /shell ls or /screenshot.'}
        </p>
      </form>
    </>
  );
}

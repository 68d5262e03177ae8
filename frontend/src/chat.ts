// The chat's model: the server's event stream (SPEC §2.1) folded into messages made of
// blocks. Pure functions only, so the folding is tested without a browser.

import type { Event as GenEvent } from './gen/agent';

/** A content block of a saved message (backend/agent/event.go ContentBlock). */
export interface ContentBlock {
  type: string; // text, image, thinking, tool_use, tool_result
  text?: string;
  mediaType?: string;
  data?: string;
  toolCallId?: string;
  name?: string;
  input?: Record<string, unknown>;
  state?: string;
  content?: ContentBlock[];
  /** A file's size (type "file"). */
  size?: number;
}

/** A saved or final message. */
export interface Msg {
  id: string;
  name: string;
  role: string;
  content: ContentBlock[] | null;
  /** e.g. `interrupted: true` on the message that closes a turn a restart cut short. */
  metadata?: Record<string, unknown>;
  timestamp?: string;
}

/** A tool call the server asks the person to confirm. */
export interface ToolCall {
  id: string;
  name: string;
  input: Record<string, unknown> | null;
}

/** One answer to a confirmation. */
export interface ConfirmResult {
  confirmed: boolean;
  toolCall: ToolCall;
  rules?: string[];
}

/**
 * Every field a chat event may carry: the generated backend/agent/event.go Event, every field
 * optional (the server omits empty ones and this client tolerates older servers), with this
 * client's own block and message types and the tolerances of older servers.
 */
export type ChatEventFields = Partial<
  Omit<GenEvent, 'type' | 'metadata' | 'data' | 'result' | 'toolCalls' | 'confirmResults' | 'generateReason' | 'value'>
> & {
  metadata?: Record<string, unknown>;
  data?: ContentBlock;
  result?: Msg;
  toolCalls?: ToolCall[];
  confirmResults?: ConfirmResult[];
  /**
   * Why a REQUEST_STOP stopped the turn: MODEL_STOP, PERMISSION_ASKING, USER_INTERRUPTED,
   * MIDDLEWARE_STOP_REQUESTED (older servers sent a boolean).
   */
  generateReason?: string | boolean;
  value?: unknown;
};

/** The fields of every event type. */
type Common = 'id' | 'createdAt' | 'source' | 'sessionId' | 'agentId' | 'replyId' | 'metadata';
/** Events of type(s) T with the fields K the server sets on them (backend/agent newEvent calls). */
type Ev<T extends string, K extends keyof ChatEventFields = never> = { type: T } & Pick<ChatEventFields, Common | K>;

/**
 * One event of the stream (SPEC §2.1), a union discriminated by type: `switch (e.type)`
 * narrows to the fields that type carries. Events of a type this client does not know are
 * handed to reduce like the others and change nothing.
 */
export type ChatEvent =
  | Ev<'AGENT_START', 'name' | 'role'>
  | Ev<'MODEL_CALL_START'>
  | Ev<'MODEL_CALL_END', 'usage'>
  | Ev<'THINKING_BLOCK_START' | 'THINKING_BLOCK_DELTA' | 'THINKING_BLOCK_END', 'blockId' | 'delta'>
  | Ev<'TEXT_BLOCK_START' | 'TEXT_BLOCK_DELTA' | 'TEXT_BLOCK_END', 'blockId' | 'delta'>
  | Ev<'TOOL_CALL_START' | 'TOOL_CALL_DELTA' | 'TOOL_CALL_END', 'toolCallId' | 'toolCallName' | 'delta'>
  | Ev<'TOOL_RESULT_START' | 'TOOL_RESULT_TEXT_DELTA' | 'TOOL_RESULT_DATA_DELTA' | 'TOOL_RESULT_END', 'toolCallId' | 'toolCallName' | 'delta' | 'data' | 'state'>
  | Ev<'DATA_BLOCK_START' | 'DATA_BLOCK_DELTA' | 'DATA_BLOCK_END', 'blockId' | 'toolCallId' | 'data' | 'delta'>
  | Ev<'AGENT_RESULT', 'result'>
  | Ev<'AGENT_END'>
  | Ev<'EXCEED_MAX_ITERS', 'maxIters' | 'currentIter'>
  | Ev<'REQUIRE_USER_CONFIRM', 'toolCalls' | 'reason' | 'value'>
  | Ev<'USER_CONFIRM_RESULT', 'confirmResults'>
  | Ev<'ALL_TOOLS_DENIED', 'reason'>
  | Ev<'REQUIRE_EXTERNAL_EXECUTION', 'toolCalls' | 'toolCallId' | 'toolCallName'>
  | Ev<'EXTERNAL_EXECUTION_RESULT', 'toolCallId' | 'toolCallName' | 'state' | 'reason' | 'data'>
  | Ev<'REQUEST_STOP', 'reason' | 'generateReason'>
  | Ev<'SUBAGENT_EXPOSED', 'name' | 'role' | 'toolCallId'>
  | Ev<'HINT_BLOCK', 'toolCallId' | 'delta'>
  | Ev<'CUSTOM', 'name' | 'value'>;

/** A chat event's type. */
export type ChatEventType = ChatEvent['type'];

/** The external tools this client runs (REQUIRE_EXTERNAL_EXECUTION); sent as clientTools. */
export const clientTools = ['client_pick_file'];

/** An image shown in a block. */
export interface ImageData {
  mediaType: string;
  data: string;
}

/** One visible part of a message. */
export type Block =
  | { kind: 'text'; id: string; text: string; done: boolean }
  | { kind: 'thinking'; id: string; text: string; done: boolean }
  | {
      kind: 'tool';
      id: string;
      name: string;
      args: string;
      result: string;
      images: ImageData[];
      state: string; // calling, running, success, error, interrupted, denied
    }
  | { kind: 'confirm'; id: string; toolCalls: ToolCall[]; answered: 'allowed' | 'always' | 'denied' | ''; reason?: string }
  | { kind: 'notice'; id: string; tone: 'info' | 'warn' | 'error'; text: string }
  | DataBlock
  | ExternalBlock
  | HelperBlock;

/**
 * A structured result a tool produced (DATA_BLOCK_START/DELTA/END): a file, an image, a
 * table, shown rendered and offered for download. data is base64, complete once done.
 */
export interface DataBlock {
  kind: 'data';
  id: string;
  name: string;
  mediaType: string;
  size: number;
  data: string;
  done: boolean;
}

/**
 * A tool this client runs for the agent (REQUIRE_EXTERNAL_EXECUTION), e.g. picking a file;
 * state is waiting until the person answered, then the server's EXTERNAL_EXECUTION_RESULT.
 */
export interface ExternalBlock {
  kind: 'external';
  id: string; // the tool call id
  name: string;
  prompt: string;
  accept: string;
  deadline: string;
  state: 'waiting' | 'sent' | 'success' | 'error' | 'denied' | 'interrupted';
  detail: string;
}

/**
 * A temporary task helper's work (events with `source` "main/<name>"), grouped under the
 * main agent's task_helper call that started it.
 */
export interface HelperBlock {
  kind: 'helper';
  id: string;
  name: string;
  source: string;
  task: string;
  /** The main agent's task_helper call; its end ends the group. */
  toolCallId: string;
  blocks: Block[];
  done: boolean;
}

/** A message as shown. */
export interface ChatMessage {
  id: string;
  role: 'user' | 'assistant';
  name: string;
  source?: string;
  blocks: Block[];
  /** The server's ids of the replies shown in this message (a turn's reply: its undo snapshot names it). */
  replyIds?: string[];
  /** The agent whose turn this is (a group chat's member; AGENT_START's agentId). */
  agentId?: string;
}

/** The chat's state: messages and whether a turn is running. */
export interface ChatState {
  messages: ChatMessage[];
  running: boolean;
  /** Set while the server waits for the answer to a confirmation. */
  awaitingConfirm: boolean;
}

export const emptyChat: ChatState = { messages: [], running: false, awaitingConfirm: false };

/** Adds the person's message and marks the turn as running. */
export function addUserMessage(s: ChatState, id: string, text: string): ChatState {
  return {
    messages: [...s.messages, { id, role: 'user', name: 'You', blocks: [{ kind: 'text', id, text, done: true }] }],
    running: true,
    awaitingConfirm: false,
  };
}

/** Marks the turn as finished (the stream ended or failed). */
export function endTurn(s: ChatState, error?: string): ChatState {
  let next = { ...s, running: false };
  if (error) next = pushBlock(next, { kind: 'notice', id: `err-${s.messages.length}`, tone: 'error', text: error });
  // A tool still "calling"/"running" when the stream ends was cut off (helpers' tools too).
  const cut = (blocks: Block[]): Block[] =>
    blocks.map((b) => {
      if (b.kind === 'tool' && (b.state === 'calling' || b.state === 'running') && !next.awaitingConfirm) {
        return { ...b, state: 'interrupted' };
      }
      if (b.kind === 'helper' && !b.done) return { ...b, done: true, blocks: cut(b.blocks) };
      return b;
    });
  next.messages = next.messages.map((m) =>
    m.blocks.some((b) => (b.kind === 'tool' && (b.state === 'calling' || b.state === 'running')) || (b.kind === 'helper' && !b.done))
      ? { ...m, blocks: cut(m.blocks) }
      : m,
  );
  return next;
}

/** The assistant message events go to: the last one, or a new one. */
function lastAssistant(s: ChatState, source?: string): [ChatState, ChatMessage] {
  const last = s.messages[s.messages.length - 1];
  if (last && last.role === 'assistant') return [s, last];
  const m: ChatMessage = { id: `a-${s.messages.length}`, role: 'assistant', name: 'Agent', source, blocks: [] };
  return [{ ...s, messages: [...s.messages, m] }, m];
}

function replaceLast(s: ChatState, m: ChatMessage): ChatState {
  const messages = s.messages.slice();
  messages[messages.length - 1] = m;
  return { ...s, messages };
}

function pushBlock(s: ChatState, b: Block): ChatState {
  const [s2, m] = lastAssistant(s);
  return replaceLast(s2, { ...m, blocks: [...m.blocks, b] });
}

/** Changes the block with id (of kind) in the last assistant message, or adds make(). */
function updateBlock<K extends Block['kind']>(
  s: ChatState,
  kind: K,
  id: string,
  make: () => Extract<Block, { kind: K }>,
  change: (b: Extract<Block, { kind: K }>) => Extract<Block, { kind: K }>,
): ChatState {
  const [s2, m] = lastAssistant(s);
  const i = m.blocks.findIndex((b) => b.kind === kind && b.id === id);
  const blocks = m.blocks.slice();
  if (i < 0) blocks.push(change(make()));
  else blocks[i] = change(blocks[i] as Extract<Block, { kind: K }>);
  return replaceLast(s2, { ...m, blocks });
}

const newTool = (id: string, name = ''): Extract<Block, { kind: 'tool' }> => ({
  kind: 'tool',
  id,
  name,
  args: '',
  result: '',
  images: [],
  state: 'calling',
});

/**
 * Folds a task helper's event into its group in the last assistant message: SUBAGENT_EXPOSED
 * opens a group; the helper's other events are folded into the newest group of their source
 * exactly as the main agent's events are folded into a message.
 */
function reduceHelper(s: ChatState, e: ChatEvent): ChatState {
  const source = e.source ?? '';
  // The event that opens a group names it, whatever its type (normally SUBAGENT_EXPOSED).
  const f: ChatEventFields = e;
  const [s2, m] = lastAssistant(s);
  let i = -1;
  if (e.type !== 'SUBAGENT_EXPOSED') {
    for (let j = m.blocks.length - 1; j >= 0; j--) {
      const b = m.blocks[j];
      if (b.kind === 'helper' && b.source === source) {
        i = j;
        break;
      }
    }
  }
  let group: HelperBlock =
    i >= 0
      ? (m.blocks[i] as HelperBlock)
      : {
          kind: 'helper',
          id: e.id || `helper-${m.blocks.length}`,
          name: f.name || source.slice(source.lastIndexOf('/') + 1) || 'helper',
          source,
          task: typeof f.metadata?.task === 'string' ? f.metadata.task : '',
          toolCallId: f.toolCallId ?? '',
          blocks: [],
          done: false,
        };
  if (e.type !== 'SUBAGENT_EXPOSED') {
    const inner = reduce(
      { messages: [{ id: group.id, role: 'assistant', name: group.name, blocks: group.blocks }], running: true, awaitingConfirm: false },
      { ...e, source: undefined },
    );
    group = { ...group, blocks: inner.messages[inner.messages.length - 1].blocks };
  }
  const blocks = m.blocks.slice();
  if (i >= 0) blocks[i] = group;
  else blocks.push(group);
  return replaceLast(s2, { ...m, blocks });
}

/** Folds one event into the state. Unknown types change nothing. */
export function reduce(s: ChatState, e: ChatEvent): ChatState {
  if (e.source && e.source.includes('/')) return reduceHelper(s, e);
  switch (e.type) {
    case 'AGENT_START': {
      const prev = s.messages[s.messages.length - 1];
      // In a group chat another member's turn is a message of its own.
      const other = prev?.role === 'assistant' && prev.agentId && e.agentId && prev.agentId !== e.agentId;
      const [s2, m] = lastAssistant(other ? { ...s, messages: [...s.messages, { id: `a-${s.messages.length}`, role: 'assistant', name: 'Agent', blocks: [] }] } : s, e.source);
      const replyIds = e.replyId ? [...(m.replyIds ?? []), e.replyId] : m.replyIds;
      return replaceLast(s2, { ...m, name: e.name || m.name, source: e.source, replyIds, agentId: e.agentId || m.agentId });
    }
    case 'THINKING_BLOCK_START':
    case 'THINKING_BLOCK_DELTA':
    case 'THINKING_BLOCK_END': {
      const id = e.blockId || 'thinking';
      return updateBlock(
        s,
        'thinking',
        id,
        () => ({ kind: 'thinking', id, text: '', done: false }),
        (b) => ({ ...b, text: b.text + (e.delta ?? ''), done: e.type === 'THINKING_BLOCK_END' }),
      );
    }
    case 'TEXT_BLOCK_START':
    case 'TEXT_BLOCK_DELTA':
    case 'TEXT_BLOCK_END': {
      const id = e.blockId || 'text';
      return updateBlock(
        s,
        'text',
        id,
        () => ({ kind: 'text', id, text: '', done: false }),
        (b) => ({ ...b, text: b.text + (e.delta ?? ''), done: e.type === 'TEXT_BLOCK_END' }),
      );
    }
    case 'TOOL_CALL_START':
    case 'TOOL_CALL_DELTA':
    case 'TOOL_CALL_END': {
      const id = e.toolCallId || 'tool';
      return updateBlock(
        s,
        'tool',
        id,
        () => newTool(id, e.toolCallName),
        (b) => ({ ...b, name: b.name || e.toolCallName || '', args: b.args + (e.delta ?? '') }),
      );
    }
    case 'TOOL_RESULT_START':
    case 'TOOL_RESULT_TEXT_DELTA':
    case 'TOOL_RESULT_DATA_DELTA':
    case 'TOOL_RESULT_END': {
      const id = e.toolCallId || 'tool';
      const st = updateBlock(
        s,
        'tool',
        id,
        () => newTool(id, e.toolCallName),
        (b) => {
          const next = { ...b, name: b.name || e.toolCallName || '' };
          if (e.type === 'TOOL_RESULT_START') next.state = 'running';
          if (e.type === 'TOOL_RESULT_TEXT_DELTA') next.result = b.result + (e.delta ?? '');
          if (e.type === 'TOOL_RESULT_DATA_DELTA' && e.data) {
            if (e.data.type === 'image' && e.data.data) {
              next.images = [...b.images, { mediaType: e.data.mediaType || 'image/png', data: e.data.data }];
            } else if (e.data.text) {
              next.result = b.result + e.data.text;
            }
          }
          if (e.type === 'TOOL_RESULT_END') next.state = e.state || 'success';
          return next;
        },
      );
      if (e.type !== 'TOOL_RESULT_END') return st;
      // The end of a task_helper call ends its helper's group.
      const [, m] = lastAssistant(st);
      if (!m.blocks.some((b) => b.kind === 'helper' && b.toolCallId === id && !b.done)) return st;
      return replaceLast(st, {
        ...m,
        blocks: m.blocks.map((b) => (b.kind === 'helper' && b.toolCallId === id ? { ...b, done: true } : b)),
      });
    }
    case 'REQUIRE_USER_CONFIRM': {
      const id = e.id || `confirm-${s.messages.length}`;
      const block: Block = { kind: 'confirm', id, toolCalls: e.toolCalls ?? [], answered: '' };
      if (e.reason) block.reason = e.reason; // why the guard or an MCP server's access policy asks
      const st = pushBlock(s, block);
      return { ...st, awaitingConfirm: true };
    }
    case 'USER_CONFIRM_RESULT': {
      // The server's record of the answer: mark open confirmation cards answered.
      const results = e.confirmResults ?? [];
      const allowed = results.length > 0 && results.every((r) => r.confirmed);
      const always = results.some((r) => (r.rules ?? []).length > 0);
      return {
        ...s,
        awaitingConfirm: false,
        messages: s.messages.map((m) => ({
          ...m,
          blocks: m.blocks.map((b) =>
            b.kind === 'confirm' && b.answered === ''
              ? { ...b, answered: allowed ? (always ? 'always' : 'allowed') : 'denied' }
              : b,
          ),
        })),
      };
    }
    case 'DATA_BLOCK_START':
    case 'DATA_BLOCK_DELTA':
    case 'DATA_BLOCK_END': {
      const id = e.blockId || 'data';
      return updateBlock(
        s,
        'data',
        id,
        () => ({ kind: 'data', id, name: '', mediaType: '', size: 0, data: '', done: false }),
        (b) => ({
          ...b,
          name: e.data?.name ?? b.name,
          mediaType: e.data?.mediaType ?? b.mediaType,
          size: e.data?.size ?? b.size,
          data: e.type === 'DATA_BLOCK_DELTA' ? b.data + (e.delta ?? '') : b.data,
          done: e.type === 'DATA_BLOCK_END',
        }),
      );
    }
    case 'REQUIRE_EXTERNAL_EXECUTION': {
      const call = e.toolCalls?.[0];
      const id = e.toolCallId || call?.id || 'external';
      const input = call?.input ?? {};
      const str = (v: unknown) => (typeof v === 'string' ? v : '');
      return pushBlock(s, {
        kind: 'external',
        id,
        name: e.toolCallName || call?.name || '',
        prompt: str(input.prompt),
        accept: str(input.accept),
        deadline: str(e.metadata?.deadline),
        state: 'waiting',
        detail: '',
      });
    }
    case 'EXTERNAL_EXECUTION_RESULT': {
      const id = e.toolCallId || 'external';
      const state = (['success', 'error', 'denied', 'interrupted'].includes(e.state ?? '') ? e.state : 'error') as ExternalBlock['state'];
      return updateBlock(
        s,
        'external',
        id,
        () => ({ kind: 'external', id, name: e.toolCallName || '', prompt: '', accept: '', deadline: '', state, detail: '' }),
        (b) => ({ ...b, state, detail: e.reason || (e.data?.name ? `${e.data.name} (${e.data.size ?? 0} bytes)` : '') }),
      );
    }
    case 'ALL_TOOLS_DENIED':
      return pushBlock(s, { kind: 'notice', id: e.id || 'denied', tone: 'warn', text: 'All tool calls were denied.' });
    case 'EXCEED_MAX_ITERS':
      return pushBlock(s, {
        kind: 'notice',
        id: e.id || 'iters',
        tone: 'warn',
        text: `Stopped after ${e.currentIter ?? e.maxIters ?? '?'} steps (the limit is ${e.maxIters ?? '?'}).`,
      });
    case 'REQUEST_STOP':
      // A pause for a confirmation shows as its card, not as a stop.
      if (e.generateReason === 'PERMISSION_ASKING') return s;
      if (e.generateReason === 'MODEL_STOP') {
        return pushBlock(s, { kind: 'notice', id: e.id || 'stop', tone: 'warn', text: `The model ended its reply early${e.reason ? `: ${e.reason}` : '.'}` });
      }
      return pushBlock(s, {
        kind: 'notice',
        id: e.id || 'stop',
        tone: 'info',
        text: `Stopped${e.reason ? `: ${e.reason}` : '.'}`,
      });
    case 'HINT_BLOCK':
      return e.delta ? pushBlock(s, { kind: 'notice', id: e.id || 'hint', tone: 'info', text: e.delta }) : s;
    case 'AGENT_RESULT': {
      // The final message: fill in text when no text blocks were streamed.
      const [s2, m] = lastAssistant(s);
      const hasText = m.blocks.some((b) => b.kind === 'text');
      const texts = (e.result?.content ?? []).filter((c) => c.type === 'text' && c.text);
      if (hasText || texts.length === 0) return s2;
      return replaceLast(s2, {
        ...m,
        blocks: [...m.blocks, ...texts.map((c, i) => ({ kind: 'text' as const, id: `r${i}`, text: c.text ?? '', done: true }))],
      });
    }
    case 'AGENT_END':
      return { ...s, running: false };
    default:
      return s;
  }
}

/**
 * Splits an SSE byte stream (already decoded to text) into `data:` payloads. Feed chunks;
 * it returns the complete events and keeps the rest.
 */
export class SSEParser {
  private buf = '';

  /** Adds a chunk and returns the data of every complete event in it. */
  push(chunk: string): string[] {
    this.buf += chunk.replace(/\r\n/g, '\n');
    const out: string[] = [];
    let i: number;
    while ((i = this.buf.indexOf('\n\n')) >= 0) {
      const raw = this.buf.slice(0, i);
      this.buf = this.buf.slice(i + 2);
      const data = raw
        .split('\n')
        .filter((l) => l.startsWith('data:'))
        .map((l) => l.slice(5).replace(/^ /, ''))
        .join('\n');
      if (data !== '') out.push(data);
    }
    return out;
  }
}

/** Turns a saved conversation into displayed messages. */
export function fromHistory(history: Msg[] | null | undefined): ChatMessage[] {
  const out: ChatMessage[] = [];
  const tools = new Map<string, Extract<Block, { kind: 'tool' }>>();
  for (const [mi, msg] of (history ?? []).entries()) {
    const blocks: Block[] = [];
    // A turn cut short by a restart (the server closes it with a message marked so).
    const interrupted = msg.metadata?.interrupted === true;
    for (const [bi, c] of (msg.content ?? []).entries()) {
      const id = `${mi}-${bi}`;
      switch (c.type) {
        case 'text':
          if (c.text && interrupted) blocks.push({ kind: 'notice', id, tone: 'warn', text: c.text });
          else if (c.text) blocks.push({ kind: 'text', id, text: c.text, done: true });
          break;
        case 'thinking':
          if (c.text) blocks.push({ kind: 'thinking', id, text: c.text, done: true });
          break;
        case 'image':
          if (c.data) {
            blocks.push({ ...newTool(id, 'image'), state: 'success', images: [{ mediaType: c.mediaType || 'image/png', data: c.data }] });
          }
          break;
        case 'tool_use': {
          const t = { ...newTool(c.toolCallId || id, c.name), args: c.input ? JSON.stringify(c.input) : '' };
          tools.set(t.id, t);
          blocks.push(t);
          break;
        }
        case 'tool_result': {
          for (const [fi, f] of (c.content ?? []).entries()) {
            if (f.type === 'file' && f.data) {
              blocks.push({ kind: 'data', id: `${id}-f${fi}`, name: f.name ?? 'file', mediaType: f.mediaType ?? '', size: f.size ?? 0, data: f.data, done: true });
            }
          }
          const t = tools.get(c.toolCallId || '');
          const result = (c.content ?? [])
            .filter((x) => x.type === 'text')
            .map((x) => x.text ?? '')
            .join('');
          const images = (c.content ?? [])
            .filter((x) => x.type === 'image' && x.data)
            .map((x) => ({ mediaType: x.mediaType || 'image/png', data: x.data ?? '' }));
          if (t) {
            t.result = result;
            t.images = images;
            t.state = c.state || 'success';
          } else {
            blocks.push({ ...newTool(c.toolCallId || id, c.name), result, images, state: c.state || 'success' });
          }
          break;
        }
      }
    }
    if (blocks.length === 0) continue;
    // Tool results come back as "user"/"tool" messages; show them with the agent.
    const isUser = msg.role === 'user' && !(msg.content ?? []).some((c) => c.type === 'tool_result');
    if (!isUser && out.length > 0 && out[out.length - 1].role === 'assistant') {
      out[out.length - 1].blocks.push(...blocks);
      if (msg.id) out[out.length - 1].replyIds = [...(out[out.length - 1].replyIds ?? []), msg.id];
      continue;
    }
    out.push({
      id: msg.id || `h${mi}`,
      role: isUser ? 'user' : 'assistant',
      name: isUser ? 'You' : msg.name || 'Agent',
      blocks,
      ...(isUser || !msg.id ? {} : { replyIds: [msg.id] }),
    });
  }
  return out;
}

/** The arguments of a tool call, pretty-printed when they are JSON. */
export function prettyArgs(args: string): string {
  if (args.trim() === '') return '';
  try {
    return JSON.stringify(JSON.parse(args), null, 2);
  } catch {
    return args;
  }
}

/** The rows of a CSV or TSV text (quotes and doubled quotes understood); at most max rows. */
export function parseTable(text: string, sep = ',', max = 200): string[][] {
  const rows: string[][] = [];
  let row: string[] = [];
  let cell = '';
  let quoted = false;
  for (let i = 0; i < text.length && rows.length < max; i++) {
    const ch = text[i];
    if (quoted) {
      if (ch === '"' && text[i + 1] === '"') {
        cell += '"';
        i++;
      } else if (ch === '"') quoted = false;
      else cell += ch;
    } else if (ch === '"' && cell === '') quoted = true;
    else if (ch === sep) {
      row.push(cell);
      cell = '';
    } else if (ch === '\n' || ch === '\r') {
      if (ch === '\r' && text[i + 1] === '\n') i++;
      row.push(cell);
      rows.push(row);
      row = [];
      cell = '';
    } else cell += ch;
  }
  if ((cell !== '' || row.length > 0) && rows.length < max) {
    row.push(cell);
    rows.push(row);
  }
  return rows;
}

/** Decodes base64 to bytes. */
export function fromBase64(b64: string): Uint8Array {
  const bin = atob(b64);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/** Encodes bytes as base64. */
export function toBase64(bytes: Uint8Array): string {
  let bin = '';
  for (let i = 0; i < bytes.length; i += 0x8000) bin += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(bin);
}

/** A short form of a tool's arguments for the block header. */
export function argsSummary(args: string, max = 80): string {
  let s = args;
  try {
    const v = JSON.parse(args) as unknown;
    if (v && typeof v === 'object') {
      s = Object.values(v as Record<string, unknown>)
        .map((x) => (typeof x === 'string' ? x : JSON.stringify(x)))
        .join(' ');
    }
  } catch {
    // not JSON yet (still streaming)
  }
  s = s.replace(/\s+/g, ' ').trim();
  return s.length > max ? `${s.slice(0, max - 1)}…` : s;
}

/** A new session id the server accepts (letters, digits, '-'). */
export function newSessionId(): string {
  return `s-${randomId()}`;
}

/** A random uuid-like id (crypto.randomUUID where available). */
export function randomId(): string {
  const c = globalThis.crypto as Crypto | undefined;
  if (c && typeof c.randomUUID === 'function') return c.randomUUID();
  const b = new Uint8Array(16);
  for (let i = 0; i < 16; i++) b[i] = Math.floor(Math.random() * 256);
  const h = Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

import { describe, expect, it } from 'vitest';
import {
  addUserMessage,
  argsSummary,
  emptyChat,
  endTurn,
  fromBase64,
  fromHistory,
  parseTable,
  toBase64,
  reduce,
  SSEParser,
  type Block,
  type ChatEvent,
  type ChatState,
} from './chat';

const run = (events: ChatEvent[], start: ChatState = addUserMessage(emptyChat, 'u1', 'hi')) =>
  events.reduce(reduce, start);

const blocksOf = (s: ChatState) => s.messages[s.messages.length - 1].blocks;

describe('reduce', () => {
  it('streams text into one block and ends the turn', () => {
    const s = run([
      { type: 'AGENT_START', name: 'Bob' },
      { type: 'TEXT_BLOCK_START', blockId: 'b1' },
      { type: 'TEXT_BLOCK_DELTA', blockId: 'b1', delta: 'Hel' },
      { type: 'TEXT_BLOCK_DELTA', blockId: 'b1', delta: 'lo' },
      { type: 'TEXT_BLOCK_END', blockId: 'b1' },
      { type: 'AGENT_RESULT', result: { id: 'r', name: 'Bob', role: 'assistant', content: [{ type: 'text', text: 'Hello' }] } },
      { type: 'AGENT_END' },
    ]);
    expect(s.running).toBe(false);
    expect(s.messages).toHaveLength(2);
    expect(s.messages[1].name).toBe('Bob');
    expect(blocksOf(s)).toEqual([{ kind: 'text', id: 'b1', text: 'Hello', done: true }]);
  });

  it('builds a tool block: name, streamed arguments, result text, image, state', () => {
    const s = run([
      { type: 'AGENT_START' },
      { type: 'TOOL_CALL_START', toolCallId: 't1', toolCallName: 'computer_shell' },
      { type: 'TOOL_CALL_DELTA', toolCallId: 't1', delta: '{"command":' },
      { type: 'TOOL_CALL_DELTA', toolCallId: 't1', delta: '"echo hi"}' },
      { type: 'TOOL_CALL_END', toolCallId: 't1' },
      { type: 'TOOL_RESULT_START', toolCallId: 't1', toolCallName: 'computer_shell' },
      { type: 'TOOL_RESULT_TEXT_DELTA', toolCallId: 't1', delta: 'hi\n' },
      { type: 'TOOL_RESULT_DATA_DELTA', toolCallId: 't1', data: { type: 'image', mediaType: 'image/jpeg', data: 'AAAA' } },
      { type: 'TOOL_RESULT_END', toolCallId: 't1', state: 'success' },
    ]);
    const [b] = blocksOf(s);
    expect(b).toMatchObject({
      kind: 'tool',
      id: 't1',
      name: 'computer_shell',
      args: '{"command":"echo hi"}',
      result: 'hi\n',
      state: 'success',
      images: [{ mediaType: 'image/jpeg', data: 'AAAA' }],
    });
    expect(argsSummary((b as Extract<Block, { kind: 'tool' }>).args)).toBe('echo hi');
  });

  it('keeps thinking separate from text and handles several tools in order', () => {
    const s = run([
      { type: 'THINKING_BLOCK_START', blockId: 'th' },
      { type: 'THINKING_BLOCK_DELTA', blockId: 'th', delta: 'hmm' },
      { type: 'THINKING_BLOCK_END', blockId: 'th' },
      { type: 'TOOL_CALL_START', toolCallId: 'a', toolCallName: 'x' },
      { type: 'TOOL_CALL_START', toolCallId: 'b', toolCallName: 'y' },
      { type: 'TOOL_RESULT_END', toolCallId: 'b', state: 'error' },
      { type: 'TOOL_RESULT_END', toolCallId: 'a', state: 'denied' },
    ]);
    expect(blocksOf(s).map((b) => [b.kind, b.id, b.kind === 'tool' ? b.state : ''])).toEqual([
      ['thinking', 'th', ''],
      ['tool', 'a', 'denied'],
      ['tool', 'b', 'error'],
    ]);
  });

  it('shows a confirmation card and marks it answered from USER_CONFIRM_RESULT', () => {
    const tc = { id: 't9', name: 'computer_shell', input: { command: 'rm -rf /' } };
    let s = run([{ type: 'REQUIRE_USER_CONFIRM', id: 'c1', toolCalls: [tc] }, { type: 'AGENT_END' }]);
    expect(s.awaitingConfirm).toBe(true);
    expect(blocksOf(s)).toEqual([{ kind: 'confirm', id: 'c1', toolCalls: [tc], answered: '' }]);
    const why = run([{ type: 'REQUIRE_USER_CONFIRM', id: 'c2', toolCalls: [tc], reason: 'computer_shell: MCP server "fs": the access policy asks' }]);
    expect(blocksOf(why)).toEqual([{ kind: 'confirm', id: 'c2', toolCalls: [tc], answered: '', reason: 'computer_shell: MCP server "fs": the access policy asks' }]);
    s = reduce(s, { type: 'USER_CONFIRM_RESULT', confirmResults: [{ confirmed: true, toolCall: tc, rules: ['computer_shell:rm *'] }] });
    expect(s.awaitingConfirm).toBe(false);
    expect(blocksOf(s)[0]).toMatchObject({ answered: 'always' });
  });

  it.each([
    ['deny', [{ confirmed: false }], 'denied'],
    ['allow once', [{ confirmed: true }], 'allowed'],
  ])('confirmation answer %s', (_n, results, want) => {
    const tc = { id: 't', name: 'n', input: null };
    let s = run([{ type: 'REQUIRE_USER_CONFIRM', id: 'c', toolCalls: [tc] }]);
    s = reduce(s, { type: 'USER_CONFIRM_RESULT', confirmResults: results.map((r) => ({ ...r, toolCall: tc })) });
    expect(blocksOf(s)[0]).toMatchObject({ answered: want });
  });

  it('uses the final result when no text was streamed, tolerates unknown types', () => {
    const s = run([
      { type: 'SOMETHING_NEW' } as unknown as ChatEvent, // a newer server's type
      { type: 'CUSTOM', value: 1 },
      { type: 'AGENT_RESULT', result: { id: 'r', name: 'a', role: 'assistant', content: [{ type: 'text', text: 'Done.' }] } },
    ]);
    expect(blocksOf(s)).toEqual([{ kind: 'text', id: 'r0', text: 'Done.', done: true }]);
  });

  it('notices for stop, max iterations and all tools denied', () => {
    const s = run([
      { type: 'REQUEST_STOP', reason: 'user asked' },
      { type: 'EXCEED_MAX_ITERS', maxIters: 5, currentIter: 5 },
      { type: 'ALL_TOOLS_DENIED' },
    ]);
    expect(blocksOf(s).map((b) => (b.kind === 'notice' ? b.text : ''))).toEqual([
      'Stopped: user asked',
      'Stopped after 5 steps (the limit is 5).',
      'All tool calls were denied.',
    ]);
  });

  it('stop reasons: a string enum, a confirmation pause shows no stop, old booleans still work', () => {
    const s = run([
      { type: 'REQUEST_STOP', reason: 'waiting', generateReason: 'PERMISSION_ASKING' },
      { type: 'REQUEST_STOP', reason: 'the model stopped its reply (length)', generateReason: 'MODEL_STOP' },
      { type: 'REQUEST_STOP', reason: 'stopped by the person', generateReason: 'USER_INTERRUPTED' },
      { type: 'REQUEST_STOP', reason: 'old server', generateReason: false },
    ]);
    expect(blocksOf(s).map((b) => (b.kind === 'notice' ? `${b.tone}:${b.text}` : ''))).toEqual([
      'warn:The model ended its reply early: the model stopped its reply (length)',
      'info:Stopped: stopped by the person',
      'info:Stopped: old server',
    ]);
  });

  it('data blocks: a file arrives in pieces, with its type and size', () => {
    const s = run([
      { type: 'DATA_BLOCK_START', blockId: 'd1', toolCallId: 't', data: { type: 'file', name: 'r.csv', mediaType: 'text/csv', size: 8 } },
      { type: 'DATA_BLOCK_DELTA', blockId: 'd1', delta: btoa('a,b\n') },
      { type: 'DATA_BLOCK_DELTA', blockId: 'd1', delta: btoa('1,2\n') },
      { type: 'DATA_BLOCK_END', blockId: 'd1' },
    ]);
    const b = blocksOf(s)[0];
    expect(b).toMatchObject({ kind: 'data', name: 'r.csv', mediaType: 'text/csv', size: 8, done: true });
    if (b.kind !== 'data') throw new Error('not data');
    expect(new TextDecoder().decode(fromBase64(b.data.slice(0, 8))) + new TextDecoder().decode(fromBase64(b.data.slice(8)))).toBe('a,b\n1,2\n');
    expect(parseTable('a,b\n"x, y","say ""hi"""\n')).toEqual([
      ['a', 'b'],
      ['x, y', 'say "hi"'],
    ]);
  });

  it('external execution: a card waits for the person, the result closes it', () => {
    let s = run([
      {
        type: 'REQUIRE_EXTERNAL_EXECUTION',
        toolCallId: 'p1',
        toolCallName: 'client_pick_file',
        toolCalls: [{ id: 'p1', name: 'client_pick_file', input: { prompt: 'the report', accept: '.csv' } }],
        metadata: { deadline: '2026-12-02T15:00:00Z' },
      },
    ]);
    expect(blocksOf(s)[0]).toMatchObject({ kind: 'external', id: 'p1', prompt: 'the report', accept: '.csv', state: 'waiting' });
    s = reduce(s, { type: 'EXTERNAL_EXECUTION_RESULT', toolCallId: 'p1', state: 'error', reason: 'nobody answered within 5s' });
    expect(blocksOf(s)[0]).toMatchObject({ kind: 'external', state: 'error', detail: 'nobody answered within 5s' });
    expect(toBase64(new Uint8Array([0, 255, 1]))).toBe('AP8B');
  });

  it('endTurn marks cut-off tools interrupted and adds the error', () => {
    let s = run([{ type: 'TOOL_CALL_START', toolCallId: 't', toolCallName: 'x' }]);
    s = endTurn(s, 'network down');
    expect(s.running).toBe(false);
    expect(blocksOf(s)).toMatchObject([
      { kind: 'tool', state: 'interrupted' },
      { kind: 'notice', tone: 'error', text: 'network down' },
    ]);
  });
});

describe('task helpers', () => {
  const src = 'main/researcher';
  const helperTurn: ChatEvent[] = [
    { type: 'AGENT_START', name: 'Ada' },
    { type: 'TOOL_CALL_START', toolCallId: 'm1', toolCallName: 'task_helper' },
    { type: 'TOOL_CALL_DELTA', toolCallId: 'm1', delta: '{"name":"researcher","task":"count files"}' },
    { type: 'TOOL_CALL_END', toolCallId: 'm1' },
    { type: 'TOOL_RESULT_START', toolCallId: 'm1', toolCallName: 'task_helper' },
    { type: 'SUBAGENT_EXPOSED', id: 'x1', source: src, name: 'researcher', toolCallId: 'm1', metadata: { task: 'count files' } },
    { type: 'MODEL_CALL_START', source: src },
    { type: 'TOOL_CALL_START', source: src, toolCallId: 'h1', toolCallName: 'computer_shell' },
    { type: 'TOOL_CALL_DELTA', source: src, toolCallId: 'h1', delta: '{"command":"ls | wc -l"}' },
    { type: 'TOOL_RESULT_START', source: src, toolCallId: 'h1', toolCallName: 'computer_shell' },
    { type: 'TOOL_RESULT_TEXT_DELTA', source: src, toolCallId: 'h1', delta: '42' },
    { type: 'TOOL_RESULT_END', source: src, toolCallId: 'h1', state: 'success' },
    { type: 'TEXT_BLOCK_START', source: src, blockId: 'ht' },
    { type: 'TEXT_BLOCK_DELTA', source: src, blockId: 'ht', delta: '42 files' },
    { type: 'TEXT_BLOCK_END', source: src, blockId: 'ht' },
  ];

  it("groups a helper's events under its header, apart from the main agent's blocks", () => {
    const s = run([
      ...helperTurn,
      { type: 'TOOL_RESULT_TEXT_DELTA', toolCallId: 'm1', delta: '42 files' },
      { type: 'TOOL_RESULT_END', toolCallId: 'm1', state: 'success' },
      { type: 'TEXT_BLOCK_START', blockId: 'mt' },
      { type: 'TEXT_BLOCK_DELTA', blockId: 'mt', delta: 'The helper counted 42.' },
      { type: 'TEXT_BLOCK_END', blockId: 'mt' },
      { type: 'AGENT_END' },
    ]);
    expect(s.messages).toHaveLength(2);
    const blocks = blocksOf(s);
    expect(blocks.map((b) => b.kind)).toEqual(['tool', 'helper', 'text']);
    expect(blocks[0]).toMatchObject({ kind: 'tool', id: 'm1', name: 'task_helper', result: '42 files', state: 'success' });
    expect(blocks[1]).toMatchObject({
      kind: 'helper',
      name: 'researcher',
      source: src,
      task: 'count files',
      toolCallId: 'm1',
      done: true,
      blocks: [
        { kind: 'tool', id: 'h1', name: 'computer_shell', result: '42', state: 'success' },
        { kind: 'text', id: 'ht', text: '42 files', done: true },
      ],
    });
    expect(blocks[2]).toMatchObject({ kind: 'text', text: 'The helper counted 42.' });
  });

  it('keeps two helpers of one name apart and cuts an unfinished helper off at the end of the turn', () => {
    const again = helperTurn.map((e) => (e.type === 'SUBAGENT_EXPOSED' ? { ...e, id: 'x2', toolCallId: 'm2' } : e)).slice(5);
    const s = endTurn(run([...helperTurn, { type: 'TOOL_RESULT_END', toolCallId: 'm1', state: 'success' }, ...again.slice(0, 4)]));
    const helpers = blocksOf(s).filter((b) => b.kind === 'helper');
    expect(helpers).toHaveLength(2);
    expect(helpers[0]).toMatchObject({ id: 'x1', done: true });
    expect(helpers[1]).toMatchObject({ id: 'x2', done: true, blocks: [{ kind: 'tool', id: 'h1', state: 'interrupted' }] });
  });
});

describe('SSEParser', () => {
  it('splits events across chunk boundaries', () => {
    const p = new SSEParser();
    expect(p.push('data: {"type":"A"}\n\ndata: {"ty')).toEqual(['{"type":"A"}']);
    expect(p.push('pe":"B"}\r\n\r\n: comment\n\n')).toEqual(['{"type":"B"}']);
    expect(p.push('data: x\ndata: y\n\n')).toEqual(['x\ny']);
  });
});

describe('fromHistory', () => {
  it('rebuilds user and agent messages with tool results and images', () => {
    const msgs = fromHistory([
      { id: 'm1', name: 'user', role: 'user', content: [{ type: 'text', text: '/shell echo hi' }] },
      {
        id: 'm2',
        name: 'Bob',
        role: 'assistant',
        content: [{ type: 'tool_use', toolCallId: 't1', name: 'computer_shell', input: { command: 'echo hi' } }],
      },
      {
        id: 'm3',
        name: 'tool',
        role: 'user',
        content: [
          {
            type: 'tool_result',
            toolCallId: 't1',
            state: 'error',
            content: [
              { type: 'text', text: 'no desktop' },
              { type: 'image', mediaType: 'image/png', data: 'QQ==' },
            ],
          },
        ],
      },
      { id: 'm4', name: 'Bob', role: 'assistant', content: [{ type: 'text', text: 'failed' }] },
    ]);
    expect(msgs.map((m) => m.role)).toEqual(['user', 'assistant']);
    expect(msgs[1].blocks).toMatchObject([
      { kind: 'tool', name: 'computer_shell', result: 'no desktop', state: 'error', images: [{ data: 'QQ==' }] },
      { kind: 'text', text: 'failed' },
    ]);
    expect(fromHistory(null)).toEqual([]);
    // The agent message carries the ids of the replies it shows (the chat's undo names one).
    expect(msgs[1].replyIds).toEqual(['m2', 'm4']);
    expect(msgs[0].replyIds).toBeUndefined();
  });

  it('keeps the reply id a streamed turn announces', () => {
    const s = reduce(emptyChat, { type: 'AGENT_START', name: 'Bob', replyId: 'r1' });
    expect(s.messages[s.messages.length - 1].replyIds).toEqual(['r1']);
  });

  it('shows a turn a restart interrupted as a warning, its cut-off tool as interrupted', () => {
    const msgs = fromHistory([
      { id: 'm1', name: 'u', role: 'user', content: [{ type: 'text', text: '/shell sleep 60' }] },
      { id: 'm2', name: 'Bob', role: 'assistant', content: [{ type: 'tool_use', toolCallId: 't1', name: 'computer_shell' }] },
      {
        id: 'm3',
        name: 'tools',
        role: 'user',
        content: [{ type: 'tool_result', toolCallId: 't1', state: 'interrupted', content: [{ type: 'text', text: 'Interrupted' }] }],
      },
      {
        id: 'm4',
        name: 'Cubicle',
        role: 'assistant',
        metadata: { interrupted: true },
        content: [{ type: 'text', text: 'This turn was interrupted' }],
      },
    ]);
    expect(msgs.map((m) => m.role)).toEqual(['user', 'assistant']);
    expect(msgs[0].blocks).toMatchObject([{ kind: 'text', text: '/shell sleep 60' }]);
    expect(msgs[1].blocks).toMatchObject([
      { kind: 'tool', name: 'computer_shell', state: 'interrupted' },
      { kind: 'notice', tone: 'warn', text: 'This turn was interrupted' },
    ]);
  });
});

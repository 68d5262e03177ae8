import { describe, expect, it } from 'vitest';
import type { GroupMember } from './api';
import { emptyChat, reduce, type ChatEvent } from './chat';
import { addressTo, fromEntries, initial } from './groupchat';
import { hrefFor, parseRoute } from './router';

const members: GroupMember[] = [
  { agentId: 'a1', name: 'Ada', sessionId: 'g-1.a1' },
  { agentId: 'b1', name: 'Ada Two', sessionId: 'g-1.b1' },
  { agentId: 'c1', name: '', sessionId: 'g-1.c1', missing: true },
];

describe('group chats', () => {
  it('folds the transcript into messages named by member', () => {
    const msgs = fromEntries(
      [
        { seq: 1, role: 'user', agentId: 'a1', text: 'hi', at: '' },
        { seq: 2, role: 'assistant', agentId: 'a1', name: 'Ada', text: 'hello', replyId: 'r1', at: '' },
        { seq: 3, role: 'assistant', agentId: 'c1', text: 'failed', error: true, at: '' },
      ],
      members,
    );
    expect(msgs.map((m) => [m.role, m.name, m.agentId])).toEqual([
      ['user', 'You', 'a1'],
      ['assistant', 'Ada', 'a1'],
      ['assistant', 'A deleted agent', 'c1'],
    ]);
    expect(msgs[1].replyIds).toEqual(['r1']);
    expect(msgs[2].blocks[0]).toMatchObject({ kind: 'notice', tone: 'error' });
    expect(fromEntries(null, members)).toEqual([]);
  });

  it('puts an address at the start, replacing the one there', () => {
    expect(addressTo('do it', 'Ada', members)).toBe('@Ada do it');
    expect(addressTo('@ada two do it', 'Ada', members)).toBe('@Ada do it');
    expect(addressTo('  @Ada do it', 'Ada Two', members)).toBe('@Ada Two do it');
    expect(initial(' bob')).toBe('B');
    expect(initial('')).toBe('?');
  });

  it("starts a new message when another member's turn starts", () => {
    const start = (agentId: string, name: string): ChatEvent => ({ type: 'AGENT_START', id: agentId, createdAt: '', agentId, name, role: 'assistant' });
    let s = reduce({ ...emptyChat, messages: fromEntries([{ seq: 2, role: 'assistant', agentId: 'a1', name: 'Ada', text: 'x', at: '' }], members) }, start('b1', 'Ada Two'));
    expect(s.messages.map((m) => m.agentId)).toEqual(['a1', 'b1']);
    s = reduce(s, start('b1', 'Ada Two'));
    expect(s.messages).toHaveLength(2);
  });

  it('routes #/groups/<id>', () => {
    expect(parseRoute('#/groups/g-0a1b')).toEqual({ name: 'group', id: 'g-0a1b' });
    expect(hrefFor({ name: 'group', id: 'g 1' })).toBe('#/groups/g%201');
    expect(parseRoute('#/groups').name).toBe('not-found');
  });
});

// Group chats in the UI: the transcript folded into chat messages, the members' names. Pure
// functions only, tested without a browser. Who a message goes to is the server's decision
// (backend/groupchat Pick); the UI only offers @name chips and shows who acted.

import type { GroupEntry, GroupMember } from './api';
import type { ChatMessage } from './chat';

/** The transcript as chat messages: the person's messages and each member's answer, by name. */
export function fromEntries(entries: GroupEntry[] | null | undefined, members: GroupMember[]): ChatMessage[] {
  const names = new Map(members.map((m) => [m.agentId, m.name || 'A deleted agent']));
  return (entries ?? []).map((e) => {
    const id = `g${e.seq}`;
    if (e.role === 'user') {
      return { id, role: 'user', name: 'You', agentId: e.agentId, blocks: [{ kind: 'text', id, text: e.text, done: true }] };
    }
    return {
      id,
      role: 'assistant',
      name: e.name || names.get(e.agentId) || 'Agent',
      agentId: e.agentId,
      replyIds: e.replyId ? [e.replyId] : undefined,
      blocks: [e.error ? { kind: 'notice', id, tone: 'error', text: e.text } : { kind: 'text', id, text: e.text, done: true }],
    };
  });
}

/** The text with `@name ` put at its start (replacing an address already there). */
export function addressTo(text: string, name: string, members: GroupMember[]): string {
  let rest = text.trimStart();
  for (const m of [...members].sort((a, b) => b.name.length - a.name.length)) {
    if (m.name !== '' && rest.toLowerCase().startsWith(`@${m.name.toLowerCase()}`)) {
      rest = rest.slice(m.name.length + 1).trimStart();
      break;
    }
  }
  return `@${name} ${rest}`;
}

/** The first letter of a name, for an avatar. */
export function initial(name: string): string {
  return (name.trim().slice(0, 1) || '?').toUpperCase();
}

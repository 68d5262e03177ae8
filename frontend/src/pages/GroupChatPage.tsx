// A group chat (docs/group-chats.md): the person and several agents. The transcript shows
// each agent's messages under its name; a message goes to the member it addresses (@name, or
// the chips above the composer) or to whose turn it is — the server decides and every event
// of the turn names the acting member. The computer panel shows the acting member's desktop,
// with a member picker (avatars and each desktop's state); on phones the Computer button opens
// the picker as a sheet. Each member's desktop is its own: taking over one leaves the others
// working.

import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiError, type Agent, type Client, type GroupMember, type GroupTranscript, type User } from '../api';
import { addUserMessage, emptyChat, endTurn, reduce, type ChatState, type ConfirmResult, type ToolCall } from '../chat';
import { computerLabel } from '../computer';
import { AgentSidebar } from '../components/AgentSidebar';
import { ComputerPanel } from '../components/ComputerPanel';
import { useAgentVM, unreachable } from '../components/DesktopActions';
import { DualDesktop, InteractiveDesktop, MobileComputer } from '../components/DesktopViews';
import { MessageList } from '../components/MessageList';
import { messageFor } from '../errors';
import { addressTo, fromEntries, initial } from '../groupchat';
import { useEvents, useTitle } from '../hooks';
import { stateLabel, stateTone } from '../settings/vmtext';
import { initialPanelOpen, panelKey, usePhone } from './ChatPage';

interface GroupChatPageProps {
  client: Client;
  chatId: string;
  user: User;
}

/** The page of one group chat. */
export function GroupChatPage({ client, chatId, user }: GroupChatPageProps) {
  const [tr, setTr] = useState<GroupTranscript | null>(null);
  const [loadError, setLoadError] = useState<{ message: string; notFound: boolean } | null>(null);
  const [agents, setAgents] = useState<Agent[] | null>(null);
  const [listError, setListError] = useState('');
  const [chat, setChat] = useState<ChatState>(emptyChat);
  const [input, setInput] = useState('');
  const [sendError, setSendError] = useState('');
  // acting: the member whose turn runs (or ran last); selected: whose computer the panel shows.
  const [acting, setActing] = useState('');
  const [selected, setSelected] = useState('');
  const [panelOpen, setPanelOpen] = useState(initialPanelOpen);
  const [drawerOpen, setDrawerOpen] = useState(false);
  const [mainView, setMainView] = useState<'chat' | 'desktop' | 'dual'>('chat');
  const [deskAgent, setDeskAgent] = useState('');
  const [sheetOpen, setSheetOpen] = useState(false);
  const [mobileAgent, setMobileAgent] = useState('');
  const [stopping, setStopping] = useState(false);
  const abort = useRef<AbortController | null>(null);
  const chatRef = useRef(chat);
  chatRef.current = chat;
  const seq = useRef(0);
  const phone = usePhone();
  useTitle(tr?.chat.title ?? 'Group chat');

  useEffect(() => {
    let live = true;
    client.groupChat(chatId).then(
      (t) => {
        if (!live) return;
        setTr(t);
        setChat({ ...emptyChat, messages: fromEntries(t.entries, t.chat.members) });
        const first = t.chat.lastAgentId || t.chat.members[0]?.agentId || '';
        setActing(first);
        setSelected(first);
      },
      (err) => live && setLoadError({ message: messageFor(err), notFound: err instanceof ApiError && err.status === 404 }),
    );
    client.listAgents().then(
      (list) => live && setAgents(list),
      (err) => live && setListError(messageFor(err)),
    );
    return () => {
      live = false;
      abort.current?.abort();
    };
  }, [client, chatId]);

  useEvents((e) => {
    if (e.type === 'agent.changed') client.listAgents().then(setAgents, () => undefined);
  });

  const members: GroupMember[] = tr?.chat.members ?? [];
  const agentOf = (id: string) => agents?.find((a) => a.id === id) ?? null;
  const memberAgents = members.map((m) => agentOf(m.agentId)).filter((a): a is Agent => a !== null);
  const selAgent = agentOf(selected);
  const sessionOf = (id: string) => members.find((m) => m.agentId === id)?.sessionId ?? '';

  const refresh = () => client.groupChat(chatId).then(setTr, () => undefined);

  const send = async (text: string, confirmResults?: ConfirmResult[], to?: string) => {
    if (chatRef.current.running) return;
    const ac = new AbortController();
    abort.current = ac;
    setStopping(false);
    setSendError('');
    seq.current++;
    setChat((s) => (text !== '' ? addUserMessage(s, `u${seq.current}-${Date.now()}`, text) : { ...s, running: true }));
    let failure: string | undefined;
    try {
      await client.groupChatSend(
        { chatId, message: text, to, confirmResults },
        (e) => {
          if (e.type === 'AGENT_START' && e.agentId) {
            // The panel follows the member who acts.
            setActing(e.agentId);
            setSelected(e.agentId);
          }
          setChat((s) => reduce(s, e));
        },
        ac.signal,
      );
    } catch (err) {
      if (!ac.signal.aborted) failure = messageFor(err);
    } finally {
      if (abort.current === ac) abort.current = null;
      setChat((s) => endTurn(s, failure));
      setStopping(false);
      void refresh();
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
      await client.stopChat(sessionOf(acting));
    } catch (err) {
      setSendError(messageFor(err));
    }
  };

  const answer = (calls: ToolCall[], how: 'once' | 'always' | 'deny') => {
    const results: ConfirmResult[] = calls.map((c) => ({
      confirmed: how !== 'deny',
      toolCall: { id: c.id, name: c.name, input: c.input },
      ...(how === 'always' ? { rules: ['exact'] } : {}),
    }));
    void send('', results, acting);
  };

  const togglePanel = () => {
    if (phone) {
      setSheetOpen(!sheetOpen);
      return;
    }
    const next = !panelOpen;
    setPanelOpen(next);
    try {
      window.localStorage.setItem(panelKey, next ? '1' : '0');
    } catch {
      // Not remembered; fine.
    }
  };

  const updateAgent = (a: Agent) => setAgents((list) => list && list.map((x) => (x.id === a.id ? a : x)));
  const picker = (variant: 'row' | 'sheet', onPick: (id: string) => void) => (
    <MemberPicker
      client={client}
      members={members}
      agents={memberAgents}
      selected={variant === 'row' ? selected : ''}
      acting={chat.running ? acting : ''}
      variant={variant}
      onPick={onPick}
    />
  );
  const classes = ['chat-layout', panelOpen && !phone ? 'panel-open' : '', drawerOpen ? 'drawer-open' : ''].join(' ');
  const deskOpen = agentOf(deskAgent);
  const mobile = agentOf(mobileAgent);

  return (
    <div class={classes}>
      <AgentSidebar
        agents={agents}
        activeId=""
        error={listError}
        onNavigate={() => setDrawerOpen(false)}
        client={client}
        activeGroupId={chatId}
      />
      {drawerOpen && <div class="scrim" onClick={() => setDrawerOpen(false)} aria-hidden="true" />}

      <main class="chat group-chat" aria-label="Group chat" data-acting={acting}>
        <header class="chat-head">
          <button
            class="btn ghost small icon drawer-toggle"
            type="button"
            aria-label="Show agents"
            aria-expanded={drawerOpen}
            aria-controls="agent-sidebar"
            onClick={() => setDrawerOpen(!drawerOpen)}
          >
            ☰
          </button>
          <h1 class="chat-title" id="chat-title">
            {tr?.chat.title ?? (loadError ? 'Group chat' : 'Loading…')}
          </h1>
          <span class="group-avatars" aria-label="Members">
            {members.map((m) => (
              <span class="agent-avatar small" key={m.agentId} title={m.name || 'deleted agent'}>
                {initial(m.name)}
              </span>
            ))}
          </span>
          <button
            id="computer-toggle"
            class={`btn small${panelOpen && !phone ? ' primary' : ''}`}
            type="button"
            aria-expanded={phone ? sheetOpen : panelOpen}
            aria-controls={phone ? 'member-sheet' : 'computer-panel'}
            onClick={togglePanel}
            disabled={!tr}
            title="Show or hide the members' computers"
          >
            <svg viewBox="0 0 32 32" width="16" height="16" aria-hidden="true">
              <rect x="3" y="5" width="26" height="18" rx="3" fill="none" stroke="currentColor" stroke-width="3" />
              <rect x="11" y="25" width="10" height="3" rx="1" fill="currentColor" />
            </svg>
            <span>Computer</span>
          </button>
        </header>

        {loadError ? (
          <div class="notice error chat-error" role="alert">
            <p>{loadError.notFound ? 'This group chat does not exist (or is not yours).' : loadError.message}</p>
            <a class="btn small" href="#/agents">
              Back to agents
            </a>
          </div>
        ) : mainView === 'desktop' && deskOpen ? (
          <InteractiveDesktop client={client} agent={deskOpen} onClose={() => setMainView('chat')} />
        ) : mainView === 'dual' && memberAgents.length > 0 ? (
          <DualDesktop client={client} agents={memberAgents} agentId={selected} onClose={() => setMainView('chat')} />
        ) : (
          <>
            <MessageList
              agentName={tr ? members.map((m) => m.name).join(', ') : 'the group'}
              state={chat}
              loading={tr === null}
              onAnswer={answer}
              onExample={(t) => setInput(t)}
              avatars
            />
            <form class="composer" onSubmit={submit}>
              <div class="address-chips" aria-label="Address a member">
                {members
                  .filter((m) => !m.missing)
                  .map((m) => (
                    <button
                      key={m.agentId}
                      type="button"
                      class="btn ghost small chip"
                      data-agent={m.agentId}
                      onClick={() => setInput((t) => addressTo(t, m.name, members))}
                      title={`Address ${m.name}`}
                    >
                      @{m.name}
                    </button>
                  ))}
              </div>
              <textarea
                id="chat-input"
                rows={2}
                value={input}
                placeholder="Message the group… (@name addresses one; otherwise they take turns)"
                onInput={(e) => setInput(e.currentTarget.value)}
                onKeyDown={(e) => {
                  if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) submit(e);
                }}
                disabled={!tr || user.id === ''}
              />
              {chat.running ? (
                <button class="btn danger" type="button" id="chat-stop" onClick={() => void stop()} disabled={stopping}>
                  {stopping ? 'Stopping…' : 'Stop'}
                </button>
              ) : (
                <button class="btn primary" type="submit" id="chat-send" disabled={!tr || input.trim() === ''}>
                  Send
                </button>
              )}
              <p class="muted small composer-note" id="chat-note">
                {sendError !== ''
                  ? sendError
                  : chat.awaitingConfirm
                    ? 'An agent is waiting for your answer above.'
                    : 'Enter sends. Without an @name the next member in turn answers; a member waiting for your answer gets it.'}
              </p>
            </form>
          </>
        )}
      </main>

      {panelOpen && !phone && selAgent && (
        <ComputerPanel
          key={selAgent.id}
          client={client}
          agent={selAgent}
          admin={user.role === 'admin'}
          onAgent={updateAgent}
          onClose={togglePanel}
          onOpenDesktop={() => {
            setDeskAgent(selAgent.id);
            setMainView('desktop');
          }}
          onOpenDual={() => setMainView('dual')}
          desktopOpen={(mainView === 'desktop' && deskAgent === selAgent.id) || mainView === 'dual'}
          picker={picker('row', setSelected)}
        />
      )}
      {phone && sheetOpen && (
        <div class="member-sheet" id="member-sheet" role="dialog" aria-label="Pick a member's computer">
          <div class="sheet-head">
            <strong>Whose computer?</strong>
            <button class="btn ghost small" type="button" id="member-sheet-close" aria-label="Close" onClick={() => setSheetOpen(false)}>
              ✕
            </button>
          </div>
          {picker('sheet', (id) => {
            setSheetOpen(false);
            setMobileAgent(id);
          })}
        </div>
      )}
      {phone && mobile && <MobileComputer client={client} agent={mobile} onClose={() => setMobileAgent('')} />}
    </div>
  );
}

interface MemberPickerProps {
  client: Client;
  members: GroupMember[];
  agents: Agent[];
  selected: string;
  acting: string;
  variant: 'row' | 'sheet';
  onPick: (agentId: string) => void;
}

/** The members' avatars with each desktop's state: a row in the panel, a list in the phone's sheet. */
function MemberPicker({ client, members, agents, selected, acting, variant, onPick }: MemberPickerProps) {
  return (
    <div class={`member-picker ${variant}`} id={variant === 'row' ? 'member-picker' : 'member-sheet-list'} role="group" aria-label="Members' computers">
      {members.map((m) => {
        const a = agents.find((x) => x.id === m.agentId);
        if (!a) {
          return (
            <span class="member-chip missing" key={m.agentId} data-agent={m.agentId}>
              <span class="agent-avatar small">?</span>
              <span class="member-text">
                <span class="member-name">Deleted agent</span>
              </span>
            </span>
          );
        }
        return (
          <button
            key={a.id}
            type="button"
            class={`member-chip${a.id === selected ? ' selected' : ''}${a.id === acting ? ' acting' : ''}`}
            data-agent={a.id}
            aria-pressed={variant === 'row' ? a.id === selected : undefined}
            onClick={() => onPick(a.id)}
            title={`${a.name}'s computer`}
          >
            <span class="agent-avatar small" aria-hidden="true">
              {initial(a.name)}
            </span>
            <span class="member-text">
              <span class="member-name">{a.name}</span>
              {a.computer === 'vm' || a.computer === 'auto' ? (
                <VMStateBadge client={client} agentId={a.id} />
              ) : (
                <span class="badge">{computerLabel(a.computer)}</span>
              )}
            </span>
            {a.id === acting && <span class="acting-dot" title="Acting now" aria-label="acting now" />}
          </button>
        );
      })}
    </div>
  );
}

/** One member's desktop state (it follows the event stream). */
function VMStateBadge({ client, agentId }: { client: Client; agentId: string }) {
  const vm = useAgentVM(client, agentId);
  const state = vm.data && unreachable(vm.data) ? 'unreachable' : vm.data?.desktop.state || 'absent';
  return (
    <span class={`badge ${stateTone(state)} member-state`} data-state={state}>
      {stateLabel(state)}
    </span>
  );
}

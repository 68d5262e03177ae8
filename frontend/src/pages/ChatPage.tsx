// An agent's chat: agent sidebar, the conversation (or a desktop view in the main area), and
// the computer panel on the right. On phones the Computer button opens the full-screen view.

import { useEffect, useState } from 'preact/hooks';
import { ApiError, type Agent, type Client, type User } from '../api';
import { AgentSidebar } from '../components/AgentSidebar';
import { ComputerPanel } from '../components/ComputerPanel';
import { Conversation } from '../components/Conversation';
import { DualDesktop, InteractiveDesktop, MobileComputer } from '../components/DesktopViews';
import { PastRuns } from '../components/PastRuns';
import { messageFor } from '../errors';
import { useEvents, useTitle } from '../hooks';

interface ChatPageProps {
  client: Client;
  agentId: string;
  user: User;
}

/** Where the computer panel's open state is remembered. */
export const panelKey = 'cubicle.computerPanelOpen';

/** Whether the computer panel starts open (remembered per browser; open on wide screens). */
export function initialPanelOpen(): boolean {
  try {
    const saved = window.localStorage.getItem(panelKey);
    if (saved === '1') return true;
    if (saved === '0') return false;
  } catch {
    // Storage may be unavailable; fall through to the default.
  }
  return window.matchMedia('(min-width: 1000px)').matches;
}

const phoneQuery = '(max-width: 640px)';

/** Whether the window is phone-sized. */
export function usePhone(): boolean {
  const [phone, setPhone] = useState(() => window.matchMedia(phoneQuery).matches);
  useEffect(() => {
    const mq = window.matchMedia(phoneQuery);
    const on = () => setPhone(mq.matches);
    mq.addEventListener('change', on);
    return () => mq.removeEventListener('change', on);
  }, []);
  return phone;
}

/** The chat page of one agent. */
export function ChatPage({ client, agentId, user }: ChatPageProps) {
  const [agent, setAgent] = useState<Agent | null>(null);
  const [agentError, setAgentError] = useState<{ message: string; notFound: boolean } | null>(null);
  const [agents, setAgents] = useState<Agent[] | null>(null);
  const [listError, setListError] = useState('');
  const [panelOpen, setPanelOpen] = useState(initialPanelOpen);
  const [drawerOpen, setDrawerOpen] = useState(false);
  const [mainView, setMainView] = useState<'chat' | 'desktop' | 'dual'>('chat');
  const [mobileOpen, setMobileOpen] = useState(false);
  const [pastOpen, setPastOpen] = useState(false);
  const phone = usePhone();
  useTitle(agent?.name ?? 'Chat');

  useEffect(() => {
    let live = true;
    // Anticipatory start: the server starts the agent's desktop now if its next turn would use
    // one and a slot is free, so it is usually ready by the first message. Not waited for; the
    // desktop's state arrives through the event stream like any other change.
    client.agentOpened(agentId).catch(() => undefined);
    client.getAgent(agentId).then(
      (a) => live && setAgent(a),
      (err) =>
        live &&
        setAgentError({
          message: messageFor(err),
          notFound: err instanceof ApiError && err.status === 404,
        }),
    );
    client.listAgents().then(
      (list) => live && setAgents(list),
      (err) => live && setListError(messageFor(err)),
    );
    return () => {
      live = false;
    };
  }, [client, agentId]);

  // The agent and the list follow changes made elsewhere (another window, a computer change).
  useEvents((e) => {
    if (e.type !== 'agent.changed') return;
    client.listAgents().then(setAgents, () => undefined);
    if (e.data.agentId !== agentId) return;
    if (e.data.change === 'deleted') setAgentError({ message: 'This agent was deleted.', notFound: true });
    else client.getAgent(agentId).then(setAgent, () => undefined);
  });

  const togglePanel = () => {
    if (phone) {
      setMobileOpen(!mobileOpen);
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

  const updateAgent = (a: Agent) => {
    setAgent(a);
    setAgents((list) => list && list.map((x) => (x.id === a.id ? a : x)));
  };

  const classes = ['chat-layout', panelOpen && !phone ? 'panel-open' : '', drawerOpen ? 'drawer-open' : ''].join(' ');

  return (
    <div class={classes}>
      <AgentSidebar agents={agents} activeId={agentId} error={listError} onNavigate={() => setDrawerOpen(false)} client={client} />
      {drawerOpen && <div class="scrim" onClick={() => setDrawerOpen(false)} aria-hidden="true" />}

      <main class="chat" aria-label="Chat">
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
            {agent?.name ?? (agentError ? 'Agent' : 'Loading…')}
          </h1>
          <button
            id="past-runs-toggle"
            class={`btn small${pastOpen ? ' primary' : ''}`}
            type="button"
            aria-expanded={pastOpen}
            aria-controls="past-runs"
            onClick={() => setPastOpen(!pastOpen)}
            title="Search what your agents did before"
          >
            Past runs
          </button>
          <button
            id="computer-toggle"
            class={`btn small${panelOpen && !phone ? ' primary' : ''}`}
            type="button"
            aria-expanded={phone ? mobileOpen : panelOpen}
            aria-controls="computer-panel"
            onClick={togglePanel}
            disabled={!agent}
            title="Show or hide the computer panel"
          >
            <svg viewBox="0 0 32 32" width="16" height="16" aria-hidden="true">
              <rect x="3" y="5" width="26" height="18" rx="3" fill="none" stroke="currentColor" stroke-width="3" />
              <rect x="11" y="25" width="10" height="3" rx="1" fill="currentColor" />
            </svg>
            <span>Computer</span>
          </button>
        </header>
        {pastOpen && <PastRuns client={client} onClose={() => setPastOpen(false)} />}

        {agentError ? (
          <div class="notice error chat-error" role="alert">
            <p>{agentError.notFound ? 'This agent does not exist (it may have been deleted).' : agentError.message}</p>
            <a class="btn small" href="#/agents">
              Back to agents
            </a>
          </div>
        ) : mainView === 'desktop' && agent ? (
          <InteractiveDesktop client={client} agent={agent} onClose={() => setMainView('chat')} />
        ) : mainView === 'dual' && agent ? (
          <DualDesktop client={client} agents={agents ?? [agent]} agentId={agent.id} onClose={() => setMainView('chat')} />
        ) : (
          <Conversation
            client={client}
            agent={agent}
            agentId={agentId}
            userId={user.id}
            onOpenComputer={() => {
              if (phone ? !mobileOpen : !panelOpen) togglePanel();
            }}
          />
        )}
      </main>

      {panelOpen && !phone && agent && (
        <ComputerPanel
          client={client}
          agent={agent}
          admin={user.role === 'admin'}
          onAgent={updateAgent}
          onClose={togglePanel}
          onOpenDesktop={() => setMainView('desktop')}
          onOpenDual={() => setMainView('dual')}
          desktopOpen={mainView !== 'chat'}
        />
      )}
      {phone && mobileOpen && agent && <MobileComputer client={client} agent={agent} onClose={() => setMobileOpen(false)} />}
    </div>
  );
}
